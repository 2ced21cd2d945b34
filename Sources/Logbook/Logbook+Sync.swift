import EventLog
import Foundation
import Projections
import Replicator

/// Another replica to sync with: an `evctl serve` reached by URL, or a store reached by path.
public struct Peer: Sendable {
    /// Where the other replica is.
    public enum Location: Sendable, Equatable {
        /// An `evctl serve` at an http(s) URL.
        case url(String)
        /// A store directory on this machine (or a mounted volume); its writer lock is taken for a push.
        case path(String)
    }

    /// Where the peer is.
    public var location: Location
    /// The bearer token for an HTTP peer.
    public var token: String?
    /// PEM file of the certificate authority to trust for an https peer.
    public var caCertificate: String?
    /// Allow sending the token over plain http to a host other than this machine.
    public var insecureHTTP = false
    /// Page sizes asked of the peer.
    public var limits = PageLimits()
    /// Attempts and backoff on transient failures (connection refused, 503…).
    public var retry = RetryPolicy()

    /// A peer at `address`: an http:// or https:// URL, else a path to a store.
    public init(_ address: String, token: String? = nil, caCertificate: String? = nil, insecureHTTP: Bool = false,
                limits: PageLimits = PageLimits(), retry: RetryPolicy = RetryPolicy()) {
        location = Peer.isURL(address) ? .url(address) : .path(address)
        self.token = token
        self.caCertificate = caCertificate
        self.insecureHTTP = insecureHTTP
        self.limits = limits
        self.retry = retry
    }

    /// Whether `address` is an http(s) URL rather than a path.
    public static func isURL(_ address: String) -> Bool {
        let l = address.lowercased()
        return l.hasPrefix("http://") || l.hasPrefix("https://")
    }

    /// The name the peer is remembered by (`LogbookReader.peers()`): a URL without credentials or
    /// query, a path made absolute.
    public var name: String {
        switch location {
        case .url(let u):
            guard var c = URLComponents(string: u) else { return u }
            c.user = nil
            c.password = nil
            c.query = nil
            return c.string ?? u
        case .path(let p):
            return p.hasPrefix("/") ? p : FileManager.default.currentDirectoryPath + "/" + p
        }
    }

    func transport(for replica: ReplicaID) throws -> HTTPTransport {
        guard case .url(let u) = location else { throw LogbookError(.invalid, "\(name) is a path, not the URL of an `evctl serve`") }
        return try HTTPTransport(url: u, token: token, caCertificate: caCertificate, replica: replica, insecureHTTP: insecureHTTP)
    }
}

/// What one exchange with a peer moved.
public struct Exchange: Sendable {
    /// What was pulled (nil when not asked).
    public var pulled: TransferSummary?
    /// What was pushed to an HTTP peer (nil when not asked, or the peer is a path).
    public var pushed: TransferSummary?
    /// What a store reached by path received from a push.
    public var received: ReceiveResult?
    /// Push: how far the peer holds this store's own log, when that is past where the log here
    /// ends (`TransferSummary.peerHoldsOwnLogTo`; for a peer reached by path, its cursor after
    /// the push).
    public var peerHoldsOwnLogTo: Seq?

    /// Events pulled.
    public var pulledEvents: Int { pulled?.events ?? 0 }
    /// Events pushed.
    public var pushedEvents: Int { pushed?.events ?? received?.events ?? 0 }
}

