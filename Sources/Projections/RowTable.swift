import CPrefetch
import Foundation

/// The projector's rows by key: a hash table (open addressing, linear probing, at most three
/// quarters full) whose slots the merging thread can ask the CPU to fetch ahead of time.
///
/// Why not a `Dictionary`: merging a large log is mostly waiting for memory. Each event looks up
/// its row in a table far larger than the caches, then reads the row's cells and stamps, each a
/// fetch from memory; a profile of a rebuild put about a third of the merging thread on those
/// loads. Here `prefetch(hash:)` starts the fetch of an event's slot a few events ahead, and
/// `prefetchRow(_:hash:)` that of its row's cells and stamps a little later, so they arrive
/// while the events before are merged.
///
/// Keys are hashed with `Hasher` (seeded per process), as a `Dictionary` hashes them: ids come
/// from peers, and crafted ids must not share a slot whatever the seed.
struct RowTable {
    typealias Key = Projector.Key

    /// A slot's hash, or `empty`. A key whose hash is `empty` is stored as `empty + 1`.
    private var hashes: [Int]
    private var keys: [Key]
    /// The rows, by slot (a free slot holds an empty row). Changed in place by the projector
    /// through `values[slot]`, for a slot `slot(of:hash:)` or `slot(inserting:hash:columns:)` gave.
    var values: [RowState]
    private var mask: Int
    private(set) var count = 0

