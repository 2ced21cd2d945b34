import Replicator
import Crypto
import EventLog
import Foundation
import Logging
import NIOCore
import Projections

/// An answer the HTTP layer sends as is: a status, a code (`FailureCode`), a message, and the
/// frames it is about. Sent as `{"error": message, "code": code, "origin": …, "seqs": [first, last]}`.
public struct EndpointError: Error, Sendable, CustomStringConvertible {
    public var status: Int
    public var code: FailureCode
    public var message: String
    public var retryAfter: Int?
    public var origin: ReplicaID?
    public var seqs: ClosedRange<UInt64>?
    public init(_ status: Int, _ message: String, code: FailureCode? = nil, retryAfter: Int? = nil,
                origin: ReplicaID? = nil, seqs: ClosedRange<UInt64>? = nil) {
        self.status = status
        self.code = code ?? FailureCode(status: status)
        self.message = message
        self.retryAfter = retryAfter
        self.origin = origin
        self.seqs = seqs
    }
    public var description: String { "\(status): \(message)" }
}

/// What the server does for each request, apart from HTTP: authentication and authorization,
/// bounds, reading pages, receiving pushes. The Hummingbird routes in `ReplicaServer` only move
/// bytes in and out, so all of this is tested without sockets.
///
/// What the store holds of each origin is kept in memory (`OriginIndex`), so a cursor or a page
/// touches only the origins it returns: a scoped principal's are found from the owners' record,
/// and of those only the ones that moved past the client's cursor are read. Reads run
/// concurrently (readers never see a partial frame). Pushes that arrive while others are being
/// received wait, and are then received together (group commit): each verified whole on its own
/// and refused on its own, all written in one pass with one sync per origin and one projection
/// catch-up of the origins they touched, each answered once durable. The store's writer lock is taken when a push arrives and released once no push has come
/// for `idleClose` seconds, so a local `evctl append` can run while the server is up; a push that
/// finds the lock held by another process waits up to `lockWait` seconds, then is answered 503
/// (the client retries).
public final class ReplicaEndpoint: ReplicaBackend, @unchecked Sendable {
    public let store: Store
    /// The access policy in force (a tokens file reloaded by `TokensFileWatcher` swaps it).
    public let policies: PolicySource
    /// Who owns each origin (scoped principals only read their users' origins, and the logs of
    /// the shares their users' replicas are members of).
    public let owners: OriginOwners
    /// Which logs are shares', and who their members are.
    let shares: ShareAccess
    public let pageMax: PageLimits
    public let pushBytesMax: Int
    public let lockWait: Double
    public let idleClose: Double
    public let metrics: ServerMetrics
    private let watcherLock = Lock()
    /// The watch streams' feed: started by the first watch, stopped once it has gone unused for
    /// `watchFeedIdleSeconds`.
    private var watchFeed: WatchFeed?
    /// Set by `stopWatching`. Touched only under `watcherLock`.
    private var watchingStopped = false
    /// Bytes of pages being sent and pushed bodies being read, over every connection.
    public let memory: MemoryBudget
    private let writes = DispatchQueue(label: "logbook.serve.writes")
    /// Touched only on `writes`.
    private var writer: ProjectedStore?
    /// The last snapshot made. Touched only on `writes`.
    private var keptSnapshot: SnapshotData?
    private var lastPush = Date.distantPast
    /// Whether pushes are projected as they are received (`evctl serve --no-project`: a pure
    /// relay, whose projection is brought up to date only when a snapshot is made).
    public let project: Bool
    /// Each origin's durable seq and floor, in memory.
    let index: OriginIndex
    /// Pushes waiting for the next group; `draining` while a group is scheduled or running.
    private let pendingLock = Lock()
    private var pendingPushes: [PendingPush] = []
    private var drainScheduled = false
    fileprivate let reads = DispatchQueue(label: "logbook.serve.reads", attributes: .concurrent)

    /// - Throws: `ServerError` when the store's record of origin owners cannot be read.
    public init(store: Store, policy: AccessPolicy, policies: PolicySource? = nil, pageMax: PageLimits = .serverMax, pushBytesMax: Int = 64 << 20,
                lockWait: Double = 2, idleClose: Double = 0.25, metrics: ServerMetrics = ServerMetrics(),
                memoryBytesMax: Int = ServerConfiguration.defaultMemoryBytesMax, project: Bool = true) throws {
        self.store = store
        self.project = project
        index = try OriginIndex(store: store)
        memory = MemoryBudget(bytesMax: memoryBytesMax)
        self.policies = policies ?? PolicySource(policy)
        owners = try OriginOwners(store: store)
        do { shares = try ShareAccess(store: store) } catch { throw ServerError("cannot list the store's logs: \(error)") }
        self.pageMax = pageMax
        self.pushBytesMax = pushBytesMax
        self.lockWait = lockWait
        self.idleClose = idleClose
        self.metrics = metrics
    }

    /// `GET /metrics` as `principal` may see it (a scoped principal: its users' origins only).
    public func metricsText(principal p: AccessPolicy.Principal) async -> String {
        let index = self.index
        let current = try? await run(on: reads) { () throws -> ReplicationCursor in
            try index.refresh()
            return index.cursor()
        }
        let scope = readable(by: p).map { ServerMetrics.Scope(origins: $0, user: p.user ?? "") }
        return metrics.render(current: current, memory: memory, scope: scope)
    }

    /// The origins `principal` may read: nil for every origin (a principal without a user), else
    /// those owned by its user or one of its `read_users`, and the logs of every share one of
    /// their replicas is a member of, as owners and memberships stand when it is asked.
    public func readable(by principal: AccessPolicy.Principal) -> (@Sendable (ReplicaID) -> Bool)? {
        guard let users = principal.readableUsers else { return nil }
        let owners = self.owners, shares = self.shares, index = self.index
        return { o in (owners.owner(of: o).map(users.contains) ?? false) || shares.isReadable(o, by: users, owners: owners, holds: index.holds) }
    }

    /// The origins `principal` may read, found from the owners' record and the shares' membership
    /// (nil: every origin).
    func readableOrigins(_ principal: AccessPolicy.Principal) -> Set<ReplicaID>? {
        principal.readableUsers.map { Self.origins(readableBy: $0, owners: owners, shares: shares, index: index) }
    }

    /// The origins `users` may read: theirs, and the logs of the shares their replicas are members of.
    static func origins(readableBy users: Set<String>, owners: OriginOwners, shares: ShareAccess, index: OriginIndex) -> Set<ReplicaID> {
        owners.origins(of: users).union(shares.origins(readableBy: users, owners: owners, holds: index.holds))
    }

