import Domain
import Benchmark
import BenchmarkSupport
import EventLog
import Foundation
import GRDB
import Logbook
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

    Benchmark("links depth 3, 100K-link graph", configuration: config(["depth-3 p50 (us)", "depth-3 p99 (us)", "depth-1 p99 (us)", "items reached at depth 3 (mean)", "depth-3 both ways p99 (us)", "depth-3 p50, one query per item (us)", "depth-3 p99, one query per item (us)", "depth-3 p99 ratio to one query per item (%)"])) { benchmark in
        let projection = try LinkGraph.build()
        var rng = SplitMix64(seed: 12)
        var three: [Double] = [], one: [Double] = [], both: [Double] = [], perItem: [Double] = []
        var reached = 0
        benchmark.startMeasurement()
        for _ in 0..<500 {
            let start = LinkGraph.items[Int(rng.next() % UInt64(LinkGraph.items.count))]
            var t = Clock.now()
            let found = try projection.linked(from: start, depth: 3)
            three.append(Clock.now() - t)
            reached += found.count
            t = Clock.now()
            _ = try projection.linked(from: start, depth: 1)
            one.append(Clock.now() - t)
            t = Clock.now()
            _ = try projection.linked(from: start, depth: 3, direction: .both)
            both.append(Clock.now() - t)
            t = Clock.now()
            let baseline = try LinkGraph.oneQueryPerItem(projection, from: start, depth: 3)
            perItem.append(Clock.now() - t)
            precondition(baseline == found.map(\.id), "the baselines reach other items than linked(from:)")
        }
        benchmark.stopMeasurement()
        three.sort(); one.sort(); both.sort(); perItem.sort()
        let p99 = three[three.count * 99 / 100], baselineP99 = perItem[perItem.count * 99 / 100]
        benchmark.measurement(metric("depth-3 p50 (us)"), Int(three[three.count / 2] * 1e6))
        benchmark.measurement(metric("depth-3 p99 (us)"), Int(p99 * 1e6))
        benchmark.measurement(metric("depth-1 p99 (us)"), Int(one[one.count * 99 / 100] * 1e6))
        benchmark.measurement(metric("items reached at depth 3 (mean)"), reached / 500)
        benchmark.measurement(metric("depth-3 both ways p99 (us)"), Int(both[both.count * 99 / 100] * 1e6))
        benchmark.measurement(metric("depth-3 p50, one query per item (us)"), Int(perItem[perItem.count / 2] * 1e6))
        benchmark.measurement(metric("depth-3 p99, one query per item (us)"), Int(baselineP99 * 1e6))
        benchmark.measurement(metric("depth-3 p99 ratio to one query per item (%)"), Int(p99 / baselineP99 * 100))
    }

    Benchmark("import-legacy, 100K-row synced database", configuration: config(["rows/s (K)", "SQLite copy of the same rows, rows/s (K)", "ratio to SQLite copy (%)",
                                                                           "per-row prepared INSERTs, rows/s (K)", "ratio to per-row INSERTs (%)", "events", "import (ms)"])) { benchmark in
        let source = try LegacyDatabase.build(rows: 100_000)
        let baselineSeconds = try LegacyDatabase.sqliteCopy(source)
        let rowSeconds = try LegacyDatabase.sqliteRowInserts(source)
        let path = Workload.root + "/legacy-import-store"
        try? FileManager.default.removeItem(atPath: path)
        let writer = try LogbookWriter.open(at: path, creating: true)
        // The burst opens (locks, recovers) before the clock starts: the import alone is timed.
        let (report, seconds) = try writer.write { burst in
            let t0 = Clock.now()
            benchmark.startMeasurement()
            let report = try burst.importLegacy(from: source)
            benchmark.stopMeasurement()
            return (report, Clock.now() - t0)
        }
        try writer.close()
        let rows = report.tables.values.reduce(0) { $0 + $1.read }
        benchmark.measurement(metric("rows/s (K)"), Int(Double(rows) / seconds / 1000))
        benchmark.measurement(metric("SQLite copy of the same rows, rows/s (K)"), Int(Double(rows) / baselineSeconds / 1000))
        benchmark.measurement(metric("ratio to SQLite copy (%)"), Int(baselineSeconds / seconds * 100))
        benchmark.measurement(metric("per-row prepared INSERTs, rows/s (K)"), Int(Double(rows) / rowSeconds / 1000))
        benchmark.measurement(metric("ratio to per-row INSERTs (%)"), Int(rowSeconds / seconds * 100))
        benchmark.measurement(metric("events"), report.events)
        benchmark.measurement(metric("import (ms)"), Int(seconds * 1000))
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

enum LegacyDatabase {
    /// Seed 000's synced shape with `rows` rows: 80% items (a tenth deleted, CloudKit columns, an
    /// extra column), 15% item_tags without ids, 1% tags, the rest time entries.
    static func build(rows: Int) throws -> String {
        let path = Workload.root + "/legacy-\(rows).sqlite"
        try? FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: Workload.root, withIntermediateDirectories: true)
        let q = try DatabaseQueue(path: path)
        var rng = SplitMix64(seed: 21)
        func word() -> String { SampleWorkload.words[Int(rng.next() % UInt64(SampleWorkload.words.count))] }
        try q.write { db in
            try db.execute(sql: """
                CREATE TABLE items (id TEXT PRIMARY KEY, parent_id TEXT, title TEXT, notes TEXT, status TEXT, sort_order REAL,
                    due_at TEXT, created_at TEXT, modified_at INTEGER, deleted_at TEXT, ck_record_name TEXT, ck_change_tag TEXT,
                    ck_system_fields BLOB, needs_push INTEGER, energy INTEGER);
                CREATE TABLE tags (id TEXT PRIMARY KEY, name TEXT, color TEXT, created_at TEXT, modified_at INTEGER, deleted_at TEXT);
                CREATE TABLE item_tags (item_id TEXT, tag_id TEXT, created_at TEXT, modified_at INTEGER, deleted_at TEXT, PRIMARY KEY (item_id, tag_id));
                CREATE TABLE time_entries (id TEXT PRIMARY KEY, item_id TEXT, started_at TEXT, ended_at TEXT, duration_seconds INTEGER,
                    created_at TEXT, modified_at INTEGER, deleted_at TEXT);
                """)
            let base: UInt64 = 1_700_000_000
            func iso(_ s: UInt64) -> String { ISOTime.string(millis: s * 1000, fraction: false) }
            let nItems = rows * 80 / 100, nTags = rows / 100, nLinks = rows * 15 / 100, nTimes = rows - nItems - nTags - nLinks
            var items: [String] = [], tags: [String] = []
            let item = try db.makeStatement(sql: "INSERT INTO items VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
            for i in 0..<nItems {
                let id = UUID().uuidString
                let created = base + UInt64(i) * 30
                try item.execute(arguments: [id, items.isEmpty || i % 3 != 0 ? nil : items[Int(rng.next() % UInt64(items.count))], "\(word()) \(word()) \(word())",
                                             i % 4 == 0 ? "\(word()) \(word()) \(word()) \(word())" : nil, ["inbox", "next", "done"][i % 3], Double(i % 1000),
                                             i % 5 == 0 ? iso(created + 86_400) : nil, iso(created), Int64(created + 600),
                                             i % 10 == 0 ? iso(created + 900) : nil, "Item_\(id)", "ct", Data([1, 2, 3]), 0, Int64(i % 5)])
                items.append(id)
            }
            let tag = try db.makeStatement(sql: "INSERT INTO tags VALUES (?,?,?,?,?,?)")
            for i in 0..<nTags {
                let id = UUID().uuidString.lowercased()
                try tag.execute(arguments: [id, word(), "#30a46c", iso(base + UInt64(i)), Int64(base + UInt64(i)), nil])
                tags.append(id)
            }
            let link = try db.makeStatement(sql: "INSERT OR IGNORE INTO item_tags VALUES (?,?,?,?,?)")
            for i in 0..<nLinks {
                try link.execute(arguments: [items[Int(rng.next() % UInt64(items.count))], tags[Int(rng.next() % UInt64(tags.count))],
                                             iso(base + UInt64(i) * 10), Int64(base + UInt64(i) * 10), nil])
            }
            let time = try db.makeStatement(sql: "INSERT INTO time_entries VALUES (?,?,?,?,?,?,?,?)")
            for i in 0..<nTimes {
                let start = base + UInt64(i) * 60
                try time.execute(arguments: [UUID().uuidString, items[Int(rng.next() % UInt64(items.count))], iso(start), iso(start + 1800), 1800,
                                             iso(start + 1800), Int64(start + 1800), nil])
            }
        }
        try q.close()
        return path
    }

    /// SQLite copying every row of `source` into a new database (the same tables, one
    /// transaction, committed to disk): the seconds it takes.
    static func sqliteCopy(_ source: String) throws -> Double {
        let target = Workload.root + "/legacy-copy.sqlite"
        for s in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: target + s) }
        let q = try DatabaseQueue(path: target)
        let t0 = Clock.now()
        try q.writeWithoutTransaction { db in
            try db.execute(sql: "ATTACH DATABASE ? AS legacy", arguments: [source])
            try db.inTransaction {
                for sql in try String.fetchAll(db, sql: "SELECT sql FROM legacy.sqlite_master WHERE type = 'table'") { try db.execute(sql: sql) }
                for t in ["items", "tags", "item_tags", "time_entries"] { try db.execute(sql: "INSERT INTO main.\(t) SELECT * FROM legacy.\(t)") }
                return .commit
            }
            try db.execute(sql: "DETACH DATABASE legacy")
        }
        let seconds = Clock.now() - t0
        try q.close()
        return seconds
    }

    /// The issue's baseline: every row of `source` read and written into a new database with a
    /// prepared INSERT per row (the same tables, one transaction, committed to disk): the seconds.
    static func sqliteRowInserts(_ source: String) throws -> Double {
        let target = Workload.root + "/legacy-rows.sqlite"
        for s in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: target + s) }
        let from = try DatabaseQueue(path: source)
        let q = try DatabaseQueue(path: target)
        let t0 = Clock.now()
        let schema = try from.read { db in try String.fetchAll(db, sql: "SELECT sql FROM sqlite_master WHERE type = 'table'") }
        try q.write { db in
            for sql in schema { try db.execute(sql: sql) }
            try from.read { src in
                for t in ["items", "tags", "item_tags", "time_entries"] {
                    let rows = try Row.fetchCursor(src, sql: "SELECT * FROM \(t)")
                    var insert: Statement?
                    while let r = try rows.next() {
                        if insert == nil { insert = try db.makeStatement(sql: "INSERT INTO \(t) VALUES (\(Array(repeating: "?", count: r.count).joined(separator: ",")))") }
                        try insert!.execute(arguments: StatementArguments(r.databaseValues))
                    }
                }
            }
        }
        let seconds = Clock.now() - t0
        try q.close()
        try from.close()
        return seconds
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

    /// The baseline: the same outgoing traversal with one indexed query per visited item (the
    /// links of one item, its far ends looked up in items), as an app would write it by hand.
    /// Returns the ids reached, in the order `linked(from:)` returns them.
    static func oneQueryPerItem(_ projection: Projection, from start: String, depth: Int) throws -> [String] {
        try projection.read { db in
            let statement = try db.cachedStatement(sql: """
                SELECT l.to_id, i.id IS NOT NULL, i.deleted_at IS NOT NULL FROM links l LEFT JOIN items i ON i.id = l.to_id
                WHERE l.from_id = ? AND l.deleted_at IS NULL AND l.to_id IS NOT NULL
                """)
            var seen: Set<String> = [start], out: [String] = [], frontier = [start]
            for _ in 0..<depth where !frontier.isEmpty {
                var next: [(String, Bool)] = []
                for from in frontier {
                    let rows = try Row.fetchCursor(statement, arguments: [from])
                    while let r = try rows.next() {
                        let id: String = r[0], exists: Bool = r[1], deleted: Bool = r[2]
                        if deleted || seen.contains(id) { continue }
                        seen.insert(id)
                        next.append((id, exists))
                    }
                }
                next.sort { $0.0 < $1.0 }
                out += next.map(\.0)
                frontier = next.filter(\.1).map(\.0)
            }
            return out
        }
    }
}

enum Baseline {
    /// Copies the final rows of every entity table (their visible columns) into plain tables of a
    /// new database, one reused prepared statement per table, one transaction. Returns (rows, seconds, file bytes).
    static func plainTables(from projection: Projection) throws -> (Int, Double, Int) {
        let path = Workload.root + "/baseline.sqlite"
        for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + s) }
        var tables: [(String, [String], [[DatabaseValue]])] = []
        try projection.read { db in
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
        // A rebuild frees its rows on another thread once it has committed: let that end first,
        // so the baseline runs on a quiet machine.
        Thread.sleep(forTimeInterval: 0.5)
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
