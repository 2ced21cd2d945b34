import EventLog
import Foundation

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
    private let lock = NSLock()
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
/// over the events applied since it last looked, read from the log. Within a commit events come
/// in the order applied; when several commits land between two looks, each origin's events keep
/// their order and origins come in the order the projector takes them (`Store.origins`).
///
/// A consumer that restarts from the last cursor it saw (`init(store:from:)`) misses nothing and
/// sees nothing twice: the cursor covers, per origin, every event handed over before it.
public final class ProjectionWatcher: @unchecked Sendable {
    public let store: Store
    /// The longest a change waits to be seen when no filesystem event arrives.
    public var pollInterval: Double = 1
    private var last: [ReplicaID: Seq]
    private let projection: Projection
    private let files = DirectoryWatch()

    /// Starts at `from` (what the consumer has seen), or at the projection's cursor now.
    public init(store: Store, from: [ReplicaID: Seq]? = nil) throws {
        self.store = store
        projection = try Projection(store: store)
        last = try from ?? projection.cursor()
        files.add(store.path)
    }

    deinit { try? projection.close() }

    /// Where the watcher stands: per origin, the last seq handed over.
    public var cursor: [ReplicaID: Seq] { last }

    /// What the projection applied past the watcher's cursor, without waiting (nil when nothing).
    public func poll() throws -> ProjectionChange? {
        let now = try projection.cursor()
        var events: [Event] = []
        let reader = LogReader(store: store)
        var advanced = false
        for origin in try store.origins() {
            guard let to = now[origin], to > (last[origin] ?? Seq(0)) else { continue }
            let from = (last[origin] ?? Seq(0)).next
            if let floor = try reader.floor(origin: origin), from <= floor.lastSeq {
                throw ProjectionError.invalid("origin \(origin)'s log here starts after seq \(floor.lastSeq) (a snapshot): the events from seq \(from) to it are not in this store's log; start from a cursor at or past it")
            }
            try reader.forEachEvent(origin: origin, from: from) { e in
                if e.seq > to { return false }
                events.append(e)
                return e.seq < to
            }
            last[origin] = to
            advanced = true
        }
        return advanced ? ProjectionChange(cursor: last, events: events) : nil
    }

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
