import Domain
import Foundation
import Testing
import TestSupport
@testable import EventLog
@testable import Projections

/// `RowState.compact` stops reading cells once every stamp is seen used: what it leaves must be
/// exactly what a scan of every cell leaves (the stamps kept, their order, every cell's and the
/// lifecycle's index), since `_clocks` is stored and compared byte for byte across replicas.
@Suite struct RowStateCompactTests {
    /// The rule read plainly: with 3 to 64 stamps, drop those no cell and no lifecycle names,
    /// keeping the order of the rest.
    static func compactedByFullScan(_ row: RowState) -> RowState {
        var r = row
        guard r.stamps.count > 2, r.stamps.count <= 64 else { return r }
        var used = Set(r.cells.compactMap(\.stamp))
        if let l = r.lifecycle { used.insert(l.stamp) }
        guard used.count < r.stamps.count else { return r }
        var remap: [Int: Int] = [:]
        var kept: [Stamp] = []
        for (i, s) in r.stamps.enumerated() where used.contains(i) {
            remap[i] = kept.count
            kept.append(s)
        }
        r.stamps = kept
        for c in r.cells.indices { if let s = r.cells[c].stamp { r.cells[c].stamp = remap[s]! } }
        if let l = r.lifecycle { r.lifecycle = (remap[l.stamp]!, l.deleted) }
        return r
    }

    static func randomRow(_ rng: inout SplitMix64) -> RowState {
        let columns = 1 + Int(rng.next() % 20)
        var row = RowState(columns: columns)
        // From 0 to 70 stamps: below 3 and above 64 nothing is dropped.
        let stamps = Int(rng.next() % 71)
        for k in 0..<stamps {
            row.stamps.append(Stamp(hlc: UInt64(k + 1) << 16, origin: Int(rng.next() % 3), seq: UInt64(k + 1), base: nil, explicitID: nil))
        }
        guard stamps > 0 else { return row }
        // Cells name a few of the stamps (often the first, as a create's do), some none.
        let favourites = (0..<1 + Int(rng.next() % 4)).map { _ in Int(rng.next() % UInt64(stamps)) }
        for c in 0..<columns where rng.next() % 4 != 0 {
            row.cells[c].stamp = rng.next() % 3 == 0 ? Int(rng.next() % UInt64(stamps)) : favourites[Int(rng.next() % UInt64(favourites.count))]
            row.cells[c].value = .text("v\(c)")
        }
        if rng.next() % 2 == 0 { row.lifecycle = (Int(rng.next() % UInt64(stamps)), rng.next() % 2 == 0) }
        return row
    }

    @Test(arguments: 0..<8)
    func leavesWhatAScanOfEveryCellLeaves(seed: UInt64) {
        var rng = SplitMix64(seed: 0xC0_4AC7 &+ seed)
        var dropped = 0, untouched = 0
        for _ in 0..<2_000 {
            let row = Self.randomRow(&rng)
            var compacted = row
            compacted.compact()
            let expected = Self.compactedByFullScan(row)
            #expect(compacted.stamps == expected.stamps)
            #expect(compacted.cells.map(\.stampIndex) == expected.cells.map(\.stampIndex))
            #expect(compacted.lifecycle?.stamp == expected.lifecycle?.stamp && compacted.lifecycle?.deleted == expected.lifecycle?.deleted)
            #expect(compacted.encodeClocks() == expected.encodeClocks())
            if compacted.stamps.count < row.stamps.count { dropped += 1 } else { untouched += 1 }
        }
        // Both outcomes are exercised, and often.
        #expect(dropped > 200 && untouched > 200, "dropped \(dropped), untouched \(untouched)")
    }
}
