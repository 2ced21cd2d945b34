import ArgumentParser
import EventLog
import Foundation
import Projections
import Replicator

/// Options of the commands that talk to another replica.
struct PeerOptions: ParsableArguments {
    @Option(help: "Bearer token for an HTTP peer (default: $EVCTL_TOKEN).") var token: String?
    @Option(name: .customLong("ca-cert"), help: "PEM file of the certificate authority to trust for an https:// peer.") var caCert: String?
    @Option(name: .customLong("page-bytes"), help: "Bytes per page asked of an HTTP peer (default 8 MiB; the server caps it at 32 MiB).") var pageBytes: Int = 8 << 20
    @Option(help: "Attempts per step before giving up on transient failures (connection refused, 503...).") var attempts: Int = 5
    @Flag(name: .customLong("no-project"), help: "Only append what a pull brings; project later with `evctl replay`.") var noProject = false
    @Flag(name: .customLong("insecure-http"), help: "Send the token over plain http:// to a host other than this machine (anyone on the way can read it).") var insecureHTTP = false

    var resolvedToken: String? {
        if let token { return token }
        if let env = ProcessInfo.processInfo.environment["EVCTL_TOKEN"], !env.isEmpty { return env }
        return nil
    }

    var limits: PageLimits { PageLimits(maxBytes: max(1, pageBytes)) }
    var retry: RetryPolicy { RetryPolicy(attempts: max(1, attempts)) }

    static func isURL(_ s: String) -> Bool {
        let l = s.lowercased()
        return l.hasPrefix("http://") || l.hasPrefix("https://")
    }

    /// Runs `body` with a client for `url`, shut down afterwards whatever happens.
    func withTransport<T>(_ url: String, replica: ReplicaID, _ body: (HTTPTransport) async throws -> T) async throws -> T {
        let t = try HTTPTransport(url: url, token: resolvedToken, caCertificate: caCert, replica: replica, insecureHTTP: insecureHTTP)
        do {
            let r = try await body(t)
            await t.shutdown()
            return r
        } catch {
            await t.shutdown()
            throw error
        }
    }
}

/// The name a peer is remembered by in peers.sqlite: a URL as given (without credentials), a path made absolute.
func peerName(_ peer: String) -> String {
    if PeerOptions.isURL(peer) {
        if var c = URLComponents(string: peer) {
            c.user = nil
            c.password = nil
            c.query = nil
            return c.string ?? peer
        }
        return peer
    }
    return peer.hasPrefix("/") ? peer : FileManager.default.currentDirectoryPath + "/" + peer
}

/// Runs one exchange with a peer and remembers its outcome (time, error, and the peer's cursor
/// when the peer acknowledged what it holds; nil keeps the cursor remembered before) in
/// peers.sqlite. `compact` trusts these cursors, so only a peer's own word goes in them.
func remembering<T>(_ store: Store, peer: String, _ body: () async throws -> (T, pulled: Int, pushed: Int, cursor: ReplicationCursor?)) async throws -> T {
    let state = try PeerState(store: store)
    let name = peerName(peer)
    do {
        let (value, pulled, pushed, cursor) = try await body()
        try state.recordSuccess(name, cursor: cursor, pulled: pulled, pushed: pushed)
        return value
    } catch {
        try? state.recordFailure(name, error: String(describing: error))
        throw error
    }
}

/// Shows how a transfer is going on a terminal.
func transferProgress(_ verb: String) -> @Sendable (TransferProgress) -> Void {
    let start = Date()
    return { p in
        let secs = max(0.001, Date().timeIntervalSince(start))
        Terminal.progress(String(format: "%@: %d events in %d frames, %.1f MiB, %.1f MiB/s", verb, p.events, p.frames,
                                 Double(p.bytes) / 1048576, Double(p.bytes) / 1048576 / secs))
    }
}

