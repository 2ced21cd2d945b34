import Domain
import Benchmark
import BenchmarkSupport
import EventLog
import Foundation
import GRDB
import Projections

// Projection benchmarks. Each records its figure beside a baseline measured in the same run
// (a plain SQLite table written with a reused prepared statement, no log, no merge state).

func config(_ custom: [String], iterations: Int = 3) -> Benchmark.Configuration {
    Benchmark.Configuration(metrics: [.wallClock] + custom.map { metric($0) }, timeUnits: .milliseconds,
                            warmupIterations: 0, maxDuration: .seconds(120), maxIterations: iterations)
}

func metric(_ name: String) -> BenchmarkMetric {
    let smaller = name.contains("(us)") || name.contains("bytes") || name.contains("x100 of baseline size")
    return .custom(name, polarity: smaller ? .prefersSmaller : .prefersLarger, useScalingFactor: false)
}

let benchmarks: @Sendable () -> Void = {
    Benchmark("replay --rebuild, 1M events", configuration: config(["events/s (K)", "final rows/s (K)", "baseline plain-table rows/s (K)", "ratio to baseline rows/s (%)", "projection bytes per row", "plain table bytes per row", "size x100 of baseline size"])) { benchmark in
        let store = try Workload.store(events: 1_000_000)
        let t0 = Clock.now()
        benchmark.startMeasurement()
        let n = try Projection.rebuild(store: store)
        benchmark.stopMeasurement()
        let seconds = Clock.now() - t0
        let projection = try Projection(store: store)
        let (rows, baselineSeconds, baselineBytes) = try Baseline.plainTables(from: projection)
        try projection.close()
        let projectionBytes = Baseline.fileBytes(Projection.path(for: store))
        benchmark.measurement(metric("events/s (K)"), Int(Double(n) / seconds / 1000))
        benchmark.measurement(metric("final rows/s (K)"), Int(Double(rows) / seconds / 1000))
        benchmark.measurement(metric("baseline plain-table rows/s (K)"), Int(Double(rows) / baselineSeconds / 1000))
        benchmark.measurement(metric("ratio to baseline rows/s (%)"), Int(baselineSeconds / seconds * 100))
        benchmark.measurement(metric("projection bytes per row"), projectionBytes / rows)
        benchmark.measurement(metric("plain table bytes per row"), baselineBytes / rows)
        benchmark.measurement(metric("size x100 of baseline size"), projectionBytes * 100 / baselineBytes)
    }

    Benchmark("append -> visible in projection, single appends", configuration: config(["p50 (us)", "p99 (us)", "max (us)"])) { benchmark in
        let dir = Scratch()
        let store = try Store.create(at: dir.path + "/s")
        let projected = try ProjectedStore(store: store)
        // A store with some history, so the projection is not trivially small.
        var batch: [Mutation] = []
        for (i, line) in SampleWorkload(seed: 5, count: 50_000).enumerated() {
            batch.append(try MutationParser.parse(line, lineNumber: i + 1))
            if batch.count == 1000 { _ = try projected.append(batch); batch.removeAll() }
        }
        var latencies: [Double] = []
        let ms = Workload.mutations(2000, seed: 77)
        benchmark.startMeasurement()
        for m in ms {
            let t = Clock.now()
            _ = try projected.append([m])
            // Visible: the row is readable with the new version.
            _ = try projected.projection.versions([(m.entity, m.entityID)])
            latencies.append(Clock.now() - t)
        }
        benchmark.stopMeasurement()
        try projected.close()
        latencies.sort()
        benchmark.measurement(metric("p50 (us)"), Int(latencies[latencies.count / 2] * 1e6))
        benchmark.measurement(metric("p99 (us)"), Int(latencies[latencies.count * 99 / 100] * 1e6))
        benchmark.measurement(metric("max (us)"), Int(latencies.last! * 1e6))
    }

    // Change notifications: from the start of a single append to the moment a subscriber holds
    // the change, in process (Projection.changes) and through the files as another process sees
    // them (ProjectionWatcher: inotify, its own database connection), beside the append alone.
    Benchmark("append -> change notification, single appends", configuration: config(["append alone p50 (us)", "append alone p99 (us)", "in-process p50 (us)", "in-process p99 (us)", "watcher p50 (us)", "watcher p99 (us)"])) { benchmark in
        let dir = Scratch()
        let store = try Store.create(at: dir.path + "/s")
        let projected = try ProjectedStore(store: store)
        _ = try projected.append(Workload.mutations(10_000, seed: 3))
        let stream = projected.projection.changes()
        let received = LatencyBox()
        let consumer = Task.detached {
            for await _ in stream { received.mark() }
        }
        let watcher = try ProjectionWatcher(store: store)
        watcher.pollInterval = 5  // only inotify wakes it in time
        let watched = LatencyBox()
        let watching = Thread {
            while !watched.stopped {
                if (try? watcher.next(until: Date().addingTimeInterval(0.2))) ?? nil != nil { watched.mark() }
            }
        }
        watching.start()
        var alone: [Double] = [], inProcess: [Double] = [], viaFiles: [Double] = []
        let ms = Workload.mutations(600, seed: 78)
        benchmark.startMeasurement()
        for m in ms {
            let before = (received.count, watched.count)
            let t = Clock.now()
            _ = try projected.append([m])
            alone.append(Clock.now() - t)
            while received.count == before.0 { usleep(20) }
            inProcess.append(received.last - t)
            let deadline = Clock.now() + 2
            while watched.count == before.1 && Clock.now() < deadline { usleep(50) }
            viaFiles.append((watched.count == before.1 ? Clock.now() : watched.last) - t)
        }
        benchmark.stopMeasurement()
        watched.stop()
        consumer.cancel()
        try projected.close()
        for (name, values) in [("append alone", alone), ("in-process", inProcess), ("watcher", viaFiles)] {
            let sorted = values.sorted()
            benchmark.measurement(metric("\(name) p50 (us)"), Int(sorted[sorted.count / 2] * 1e6))
            benchmark.measurement(metric("\(name) p99 (us)"), Int(sorted[sorted.count * 99 / 100] * 1e6))
        }
    }

    Benchmark("links depth 3, 100K-link graph", configuration: config(["depth-3 p50 (us)", "depth-3 p99 (us)", "depth-1 p99 (us)", "items reached at depth 3 (mean)", "depth-3 both ways p99 (us)"])) { benchmark in
        let projection = try LinkGraph.build()
        var rng = SplitMix64(seed: 12)
        var three: [Double] = [], one: [Double] = [], both: [Double] = []
        var reached = 0
        benchmark.startMeasurement()
        for _ in 0..<500 {
            let start = LinkGraph.items[Int(rng.next() % UInt64(LinkGraph.items.count))]
            var t = Clock.now()
            reached += try projection.linked(from: start, depth: 3).count
            three.append(Clock.now() - t)
            t = Clock.now()
            _ = try projection.linked(from: start, depth: 1)
            one.append(Clock.now() - t)
            t = Clock.now()
            _ = try projection.linked(from: start, depth: 3, direction: .both)
            both.append(Clock.now() - t)
        }
        benchmark.stopMeasurement()
        three.sort(); one.sort(); both.sort()
        benchmark.measurement(metric("depth-3 p50 (us)"), Int(three[three.count / 2] * 1e6))
        benchmark.measurement(metric("depth-3 p99 (us)"), Int(three[three.count * 99 / 100] * 1e6))
        benchmark.measurement(metric("depth-1 p99 (us)"), Int(one[one.count * 99 / 100] * 1e6))
        benchmark.measurement(metric("items reached at depth 3 (mean)"), reached / 500)
        benchmark.measurement(metric("depth-3 both ways p99 (us)"), Int(both[both.count * 99 / 100] * 1e6))
    }

    Benchmark("FTS search and 10-level subtree, 100K items", configuration: config(["search p50 (us)", "search p99 (us)", "subtree p50 (us)", "subtree p99 (us)", "subtree rows"])) { benchmark in
        let projection = try Hierarchy.build()
        var rng = SplitMix64(seed: 9)
        var search: [Double] = []
        var subtree: [Double] = []
        var rows = 0
        benchmark.startMeasurement()
        for _ in 0..<500 {
            let w = SampleWorkload.words[Int(rng.next() % UInt64(SampleWorkload.words.count))]
            let prefix = String(w.prefix(3 + Int(rng.next() % 2)))
            let t = Clock.now()
            _ = try projection.items(search: prefix, limit: 50)
            search.append(Clock.now() - t)
        }
        for _ in 0..<200 {
            let root = Hierarchy.roots[Int(rng.next() % UInt64(Hierarchy.roots.count))]
            let t = Clock.now()
            rows = try projection.items(under: root, limit: 100_000).count
            subtree.append(Clock.now() - t)
        }
        benchmark.stopMeasurement()
        search.sort()
        subtree.sort()
        benchmark.measurement(metric("search p50 (us)"), Int(search[search.count / 2] * 1e6))
        benchmark.measurement(metric("search p99 (us)"), Int(search[search.count * 99 / 100] * 1e6))
        benchmark.measurement(metric("subtree p50 (us)"), Int(subtree[subtree.count / 2] * 1e6))
        benchmark.measurement(metric("subtree p99 (us)"), Int(subtree[subtree.count * 99 / 100] * 1e6))
        benchmark.measurement(metric("subtree rows"), rows)
    }
}

