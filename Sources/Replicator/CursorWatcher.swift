import EventLog
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Tells subscribers when what a store durably holds moves, whichever process moved it (an
/// append, a pull, a push received by `serve`): the store's durable cursor, per origin the last
/// seq fsynced (`log/<origin>/DURABLE`; the tip for a log written before marks existed), which
/// is exactly what a page may ship. It wakes on inotify events in the log directories (each
/// fsync rewrites the origin's mark; a new origin makes a directory) and looks at least every
/// `pollInterval` seconds otherwise. One thread per watcher, however many subscribers; call
/// `stop()` when done (the thread holds the watcher until then).
public final class CursorWatcher: @unchecked Sendable {
    public let store: Store
    private let pollInterval: Double
    private let lock = NSLock()
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
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        defer { if fd >= 0 { close(fd) } }
        var watched = Set<String>()
        let mask = UInt32(IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE)
        func watchDirectories() {
            guard fd >= 0 else { return }
            let log = store.path + "/log"
            var dirs = [log]
            if let names = try? FileManager.default.contentsOfDirectory(atPath: log) { dirs += names.map { log + "/" + $0 } }
            for d in dirs where !watched.contains(d) {
                if inotify_add_watch(fd, d, mask) >= 0 { watched.insert(d) }
            }
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !lock.withLock({ stopped }) {
            watchDirectories()
            if let now = try? CursorWatcher.durableCursor(store) {
                let conts: [AsyncStream<ReplicationCursor>.Continuation] = lock.withLock {
                    guard now != current else { return [] }
                    current = now
                    return Array(subscribers.values)
                }
                for c in conts { c.yield(now) }
            }
            if fd >= 0 {
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                _ = Glibc.poll(&p, 1, Int32(max(1, pollInterval * 1000)))
                while buffer.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
            } else {
                usleep(useconds_t(pollInterval * 1_000_000))
            }
        }
    }
}
