import EventLog
import Foundation

/// Tells subscribers when what a store durably holds moves, whichever process moved it (an
/// append, a pull, a push received by `serve`): a live sync's own store (the hub's watch streams
/// follow its origin index instead: `WatchFeed`). The store's durable cursor, per origin the last
/// seq fsynced (`log/<origin>/DURABLE`; the tip for a log written before marks existed), which
/// is exactly what a page may ship. It wakes on inotify events in the log directories (each
/// fsync rewrites the origin's mark; a new origin makes a directory) and looks at least every
/// `pollInterval` seconds otherwise. One thread per watcher, however many subscribers; call
/// `stop()` when done (the thread holds the watcher until then).
package final class CursorWatcher: @unchecked Sendable {
    public let store: Store
    private let pollInterval: Double
    private let lock = Lock()
    private var subscribers: [UInt64: AsyncStream<ReplicationCursor>.Continuation] = [:]
    private var nextID: UInt64 = 0
    private var current: ReplicationCursor
    private var stopped = false
    private var thread: Thread?
    /// Stop once the last subscriber goes away.
    private let stopsWhenUnused: Bool

    public init(store: Store, pollInterval: Double = 1, stopsWhenUnused: Bool = false) throws {
        self.store = store
        self.pollInterval = pollInterval
        self.stopsWhenUnused = stopsWhenUnused
        current = try CursorWatcher.durableCursor(store)
        let t = Thread { [weak self] in self?.run() }
        t.name = "logbook.cursor-watcher"
        thread = t
        t.start()
    }

    deinit { stop() }

    /// The durable cursor as last seen.
    public var cursor: ReplicationCursor { lock.withLock { current } }

    /// The durable cursor now, then each time it moves. Ends when the watcher stops.
    public func changes() -> AsyncStream<ReplicationCursor> {
        let (stream, continuation) = AsyncStream.makeStream(of: ReplicationCursor.self, bufferingPolicy: .bufferingNewest(1))
        let id: UInt64? = lock.withLock {
            guard !stopped else { return nil }
            nextID += 1
            subscribers[nextID] = continuation
            continuation.yield(current)
            return nextID
        }
        guard let id else {
            continuation.finish()  // stopped: the subscriber starts over (a new watcher)
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            let unused: Bool = self.lock.withLock {
                self.subscribers.removeValue(forKey: id)
                return self.subscribers.isEmpty
            }
            if unused && self.stopsWhenUnused { self.stop() }
        }
        return stream
    }

    public var isStopped: Bool { lock.withLock { stopped } }

    public func stop() {
        let conts: [AsyncStream<ReplicationCursor>.Continuation] = lock.withLock {
            stopped = true
            defer { subscribers.removeAll() }
            return Array(subscribers.values)
        }
        for c in conts { c.finish() }
    }

    /// Per origin: the durable mark, or the tip where there is none.
    public static func durableCursor(_ store: Store) throws -> ReplicationCursor {
        let reader = LogReader(store: store)
        var c = ReplicationCursor()
        for o in try store.origins() {
            c[o] = try reader.durable(origin: o) ?? reader.tip(origin: o, hashing: false).lastSeq
        }
        return c
    }

    private func run() {
        let files = DirectoryWatch()
        while !lock.withLock({ stopped }) {
            // The log directory, and each origin's (a new origin makes a new one).
            let log = store.layout.log
            files.add(log)
            for name in (try? FileManager.default.contentsOfDirectory(atPath: log)) ?? [] { files.add(log + "/" + name) }
            if let now = try? CursorWatcher.durableCursor(store) {
                let conts: [AsyncStream<ReplicationCursor>.Continuation] = lock.withLock {
                    guard now != current else { return [] }
                    current = now
                    return Array(subscribers.values)
                }
                for c in conts { c.yield(now) }
            }
            files.wait(seconds: pollInterval)
        }
    }
}
