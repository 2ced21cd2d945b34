import AsyncHTTPClient
import Domain
import EventLog
import LogbookServer
import Foundation
import Hub
import Logging
import NIOCore
import Replicator

/// `hub-load`: many simulated replicas against a hub, in one process over pooled connections
/// (docs/SCALING.md). Each replica is its own origin and token; users have two replicas each.
/// A step is one replica's small append pushed through one node, then its sibling (the same
/// user's other replica) pulling through another node, as live sync would on the watch event.
///
///     hub-load --replicas 10000 --seconds 60 [--concurrency 64] [--skip-store] [--unsigned] [--shares N] [--watch]
///
/// With `--watch`, every replica also holds a watch stream (`GET /v1/watch`) open on the node it
/// pulls through, as `evctl sync --follow` does, and a sibling pulls only once its watch has shown
/// the push: the push → sibling time then includes the watch's delivery, and the hub serves one
/// open stream per replica beside the load. A watch that fails or ends counts as an error.
///
/// Replicas sign their frames as stores made now do; `--unsigned` runs them as stores made
/// before signed logs, to measure what signatures cost the hub. `--shares N` has each user's
/// replicas write into one of N shares instead (user k's into share k mod N): their frames are
/// sealed logs of the share (docs/SHARING.md), which the hub verifies and stores unopened.
///
/// Runs against two `PostgresHub` nodes on a PostgreSQL cluster it starts (scripts/pg-cluster.sh)
/// and then against a store's hub (`ReplicaEndpoint`), in the same run, with the same replicas
/// and schedule. Prints one JSON object per backend: events/s, push→sibling-holds p50/p99,
/// errors, leaks (frames of another user's origin in a pull: must be 0).
@main struct HubLoad {
    static func main() async {
        do {
            try await run(CommandLine.arguments)
        } catch {
            // A clear error and a failing status, never a trap with a backtrace.
            FileHandle.standardError.write(Data("hub-load: \(error)\n".utf8))
            exit(2)
        }
    }

