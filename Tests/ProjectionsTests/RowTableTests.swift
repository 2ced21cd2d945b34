import Foundation
import Testing
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
