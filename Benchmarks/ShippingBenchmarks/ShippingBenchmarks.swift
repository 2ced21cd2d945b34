import Benchmark
import BenchmarkSupport
import EventLog
import Foundation
import Logging
import Projections
import Replicator
import LogbookServer

// Log shipping over loopback HTTP (server and client in this process, as two replicas on one
// machine would be). Each figure is recorded beside a baseline measured in the same run.

func config(_ custom: [String], iterations: Int = 3) -> Benchmark.Configuration {
    Benchmark.Configuration(metrics: [.wallClock] + custom.map { metric($0) }, timeUnits: .milliseconds,
                            warmupIterations: 0, maxDuration: .seconds(300), maxIterations: iterations)
}

func metric(_ name: String) -> BenchmarkMetric {
    .custom(name, polarity: name.contains("(us)") ? .prefersSmaller : .prefersLarger, useScalingFactor: false)
}

/// Serves `store` on a free loopback port while `body` runs.
func serving<T>(_ store: Store, _ body: (String) async throws -> T) async throws -> T {
    var config = ServerConfiguration()
    config.port = 0
    var logger = Logger(label: "bench.serve")
    logger.logLevel = .critical
    return try await ReplicaServer.withRunningServer(store: store, configuration: config, logger: logger, body)
}

/// Copies a directory with `cp -r` (the baseline for shipping); returns seconds.
func copySeconds(_ from: String, _ to: String) throws -> Double {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/bin/cp")
    p.arguments = ["-r", from, to]
    let t = Clock.now()
    try p.run()
    p.waitUntilExit()
    guard p.terminationStatus == 0 else { throw ServerError("cp failed") }
    return Clock.now() - t
}

func directoryBytes(_ path: String) -> Int {
    let fm = FileManager.default
    var total = 0
    for case let f as String in fm.enumerator(atPath: path) ?? FileManager.DirectoryEnumerator() {
        total += (try? fm.attributesOfItem(atPath: path + "/" + f)[.size] as? Int) ?? 0
    }
    return total
}

func percentiles(_ xs: [Double]) -> (Int, Int) {
    let s = xs.sorted()
    return (Int(s[s.count / 2] * 1e6), Int(s[s.count * 99 / 100] * 1e6))
}

