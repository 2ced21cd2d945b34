import EventLog
import Foundation
import Replicator

/// The hub's watch streams (`GET /v1/watch`): each subscriber's durable cursor, as far as its
/// principal may read, now and each time it moves. One thread serves every subscriber.
///
/// What moved comes from the origin index (`OriginIndex.takeMoves`): a receive here publishes
/// its origins as soon as they are durable (`publish`), and the thread wakes on inotify (or every
/// `pollInterval`) for what other writers of the store did. Each moved origin is looked at once,
/// not once per subscriber: the users who may read it are found (its owner, and the owners of
/// its share's member replicas held here), and only their subscribers' cursors change, by that
/// origin alone. A watch therefore costs the hub nothing while the origins it may read are still,
/// however many other origins move, where a walk of every origin for every subscriber at every
/// move grew as their product.
///
/// A scope can also change without its origins moving (a claim confirmed, a member's first
/// frames, a member added or removed). The receive path publishes the origins it confirmed. For
/// the rest, once `scopeVersion` has changed (the owners' record and the shares' membership count
/// their changes), at most every `pollInterval`, each scoped subscriber's cursor is read again
/// from the index, for its origins only (once per set of users), and sent when it differs; and
/// every `resyncInterval` whatever the version says, for what no version here sees (another
/// process's writes to a member's log). Nothing is read for a watch while nothing moves.
final class WatchFeed: @unchecked Sendable {
    /// The users who may read an origin (beside principals without a user, who read every one).
    typealias Readers = @Sendable (ReplicaID) -> Set<String>
    /// A scoped principal's cursor as the index stands (`ReplicaEndpoint.indexedCursor`).
    typealias ScopedCursor = @Sendable (Set<String>) -> ReplicationCursor
    /// A number that changes whenever users' scopes may have changed.
    typealias ScopeVersion = @Sendable () -> UInt64

    private struct Subscriber {
        /// The users whose origins it reads; nil: every origin.
        let users: Set<String>?
        var cursor: ReplicationCursor
        let continuation: AsyncStream<ReplicationCursor>.Continuation
    }

    private let index: OriginIndex
    private let readers: Readers
    private let scopedCursor: ScopedCursor
    private let scopeVersion: ScopeVersion
    private let pollInterval: Double
    /// The longest time between two reads of every scoped subscriber's cursor.
    private let resyncInterval: Double
    /// Cursors given to subscribers so far (each yield), for tests and metrics.
    private var sent = 0
    private let lock = Lock()
    private var subscribers: [UInt64: Subscriber] = [:]
    /// Subscribers by the users they read, and those that read every origin.
    private var byUser: [String: Set<UInt64>] = [:]
    private var unscoped = Set<UInt64>()
    private var nextID: UInt64 = 0
    private var stopped = false
    /// Stop once no subscriber has been here for this long (nil: run until `stop`). Not at once:
    /// a client that reconnects, or watches one request after another, would otherwise start a
    /// feed each time (a thread, an inotify instance and a watch on every origin's directory).
    private let stopsWhenUnusedFor: Double?
    /// Since when no subscriber has been here (nil while one is), on `WatchFeed.now`'s clock.
    private var unusedSince: Double?
    /// What the thread waits on (inotify, or the poll's timeout); `stop` wakes it.
    private let files = DirectoryWatch()
    /// Signalled once the thread has let go of everything it reads (`stop` waits for it).
    private let finished = DispatchSemaphore(value: 0)

    init(index: OriginIndex, readers: @escaping Readers, scopedCursor: @escaping ScopedCursor, scopeVersion: @escaping ScopeVersion = { 0 },
         pollInterval: Double = 1, resyncInterval: Double = 30, stopsWhenUnusedFor: Double? = nil) throws {
        self.index = index
        self.readers = readers
        self.scopedCursor = scopedCursor
        self.scopeVersion = scopeVersion
        self.pollInterval = pollInterval
        self.resyncInterval = resyncInterval
        self.stopsWhenUnusedFor = stopsWhenUnusedFor
        if stopsWhenUnusedFor != nil { unusedSince = Self.now() }
        // Moves are recorded from here on; a subscriber's first cursor is read after this.
        _ = index.takeMoves()
        try index.refresh()
        // Read before any subscriber's first cursor: a change after it is seen as one.
        let version = scopeVersion()
        let finished = self.finished
        let t = Thread { [weak self] in
            self?.run(version: version)
            finished.signal()
        }
        t.name = "logbook.watch-feed"
        t.start()
    }

    // The thread holds the feed while it runs: once this runs, the thread has finished with it.
    deinit { stop(waiting: false) }

    var isStopped: Bool { lock.withLock { stopped } }

    /// How many cursors subscribers were given so far.
    var cursorsSent: Int { lock.withLock { sent } }

    /// The cursor `users` may read (nil: every origin) now, then each time it moves, until the
    /// feed stops. Only the newest cursor is held for a subscriber that does not read. nil when
    /// the feed has stopped (the caller starts another).
    func changes(users: Set<String>?) -> AsyncStream<ReplicationCursor>? {
        let (stream, continuation) = AsyncStream.makeStream(of: ReplicationCursor.self, bufferingPolicy: .bufferingNewest(1))
        let id: UInt64? = lock.withLock {
            guard !stopped else { return nil }
            unusedSince = nil
            nextID += 1
            let now = users.map(scopedCursor) ?? index.cursor()
            subscribers[nextID] = Subscriber(users: users, cursor: now, continuation: continuation)
            if let users {
                for u in users { byUser[u, default: []].insert(nextID) }
            } else {
                unscoped.insert(nextID)
            }
            continuation.yield(now)
            sent += 1
            return nextID
        }
        guard let id else { return nil }
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        return stream
    }