    /// The durable cursor as `principal` may see it, from the index (call `index.refresh()` first).
    func indexedCursor(for principal: AccessPolicy.Principal) -> ReplicationCursor {
        readableOrigins(principal).map { index.cursor(of: $0) } ?? index.cursor()
    }

    /// `GET /v1/cursor`: this store's replica id and cursor (the origins the principal may read).
    public func cursor(principal: AccessPolicy.Principal) async throws -> (replica: ReplicaID, cursor: ReplicationCursor) {
        if let d = AccessPolicy.checkPull(principal) { throw EndpointError(d.status, d.message) }
        let index = self.index
        let c = try await run(on: reads) { () throws -> ReplicationCursor in
            try index.refresh()
            return self.indexedCursor(for: principal)
        }
        return (store.replicaID, c)
    }

    /// `GET /v1/frames`: a page of the frames past `since` (a cursor token; empty means from the start).
    /// - Parameters:
    ///   - peer: the caller's replica id as it says (`Logbook-Replica`), for per-peer lag in metrics.
    public func page(principal: AccessPolicy.Principal, since token: String?, maxBytes: String?, maxFrames: String?,
                     peer: String?) async throws -> (page: OutgoingPage, cursor: ReplicationCursor) {
        let (page, mine, reservation) = try await reservedPage(principal: principal, since: token, maxBytes: maxBytes, maxFrames: maxFrames, peer: peer)
        reservation.release()
        return (page, mine)
    }

    /// `page`, with the memory it holds reserved from `memory` (held until the caller has sent
    /// it): the bound of a page (its byte limit and one more frame) is reserved before it is
    /// built, then shrunk to what it holds.
    public func reservedPage(principal: AccessPolicy.Principal, since token: String?, maxBytes: String?, maxFrames: String?,
                             peer: String?) async throws -> (page: OutgoingPage, cursor: ReplicationCursor, reservation: MemoryBudget.Reservation) {
        let (since, clamped) = try pageRequest(principal: principal, since: token, maxBytes: maxBytes, maxFrames: maxFrames)
        let from = since
        let page: OutgoingPage, mine: ReplicationCursor
        let reservation = try await memory.reserve(OutgoingPage.bytesBound(clamped), holder: memoryHolder(principal))
        do {
            (page, mine) = try await run(on: reads) { () throws -> (OutgoingPage, ReplicationCursor) in
                try self.index.refresh()
                let among = self.readableOrigins(principal)
                let plan = try self.index.moved(since: from, among: among)
                let page = try OutgoingPage { frame in
                    try FramePage.collect(from: self.store, plan: plan.map { ($0.0, $0.1) }, since: from, limits: clamped, frame: frame)
                }
                return (page, among.map { self.index.cursor(of: $0) } ?? self.index.cursor())
            }
            reservation.shrink(to: page.frameBytes + 4 * page.frames + (1 << 16))
        } catch let f as TransferFailure where f.code == .cursorExpired {
            reservation.release()
            throw EndpointError(410, "cursor expired: \(f.message) (GET /v1/snapshot)", code: .cursorExpired)
        } catch {
            reservation.release()
            throw error
        }
        metrics.served(frames: page.frames, bytes: page.frameBytes)
        if let peer, let id = ReplicaID(peer) {
            metrics.peer("\(principal.name)/\(id)", user: principal.user, lag: page.next.merged(with: since).lag(behind: mine))
        }
        return (page, mine, reservation)
    }

    /// `GET /v1/watch`: the store's durable cursor now and each time it moves (one feed for
    /// every connection, started by the first; `WatchFeed`). The caller must be allowed to pull.
    /// A scoped principal sees the origins it may read, and only moves of those. Only the newest
    /// cursor is held for a watcher that does not read.
    /// The index's refresh and a feed's start read the disk (a whole rescan after an inotify
    /// overflow), so they run on the read queue, never on a task's thread.
    public func watch(principal: AccessPolicy.Principal) async throws -> AsyncStream<ReplicationCursor> {
        if let d = AccessPolicy.checkPull(principal) { throw EndpointError(d.status, d.message) }
        return try await run(on: reads) { [self] in try watchNow(principal) }
    }

    private func watchNow(_ principal: AccessPolicy.Principal) throws -> AsyncStream<ReplicationCursor> {
        try index.refresh()
        while true {
            let feed: WatchFeed = try watcherLock.withLock {
                // After `stopWatching`, no feed is started that nothing would stop.
                if watchingStopped { throw EndpointError(503, "the server is shutting down", retryAfter: 1) }
                if let f = watchFeed, !f.isStopped { return f }
                let owners = self.owners, shares = self.shares, index = self.index
                let f = try WatchFeed(index: index, readers: { o in
                    var users = shares.readers(of: o, owners: owners, holds: index.holds)
                    if let u = owners.owner(of: o) { users.insert(u) }
                    return users
                }, scopedCursor: { users in
                    index.cursor(of: Self.origins(readableBy: users, owners: owners, shares: shares, index: index))
                }, scopeVersion: {
                    owners.scopeVersion &+ shares.scopeVersion
                }, stopsWhenUnusedFor: Self.watchFeedIdleSeconds)
                watchFeed = f
                return f
            }
            // A feed that stopped for want of watches (`WatchFeed`): the next one starts another.
            if let stream = feed.changes(users: principal.readableUsers) { return stream }
        }
    }

    /// Stops what `watch` started (the server is shutting down); later watches are refused.
    public func stopWatching() {
        watcherLock.withLock {
            watchingStopped = true
            watchFeed?.stop()
            watchFeed = nil
        }
    }

    func pageRequest(principal: AccessPolicy.Principal, since token: String?, maxBytes: String?, maxFrames: String?) throws -> (ReplicationCursor, PageLimits) {
        try PageRequest.check(principal: principal, since: token, maxBytes: maxBytes, maxFrames: maxFrames, pageMax: pageMax)
    }