enum Ship {
    /// A pull session from any transport into `mine`, bootstrapping from the peer's snapshot when
    /// the peer no longer holds the log from this store's cursor; progress shown on a terminal.
    static func pull(_ mine: Store, from t: any ReplicaTransport, peer: PeerOptions) async throws -> TransferSummary {
        defer { Terminal.endProgress() }
        return try await Replication.pull(from: t, store: mine, project: !peer.noProject, limits: peer.limits, retry: peer.retry,
                                          lockWait: StoreSync.lockWaitSeconds, recovered: Terminal.reportRecovery, progress: transferProgress("pulling"))
    }
}

/// Pull and push over HTTP, with the sessions' retries; both ends project what they receive.
enum HTTPShip {
    /// One exchange with `evctl serve` at `url`: a pull, a push, or both (the push then starts
    /// from the server cursor the pull learned), remembered in peers.sqlite.
    static func exchange(_ mine: Store, url: String, peer: PeerOptions, pull: Bool, push: Bool) async throws
        -> (pulled: TransferSummary?, pushed: TransferSummary?) {
        try await peer.withTransport(url, replica: mine.replicaID) { t in
            try await remembering(mine, peer: url) {
                defer { Terminal.endProgress() }
                let a = pull ? try await Ship.pull(mine, from: t, peer: peer) : nil
                let b = push ? try await Replication.push(from: mine, to: t, known: a?.peerHolds, limits: peer.limits, retry: peer.retry,
                                                          progress: transferProgress("pushing")) : nil
                // What the server holds by its own word: its answer to the push, or the cursor it
                // sent with the pull's pages (never the pull's next cursor, which is this store's).
                return ((a, b), a?.events ?? 0, b?.events ?? 0, b?.peerCursor ?? a?.peerHolds)
            }
        }
    }
}

func printSummary(_ s: TransferSummary, json: Bool, verb: String) {
    if json {
        print(JSON.object([("frames", String(s.frames)), ("events", String(s.events)), ("already_held", String(s.alreadyHeld)),
                           ("pages", String(s.pages)), ("bytes", String(s.bytes)), ("retries", String(s.retries)),
                           ("peer_cursor", JSON.string(s.peerCursor.token)), ("bootstrapped", s.bootstrapped ? "true" : "false")]))
    } else {
        if s.bootstrapped { print("bootstrapped from the peer's snapshot (the peer no longer holds the log from this store's cursor)") }
        print("\(verb) \(s.events) events in \(s.frames) frames (\(s.pages) pages, \(s.bytes) bytes)" + (s.retries > 0 ? ", \(s.retries) retries" : ""))
    }
}

func printReceive(_ r: ReceiveResult, json: Bool, verb: String) {
    if json {
        let tips = r.tips.sorted { $0.key < $1.key }.map { JSON.string($0.key.description) + ":" + String($0.value.rawValue) }.joined(separator: ",")
        print(JSON.object([("frames", String(r.frames)), ("events", String(r.events)), ("already_held", String(r.alreadyHeld)), ("origins", "{" + tips + "}")]))
    } else {
        print("\(verb) \(r.events) events in \(r.frames) frames" + (r.alreadyHeld > 0 ? " (\(r.alreadyHeld) frames already held)" : ""))
    }
}

struct ExportCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write the frames past a cursor (everything by default) to a bundle file, verbatim.",
        discussion: "Bundles carry logs on removable media; `evctl import` verifies every frame before it writes anything."
    )
    @OptionGroup var options: StoreOptions
    @Option(help: "Only what lies past this cursor token (see `evctl cursor` on the receiving store).") var since: String?
    @Option(help: "The bundle file to write.") var out: String

    func execute() throws {
        let store = try options.open()
        var cursor = ReplicationCursor.empty
        if let since {
            do { cursor = try ReplicationCursor(token: since) } catch { throw ValidationError("--since: \(error)") }
        }
        let r = try FrameBundle.export(store: store, since: cursor, to: out)
        if options.json {
            print(JSON.object([("frames", String(r.frames)), ("events", String(r.events)), ("bytes", String(r.bytes)), ("cursor", JSON.string(r.cursor.token))]))
        } else {
            print("exported \(r.events) events in \(r.frames) frames (\(r.bytes) bytes) to \(out)")
        }
    }
}

