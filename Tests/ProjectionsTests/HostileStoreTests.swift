import Domain
import Foundation
import TestSupport
import GRDB
import Testing
@testable import EventLog
@testable import Projections

/// Stores whose files another process could have written: the projection reads them without trapping.
@Suite struct HostileStoreTests {
    /// Events of `origin` from `base` on, chained from the floor hash `previous`.
    static func frames(_ origin: ReplicaID, from base: UInt64, count: Int, previous start: FrameHash, item: (Int) -> UUID) -> [[UInt8]] {
        var previous = start
        var out: [[UInt8]] = []
        for i in 0..<count {
            let m = Mutation(entity: .item, op: .create, entityID: item(i), fields: [Field("title", .text("near the end \(i)"))])
            let e = Event(origin: origin, seq: Seq(base + UInt64(i)), hlc: HLC(wallMillis: 1_767_225_600_000, counter: UInt16(i)), mutation: m)
            let frame = FrameEncoder().encode([e][...], continues: false, previousHash: previous)
            previous = frame.withUnsafeBytes { FrameHash.of($0) }
            out.append(frame)
        }
        return out
    }

    /// Two origins whose logs start past floors just under `Seq.max`: the seqs counted from the
    /// projection's empty cursor add up past `Int.max`. Catching up counts the events the logs
    /// hold (from each floor on) and applies them, instead of trapping on the sum.
    @Test func logsStartingNearTheLargestSeqAreCountedFromTheirFloors() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let floorSeq = Seq.max.rawValue - 3
        let floorHash = FrameHash(bytes: [UInt8](repeating: 7, count: 32))
        for (n, o) in [originA, originB].enumerated() {
            try store.writeFloor(LogTip(lastSeq: Seq(floorSeq), lastHLC: HLC(rawValue: 1), lastHash: floorHash), origin: o)
            let appender = try LogAppender.opening(store)
            let made = Self.frames(o, from: floorSeq + 1, count: 3, previous: floorHash) { i in
                UUID(uuidString: String(format: "00000000-0000-4000-8000-%012d", n * 10 + i))!
            }
            _ = try appender.receive(made)
            try appender.close()
        }
        #expect(try LogReader(store: store).tip(origin: originA).lastSeq == Seq.max)

