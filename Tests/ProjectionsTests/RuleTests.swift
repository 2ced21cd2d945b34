import Domain
import Foundation
import TestSupport
import GRDB
import Testing
@testable import EventLog
@testable import Projections

/// One test per merge rule of DESIGN.md, and the seeds' test lists where they apply.
@Suite struct RuleTests {
    let item = UUID(uuidString: "11111111-1111-4111-8111-111111111111")!
    let parent = UUID(uuidString: "22222222-2222-4222-8222-222222222222")!
    let tag = UUID(uuidString: "33333333-3333-4333-8333-333333333333")!

    func row(_ p: Projection, _ id: UUID) throws -> Row? { try row(p, "items", id) }

    func row(_ p: Projection, _ table: String, _ id: UUID) throws -> Row? {
        try p.database.read { db in try Row.fetchOne(db, sql: "SELECT * FROM \(table) WHERE id = ?", arguments: [id.lowercasedString]) }
    }

    /// `base` is filled from the projection: an entity's version where it has a row, zero where
    /// it has none, whether its table holds other rows or none at all (an empty table is
    /// answered by one probe), and a base the author gave is kept.
    @Test func basesAreFilledFromRowsAndZeroWhereNoneIs() throws {
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var f = EventFactory()
        try p.apply([f.make(originA, hlc: hlc(5), .item, .create, item, [Field("title", text("Buy milk"))])])
        let other = UUID()
        var ms = [
            Mutation(entity: .item, op: .update, entityID: item, fields: [Field("title", text("Buy oat milk"))]),
            Mutation(entity: .item, op: .update, entityID: other, fields: [Field("title", text("none yet"))]),
            Mutation(entity: .tag, op: .update, entityID: tag, fields: [Field("name", text("home"))]),
            Mutation(entity: .item, op: .update, entityID: item, fields: [], base: HLC(rawValue: hlc(2))),
        ]
        try p.fillBases(&ms)
        #expect(ms.map { $0.base?.rawValue } == [hlc(5), 0, 0, hlc(2)])
        try p.apply([f.make(originA, hlc: hlc(7), .tag, .create, tag, [Field("name", text("home"))])])
        var again = [Mutation(entity: .tag, op: .update, entityID: tag, fields: [Field("name", text("work"))])]
        try p.fillBases(&again)
        #expect(again[0].base?.rawValue == hlc(7))
    }

    @Test func concurrentEditsOfDifferentFieldsBothSurvive() throws {
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var f = EventFactory()
        let create = f.make(originA, hlc: hlc(1), .item, .create, item, [Field("title", text("Buy milk"))])
        let a = f.make(originA, hlc: hlc(10), .item, .update, item, [Field("title", text("Buy oat milk"))], base: hlc(1))
        let b = f.make(originB, hlc: hlc(11), .item, .update, item, [Field("notes", text("2 litres"))], base: hlc(1))
        try p.apply([create, b, a])
        let r = try #require(try row(p, item))
        #expect(r["title"] as String? == "Buy oat milk" && r["notes"] as String? == "2 litres")
        #expect(try p.conflicts().isEmpty)
    }

    @Test func concurrentEditsOfOneFieldRecordAConflictAndResolve() throws {
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var f = EventFactory()
        let create = f.make(originA, hlc: hlc(1), .item, .create, item, [Field("title", text("Buy milk"))])
        let a = f.make(originA, hlc: hlc(10), .item, .update, item, [Field("title", text("A's title"))], base: hlc(1))
        let b = f.make(originB, hlc: hlc(12), .item, .update, item, [Field("title", text("B's title"))], base: hlc(1))
        try p.apply([create, a, b])
        #expect(try row(p, item)?["title"] as String? == "B's title")
        let c = try #require(try p.conflicts().first)
        #expect(c.field == "title" && c.winnerValue == "\"B's title\"" && c.loserValue == "\"A's title\"")
        #expect(c.winnerOrigin == originB.description && c.loserOrigin == originA.description)
        #expect(c.winnerEventID == b.eventID.lowercasedString && c.loserEventID == a.eventID.lowercasedString)
        // An edit by an author who saw both values settles it (the manual override).
        let keep = f.make(originA, hlc: hlc(20), .item, .update, item, [Field("title", text("A's title"))], base: hlc(12))
        try p.apply([keep])
        #expect(try row(p, item)?["title"] as String? == "A's title")
        #expect(try p.conflicts().isEmpty)
        #expect(try p.conflicts(includeResolved: true).first?.resolvedBy == keep.eventID.lowercasedString)
        // A later edit by someone who had seen the value is no conflict at all.
        try p.apply([f.make(originB, hlc: hlc(30), .item, .update, item, [Field("title", text("seen"))], base: hlc(20))])
        #expect(try p.conflicts(includeResolved: true).count == 1)
    }