enum LinkGraph {
    nonisolated(unsafe) static var items: [String] = []

    /// 10K items and 100K links between them (random ends, three kinds, 2% deleted): seed 001's
    /// 100K-edge graph. Average out-degree 10, so depth 3 reaches about a thousand items.
    static func build() throws -> Projection {
        let path = Workload.root + "/links"
        try? FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: Workload.root, withIntermediateDirectories: true)
        let store = try Store.create(at: path)
        let appender = try LogAppender(store: store)
        var rng = SplitMix64(seed: 11)
        let ids = (0..<10_000).map { _ in UUID() }
        items = ids.map(\.lowercasedString)
        var batch: [Mutation] = ids.map { Mutation(entity: .item, op: .create, entityID: $0, fields: [Field("title", .text("item"))]) }
        let kinds = ["LINK", "SEQUENCE", "AFFINITY"]
        for k in 0..<100_000 {
            let id = UUID()
            batch.append(Mutation(entity: .link, op: .create, entityID: id, fields: [
                Field("from_id", .text(items[Int(rng.next() % 10_000)])), Field("kind", .text(kinds[k % 3])),
                Field("to_id", .text(items[Int(rng.next() % 10_000)])), Field("weight", .real(Double(rng.next() % 10) / 10)),
            ]))
            if rng.next() % 50 == 0 { batch.append(Mutation(entity: .link, op: .delete, entityID: id)) }
            if batch.count >= 1000 { _ = try appender.append(batch); batch.removeAll() }
        }
        if !batch.isEmpty { _ = try appender.append(batch) }
        try appender.close()
        try Projection.rebuild(store: store)
        return try Projection(store: store)
    }
}

