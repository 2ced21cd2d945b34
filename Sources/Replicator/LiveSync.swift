import EventLog
import Foundation

/// Keeps a store in sync with an `evctl serve` until cancelled (`evctl sync --follow`): catches
/// up both ways, then pulls each time the server says its durable cursor moved (`/v1/watch`) and
/// pushes each time this store's durable cursor moves (`CursorWatcher`: any process's append), and
/// reconnects with backoff when the link breaks: 0.5 s doubling to `backoffMax`, each pause
/// spread over [0.5, 1] of it, and started again after a watch that spoke and then lasted; or
/// the longer pause a server asks for with `Retry-After` (at most
/// `TransferFailure.retryAfterMax`, spread over up to half of it more). A permanent failure (a
/// refused token, refused frames, a cursor that is not one) ends it with that failure, except
/// that once connected, a proxy's answer on the way (`onTheWay`: a 404, a redirect) is retried.
/// An origin other than the store's own that the server refuses to take is left out
/// (`TransferSummary.refused`, in each exchange's summary), not sent again until the next
/// connection, and named by the state (`State.partlyInSync`) rather than reported as in sync.
public struct LiveSync: Sendable {
    /// One exchange: what a pull and a push moved (nil for the half not run).
    public struct Exchange: Sendable {
        public var pulled: TransferSummary?
        public var pushed: TransferSummary?
        public init(pulled: TransferSummary?, pushed: TransferSummary?) {
            self.pulled = pulled
            self.pushed = pushed
        }
    }

    /// Where the follower stands. Told after the first exchange of each connection, again when
    /// the server first refuses an origin on it, and at each retry.
    public enum State: Sendable, Equatable {
        /// Caught up both ways: the server holds every frame this store held at the exchange
        /// (`ReplicationCursor`, this store's cursor then), and this store every frame the
        /// server showed.
        case inSync(ReplicationCursor)
        /// Caught up both ways but for the origins the server refuses to take from this
        /// principal (another user's frames taken from a folder, say), each with the server's
        /// message. Those origins were not pushed: the server holds what of them it had from
        /// elsewhere (their writer's own push, say), nothing from this store. The set only grows
        /// until the connection ends, and the next connection asks again. (A case added on
        /// 2026-11-30: a `switch` over `State` must name it.) It names this store's own origin
        /// too when this store refused the server's frames of it (`TransferSummary.ownLogRefused`:
        /// a fork of its own log, restored from a backup and written to since): everything else
        /// is pulled, and changes to that origin alone push nothing on the connection (the
        /// server refuses them past what it holds).
        case partlyInSync(ReplicationCursor, refused: [ReplicaID: String])
        /// The link broke or the server failed for now; the follower tries again `after` seconds.
        case retrying(after: Double, because: String)

        static func caughtUp(_ cursor: ReplicationCursor, refused: [ReplicaID: String]) -> State {
            refused.isEmpty ? .inSync(cursor) : .partlyInSync(cursor, refused: refused)
        }
    }

    public let store: Store
    /// A new client for the server (one per connection attempt).
    public let connect: @Sendable () throws -> HTTPTransport
    public var project = true
    public var limits = PageLimits()
    public var retry = RetryPolicy()
    /// The longest pause between connections of the follower's own backoff, at least 0.5 s (not
    /// a number: 30 s).
    public var backoffMax = 30.0
    /// The random draw that spreads each reconnection's pause over [0.5, 1] of the backoff (a
    /// server that restarts drops every follower at once; they should not all come back at
    /// once). Tests pass a fixed one.
    public var jitter: @Sendable () -> Double = { Double.random(in: 0...1) }
    /// Runs each exchange: a pull and/or a push (`known`: the server's cursor, if known;
    /// `refused`: the origins the server refused on this connection, for `Replication.push`).
    /// nil: the plain `Replication.pull` and `push` with `project`, `limits` and `retry`. Set it to
    /// record peer state around them.
    public var exchange: (@Sendable (_ t: HTTPTransport, _ pull: Bool, _ push: Bool, _ known: ReplicationCursor?,
                                     _ refused: [ReplicaID: String]) async throws -> Exchange)?
    public var onExchange: @Sendable (Exchange) -> Void = { _ in }
    public var onState: @Sendable (State) -> Void = { _ in }

