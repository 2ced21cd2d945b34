import EventLog
import Foundation

/// An event's place in the conflict order: (hlc, origin, seq), compared in that order; the
/// total order every replica computes alike (DESIGN rule 1).
struct Stamp: Equatable {
    var hlc: UInt64
    /// Index into the projection's origin table (`projection_origins`), local to this file.
    var origin: Int
    var seq: UInt64
    /// The entity version the author had seen (nil when the event did not say).
    var base: UInt64?
    /// The writer-supplied event id, when there was one (else it is derived from origin and seq).
    var explicitID: UUID?
}

/// One entity of the log: its kind and id.
struct EntityRef: Hashable {
    var entity: Entity
    var id: UUID
}

/// The merge state of one entity row: column values, the stamp that set each, the delete/restore
/// winner, the earliest create and the newest event. Kept with the row in `_clocks`.
struct RowState {
    /// One column: its value, and which event set it.
    struct Cell {
        var value: FieldValue? = nil
        /// Index into `stamps` of the event whose value the column holds, or -1. (Compacting
        /// keeps `stamps` to the events columns and lifecycle refer to: a few dozen at most.)
        var stampIndex: Int32 = -1

        var stamp: Int? {
            get { stampIndex >= 0 ? Int(stampIndex) : nil }
            set { stampIndex = newValue.map { Int32(clamping: $0) } ?? -1 }
        }
    }

    /// Per column, value and stamp side by side: merging reads both for every field, and one
    /// array is one fetch from memory where two arrays were two (half of merging was waiting for them).
    var cells: [Cell]
    var stamps: [Stamp] = []
    /// The greatest delete or restore event, and whether it deleted.
    var lifecycle: (stamp: Int, deleted: Bool)?
    /// hlc of the earliest create event (nil until one arrives: an orphan update is kept all the same).
    var createdHLC: UInt64?
    /// hlc of the newest event applied: the entity's version.
    var version: UInt64 = 0
    var existsInDatabase = false
    /// The row was purged (`Projection.purge`): only its merge state is kept, in projection_purged.
    var purged = false
    /// Whose events the row is made of (docs/PROJECTION.md, "Shares"): `Projector.privateScope`,
    /// a share's index in the projector, or `Projector.noScope` for a row no event made yet.
    var scope: Int32 = Projector.noScope

    init(columns: Int) {
        cells = Array(repeating: Cell(), count: columns)
    }

    var deleted: Bool { lifecycle?.deleted ?? false }
    var deletedHLC: UInt64? { lifecycle.flatMap { $0.deleted ? stamps[$0.stamp].hlc : nil } }

    /// The index of `s` in `stamps`, adding it if new.
    mutating func intern(_ s: Stamp) -> Int {
        if let i = stamps.firstIndex(where: { $0.hlc == s.hlc && $0.origin == s.origin && $0.seq == s.seq }) { return i }
        if stamps.isEmpty { stamps.reserveCapacity(4) }  // one allocation, not one per doubling
        stamps.append(s)
        return stamps.count - 1
    }

    /// Drops stamps no column or lifecycle refers to any more (keeps `_clocks` small).
    mutating func compact() {
        guard stamps.count > 2, stamps.count <= 64 else { return }
        var used: UInt64 = 0
        if let l = lifecycle { used |= 1 << UInt64(l.stamp & 63) }
        // The scan stops once every stamp is seen used (most calls: the stamp that lost a column
        // still holds others), so it reads only the first cells; the rest of a row's cells are
        // cold in memory, and reading them all was most of this function's time.
        let all: UInt64 = stamps.count == 64 ? ~0 : (1 << UInt64(stamps.count)) - 1
        // By index, reading only the stamp: iterating the cells would copy each value (counting a
        // reference to every text, memory merging otherwise never touches).
        for c in cells.indices where cells[c].stampIndex >= 0 {
            used |= 1 << UInt64(cells[c].stampIndex & 63)
            if used == all { return }
        }
        guard used.nonzeroBitCount < stamps.count else { return }
        // In place, with the new places on the stack: this runs for most events, and two arrays
        // allocated each time were a good part of merging.
        withUnsafeTemporaryAllocation(of: Int.self, capacity: stamps.count) { remap in
            var kept = 0
            for i in stamps.indices {
                guard used & (1 << UInt64(i)) != 0 else { continue }
                remap[i] = kept
                if kept != i { stamps[kept] = stamps[i] }
                kept += 1
            }
            stamps.removeLast(stamps.count - kept)
            for c in cells.indices { if let s = cells[c].stamp { cells[c].stamp = remap[s] } }
            if let l = lifecycle { lifecycle = (remap[l.stamp], l.deleted) }
        }
    }

    // MARK: `_clocks` encoding (see docs/FORMAT.md, "Projection clocks")

    func encodeClocks() -> [UInt8] {
        var w: [UInt8] = []
        encodeClocks(appendingTo: &w)
        return w
    }

