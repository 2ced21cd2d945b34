import EventLog
import Foundation

/// What a store's hub knows of each origin it holds, kept in memory so that a cursor or a page
/// touches only the origins it returns, not every origin of the store: per origin, the last seq
/// durable here (what a page may ship, a cursor says and a watch stream shows) and the
/// floor a snapshot bootstrap or a compaction left (a client behind it must bootstrap).
///
/// It stays true whoever writes the store. `refresh()` asks inotify which origin directories
/// changed since the last look (a local `evctl append`, a pull, this hub's own receives) and
/// reads only those again: their 16-byte durable mark and floor, and their tip when the mark
/// moved to a seq not known here (a mark ahead of the log, kept as evidence of lost frames, is
/// never believed past the log). Where inotify cannot say (polling, another system, a watch the
/// kernel refused, its queue overflowed), `refresh()` reads every origin again: always right,
/// at the cost of the walk this index exists to avoid. A receiver that wrote frames tells the
/// index their new tips (`advance`), so its answer needs no read at all.
///
/// It also keeps which origins' entries changed since they were last taken (`takeMoves`), so that
/// what follows the store's moves (the hub's watch streams) looks at those origins only.
///
/// Safe to use from any thread; `refresh` runs under the index's lock.
package final class OriginIndex: @unchecked Sendable {
    package struct Entry: Sendable, Equatable {
        /// The last seq durable here.
        package var durable: Seq
        /// The seq the log starts after (nil: it starts at seq 1).
        package var floor: Seq?
    }

    package let store: Store
    private let lock = Lock()
    private var entries: [ReplicaID: Entry] = [:]
    /// The origins whose entry changed (or went) since `takeMoves` last took them: at most one
    /// per origin the store holds or held. Kept once `takeMoves` has been called.
    private var moves = Set<ReplicaID>()
    private var tracksMoves = false
    private let watch: DirectoryWatch
    /// Set when the next refresh must read every origin.
    private var everything = true
    /// Set by `reread` when a directory could not be watched.
    private var unwatched = false
    private let reader: LogReader

    /// Reads every origin of `store` once.
    /// - Parameter watching: how changes are found (`.polling`: every refresh reads every origin).
    package init(store: Store, watching: ChangeWatching = .selected) throws {
        self.store = store
        reader = LogReader(store: store)
        watch = DirectoryWatch(watching)
        try refresh()
    }

    /// Brings the index up to date with the store's files: the origins inotify says changed, or
    /// every origin when it cannot say.
    /// - Throws: `LogError` when an origin's files cannot be read.
    package func refresh() throws {
        try lock.withLock {
            let log = store.layout.log
            guard let changes = watch.changes(), !everything else { return try rescan() }
            var dirty = Set<ReplicaID>()
            for (dir, name) in changes {
                if dir == log && name.isEmpty {
                    // The log directory itself went (its watch with it): look at everything.
                    everything = true
                } else if dir == log {
                    // A new origin's directory (or one removed): named in the log directory.
                    if let o = ReplicaID(name), o.description == name { dirty.insert(o) }
                } else if let o = ReplicaID(String(dir.dropFirst(log.count + 1))) {
                    dirty.insert(o)
                }
            }
            if everything { return try rescan() }
            // Until every changed origin is read, the next refresh looks at everything (the
            // events are consumed: a read that fails must not lose them).
            everything = true
            unwatched = false
            for o in dirty { try reread(o) }
            everything = unwatched
        }
    }

    /// Makes the next `refresh` read every origin (a write failed part-way: what was read of
    /// the store meanwhile may not hold).
    package func invalidate() {
        lock.withLock { everything = true }
    }

    /// Reads every origin (under the lock).
    private func rescan() throws {
        everything = true  // until it succeeds
        let log = store.layout.log
        // Watched before reading, so a change after the read is reported at the next refresh.
        var watched = watch.add(log)
        var fresh: [ReplicaID: Entry] = [:]
        for o in try store.origins() {
            watched = watch.add(log + "/" + o.description) && watched
            if let e = try read(o, known: nil) { fresh[o] = e }
        }
        if tracksMoves {
            for (o, e) in fresh where entries[o] != e { moves.insert(o) }
            for o in entries.keys where fresh[o] == nil { moves.insert(o) }
        }
        entries = fresh
        // Without a watch on every directory, changes could go unreported: look at all next time.
        everything = !watched
    }

    /// Reads `origin` again (under the lock).
    private func reread(_ origin: ReplicaID) throws {
        let path = store.layout.log + "/" + origin.description
        guard FileManager.default.fileExists(atPath: path) else {
            set(origin, nil)  // purged
            return
        }
        let watched = watch.add(path)
        set(origin, try read(origin, known: entries[origin]))
        if !watched { unwatched = true }
    }

    /// The entry of `origin` from its files; `known` is what the index holds now. The tip is
    /// read only when the mark says something not known here (or there is no mark: a log
    /// written before marks existed).
    private func read(_ origin: ReplicaID, known: Entry?) throws -> Entry? {
        let floor = try reader.floor(origin: origin)?.lastSeq
        let mark = reader.durable(origin: origin)
        let durable: Seq
        if let mark, let known, mark == known.durable {
            durable = mark
        } else {
            let tip = try reader.tip(origin: origin, hashing: false).lastSeq
            durable = mark.map { min($0, tip) } ?? tip
        }
        guard durable.rawValue > 0 || floor != nil else { return nil }
        return Entry(durable: durable, floor: floor)
    }

    /// Records that `tips` are durable here now (a receive that synced them).
    package func advance(_ tips: [ReplicaID: Seq]) {
        lock.withLock {
            for (o, s) in tips {
                var e = entries[o] ?? Entry(durable: Seq(0), floor: nil)
                e.durable = max(e.durable, s)
                set(o, e)
            }
        }
    }

    /// The origins whose entry changed since the last call, with their entry now (nil: the store
    /// holds nothing of it any more). The first call starts the record and returns nothing: call
    /// it once, then read the index whole (`cursor`), then take the moves from there on. One
    /// taker: each move is returned once.
    package func takeMoves() -> [(ReplicaID, Entry?)] {
        lock.withLock {
            guard tracksMoves else {
                tracksMoves = true
                return []
            }
            defer { moves.removeAll(keepingCapacity: true) }
            return moves.map { ($0, entries[$0]) }
        }
    }

    /// Sets the entry of `origin`, recording a move when it changes (under the lock).
    private func set(_ origin: ReplicaID, _ entry: Entry?) {
        if entries[origin] != entry {
            entries[origin] = entry
            if tracksMoves { moves.insert(origin) }
        }
    }

    /// The entry of `origin` (nil: the store holds nothing of it).
    package subscript(origin: ReplicaID) -> Entry? { lock.withLock { entries[origin] } }

    /// Whether a frame of `origin` is durable here, as far as the index knows.
    package func holds(_ origin: ReplicaID) -> Bool { self[origin].map { $0.durable.rawValue > 0 } ?? false }

    /// The durable cursor of every origin, or of those `including` accepts.
    package func cursor(including: ((ReplicaID) -> Bool)? = nil) -> ReplicationCursor {
        lock.withLock {
            var c = ReplicationCursor()
            for (o, e) in entries where including?(o) ?? true { c[o] = e.durable }
            return c
        }
    }

    /// The durable cursor of `origins` only.
    package func cursor(of origins: some Sequence<ReplicaID>) -> ReplicationCursor {
        lock.withLock {
            var c = ReplicationCursor()
            for o in origins { if let e = entries[o] { c[o] = e.durable } }
            return c
        }
    }

    /// How many origins the store holds.
    package var count: Int { lock.withLock { entries.count } }

    /// What a page past `since` must read, sorted by origin: the origins (of `origins`, or all)
    /// with durable frames past `since`, each with its durable seq.
    /// - Throws: `TransferFailure.cursorExpired` when one of them (or any origin of `origins`)
    ///   starts after a floor past what `since` holds.
    package func moved(since: ReplicationCursor, among origins: Set<ReplicaID>?) throws -> [(ReplicaID, Seq)] {
        try lock.withLock {
            var out: [(ReplicaID, Seq)] = []
            func consider(_ o: ReplicaID, _ e: Entry) throws {
                if let floor = e.floor, since[o] < floor {
                    throw TransferFailure.cursorExpired("the log of origin \(o) here starts after seq \(floor) (the receiver holds through \(since[o])); "
                                                        + "the receiver must bootstrap from a snapshot (evctl pull does)")
                }
                if e.durable > since[o] { out.append((o, e.durable)) }
            }
            if let origins {
                for o in origins { if let e = entries[o] { try consider(o, e) } }
            } else {
                for (o, e) in entries { try consider(o, e) }
            }
            return out.sorted { $0.0 < $1.0 }
        }
    }
}