    public func streamedPage(principal: AccessPolicy.Principal, since token: String?, maxBytes: String?, maxFrames: String?,
                             peer: String?) async throws -> StreamedPage {
        let (since, limits) = try pageRequest(principal: principal, since: token, maxBytes: maxBytes, maxFrames: maxFrames)
        let store = self.store
        let index = self.index
        let holder: ReplicationCursor
        do {
            holder = try await run(on: reads) { () throws -> ReplicationCursor in
                try index.refresh()
                _ = try index.moved(since: since, among: self.readableOrigins(principal))  // refuses an expired cursor
                return self.indexedCursor(for: principal)
            }
        } catch let f as TransferFailure where f.code == .cursorExpired {
            throw EndpointError(410, "cursor expired: \(f.message) (GET /v1/snapshot)", code: .cursorExpired)
        }
        var slice = limits
        slice.maxBytes = min(limits.maxBytes, OutgoingPage.chunkBytes)
        let reservation = try await memory.reserve(OutgoingPage.bytesBound(slice), holder: memoryHolder(principal))
        let name = principal.name, user = principal.user
        return StreamedPage(since: since, limits: limits, reservation: reservation, holder: holder, slice: { from, sliceLimits in
            try await self.run(on: self.reads) {
                // The slice reads only what moved since where it starts (refreshed: a push
                // received meanwhile may ship in this answer).
                try index.refresh()
                let plan = try index.moved(since: from, among: self.readableOrigins(principal))
                return try OutgoingPage(framesOnly: true) { frame in
                    try FramePage.collect(from: store, plan: plan.map { ($0.0, $0.1) }, since: from, limits: sliceLimits, frame: frame)
                }
            }
        }, finished: { at, frames, bytes in
            self.metrics.served(frames: frames, bytes: bytes)
            if let peer, let id = ReplicaID(peer) {
                let mine = self.indexedCursor(for: principal)
                self.metrics.peer("\(name)/\(id)", user: user, lag: at.merged(with: since).lag(behind: mine))
            }
        })
    }

    /// `GET /v1/snapshot`: a snapshot that sits at the end of every log (made with the writer
    /// open), to stream. The last one made is kept while the store's cursor has not moved:
    /// replicas bootstrapping one after another (after a compaction) share it, instead of each
    /// costing a `VACUUM INTO` of the whole projection that holds up pushes. It is kept open and
    /// already unlinked (made in a directory only this user may read, removed at once), so no
    /// copy of the store's rows is ever left behind, however the server stops.
    ///
    /// A snapshot holds the rows of every origin, so a scoped principal is refused one (403): it
    /// pulls its users' origins frame by frame instead (docs/SECURITY.md, "Per-user scopes").
    public func snapshot(principal: AccessPolicy.Principal) async throws -> SnapshotFile {
        if let d = AccessPolicy.checkPull(principal) { throw EndpointError(d.status, d.message) }
        if let user = principal.user {
            throw EndpointError(403, "a snapshot holds every user's rows, so principal \"\(principal.name)\" (user \"\(user)\") cannot take one; "
                                + "it pulls its users' origins frame by frame (this server must keep their logs whole: do not compact it past them)")
        }
        // A member's projection holds its shares' rows in the clear: a snapshot would hand them
        // to whoever bootstraps from it. Such a server serves frames only.
        // Any key file counts, even one that does not read (a keyring that skips it must not
        // make this check pass).
        let keyFiles = ((try? FileManager.default.contentsOfDirectory(atPath: store.layout.shares)) ?? []).filter { $0.hasSuffix(".keys") }
        if !keyFiles.isEmpty {
            throw EndpointError(403, "this server's store is a member of \(keyFiles.count) share(s): its projection holds their rows, so it makes no snapshot; "
                                + "pull its origins frame by frame")
        }
        let data = try await run(on: writes) { () throws -> SnapshotData in
            let now = try self.store.cursor()
            if let kept = self.keptSnapshot, kept.cursor == now { return kept }
            let dir = NSTemporaryDirectory() + "/evctl-snapshot-\(UUID().uuidString.prefix(8))"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let file = dir + "/snapshot.sqlite"
            let info = try Snapshot.make(try self.openWriter(), to: file)
            let made = try SnapshotData(path: file, cursor: ReplicationCursor(info.anchors.mapValues(\.lastSeq)))
            self.keptSnapshot = made
            self.metrics.snapshotMade()
            return made
        }
        metrics.snapshotServed()
        return SnapshotFile(data)
    }

    /// `POST /v1/frames`: receive a page of frames. The principal must be allowed to push every
    /// origin in it; the frames are verified whole before anything is written, then projected.
    /// A scoped principal must also own every origin in it (the first push of an origin claims
    /// it) and every event in it must carry its user as actor; the answer's cursor holds the
    /// origins it may read.
    public func push(principal: AccessPolicy.Principal, body: [UInt8], peer: String?) async throws -> PushAnswer {
        let checked = try PushRequest.check(principal: principal, body: body, pushBytesMax: pushBytesMax)
        let (kept, keptOrigins, held) = try await withoutHeldForeignFrames((checked.frames, checked.origins), principal: principal)
        // The answer's cursor shows where the left-out origins stand here, so the client's
        // next page moves past them instead of sending them again.
        // Likewise the sealed logs of a share purged here (docs/SHARING.md, "Purge"), which the
        // store declines: the pusher sent them, and is told they count as held.
        // Each placed at the pusher's own last frame of it, not where the log stood when purged
        // (which a page of one made-up frame of it learnt).
        var sealed: [ReplicaID: Seq] = [:]
        for f in kept {
            guard let h = FrameHeader(parsing: f), h.shared, h.sealed else { continue }
            sealed[h.origin] = max(sealed[h.origin] ?? h.lastSeq, h.lastSeq)
        }
        let purged: [ReplicaID: Seq] = sealed.isEmpty ? [:]
            : Dictionary(uniqueKeysWithValues: ((try? ShareDirectory.purgedLogs(store)) ?? [:]).keys.compactMap { o in sealed[o].map { (o, $0) } })
        // A share's log the principal may not push is refused only for frames not left out as
        // held (`PushRequest.check`), nor of a share purged here: declined
        // whoever sends them, they are left out here rather than received.
        let declined = Set(keptOrigins.filter { checked.denied[$0] != nil && purged[$0] != nil })
        let frames = declined.isEmpty ? kept : kept.filter { f in FrameHeader(parsing: f).map { !declined.contains($0.origin) } ?? true }
        let pushed = declined.isEmpty ? keptOrigins : keptOrigins.filter { !declined.contains($0) }
        if let o = pushed.first(where: { checked.denied[$0] != nil }), let d = checked.denied[o] { throw d }
        func answering(_ a: PushAnswer) -> PushAnswer {
            guard !held.isEmpty || !purged.isEmpty else { return a }
            var a = a
            if !held.isEmpty { a.cursor = a.cursor.merged(with: ReplicationCursor(held)) }
            if !purged.isEmpty { a.cursor = a.cursor.merged(with: ReplicationCursor(purged)) }
            return a
        }
        var byWriter = Set<ReplicaID>()
        if let user = principal.user {
            byWriter = try checkOwners(pushed, frames: frames, principal: principal, user: user)
            try await run(on: reads) { try Self.checkActors(frames, principal: principal, user: user) }
        }
        // Nothing new (an empty page, or frames this store already holds durably, by each
        // origin's durable mark): answered from the index alone, without the writer lock and
        // without invalidating the kept snapshot.
        let index = self.index
        // A push of origins its user claimed but has not had confirmed goes to the writer even
        // when it holds nothing new: it may confirm them (`receivePending`).
        let confirms = principal.user.map { u in pushed.contains { owners.isUnconfirmed($0) && owners.claimant(of: $0) == u } } ?? false
        // Nor does a scoped push of an origin nobody claimed: `mayClaim` refuses it if the store
        // holds it, new frames or not (answered from the index, a page of made-up headers of such
        // an origin, the server's own among them, learnt how far it goes).
        let unclaimed = principal.user != nil && pushed.contains { owners.claimant(of: $0) == nil }
        let nothingNew = try await run(on: reads) { () throws -> Bool in
            guard !confirms && !unclaimed else { return false }
            try index.refresh()
            return frames.allSatisfy { f in
                guard let h = FrameHeader(parsing: f) else { return false }
                return index[h.origin].map { h.lastSeq <= $0.durable } ?? false
            }
        }
        if nothingNew {
            var r = ReceiveResult()
            r.alreadyHeld = frames.count
            return answering(PushAnswer(result: r, cursor: indexedCursor(for: principal)))
        }
        let answer = try await withCheckedThrowingContinuation { (c: CheckedContinuation<PushAnswer, any Error>) in
            let push = PendingPush(principal: principal, frames: frames, pushed: pushed, byWriter: byWriter, answer: c)
            let schedule: Bool = pendingLock.withLock {
                pendingPushes.append(push)
                defer { drainScheduled = true }
                return !drainScheduled
            }
            if schedule { writes.async { self.receivePending() } }
        }
        metrics.received(frames: answer.result.frames, events: answer.result.events, bytes: body.count)
        if let peer, let id = ReplicaID(peer) {
            metrics.peer("\(principal.name)/\(id)", user: principal.user, lag: nil)
        }
        return answering(answer)
    }