enum Baseline {
    /// Copies the final rows of every entity table (their visible columns) into plain tables of a
    /// new database, one reused prepared statement per table, one transaction. Returns (rows, seconds, file bytes).
    static func plainTables(from projection: Projection) throws -> (Int, Double, Int) {
        let path = Workload.root + "/baseline.sqlite"
        for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + s) }
        var tables: [(String, [String], [[DatabaseValue]])] = []
        try projection.database.read { db in
            for t in projection.schema.tables {
                let cols = ["id"] + t.columns + ["created_at", "modified_at", "deleted_at"]
                let rows = try Row.fetchAll(db, sql: "SELECT \(cols.joined(separator: ", ")) FROM \(t.name)").map { r in cols.indices.map { r[$0] as DatabaseValue } }
                tables.append((t.name, cols, rows))
            }
        }
        let q = try DatabaseQueue(path: path)
        try q.writeWithoutTransaction { db in
            for (name, cols, _) in tables {
                try db.execute(sql: "CREATE TABLE \(name) (id TEXT PRIMARY KEY NOT NULL, \(cols.dropFirst().map { "\($0)" }.joined(separator: ", ")))")
            }
        }
        var count = 0
        let t0 = Clock.now()
        try q.inTransaction { db in
            for (name, cols, rows) in tables {
                let stmt = try db.makeStatement(sql: "INSERT INTO \(name) VALUES (\(cols.map { _ in "?" }.joined(separator: ", ")))")
                for r in rows {
                    stmt.setUncheckedArguments(StatementArguments(r))
                    try stmt.execute()
                    count += 1
                }
            }
            return .commit
        }
        let seconds = Clock.now() - t0
        try q.close()
        return (count, seconds, fileBytes(path))
    }

    static func fileBytes(_ path: String) -> Int {
        ["", "-wal"].reduce(0) { $0 + ((try? FileManager.default.attributesOfItem(atPath: path + $1)[.size] as? Int) ?? 0) }
    }
}

/// The hierarchy for the search and subtree benchmark.
enum Hierarchy {
    nonisolated(unsafe) static var roots: [String] = []

    /// 100K items: 100 projects, each a 10-level tree of about 1,000 items (branching 2), titles from the word list.
    static func build() throws -> Projection {
        let path = Workload.root + "/hierarchy"
        try? FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: Workload.root, withIntermediateDirectories: true)
        let store = try Store.create(at: path)
        let appender = try LogAppender(store: store)
        var rng = SplitMix64(seed: 4)
        func title() -> String { (0..<3).map { _ in SampleWorkload.words[Int(rng.next() % UInt64(SampleWorkload.words.count))] }.joined(separator: " ") }
        var batch: [Mutation] = []
        roots = []
        for _ in 0..<100 {
            var level = [UUID()]
            roots.append(level[0].lowercasedString)
            batch.append(Mutation(entity: .item, op: .create, entityID: level[0], fields: [Field("title", .text(title()))]))
            for _ in 1..<10 {
                var next: [UUID] = []
                for p in level {
                    for _ in 0..<2 {
                        let id = UUID()
                        next.append(id)
                        batch.append(Mutation(entity: .item, op: .create, entityID: id,
                                              fields: [Field("notes", .text(title())), Field("parent_id", .text(p.lowercasedString)), Field("title", .text(title()))]))
                    }
                }
                level = next
            }
            if batch.count >= 1000 { _ = try appender.append(batch); batch.removeAll() }
        }
        if !batch.isEmpty { _ = try appender.append(batch) }
        try appender.close()
        try Projection.rebuild(store: store)
        return try Projection(store: store)
    }
}

/// When a notification arrived (Clock seconds), counted, for the benchmark's polling loop.
final class LatencyBox: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    private var at = 0.0
    private var done = false
    func mark() { let t = Clock.now(); lock.withLock { n += 1; at = t } }
    var count: Int { lock.withLock { n } }
    var last: Double { lock.withLock { at } }
    func stop() { lock.withLock { done = true } }
    var stopped: Bool { lock.withLock { done } }
}
