import EventLog
import Foundation

/// Tells subscribers when what a store durably holds moves, whichever process moved it (an
/// append, a pull, a push received by `serve`): a live sync's own store (the hub's watch streams
/// follow their endpoint's index: `WatchFeed`). The store's durable cursor, per origin the last
/// seq fsynced (`log/<origin>/DURABLE`, never past the log's end; the tip for a log written
/// before marks existed), which is exactly what a page may ship, kept by an `OriginIndex` that
/// reads again only the origins that changed. It wakes on inotify events in the log directories
/// (each fsync rewrites the origin's mark; a new origin makes a directory) and looks at least
/// every `pollInterval` seconds otherwise. One thread per watcher, however many subscribers; call
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
    /// Each origin's durable seq, read again only for the origins that changed.
    private let index: OriginIndex
    /// What the thread waits on; `stop` wakes it, so that it lets go of the store at once.
    private let files = DirectoryWatch()

    public init(store: Store, pollInterval: Double = 1) throws {
        self.store = store
        self.pollInterval = pollInterval
        index = try OriginIndex(store: store)
        current = index.cursor()
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
            _ = self.lock.withLock { self.subscribers.removeValue(forKey: id) }
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
        files.wake()
    }

    private func run() {
        let log = store.layout.log
        // The log directory (a new origin makes a directory in it) and each origin's: listed
        // once, then each origin the index reports as moved (a new one among them).
        _ = index.takeMoves()
        files.add(log)
        for o in (try? store.origins()) ?? [] { files.add(log + "/" + o.description) }
        // Looked at before the first wait too: what moved since `init` read the cursor.
        while !lock.withLock({ stopped }) {
            // A failed read leaves the index to read everything next time.
            if (try? index.refresh()) != nil {
                for (o, _) in index.takeMoves() { files.add(log + "/" + o.description) }
                let now = index.cursor()
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