    /// A push waiting to be received with the next group.
    struct PendingPush {
        var principal: AccessPolicy.Principal
        var frames: [[UInt8]]
        var pushed: [ReplicaID]
        /// Share logs of `pushed` another user claimed, let through as the pusher's user owns
        /// their writer (`checkOwners`): this push does not claim them while that claim holds.
        var byWriter: Set<ReplicaID>
        var answer: CheckedContinuation<PushAnswer, any Error>
        var claim: OriginOwners.Claim?
    }

    /// Receives every push waiting, as one group (runs on `writes`). Pushes arriving meanwhile
    /// schedule the next group.
    private func receivePending() {
        // A group holds pushes of distinct origins: one that shares an origin with a push
        // before it waits for the next group, so claims and refusals are as if pushes were
        // received one at a time (a refused push takes back only its own claims, and a scoped
        // claim never races an unscoped push of the same new origin).
        var (group, another): ([PendingPush], Bool) = pendingLock.withLock {
            var taken = Set<ReplicaID>()
            var now: [PendingPush] = [], later: [PendingPush] = []
            for p in pendingPushes {
                // A deferred push's origins stay taken too, so no later push of them overtakes it.
                if p.pushed.contains(where: taken.contains) { later.append(p) } else { now.append(p) }
                taken.formUnion(p.pushed)
            }
            pendingPushes = later
            drainScheduled = !later.isEmpty  // this drain schedules the next one for them
            return (now, !later.isEmpty)
        }
        if another { writes.async { self.receivePending() } }
        guard !group.isEmpty else { return }
        // The writer lock first: claims are made under it, and their frames written before it is
        // let go, so that a claim found unconfirmed by whoever holds the lock next, with no frame
        // of its origin held, is known to be abandoned (`OriginOwners.releaseAbandoned`).
        let projected: ProjectedStore
        do { projected = try openWriter() } catch {
            for p in group { p.answer.resume(throwing: error) }
            return
        }
        // An origin another user's unconfirmed claim holds: taken back first if abandoned (every
        // claim of an earlier group either has its frames or never will).
        if group.contains(where: { p in p.pushed.contains { o in owners.isUnconfirmed(o) && owners.claimant(of: o) != p.principal.user } }) {
            releaseAbandonedClaims()
        }
        // Claims next, durably, before a frame is written; taken back if the push is refused:
        // a refusal changes nothing. The claims of the whole group are one transaction (one
        // sync, not one per push), made in the order the pushes came.
        var live: [Int] = [], claiming: [Int] = []
        for i in group.indices {
            do {
                if try mayClaim(group[i], open: projected.appender.openAppends) { claiming.append(i) } else { live.append(i) }
            } catch {
                group[i].answer.resume(throwing: error)
            }
        }
        if !claiming.isEmpty {
            do {
                let claims = try owners.claim(claiming.map { i in
                    // A log let through by its writer stays out of the claim only while another
                    // user's claim still holds it: one taken back since (abandoned) is claimed
                    // here, or it would be held and owned by nobody.
                    let user = group[i].principal.user ?? ""
                    let kept = group[i].pushed.filter { o in !(group[i].byWriter.contains(o) && owners.claimant(of: o).map { $0 != user } == true) }
                    return OriginOwners.ClaimRequest(origins: kept, user: user, principal: group[i].principal.name)
                })
                for (i, c) in zip(claiming, claims) {
                    if let taken = c.taken {
                        group[i].answer.resume(throwing: Self.foreignOrigin(taken, principal: group[i].principal, user: group[i].principal.user ?? ""))
                    } else {
                        group[i].claim = c
                        live.append(i)
                    }
                }
            } catch {
                for i in claiming { group[i].answer.resume(throwing: error) }
            }
            live.sort()  // received in the order they came
        }
        guard !live.isEmpty else { return }
        func refuse(_ i: Int, _ refusal: any Error) {
            group[i].answer.resume(throwing: refused(refusal, claim: group[i].claim, principal: group[i].principal))
        }
        let results: [Result<ReceiveResult, LogError>]
        do { results = try projected.appender.receive(batches: live.map { group[$0].frames }) } catch {
            index.invalidate()  // marks written before the failure may name frames cut back since
            closeWriter()
            // The claims stay (unconfirmed, they open nothing): frames the failure could not cut
            // back may be on disk, and a claim taken back over them left the origin held and
            // owned by nobody, its owner refused for ever. The next writer takes back those
            // whose origins hold nothing.
            for i in live { group[i].answer.resume(throwing: error) }
            return
        }
        var received: [(Int, ReceiveResult)] = []
        for (k, i) in live.enumerated() {
            switch results[k] {
            case .success(let r): received.append((i, r))
            case .failure(let e) where e.isCorruption || e.isGap || e.isInvalidInput || e.isClockAhead:
                refuse(i, EndpointError(422, "frames refused, nothing was written: \(e.description)", code: FailureCode(refusal: e), seqs: e.seqs))
            case .failure(let e):
                refuse(i, e)
            }
        }
        var tips: [ReplicaID: Seq] = [:]
        for (_, r) in received { for (o, s) in r.tips { tips[o] = max(tips[o] ?? Seq(0), s) } }
        index.advance(tips)
        // A push's unconfirmed claims are confirmed (one synced transaction for the group) where
        // it made the origin's log grow, or sent the frame at its held tip byte for byte (a push
        // again after a confirmation was lost: the sender holds the chain). Only then do their
        // users read them. An origin neither grew nor matched (an append not whole yet) keeps its
        // claim unconfirmed; the answer still shows the pusher how far its own frames got.
        var unanswered: Set<Int> = []
        let reader = LogReader(store: store)
        let confirming = received.compactMap { i, r -> (Int, OriginOwners.ConfirmRequest)? in
            guard let user = group[i].principal.user else { return nil }
            let proven = group[i].pushed.filter { o in
                owners.isUnconfirmed(o) && owners.claimant(of: o) == user && (r.tips[o] != nil || Self.sends(group[i].frames, heldTipOf: o, reader))
            }
            return proven.isEmpty ? nil : (i, OriginOwners.ConfirmRequest(user: user, principal: group[i].principal.name, origins: proven))
        }
        if !confirming.isEmpty {
            do {
                let confirmed = Set(try owners.confirm(confirming.map(\.1)))
                if !confirmed.isEmpty { watcherLock.withLock { watchFeed }?.publish(origins: confirmed) }  // a scope grew, not the cursor
                for (i, c) in confirming {
                    guard let lost = c.origins.first(where: { !confirmed.contains($0) }) else { continue }
                    unanswered.insert(i)
                    group[i].answer.resume(throwing: EndpointError(500, "the frames are held, but origin \(lost) is claimed by another user now (its claim was taken back meanwhile, by another server on this store): it is not user \"\(c.user)\"'s", code: .serverError, origin: lost))
                }
            } catch {
                // The frames are durable; their origins stay closed to their users until a push
                // of theirs confirms them (this push's retry does). Said in the answer.
                for (i, c) in confirming {
                    unanswered.insert(i)
                    group[i].answer.resume(throwing: EndpointError(500, "the frames are held, but user \"\(c.user)\" could not be recorded as the owner of origin \(c.origins[0]), which stays unreadable to it until a push of it is received again: \(error)", code: .serverError, origin: c.origins[0]))
                }
            }
        }
        received.removeAll { unanswered.contains($0.0) }
        // New logs are classified and grown membership logs re-read before anyone is answered
        // (a failure leaves the share's logs readable by their owners only, until the next push).
        shares.note(Set(tips.keys))
        // Watchers hear of the moves now, with who may read them as the claims and shares stand.
        watcherLock.withLock { watchFeed }?.publish(origins: tips.keys)
        if project && !tips.isEmpty {
            do { _ = try projected.catchUp(origins: Set(tips.keys)) } catch {
                // The frames are durable; the projection catches up at the next open. The push
                // is answered with the failure (its retry finds the frames held).
                closeWriter()
                for (i, _) in received { group[i].answer.resume(throwing: error) }
                return
            }
        }
        lastPush = Date()  // idle from the end of the last group, not its start
        let openAt = projected.appender.openAppends
        let open = ReplicationCursor(openAt)
        for (i, r) in received {
            let p = group[i].principal
            let among = readableOrigins(p)
            // An append still open is shown only to a push that carried its origin, and no
            // further than that push's own last frame of it (its next page goes on after it):
            // the rest of it may be another pusher's, which may yet be dropped (its writer gone
            // quiet), and a client told of it would take frames this store never made durable
            // as held.
            var shown = ReplicationCursor()
            if !openAt.isEmpty {
                for f in group[i].frames {
                    guard let h = FrameHeader(parsing: f), let at = openAt[h.origin], among?.contains(h.origin) ?? true else { continue }
                    shown[h.origin] = max(shown[h.origin], min(at, h.lastSeq))
                }
            }
            let cursor = (among.map { index.cursor(of: $0) } ?? index.cursor())
                .merged(with: shown)
                .merged(with: ownClaims(group[i], open: open))
            group[i].answer.resume(returning: PushAnswer(result: r, cursor: cursor))
        }
    }

