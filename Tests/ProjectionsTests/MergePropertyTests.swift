import Domain
import Foundation
import TestSupport
import GRDB
import Testing
@testable import EventLog
@testable import Projections

/// For random event sets from several origins, every arrival order with random duplicates
/// projects to identical tables, and the rebuild path equals incremental application.
@Suite struct MergePropertyTests {
    static func randomEvents(seed: UInt64) -> [Event] {
        var rng = SplitMix64(seed: seed)
        func pick<T>(_ a: [T]) -> T { a[Int(rng.next() % UInt64(a.count))] }
        let items = (0..<6).map { _ in UUID() }
        let tags = (0..<3).map { _ in UUID() }
        let links = (0..<4).map { _ in UUID() }
        let dates = ["2026-03-01", "2026-03-08"]
        var f = EventFactory()
        var clocks: [ReplicaID: UInt64] = [originA: 0, originB: 0, originC: 0]
        var out: [Event] = []
        for _ in 0..<(40 + Int(rng.next() % 80)) {
            let o = pick([originA, originB, originC])
            // Clocks overlap across origins, with ties, so tie-breaking by origin is exercised.
            clocks[o]! += 1 + rng.next() % 3
            let t = hlc(clocks[o]! * 10)
            let base: UInt64? = rng.next() % 3 == 0 ? nil : hlc((clocks[o]! - min(clocks[o]!, rng.next() % 6)) * 10)
            let kind = rng.next() % 12
            let e: Event
            if kind < 6 {
                let op = pick([Op.create, .update, .update, .update, .delete, .restore])
                var fields: [Field] = []
                if op == .create || op == .update {
                    for name in ["title", "notes", "status", "sort_order", "parent_id"] where rng.next() % 3 == 0 {
                        switch name {
                        case "sort_order": fields.append(Field(name, rng.next() % 2 == 0 ? .integer(Int64(rng.next() % 100)) : .real(Double(rng.next() % 100) / 4)))
                        case "parent_id": fields.append(Field(name, rng.next() % 4 == 0 ? .null : .text(pick(items).lowercasedString)))
                        default: fields.append(Field(name, rng.next() % 5 == 0 ? .null : .text("\(name) \(rng.next() % 7)")))
                        }
                    }
                    if rng.next() % 8 == 0 { fields.append(Field("energy", .integer(Int64(rng.next() % 5)))) }
                }
                e = f.make(o, hlc: t, .item, op, pick(items), fields.sorted { $0.name < $1.name }, base: base)
            } else if kind < 7 {
                e = f.make(o, hlc: t, .tag, pick([.create, .update, .delete]), pick(tags), [Field("name", .text("tag \(rng.next() % 4)"))], base: base)
            } else if kind < 8 {
                let i = pick(items), g = pick(tags)
                e = f.make(o, hlc: t, .itemTag, pick([.create, .create, .delete, .restore]), FieldRules.itemTagID(item: i, tag: g),
                           [Field("item_id", .text(i.lowercasedString)), Field("tag_id", .text(g.lowercasedString))], base: base)
            } else if kind == 10 {
                // Links between items, with cycles; from and to fixed by the create.
                let id = pick(links)
                var fields: [Field] = []
                let op = pick([Op.create, .update, .delete, .restore])
                if op == .create { fields = [Field("from_id", .text(pick(items).lowercasedString)), Field("to_id", .text(pick(items).lowercasedString))] }
                if op != .delete && rng.next() % 2 == 0 { fields.append(Field("kind", .text(pick(["LINK", "SEQUENCE"])))) }
                if op == .update { fields.append(Field("weight", .real(Double(rng.next() % 8) / 2))) }
                e = f.make(o, hlc: t, .link, op, id, fields.sorted { $0.name < $1.name }, base: base)
            } else if kind == 11 {
                // A newer build's events: an entity and an op this build does not know, and an item
                // event of a later schema version with a field code it does not know.
                switch rng.next() % 3 {
                case 0: e = f.make(o, hlc: t, Entity(rawValue: 42), .create, pick(items), [Field("title", .text("x"))], base: base)
                case 1: e = f.make(o, hlc: t, .item, Op(rawValue: 9), pick(items), [Field("title", .text("moved"))], base: base)
                default:
                    var n = f.make(o, hlc: t, .item, .update, pick(items), [Field("#200", .integer(1)), Field("title", .text("v9 \(rng.next() % 3)"))], base: base)
                    n.schemaVersion = 9
                    e = n
                }
            } else {
                let entity = pick([Entity.completion, .recurrenceException])
                let d = pick(dates)
                var fields = [Field("item_id", .text(items[0].lowercasedString)), Field("original_occurrence_date", .text(d))]
                if entity == .recurrenceException { fields.append(Field("kind", .text(pick(["skip", "reschedule"])))) }
                e = f.make(o, hlc: t, entity, pick([.create, .create, .update, .delete]), FieldRules.occurrenceID(entity, item: items[0], originalDate: d),
                           fields.sorted { $0.name < $1.name }, base: base)
            }
            out.append(e)
        }
        return out
    }

