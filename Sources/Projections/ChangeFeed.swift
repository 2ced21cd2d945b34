import EventLog
import Foundation
import GRDB

/// What one projection commit applied (or, seen from another process, what the projection
/// applied since the watcher last looked).
public struct ProjectionChange: Sendable {
    /// The projection's cursor after the change: the last seq applied per origin.
    public var cursor: [ReplicaID: Seq]
    /// The events applied, in the order applied (within an origin always in seq order).
    public var events: [Event]
    /// True when the projection was rebuilt from scratch (or replaced by a snapshot's): `events`
    /// is then empty, and a consumer re-reads what it shows.
    public var rebuilt = false

    public init(cursor: [ReplicaID: Seq], events: [Event], rebuilt: Bool = false) {
        self.cursor = cursor
        self.events = events
        self.rebuilt = rebuilt
    }

    /// The entities touched, and their ids.
    public var touched: [Entity: Set<UUID>] {
        var out: [Entity: Set<UUID>] = [:]
        for e in events { out[e.entity, default: []].insert(e.entityID) }
        return out
    }
}

/// Hands each commit of a projection in this process to every subscriber (`Projection.changes`).
final class ChangeHub: @unchecked Sendable {
    private let lock = Lock()
    private var subscribers: [UInt64: AsyncStream<ProjectionChange>.Continuation] = [:]
    private var next: UInt64 = 0

    var isEmpty: Bool { lock.withLock { subscribers.isEmpty } }

