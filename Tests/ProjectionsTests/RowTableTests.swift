import Foundation
import GRDB
import Testing
import TestSupport
@testable import EventLog
@testable import Projections

/// The projector's row table (`RowTable`): every key reachable after any mix of inserts, updates
/// and removals (removal moves later entries back, across the end of the table too), rows kept
/// across growth, and slots that name exactly the rows held.
@Suite struct RowTableTests {
    func key(_ n: UInt64, table: Int = 1) -> Projector.Key {
        var bytes = [UInt8](repeating: 0, count: 16)
        withUnsafeBytes(of: n.littleEndian) { bytes.replaceSubrange(0..<8, with: $0) }
        return Projector.Key(table: table, id: bytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) })
    }

    func row(_ version: UInt64) -> RowState {
        var r = RowState(columns: 2)
        r.version = version
        r.cells[0].value = .text("row \(version)")
        return r
    }

    /// Against a `Dictionary` as the model: random inserts, updates and removals on keys from a
    /// small pool (so a removal often has entries after it to move back), from a 16-slot table.
    @Test(arguments: [1, 2, 3, 4])
    func holdsWhatADictionaryHolds(seed: UInt64) {
        var table = RowTable()
        var model: [Projector.Key: UInt64] = [:]
        var rng = seed &* 0x9E37_79B9_7F4A_7C15
        func next() -> UInt64 {
            rng = rng &+ 0x9E37_79B9_7F4A_7C15
            var z = rng
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        for step in 0..<20_000 {
            let k = key(next() % 300, table: Int(next() % 3))
            switch next() % 4 {
            case 0:
                table.removeValue(forKey: k)
                model[k] = nil
            case 1:
                table[k] = nil
                model[k] = nil
            default:
                let v = UInt64(step)
                let slot = table.slot(inserting: k, hash: RowTable.hash(k), columns: 2)
                table.values[slot] = row(v)
                model[k] = v
            }
            if step % 997 == 0 {
                #expect(table.count == model.count)
                for (k, v) in model { #expect(table[k]?.version == v) }
            }
        }
        #expect(table.count == model.count)
        for (k, v) in model {
            let slot = table.slot(of: k, hash: RowTable.hash(k))
            #expect(slot != nil && table.values[slot!].version == v && table.values[slot!].cells[0].value == .text("row \(v)"))
        }
        // Keys never inserted, or removed, are not found.
        for n in 300..<400 as Range<UInt64> { #expect(table[key(n)] == nil) }
        // The slots name exactly the rows held.
        let slots = table.slots
        #expect(slots.count == model.count)
        #expect(Set(slots.map { table.key(at: $0) }) == Set(model.keys))
    }

    @Test func rowsSurviveGrowthAndReservation() {
        var table = RowTable()
        for n in 0..<5_000 as Range<UInt64> { table[key(n)] = row(n) }
        table.reserveCapacity(50_000)
        for n in 5_000..<10_000 as Range<UInt64> {
            let k = key(n)
            table.values[table.slot(inserting: k, hash: RowTable.hash(k), columns: 2)] = row(n)
        }
        #expect(table.count == 10_000)
        for n in 0..<10_000 as Range<UInt64> { #expect(table[key(n)]?.version == n) }
        // A key met again finds its row, and makes no second one.
        let again = table.slot(inserting: key(42), hash: RowTable.hash(key(42)), columns: 2)
        #expect(table.values[again].version == 42 && table.count == 10_000)
    }

    @Test func emptiedTablesHoldNothingAndFillAgain() {
        var table = RowTable(capacity: 1_000)
        for n in 0..<1_000 as Range<UInt64> { table[key(n)] = row(n) }
        table.removeAll(keepingCapacity: true)
        #expect(table.isEmpty && table.slots.isEmpty && table[key(7)] == nil)
        for n in 0..<500 as Range<UInt64> { table[key(n, table: 2)] = row(n + 1) }
        #expect(table.count == 500 && table[key(3, table: 2)]?.version == 4 && table[key(3)] == nil)
        table.removeAll(keepingCapacity: false)
        #expect(table.isEmpty && table[key(3, table: 2)] == nil)
    }

    /// Ids crafted to collide under a folding hash still spread over the table, and all are found
    /// (the table hashes with the seeded `Hasher`, as `Dictionary` does).
    @Test func craftedIDsAreAllFound() {
        var table = RowTable()
        var keys: [Projector.Key] = []
        for i in 0..<2_000 as Range<UInt64> {
            let a = i &* 0x9E37_79B9_7F4A_7C15
            var bytes = [UInt8](repeating: 0, count: 16)
            withUnsafeBytes(of: a) { bytes.replaceSubrange(0..<8, with: $0) }
            withUnsafeBytes(of: a ^ 0x0123_4567_89AB_CDEF) { bytes.replaceSubrange(8..<16, with: $0) }
            let k = Projector.Key(table: 1, id: bytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) })
            keys.append(k)
            table[k] = row(i)
        }
        #expect(table.count == 2_000)
        for (i, k) in keys.enumerated() { #expect(table[k]?.version == UInt64(i)) }
        #expect(Set(keys.map(RowTable.hash)).count > 1_990)
    }

    /// Keys whose hashes put them at chosen home slots of the 16-slot table a new one has.
    func keys(homes: [Int]) -> [Projector.Key] {
        var out: [Projector.Key] = [], n: UInt64 = 0
        for home in homes {
            while RowTable.hash(key(n)) & 15 != home || out.contains(key(n)) { n += 1 }
            out.append(key(n))
            n += 1
        }
        return out
    }

    /// A removal moves back the entries after it across the end of the table: A and B live at
    /// home 14, C at 15, D and E at 0; A's removal moves each back one slot, through the wrap.
    @Test func aRemovalMovesEntriesBackAcrossTheEnd() {
        let ks = keys(homes: [14, 14, 15, 0, 0])
        var table = RowTable()
        for (i, k) in ks.enumerated() { table[k] = row(UInt64(i)) }
        #expect(ks.map { table.slot(of: $0, hash: RowTable.hash($0)) } == [14, 15, 0, 1, 2])
        table.removeValue(forKey: ks[0])
        #expect(table.count == 4 && table[ks[0]] == nil)
        #expect(ks.dropFirst().map { table.slot(of: $0, hash: RowTable.hash($0)) } == [14, 15, 0, 1])
        for (i, k) in ks.enumerated().dropFirst() { #expect(table[k]?.version == UInt64(i)) }
        // An entry at its own home stays where it is when the hole is before it, across the end.
        let pair = keys(homes: [15, 0])
        var other = RowTable()
        for (i, k) in pair.enumerated() { other[k] = row(UInt64(i)) }
        other.removeValue(forKey: pair[0])
        #expect(other.slot(of: pair[1], hash: RowTable.hash(pair[1])) == 0 && other.count == 1)
    }

    /// A lookup under another hash does not find a key held (the contract `apply` keeps by
    /// carrying each event's hash, checked there in debug builds).
    @Test func aKeyIsFoundUnderItsOwnHashOnly() {
        var table = RowTable()
        let k = key(9)
        table[k] = row(9)
        #expect(table.slot(of: k, hash: RowTable.hash(k)) != nil)
        #expect(table.slot(of: k, hash: RowTable.hash(k) ^ 1) == nil)
    }

    /// Fetching ahead is a hint: any key, held or not, in any table, changes nothing.
    @Test func fetchingAheadChangesNothing() {
        var table = RowTable()
        table[key(1)] = row(1)
        for n in 0..<100 as Range<UInt64> {
            table.prefetch(hash: RowTable.hash(key(n)))
            table.prefetchRow(key(n), hash: RowTable.hash(key(n)))
        }
        #expect(table.count == 1 && table[key(1)]?.version == 1)
    }
}

/// A batch applied with flushes inside it (each flush empties the rows; later events load theirs
/// back from the database) gives the same tables as its events applied one by one: hashes worked
/// out ahead, and slots fetched ahead, never change what merging does.
@Suite struct BatchApplyTests {
    /// Every table's rows with their merge state, conflicts and the events not understood.
    func dump(_ db: Database) throws -> [String] {
        var lines = try Projection.canonicalDump(db, schema: .current)
        for t in ProjectionSchema.current.tables {
            lines += try String.fetchAll(db, sql: "SELECT id || ':' || hex(_clocks) FROM \(t.name) ORDER BY id")
        }
        lines += try String.fetchAll(db, sql: "SELECT entity || entity_id || field || winner_value || loser_value FROM conflicts ORDER BY 1")
        lines += try String.fetchAll(db, sql: "SELECT entity || ':' || op || ':' || events FROM projection_unread ORDER BY 1")
        return lines
    }

    func events() -> [Event] {
        var ms = Workload.mutations(400, seed: 11)
        // Events of an entity this build does not know: no row, and a gap in the hashes ahead.
        for i in stride(from: 3, to: ms.count, by: 37) {
            ms.insert(Mutation(entity: Entity(rawValue: 50), op: .create, entityID: UUID()), at: i)
        }
        // The same entity again within a few events, across flushes.
        let again = ms[20]
        for i in [21, 23, 28, 29, 60] { ms.insert(Mutation(entity: again.entity, op: .update, entityID: again.entityID, fields: again.fields), at: i) }
        return ms.enumerated().map { i, m in
            Event(origin: i % 3 == 0 ? originB : originA, seq: Seq(UInt64(i + 1)), hlc: HLC(rawValue: hlc(UInt64(i / 2), UInt16(i % 2))), mutation: m)
        }
    }

    func database(_ dir: TempDir, _ name: String) throws -> DatabaseQueue {
        try Projection.openRebuildQueue(dir.path + "/" + name, schema: .current)
    }

    @Test(arguments: [1, 3, 50])
    func aBatchFlushedInsideGivesTheTablesOfItsEventsOneByOne(flushingAt: Int) throws {
        let dir = TempDir()
        let all = events()
        let oneByOne = try database(dir, "a.sqlite")
        let expected = try oneByOne.write { db -> [String] in
            let p = try Projector(schema: .current, db: db, fresh: true)
            for e in all { try p.apply(e, db: db) }
            try p.flush(db: db)
            return try dump(db)
        }
        let batched = try database(dir, "b.sqlite")
        let got = try batched.write { db -> [String] in
            let p = try Projector(schema: .current, db: db, fresh: true)
            var start = 0
            // Batches of 0, 1, 5, 8, 9, 20 events and the rest.
            for size in [0, 1, 5, 8, 9, 20, all.count] where start < all.count {
                let slice = Array(all[start..<min(all.count, start + size)])
                let batch = PreparedBatch(capacity: slice.count, layout: p.layout)
                for e in slice { batch.prepared.append(p.layout.prepare(e, into: &batch.fields, pairEagerly: true)) }
                batch.events = slice
                try p.apply(batch, db: db, flushingAt: flushingAt)
                start += slice.count
            }
            try p.flush(db: db)
            return try dump(db)
        }
        #expect(got.count == expected.count && got.count > 150, "\(got.count) lines")
        #expect(got == expected)
    }
}