    private func unsubscribe(_ id: UInt64) {
        lock.withLock {
            guard let s = subscribers.removeValue(forKey: id) else { return }
            if let users = s.users {
                for u in users {
                    byUser[u]?.remove(id)
                    if byUser[u]?.isEmpty == true { byUser[u] = nil }
                }
            } else {
                unscoped.remove(id)
            }
            // The thread stops the feed once this has lasted (`stopsWhenUnusedFor`).
            if subscribers.isEmpty && stopsWhenUnusedFor != nil { unusedSince = Self.now() }
        }
    }

    /// Sends what moved in the index since it was last looked at, and `origins` as they stand
    /// (origins whose readers changed though they did not move: claims just confirmed).
    func publish(origins: some Sequence<ReplicaID> = [ReplicaID]()) {
        lock.withLock {
            guard !stopped else { return }
            var moved = index.takeMoves()
            let seen = Set(moved.map(\.0))
            for o in origins where !seen.contains(o) { moved.append((o, index[o])) }
            dispatch(moved)
        }
    }

    /// Gives each moved origin to the subscribers that may read it, then sends every cursor that
    /// changed (under the lock, so that two publishers never send cursors out of order).
    private func dispatch(_ moved: [(ReplicaID, OriginIndex.Entry?)]) {
        guard !moved.isEmpty, !subscribers.isEmpty else { return }
        var changed = Set<UInt64>()
        for (o, e) in moved {
            let seq = e?.durable ?? Seq(0)
            var targets = unscoped
            if !byUser.isEmpty {
                for u in readers(o) { targets.formUnion(byUser[u] ?? []) }
            }
            for id in targets where subscribers[id]?.cursor[o] != seq {
                subscribers[id]?.cursor[o] = seq
                changed.insert(id)
            }
        }
        for id in changed {
            guard let s = subscribers[id] else { continue }
            s.continuation.yield(s.cursor)
            sent += 1
        }
    }

    /// Reads every scoped subscriber's cursor again from the index, once per set of users (under
    /// the lock): a scope that changed without a move of its origins.
    private func resync() {
        var read: [Set<String>: ReplicationCursor] = [:]
        for (id, s) in subscribers {
            guard let users = s.users else { continue }
            let now = read[users] ?? scopedCursor(users)
            read[users] = now
            if now != s.cursor {
                subscribers[id]?.cursor = now
                s.continuation.yield(now)
                sent += 1
            }
        }
    }

    /// Seconds on a clock that only goes forward (a wall clock set back would hold an unused
    /// feed, or a resync, for as long as it went back).
    static func now() -> Double { ProcessInfo.processInfo.systemUptime }

    /// Ends every subscriber's stream and the thread. `waiting`: returns only once the thread has
    /// let go of the feed and what it reads (the store's index, its owners' and shares' records,
    /// whose databases it would otherwise hold open, and close, up to `pollInterval` later: after
    /// a server that embeds it has stopped, and its caller has moved on to the store). At most
    /// `stopWaitSeconds`, for a thread in the middle of a long read.
    func stop(waiting: Bool = true) {
        let conts: [AsyncStream<ReplicationCursor>.Continuation] = lock.withLock {
            stopped = true
            defer {
                subscribers.removeAll()
                byUser.removeAll()
                unscoped.removeAll()
            }
            return subscribers.values.map(\.continuation)
        }
        for c in conts { c.finish() }
        files.wake()
        // Signalled again once seen, for any later stop (a feed stops once, but may be asked twice).
        if waiting, finished.wait(timeout: .now() + Self.stopWaitSeconds) == .success { finished.signal() }
    }

    static let stopWaitSeconds = 10.0

    /// - Parameter version: the scopes' version before the first subscriber.
    private func run(version: UInt64) {
        let log = index.store.layout.log
        // The log directory (a new origin makes a directory in it) and each origin's: listed once
        // here, then each origin the index reports as moved (a new one among them).
        files.add(log)
        for o in (try? index.store.origins()) ?? [] { files.add(log + "/" + o.description) }
        var looked = Self.now(), resynced = Self.now()
        var version = version
        while !lock.withLock({ stopped }) {
            files.wait(seconds: pollInterval)
            // Unused long enough: stopped in the same step as the check, so that no subscriber
            // joins a feed about to stop (`changes` then returns nil and the caller starts another).
            let idle: Bool = lock.withLock {
                if let after = stopsWhenUnusedFor, let since = unusedSince, subscribers.isEmpty,
                   Self.now() - since >= after {
                    stopped = true
                }
                return stopped
            }
            if idle { break }
            // A failed read leaves the index to read everything at its next refresh: the next
            // wake (at most `pollInterval` away) tries again.
            try? index.refresh()
            lock.withLock {
                guard !stopped else { return }
                let moved = index.takeMoves()
                for (o, _) in moved { files.add(log + "/" + o.description) }
                dispatch(moved)
            }
            // Scopes are looked at again at most every `pollInterval`, and only when they may
            // have changed (the version is read first: a change during the look is seen next time).
            let now = Self.now()
            guard now - looked >= pollInterval else { continue }
            looked = now
            let v = scopeVersion()
            guard v != version || now - resynced >= resyncInterval else { continue }
            version = v
            resynced = now
            lock.withLock { if !stopped { resync() } }
        }
    }
}