        // Caught up with progress reports (the path that counts), then without (the one that does not).
        let p = try Projection(store: store)
        var reports: [(Int, Int)] = []
        #expect(try p.catchUp { reports.append(($0, $1)) } == 6)
        #expect(reports.first.map { $0.0 == 0 && $0.1 == 6 } == true)
        #expect(reports.last.map { $0.0 == 6 && $0.1 == 6 } == true)
        let titles = try p.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM items") }
        #expect(titles == 6)
        #expect(try p.cursor() == [originA: Seq.max, originB: Seq.max])
        try p.close()

    }

    /// `_clocks` values another process could have written: each is named damaged, none traps
    /// (a varint past `Int.max` as a count, an origin, a column or a stamp; a lifecycle of 1,
    /// which no writer makes; a stamp of an origin the projection does not know).
    @Test func damagedClocksValuesAreNamedNotTrapped() throws {
        let huge: [UInt8] = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]  // UInt64.max
        let stamp: [UInt8] = [0, 0, 1, 0, 0]  // hlc distance 0, origin 0, seq 1, no base, no id
        let blobs: [(String, [UInt8])] = [
            ("stamp count past Int.max", [1, 0] + huge),
            ("origin past Int.max", [1, 0, 1, 0] + huge + [1, 0, 0, 0, 0]),
            ("origin the projection does not know", [1, 0, 1, 0, 5, 1, 0, 0, 0, 0]),
            ("lifecycle of 1", [1, 0, 0, 1, 0]),
            ("lifecycle past Int.max", [1, 0, 1] + stamp + huge + [0]),
            ("cell count past Int.max", [1, 0, 1] + stamp + [0] + huge),
            ("column past Int.max", [1, 0, 1] + stamp + [0, 1] + huge + [0]),
            ("stamp index past Int.max", [1, 0, 1] + stamp + [0, 1, 0] + huge),
        ]
        for (what, blob) in blobs {
            #expect(throws: ProjectionError.self, "\(what)") {
                _ = try RowState.decodeClocks(blob, columns: 4, version: 1 << 20, origins: 1)
            }
        }
        // The same shape with sound values decodes (the cases above differ from it in one value).
        let sound = try RowState.decodeClocks([1, 0, 1] + stamp + [2, 1, 0, 0], columns: 4, version: 1 << 20, origins: 1)
        #expect(sound.stamps.count == 1 && sound.lifecycle?.stamp == 0 && sound.cells[0].stamp == 0)
    }

    /// Random and mutated `_clocks` values: each decodes to a row whose every index is in range
    /// (compacting and encoding it again then trap on nothing and read back alike), or is named
    /// damaged. A trap here ends the test run.
    @Test func anyClocksBytesDecodeInRangeOrAreNamedDamaged() throws {
        var rng = SplitMix64(seed: 0x5EED_C10C)
        let columns = 6, origins = 3
        // Sound values to mutate: rows of random stamps, cells and lifecycles.
        var sound: [[UInt8]] = []
        for _ in 0..<64 {
            var row = RowState(columns: columns)
            let stamps = Int(rng.next() % 6)
            for k in 0..<stamps {
                row.stamps.append(Stamp(hlc: 1 << 20 - UInt64(k), origin: Int(rng.next() % UInt64(origins)), seq: rng.next() % 1_000,
                                        base: rng.next() % 2 == 0 ? nil : rng.next() % (1 << 20), explicitID: rng.next() % 3 == 0 ? UUID() : nil))
            }
            if stamps > 0 {
                for c in 0..<columns where rng.next() % 2 == 0 { row.cells[c].stamp = Int(rng.next() % UInt64(stamps)) }
                if rng.next() % 2 == 0 { row.lifecycle = (Int(rng.next() % UInt64(stamps)), rng.next() % 2 == 0) }
            }
            row.createdHLC = rng.next() % 2 == 0 ? nil : 1 << 19
            row.version = 1 << 20
            sound.append(row.encodeClocks())
        }
        var decoded = 0, damaged = 0
        for n in 0..<20_000 {
            var bytes = sound[Int(rng.next() % UInt64(sound.count))]
            switch n % 4 {
            case 0:  // random bytes
                bytes = (0..<Int(rng.next() % 40)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            case 1:  // a few bytes changed
                for _ in 0..<1 + Int(rng.next() % 3) where !bytes.isEmpty { bytes[Int(rng.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: rng.next()) }
            case 2:  // cut short
                bytes = Array(bytes.prefix(Int(rng.next() % UInt64(bytes.count + 1))))
            default:  // a run of 0xFF (varints past every bound) put in
                let at = Int(rng.next() % UInt64(bytes.count + 1))
                bytes.insert(contentsOf: [UInt8](repeating: 0xFF, count: 1 + Int(rng.next() % 10)), at: at)
            }
            do {
                var row = try RowState.decodeClocks(bytes, columns: columns, version: 1 << 20, origins: origins)
                decoded += 1
                #expect(row.stamps.allSatisfy { $0.origin >= 0 && $0.origin < origins })
                #expect(row.cells.allSatisfy { $0.stamp.map { $0 < row.stamps.count } ?? true })
                #expect(row.lifecycle.map { $0.stamp < row.stamps.count } ?? true)
                row.compact()
                let again = try RowState.decodeClocks(row.encodeClocks(), columns: columns, version: 1 << 20, origins: origins)
                #expect(again.encodeClocks() == row.encodeClocks())
            } catch ProjectionError.damagedClocks {
                damaged += 1
            }
        }
        #expect(decoded > 1_000 && damaged > 1_000, "decoded \(decoded), damaged \(damaged)")
    }

    /// A row whose `_clocks` names an origin the file's origin table does not hold: reading its
    /// sources and merging an event into it report the damage (and leave the file as it was).
    @Test func aRowNamingAnUnknownOriginIsReportedDamaged() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let item = UUID()
        let appender = try LogAppender(store: store)
        _ = try appender.append([Mutation(entity: .item, op: .create, entityID: item, fields: [Field("title", .text("one"))])])
        let p = try Projection(store: store)
        #expect(try p.catchUp() == 1)
        try p.close()
        // Another process rewrites the row's clocks: its one stamp now names origin 7.
        let crafted: [UInt8] = [1, 1, 1, 0, 7, 1, 0, 0, 0, 1, 0, 0]
        let q = try DatabaseQueue(path: Projection.path(for: store))
        try q.write { try $0.execute(sql: "UPDATE items SET _clocks = ? WHERE id = ?", arguments: [Data(crafted), item.lowercasedString]) }
        try q.close()

        let reopened = try Projection(store: store)
        #expect(throws: ProjectionError.self) { _ = try reopened.fieldSources(entity: .item, id: item) }
        _ = try appender.append([Mutation(entity: .item, op: .update, entityID: item, fields: [Field("title", .text("two"))])])
        try appender.close()
        #expect(throws: (any Error).self) { _ = try reopened.catchUp() }
        let title = try reopened.read { try String.fetchOne($0, sql: "SELECT title FROM items WHERE id = ?", arguments: [item.lowercasedString]) }
        #expect(title == "one")
        try reopened.close()
    }

    /// A projection whose file another process holds for a fill under a rollback journal (the
    /// write lock taken): a reader's open cannot set the WAL up (a write) and, after its busy
    /// wait, reads what was committed instead of failing.
    @Test func aReaderOfAFileBeingFilledElsewhereReadsWhatWasCommitted() throws {
        let dir = TempDir()
        let (store, p) = try makeProjection(dir)
        var events = EventFactory()
        try p.apply((0..<20).map { n in
            events.make(originA, hlc: hlc(UInt64(n)), .item, .create, UUID(), [Field("title", text("t\(n)"))])
        })
        try p.close()
        var config = Configuration()
        config.allowsUnsafeTransactions = true  // the fill's transaction spans the reader's open
        let filler = try DatabaseQueue(path: Projection.path(for: store), configuration: config)
        try filler.writeWithoutTransaction { db in
            #expect(try String.fetchOne(db, sql: "PRAGMA journal_mode = DELETE") == "delete")
            try db.execute(sql: "BEGIN IMMEDIATE")
            try db.execute(sql: "DELETE FROM items")
        }
        let reader = try Projection(readingIfNeeded: store)
        #expect(try reader.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM items") } == 20)
        try reader.close()
        try filler.writeWithoutTransaction { try $0.execute(sql: "ROLLBACK") }
        try filler.close()
    }
}
