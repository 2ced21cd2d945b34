import Domain
import EventLog
import Foundation
import GRDB

/// The tables a query read, recorded while it runs (`Projection.observe`).
package final class RegionRecorder: @unchecked Sendable {
    /// The recorder of the query running on this task or thread, if any.
    @TaskLocal static var current: RegionRecorder?

    private let lock = Lock()
    private var recorded = DatabaseRegion()

    func add(_ region: DatabaseRegion) { lock.withLock { recorded.formUnion(region) } }
    var region: DatabaseRegion { lock.withLock { recorded } }

    /// The query read something whose tables cannot be named (the log, peers, a statement that
    /// would not prepare again): it runs after every commit.
    func readEverything() { lock.withLock { recorded = .fullDatabase } }

    /// Says, for an observed query running now, that it read outside the projection.
    package static func readsOutsideTheProjection() { current?.readEverything() }
}

/// Collects the SQL of the statements a connection runs while traced.
private final class StatementLog: @unchecked Sendable {
    var sql: [String] = []
}

extension Projection {
    /// `pool.read`, and, while an observed query runs, the record of the tables it read: every
    /// statement run is traced, then prepared again to ask SQLite (through GRDB's authorizer)
    /// which tables and columns it reads. Every query of the projection reads through here.
    func reading<T>(_ body: (Database) throws -> T) throws -> T {
        guard let recorder = RegionRecorder.current else { return try pool.read(body) }
        return try pool.read { db in
            let log = StatementLog()
            db.trace(options: .statement) { event in
                if case .statement(let s) = event { log.sql.append(s.sql) }
            }
            defer { db.trace(options: [], nil) }
            let result = try body(db)
            db.trace(options: [], nil)
            for sql in Set(log.sql) where !sql.hasPrefix("--") {  // a trigger's program is traced as a comment
                if let statement = try? db.makeStatement(sql: sql) {
                    recorder.add(statement.databaseRegion)
                } else {
                    recorder.readEverything()
                }
            }
            return result
        }
    }

    /// The projection's tables, read once.
    func tableNames() throws -> [String] {
        try pool.read { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        }
    }

    /// The tables a commit may have written: every table but those that belong to an entity kind
    /// the commit did not touch (an item's event writes `items` and its search index, and the
    /// shared tables: cursor, conflicts, anomalies, unread; never `tags`).
    static func tablesWritten(by change: ProjectionChange, among tables: [String]) -> [String] {
        let touched = Set(change.touched.keys)
        var untouched = Set<String>()
        for spec in DomainSchema.entities where !touched.contains(spec.entity) {
            untouched.insert(spec.table)
            // The search index (and any other table named after it) belongs to the entity's table.
            for t in tables where t.hasPrefix(spec.table + "_") && !DomainSchema.entities.contains(where: { $0.table == t }) {
                untouched.insert(t)
            }
        }
        return tables.filter { !untouched.contains($0) }
    }

    /// A query kept up to date: its result now, then again after every commit that wrote a table
    /// the query read (or rebuilt the projection), delivered only when it differs from the last
    /// result delivered. The tables are recorded as the query runs, each time it runs, so nothing
    /// needs declaring: a commit that wrote only other tables (a sync of tags, for a query over
    /// items) does not run the query at all, and a query that starts reading a table is woken by
    /// it from then on. A query that read nothing through the projection (the log only) runs
    /// after every commit.
    ///
    /// ```swift
    /// for try await inbox in projection.observe { try $0.items(search: "inbox") } {
    ///     render(inbox)
    /// }
    /// ```
    /// - Parameters:
    ///   - changes: where commits come from; by default this projection's own (`changes()`). Pass
    ///     another stream (e.g. fed by a `ProjectionWatcher`) to follow other processes' commits.
    ///   - query: reads the projection; it runs on a task of the stream's.
    /// - Parameter ended: asked when `changes` ends: the error that ended it, if one did, ends the
    ///   observation with it (otherwise it finishes).
    public func observe<T: Equatable & Sendable>(changes: AsyncStream<ProjectionChange>? = nil,
                                                 ended: (@Sendable () -> (any Error)?)? = nil,
                                                 _ query: @escaping @Sendable (Projection) throws -> T) -> AsyncThrowingStream<T, any Error> {
        // Subscribed before the first run: no commit can fall between the two.
        let source = changes ?? self.changes()
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: T.self)
        let task = Task { [self] in
            do {
                let tables = try tableNames()
                func run() throws -> (T, DatabaseRegion) {
                    let recorder = RegionRecorder()
                    let value = try RegionRecorder.$current.withValue(recorder) { try query(self) }
                    return (value, recorder.region)
                }
                var (last, region) = try run()
                continuation.yield(last)
                for await change in source {
                    if !change.rebuilt, !region.isEmpty, !region.isFullDatabase {
                        let written = Self.tablesWritten(by: change, among: tables)
                        guard written.contains(where: { region.isModified(byEventsOfKind: .insert(tableName: $0)) }) else { continue }
                    }
                    let (result, read) = try run()
                    region = read
                    if result != last {
                        last = result
                        continuation.yield(result)
                    }
                }
                if let failure = ended?() { throw failure }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// `items(search:under:includeDeleted:limit:)`, kept up to date (see `observe`).
    public func observeItems(search: String? = nil, under root: String? = nil, includeDeleted: Bool = false,
                             limit: Int = 1000) -> AsyncThrowingStream<[ItemRow], any Error> {
        observe { try $0.items(search: search, under: root, includeDeleted: includeDeleted, limit: limit) }
    }
}
