import ArgumentParser
import Foundation
import EventLog
import Logbook
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

    /// The peer at `address` with these options.
    func peer(_ address: String) -> Peer {
        Peer(address, token: resolvedToken, caCertificate: caCert, insecureHTTP: insecureHTTP,
             limits: PageLimits(maxBytes: max(1, pageBytes)), retry: RetryPolicy(attempts: max(1, attempts)))
    }

    /// The store opened for a transfer: nothing is taken at open (a pull with nothing new takes
    /// no lock and touches no file); receiving waits up to 10 s for another writer.
    func book(_ options: StoreOptions) throws -> Logbook {
        try options.book(.inspect, project: !noProject, lockWait: StoreSync.lockWaitSeconds)
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

func printSummary(_ s: TransferSummary, json: Bool, verb: String) throws {
    if json {
        Reports.print(TransferReport(frames: s.frames, events: s.events, alreadyHeld: s.alreadyHeld, pages: s.pages, bytes: s.bytes,
                                     retries: s.retries, peerCursor: s.peerCursor.token, bootstrapped: s.bootstrapped, refused: refusedMap(s.refused),
                                     peerHoldsOwnLogTo: s.peerHoldsOwnLogTo?.rawValue, ownLogRefused: s.ownLogRefused))
    } else {
        if s.bootstrapped { print("bootstrapped from the peer's snapshot (the peer no longer holds the log from this store's cursor)") }
        print("\(verb) \(s.events) events in \(s.frames) frames (\(s.pages) pages, \(s.bytes) bytes)" + (s.retries > 0 ? ", \(s.retries) retries" : ""))
    }
    let ownRefused = reportOwnLogRefused(s)
    try reportRefused(s.refused)
    if ownRefused { throw ExitCode(1) }
}

/// Says on stderr why a pull left out the peer's frames of this store's own origin (a fork of
/// its own log, say; everything else was pulled), and whether it did: the command then ends
/// with exit status 1.
func reportOwnLogRefused(_ s: TransferSummary?) -> Bool {
    guard let why = s?.ownLogRefused else { return false }
    Terminal.error("the peer's frames of this store's own log were not taken (everything else was): \(why) [own_log]")
    return true
}

/// Says on stderr when a push's peer holds more of this store's own log than the store does.
func reportOwnLogBehind(_ held: Seq?) {
    guard let held else { return }
    Terminal.note("warning: the peer holds this store's own log through seq \(held) (by its cursor), past where it ends here: this store lost that tail "
                  + "(restored from a backup, or a damaged tail cut off). Pull from the peer before appending (`evctl pull`): "
                  + "events appended first take seqs the peer holds with other events, and no peer takes them")
}

/// The origins a push's peer refused, by origin, for a `--json` report.
func refusedMap(_ refused: [ReplicaID: String]) -> ReportJSON.Map<String> {
    ReportJSON.Map(refused.sorted { $0.key < $1.key }.map { ($0.key.description, $0.value) })
}

/// Names on stderr each origin the peer refused (the rest was pushed), and ends with
/// `Evctl.pushedExceptRefused` when there is one.
func reportRefused(_ refused: [ReplicaID: String]) throws {
    guard !refused.isEmpty else { return }
    for (o, why) in refused.sorted(by: { $0.key < $1.key }) {
        Terminal.error("origin \(o) was not pushed (its frames stay in this store; every other origin was): \(why) [forbidden]")
    }
    throw ExitCode(Evctl.pushedExceptRefused)
}

func printReceive(_ r: ReceiveResult, json: Bool, verb: String) {
    if json {
        Reports.print(ReceiveReport(frames: r.frames, events: r.events, alreadyHeld: r.alreadyHeld,
                                    origins: .init(r.tips.sorted { $0.key < $1.key }.map { ($0.key.description, $0.value.rawValue) })))
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
        var cursor = ReplicationCursor.empty
        if let since {
            do { cursor = try ReplicationCursor(token: since) } catch { throw ValidationError("--since: \(error)") }
        }
        let r = try options.book(.inspect).exportBundle(to: out, since: cursor)
        if options.json {
            Reports.print(ExportReport(frames: r.frames, events: r.events, bytes: r.bytes, cursor: r.cursor.token))
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
        let r = try options.book(.inspect, lockWait: StoreSync.lockWaitSeconds).importBundle(file, progress: ProjectionProgress().report)
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
        let e = try await peer.book(options).pull(from: peer.peer(source), progress: transferProgress("pulling"))
        Terminal.endProgress()
        try printSummary(e.pulled ?? TransferSummary(), json: options.json, verb: "pulled")
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
        let e = try await peer.book(options).push(to: peer.peer(target), progress: transferProgress("pushing"))
        Terminal.endProgress()
        defer { reportOwnLogBehind(e.peerHoldsOwnLogTo) }
        if let r = e.received { return printReceive(r, json: options.json, verb: "pushed") }
        try printSummary(e.pushed ?? TransferSummary(), json: options.json, verb: "pushed")
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
        if follow && !Peer.isURL(source) { throw ValidationError("--follow needs the URL of an `evctl serve`") }
    }

    func execute() async throws {
        let book = try peer.book(options)
        if follow {
            try await Follow.run(book, peer: peer.peer(source), json: options.json)
            return
        }
        let e = try await book.sync(with: peer.peer(source), progress: transferProgress("syncing"))
        Terminal.endProgress()
        let refused = e.pushed?.refused ?? [:]
        if options.json {
            Reports.print(SyncReport(pulledEvents: e.pulledEvents, pushedEvents: e.pushedEvents, cursor: try book.cursor().token, refused: refusedMap(refused),
                                     peerHoldsOwnLogTo: e.peerHoldsOwnLogTo?.rawValue, ownLogRefused: e.pulled?.ownLogRefused))
        } else {
            print("pulled \(e.pulledEvents) events, pushed \(e.pushedEvents) events; now at \(try book.cursor().token)")
        }
        // A fork named by the pull says more than the push's warning.
        if e.pulled?.ownLogRefused == nil { reportOwnLogBehind(e.peerHoldsOwnLogTo) }
        let ownRefused = reportOwnLogRefused(e.pulled)
        try reportRefused(refused)
        if ownRefused { throw ExitCode(1) }
    }
}