    func subscribe() -> AsyncStream<ProjectionChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: ProjectionChange.self, bufferingPolicy: .unbounded)
        let id: UInt64 = lock.withLock {
            next += 1
            subscribers[next] = continuation
            return next
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = self.lock.withLock { self.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    func publish(_ change: ProjectionChange) {
        let targets = lock.withLock { Array(subscribers.values) }
        for c in targets { c.yield(change) }
    }

    func finish() {
        let targets = lock.withLock { () -> [AsyncStream<ProjectionChange>.Continuation] in
            defer { subscribers.removeAll() }
            return Array(subscribers.values)
        }
        for c in targets { c.finish() }
    }
}

/// Follows a store's projection from any process, including one that does not write: it wakes
/// when the projection's files change (inotify on the store directory: the WAL grows at every
/// commit, a rebuild renames a new file in), and at least every `pollInterval` seconds (a
/// filesystem without inotify events, such as NFS), reads the projection's cursor, and hands
/// over the events applied since it last looked, read from the log, in the order they were
/// applied: the projection's commit journal (`projection_commits`) records each commit's runs of
/// seqs, so commits that landed between two looks come in commit order across origins. Events
/// older than the journal keeps (its last 100,000 runs) come first, each origin's in seq order.
///
/// A consumer that restarts from the last cursor it saw (`init(store:from:)`) misses nothing and
/// sees nothing twice: the cursor covers, per origin, every event handed over before it.
public final class ProjectionWatcher: @unchecked Sendable {
    public let store: Store
    /// The longest a change waits to be seen when no filesystem event arrives.
    public var pollInterval: Double = 1
    private var last: [ReplicaID: Seq]
    /// The last journal row handed over.
    private var journalID: Int64 = 0
    private var projection: Projection
    private let stopLock = Lock()
    private var stopRequested = false
    private var streamFailure: (any Error)?
    private let files = DirectoryWatch()

    /// Starts at `from` (what the consumer has seen), or at the projection's cursor now.
    public init(store: Store, from: [ReplicaID: Seq]? = nil) throws {
        self.store = store
        projection = try Projection(readingIfNeeded: store)
        let (cursor, top) = try projection.database.read { db in
            (try Projection.readCursor(db), try Int64.fetchOne(db, sql: "SELECT max(id) FROM projection_commits") ?? 0)
        }
        last = from ?? cursor
        // Starting now, the journal so far is behind us; resuming, it says in which order the
        // events past `from` were applied.
        if from == nil { journalID = top }
        files.add(store.path)
    }

    deinit { try? projection.close() }

    /// Where the watcher stands: per origin, the last seq handed over.
    public var cursor: [ReplicaID: Seq] { last }

    /// What the projection applied past the watcher's cursor, without waiting (nil when nothing).
    public func poll() throws -> ProjectionChange? {
        if !projection.isCurrentFile {
            // A rebuild or a snapshot renamed a new projection file in: read that one from now
            // on (its journal starts over).
            try? projection.close()
            projection = try Projection(readingIfNeeded: store)
            journalID = 0
        }
        typealias Run = (origin: ReplicaID, first: Seq, last: Seq)
        let (now, runs, top) = try projection.database.read { db -> ([ReplicaID: Seq], [Run], Int64) in
            let now = try Projection.readCursor(db)
            let top = try Int64.fetchOne(db, sql: "SELECT max(id) FROM projection_commits") ?? 0
            // A smaller journal than last time: the file was replaced (a rebuild); read it all.
            let after = top < journalID ? 0 : journalID
            var runs: [Run] = []
            for row in try Row.fetchAll(db, sql: "SELECT origin, first_seq, last_seq FROM projection_commits WHERE id > ? ORDER BY id", arguments: [after]) {
                let (ov, fv, lv): (DatabaseValue, DatabaseValue, DatabaseValue) = (row[0], row[1], row[2])
                guard let o = SnapshotSchema.text(ov).flatMap(ReplicaID.init), let f = Int64.fromDatabaseValue(fv), let l = Int64.fromDatabaseValue(lv),
                      f >= 1, l >= f else { continue }  // a malformed row orders nothing; the cursor still covers its events
                runs.append((o, Seq(UInt64(f)), Seq(UInt64(l))))
            }
            return (now, runs, top)
        }
        // What to hand over, in order: first what the journal does not cover (older than it),
        // each origin in seq order; then the journal's runs in the order they were applied.
        var ranges: [Run] = []
        var next = last
        for origin in try store.origins() {
            guard let to = now[origin], to > (last[origin] ?? Seq(0)) else { continue }
            let from = (last[origin] ?? Seq(0)).next
            let firstJournaled = runs.first { $0.origin == origin && $0.last >= from }?.first
            let gapEnd = firstJournaled.map { min(to, Seq($0.rawValue &- 1)) } ?? to
            if gapEnd >= from {
                ranges.append((origin, from, gapEnd))
                next[origin] = gapEnd
            }
        }
        for r in runs {
            guard let to = now[r.origin] else { continue }
            let from = max(r.first, (next[r.origin] ?? Seq(0)).next)
            let end = min(r.last, to)
            if from <= end {
                ranges.append((r.origin, from, end))
                next[r.origin] = end
            }
        }
        journalID = top
        guard !ranges.isEmpty else { return nil }
        let reader = LogReader(store: store)
        var events: [Event] = []
        for r in ranges {
            if let floor = try reader.floor(origin: r.origin), r.first <= floor.lastSeq {
                throw ProjectionError.invalid("origin \(r.origin)'s log here starts after seq \(floor.lastSeq) (a snapshot): the events from seq \(r.first) to it are not in this store's log; start from a cursor at or past it")
            }
            try reader.forEachEvent(origin: r.origin, from: r.first) { e in
                if e.seq > r.last { return false }
                events.append(e)
                return e.seq < r.last
            }
            last[r.origin] = r.last
        }
        return ProjectionChange(cursor: last, events: events)
    }

    /// Every change from now on, as a stream fed by `next` on a thread of its own, which looks
    /// at least every half second whether the consumer stopped iterating. The stream ends then,
    /// or at the first error (a cursor below a log's floor). Use either this or `next`, not both.
    public func changes() -> AsyncStream<ProjectionChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: ProjectionChange.self)
        continuation.onTermination = { [self] _ in stopLock.withLock { stopRequested = true } }
        Thread.detachNewThread { [self] in
            do {
                while !stopLock.withLock({ stopRequested }) {
                    if let change = try next(until: Date().addingTimeInterval(0.5)) { continuation.yield(change) }
                }
            } catch {
                stopLock.withLock { streamFailure = error }
            }
            continuation.finish()
        }
        return stream
    }

    /// What ended the stream `changes()` made, when an error did (nil while it runs, or when the
    /// consumer stopped it).
    public var failure: (any Error)? { stopLock.withLock { streamFailure } }

    /// Waits for the next change (blocking this thread; run it off the cooperative pool) and
    /// returns it, or nil once `deadline` has passed with nothing new.
    public func next(until deadline: Date = .distantFuture) throws -> ProjectionChange? {
        while true {
            if let change = try poll() { return change }
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return nil }
            files.wait(seconds: min(left, pollInterval))
        }
    }
}