    @Test(arguments: 0..<25)
    func anyArrivalOrderWithDuplicatesGivesTheSameTables(seed: Int) throws {
        let events = Self.randomEvents(seed: UInt64(seed) &* 7919 &+ 17)
        let dir = TempDir()
        // Reference: the rebuild path over the events in log order.
        let (_, reference) = try makeProjection(dir, name: "ref")
        try reference.applyFresh(events)
        let expected = try reference.canonicalDump()
        #expect(expected.count > 7)

        var rng = SplitMix64(seed: UInt64(seed) + 1000)
        for trial in 0..<4 {
            var arrival = events.shuffled(using: &rng)
            // Redeliver some events, anywhere.
            for _ in 0..<(events.count / 4) { arrival.insert(events[Int(rng.next() % UInt64(events.count))], at: Int(rng.next() % UInt64(arrival.count + 1))) }
            let (_, p) = try makeProjection(dir, name: "t\(trial)")
            // Incremental application in chunks of random size (each chunk its own transaction).
            var i = 0
            while i < arrival.count {
                let n = 1 + Int(rng.next() % 9)
                try p.apply(Array(arrival[i..<min(i + n, arrival.count)]))
                i += n
            }
            let got = try p.canonicalDump()
            if got != expected {
                let first = zip(got, expected).first { $0 != $1 }
                Issue.record("seed \(seed) trial \(trial): first difference \(String(describing: first))")
            }
        }
    }

    /// Edits of two items' title and notes from three origins, each either on a stale base (a
    /// conflict when another origin wrote since) or having seen every event before it (a
    /// resolution of the conflicts open on that field).
    static func concurrentEdits(seed: UInt64) -> [Event] {
        var rng = SplitMix64(seed: seed &* 31 &+ 5)
        func pick<T>(_ a: [T]) -> T { a[Int(rng.next() % UInt64(a.count))] }
        let items = (0..<2).map { _ in UUID() }
        var f = EventFactory()
        var out = items.enumerated().map { f.make(originA, hlc: hlc(UInt64($0.offset) + 1), .item, .create, $0.element, [Field("title", .text("t"))]) }
        var t: UInt64 = 1
        for _ in 0..<60 {
            t += 1 + rng.next() % 2
            let base = rng.next() % 4 == 0 ? hlc((t - 1) * 10) : hlc(max(1, t - min(t, 2 + rng.next() % 6)) * 10)
            var fields = [Field(pick(["title", "notes"]), .text("v\(rng.next() % 4)"))]
            if rng.next() % 3 == 0 { fields.append(Field(fields[0].name == "title" ? "notes" : "title", .text("w\(rng.next() % 3)"))) }
            out.append(f.make(pick([originA, originB, originC]), hlc: hlc(t * 10), .item, .update, pick(items), fields.sorted { $0.name < $1.name }, base: base))
        }
        return out
    }