    private static let empty = Int.min
    private static let noKey = Key(table: -1, id: UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)))
    private static let minimumCapacity = 16

    init(capacity rows: Int = 0) {
        self.init(slots: RowTable.slots(for: rows))
    }

    private init(slots: Int) {
        hashes = Array(repeating: RowTable.empty, count: slots)
        keys = Array(repeating: RowTable.noKey, count: slots)
        values = Array(repeating: RowState(columns: 0), count: slots)
        mask = slots - 1
    }

    /// A power of two with room for `rows` at three quarters full.
    private static func slots(for rows: Int) -> Int {
        var n = minimumCapacity
        while n / 4 * 3 < rows { n *= 2 }
        return n
    }

    /// The hash a key is stored under (pass it back to the lookups).
    @inline(__always)
    static func hash(_ key: Key) -> Int {
        let h = key.hashValue
        return h == empty ? empty + 1 : h
    }

    var isEmpty: Bool { count == 0 }

    /// The slot holding `key`, or nil; `hash` must be `RowTable.hash(key)` (under another, a
    /// key held is not found).
    @inline(__always)
    func slot(of key: Key, hash: Int) -> Int? {
        var i = hash & mask
        while true {
            let h = hashes[i]
            if h == RowTable.empty { return nil }
            if h == hash && keys[i] == key { return i }
            i = (i + 1) & mask
        }
    }

    /// The slot holding `key`, made (with an empty row of `columns` columns) if there is none.
    @inline(__always)
    mutating func slot(inserting key: Key, hash: Int, columns: Int) -> Int {
        if let i = slot(of: key, hash: hash) { return i }
        return insertNew(key, hash: hash, value: RowState(columns: columns))
    }

    /// Adds `key`, which the table does not hold, under `hash` (`RowTable.hash(key)`); returns its slot.
    mutating func insertNew(_ key: Key, hash: Int, value: consuming RowState) -> Int {
        if (count + 1) > (mask + 1) / 4 * 3 { grow() }
        var i = hash & mask
        while hashes[i] != RowTable.empty { i = (i + 1) & mask }
        hashes[i] = hash
        keys[i] = key
        values[i] = consume value
        count += 1
        return i
    }

    /// The key at an occupied slot.
    func key(at slot: Int) -> Key { keys[slot] }

    /// The occupied slots, in slot order.
    var slots: [Int] {
        var out: [Int] = []
        out.reserveCapacity(count)
        for i in hashes.indices where hashes[i] != RowTable.empty { out.append(i) }
        return out
    }

    subscript(key: Key) -> RowState? {
        get { slot(of: key, hash: RowTable.hash(key)).map { values[$0] } }
        set {
            let h = RowTable.hash(key)
            if let i = slot(of: key, hash: h) {
                if let newValue { values[i] = newValue } else { remove(at: i) }
            } else if let newValue {
                _ = insertNew(key, hash: h, value: newValue)
            }
        }
    }

    /// Removes `key`'s row, if any.
    mutating func removeValue(forKey key: Key) {
        if let i = slot(of: key, hash: RowTable.hash(key)) { remove(at: i) }
    }

    /// Empties slot `i`, moving back the entries after it that their probe let move (so every
    /// key stays reachable from its home slot without gaps).
    private mutating func remove(at slot: Int) {
        var hole = slot
        var j = slot
        while true {
            j = (j + 1) & mask
            let h = hashes[j]
            if h == RowTable.empty { break }
            let home = h & mask
            // The entry at j stays if its home lies cyclically in (hole, j].
            let stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j)
            if stays { continue }
            hashes[hole] = h
            keys[hole] = keys[j]
            values.swapAt(hole, j)
            hole = j
        }
        hashes[hole] = RowTable.empty
        keys[hole] = RowTable.noKey
        values[hole] = RowState(columns: 0)
        count -= 1
    }

    mutating func removeAll(keepingCapacity: Bool) {
        guard keepingCapacity else {
            self = RowTable()
            return
        }
        for i in hashes.indices where hashes[i] != RowTable.empty {
            hashes[i] = RowTable.empty
            keys[i] = RowTable.noKey
            values[i] = RowState(columns: 0)
        }
        count = 0
    }

    /// Makes room for `rows` rows without growing again.
    mutating func reserveCapacity(_ rows: Int) {
        let want = RowTable.slots(for: rows)
        if want > mask + 1 { rehash(to: want) }
    }

    private mutating func grow() { rehash(to: (mask + 1) * 2) }

    /// Moves every entry into a table of `slots` slots (rows moved, not copied).
    private mutating func rehash(to slots: Int) {
        var bigger = RowTable(slots: slots)
        for i in hashes.indices where hashes[i] != RowTable.empty {
            var j = hashes[i] & bigger.mask
            while bigger.hashes[j] != RowTable.empty { j = (j + 1) & bigger.mask }
            bigger.hashes[j] = hashes[i]
            bigger.keys[j] = keys[i]
            swap(&bigger.values[j], &values[i])
        }
        bigger.count = count
        self = bigger
    }

    // MARK: Fetching ahead
    //
    // `prefetch(hash:)` and `prefetchRow(_:hash:)` are `mutating` though they change nothing: the
    // merge calls them on a class's stored table, and a non-mutating call there copied the table
    // (a retain and a release of each of its three arrays, twice an event: a tenth of the merging
    // thread's time), where a mutating one works on it in place.

    /// Starts fetching the home slot of `hash` (its hash, key and row), without waiting.
    @inline(__always)
    mutating func prefetch(hash: Int) {
        let i = hash & mask
        hashes.withUnsafeBufferPointer { logbook_prefetch($0.baseAddress! + i) }
        keys.withUnsafeBufferPointer { logbook_prefetch($0.baseAddress! + i) }
        values.withUnsafeBufferPointer { logbook_prefetch($0.baseAddress! + i) }
    }

    /// Starts fetching the row and key at `slot` (an occupied one), without waiting.
    @inline(__always)
    func prefetch(slot i: Int) {
        keys.withUnsafeBufferPointer { logbook_prefetch($0.baseAddress! + i) }
        values.withUnsafeBufferPointer { rows in
            logbook_prefetch(rows.baseAddress! + i)
            logbook_prefetch(UnsafeRawPointer(rows.baseAddress! + i) + (MemoryLayout<RowState>.size - 1))
        }
    }

    /// Starts fetching the cells and stamps of the row at `slot` (best after `prefetch(slot:)`
    /// had time to bring the row in). The arrays' storage is found by reading the row's bytes,
    /// not the arrays (which would count a reference, a write to the very memory being fetched);
    /// a prefetch of any address is harmless, so this is a hint whatever the layout.
    @inline(__always)
    func prefetchStorage(slot i: Int) {
        values.withUnsafeBufferPointer { rows in
            // A real read of the row's bytes (unlike the prefetches): only within the table.
            guard rows.indices.contains(i) else { return }
            let row = UnsafeRawPointer(rows.baseAddress! + i)
            logbook_prefetch(UnsafeRawPointer(bitPattern: row.loadUnaligned(fromByteOffset: RowTable.cellsOffset, as: UInt.self)))
            logbook_prefetch(UnsafeRawPointer(bitPattern: row.loadUnaligned(fromByteOffset: RowTable.stampsOffset, as: UInt.self)))
        }
    }

    private static let cellsOffset = MemoryLayout<RowState>.offset(of: \RowState.cells) ?? 0
    private static let stampsOffset = MemoryLayout<RowState>.offset(of: \RowState.stamps) ?? 0

    /// Starts fetching the cells and stamps of `key`'s row, if the table holds it (best after
    /// `prefetch(hash:)` had time to bring the slot in): `prefetchStorage(slot:)` of its slot.
    @inline(__always)
    mutating func prefetchRow(_ key: Key, hash: Int) {
        guard let i = slot(of: key, hash: hash) else { return }
        prefetchStorage(slot: i)
    }
}