    /// Encodes after what `w` holds (a batch's buffer of row texts).
    func encodeClocks(appendingTo w: inout [UInt8]) {
        w.reserveCapacity(w.count + 16 + stamps.count * 14 + cells.count * 2)
        func varint(_ v: UInt64) {
            var v = v
            while v >= 0x80 {
                w.append(UInt8(truncatingIfNeeded: v) | 0x80)
                v >>= 7
            }
            w.append(UInt8(v))
        }
        w.append(1)  // clocks format version
        // Clocks are stored as distances (from the row's version, from the event's own hlc), which
        // are small numbers: a stamp takes about eight bytes instead of thirty.
        varint(createdHLC.map { version &- $0 &+ 1 } ?? 0)
        varint(UInt64(stamps.count))
        for s in stamps {
            varint(version &- s.hlc)
            varint(UInt64(s.origin))
            varint(s.seq)
            switch s.base {
            case nil: varint(0)
            case 0?: varint(1)
            case let b?: varint(zigzag(Int64(bitPattern: s.hlc &- b)) &+ 2)
            }
            if let id = s.explicitID {
                w.append(1)
                withUnsafeBytes(of: id.uuid) { w.append(contentsOf: $0) }
            } else {
                w.append(0)
            }
        }
        if let l = lifecycle {
            varint(UInt64(l.stamp) * 2 + 2 + (l.deleted ? 1 : 0))
        } else {
            varint(0)
        }
        var set = 0
        for c in cells.indices where cells[c].stampIndex >= 0 { set += 1 }
        varint(UInt64(set))
        for c in cells.indices {
            guard let s = cells[c].stamp else { continue }
            varint(UInt64(c))
            varint(UInt64(s))
        }
    }

    /// Decodes a row's `_clocks`, which another process may have written: every count and index
    /// is checked before it is used (a stamp's origin against the `origins` the projection's
    /// origin table holds), and a value no writer makes is `damagedClocks`, never a trap.
    static func decodeClocks(_ bytes: [UInt8], columns: Int, version: UInt64, origins: Int) throws -> RowState {
        var r = RowState(columns: columns)
        r.version = version
        var i = 0
        func varint() throws -> UInt64 {
            var result: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                guard i < bytes.count, shift < 64 else { throw ProjectionError.damagedClocks }
                let b = bytes[i]
                i += 1
                result |= UInt64(b & 0x7F) << shift
                if b < 0x80 { return result }
                shift += 7
            }
        }
        /// A varint that must be below `bound` (a count or an index), as an `Int`.
        func below(_ bound: Int) throws -> Int {
            let v = try varint()
            guard v < UInt64(max(0, bound)) else { throw ProjectionError.damagedClocks }
            return Int(v)
        }
        guard bytes.first == 1 else { throw ProjectionError.damagedClocks }
        i = 1
        let created = try varint()
        r.createdHLC = created == 0 ? nil : version &- (created - 1)
        let n = try below(bytes.count + 1)
        for _ in 0..<n {
            let hlc = version &- (try varint()), origin = try below(origins), seq = try varint(), b = try varint()
            let base: UInt64? = b == 0 ? nil : (b == 1 ? 0 : hlc &- UInt64(bitPattern: unzigzag(b - 2)))
            guard i < bytes.count else { throw ProjectionError.damagedClocks }
            var explicit: UUID?
            if bytes[i] == 1 {
                guard i + 17 <= bytes.count else { throw ProjectionError.damagedClocks }
                explicit = bytes[(i + 1)..<(i + 17)].withUnsafeBytes { UUID(bytes: $0) }
                i += 17
            } else {
                i += 1
            }
            r.stamps.append(Stamp(hlc: hlc, origin: origin, seq: seq, base: base, explicitID: explicit))
        }
        // 0: no lifecycle; else 2 + stamp * 2 + deleted (1 is never written).
        let l = try varint()
        if l > 0 {
            guard l >= 2, (l - 2) / 2 < UInt64(r.stamps.count) else { throw ProjectionError.damagedClocks }
            r.lifecycle = (Int((l - 2) / 2), (l - 2) % 2 == 1)
        }
        let m = try below(bytes.count + 1)
        for _ in 0..<m {
            let c = try below(columns), s = try below(r.stamps.count)
            r.cells[c].stamp = s
        }
        return r
    }
}

/// Errors of the projection layer.
public enum ProjectionError: Error, CustomStringConvertible {
    case damagedClocks
    case database(String)
    case notFound(String)
    case invalid(String)

    public var description: String {
        switch self {
        case .damagedClocks: "a row's _clocks value is damaged; run `evctl replay --rebuild`"
        case .database(let m): "projection database: \(m)"
        case .notFound(let m): m
        case .invalid(let m): m
        }
    }
}

@inline(__always) private func zigzag(_ v: Int64) -> UInt64 { UInt64(bitPattern: (v << 1) ^ (v >> 63)) }
@inline(__always) private func unzigzag(_ v: UInt64) -> Int64 { Int64(bitPattern: v >> 1) ^ -Int64(bitPattern: v & 1) }