    @Test func deleteIsNotUndoneByALaterUpdateAndRestoreIs() throws {
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var f = EventFactory()
        let create = f.make(originA, hlc: hlc(1), .item, .create, item, [Field("title", text("x"))])
        let delete = f.make(originB, hlc: hlc(5), .item, .delete, item)
        let update = f.make(originA, hlc: hlc(9), .item, .update, item, [Field("notes", text("later edit"))])
        try p.apply([create, update, delete])
        var r = try #require(try row(p, item))
        #expect(r["deleted_at"] as String? != nil && r["notes"] as String? == "later edit")
        #expect(try p.items().isEmpty)
        #expect(try p.items(includeDeleted: true).count == 1)
        let restore = f.make(originB, hlc: hlc(12), .item, .restore, item)
        try p.apply([restore])
        r = try #require(try row(p, item))
        #expect(r["deleted_at"] as String? == nil)
        // A delete older than the restore, arriving late, changes nothing.
        let lateDelete = f.make(originC, hlc: hlc(11), .item, .delete, item)
        try p.apply([lateDelete])
        #expect(try row(p, item)?["deleted_at"] as String? == nil)
    }

    /// Issue 11 §4: a create asserts existence and takes part in the delete/restore lifecycle by
    /// (hlc, origin, seq): untag then tag again leaves the pair tagged; delete then re-insert the
    /// same id brings the row back; a create older than the delete does not. In every order, and
    /// a rebuild agrees.
    @Test func aCreateAfterADeleteBringsTheEntityBack() throws {
        var f = EventFactory()
        let pair = FieldRules.itemTagID(item: item, tag: tag)
        let pairFields = [Field("item_id", text(item.lowercasedString)), Field("tag_id", text(tag.lowercasedString))]
        let tagged = f.make(originA, hlc: hlc(1), .itemTag, .create, pair, pairFields)
        let untagged = f.make(originA, hlc: hlc(2), .itemTag, .delete, pair)
        let taggedAgain = f.make(originB, hlc: hlc(3), .itemTag, .create, pair, pairFields)
        let created = f.make(originA, hlc: hlc(4), .item, .create, item, [Field("title", text("one"))])
        let deleted = f.make(originA, hlc: hlc(6), .item, .delete, item)
        let staleCreate = f.make(originB, hlc: hlc(5), .item, .create, item, [Field("title", text("two"))])
        let events = [tagged, untagged, taggedAgain, created, deleted, staleCreate]
        var results: [[String?]] = []
        for order in [events, events.reversed(), [taggedAgain, deleted, tagged, staleCreate, untagged, created]] {
            let dir = TempDir()
            let (_, p) = try makeProjection(dir)
            for e in order { try p.apply([e]) }
            results.append([try row(p, "item_tags", pair)?["deleted_at"] as String?, try row(p, item)?["deleted_at"] as String?])
            let reference = try makeProjection(dir, name: "ref").1
            try reference.applyFresh(order)
            #expect(try reference.canonicalDump() == p.canonicalDump())
        }
        #expect(results.allSatisfy { $0 == results[0] })
        #expect(results[0][0] == nil, "tagged again after untagging: the pair is tagged")
        #expect(results[0][1] != nil, "a create older than the delete does not bring the item back")

        // And a re-insert newer than the delete does.
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        try p.apply([created, deleted, f.make(originB, hlc: hlc(7), .item, .create, item, [Field("title", text("three"))])])
        #expect(try row(p, item)?["deleted_at"] as String? == nil)
        #expect(try row(p, item)?["title"] as String? == "three")
    }

    /// A peer's item_tag event whose fields name another pair than its id is not applied to the
    /// pair columns (the log keeps it); a peer's uppercase UUID is projected lowercase.
    @Test func aForeignPairIsNotAppliedAndUUIDsAreProjectedLowercase() throws {
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var f = EventFactory()
        let pair = FieldRules.itemTagID(item: item, tag: tag)
        let other = UUID()
        try p.apply([
            f.make(originA, hlc: hlc(1), .itemTag, .create, pair, [Field("item_id", text(item.lowercasedString)), Field("tag_id", text(tag.lowercasedString))]),
            f.make(originB, hlc: hlc(2), .itemTag, .update, pair, [Field("item_id", text(item.lowercasedString)), Field("tag_id", text(other.lowercasedString))]),
            f.make(originB, hlc: hlc(3), .item, .create, item, [Field("parent_id", text(parent.uuidString))]),
        ])
        #expect(try row(p, "item_tags", pair)?["tag_id"] as String? == tag.lowercasedString)
        #expect(try row(p, item)?["parent_id"] as String? == parent.lowercasedString)
        try p.apply([f.make(originA, hlc: hlc(4), .item, .create, parent, [Field("title", text("parent"))])])
        #expect(try p.items(under: parent.uuidString).map(\.id) == [parent, item].map(\.lowercasedString))
    }

