import EventLog
import Foundation
import Projections

/// The other end of an exchange, as the sessions see it. `HTTPTransport` (HTTP/) is one;
/// tests use others to cut pages off and duplicate them. Methods throw `TransferFailure`; any
/// other error is taken as permanent.
public protocol ReplicaTransport: Sendable {
    /// The peer's cursor.
    func cursor() async throws -> ReplicationCursor
    /// A page of the frames the peer holds past `since`, as decoded, and the bytes it took.
    func page(since: ReplicationCursor, limits: PageLimits) async throws -> (FramePage.Decoded, Int)
    /// Sends a page; returns what the peer appended and its cursor afterwards.
    func push(_ page: FramePage) async throws -> (ReceiveResult, ReplicationCursor)
    /// Writes a snapshot of the peer (projection and the log position it covers) to `path`.
    func snapshot(to path: String) async throws
}

extension ReplicaTransport {
    public func snapshot(to path: String) async throws {
        throw TransferFailure.permanent("this peer cannot send a snapshot")
    }
}

/// How far a transfer has come, for progress on a terminal.
public struct TransferProgress: Sendable, Equatable {
    public var pages: Int
    public var frames: Int
    public var events: Int
    public var bytes: Int
}

/// Runs pull and push sessions against a transport.
public enum Replication {
    /// Pulls everything `peer` holds past `projected`'s cursor, page by page, verifying and
    /// appending each page as it arrives; projects what arrived at the end (also when the
    /// session fails partway, so what was kept is visible).
    /// - Parameter checkingOwnTip: ask for the peer's frame at the store's tip of its own log
    ///   and compare it with the store's (`PullSession`'s `ownTip`): a fork of that log is named
    ///   even where the peer holds it as far as the store does. One frame more on the wire per
    ///   pull; a follower compares at each connection's first exchange only.
    public static func pull(from peer: any ReplicaTransport, into projected: ProjectedStore,
                            limits: PageLimits = PageLimits(), retry: RetryPolicy = RetryPolicy(), checkingOwnTip: Bool = true,
                            progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> TransferSummary {
        var received = false
        // Share logs declined by earlier sessions (and purged ones) are not asked for again;
        // membership logs are (their declines hold for one session).
        let (local, tip) = try projected.exclusive { () throws -> (ReplicationCursor, LogTip) in
            projected.appender.beginReceivingSession()
            return (try projected.appender.receivePosition(), projected.appender.tip)
        }
        let ownTip = checkingOwnTip && projected.store.replicaID.isKeyDerived ? tip : nil
        let outcome = await runPull(peer, local: local, own: projected.store.replicaID, ownTip: ownTip, limits: limits, retry: retry, progress: progress,
                                    receive: { frames in
                                        let r = try projected.receive(frames)
                                        if r.frames > 0 { received = true }
                                        return r
                                    }, cursor: { try projected.exclusive { try projected.appender.receivePosition() } },
                                    joined: { projected.exclusive { projected.appender.sharesJoinedAfterDeclining } })
        if received && projected.projects { try projected.catchUp() }
        return try outcome.get()
    }

    /// Pulls into `store`, opening it for writing only once a page brings frames (so a pull with
    /// nothing new takes no lock and touches no file), and closing it afterwards. When the peer
    /// answers "cursor expired" (it no longer holds the log from this store's cursor) and
    /// `bootstrap` is set, the store is bootstrapped from the peer's snapshot (`Snapshot.install`)
    /// and the pull goes on from the snapshot's cursor.
    /// - Parameter lockWait: how long to wait while another process (such as `evctl serve` on this
    ///   store, which holds the lock briefly after each push) holds the writer lock.
    /// - Parameter checkingOwnTip: as for the pull into a `ProjectedStore`.
    public static func pull(from peer: any ReplicaTransport, store: Store, project: Bool = true, bootstrap: Bool = true,
                            limits: PageLimits = PageLimits(), retry: RetryPolicy = RetryPolicy(), lockWait: Double = 2,
                            checkingOwnTip: Bool = true,
                            recovered: ((RecoveryReport) -> Void)? = nil,
                            progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> TransferSummary {
        var bootstrapped = false
        while true {
            let outcome = try await pullOnce(from: peer, store: store, project: project, limits: limits, retry: retry,
                                             lockWait: lockWait, checkingOwnTip: checkingOwnTip, recovered: recovered, progress: progress)
            if case .failure(let f as TransferFailure) = outcome, f.code == .cursorExpired, bootstrap, !bootstrapped {
                let file = store.layout.snapshotIncoming
                defer { try? FileManager.default.removeItem(atPath: file) }
                try await peer.snapshot(to: file)
                try await Blocking.run { try Snapshot.install(file, into: store, lockWait: lockWait) }
                bootstrapped = true
                continue
            }
            var summary = try outcome.get()
            summary.bootstrapped = bootstrapped
            return summary
        }
    }

    private static func pullOnce(from peer: any ReplicaTransport, store: Store, project: Bool, limits: PageLimits, retry: RetryPolicy,
                                 lockWait: Double, checkingOwnTip: Bool, recovered: ((RecoveryReport) -> Void)?,
                                 progress: (@Sendable (TransferProgress) -> Void)?) async throws -> Result<TransferSummary, any Error> {
        var projected: ProjectedStore?
        var appender: LogAppender?
        func receiver() throws -> LogAppender {
            if let a = appender ?? projected?.appender { return a }
            if project {
                let p = try ProjectedStore.open(store: store, waitingUpTo: lockWait)
                projected = p
                recovered?(p.appender.recovery)
                return p.appender
            }
            let a = try retryingWhileLocked(upTo: lockWait) { try LogAppender.opening(store) }
            appender = a
            recovered?(a.recovery)
            return a
        }
        // Share logs declined by earlier sessions (and purged ones) are not asked for again.
        let local = try store.cursor().merged(with: ReplicationCursor(ShareDirectory.declinedOrPurgedLogs(store)))
        // Read without the lock: a tip that moved since is not at `local`, and is not checked.
        let ownTip = checkingOwnTip && store.replicaID.isKeyDerived ? (try? LogReader(store: store).tip(origin: store.replicaID)).flatMap { $0.lastHash == .zero ? nil : $0 } : nil
        let outcome = await runPull(peer, local: local, own: store.replicaID, ownTip: ownTip, limits: limits, retry: retry, progress: progress,
                                    receive: { try receiver().receive($0) }, cursor: { try receiver().receivePosition() },
                                    joined: { (appender ?? projected?.appender)?.sharesJoinedAfterDeclining ?? 0 })
        try await Blocking.run {
            if let projected {
                defer { try? projected.close() }
                try projected.projection.catchUp()
            }
            try appender?.close()
        }
        return outcome
    }

    private static func runPull(_ peer: any ReplicaTransport, local: ReplicationCursor, own: ReplicaID, ownTip: LogTip?, limits: PageLimits, retry: RetryPolicy,
                                progress: (@Sendable (TransferProgress) -> Void)?,
                                receive: ([[UInt8]]) throws -> ReceiveResult,
                                cursor: () throws -> ReplicationCursor,
                                joined: () -> Int = { 0 }) async -> Result<TransferSummary, any Error> {
        var session = PullSession(local: local, own: own, ownTip: ownTip, limits: limits, retry: retry)
        var action = session.start()
        // A page that joined this replica to a share whose logs an earlier page brought (and this
        // store declined) has them asked for again: the session goes on once more from here.
        var joinedSoFar = joined()
        var before = TransferSummary()
        // While a page is verified and written, the next one is already asked for from the cursor
        // the page names; it is used only if the session then asks from exactly that cursor.
        var prefetch: (since: ReplicationCursor, task: Task<(FramePage.Decoded, Int), any Error>)?
        defer { prefetch?.task.cancel() }
        while true {
            switch action {
            case .request(let since, let limits):
                do {
                    let (page, bytes): (FramePage.Decoded, Int)
                    if let p = prefetch, p.since == since {
                        (page, bytes) = try await p.task.value
                    } else {
                        prefetch?.task.cancel()
                        (page, bytes) = try await peer.page(since: since, limits: limits)
                    }
                    prefetch = nil
                    if page.complete, page.more, let next = page.next, !page.frames.isEmpty {
                        prefetch = (next, Task { try await peer.page(since: next, limits: limits) })
                    }
                    action = session.received(page, bytes: bytes)
                } catch {
                    prefetch = nil
                    action = session.failed(failure(error))
                }
            case .apply(let frames):
                do {
                    // Verifying, writing and fsyncing a page (and, first, waiting for the writer
                    // lock) block: off the cooperative pool.
                    let (r, c) = try await Blocking.run { (try receive(frames), try cursor()) }
                    action = session.applied(r, cursor: c)
                    let s = session.summary
                    progress?(TransferProgress(pages: s.pages, frames: s.frames, events: s.events, bytes: s.bytes))
                } catch let e as LogError where e.isLocked {
                    return .failure(e)
                } catch let e as LogError {
                    action = session.failed(.refused(e, by: "this store"))
                } catch {
                    action = session.failed(.permanent("a page was refused: \(error)"))
                }
            case .wait(let seconds):
                do { try await Task.sleep(nanoseconds: TransferFailure.nanoseconds(seconds)) } catch { return .failure(error) }
                action = session.resume()
            case .done(let summary):
                let now = joined()
                if now != joinedSoFar, let again = try? cursor() {
                    joinedSoFar = now
                    before = Self.adding(summary, to: before)
                    session = PullSession(local: again, own: own, ownPast: session.ownPast, limits: limits, retry: retry)
                    action = session.start()
                    continue
                }
                return .success(Self.adding(summary, to: before))
            case .fail(let f):
                return .failure(f)
            }
        }
    }

    /// `summary` after `before` (a session that went on once more): counts added, the rest the later's.
    private static func adding(_ summary: TransferSummary, to before: TransferSummary) -> TransferSummary {
        var s = summary
        s.pages = s.pages.addingClamped(before.pages)
        s.frames = s.frames.addingClamped(before.frames)
        s.events = s.events.addingClamped(before.events)
        s.bytes = s.bytes.addingClamped(before.bytes)
        s.alreadyHeld = s.alreadyHeld.addingClamped(before.alreadyHeld)
        s.retries = s.retries.addingClamped(before.retries)
        s.bootstrapped = s.bootstrapped || before.bootstrapped
        s.ownLogRefused = s.ownLogRefused ?? before.ownLogRefused
        return s
    }

    /// Pushes everything `store` holds past `peer`'s cursor, page by page. An origin other than
    /// the store's own that the peer refuses to take from this principal is left out, and the
    /// rest pushed (`TransferSummary.refused`).
    /// - Parameters:
    ///   - known: the peer's cursor if a pull just learned it (`TransferSummary.peerHolds`),
    ///     which saves asking for it.
    ///   - refused: the refusals of a push before on this link (`TransferSummary.refused`): those
    ///     origins are left out without sending them again.
    public static func push(from store: Store, to peer: any ReplicaTransport, known: ReplicationCursor? = nil,
                            limits: PageLimits = PageLimits(), retry: RetryPolicy = RetryPolicy(), refused: [ReplicaID: String] = [:],
                            progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> TransferSummary {
        var session = PushSession(limits: limits, retry: retry, own: store.replicaID, refused: refused)
        var action = session.start(known: known)
        while true {
            switch action {
            case .requestCursor:
                do { action = session.peerCursor(try await peer.cursor()) } catch { action = session.failed(failure(error)) }
            case .collect(let since, let limits):
                do {
                    // Reading and checking frames from the log: off the cooperative pool.
                    let skipping = session.skipping
                    let page = try await Blocking.run {
                        try FramePage.collect(from: store, since: since, limits: limits, including: skipping.isEmpty ? nil : { !skipping.contains($0) })
                    }
                    action = session.collected(page)
                } catch {
                    action = session.failed(error as? TransferFailure ?? .permanent("cannot read this store's log: \(error)"))
                }
            case .send(let page):
                do {
                    let (r, c) = try await peer.push(page)
                    action = session.sent(r, peer: c)
                    let s = session.summary
                    progress?(TransferProgress(pages: s.pages, frames: s.frames, events: s.events, bytes: s.bytes))
                } catch {
                    action = session.failed(failure(error))
                }
            case .wait(let seconds):
                try await Task.sleep(nanoseconds: TransferFailure.nanoseconds(seconds))
                action = session.resume()
            case .done(var summary):
                let peerCursor = summary.peerCursor
                summary.peerHoldsOwnLogTo = try await Blocking.run { try ownLogHeld(by: peerCursor, pastThatOf: store) }
                return summary
            case .fail(var f):
                // Origins left out before the failure are said with it.
                let refused = session.summary.refused
                if !refused.isEmpty { f.message += " (before it, origins the peer refused were left out: " + refused.keys.sorted().map(\.description).joined(separator: ", ") + ")" }
                throw f
            }
        }
    }

    /// How far `peer` holds `store`'s own log, when past where the store's log of it ends (it
    /// lost that tail); nil otherwise. Reads the store's own tip only when the peer holds any.
    package static func ownLogHeld(by peer: ReplicationCursor, pastThatOf store: Store) throws -> Seq? {
        let held = peer[store.replicaID]
        guard held > Seq(0) else { return nil }
        return try LogReader(store: store).tip(origin: store.replicaID, hashing: false).lastSeq < held ? held : nil
    }

    static func failure(_ error: any Error) -> TransferFailure {
        if let f = error as? TransferFailure { return f }
        if error is CancellationError { return TransferFailure(.cancelled, "cancelled") }
        return .permanent(String(describing: error))
    }
}

/// Another store reachable as a path (a shared folder, a mounted disk), as a transport. The
/// store is a peer, not ours: pages are collected from its log files and verified on arrival as
/// any peer's; a push takes its writer lock for each page and receives the frames into its logs
/// (`LogAppender.receivingForPeer`); a snapshot is the one it keeps, copied as data and checked
/// by `Snapshot.install` as one from a server. No SQLite file of it is opened here, and its
/// projection is caught up by its own replica when it next opens. See docs/SECURITY.md.
package struct StoreTransport: ReplicaTransport {
    public let store: Store
    public init(store: Store) { self.store = store }

    // Each call reads or writes the peer's files: run on the blocking queue, off the pool.

    public func cursor() async throws -> ReplicationCursor { try await Blocking.run { try store.cursor() } }

    public func page(since: ReplicationCursor, limits: PageLimits) async throws -> (FramePage.Decoded, Int) {
        try await Blocking.run {
            let page = try FramePage.collect(from: store, since: since, limits: limits)
            return (FramePage.Decoded(frames: page.frames, next: page.next, more: page.more, complete: true, holder: try store.cursor()), page.frameBytes)
        }
    }

    public func push(_ page: FramePage) async throws -> (ReceiveResult, ReplicationCursor) {
        try await Blocking.run { try receive(page) }
    }

    private func receive(_ page: FramePage) throws -> (ReceiveResult, ReplicationCursor) {
        let appender: LogAppender
        do { appender = try LogAppender.receivingForPeer(store) } catch let e as LogError where e.isLocked {
            throw TransferFailure.transient(e.description, code: .busy)
        }
        defer { try? appender.close() }
        let r: ReceiveResult
        do { r = try appender.receive(page.frames) } catch let e as LogError { throw TransferFailure.refused(e, by: store.path) }
        // Share logs the peer declined (it is no member) or purged count as held there: the
        // pusher moves past them instead of sending them again.
        let declined = try appender.declinedLogsInForce().merging(appender.purgedLogs()) { max($0, $1) }
        try appender.close()
        // An append left open here is dropped when the store is closed: the cursor says only
        // what is committed, so the next page starts at that append again.
        return (r, try store.cursor().merged(with: ReplicationCursor(declined)))
    }

    /// The snapshot the peer keeps (`snapshot.sqlite`, made when it compacted or was itself
    /// bootstrapped), copied byte for byte: the receiver checks it as any peer's snapshot
    /// (`Snapshot.install` reads it untrusted). Only a regular file, at most
    /// `Snapshot.absoluteBytesMax` bytes, is copied.
    public func snapshot(to path: String) async throws {
        let kept = Snapshot.keptPath(of: store)
        guard FileManager.default.fileExists(atPath: kept) else {
            throw TransferFailure.permanent("\(store.path) keeps no snapshot (\(kept)) to bootstrap from; pull from a peer that still holds the log instead")
        }
        try await Blocking.run { try ForeignFile.copy(kept, to: path, bytesMax: Snapshot.absoluteBytesMax, op: "copy a peer's snapshot") }
    }
}

extension LogAppender {
    /// Where a receiver stands for its next request: the store's cursor, and for each origin
    /// with an append still open, the last seq of it received so far.
    public func receivePosition() throws -> ReplicationCursor {
        // Share logs declined (this replica is no member) and those of purged shares count as
        // held: the session moves past them.
        try store.cursor().merged(with: ReplicationCursor(openAppends)).merged(with: ReplicationCursor(declinedLogsInForce()))
            .merged(with: ReplicationCursor(purgedLogs()))
    }
}