struct ImportCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Append the frames of a bundle file (verified first; importing twice changes nothing), then project them."
    )
    @OptionGroup var options: StoreOptions
    @Argument(help: "The bundle file.") var file: String

    func execute() throws {
        let r = try StoreSync.importBundle(file, to: try options.open(), recovered: Terminal.reportRecovery, progress: ProjectionProgress().report)
        Terminal.endProgress()
        printReceive(r, json: options.json, verb: "imported")
    }
}

struct PullCommand: AsyncStoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "pull",
        abstract: "Fetch what another replica holds past this store's cursor (SOURCE: an http(s):// URL of `evctl serve`, or a path to a store).")
    @OptionGroup var options: StoreOptions
    @OptionGroup var peer: PeerOptions
    @Argument(help: "The other replica: a URL or a path.") var source: String

    func execute() async throws {
        let mine = try options.open()
        if PeerOptions.isURL(source) {
            let s = try await HTTPShip.exchange(mine, url: source, peer: peer, pull: true, push: false)
            return printSummary(s.pulled!, json: options.json, verb: "pulled")
        }
        let other = try Store.open(at: source)
        let s = try await remembering(mine, peer: source) {
            let s = try await Ship.pull(mine, from: StoreTransport(store: other), peer: peer)
            return (s, s.events, 0, try other.cursor())
        }
        printSummary(s, json: options.json, verb: "pulled")
    }
}

struct PushCommand: AsyncStoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Send another replica what this store holds past its cursor (TARGET: an http(s):// URL, or a path to a store, whose writer lock is taken).")
    @OptionGroup var options: StoreOptions
    @OptionGroup var peer: PeerOptions
    @Argument(help: "The other replica: a URL or a path.") var target: String

    func execute() async throws {
        let mine = try options.open()
        if PeerOptions.isURL(target) {
            let s = try await HTTPShip.exchange(mine, url: target, peer: peer, pull: false, push: true)
            return printSummary(s.pushed!, json: options.json, verb: "pushed")
        }
        let other = try Store.open(at: target)
        let r = try await remembering(mine, peer: target) {
            let r = try StoreSync.ship(from: mine, to: other, recovered: Terminal.reportRecovery)
            return (r, 0, r.events, try other.cursor())
        }
        printReceive(r, json: options.json, verb: "pushed")
    }
}

struct SyncCommand: AsyncStoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Pull from another replica, then push to it: afterwards both hold the same logs (PEER: a URL or a path).")
    @OptionGroup var options: StoreOptions
    @OptionGroup var peer: PeerOptions
    @Argument(help: "The other replica: a URL or a path.") var source: String
    @Flag(help: "Keep in sync until stopped: pull when the server says it has more, push each local commit, reconnect with backoff (a URL only).")
    var follow = false

    func validate() throws {
        if follow && !PeerOptions.isURL(source) { throw ValidationError("--follow needs the URL of an `evctl serve`") }
    }

    func execute() async throws {
        let mine = try options.open()
        if follow {
            try await Follow.run(mine, url: source, peer: peer, json: options.json)
            return
        }
        let pulled: Int, pushed: Int
        if PeerOptions.isURL(source) {
            let s = try await HTTPShip.exchange(mine, url: source, peer: peer, pull: true, push: true)
            (pulled, pushed) = (s.pulled?.events ?? 0, s.pushed?.events ?? 0)
        } else {
            let other = try Store.open(at: source)
            (pulled, pushed) = try await remembering(mine, peer: source) {
                let a = try await Ship.pull(mine, from: StoreTransport(store: other), peer: peer)
                let b = try StoreSync.ship(from: mine, to: other, recovered: Terminal.reportRecovery)
                return ((a.events, b.events), a.events, b.events, try other.cursor())
            }
        }
        if options.json {
            print(JSON.object([("pulled_events", String(pulled)), ("pushed_events", String(pushed)), ("cursor", JSON.string(try mine.cursor().token))]))
        } else {
            print("pulled \(pulled) events, pushed \(pushed) events; now at \(try mine.cursor().token)")
        }
    }
}