    public init(store: Store, connect: @escaping @Sendable () throws -> HTTPTransport) {
        self.store = store
        self.connect = connect
    }

    private enum Trigger: Sendable {
        case remote(ReplicationCursor)
        case local(ReplicationCursor)
        /// The watch ended, and why: with the pause its server asked for (a 429 past the watches
        /// one user may hold open, a 503), or for good (`afterWatch`: a token refused, a cursor
        /// that is not one).
        case ended(TransferFailure)
    }

    /// A connection whose watch stayed up at least this long after it first spoke was a working
    /// link: the backoff starts again from its least after it. One that ends sooner (a server
    /// that sends a cursor and hangs up, over and over) keeps doubling it.
    var steadyAfter: Duration = .seconds(10)

    /// The backoff after a connection whose watch spoke for `spokeFor` (nil: it never spoke):
    /// its least again after a working link (`steadyAfter`), else `current`.
    static func backoff(_ current: Double, spokeFor: Duration?, steadyAfter: Duration) -> Double {
        guard let spokeFor, spokeFor >= steadyAfter else { return current }
        return 0.5
    }

    /// Whether a failure is an answer from something on the way rather than the server's own
    /// word: one with an HTTP status whose code says only that it was not a Logbook answer (a
    /// proxy's 404 while the service behind it is replaced, a redirect, a 400 page). Once this
    /// follower has been connected, an exchange that meets one is tried again, as a watch is.
    static func onTheWay(_ f: TransferFailure) -> Bool {
        f.status != nil && (f.code == .invalidAnswer || f.code == .badRequest)
    }

    /// What a watch's end means for the follower. It ends the follower only for what the server
    /// alone says: a refusal of this token (codes `unauthorized` and `forbidden`: 401, 403) or a
    /// cursor that is not one (a line or event of the stream past its bound included). Anything
    /// else on the way (a proxy's 404 while a service is replaced, a TLS stream cut without its
    /// close, a 5xx, a redirect) is a link to make again, with the pause the answer asked for.
    static func afterWatch(_ f: TransferFailure) -> TransferFailure {
        switch f.code {
        case .unauthorized, .forbidden: return f
        case .invalidAnswer where f.status == nil: return f
        default:
            var again = TransferFailure.transient(f.message, code: f.retry == .transient ? f.code : .network)
            again.retryAfter = f.retryAfter
            return again
        }
    }