    /// Where a push's origins stand that its user claimed and has not had confirmed (not
    /// readable yet): each as far as this store holds it (an open append's frames included), and
    /// never past the push's own last frame of it. The pusher's next page goes on from there (the
    /// first append of a new origin may take several pages, and only its last one confirms the
    /// claim); shown only what the pusher sent, nothing is told of frames it did not.
    private func ownClaims(_ push: PendingPush, open: ReplicationCursor) -> ReplicationCursor {
        guard let user = push.principal.user, push.pushed.contains(where: owners.isUnconfirmed) else { return ReplicationCursor() }
        var sent: [ReplicaID: Seq] = [:]
        for f in push.frames {
            guard let h = FrameHeader(parsing: f), owners.isUnconfirmed(h.origin), owners.claimant(of: h.origin) == user else { continue }
            sent[h.origin] = max(sent[h.origin] ?? Seq(0), h.lastSeq)
        }
        var c = ReplicationCursor()
        for (o, last) in sent {
            let held = max(index[o]?.durable ?? Seq(0), open[o] ?? Seq(0))
            if min(held, last).rawValue > 0 { c[o] = min(held, last) }
        }
        return c
    }

    /// Whether `frames` hold, byte for byte, the frame at the held (committed) tip of `origin`:
    /// proof that their sender holds the origin's chain (its hash links every frame before it).
    static func sends(_ frames: [[UInt8]], heldTipOf origin: ReplicaID, _ reader: LogReader) -> Bool {
        guard let tip = try? reader.tip(origin: origin), tip.lastSeq.rawValue > 0 else { return false }
        return frames.contains { f in
            guard let h = FrameHeader(parsing: f), h.origin == origin, h.lastSeq == tip.lastSeq else { return false }
            return f.withUnsafeBytes { FrameHash.of($0) } == tip.lastHash
        }
    }