    nonisolated static func run(_ arguments: [String]) async throws {
        var replicas = 10_000, seconds = 60.0, concurrency = 64, skipStore = false, skipHub = false, unsigned = false, shares = 0, watch = false
        var args = arguments.dropFirst()
        func value(_ flag: String) throws -> String {
            guard let v = args.popFirst() else { throw HubError("\(flag) needs a value") }
            return v
        }
        while let a = args.popFirst() {
            switch a {
            case "--replicas": replicas = Int(try value(a)) ?? -1
            case "--seconds": seconds = Double(try value(a)) ?? -1
            case "--concurrency": concurrency = Int(try value(a)) ?? -1
            case "--skip-store": skipStore = true
            case "--skip-hub": skipHub = true
            case "--unsigned": unsigned = true
            case "--shares": shares = Int(try value(a)) ?? -1
            case "--watch": watch = true
            default: throw HubError("unknown argument \(a) (--replicas N, --seconds S, --concurrency C, --skip-store, --skip-hub, --unsigned, --shares N, --watch)")
            }
        }
        guard replicas >= 2, replicas % 2 == 0, seconds > 0, concurrency > 0, shares >= 0 else { throw HubError("--replicas must be even and ≥ 2, --seconds and --concurrency positive") }
        guard shares == 0 || !unsigned else { throw HubError("--shares needs signing replicas (not --unsigned)") }
        // Each watch holds a connection, and both of its ends are descriptors of this process.
        guard !watch || replicas <= Run.watchingReplicasMax else { throw HubError("--watch holds a connection per replica: at most \(Run.watchingReplicasMax) replicas") }
        var logger = Logger(label: "hub-load")
        logger.logLevel = .critical
        let fleet = Fleet(replicas: replicas, signed: !unsigned, shares: shares)
        let policy = try AccessPolicy(json: fleet.tokensJSON())
        let root = NSTemporaryDirectory() + "/hub-load-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        var config = ServerConfiguration()
        config.port = 0
        config.policy = policy
        config.limits.connectionsMax = max(config.limits.connectionsMax, concurrency * 4 + (watch ? replicas : 0))

        var rates: [Double] = []
        if !skipHub {
            let cluster = root + "/pg"
            let url = try shell(["start", cluster])
            defer { _ = try? shell(["stop", cluster]) }
            let database = try HubDatabase(url: url)
            let a = try await PostgresHub.open(database, policies: PolicySource(policy), logger: logger)
            let b = try await PostgresHub.open(database, policies: PolicySource(policy), logger: logger)
            defer {
                a.close()
                b.close()
            }
            try await ReplicaServer.withRunningServer(backend: a, configuration: config, logger: logger) { urlA in
                try await ReplicaServer.withRunningServer(backend: b, configuration: config, logger: logger) { urlB in
                    let r = try await Run(fleet: fleet.fresh(), nodes: [urlA, urlB], seconds: seconds, concurrency: concurrency, watching: watch).go()
                    print(r.json(backend: "postgres (2 nodes)"))
                    rates.append(r.eventsPerSecond)
                }
            }
        }
        if !skipStore {
            let store = try Store.create(at: root + "/store")
            try await ReplicaServer.withRunningServer(store: store, configuration: config, logger: logger) { url in
                let r = try await Run(fleet: fleet.fresh(), nodes: [url, url], seconds: seconds, concurrency: concurrency, watching: watch).go()
                print(r.json(backend: "store (1 node)"))
                rates.append(r.eventsPerSecond)
            }
        }
        // The figure `make bench` reports: the store's hub against PostgreSQL's, same run.
        if rates.count == 2, rates[0] > 0 {
            print(#"{"store_to_postgres_events_ratio":\#(String(format: "%.2f", rates[1] / rates[0]))}"#)
        }
    }

    /// Runs scripts/pg-cluster.sh (found next to the working directory's package).
    static func shell(_ args: [String]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/bash")
        p.arguments = ["scripts/pg-cluster.sh"] + args
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw HubError("scripts/pg-cluster.sh \(args[0]) failed (run hub-load from the package's folder)") }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// The simulated replicas: replica 2k and 2k+1 belong to user k.
struct Fleet: Sendable {
    let origins: [ReplicaID]
    /// Each replica's signing key, as stores made now have (nil with `--unsigned`: stores made
    /// before signed logs).
    let keys: [ReplicaKey]?
    let tokens: [String]
    /// With `--shares`: each share's id and content key; replica r writes into share (r / 2) mod N.
    let shares: [(id: ShareID, key: ContentKey)]
    init(replicas: Int, signed: Bool, shares: Int = 0) {
        keys = signed ? (0..<replicas).map { _ in ReplicaKey.generate() } : nil
        self.shares = (0..<shares).map { _ in
            let admin = ReplicaKey.generate()
            return (ShareID.derived(creator: admin.publicKey, nonce: (0..<16).map { _ in UInt8.random(in: 0...255) }), ContentKey.generate(epoch: 1))
        }
        let sharesCopy = self.shares
        origins = keys.map { ks in
            ks.indices.map { r in sharesCopy.isEmpty ? ks[r].replicaID : ReplicaID.shareLog(sharesCopy[(r / 2) % sharesCopy.count].id, signingKey: ks[r].publicKey) }
        } ?? (0..<replicas).map { _ in ReplicaID.random() }
        tokens = (0..<replicas).map { "load-\($0)-" + UUID().uuidString.lowercased() }
    }
    func share(_ r: Int) -> (id: ShareID, key: ContentKey)? { shares.isEmpty ? nil : shares[(r / 2) % shares.count] }
    func user(_ r: Int) -> String { "u\(r / 2)" }
    func sibling(_ r: Int) -> Int { r ^ 1 }
    func tokensJSON() -> Data {
        let principals = origins.indices.map {
            #"{"name":"r\#($0)","token":"\#(tokens[$0])","user":"\#(user($0))","push":["\#(origins[$0])"],"pull":true}"#
        }
        return Data(("{\"principals\":[" + principals.joined(separator: ",") + "]}").utf8)
    }
    /// The same replicas with logs of their own for a new run (each backend starts empty).
    func fresh() -> Fleet { self }
}

/// One run against some nodes.
final class Run: @unchecked Sendable {
    let fleet: Fleet
    let nodes: [String]
    let seconds: Double
    let concurrency: Int
    let lock = Lock()
    /// Per replica: its frame builder and frames sent; its cursor of pulled frames.
    var builders: [OriginFrameBuilder]
    var sent: [Int]
    var cursors: [ReplicationCursor]
    var busy: Set<Int> = []
    var latencies: [Double] = []
    /// Of each step: the push alone (until its answer), and the pulls the sibling made.
    var pushLatencies: [Double] = []
    var pullsMade = 0
    var events = 0, errors = 0, leaks = 0, steps = 0
    var firstError: String?
    let client: HTTPClient
    /// With `--watch`: per replica, the newest cursor its watch stream showed; the steps waiting
    /// for one to show a push; the watches that have shown a first cursor; their failures.
    let watching: Bool
    var watched: [ReplicationCursor]
    var waiters: [Int: [Waiter]] = [:]
    var nextWaiter = 0
    var watchesReady = 0, watchErrors = 0
    var stopped = false
    let watchClient: HTTPClient?
    /// The most replicas `--watch` takes: a connection each, both of whose ends are this
    /// process's descriptors.
    static let watchingReplicasMax = 4_000

    struct Waiter {
        let id: Int
        let origin: ReplicaID
        let seq: Seq
        let resume: CheckedContinuation<Bool, Never>
    }

    init(fleet: Fleet, nodes: [String], seconds: Double, concurrency: Int, watching: Bool = false) {
        self.fleet = fleet
        self.nodes = nodes
        self.seconds = seconds
        self.concurrency = concurrency
        self.watching = watching
        watched = Array(repeating: .empty, count: watching ? fleet.origins.count : 0)
        if watching {
            var w = HTTPClient.Configuration()
            w.connectionPool = .init(idleTimeout: .seconds(600), concurrentHTTP1ConnectionsPerHostSoftLimit: fleet.origins.count)
            watchClient = HTTPClient(eventLoopGroupProvider: .singleton, configuration: w)
        } else {
            watchClient = nil
        }
        builders = fleet.keys.map { ks in
            ks.indices.map { r in fleet.share(r).map { OriginFrameBuilder(signer: ks[r], share: $0.id, key: $0.key) } ?? OriginFrameBuilder(signer: ks[r]) }
        } ?? fleet.origins.map { OriginFrameBuilder(origin: $0) }
        sent = Array(repeating: 0, count: fleet.origins.count)
        cursors = Array(repeating: .empty, count: fleet.origins.count)
        var c = HTTPClient.Configuration()
        c.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: concurrency)
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: c)
    }