    /// A rebuild records the same conflicts and resolutions as incremental application in the
    /// same order (a replica's log order), whatever the flushes between: a resolving write met
    /// before or after the flush that found its conflict settles it alike.
    @Test(arguments: 0..<25)
    func conflictsAndResolutionsOfARebuildEqualIncrementalOnes(seed: Int) throws {
        var rng = SplitMix64(seed: UInt64(seed) + 3000)
        for events in [Self.randomEvents(seed: UInt64(seed) &* 7919 &+ 17), Self.concurrentEdits(seed: UInt64(seed))] {
            try sameConflicts(events.shuffled(using: &rng), seed: seed, rng: &rng)
        }
    }

    func sameConflicts(_ arrival: [Event], seed: Int, rng: inout SplitMix64) throws {
        let dir = TempDir()
        func conflicts(_ p: Projection) throws -> [String] {
            try p.conflicts(includeResolved: true).map {
                "\($0.entity) \($0.entityID) \($0.field) won by \($0.winnerEventID) \($0.winnerValue) over \($0.loserEventID) \($0.loserValue), resolved by \($0.resolvedBy ?? "-")"
            }.sorted()
        }
        let (_, fresh) = try makeProjection(dir, name: "fresh")
        try fresh.applyFresh(arrival)
        let expected = try conflicts(fresh)
        for trial in 0..<3 {
            let (_, p) = try makeProjection(dir, name: "t\(trial)")
            var i = 0
            while i < arrival.count {
                let n = 1 + Int(rng.next() % UInt64(1 + 6 * trial))
                try p.apply(Array(arrival[i..<min(i + n, arrival.count)]))
                i += n
            }
            let got = try conflicts(p)
            #expect(got == expected, "seed \(seed) trial \(trial): \(got.count) conflicts incrementally, \(expected.count) rebuilt")
        }
    }

    /// The lifecycle rule as a property: whether each entity ends deleted is decided by its latest
    /// create, delete or restore in merge order (hlc, origin, seq); a create counts as a restore.
    @Test(arguments: 0..<25)
    func theLatestCreateDeleteOrRestoreDecidesWhetherAnEntityIsDeleted(seed: Int) throws {
        let events = Self.randomEvents(seed: UInt64(seed) &* 7919 &+ 17)
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var rng = SplitMix64(seed: UInt64(seed) + 77)
        try p.apply(events.shuffled(using: &rng))
        var latest: [UUID: Event] = [:]
        for e in events where e.op != .update && e.entity.isKnown && e.op.isKnown {  // a newer build's entity or op is not applied
            if let l = latest[e.entityID], (l.hlc.rawValue, l.origin.description, l.seq.rawValue) >= (e.hlc.rawValue, e.origin.description, e.seq.rawValue) { continue }
            latest[e.entityID] = e
        }
        for (id, e) in latest {
            let table = ProjectionSchema.current.table(for: e.entity)!.name
            let deletedAt = try p.database.read { db in
                try Row.fetchOne(db, sql: "SELECT deleted_at FROM \(table) WHERE id = ?", arguments: [id.lowercasedString])?["deleted_at"] as String?
            }
            #expect((deletedAt != nil) == (e.op == .delete), "seed \(seed): \(e.entity) \(id) ends with \(e.op)")
        }
    }

    /// Rebuilding from a real log equals applying it incrementally as it was appended.
    @Test func rebuildFromTheLogEqualsIncremental() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender(store: store, wallClock: ManualClock())
        let projection = try Projection(store: store)
        var lines = SampleWorkload(seed: 3, count: 5000).makeIterator()
        var n = 0
        while n < 5000 {
            var batch: [Mutation] = []
            for _ in 0..<(1 + n % 250) {
                guard let l = lines.next() else { break }
                n += 1
                batch.append(try MutationParser.parse(l, lineNumber: n))
            }
            if batch.isEmpty { break }
            _ = try appender.append(batch)
            try projection.catchUp()
        }
        try appender.close()
        let incremental = try projection.canonicalDump()
        try projection.close()
        try Projection.rebuild(store: store)
        let rebuilt = try Projection(store: store).canonicalDump()
        #expect(incremental == rebuilt)
        #expect(incremental.count > 1000)
    }
}