    /// Frames of a share's log that another user claimed, or nobody did (a relay pushed it), that
    /// this store holds byte for byte change nothing: they are left out of a scoped principal's
    /// push rather than refused. A replica pushes what it holds that the server's cursor for it
    /// does not show, and a user's cursor stops showing a share's logs once its replica is
    /// removed from the share: refusing would stop that replica's pushes for good. Only a share's
    /// log (this store's frames of it carry a share block): another user's own origin is refused
    /// as ever. Only frames their writer signed (all of the log's in the page, verified first)
    /// and equal to the stored ones, and the answer shows each such origin at the pusher's own
    /// last frame of it: a page of made-up headers learns nothing of how far the log goes here,
    /// by its answer or by its answer's time.
    /// - Returns: the frames kept, their origins, and the position of each origin left out.
    private func withoutHeldForeignFrames(_ push: (frames: [[UInt8]], origins: [ReplicaID]), principal: AccessPolicy.Principal) async throws -> ([[UInt8]], [ReplicaID], [ReplicaID: Seq]) {
        guard let user = principal.user else { return (push.frames, push.origins, [:]) }
        let owners = self.owners, index = self.index, store = self.store
        @Sendable func foreign(_ o: ReplicaID) -> Bool { owners.claimant(of: o).map { $0 != user } ?? true }
        guard push.origins.contains(where: { foreign($0) && index.holds($0) }) else { return (push.frames, push.origins, [:]) }
        return try await run(on: reads) { () throws -> ([[UInt8]], [ReplicaID], [ReplicaID: Seq]) in
            try index.refresh()
            let reader = LogReader(store: store)
            let headers = push.frames.map { FrameHeader(parsing: $0) }
            // Only frames their writer signed: every frame of such a log held here is verified
            // first, whatever its seq (one that is no share frame fails too), and a log with one
            // that does not verify stays in the page (to be refused). A made-up frame then costs
            // the same wherever its seq falls: compared with the stored frames only when within
            // the durable mark, it told by its answer's time how far the log goes. Logs not held
            // here are not looked at (a writer's new share log). Verified once: receiving finds
            // them in the cache.
            var unsigned = Set<ReplicaID>()
            for (i, h) in headers.enumerated() {
                guard let h, foreign(h.origin), !unsigned.contains(h.origin), index.holds(h.origin) else { continue }
                if !FrameInspector.isSignedShareFrame(push.frames[i]) { unsigned.insert(h.origin) }
            }
            // The candidates, per origin in seq order: held durably, of a share's log.
            var candidates: [ReplicaID: [Int]] = [:]
            for (i, h) in headers.enumerated() {
                guard let h, foreign(h.origin), !unsigned.contains(h.origin), index[h.origin].map({ h.lastSeq <= $0.durable }) ?? false else { continue }
                candidates[h.origin, default: []].append(i)
            }
            // A log nobody claimed here may have been claimed by another serving process: its
            // row decides (the user's own log is not left out).
            let unclaimed = candidates.keys.filter { owners.claimant(of: $0) == nil }
            if !unclaimed.isEmpty { try owners.reload(Array(unclaimed)) }
            var dropped = Set<Int>()
            for (o, found) in candidates where foreign(o) {
                var shared = false
                try? reader.forEachFrame(origin: o, linking: false) { h, _ in shared = h.shared; return false }
                guard shared else { continue }
                // Only a run of frames that follow each other (as an honest page's do), from the
                // first: the stored frames read are about as many as the page's, whatever seqs
                // made-up headers name.
                var run = found.sorted { headers[$0]!.baseSeq < headers[$1]!.baseSeq }
                if let end = run.indices.dropFirst().first(where: { headers[run[$0]]!.baseSeq.rawValue != headers[run[$0 - 1]]!.lastSeq.rawValue + 1 }) {
                    run.removeSubrange(end...)
                }
                var k = 0
                // One pass over the stored frames from the run's first seq, ending at the first
                // frame that differs.
                try? reader.forEachFrame(origin: o, from: headers[run[0]]!.baseSeq, linking: false) { h, bytes in
                    guard h.baseSeq == headers[run[k]]!.baseSeq, bytes.elementsEqual(push.frames[run[k]]) else { return false }
                    dropped.insert(run[k])
                    k += 1
                    return k < run.count
                }
            }
            guard !dropped.isEmpty else { return (push.frames, push.origins, [:]) }
            var kept: [[UInt8]] = [], left: [ReplicaID: Seq] = [:]
            for (i, f) in push.frames.enumerated() {
                if dropped.contains(i), let h = headers[i] { left[h.origin] = max(left[h.origin] ?? Seq(0), h.lastSeq) } else { kept.append(f) }
            }
            let origins = Set(kept.compactMap { FrameHeader(parsing: $0)?.origin })
            return (kept, push.origins.filter(origins.contains), left.filter { !origins.contains($0.key) })
        }
    }

    /// Whether `push` is a scoped principal's, whose origins nobody owns are to be claimed
    /// (runs on `writes`); throws when one of them may not be claimed.
    private func mayClaim(_ push: PendingPush, open: [ReplicaID: Seq]) throws -> Bool {
        guard let user = push.principal.user else { return false }
        // Only an origin this store holds nothing of can be claimed: one it already holds
        // (its own, or one an unscoped principal pushed, an append of it still open included)
        // belongs to no user to take. But a share's log is its writer's: one a relay pushed is
        // claimed by the user who owns the replica whose key signs the page's frames of it
        // (receiving verifies them; a refused push takes the claim back).
        var writers: [ReplicaID: ReplicaID]?
        for o in push.pushed where owners.claimant(of: o) == nil {
            if try o == store.replicaID || open[o] != nil || index[o] != nil || (LogReader(store: store).tip(origin: o, hashing: false).lastSeq.rawValue) > 0 {
                // Another serving process on the store may have claimed it: its row decides.
                try owners.reload([o])
                guard owners.claimant(of: o) == nil else { continue }
                if writers == nil { writers = PushRequest.shareWriters(push.frames) }
                if ownsWriter(of: o, writers ?? [:], user: user) { continue }
                throw EndpointError(403, "origin \(o) is held by this server and owned by no user: principal \"\(push.principal.name)\" (user \"\(user)\") may not claim it; nothing was written",
                                    code: .forbidden, origin: o)
            }
        }
        return true
    }