    func go() async throws -> Run {
        // Every replica's watch is open, and has shown its first cursor, before the clock starts.
        let watches = watching ? Task { await withTaskGroup(of: Void.self) { g in
            for s in self.fleet.origins.indices { g.addTask { await self.watch(s) } }
        } } : nil
        if watching {
            let opening = Date().addingTimeInterval(120)
            while lock.withLock({ watchesReady }) < fleet.origins.count {
                guard Date() < opening else {
                    throw HubError("only \(lock.withLock { watchesReady }) of \(fleet.origins.count) watch streams opened in 120 s (\(lock.withLock { firstError ?? "" }))")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            lock.withLock {
                watchErrors = 0
                errors = 0
                firstError = nil
            }
        }
        let start = Date()
        let deadline = start.addingTimeInterval(seconds)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for w in 0..<concurrency {
                group.addTask {
                    var rng = SystemRandomNumberGenerator()
                    var k = w
                    while Date() < deadline {
                        let r = Int.random(in: 0..<self.fleet.origins.count, using: &rng)
                        let s = self.fleet.sibling(r)
                        let claimed = self.lock.withLock { () -> Bool in
                            guard !self.busy.contains(r), !self.busy.contains(s) else { return false }
                            self.busy.formUnion([r, s])
                            return true
                        }
                        guard claimed else { continue }
                        await self.step(r, via: k % self.nodes.count)
                        self.lock.withLock {
                            self.busy.remove(r)
                            self.busy.remove(self.fleet.sibling(r))
                        }
                        k += 1
                    }
                }
            }
            try await group.waitForAll()
        }
        elapsed = Date().timeIntervalSince(start)
        lock.withLock { stopped = true }
        watches?.cancel()
        try await watchClient?.shutdown()
        await watches?.value
        try await client.shutdown()
        return self
    }

    /// Holds replica `s`'s watch stream open on the node it pulls through until the run stops,
    /// opening it again after a failure (counted as an error).
    func watch(_ s: Int) async {
        guard let watchClient else { return }
        var first = true
        while !lock.withLock({ stopped }) && !Task.isCancelled {
            do {
                var r = HTTPClientRequest(url: nodes[s % nodes.count] + "/v1/watch")
                r.headers.add(name: "Authorization", value: "Bearer \(fleet.tokens[s])")
                r.headers.add(name: "Accept", value: "text/event-stream")
                let answer = try await watchClient.execute(r, timeout: .hours(1))
                guard answer.status == .ok else { throw HubError("watch \(answer.status.code)") }
                var parser = ServerSentEvents()
                for try await chunk in answer.body {
                    for e in try parser.add(chunk.readableBytesView) where e.name == "cursor" {
                        saw(try ReplicationCursor(token: e.data), by: s)
                        if first {
                            first = false
                            lock.withLock { watchesReady += 1 }
                        }
                    }
                }
                throw HubError("the watch stream ended")
            } catch {
                let done = lock.withLock { () -> Bool in
                    guard !stopped else { return true }
                    watchErrors += 1
                    errors += 1
                    if firstError == nil { firstError = "watch: \(error)" }
                    return false
                }
                if done { return }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// Replica `s`'s watch showed `cursor`: the steps waiting for what it holds go on.
    func saw(_ cursor: ReplicationCursor, by s: Int) {
        let ready: [CheckedContinuation<Bool, Never>] = lock.withLock {
            watched[s] = watched[s].merged(with: cursor)
            guard let ws = waiters[s] else { return [] }
            let now = watched[s]
            waiters[s] = ws.filter { now[$0.origin] < $0.seq }
            if waiters[s]!.isEmpty { waiters[s] = nil }
            return ws.filter { now[$0.origin] >= $0.seq }.map(\.resume)
        }
        for k in ready { k.resume(returning: true) }
    }

    /// Waits until replica `s`'s watch shows `origin` at `seq` or past it: false after 60 s.
    func watchShows(_ s: Int, _ origin: ReplicaID, _ seq: Seq) async -> Bool {
        let id = lock.withLock { () -> Int in
            nextWaiter += 1
            return nextWaiter
        }
        let timeout = Task {
            try await Task.sleep(for: .seconds(60))
            let k: CheckedContinuation<Bool, Never>? = self.lock.withLock {
                guard let i = self.waiters[s]?.firstIndex(where: { $0.id == id }) else { return nil }
                return self.waiters[s]!.remove(at: i).resume
            }
            k?.resume(returning: false)
        }
        defer { timeout.cancel() }
        return await withCheckedContinuation { k in
            let shown = lock.withLock { () -> Bool in
                if watched[s][origin] >= seq { return true }
                waiters[s, default: []].append(Waiter(id: id, origin: origin, seq: seq, resume: k))
                return false
            }
            if shown { k.resume(returning: true) }
        }
    }

    var elapsed = 0.0

    /// Replica `r` appends 1 to 3 events and pushes them through node `via`; its sibling pulls
    /// through the other node.
    func step(_ r: Int, via: Int) async {
        // A watching sibling pulls through the node its watch is open on; the push goes through
        // the other.
        let via = watching ? (fleet.sibling(r) + 1) % nodes.count : via
        let b = builders[r]
        let n = Int.random(in: 1...3)
        let user = fleet.user(r)
        for i in 0..<n {
            let line = #"{"entity":"item","op":"create","id":"\#(UUID().uuidString.lowercased())","fields":{"title":"load \#(r) \#(i)"},"actor":"\#(user)"}"#
            guard var m = try? MutationParser.parse(line, lineNumber: 1) else { continue }
            m.actor = user
            // A title of a few bytes: far under the 1 MiB a record may take.
            guard (try? b.add(m, at: HLC(wallMillis: UInt64(Date().timeIntervalSince1970 * 1000), counter: 0))) != nil else { continue }
        }
        let frames = b.finish()
        let fresh = Array(frames[lock.withLock { sent[r] }...])
        let began = Date()
        do {
            var push = HTTPClientRequest(url: nodes[via] + "/v1/frames")
            push.method = .POST
            push.headers.add(name: "Authorization", value: "Bearer \(fleet.tokens[r])")
            push.headers.add(name: "Content-Type", value: ReplicaServer.pageContentType)
            push.body = .bytes(FramePage(frames: fresh, next: .empty, more: false).encoded())
            let answer = try await client.execute(push, timeout: .seconds(60))
            let text = try await answer.body.collect(upTo: 1 << 20)
            guard answer.status == .ok else { throw HubError("push \(answer.status.code): \(String(buffer: text).prefix(200))") }
            let pushed = Date().timeIntervalSince(began) * 1000
            lock.withLock {
                sent[r] = frames.count
                events += n
            }
            // The sibling pulls through the other node until it holds what was pushed.
            let s = fleet.sibling(r)
            let target = Seq(UInt64(b.events))
            if watching {
                guard await watchShows(s, fleet.origins[r], target) else { throw HubError("the sibling's watch did not show the push within 60 s") }
            }
            var held = false
            var pulls = 0
            for _ in 0..<50 where !held {
                pulls += 1
                let since = lock.withLock { cursors[s] }
                var pull = HTTPClientRequest(url: nodes[(via + 1) % nodes.count] + "/v1/frames?since=\(since.token)")
                pull.headers.add(name: "Authorization", value: "Bearer \(fleet.tokens[s])")
                let got = try await client.execute(pull, timeout: .seconds(60))
                let body = try await got.body.collect(upTo: 1 << 26)
                guard got.status == .ok else { throw HubError("pull \(got.status.code)") }
                let page = try FramePage.decode(Array(body.readableBytesView))
                for f in page.frames {
                    guard let h = FrameHeader(parsing: f) else { continue }
                    if h.origin != fleet.origins[r] && h.origin != fleet.origins[s] { lock.withLock { leaks += 1 } }
                }
                let now = lock.withLock { () -> ReplicationCursor in
                    if let next = page.next { cursors[s] = cursors[s].merged(with: next) }
                    return cursors[s]
                }
                held = now[fleet.origins[r]] >= target
            }
            guard held else { throw HubError("the sibling did not get the push") }
            let ms = Date().timeIntervalSince(began) * 1000
            lock.withLock {
                latencies.append(ms)
                pushLatencies.append(pushed)
                pullsMade += pulls
                steps += 1
            }
        } catch {
            lock.withLock {
                errors += 1
                if firstError == nil { firstError = "\(error)" }
            }
        }
    }

    var eventsPerSecond: Double { Double(lock.withLock { events }) / max(elapsed, 0.001) }

    func json(backend: String) -> String {
        let sorted = latencies.sorted(), pushes = pushLatencies.sorted()
        func q(_ p: Double, _ sorted: [Double]) -> Double { sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] }
        func q(_ p: Double) -> Double { q(p, sorted) }
        let origins = lock.withLock { sent.filter { $0 > 0 }.count }
        let fields: [String] = [
            #""backend":"\#(backend)""#, #""replicas":\#(fleet.origins.count)"#, #""shares":\#(fleet.shares.count)"#, #""replicas_that_pushed":\#(origins)"#,
            #""seconds":\#(String(format: "%.1f", elapsed))"#, #""steps":\#(steps)"#, #""events":\#(events)"#,
            #""events_per_s":\#(String(format: "%.0f", Double(events) / max(elapsed, 0.001)))"#,
            #""push_to_sibling_ms_p50":\#(String(format: "%.1f", q(0.5)))"#, #""push_to_sibling_ms_p99":\#(String(format: "%.1f", q(0.99)))"#,
            #""push_ms_p50":\#(String(format: "%.1f", q(0.5, pushes)))"#, #""push_ms_p99":\#(String(format: "%.1f", q(0.99, pushes)))"#,
            #""pulls_per_step":\#(String(format: "%.2f", Double(pullsMade) / Double(max(steps, 1))))"#,
            #""watch":\#(watching)"#, #""errors":\#(errors)"#, #""watch_errors":\#(watchErrors)"#, #""leaks":\#(leaks)"#,
        ] + (firstError.map { [#""first_error":"\#($0.prefix(200).replacingOccurrences(of: "\"", with: "'"))""#] } ?? [])
        return "{" + fields.joined(separator: ",") + "}"
    }
}