    /// A peer's bad events give the same tables whether projected the rebuild's way (fields placed
    /// on the reading thread, pair ids hashed there, values moved into rows) or one at a time:
    /// a pair named by another item_tag's fields, uppercase UUIDs, values of the wrong type,
    /// fields no column holds, and an event of a newer schema version.
    @Test func aPeersBadEventsProjectAlikeRebuiltAndOneByOne() throws {
        let other = UUID(uuidString: "44444444-4444-4444-8444-444444444444")!
        let tag2 = UUID(uuidString: "55555555-5555-4555-8555-555555555555")!
        let pair = FieldRules.itemTagID(item: item, tag: tag), pair2 = FieldRules.itemTagID(item: item, tag: tag2)
        let frames = EvolutionTests.peerFrames([
            (.itemTag, .create, pair, [Field("item_id", text(item.lowercasedString)), Field("tag_id", text(tag.lowercasedString))], 2),
            (.itemTag, .update, pair, [Field("item_id", text(item.lowercasedString)), Field("tag_id", text(other.lowercasedString))], 2),
            (.itemTag, .update, pair, [Field("item_id", text(item.lowercasedString))], 2),
            (.itemTag, .create, pair2, [Field("item_id", text(item.uuidString)), Field("tag_id", text(tag2.uuidString))], 2),
            (.itemTag, .update, pair2, [Field("item_id", .integer(7))], 2),
            (.itemTag, .update, pair2, [Field("item_id", text(other.uuidString)), Field("tag_id", text(tag2.lowercasedString))], 2),
            (.item, .create, item, [Field("parent_id", text(parent.uuidString)), Field("sort_order", text("abc")), Field("title", .integer(5))], 2),
            (.item, .update, item, [Field("title", text("kept")), Field("zz_extra", text("no column"))], 2),
            (.item, .update, item, [Field("notes", text("from a newer build")), Field("title", text("newer"))], 9),
        ])
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender.opening(store)
        _ = try appender.receive(frames)
        try appender.close()
        let caughtUp = try Projection(store: store)
        try caughtUp.catchUp()  // an empty projection is filled the rebuild's way
        let first = try caughtUp.canonicalDump()
        try caughtUp.close()
        try Projection.rebuild(store: store)
        let rebuilt = try Projection(store: store)
        #expect(try rebuilt.canonicalDump() == first)
        #expect(try row(rebuilt, "item_tags", pair)?["tag_id"] as String? == tag.lowercasedString)
        #expect(try row(rebuilt, "item_tags", pair2)?["item_id"] as String? == item.lowercasedString)
        let r = try #require(try row(rebuilt, item))
        #expect(r["parent_id"] as String? == parent.lowercasedString && r["title"] as String? == "newer" && r["sort_order"] as Int64? == nil)
        try rebuilt.close()

        var events: [Event] = []
        try LogReader(store: store).forEachEvent(origin: EvolutionTests.peer, from: Seq(1)) { events.append($0); return true }
        #expect(events.count == 9)
        let (_, oneByOne) = try makeProjection(dir, name: "one")
        for e in events { try oneByOne.apply([e]) }
        #expect(try oneByOne.canonicalDump() == first)
    }

    /// Entity ids come from peers. Ids crafted so that their two halves XOR to one word (or that
    /// differ only where the table is folded in) must not share a hash: a dictionary of a
    /// rebuild's rows keyed by them would turn quadratic (hash flooding).
    @Test func rowKeysCraftedToCollideDoNotShareAHash() {
        func id(_ a: UInt64, _ b: UInt64) -> UUID {
            var bytes = [UInt8](repeating: 0, count: 16)
            withUnsafeBytes(of: a) { bytes.replaceSubrange(0..<8, with: $0) }
            withUnsafeBytes(of: b) { bytes.replaceSubrange(8..<16, with: $0) }
            return bytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
        }
        var sameFold = Set<Int>(), sameFirstWord = Set<Int>()
        for i in 0..<1000 {
            let a = UInt64(i) &* 0x9E37_79B9_7F4A_7C15
            sameFold.insert(Projector.Key(table: 1, id: id(a, a ^ 0x0123_4567_89AB_CDEF)).hashValue)
            sameFirstWord.insert(Projector.Key(table: i % 8, id: id(7, UInt64(i % 8))).hashValue)
        }
        #expect(sameFold.count > 990)
        #expect(sameFirstWord.count == 8)  // eight distinct keys, eight hashes
    }