    /// `refusal`, after taking back `claim` (a refused push changes nothing).
    private func refused(_ refusal: any Error, claim: OriginOwners.Claim?, principal: AccessPolicy.Principal) -> any Error {
        guard let claim, let user = principal.user else { return refusal }
        do { try owners.release(claim, user: user) } catch {
            // The refusal is still the answer, and says that its claim stayed: unconfirmed, it
            // opens nothing, and is taken back when the writer next opens (or another user's
            // push of its origin meets it), its origin holding no frame of this push.
            if var e = refusal as? EndpointError {
                e.message += "; the claim of origin \(claim.new[0]) could not be taken back: \(error)"
                return e
            }
        }
        return refusal
    }

    /// Whether `o` is a share's log whose writer in a page (`writers`, `PushRequest.shareWriters`)
    /// is a replica `user` owns: the writer's log, whoever holds a claim of it.
    private func ownsWriter(of o: ReplicaID, _ writers: [ReplicaID: ReplicaID], user: String) -> Bool {
        writers[o].map { owners.owner(of: $0) == user } ?? false
    }

    /// Refuses (403) a page holding an origin another user owns, unless it is a share's log
    /// whose writer the user owns.
    /// - Returns: the origins of the page another user holds a claim of that are such logs (not
    ///   to be claimed by this push: their claim stays as it is).
    func checkOwners(_ origins: [ReplicaID], frames: [[UInt8]], principal: AccessPolicy.Principal, user: String) throws(EndpointError) -> Set<ReplicaID> {
        // Another user's claim refuses the page when confirmed, or when its origin holds frames
        // (such a claim is never taken back, and a page of made-up headers of it answered from the
        // index would learn how far it goes). One whose frames never came is left for the writer
        // to take back (`releaseAbandoned`).
        var writers: [ReplicaID: ReplicaID]?
        var byWriter = Set<ReplicaID>()
        for o in origins {
            guard let claimant = owners.claimant(of: o), claimant != user else { continue }
            // A share's log is its writer's, whoever pushed it first (another member may relay
            // it, taken from the writer's store): the replica whose key signs its frames, when
            // the user owns that replica. Receiving verifies the signatures before anything is
            // written, so only that key's holder gets past this.
            if writers == nil { writers = PushRequest.shareWriters(frames) }
            if ownsWriter(of: o, writers ?? [:], user: user) {
                byWriter.insert(o)
            } else if owners.owner(of: o) != nil || index.holds(o) {
                throw Self.foreignOrigin(o, principal: principal, user: user)
            }
        }
        return byWriter
    }

    public static func foreignOrigin(_ o: ReplicaID, principal: AccessPolicy.Principal, user: String) -> EndpointError {
        EndpointError(403, "origin \(o) belongs to another user: principal \"\(principal.name)\" (user \"\(user)\") may not push its frames; nothing was written",
                      code: .forbidden, origin: o)
    }

    /// Refuses (403) a page with an event that names an actor other than `user`: frames travel
    /// verbatim, so the server checks what the client wrote instead of setting it. An event
    /// without an actor is accepted: the page's origins are the user's (owned, or claimed by this
    /// push), and such an event is attributed by ownership to the origin's owner, so a replica's
    /// history written before it joined a scoped server can still be pushed (the log is
    /// immutable: refusing it would strand it forever). A frame that does not decode is refused
    /// as damaged (422), as receiving would.
    public static func checkActors(_ frames: [[UInt8]], principal: AccessPolicy.Principal, user: String) throws {
        for (i, f) in frames.enumerated() {
            let (h, events) = try f.withUnsafeBytes { p in
                // A share's sealed frame is not opened (a server holds no key): its events are
                // the signing member's, attributed by its signature instead of an actor field.
                do { return try FrameInspector.eventsUnlessSealed(in: p) } catch let e as LogError {
                    throw EndpointError(422, "frame \(i + 1) of \(frames.count): \(e.description); nothing was written", code: .corrupt)
                }
            }
            for e in events where e.actor != nil && e.actor != user {
                let actor = e.actor.map { "actor \"\(printable($0, limit: 64))\"" } ?? "no actor"
                throw EndpointError(403, "origin \(h.origin) seq \(e.seq) carries \(actor): principal \"\(principal.name)\" may push only events whose actor is its user \"\(user)\" or that name none; nothing was written",
                                    code: .forbidden, origin: h.origin, seqs: e.seq.rawValue...e.seq.rawValue)
            }
        }
    }

    /// The open writer, opened when needed; closed again once idle. Runs on `writes`.
    private func openWriter() throws -> ProjectedStore {
        lastPush = Date()
        if let w = writer { return w }
        let w = try Self.openForWriting(store, wait: lockWait, project: project)
        writer = w
        scheduleIdleClose()
        releaseAbandonedClaims()
        return w
    }

    /// Takes back the unconfirmed claims whose origins this store holds nothing of (runs on
    /// `writes`, with the writer open: see `receivePending`). A failure leaves them as they are:
    /// an unconfirmed claim opens nothing, and keeps only other users from claiming its origin
    /// until the next try.
    private func releaseAbandonedClaims() {
        let store = self.store, index = self.index
        let open = writer?.appender.openAppends ?? [:]  // frames of an append not whole yet count as held
        do {
            try owners.releaseAbandoned { o in
                try open[o] != nil || index.holds(o) || LogReader(store: store).tip(origin: o, hashing: false).lastSeq.rawValue > 0
            }
        } catch {
            Self.log.warning("unconfirmed claims were not taken back (tried again when the writer opens): \(error)")
        }
    }

    static let log = Logger(label: "logbook.serve")

    /// How long the writer stays open without pushes while a client is in the middle of
    /// sending an append over several pages (closing it would drop the part received).
    public static let openAppendIdleSeconds = 60.0

    /// How long the watch streams' feed keeps running with no stream open (`WatchFeed`): a
    /// client that reconnects within it finds the feed running, not a new one to start.
    static let watchFeedIdleSeconds = 10.0

    private func scheduleIdleClose() {
        writes.asyncAfter(deadline: .now() + idleClose) { [weak self] in
            guard let self, let writer = self.writer else { return }
            let idle = Date().timeIntervalSince(self.lastPush)
            let wait = writer.appender.openAppends.isEmpty ? self.idleClose : Self.openAppendIdleSeconds
            if idle >= wait { self.closeWriter() } else { self.scheduleIdleClose() }
        }
    }

    private func closeWriter() {
        try? writer?.close()
        writer = nil
    }