let benchmarks: @Sendable () -> Void = {
    Benchmark("ship 1M events over loopback HTTP, verified and stored (no projection)",
              configuration: config(["events/s (K)", "MB/s", "cp MB/s", "ratio to cp (%)", "verification floor MB/s", "ratio to floor (%)"])) { benchmark in
        let source = try Workload.store(events: 1_000_000)
        let logBytes = directoryBytes(source.path + "/log/\(source.replicaID)")
        try await serving(source) { url in
            let dir = Scratch()
            let cp = try copySeconds(source.path + "/log/\(source.replicaID)", dir.path + "/copy")
            let floor = try VerificationFloor.run(logDirectory: source.path + "/log/\(source.replicaID)", scratch: dir.path)
            let receiver = try Store.create(at: dir.path + "/r")
            let t = try HTTPTransport(url: url)
            let t0 = Clock.now()
            benchmark.startMeasurement()
            let s = try await Replication.pull(from: t, store: receiver, project: false)
            benchmark.stopMeasurement()
            let seconds = Clock.now() - t0
            await t.shutdown()
            precondition(s.events == 1_000_000, "shipped \(s.events) events")
            benchmark.measurement(metric("events/s (K)"), Int(Double(s.events) / seconds / 1000))
            benchmark.measurement(metric("MB/s"), Int(Double(logBytes) / seconds / 1e6))
            benchmark.measurement(metric("cp MB/s"), Int(Double(logBytes) / cp / 1e6))
            benchmark.measurement(metric("ratio to cp (%)"), Int(cp / seconds * 100))
            benchmark.measurement(metric("verification floor MB/s"), Int(Double(logBytes) / floor.seconds / 1e6))
            benchmark.measurement(metric("ratio to floor (%)"), Int(floor.seconds / seconds * 100))
        }
    }

    Benchmark("ship 1M events over loopback HTTP, end to end with projection",
              configuration: config(["events/s (K)", "receiver rebuild events/s (K)", "ratio to rebuild (%)"])) { benchmark in
        let source = try Workload.store(events: 1_000_000)
        try await serving(source) { url in
            let dir = Scratch()
            let receiver = try Store.create(at: dir.path + "/r")
            let t = try HTTPTransport(url: url)
            let t0 = Clock.now()
            benchmark.startMeasurement()
            let s = try await Replication.pull(from: t, store: receiver, project: true)
            benchmark.stopMeasurement()
            let seconds = Clock.now() - t0
            await t.shutdown()
            let r0 = Clock.now()
            let n = try Projection.rebuild(store: receiver)
            let rebuild = Clock.now() - r0
            precondition(s.events == 1_000_000 && n == 1_000_000)
            benchmark.measurement(metric("events/s (K)"), Int(Double(s.events) / seconds / 1000))
            benchmark.measurement(metric("receiver rebuild events/s (K)"), Int(Double(n) / rebuild / 1000))
            benchmark.measurement(metric("ratio to rebuild (%)"), Int(rebuild / seconds * 100))
        }
    }

    // An app embedding Logbook holds its store open (ProjectedStore) and syncs with a server now
    // and then: one pull and one push per sync. "1 new on server": a third replica pushed one
    // event to the server before the sync (not timed); "1 new on client": the app appended one.
    Benchmark("incremental sync over loopback HTTP (pull + push)",
              configuration: config(["nothing new p50 (us)", "nothing new p99 (us)", "1 new on server p50 (us)", "1 new on server p99 (us)",
                                     "1 new on client p50 (us)", "1 new on client p99 (us)"], iterations: 1)) { benchmark in
        let dir = Scratch()
        let server = try Store.create(at: dir.path + "/server"), client = try Store.create(at: dir.path + "/client")
        let third = try Store.create(at: dir.path + "/third")
        let ps = try ProjectedStore(store: server)
        for k in 0..<50 { _ = try ps.append(Workload.mutations(1000, seed: UInt64(k))) }
        try ps.close()
        try await serving(server) { url in
            let app = try ProjectedStore(store: client)
            let t = try HTTPTransport(url: url, replica: client.replicaID)
            let t3 = try HTTPTransport(url: url, replica: third.replicaID)
            func sync() async throws -> Double {
                let t0 = Clock.now()
                let pulled = try await Replication.pull(from: t, into: app)
                _ = try await Replication.push(from: client, to: t, known: pulled.peerHolds)
                return Clock.now() - t0
            }
            _ = try await sync()  // the first sync carries the 50K events
            let singles = Workload.mutations(400, seed: 99)
            let p3 = try ProjectedStore(store: third)
            var idle: [Double] = [], fromServer: [Double] = [], fromClient: [Double] = []
            benchmark.startMeasurement()
            for _ in 0..<200 { idle.append(try await sync()) }
            for k in 0..<200 {
                _ = try p3.append([singles[k]])
                _ = try await Replication.push(from: third, to: t3)
                fromServer.append(try await sync())
            }
            for k in 200..<400 {
                _ = try app.append([singles[k]])
                fromClient.append(try await sync())
            }
            benchmark.stopMeasurement()
            await t.shutdown()
            await t3.shutdown()
            try p3.close()
            try app.close()
            let (sc, cc) = (try server.cursor(), try client.cursor())
            precondition(sc == cc)
            let (a, b) = percentiles(idle), (c, d) = percentiles(fromServer), (e, f) = percentiles(fromClient)
            benchmark.measurement(metric("nothing new p50 (us)"), a)
            benchmark.measurement(metric("nothing new p99 (us)"), b)
            benchmark.measurement(metric("1 new on server p50 (us)"), c)
            benchmark.measurement(metric("1 new on server p99 (us)"), d)
            benchmark.measurement(metric("1 new on client p50 (us)"), e)
            benchmark.measurement(metric("1 new on client p99 (us)"), f)
        }
    }

    // Live sync: replica A and k followers each run LiveSync against one server (all in this
    // process); an append on A travels A -> server (A's watcher pushes it) -> followers (the
    // server's /v1/watch event, then a pull that projects). Timed from the append's start to the
    // moment each follower's pull has committed it to that follower's projection. CPU is this
    // whole process's (server, A and every follower) per event delivered to one follower.
    for followers in [1, 50] {
        Benchmark("live sync: append on A -> in a follower's projection, \(followers) follower\(followers == 1 ? "" : "s")",
                  configuration: config(["p50 (us)", "p99 (us)", "max (us)", "CPU per delivered event (us)"], iterations: 1)) { benchmark in
            let dir = Scratch()
            let server = try Store.create(at: dir.path + "/server"), a = try Store.create(at: dir.path + "/a")
            let bs = try (0..<followers).map { try Store.create(at: dir.path + "/b\($0)") }
            try await serving(server) { url in
                let arrivals = Arrivals()
                var tasks: [Task<Void, any Error>] = []
                for (i, b) in ([a] + bs).enumerated() {
                    var live = LiveSync(store: b) { try HTTPTransport(url: url, replica: b.replicaID) }
                    live.onExchange = { e in if i > 0, let n = e.pulled?.events, n > 0 { arrivals.add(i, Clock.now()) } }
                    tasks.append(Task { try await live.run() })
                }
                // Every follower connected and caught up (nothing yet): wait until the server has
                // served each one a watch stream, then a settle.
                try await Task.sleep(nanoseconds: 1_500_000_000)
                let pa = try ProjectedStore(store: a)
                let rounds = followers == 1 ? 200 : 40
                let ms = Workload.mutations(rounds, seed: 123)
                var latencies: [Double] = []
                let cpu0 = processCPUSeconds()
                benchmark.startMeasurement()
                for k in 0..<rounds {
                    let before = arrivals.count
                    let t0 = Clock.now()
                    _ = try pa.append([ms[k]])
                    let deadline = Clock.now() + 10
                    while arrivals.count < before + followers && Clock.now() < deadline { try await Task.sleep(nanoseconds: 200_000) }
                    latencies += arrivals.since(before).map { $0 - t0 }
                    latencies += Array(repeating: 10, count: max(0, before + followers - arrivals.count))  // missed: counted as 10 s
                }
                benchmark.stopMeasurement()
                let cpu = processCPUSeconds() - cpu0
                for t in tasks { t.cancel() }
                for t in tasks { _ = await t.result }
                try pa.close()
                let (p50, p99) = percentiles(latencies)
                benchmark.measurement(metric("p50 (us)"), p50)
                benchmark.measurement(metric("p99 (us)"), p99)
                benchmark.measurement(metric("max (us)"), Int((latencies.max() ?? 0) * 1e6))
                benchmark.measurement(metric("CPU per delivered event (us)"), Int(cpu / Double(rounds * followers) * 1e6))
            }
        }
    }
}

/// When each follower received something, in order.
final class Arrivals: @unchecked Sendable {
    private let lock = NSLock()
    private var times: [Double] = []
    func add(_ follower: Int, _ t: Double) { lock.withLock { times.append(t) } }
    var count: Int { lock.withLock { times.count } }
    func since(_ i: Int) -> [Double] { lock.withLock { Array(times[min(i, times.count)...]) } }
}

func processCPUSeconds() -> Double {
    var u = rusage()
    getrusage(RUSAGE_SELF.rawValue, &u)
    return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
}