    /// Seed 004: an event id seen again on another event with another payload is a sync anomaly,
    /// whatever the order the two arrive in; the same payload under two positions is not; both
    /// events are applied as the events they are.
    @Test func anEventIDReusedForAnotherPayloadIsASyncAnomaly() throws {
        let id = UUID(uuidString: "e0e0e0e0-0000-4000-8000-000000000001")!
        func events() -> [Event] {
            var f = EventFactory()
            var a = f.make(originA, hlc: hlc(1), .item, .create, item, [Field("title", text("from a"))])
            var b = f.make(originB, hlc: hlc(2), .item, .create, parent, [Field("title", text("from b"))])
            var c = f.make(originC, hlc: hlc(3), .item, .create, item, [Field("title", text("from a"))], base: hlc(1))  // same payload as a
            a.explicitEventID = id; b.explicitEventID = id; c.explicitEventID = id
            return [a, b, c]
        }
        var found: [[String]] = []
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
            let dir = TempDir()
            let (store, p) = try makeProjection(dir)
            let e = events()
            for i in order { try p.apply([e[i]]) }
            let rows = try p.anomalies().filter { $0.kind == "event_id_reused" }
            found.append(rows.map { "\($0.entityID) \($0.details ?? "")" })
            #expect(rows.count == 1 && rows[0].entityID == parent.lowercasedString && rows[0].eventID == id.lowercasedString)
            #expect(try row(p, parent)?["title"] as String? == "from b" && (try row(p, item)?["title"] as String?) == "from a")
            _ = store
        }
        #expect(Set(found.map { $0.joined() }).count == 1, "the anomaly reads the same in every arrival order")
    }

    /// A peer's value of the wrong type for its column (input is checked on the way in, a peer's
    /// frames are not re-checked field by field) is not applied: the log keeps it, the column
    /// keeps its last good value, and every query still reads the table.
    @Test func aValueOfTheWrongTypeFromAPeerIsNotApplied() throws {
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var f = EventFactory()
        try p.apply([
            f.make(originA, hlc: hlc(1), .item, .create, item, [Field("title", text("ok")), Field("sort_order", .integer(3)), Field("priority", .integer(2))]),
            f.make(originB, hlc: hlc(2), .item, .update, item, [Field("sort_order", text("abc")), Field("priority", text("high")),
                                                               Field("title", .integer(5)), Field("latitude", .real(48.85))]),
        ])
        let items = try p.items()
        #expect(items.count == 1)
        #expect(items[0].title == "ok" && items[0].sortOrder == 3 && items[0].priority == 2 && items[0].latitude == 48.85)
    }

    /// A conflict resolved by a later write that saw both sides stays resolved after a rebuild
    /// (the rebuild used to clear `resolved_by`).
    @Test func aResolutionSurvivesARebuild() throws {
        let dir = TempDir()
        let (store, p) = try makeProjection(dir)
        var f = EventFactory()
        let create = f.make(originA, hlc: hlc(1), .item, .create, item, [Field("title", text("x"))])
        let a = f.make(originA, hlc: hlc(3), .item, .update, item, [Field("title", text("a"))], base: hlc(1))
        let b = f.make(originB, hlc: hlc(4), .item, .update, item, [Field("title", text("b"))], base: hlc(1))
        let resolve = f.make(originA, hlc: hlc(5), .item, .update, item, [Field("title", text("a"))], base: hlc(4))
        try p.apply([create, a, b])
        #expect(try p.conflicts().count == 1)
        try p.apply([resolve])
        #expect(try p.conflicts().isEmpty)
        let resolved = try #require(try p.conflicts(includeResolved: true).first)
        #expect(resolved.resolvedBy == resolve.eventID.lowercasedString)

        let reference = try makeProjection(dir, name: "ref").1
        try reference.applyFresh([create, a, b, resolve])
        #expect(try reference.conflicts().isEmpty)
        #expect(try reference.conflicts(includeResolved: true).first?.resolvedBy == resolve.eventID.lowercasedString)
        _ = store
    }

    /// A peer's event may carry any 64-bit base and clock: the log keeps it as written, and the
    /// projection records and resolves conflicts with them, clamped to what SQLite's integers
    /// hold, instead of trapping on the conversion (which stopped every replica that projected
    /// the event, at every start). Applied live and in a rebuild.
    @Test func aBaseOrClockPastInt64MaxIsClampedNotATrap() throws {
        let dir = TempDir()
        let (store, p) = try makeProjection(dir)
        var f = EventFactory()
        let create = f.make(originA, hlc: hlc(1), .item, .create, item, [Field("title", text("x"))])
        let a = f.make(originA, hlc: hlc(3), .item, .update, item, [Field("title", text("a"))], base: hlc(1))
        let b = f.make(originB, hlc: hlc(4), .item, .update, item, [Field("title", text("b"))], base: hlc(1))
        // Concurrent with both (it saw neither) and past Int64.max: a conflict with a clock SQLite
        // cannot hold as is.
        let far = f.make(originC, hlc: UInt64.max - 7, .item, .update, item, [Field("title", text("far"))], base: hlc(1))
        let resolve = f.make(originA, hlc: hlc(5), .item, .update, item, [Field("title", text("seen all"))], base: UInt64.max)
        try p.apply([create, a, b])
        #expect(try p.conflicts().count == 1)
        try p.apply([far])
        let open = try p.conflicts()
        #expect(open.count == 2)
        let hlcs = try p.database.read { db in try Int64.fetchAll(db, sql: "SELECT winner_hlc FROM conflicts ORDER BY winner_hlc") }
        #expect(hlcs.last == Int64.max, "a clock past Int64.max is kept as Int64.max")
        try p.apply([resolve])
        // A base past Int64.max has seen every clock: both conflicts are resolved. `far`, later
        // and blind to `resolve`, conflicts with it in turn.
        func check(_ p: Projection) throws {
            let all = try p.conflicts(includeResolved: true)
            #expect(all.count == 3)
            #expect(all.filter { $0.resolvedBy == resolve.eventID.lowercasedString }.count == 2)
            let open = try p.conflicts()
            #expect(open.count == 1 && open.first?.loserEventID == resolve.eventID.lowercasedString)
        }
        try check(p)
        let reference = try makeProjection(dir, name: "ref").1
        try reference.applyFresh([create, a, b, far, resolve])
        try check(reference)

        // The same for rows' versions: an exception and a completion written at such clocks
        // (the anomaly is dated by the later).
        let date = "2026-03-01"
        let completion = f.make(originA, hlc: UInt64.max - 5, .completion, .create, FieldRules.occurrenceID(.completion, item: item, originalDate: date),
                                [Field("item_id", text(item.lowercasedString)), Field("original_occurrence_date", text(date))])
        let skip = f.make(originB, hlc: UInt64.max - 3, .recurrenceException, .create,
                          FieldRules.occurrenceID(.recurrenceException, item: item, originalDate: date),
                          [Field("item_id", text(item.lowercasedString)), Field("original_occurrence_date", text(date)), Field("kind", text("skip"))])
        try p.apply([completion, skip])
        let anomaly = try #require(try p.anomalies().first { $0.kind == "completion_wins" })
        #expect(anomaly.eventID == skip.eventID.lowercasedString)
        _ = store
    }

    @Test func orphanChildBeforeParentAndLinkBeforeTag() throws {
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var f = EventFactory()
        let child = f.make(originA, hlc: hlc(5), .item, .create, item, [Field("title", text("child")), Field("parent_id", text(parent.lowercasedString))])
        let link = f.make(originA, hlc: hlc(6), .itemTag, .create, FieldRules.itemTagID(item: item, tag: tag),
                          [Field("item_id", text(item.lowercasedString)), Field("tag_id", text(tag.lowercasedString))])
        try p.apply([child, link])
        #expect(try row(p, item)?["parent_id"] as String? == parent.lowercasedString)
        #expect(try row(p, "item_tags", FieldRules.itemTagID(item: item, tag: tag))?["tag_id"] as String? == tag.lowercasedString)
        let parentEvent = f.make(originB, hlc: hlc(1), .item, .create, parent, [Field("title", text("parent"))])
        let tagEvent = f.make(originB, hlc: hlc(2), .tag, .create, tag, [Field("name", text("home"))])
        try p.apply([parentEvent, tagEvent])
        let subtree = try p.items(under: parent.lowercasedString)
        #expect(subtree.map(\.title) == ["parent", "child"] && subtree.map(\.depth) == [0, 1])
        #expect(try p.pathToRoot(item.lowercasedString).map(\.title) == ["child", "parent"])
    }

    @Test func updateBeforeCreateIsKeptAndCreatedAtComesFromTheCreate() throws {
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var f = EventFactory()
        let update = f.make(originB, hlc: hlc(50), .item, .update, item, [Field("status", text("next"))])
        try p.apply([update])
        #expect(try row(p, item)?["created_at"] as String? == nil)
        let create = f.make(originA, hlc: hlc(10), .item, .create, item, [Field("title", text("t")), Field("status", text("inbox"))])
        try p.apply([create])
        let r = try #require(try row(p, item))
        #expect(r["status"] as String? == "next" && r["title"] as String? == "t")
        #expect(r["created_at"] as String? == ISOTime.string(millis: hlc(10) >> 16))
        #expect(r["modified_at"] as String? == ISOTime.string(millis: hlc(50) >> 16))
    }

    @Test func completionWinsOverSkipAndRescheduleWithAnAnomaly() throws {
        for completionFirst in [true, false] {
            let dir = TempDir()
            let (_, p) = try makeProjection(dir)
            var f = EventFactory()
            let date = "2026-03-01"
            let completion = f.make(originA, hlc: hlc(5), .completion, .create, FieldRules.occurrenceID(.completion, item: item, originalDate: date),
                                    [Field("item_id", text(item.lowercasedString)), Field("original_occurrence_date", text(date)), Field("completed_at", text("2026-03-01T10:00:00Z"))])
            let skip = f.make(originB, hlc: hlc(6), .recurrenceException, .create, FieldRules.occurrenceID(.recurrenceException, item: item, originalDate: date),
                              [Field("item_id", text(item.lowercasedString)), Field("original_occurrence_date", text(date)), Field("kind", text("skip"))])
            try p.apply(completionFirst ? [completion] : [skip])
            try p.apply(completionFirst ? [skip] : [completion])
            let anomalies = try p.anomalies()
            #expect(anomalies.count == 1, "completion first: \(completionFirst)")
            let a = try #require(anomalies.first)
            #expect(a.kind == "completion_wins" && a.attemptedOp == "skip" && a.originalOccurrenceDate == date)
            #expect(a.itemID == item.lowercasedString && a.eventID == skip.eventID.lowercasedString)
            // The losing write is still in the log (here: still a row), never silently dropped.
            #expect(try row(p, "recurrence_exceptions", FieldRules.occurrenceID(.recurrenceException, item: item, originalDate: date)) != nil)
            // Another occurrence date is unaffected.
            let other = f.make(originB, hlc: hlc(7), .recurrenceException, .create, FieldRules.occurrenceID(.recurrenceException, item: item, originalDate: "2026-03-08"),
                               [Field("item_id", text(item.lowercasedString)), Field("original_occurrence_date", text("2026-03-08")), Field("kind", text("reschedule")), Field("rescheduled_to", text("2026-03-09"))])
            try p.apply([other])
            #expect(try p.anomalies().count == 1)
        }
    }

    /// seeds/004 §9: transitions for one original date.
    @Test func occurrenceTransitions() throws {
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var f = EventFactory()
        let date = "2026-04-05"
        let cid = FieldRules.occurrenceID(.completion, item: item, originalDate: date)
        let xid = FieldRules.occurrenceID(.recurrenceException, item: item, originalDate: date)
        let key = [Field("item_id", text(item.lowercasedString)), Field("original_occurrence_date", text(date))]
        // Reschedule, then edit the reschedule (replace): the latest date wins.
        try p.apply([f.make(originA, hlc: hlc(1), .recurrenceException, .create, xid, key + [Field("kind", text("reschedule")), Field("rescheduled_to", text("2026-04-06"))])])
        try p.apply([f.make(originA, hlc: hlc(2), .recurrenceException, .update, xid, [Field("rescheduled_to", text("2026-04-07"))])])
        #expect(try row(p, "recurrence_exceptions", xid)?["rescheduled_to"] as String? == "2026-04-07")
        // Unreschedule: the exception is deleted (a tombstone stays).
        try p.apply([f.make(originA, hlc: hlc(3), .recurrenceException, .delete, xid)])
        #expect(try row(p, "recurrence_exceptions", xid)?["deleted_at"] as String? != nil)
        // Complete, then a skip is set aside with an anomaly.
        try p.apply([f.make(originA, hlc: hlc(4), .completion, .create, cid, key + [Field("notes", text("done early"))])])
        try p.apply([f.make(originB, hlc: hlc(5), .recurrenceException, .restore, xid, [Field("kind", text("skip"))])])
        #expect(try p.anomalies().count == 1)
        // Editing the completion's notes changes only notes.
        let before = try #require(try row(p, "completion_history", cid))
        try p.apply([f.make(originA, hlc: hlc(6), .completion, .update, cid, [Field("notes", text("edited"))])])
        let after = try #require(try row(p, "completion_history", cid))
        #expect(after["notes"] as String? == "edited")
        #expect(after["original_occurrence_date"] as String? == before["original_occurrence_date"] as String?)
        #expect(after["created_at"] as String? == before["created_at"] as String?)
        // Uncomplete, then an exception is allowed again: no new anomaly.
        try p.apply([f.make(originA, hlc: hlc(7), .completion, .delete, cid)])
        try p.apply([f.make(originB, hlc: hlc(8), .recurrenceException, .update, xid, [Field("kind", text("skip"))])])
        #expect(try p.anomalies().count == 1)
        #expect(try row(p, "recurrence_exceptions", xid)?["deleted_at"] as String? == nil)
    }

    @Test func occurrenceIDsAreDeterministic() {
        let a = FieldRules.occurrenceID(.completion, item: item, originalDate: "2026-03-01")
        #expect(a == FieldRules.occurrenceID(.completion, item: item, originalDate: "2026-03-01"))
        #expect(a != FieldRules.occurrenceID(.recurrenceException, item: item, originalDate: "2026-03-01"))
        #expect(a != FieldRules.occurrenceID(.completion, item: item, originalDate: "2026-03-02"))
        #expect(a.uuidString.lowercased().dropFirst(14).first == "5")
    }

    /// DESIGN rule 7: a field the projection does not know stays in the log and appears after a
    /// rebuild by a projection that knows it.
    @Test func unknownFieldIsKeptAndSurfacesAfterARebuild() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let projected = try ProjectedStore(store: store)
        _ = try projected.append([try MutationParser.parse(#"{"entity":"item","op":"create","id":"\#(item.lowercasedString)","fields":{"title":"x","energy":3}}"#)])
        let columns = try projected.projection.database.read { db in try db.columns(in: "items").map(\.name) }
        #expect(!columns.contains("energy"))
        try projected.close()
        // A newer projection schema knows the field: a new migration adds the column.
        var newer = ProjectionSchema.current
        newer.tables[0].columns.append("energy")
        newer.migrations.append(("v2 items energy", "ALTER TABLE items ADD COLUMN energy INTEGER"))
        try Projection.rebuild(store: store, schema: newer)
        let p = try Projection(store: store, schema: newer)
        #expect(try row(p, item)?["energy"] as Int? == 3)
    }

    /// The crash window: the log fsynced, the projection not committed. Next open repairs it,
    /// and no event is applied twice.
    @Test func crashBetweenLogFsyncAndProjectionCommitIsRepaired() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        do {
            let projected = try ProjectedStore(store: store)
            _ = try projected.append(sampleMutations(50))
            try projected.close()
        }
        // Appended, durable, but never projected (as if the process died right after fsync).
        do {
            let a = try LogAppender(store: store)
            _ = try a.append(sampleMutations(30, seed: 9))
            try a.close()
        }
        let p = try Projection(store: store)
        #expect(try p.lag()[store.replicaID] == 30)
        try p.close()
        let reopened = try ProjectedStore(store: store)
        #expect(try reopened.projection.lag().isEmpty)
        #expect(try reopened.projection.cursor()[store.replicaID] == Seq(80))
        let dump = try reopened.projection.canonicalDump()
        #expect(try reopened.projection.catchUp() == 0)  // nothing applied twice
        try reopened.close()
        try Projection.rebuild(store: store)
        #expect(try Projection(store: store).canonicalDump() == dump)
    }

    @Test func fullTextSearchPrefixDiacriticsAndDeleted() throws {
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var f = EventFactory()
        let ids = (0..<4).map { _ in UUID() }
        try p.apply([
            f.make(originA, hlc: hlc(1), .item, .create, ids[0], [Field("title", text("Crème brûlée recipe"))]),
            f.make(originA, hlc: hlc(2), .item, .create, ids[1], [Field("title", text("Call mom")), Field("notes", text("about the café"))]),
            f.make(originA, hlc: hlc(3), .item, .create, ids[2], [Field("title", text("Cafeteria menu"))]),
            f.make(originA, hlc: hlc(4), .item, .create, ids[3], [Field("title", text("Old cafe note"))]),
            f.make(originA, hlc: hlc(5), .item, .delete, ids[3]),
        ])
        #expect(try Set(p.items(search: "creme").map(\.id)) == [ids[0].lowercasedString])
        #expect(try Set(p.items(search: "caf").map(\.id)) == Set([ids[1], ids[2]].map(\.lowercasedString)))
        #expect(try Set(p.items(search: "CAFÉ").map(\.id)) == Set([ids[1], ids[2]].map(\.lowercasedString)))  // case and accents folded, prefix match
        #expect(try p.items(search: "caf", includeDeleted: true).count == 3)
        // Edits are searchable; the old text is not.
        try p.apply([f.make(originA, hlc: hlc(6), .item, .update, ids[2], [Field("title", text("Lunch plan"))])])
        #expect(try p.items(search: "cafeteria").isEmpty)
        #expect(try p.items(search: "lunch").count == 1)
    }

    @Test func subtreeIsCycleSafe() throws {
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        var f = EventFactory()
        let a = UUID(), b = UUID(), c = UUID()
        // a -> b -> c -> a: a cycle made by concurrent moves.
        try p.apply([
            f.make(originA, hlc: hlc(1), .item, .create, a, [Field("title", text("a")), Field("parent_id", text(c.lowercasedString))]),
            f.make(originA, hlc: hlc(2), .item, .create, b, [Field("title", text("b")), Field("parent_id", text(a.lowercasedString))]),
            f.make(originA, hlc: hlc(3), .item, .create, c, [Field("title", text("c")), Field("parent_id", text(b.lowercasedString))]),
        ])
        #expect(try p.items(under: a.lowercasedString).map(\.title) == ["a", "b", "c"])
        #expect(try p.pathToRoot(a.lowercasedString).map(\.title) == ["a", "c", "b"])
    }

    @Test func appSettingsStayLocalAndSurviveRebuild() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let p = try Projection(store: store)
        try p.setSetting("quick_capture_folder_id", "abc")
        #expect(try p.setting("quick_capture_folder_id") == "abc")
        #expect(try !p.canonicalDump().joined().contains("abc"))
        try p.close()
        try Projection.rebuild(store: store)
        #expect(try Projection(store: store).setting("quick_capture_folder_id") == "abc")
    }

    /// seeds/000 §8: CRUD bumps modified_at; applying changed and deleted records from another replica.
    @Test func crudBumpsModifiedAtAndRemoteChangesApply() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let clock = ManualClock()
        let projected = try ProjectedStore(store: store, wallClock: clock)
        _ = try projected.append([try MutationParser.parse(#"{"entity":"tag","op":"create","id":"\#(tag.lowercasedString)","fields":{"name":"home"}}"#)])
        let first = try row(projected.projection, "tags", tag)?["modified_at"] as String?
        clock.advance(60_000)
        _ = try projected.append([try MutationParser.parse(#"{"entity":"tag","op":"update","id":"\#(tag.lowercasedString)","fields":{"color":"white"}}"#)])
        let second = try row(projected.projection, "tags", tag)?["modified_at"] as String?
        #expect(first != nil && second != nil && first! < second!)
        clock.advance(60_000)
        // A remote replica's delete arrives (pull applying deleted records).
        var f = EventFactory()
        try projected.projection.apply([f.make(originB, hlc: HLC(wallMillis: clock.nowMillis() + 1, counter: 0).rawValue, .tag, .delete, tag)])
        #expect(try row(projected.projection, "tags", tag)?["deleted_at"] as String? != nil)
        try projected.close()
    }
}

@Suite struct MigrationTests {
    func tables(_ q: DatabaseQueue) throws -> [String] {
        try q.read { db in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name") }
    }

    @Test func freshAlreadyAppliedNewAndFailingMigrations() throws {
        let dir = TempDir()
        let q = try DatabaseQueue(path: dir.path + "/p.sqlite")
        var schema = ProjectionSchema.current
        try schema.migrator().migrate(q)
        let fresh = try tables(q)
        #expect(fresh.contains("items") && fresh.contains("completion_history") && fresh.contains("sync_anomalies") && fresh.contains("app_settings"))
        // Already applied: migrating again changes nothing.
        try schema.migrator().migrate(q)
        #expect(try tables(q) == fresh)
        #expect(try q.read { try schema.migrator().appliedIdentifiers($0) }.count == schema.migrations.count)
        // A new migration is applied once.
        schema.migrations.append(("test: add item effort", "ALTER TABLE items ADD COLUMN effort INTEGER"))
        try schema.migrator().migrate(q)
        #expect(try q.read { db in try db.columns(in: "items").map(\.name) }.contains("effort"))
        // A failing migration rolls back whole: neither its table nor its record remains.
        schema.migrations.append(("test: broken", "CREATE TABLE half_done (x INTEGER); INSERT INTO no_such_table VALUES (1);"))
        #expect(throws: (any Error).self) { try schema.migrator().migrate(q) }
        #expect(try !tables(q).contains("half_done"))
        #expect(try q.read { try schema.migrator().appliedIdentifiers($0) }.contains("test: broken") == false)
    }

    @Test func projectionFileOpensReadOnlyInAnySQLiteClient() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let projected = try ProjectedStore(store: store)
        _ = try projected.append(sampleMutations(100))
        try projected.close()
        var config = Configuration()
        config.readonly = true
        let q = try DatabaseQueue(path: Projection.path(for: store), configuration: config)
        #expect(try q.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM items") ?? 0 } > 0)
    }
}

func sampleMutations(_ n: Int, seed: UInt64 = 7) -> [Mutation] {
    SampleWorkload(seed: seed, count: n).enumerated().map { i, line in try! MutationParser.parse(line, lineNumber: i + 1) }
}