    /// Runs until the task is cancelled (returns) or a permanent failure (throws).
    public func run() async throws {
        let (store, project, limits, retry) = (self.store, self.project, self.limits, self.retry)
        let exchange = self.exchange ?? { t, pull, push, known, refused in
            // A connection's first exchange (the one that pulls and pushes) compares the server's
            // frame at the store's own tip with the store's (a fork of its own log); the pulls
            // that follow a move of the server ask past the tip only.
            let a = pull ? try await Replication.pull(from: t, store: store, project: project, limits: limits, retry: retry, checkingOwnTip: push) : nil
            let b = push ? try await Replication.push(from: store, to: t, known: a?.peerHolds ?? known, limits: limits, retry: retry, refused: refused) : nil
            return Exchange(pulled: a, pushed: b)
        }
        let local = try CursorWatcher(store: store)
        defer { local.stop() }
        var backoff = 0.5
        // Whether a connection got as far as its first exchange: from then on, what a proxy on
        // the way answers is a link to make again, not a wrong address.
        var connected = false
        while !Task.isCancelled {
            let t = try connect()
            var heard: ContinuousClock.Instant?  // when this connection's watch first spoke
            do {
                defer { Task { await t.shutdown() } }
                let first = try await exchange(t, true, true, nil, [:])
                connected = true
                onExchange(first)
                var server = first.pushed?.peerCursor ?? first.pulled?.peerHolds ?? .empty
                // Where the push answers placed each origin. A scoped server's watch shows only
                // what its user may read, and an origin it takes but does not show (a share's logs,
                // held by a replica whose member was removed: the answer places them at this
                // replica's own last frame) would otherwise be sent again at each local change.
                // Only for origins the watch does not show: for the others the watch, which gives
                // durable positions only, decides as before.
                var answered = first.pushed?.peerCursor ?? .empty
                // The origins the server refuses to take from this principal: left out of the
                // pushes of this connection, and a change to them alone sends nothing.
                var refused = first.pushed?.refused ?? [:]
                // Why this store refused the server's frames of its own origin, if it did.
                var ownRefused = first.pulled?.ownLogRefused
                func notCaughtUp() -> [ReplicaID: String] {
                    guard let ownRefused else { return refused }
                    return refused.merging([store.replicaID: ownRefused]) { old, _ in old }
                }
                // Whether moves of origin `o` count: not those of the own origin once refused.
                func counts(_ o: ReplicaID) -> Bool { ownRefused == nil || o != store.replicaID }
                onState(.caughtUp(try store.cursor(), refused: notCaughtUp()))
                let (triggers, feed) = AsyncStream.makeStream(of: Trigger.self)
                let changes = local.changes()
                // The server's watch and the local changes are read by child tasks, not
                // unstructured ones: they run where the follower runs (an executor its caller
                // prefers), and end with it. On Swift's shared pool, held by other work, a watch's
                // cursor could wait there for seconds while local changes went ahead of it.
                try await withThrowingTaskGroup(of: Void.self) { readers in
                    readers.addTask {
                        do {
                            for try await c in t.watch() { feed.yield(.remote(c)) }
                            feed.yield(.ended(.transient("the server ended the stream")))
                        } catch {
                            feed.yield(.ended((error as? TransferFailure) ?? .transient(String(describing: error))))
                        }
                    }
                    readers.addTask { for await c in changes { feed.yield(.local(c)) } }
                    defer { readers.cancelAll() }
                    for await trigger in triggers {
                        try Task.checkCancellation()
                        switch trigger {
                        case .remote(let c):
                            if heard == nil { heard = .now }
                            server = c.merged(with: answered.filtered { c[$0].rawValue == 0 })
                            // The own origin the store refused: the server's other history of it moves
                            // nothing here.
                            if !(try store.cursor().includes(c.filtered(counts))) {
                                let e = try await exchange(t, true, false, nil, refused)
                                onExchange(e)
                                if ownRefused == nil, let why = e.pulled?.ownLogRefused {
                                    ownRefused = why
                                    onState(.partlyInSync(try store.cursor(), refused: notCaughtUp()))
                                }
                            }
                        case .local(let c):
                            if !server.includes(c.filtered { refused[$0] == nil && counts($0) }) {
                                let e = try await exchange(t, false, true, server, refused)
                                let known = refused.count
                                refused.merge(e.pushed?.refused ?? [:]) { old, _ in old }
                                if let holds = e.pushed?.peerCursor {
                                    server = server.merged(with: holds)
                                    answered = answered.merged(with: holds)
                                }
                                onExchange(e)
                                // The server refused an origin it had not on this connection: no
                                // longer wholly in sync, and the app is told so.
                                if refused.count > known { onState(.partlyInSync(try store.cursor(), refused: notCaughtUp())) }
                            }
                        case .ended(let failure):
                            throw Self.afterWatch(failure)
                        }
                    }
                }
            } catch is CancellationError {
                return
            } catch let f as TransferFailure where f.retry == .permanent && !(connected && Self.onTheWay(f)) {
                if Task.isCancelled { return }
                throw f
            } catch {
                if Task.isCancelled { return }
                // The backoff starts again from its least only after a working link: a watch
                // that spoke (it sends the cursor at once) and then lasted. When it started again
                // after each connection's first exchange, a watch refused at every connection had
                // the follower connect and exchange twice a second for ever.
                backoff = Self.backoff(backoff, spokeFor: heard.map { ContinuousClock.now - $0 }, steadyAfter: steadyAfter)
                // A server that said how long to stay away is taken at its word, within bounds.
                let draw = min(1, max(0, jitter()))
                let pause = TransferFailure.pause(backoff: backoff * (0.5 + 0.5 * draw),
                                                  asked: (error as? TransferFailure)?.retryAfter, jitter: draw)
                onState(.retrying(after: pause, because: String(describing: error)))
                do { try await Task.sleep(nanoseconds: TransferFailure.nanoseconds(pause)) } catch { return }
                backoff = min(backoffMax.isNaN ? 30 : max(0.5, backoffMax), backoff * 2)
            }
        }
    }
}