    /// Closes the writer now, after any push being received (the server stopped: the store's
    /// writer lock is let go when this returns, not when the last reference goes).
    public func closeWriterNow() {
        writes.sync { closeWriter() }
    }

    static func openForWriting(_ store: Store, wait: Double, project: Bool = true) throws -> ProjectedStore {
        // A server holds every share's logs it is given (as ciphertext): it is the relay members
        // meet at, and serves each share only to its members' users (ShareAccess).
        var options = AppendOptions()
        options.takesEveryShare = true
        do {
            let opened = try ProjectedStore.open(store: store, waitingUpTo: wait, options: options, project: project)
            // Marked too, so another writer of this store (a pull, a bundle) takes them alike.
            if !ShareDirectory.isRelay(store) { try? opened.exclusive { try ShareDirectory.setRelay(store, true) } }
            return opened
        } catch let e as LogError where e.isLocked {
            throw EndpointError(503, "the store is busy (another process holds its writer lock); try again", retryAfter: 1)
        }
    }

    fileprivate func run<T: Sendable>(on queue: DispatchQueue, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { c in
            queue.async { c.resume(with: Result { try body() }) }
        }
    }
}

/// A page ready to send (docs/PROTOCOL.md, "Page"): the frames go from the log's read buffer
/// straight into NIO buffers of about 1 MiB, sent one after the other and never gathered into
/// one, so a 32 MiB page costs one copy and no large allocation.
public struct OutgoingPage: Sendable {
    public var buffers: [ByteBuffer]
    public var next: ReplicationCursor
    public var more: Bool
    public var frames = 0
    public var frameBytes = 0
    /// What the frames hold uncompressed (their headers' raw sizes).
    public var rawBytes = 0
    public static let chunkBytes = 1 << 20

    /// The most memory a page built under `limits` holds: its byte limit, one more frame (a page
    /// always carries at least one), the chunks' slack and its head.
    public static func bytesBound(_ limits: PageLimits) -> Int {
        limits.maxBytes + FrameHeader.size + FrameHeader.payloadBytesMax + 4 * limits.maxFrames + Self.chunkBytes + (1 << 16)
    }

    /// - Parameter framesOnly: only the frames (a slice of a streamed page), without the page's
    ///   head and trailer.
    init(store: Store, since: ReplicationCursor, limits: PageLimits, framesOnly: Bool = false, including: ((ReplicaID) -> Bool)? = nil) throws {
        try self.init(framesOnly: framesOnly) { frame in
            try FramePage.collect(from: store, since: since, limits: limits, including: including, frame: frame)
        }
    }

    /// A page of the frames `collect` hands over one by one (their bytes valid during the call);
    /// `collect` returns the page's next cursor and whether more remains. For any keeper of frames.
    public init(framesOnly: Bool = false,
                collect: (_ frame: (UnsafeRawBufferPointer) throws -> Void) throws -> (next: ReplicationCursor, more: Bool)) throws {
        let allocator = ByteBufferAllocator()
        var chunks: [ByteBuffer] = []
        var current = allocator.buffer(capacity: Self.chunkBytes)
        var frames = 0, frameBytes = 0, rawBytes = 0
        // Each frame as FramePage.appendFrame lays it out: a u32 little-endian length, the bytes.
        let (next, more) = try collect { f in
            rawBytes += FrameHeader.rawBytes(of: f)
            if current.writableBytes < f.count + 4 {
                if current.readableBytes > 0 { chunks.append(current) }
                current = allocator.buffer(capacity: max(Self.chunkBytes, f.count + 4))
            }
            current.writeInteger(UInt32(f.count), endianness: .little)
            current.writeBytes(f)
            frames += 1
            frameBytes += f.count
        }
        if !framesOnly { current.writeBytes(FramePage.trailer(frames: frames)) }
        chunks.append(current)
        buffers = framesOnly ? chunks : [ByteBuffer(bytes: FramePage.head(next: next, more: more))] + chunks
        self.next = next
        self.more = more
        self.frames = frames
        self.frameBytes = frameBytes
        self.rawBytes = rawBytes
    }

    /// The page as one array (tests).
    var bytes: [UInt8] { buffers.flatMap { Array($0.readableBytesView) } }
}

/// A snapshot made for sending: an open descriptor of its (already unlinked) file, its size and
/// its SHA-256, sent ahead as headers so the receiver checks every byte. Closed when the last
/// answer using it is done.
final class SnapshotData: @unchecked Sendable {
    let fd: Int32
    let size: Int
    let sha256: String
    /// The store's cursor the snapshot covers.
    let cursor: ReplicationCursor
    static let chunkBytes = OutgoingPage.chunkBytes

    /// Opens the file at `path`, unlinks it and hashes it.
    init(path: String, cursor: ReplicationCursor) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw EndpointError(500, "the snapshot could not be read back") }
        unlink(path)
        self.fd = fd
        self.cursor = cursor
        var hasher = SHA256()
        var buffer = [UInt8](repeating: 0, count: Self.chunkBytes)
        var offset = 0
        while true {
            let n = try buffer.withUnsafeMutableBytes { try Self.pread(fd, $0, at: offset) }
            if n == 0 { break }
            buffer.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            offset += n
        }
        size = offset
        sha256 = hex(hasher.finalize())
    }

    static func pread(_ fd: Int32, _ into: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int {
        while true {
            let n = Glibc.pread(fd, into.baseAddress, into.count, off_t(offset))
            if n >= 0 { return n }
            if errno != EINTR { throw EndpointError(500, "reading the snapshot failed (errno \(errno))") }
        }
    }

    deinit { close(fd) }
}

/// One answer's reading of a snapshot, in chunks from its own offset.
public final class SnapshotFile: @unchecked Sendable {
    private let data: SnapshotData
    private var offset = 0
    public var size: Int { data.size }
    public var sha256: String { data.sha256 }
    /// The cursor the snapshot covers (its anchors).
    public var cursor: ReplicationCursor { data.cursor }

    init(_ data: SnapshotData) { self.data = data }

    /// The next chunk, or nil at the end.
    public func next() throws -> Data? {
        let want = min(SnapshotData.chunkBytes, data.size - offset)
        guard want > 0 else { return nil }
        var chunk = Data(count: want)
        let n = try chunk.withUnsafeMutableBytes { try SnapshotData.pread(data.fd, $0, at: offset) }
        guard n > 0 else { throw EndpointError(500, "the snapshot ended early") }
        offset += n
        return n == want ? chunk : chunk.prefix(n)
    }
}