extension Logbook {
    /// Fetches what `peer` holds past this store's cursor, verifying every frame, and projects
    /// it. When the peer no longer holds the log from this store's cursor (it compacted), the
    /// store is bootstrapped from the peer's snapshot — opened read-only only, since it needs
    /// the store to itself; opened for writing, that case is the `TransferFailure` `cursor_expired`.
    /// The outcome is remembered in the peer bookkeeping (`peers()`).
    @discardableResult
    package func pull(from peer: Peer, progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> Exchange {
        try await exchange(with: peer, pull: true, push: false, progress: progress)
    }

    /// Sends `peer` what this store holds past the peer's cursor.
    @discardableResult
    package func push(to peer: Peer, progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> Exchange {
        try await exchange(with: peer, pull: false, push: true, progress: progress)
    }

    /// Pulls from `peer`, then pushes to it: afterwards both hold the same logs.
    @discardableResult
    package func sync(with peer: Peer, progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> Exchange {
        try await exchange(with: peer, pull: true, push: true, progress: progress)
    }

    /// The peers this store exchanged with, their last cursor, time and error.
    package func peers() throws -> [PeerState.Peer] {
        RegionRecorder.readsOutsideTheProjection()
        // Read without creating or writing the file: a reader never needs to write.
        return try PeerState.peers(of: store)
    }

    /// One exchange, remembered: the outcome (time, error, and the peer's cursor when the peer
    /// acknowledged what it holds; `compact` trusts these cursors, so only a peer's own word
    /// goes in them).
    func exchange(with peer: Peer, pull: Bool, push: Bool, progress: (@Sendable (TransferProgress) -> Void)?) async throws -> Exchange {
        switch peer.location {
        case .url:
            let t = try peer.transport(for: store.replicaID)
            do {
                let e = try await exchange(t, peer: peer, pull: pull, push: push, known: nil, refused: [:], checkingOwnTip: true, progress: progress)
                await t.shutdown()
                return e
            } catch {
                await t.shutdown()
                throw error
            }
        case .path(let path):
            let other = try Store.open(at: path)
            return try await remembering(peer) {
                var e = Exchange()
                if pull { e.pulled = try await self.pullFrom(StoreTransport(store: other), peer: peer, progress: progress) }
                let holds: ReplicationCursor
                if push {
                    let (store, recovered) = (self.store, self.options.recovered)
                    e.received = try await Blocking.run { try StoreSync.ship(from: store, toPeer: other, recovered: recovered) }
                    holds = try other.cursor()
                    // A push never takes the peer's own-origin position past this store's.
                    e.peerHoldsOwnLogTo = try Replication.ownLogHeld(by: holds, pastThatOf: store)
                } else {
                    holds = try other.cursor()
                }
                return (e, holds)
            }
        }
    }

    /// One exchange over an open HTTP link (also the step of `follow`).
    /// - Parameter checkingOwnTip: the pull compares the server's frame at this store's own tip
    ///   with its own (a fork of its own log): a one-off exchange does, and a follower's first on
    ///   each connection (the one that pulls and pushes); its pulls after a move of the server
    ///   ask past the tip only.
    func exchange(_ t: HTTPTransport, peer: Peer, pull: Bool, push: Bool, known: ReplicationCursor?, refused: [ReplicaID: String],
                  checkingOwnTip: Bool,
                  progress: (@Sendable (TransferProgress) -> Void)?) async throws -> Exchange {
        try await remembering(peer) {
            var e = Exchange()
            if pull { e.pulled = try await self.pullFrom(t, peer: peer, checkingOwnTip: checkingOwnTip, progress: progress) }
            if push {
                e.pushed = try await Replication.push(from: self.store, to: t, known: e.pulled?.peerHolds ?? known, limits: peer.limits,
                                                      retry: peer.retry, refused: refused, progress: progress)
                e.peerHoldsOwnLogTo = e.pushed?.peerHoldsOwnLogTo
            }
            // What the server holds by its own word: its answer to the push, or the cursor it
            // sent with the pull's pages (never the pull's next cursor, which is this store's).
            return (e, e.pushed?.peerCursor ?? e.pulled?.peerHolds)
        }
    }

    func pullFrom(_ t: any ReplicaTransport, peer: Peer, checkingOwnTip: Bool = true,
                  progress: (@Sendable (TransferProgress) -> Void)?) async throws -> TransferSummary {
        if writer != nil {
            return try await Replication.pull(from: t, into: try requireWriter("pull"), limits: peer.limits, retry: peer.retry,
                                              checkingOwnTip: checkingOwnTip, progress: progress)
        }
        return try await Replication.pull(from: t, store: store, project: options.project, limits: peer.limits, retry: peer.retry,
                                          lockWait: options.lockWait, checkingOwnTip: checkingOwnTip, recovered: options.recovered, progress: progress)
    }

    func remembering(_ peer: Peer, _ body: () async throws -> (Exchange, cursor: ReplicationCursor?)) async throws -> Exchange {
        // The peer bookkeeping is SQLite: opened and written off the cooperative pool.
        let state = try await Blocking.run { try self.peerState() }
        let name = peer.name
        do {
            let (e, cursor) = try await body()
            let (pulled, pushed) = (e.pulledEvents, e.pushedEvents)
            // Origins the peer refused are its last error until a push goes through whole; an
            // exchange that pushed nothing (a pull) leaves that note as it is.
            let refused = (e.pushed?.refused ?? [:]).sorted { $0.key < $1.key }.map { "origin \($0.key) not pushed: \($0.value)" }
            let note = refused.isEmpty ? nil : PeerState.refusalPrefix + refused.joined(separator: "; ")
            let pushRan = e.pushed != nil || e.received != nil
            try await Blocking.run { try state.recordSuccess(name, cursor: cursor, pulled: pulled, pushed: pushed, error: note, keepRefusal: !pushRan) }
            return e
        } catch {
            let why = String(describing: error)
            _ = try? await Blocking.run { try state.recordFailure(name, error: why) }
            throw error
        }
    }

    /// Keeps this store and the `evctl serve` at `peer` in sync until the task is cancelled:
    /// catches up both ways, then pulls the moment the server's cursor moves (its event stream)
    /// and pushes the moment this store's does (any process's append), reconnecting with
    /// backoff. Each exchange is remembered like a `sync`.
    /// - Parameters:
    ///   - onExchange: told of every exchange (also those that moved nothing).
    ///   - onState: told when the follower is in sync (`.partlyInSync` naming the origins the server
    ///     refuses, when it refuses any, and this store's own origin when it refused the server's
    ///     frames of it), and when it retries and why.
    /// - Throws: a permanent `TransferFailure` (refused token, a peer that is not a Logbook…).
    package func follow(_ peer: Peer, onExchange: @escaping @Sendable (Exchange) -> Void = { _ in },
                       onState: @escaping @Sendable (LiveSync.State) -> Void = { _ in }) async throws {
        guard case .url = peer.location else { throw LogbookError(.invalid, "following needs the URL of an `evctl serve`, not a path") }
        let replica = store.replicaID
        var live = LiveSync(store: store) { try peer.transport(for: replica) }
        live.project = options.project
        live.limits = peer.limits
        live.retry = peer.retry
        live.exchange = { [self] t, pull, push, known, refused in
            let e = try await self.exchange(t, peer: peer, pull: pull, push: push, known: known, refused: refused, checkingOwnTip: pull && push, progress: nil)
            return LiveSync.Exchange(pulled: e.pulled, pushed: e.pushed)
        }
        live.onExchange = { e in onExchange(Exchange(pulled: e.pulled, pushed: e.pushed)) }
        live.onState = onState
        try await live.run()
    }

    // MARK: Bundles and compaction

    /// Writes the frames past `since` (everything by default) to a bundle file, verbatim.
    package func exportBundle(to file: String, since: ReplicationCursor = .empty) throws -> FrameBundle.ExportResult {
        try FrameBundle.export(store: store, since: since, to: file)
    }

    /// Appends the frames of a bundle file (every frame verified first; importing twice changes
    /// nothing), then projects them.
    package func importBundle(_ file: String, progress: ((Int, Int) -> Void)? = nil) throws -> ReceiveResult {
        if writer != nil {
            let w = try requireWriter("import")
            return try w.exclusive {
                let r = try StoreSync.importBundle(file, into: w.appender)
                if w.projects { try w.projection.catchUp(progress: progress) }
                return r
            }
        }
        return try StoreSync.importBundle(file, to: store, recovered: options.recovered, progress: progress)
    }

    /// Drops old sealed segments every known peer already holds, keeping a snapshot that covers
    /// them (`withoutPeers`: compact up to the snapshot even when no peer is known). Needs the
    /// writer lock: opened for writing, close first or use a read-only Logbook.
    package func compact(withoutPeers: Bool = false) throws -> Compactor.Report {
        guard writer == nil else {
            throw LogbookError(.invalid, "compaction takes the store's writer lock itself", hint: "run it from a Logbook opened read-only")
        }
        return try Compactor.run(store: store, withoutPeers: withoutPeers, lockWait: options.lockWait)
    }
}
