import EventLog
import Foundation
import GRDB
import GRDBSQLite

/// Events of one kind that a projection applied only in part, or not at all, because the build
/// that applied them did not know their entity, op or schema version (docs/FORMAT.md, "Evolution").
public struct UnreadEvents: Sendable, Equatable {
    public var entity: Entity
    public var op: Op
    public var schemaVersion: UInt8
    /// How many events of this kind.
    public var events: Int
    /// True when this build understands them: a rebuild projects them entirely.
    public var understoodNow: Bool { entity.isKnown && op.isKnown && schemaVersion <= Event.currentSchemaVersion }
}

/// The projection of a store's log into SQLite tables (`<store>/projection.sqlite`): items,
/// tags, item_tags, time_entries, saved_searches, completion_history, recurrence_exceptions,
/// plus conflicts, sync_anomalies, the projection cursor, an FTS5 index over items and the
/// device-local app_settings. Derived: `rebuild` recreates it from the log at any time.
///
/// ```swift
/// let projection = try Projection(store: store)
/// try projection.catchUp()
/// let items = try projection.items(search: "milk")
/// ```
/// Reads may run from any thread (GRDB's `DatabasePool`); writes (`catchUp`, `apply`) belong to
/// the process holding the store's writer lock.
public final class Projection: @unchecked Sendable {
    public let store: Store
    public let schema: ProjectionSchema
    /// Whether `catchUp(origins:)` filled an empty projection the way a rebuild does already.
    private var triedFreshFill = false
    /// The projector of the last `catchUp(origins:)`, kept while nothing else writes the file,
    /// with what showed that: the writer connection's `data_version` (moves when another
    /// connection commits) and `total_changes()` (moves when this one changes a row by any
    /// other path), and `fileGeneration` (a copy over the file through this connection, which
    /// moves neither). Kept only once its transaction committed. Loading a projector reads every origin's
    /// cursor: a hub receiving a group of pushes every few milliseconds spent half its
    /// projection doing that (docs/SCALING.md). Touched only inside the writer's transactions.
    private var kept: Kept?
    private struct Kept {
        var projector: Projector
        var dataVersion: Int64
        var changes: Int64
        var generation: Int
    }
    /// Moves when the file's content is replaced without either value moving (`rebuildInPlace`).
    private var fileGeneration = 0
    private let keptLock = Lock()
    /// Projectors `catchUp(origins:)` loaded from the file (not kept ones): for tests.
    private(set) var projectorsLoaded = 0
    /// Past this many events a catch-up's projector is not kept (its buffers stay as large).
    static let keptProjectorEventsMax = 10_000
    /// Whether a rebuild owed to the share scope rule was looked for (once per `Projection`).
    private var scopesSettled = false
    public let path: String
    let pool: DatabasePool
    let hub = ChangeHub()

    public static func path(for store: Store) -> String { store.layout.projection }

    /// Opens the store's projection for a reader: as `init(store:)` does, and when that cannot
    /// write (a full disk, a read-only mount), read-only as the file is, without migrating it
    /// (a reader never needs to write; a projection still to be migrated is then an error
    /// saying so).
    public convenience init(readingIfNeeded store: Store) throws {
        let path = Projection.path(for: store)
        let pool: DatabasePool
        do {
            pool = try Projection.openPool(path, schema: .current)
        } catch where DiskSpace.cannotWrite(error, near: store.path) {
            pool = try Projection.openReadOnlyPool(path, schema: .current)
        } catch let e as DatabaseError where e.resultCode == .SQLITE_BUSY {
            // Another process is filling the projection with its file taken (`claimFileForFill`):
            // what it has committed is read without the WAL's setup, which needs a write.
            pool = try Projection.openReadOnlyPool(path, schema: .current)
        } catch {
            throw ProjectionError.database("cannot open \(path): \(error)")
        }
        self.init(store: store, schema: .current, path: path, pool: pool)
    }

    /// Opens the projection read-only: nothing is created, migrated or written.
    ///
    /// Even a reader of a WAL file needs its shared-memory file (`-shm`), which SQLite creates and
    /// sizes on first use: on a full disk that fails ("disk I/O error") once no connection holds
    /// it. Then, when no WAL holds commits (none, or empty: every commit is in the file), the file
    /// is read as it stands (SQLite's `immutable`: no locks, no `-shm`); nothing can be committed
    /// while the disk is full, and the next open after space is freed reads through the WAL.
    static func openReadOnlyPool(_ path: String, schema: ProjectionSchema) throws -> DatabasePool {
        do {
            return try openReadOnlyPool(path, schema: schema, immutable: false)
        } catch let e as ProjectionError {
            throw e
        } catch where DiskSpace.isFull(error, near: path) && walIsEmpty(path) {
            do {
                return try openReadOnlyPool(path, schema: schema, immutable: true)
            } catch let e as ProjectionError {
                throw e
            } catch {
                throw ProjectionError.database("cannot open \(path) to read (its disk is full, and read as it stands): \(error)")
            }
        } catch {
            throw ProjectionError.database("cannot open \(path) to read: \(error)")
        }
    }

    /// True when `path` has no WAL beside it, or an empty one.
    static func walIsEmpty(_ path: String) -> Bool {
        var st = stat()
        return stat(path + "-wal", &st) != 0 || st.st_size == 0
    }

    /// The file's name as an SQLite URI that opens it `immutable` (read as it stands).
    static func immutableURI(_ path: String) -> String {
        var escaped = ""
        for u in path.unicodeScalars {
            switch u {
            case "%": escaped += "%25"
            case "?": escaped += "%3f"
            case "#": escaped += "%23"
            default: escaped.unicodeScalars.append(u)
            }
        }
        return "file:" + escaped + "?immutable=1"
    }

    private static func openReadOnlyPool(_ path: String, schema: ProjectionSchema, immutable: Bool) throws -> DatabasePool {
        do {
            var c = Projection.configuration()
            c.readonly = true
            let pool = try SQLiteFactory.pool(immutable ? immutableURI(path) : path, c)
            let applied = try pool.read { db in try db.tableExists("grdb_migrations") ? try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") : [] }
            guard Set(applied).isSuperset(of: schema.migrations.map(\.name)) else {
                try? pool.close()
                throw ProjectionError.database("\(path) needs migrating before it can be read, and it cannot be written now")
            }
            return pool
        }
    }

    /// Opens (creating and migrating if needed) the store's projection.
    public convenience init(store: Store, schema: ProjectionSchema = .current, path: String? = nil) throws {
        let path = path ?? Projection.path(for: store)
        let pool: DatabasePool
        do {
            pool = try Projection.openPool(path, schema: schema)
        } catch {
            throw ProjectionError.database("cannot open \(path): \(error)")
        }
        self.init(store: store, schema: schema, path: path, pool: pool)
    }

    private init(store: Store, schema: ProjectionSchema, path: String, pool: DatabasePool) {
        self.store = store
        self.schema = schema
        self.path = path
        self.pool = pool
        fileID = Projection.identity(path)
    }

    /// The file's identity (device, inode) when it was opened.
    private let fileID: (UInt64, UInt64)?

    static func identity(_ path: String) -> (UInt64, UInt64)? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return (UInt64(st.st_dev), UInt64(st.st_ino))
    }

    /// False once another file has been renamed over the one this value opened (a rebuild, a
    /// snapshot installed, by this process or another): reads then see the old file, and a
    /// reader opens the projection again.
    public var isCurrentFile: Bool {
        guard let now = Projection.identity(path), let fileID else { return false }
        return now == fileID
    }

    static func configuration() -> Configuration {
        var c = SQLiteFactory.configuration(.ours)
        // Another process's connection may hold the file for a moment (its last close checkpoints
        // the WAL): wait for it rather than fail a read or a writer's open.
        c.busyMode = .timeout(5)
        c.prepareDatabase { db in
            // The WAL is cut back to this size whenever a checkpoint lets it start over: a large
            // catch-up does not leave a WAL the size of the projection on the disk.
            try db.execute(sql: "PRAGMA journal_size_limit = \(walBytesMax)")
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            try db.execute(sql: "PRAGMA cache_size = -65536")
        }
        return c
    }

    /// What the projection's WAL is kept to between catch-ups (docs/FORMAT.md, "Projection").
    public static let walBytesMax = 4 << 20

    /// Why the projection must be made again from the log (a column added since it was
    /// filled, `ProjectionSchema.columnMigrations`); empty when it need not be.
    public func owedRebuild() throws -> [String] {
        try reading { db in
            try db.tableExists("projection_owed_rebuild") ? try String.fetchAll(db, sql: "SELECT reason FROM projection_owed_rebuild ORDER BY reason") : []
        }
    }

    /// A projection filled before the share scope rule ("v5 share scopes" owed) is made again
    /// from the log before anything more is applied to it, when its store holds shares' frames
    /// (its share rows have no scope yet, and would take every later share event for one of
    /// private data's); otherwise the debt is dropped. Whatever opens it: a writer, a server
    /// that does not project at open, `evctl replay`.
    func settleOwedScopes() throws {
        guard !scopesSettled else { return }
        guard try owedRebuild().contains(ProjectionSchema.shareScopesMigration) else {
            scopesSettled = true
            return
        }
        if try Store.open(at: store.path).format < Store.sharedFormatVersion {
            try forgiveRebuild(ProjectionSchema.shareScopesMigration)
        } else {
            _ = try rebuildInPlace()
        }
        scopesSettled = true
    }

    /// Drops a rebuild owed for `reason` that the caller knows would change nothing.
    func forgiveRebuild(_ reason: String) throws {
        try pool.write { db in
            if try db.tableExists("projection_owed_rebuild") {
                try db.execute(sql: "DELETE FROM projection_owed_rebuild WHERE reason = ?", arguments: [reason])
            }
        }
    }

    static func openPool(_ path: String, schema: ProjectionSchema) throws -> DatabasePool {
        let pool = try SQLiteFactory.pool(path, configuration())
        try schema.migrator().migrate(pool)
        return pool
    }

    /// A scratch database for a rebuild: no journal and no syncs while it fills (it is only used
    /// once it is complete: a crash leaves a temp file that the next rebuild deletes), a large cache.
    static func openRebuildQueue(_ path: String, schema: ProjectionSchema) throws -> DatabaseQueue {
        var c = SQLiteFactory.configuration(.ours)
        c.prepareDatabase { db in
            try db.execute(sql: "PRAGMA journal_mode = OFF")
            try db.execute(sql: "PRAGMA synchronous = OFF")
            try db.execute(sql: "PRAGMA cache_size = -262144")
        }
        let q = try SQLiteFactory.queue(path, .ours, c)
        try schema.migrator().migrate(q)
        return q
    }

    /// The database itself: only this package writes it (an app reads through `read`).
    package var database: DatabasePool { pool }

    /// Runs `body` on a read-only connection to the projection, for queries of your own: a write
    /// in it fails (SQLite opens readers read-only), so nothing but the log changes the tables.
    public func read<T>(_ body: (Database) throws -> T) throws -> T { try reading(body) }

    /// `read(_:)` off the caller's thread, on GRDB's reader queue.
    public func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await pool.read(body)
    }

    // MARK: Catching up

    /// Events per transaction while catching up: bounds memory and the work lost to a crash.
    public static let catchUpBatchEvents = 100_000

    /// Applies every event past the projection's cursor, origin by origin, committing rows and
    /// cursor together every `catchUpBatchEvents` events (a crash never applies an event twice).
    /// - Parameter progress: called with (events applied so far, events to apply).
    /// - Returns: the number of events applied.
    @discardableResult
    public func catchUp(progress: ((Int, Int) -> Void)? = nil) throws -> Int {
        try settleOwedScopes()
        try eraseLeftShares()
        return try Projection.project(store: store, into: pool, schema: schema, fresh: false, progress: progress, hub: hub.isEmpty ? nil : hub)
    }

    /// `catchUp` of `origins` only: what a receiver that knows which origins it wrote needs,
    /// without opening the log of every other origin (a hub holding thousands).
    /// A small catch-up (what a group of pushes brings) is one transaction for all of them, which
    /// reads only these origins' cursor rows; past `catchUpBatchEvents` it goes on origin by
    /// origin in batches, as `catchUp` does.
    public func catchUp(origins: Set<ReplicaID>) throws -> Int {
        guard !origins.isEmpty else { return 0 }
        try settleOwedScopes()
        try eraseLeftShares()
        let hub = hub.isEmpty ? nil : self.hub
        let filled = try pool.read { try Bool.fetchOne($0, sql: "SELECT EXISTS (SELECT 1 FROM projection_cursor)") } ?? false
        // An empty projection is filled the way a rebuild fills it, once per Projection: one
        // that stays empty (a hub holding only shares' sealed logs, which it cannot read)
        // catches up origin by origin after that, not by reading every origin per push.
        if !filled && !triedFreshFill {
            triedFreshFill = true
            return try catchUp()
        }
        let reader = LogReader(store: store)
        let store = self.store
        var events: [Event] = []
        var more = false
        var keeping: Kept?
        let n = try pool.write { db -> Int in
            let p: Projector
            if let k = try self.keptProjector(db) { p = k } else {
                p = try Projector(schema: schema, db: db, fresh: false)
                projectorsLoaded += 1
            }
            p.scopeOf = Projection.scopesOfLogs(store)
            p.replayEntities = { try Projection.histories(store: store, of: $0) }
            let appliedBefore = p.eventsApplied
            var count = 0
            for o in origins.sorted() {
                let applied = try Int64.fetchOne(db, sql: "SELECT last_seq FROM projection_cursor WHERE origin = ?", arguments: [o.description]) ?? 0
                guard applied >= 0 else { throw ProjectionError.database("projection_cursor holds seq \(applied) for origin \(o); run `evctl replay --rebuild`") }
                try reader.forEachEvent(origin: o, from: Seq(UInt64(applied)).next) { e in
                    try p.apply(e, db: db)
                    if hub != nil { events.append(e) }
                    count += 1
                    if p.pendingRows >= Projector.flushRowsMax { try p.flush(db: db) }
                    more = count >= Projection.catchUpBatchEvents
                    return !more
                }
                if more { break }
            }
            let applied = p.eventsApplied - appliedBefore
            if applied > 0 { try p.flush(db: db) }
            if !more && applied <= Self.keptProjectorEventsMax {
                // Noted inside the transaction, whose write lock no other connection can pass
                // (this connection's own commit moves neither value); kept only once it commits.
                let v = try Self.writerVersion(db)
                keeping = Kept(projector: p, dataVersion: v.dataVersion, changes: v.changes, generation: self.currentGeneration)
            }
            return applied
        }
        keptLock.withLock { kept = keeping }
        if let hub, n > 0 { hub.publish(ProjectionChange(cursor: try pool.read(Projection.readCursor), events: events)) }
        guard more else { return n }
        return n + (try Projection.project(store: store, into: pool, schema: schema, fresh: false, progress: nil, hub: hub, only: origins))
    }

    /// The kept projector, if nothing but it wrote the file since it was kept.
    private func keptProjector(_ db: Database) throws -> Projector? {
        // Taken out: a catch-up that fails leaves none kept.
        let (k, generation) = keptLock.withLock { () -> (Kept?, Int) in
            defer { kept = nil }
            return (kept, fileGeneration)
        }
        guard let k, k.generation == generation else { return nil }
        let v = try Self.writerVersion(db)
        return v.dataVersion == k.dataVersion && v.changes == k.changes ? k.projector : nil
    }

    /// The file's content was replaced through this projection's own connection (a backup into
    /// it): neither `data_version` nor `total_changes()` says so, this does.
    private func replacedFile() {
        keptLock.withLock {
            kept = nil
            fileGeneration += 1
        }
    }

    private var currentGeneration: Int { keptLock.withLock { fileGeneration } }

    private static func writerVersion(_ db: Database) throws -> (dataVersion: Int64, changes: Int64) {
        let row = try Row.fetchOne(db, sql: "SELECT data_version, total_changes() FROM pragma_data_version")
        guard let row, let v: Int64 = row[0], let c: Int64 = row[1] else { throw ProjectionError.database("cannot read data_version") }
        return (v, c)
    }

    /// Every commit this `Projection` makes from now on (`catchUp`, `apply`), as it is made: the
    /// cursor after it and the events it applied. For commits made by other processes (or other
    /// `Projection` values), use `ProjectionWatcher`. The stream ends when the projection is closed.
    public func changes() -> AsyncStream<ProjectionChange> { hub.subscribe() }

    /// Events the projection has not applied yet, per origin.
    public func lag() throws -> [ReplicaID: UInt64] {
        let applied = try cursor()
        var out: [ReplicaID: UInt64] = [:]
        let reader = LogReader(store: store)
        for o in try store.origins() {
            let tip = try reader.tip(origin: o).lastSeq.rawValue
            let a = applied[o]?.rawValue ?? 0
            if tip > a { out[o] = tip - a }
        }
        return out
    }

    /// Events the projection holds in the log but did not understand entirely when it applied
    /// them (a newer build's entity, op or schema version), counted by kind.
    public func unreadEvents() throws -> [UnreadEvents] {
        try reading(Projection.unreadEvents)
    }

    /// `unreadEvents()` of the projection file at `path`, opened read-only (nothing is migrated
    /// or written): empty when the file or the table does not exist.
    public static func unreadEvents(at path: String) throws -> [UnreadEvents] {
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        var c = SQLiteFactory.configuration(.ours)
        c.readonly = true
        let q = try SQLiteFactory.queue(path, .ours, c)
        defer { try? q.close() }
        return try q.read { db in try db.tableExists("projection_unread") ? try unreadEvents(db) : [] }
    }

    static func unreadEvents(_ db: Database) throws -> [UnreadEvents] {
            try Row.fetchAll(db, sql: "SELECT entity, op, schema_version, events FROM projection_unread ORDER BY entity, op, schema_version").map { r in
                let e: Int64 = try r.decode(atIndex: 0), o: Int64 = try r.decode(atIndex: 1), v: Int64 = try r.decode(atIndex: 2)
                let n: Int64 = try r.decode(atIndex: 3)
                return UnreadEvents(entity: Entity(rawValue: UInt8(clamping: e)), op: Op(rawValue: UInt8(clamping: o)),
                                    schemaVersion: UInt8(clamping: v), events: Int(clamping: n))
            }
    }

    /// The projection's cursor: the last seq applied per origin.
    public func cursor() throws -> [ReplicaID: Seq] {
        try reading(Projection.readCursor)
    }

    static func readCursor(_ db: Database) throws -> [ReplicaID: Seq] {
        var c: [ReplicaID: Seq] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT origin, last_seq FROM projection_cursor") {
            let o: String = try row.decode(atIndex: 0)
            let s: Int64 = try row.decode(atIndex: 1)
            guard s >= 0 else { throw ProjectionError.database("projection_cursor holds seq \(s) for origin \(printable(o, limit: 40)); run `evctl replay --rebuild`") }
            if let id = ReplicaID(o) { c[id] = Seq(UInt64(s)) }
        }
        return c
    }

    static func project(store: Store, into pool: some DatabaseWriter, schema: ProjectionSchema, fresh: Bool,
                        progress: ((Int, Int) -> Void)?, hub: ChangeHub? = nil, only: Set<ReplicaID>? = nil) throws -> Int {
        let reader = LogReader(store: store)
        var applied = try pool.read(Projection.readCursor)
        // An empty projection (no cursor at all: rows and cursor commit together) is filled the way
        // a rebuild fills its new file: merged in memory, written once, indexes built afterwards.
        let rebuilding = fresh
        let fresh = fresh || applied.isEmpty
        var todo: [(ReplicaID, Seq, Seq)] = []
        var total = 0
        for o in try (fresh ? nil : only.map { $0.sorted() }) ?? store.origins() {
            let from = applied[o] ?? Seq(0)
            if progress != nil || fresh {
                // A total for progress reports: each origin's tip (index plus the frames past it),
                // counted from the cursor or from where the log starts (its floor), whichever is later.
                // Summed saturating: each count is below `Seq.max`, but a store another process wrote
                // can hold several logs that start near it.
                let tip = try reader.tip(origin: o).lastSeq
                if tip > from {
                    todo.append((o, from.next, tip))
                    let start = max(from, try reader.floor(origin: o)?.lastSeq ?? Seq(0))
                    let (sum, over) = total.addingReportingOverflow(Int(clamping: tip.rawValue - min(tip, start).rawValue))
                    total = over ? Int.max : sum
                }
            } else {
                // Catching up after an append: read on from the cursor to wherever the log ends.
                todo.append((o, from.next, Seq(UInt64.max)))
            }
        }
        guard !todo.isEmpty, total > 0 || progress == nil else { return 0 }
        var done = 0
        progress?(0, total)
        if fresh {
            // A rebuild into a new file: one transaction, rows merged in memory and written once.
            // Subscribers get the events of a first catch-up that is small enough to hand over;
            // a rebuild, or a large first catch-up, is announced as such.
            let listed = hub != nil && !rebuilding && total <= catchUpBatchEvents
            var events: [Event] = []
            // The rows written, freed once the fill has committed (`Projector.keepWritten`).
            let written = FreeAside.Later<RowTable>()
            defer { written.release() }
            let n = try pool.write { db -> Int in
                let p = try Projector(schema: schema, db: db, fresh: true)
                p.scopeOf = Projection.scopesOfLogs(store)
                p.reserve(rows: total / 4)  // entities get several events each
                // Bulk load: secondary indexes and triggers are set aside while rows go in, then
                // recreated from their own SQL (the schema ends identical) and the FTS index built in one pass.
                // Not the conflicts' index: each flush looks conflicts up by entity to settle
                // resolutions, and without it every lookup scanned them all (quadratic).
                // Which ones, by name and SQL, comes from this build's own migrations run in memory:
                // the file's schema is compared with them as data, and no SQL text read from the
                // file is ever executed (an index whose name is SQL is left alone, not run).
                let deferred = try Projection.setAsideIndexes(db, schema: schema)
                // Reading, decoding and placing fields run on a second thread, ahead of merging (same order).
                try EventPrefetcher.runBatches(reader: reader, work: todo.map { ($0.0, $0.1) }, layout: p.layout) { batch in
                    try p.apply(batch, db: db, flushingAt: Projector.rebuildRowsMax) {
                        done += 1
                        if done % 50_000 == 0 { progress?(done, total) }
                    }
                    if listed { events += batch.events }
                }
                p.keepWritten = written
                try p.flush(db: db)
                try Projection.restoreIndexes(deferred, db)
                progress?(done, total)
                return p.eventsApplied
            }
            written.release()
            if let hub { hub.publish(ProjectionChange(cursor: try pool.read(Projection.readCursor), events: events, rebuilt: !listed)) }
            return n
        }
        for (origin, from, tip) in todo {
            var next = from
            while next <= tip {
                // One transaction per batch: rows and cursor commit together.
                let batchEnd = Seq(min(tip.rawValue, next.rawValue + UInt64(catchUpBatchEvents) - 1))
                var last = Seq(0)
                var batch: [Event] = []
                let n = try pool.write { db -> Int in
                    let p = try Projector(schema: schema, db: db, fresh: false)
                    p.scopeOf = Projection.scopesOfLogs(store)
                    p.replayEntities = { try Projection.histories(store: store, of: $0) }
                    try reader.forEachEvent(origin: origin, from: next) { e in
                        if e.seq > batchEnd { return false }
                        try p.apply(e, db: db)
                        if hub != nil { batch.append(e) }
                        last = e.seq
                        return e.seq < batchEnd
                    }
                    guard p.eventsApplied > 0 else { return 0 }
                    try p.flush(db: db)
                    return p.eventsApplied
                }
                if n > 0 { applied[origin] = last }
                if let hub, n > 0 {
                    hub.publish(ProjectionChange(cursor: applied.filter { $0.value.rawValue > 0 }, events: batch))
                }
                if n > 0 && last < batchEnd && tip == Seq(UInt64.max) { done += n; break }
                done += n
                next = batchEnd.next
                progress?(done, total)
                if n == 0 { break }
            }
        }
        // After a large catch-up, the WAL is folded back and cut (best effort: a reader in the
        // middle of a read keeps it for now, and `journal_size_limit` cuts it at the next reset).
        if done >= walCheckpointEvents { _ = try? pool.writeWithoutTransaction { try $0.checkpoint(.truncate) } }
        return done
    }

    /// Drops the secondary indexes and triggers of an empty projection about to be filled in bulk
    /// (`restoreIndexes` puts them back); returns them.
    static func setAsideIndexes(_ db: Database, schema: ProjectionSchema) throws -> [SchemaObject] {
        let present = Set(try Projection.indexesAndTriggers(db))
        let deferred = try Projection.ownIndexesAndTriggers(schema).filter(present.contains)
        for d in deferred { try db.execute(sql: "DROP \(d.type == "index" ? "INDEX" : "TRIGGER") \(SQLiteFactory.quote(d.name))") }
        return deferred
    }

    /// Recreates what `setAsideIndexes` dropped, from this build's own SQL (indexes, then
    /// triggers), and builds the full-text index in one pass.
    static func restoreIndexes(_ deferred: [SchemaObject], _ db: Database) throws {
        for d in deferred.sorted(by: { $0.type < $1.type }) { try db.execute(sql: d.sql) }
        try db.execute(sql: "INSERT INTO items_fts(items_fts) VALUES ('rebuild')")
    }

    /// Which share's sealed log an origin is, for the projector's scope rule (docs/PROJECTION.md, "Shares").
    static func scopesOfLogs(_ store: Store) -> (ReplicaID) throws -> ShareDirectory.LogScope? {
        { try ShareDirectory.scope(ofLog: store, origin: $0) }
    }

    /// A catch-up of at least this many events folds the WAL back into the file when it ends.
    static let walCheckpointEvents = 10_000

    /// Runs `append` on a thread of its own while this thread projects the events it places,
    /// handed over in order through `placed`: merging overlaps the append instead of following it
    /// and reading its events back from the log. The events are applied in one transaction that
    /// commits only after `append` has returned (they are durable then) and is rolled back if it
    /// throws; an empty projection is filled the way a rebuild fills it (rows merged in memory,
    /// indexes built afterwards), as `catchUp` would have. `append`'s progress reports are passed
    /// on to `progress` on this thread (the caller's, which holds the projection's writer).
    ///
    /// Taken only when the projection holds exactly the log's own events so far (`ownTip`), so the
    /// events placed are the next ones to apply, and holds no row purged by retention (one that an
    /// event brings back is made again from committed history, which an append in progress is not
    /// in yet). Otherwise, or when getting ready fails, `append` is not run and nil is returned:
    /// the caller appends, then catches up, and a projection that cannot be written does not
    /// stop an append. Other origins are left to `catchUp`.
    /// - Returns: what `append` returned, and the projection's failure, if any: the events are in
    ///   the log then, and are projected by a later `catchUp` (or the next writer to open the store).
    /// - Throws: `append`'s error (nothing was appended, and nothing is projected).
    ///
    /// - Parameter claimingFile: a fresh fill may take the projection's file for itself
    ///   (`claimFileForFill`): for a process that is the file's only user while it fills it, as
    ///   `evctl append` is. Others that open it meanwhile meet its write lock (see there).
    package func projecting<T>(own origin: ReplicaID, from ownTip: Seq, progress: ((Int, Int) -> Void)? = nil,
                               claimingFile: Bool = false,
                               _ append: @escaping (_ placed: @escaping ([Event], _ inputBytes: Int) -> Void,
                                                    _ progress: @escaping (Int, Int) -> Void) throws -> T) throws -> (T, projectionError: (any Error)?)? {
        let fresh: Bool
        do {
            try settleOwedScopes()
            try eraseLeftShares()
            let (cursor, purged) = try pool.read { db in
                (try Projection.readCursor(db), try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM projection_purged)") ?? true)
            }
            guard (cursor[origin] ?? Seq(0)) == ownTip, !purged else { return nil }
            fresh = cursor.isEmpty
        } catch {
            return nil
        }
        keptLock.withLock { kept = nil }
        let listing = !hub.isEmpty
        let outcome = AppendOutcome<T>()
        var listed: [Event] = []
        var overflowed = false
        var applied = 0
        var cursorAfter: [ReplicaID: Seq] = [:]
        // A fresh fill's rows, freed once it has committed (`Projector.keepWritten`).
        let written = FreeAside.Later<RowTable>()
        defer { written.release() }
        let merged = FreeAside.Later<PreparedBatch>()
        defer { merged.release() }
        let claimed = fresh && claimingFile && claimFileForFill()
        defer { if claimed { releaseFileAfterFill() } }
        do {
            applied = try pool.write { db in
                let p = try Projector(schema: schema, db: db, fresh: fresh)
                p.scopeOf = Projection.scopesOfLogs(store)
                if !fresh { p.replayEntities = { [store] in try Projection.histories(store: store, of: $0) } }
                let deferred = fresh ? try Projection.setAsideIndexes(db, schema: schema) : []
                let layout = p.layout
                let rowsMax = fresh ? Projector.rebuildRowsMax : Projector.flushRowsMax
                // The append's thread is joined before `run` returns (the closure itself may be
                // released later, with the thread object: it is escaping for that).
                nonisolated(unsafe) let append = append
                // Applied batches are freed on another thread (`FreeAside`); a fresh fill's are
                // kept (within a bound) until its rows are written, and freed beside the building
                // of its indexes, which leaves the other core free.
                let retired = FreeAside.Retirer<PreparedBatch>(keeping: fresh ? merged : nil, keepMax: Projector.keptBytesMax)
                defer { retired.finish() }
                // The append hands over each chunk's events placed, with their fields laid out on
                // its thread, and its progress; at most `depth` items wait, which bounds memory.
                try Handoff<AppendHandoff>.run(name: "logbook.append", depth: 8, produce: { hand, _ in
                    do {
                        let value = try withoutActuallyEscaping(hand) { hand in
                            nonisolated(unsafe) let hand = hand
                            return try append({ events, inputBytes in
                                guard !events.isEmpty else { return }
                                let batch = PreparedBatch(capacity: events.count, layout: layout)
                                batch.inputBytes = inputBytes
                                for e in events { batch.prepared.append(layout.prepare(e, into: &batch.fields, pairEagerly: true)) }
                                batch.events = events
                                // False once projecting has failed: the append goes on alone.
                                _ = hand(.events(batch))
                            }, { lines, bytes in _ = hand(.progress(lines, bytes)) })
                        }
                        outcome.value = .success(value)
                    } catch {
                        outcome.value = .failure(error)
                        throw error
                    }
                }, consume: { item in
                    guard case .events(let batch) = item else {
                        if case .progress(let lines, let bytes) = item { progress?(lines, bytes) }
                        return
                    }
                    defer { retired.retire(batch, weight: batch.heldBytes) }
                    try p.apply(batch, db: db, flushingAt: rowsMax)
                    if listing && !overflowed {
                        listed += batch.events
                        if listed.count > Projection.catchUpBatchEvents { overflowed = true; listed = [] }
                    }
                })
                // Only here, once `append` has returned (the events are durable), may this commit.
                guard case .success = outcome.value else { throw ProjectionError.database("the append ended without a result") }
                retired.finish()
                if fresh { p.keepWritten = written }
                try p.flush(db: db)
                // The batches go while the indexes are built: the flush's rows are laid out on
                // the other core, which they would have competed for.
                merged.release()
                if fresh { try Projection.restoreIndexes(deferred, db) }
                if listing { cursorAfter = try Projection.readCursor(db) }
                return p.eventsApplied
            }
        } catch {
            switch outcome.value {
            case .success(let value)?: return (value, error)
            case .failure(let failure)?: throw failure
            case nil: return nil  // failed before the append started: the caller appends alone
            }
        }
        guard case .success(let value)? = outcome.value else {
            // Unreachable: the transaction commits only after a successful append.
            throw ProjectionError.database("the append ended without a result")
        }
        appendsProjectedAsTheyLanded += 1
        if listing && applied > 0 { hub.publish(ProjectionChange(cursor: cursorAfter, events: listed, rebuilt: overflowed)) }
        // As after a large catch-up: the WAL folded back and cut (best effort).
        if applied >= Projection.walCheckpointEvents { _ = try? pool.writeWithoutTransaction { try $0.checkpoint(.truncate) } }
        return (value, nil)
    }

    /// Takes the projection's file for a fresh fill: its journal is switched from the WAL to a
    /// rollback journal, so the fill's pages are written into the file once, where the WAL would
    /// take them all and a checkpoint then copy them back. The fill stays one atomic transaction
    /// (a crash rolls it back from the journal, which holds only the few pages the file had).
    ///
    /// SQLite makes the switch only when no other connection, of this process or another, has
    /// the file open: this pool's idle readers are closed first, and the switch is refused
    /// without a busy wait when anyone else holds it. Refused or failed, the fill goes through
    /// the WAL as it always does. Under the rollback journal, syncs are FULL (NORMAL is safe
    /// against power loss only with the WAL).
    ///
    /// What others meet meanwhile: the fill holds the file's write lock from its start, so a
    /// process that opens the projection for writing (which sets the WAL, a write) waits for it
    /// up to its busy timeout (5 s) and then fails with "database is locked"; one that only reads
    /// (`Projection(readingIfNeeded:)` falls back to reading) sees what was committed before, until
    /// the fill's pages outgrow its cache (64 MiB) and it takes the file whole. A crash mid-fill
    /// leaves a hot journal: the next writer to open the file plays it back (the empty file
    /// returns), and until then read-only opens fail. Returns whether the file was taken.
    func claimFileForFill() -> Bool {
        pool.releaseMemory()
        let mode = try? pool.writeWithoutTransaction { db -> String? in
            // No busy wait for the switch (the connection's own is put back after).
            let wait = try Int.fetchOne(db, sql: "PRAGMA busy_timeout") ?? 0
            sqlite3_busy_timeout(db.sqliteConnection, 0)
            defer { sqlite3_busy_timeout(db.sqliteConnection, Int32(clamping: wait)) }
            let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode = DELETE")
            if mode == "delete" { try db.execute(sql: "PRAGMA synchronous = FULL") }
            return mode
        }
        guard mode == "delete" else { return false }
        fillsWithFileClaimed += 1
        return true
    }

    /// Gives the file back to the WAL after a fill that claimed it (committed or rolled back),
    /// with the syncs the WAL needs (NORMAL). Should the switch fail, this pool goes on under the
    /// rollback journal (readers may then wait for writes), and the next pool to open the file
    /// (every open sets the WAL) switches it back: `claimedFileKept` says so.
    func releaseFileAfterFill() {
        let mode = try? pool.writeWithoutTransaction { db -> String? in
            let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            if mode == "wal" { try db.execute(sql: "PRAGMA synchronous = NORMAL") }
            return mode
        }
        claimedFileKept = mode != "wal"
    }

    /// True when a claimed fill could not give the file back to the WAL (`releaseFileAfterFill`).
    package private(set) var claimedFileKept = false

    /// Fresh fills that took the file for themselves (`claimFileForFill`): for tests.
    package private(set) var fillsWithFileClaimed = 0

    /// What an append run by `projecting` hands its merging thread.
    private enum AppendHandoff {
        case events(PreparedBatch)
        case progress(Int, Int)
    }

    /// Appends `projecting` has projected as they landed (committed): for tests.
    package private(set) var appendsProjectedAsTheyLanded = 0

    /// What the append run by `projecting` came to: set on its thread, read after it is joined.
    private final class AppendOutcome<T>: @unchecked Sendable { var value: Result<T, any Error>? }

    /// Applies events directly (they must also be in the log for a later rebuild to agree).
    /// Used by tests and by embedders that project events as they receive them.
    public func apply(_ events: [Event]) throws {
        let cursor = try pool.write { db -> [ReplicaID: Seq] in
            let p = try Projector(schema: schema, db: db, fresh: false)
            p.scopeOf = Projection.scopesOfLogs(store)
            p.replayEntities = { [store] in try Projection.histories(store: store, of: $0) }
            for e in events {
                try p.apply(e, db: db)
                if p.pendingRows >= Projector.flushRowsMax { try p.flush(db: db) }
            }
            try p.flush(db: db)
            return try Projection.readCursor(db)
        }
        if !hub.isEmpty { hub.publish(ProjectionChange(cursor: cursor, events: events)) }
    }

    /// Applies events as a rebuild does (rows merged in memory, written once), into an empty
    /// projection. For tests comparing the rebuild path with the incremental one.
    func applyFresh(_ events: [Event]) throws {
        try pool.write { db in
            let p = try Projector(schema: schema, db: db, fresh: true)
            p.scopeOf = Projection.scopesOfLogs(store)
            for e in events { try p.apply(e, db: db) }
            try p.flush(db: db)
        }
    }

    // MARK: Rebuild

    /// Rebuilds the projection from the whole log into a new file, then swaps it in atomically
    /// (rename). A crash mid-rebuild leaves the old projection in place; `app_settings` is carried over.
    /// - Returns: the number of events applied.
    @discardableResult
    public static func rebuild(store: Store, schema: ProjectionSchema = .current, progress: ((Int, Int) -> Void)? = nil) throws -> Int {
        let n = try build(store: store, schema: schema, progress: progress)
        try swapIn(store.layout.projectionRebuild, over: path(for: store))
        return n
    }

    /// Forgets how far the projection read `origins`, logs a purge dropped from the store
    /// (`LogAppender.purgeShare`): a log that is gone is not counted as read.
    public func forget(origins: Set<ReplicaID>) throws {
        guard !origins.isEmpty else { return }
        let list = "[" + origins.map { "\"\($0)\"" }.sorted().joined(separator: ",") + "]"
        try pool.write { db in
            try db.execute(sql: "DELETE FROM projection_cursor WHERE origin IN (SELECT value FROM json_each(?))", arguments: [list])
        }
    }

    /// A share this replica synced the deletion of, or left, may still have rows here: the
    /// projection is rebuilt in place from what the log still lets this replica read, and the
    /// share marked erased (docs/SHARING.md, "Erasure"). A stat when there is none.
    func eraseLeftShares() throws {
        guard let pending = try? ShareKeyring.of(store).pendingErasure, !pending.isEmpty else { return }
        try rebuildInPlace()
        // The audit pages' index holds decoded events too: it is derived, and made again from
        // the log (without what can no longer be read) when next opened.
        for suffix in [""] + StoreLayout.sqliteSidecarSuffixes { try? FileManager.default.removeItem(atPath: store.layout.audit + suffix) }
        try ShareDirectory.markErased(store, shares: pending)
    }

    /// Rebuilds the projection while it is open: built beside it, then copied over it page by
    /// page (SQLite's backup) through this projection's own connections, and its WAL folded back
    /// and cut. What the log no longer lets this replica read (a deleted share's rows) is then
    /// gone from the file, not only from its tables.
    @discardableResult
    public func rebuildInPlace(progress: ((Int, Int) -> Void)? = nil) throws -> Int {
        let temp = store.layout.projectionRebuild
        let n = try Projection.build(store: store, schema: schema, progress: progress)
        defer { for suffix in [""] + StoreLayout.sqliteSidecarSuffixes { try? FileManager.default.removeItem(atPath: temp + suffix) } }
        do {
            let source = try SQLiteFactory.queue(temp, .ours)
            // The copy moves neither data_version (SQLite compensates for its own connection)
            // nor total_changes(): a kept projector is dropped here, in the writer's turn, so
            // no catch-up runs between the copy and the drop.
            try pool.writeWithoutTransaction { dest in
                replacedFile()
                try source.read { src in try src.backup(to: dest) }
                replacedFile()
            }
            try source.close()
            // Folded back and cut now if no reader holds the WAL; else at the next checkpoint.
            _ = try? pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
        } catch {
            throw ProjectionError.database("rebuild in place: \(error)")
        }
        if !hub.isEmpty { hub.publish(ProjectionChange(cursor: try cursor(), events: [], rebuilt: true)) }
        return n
    }

    /// Builds the projection from the whole log into `projection.sqlite.rebuild`.
    static func build(store: Store, schema: ProjectionSchema, progress: ((Int, Int) -> Void)?) throws -> Int {
        let target = path(for: store)
        let temp = store.layout.projectionRebuild
        for suffix in [""] + StoreLayout.sqliteSidecarSuffixes { try? FileManager.default.removeItem(atPath: temp + suffix) }
        var n = 0
        do {
            let seeded = try seedFromSnapshot(store, at: temp)
            let pool = try openRebuildQueue(temp, schema: schema)
            n = try project(store: store, into: pool, schema: schema, fresh: !seeded, progress: progress)
            // Device-local settings survive a rebuild, and with them what was purged.
            if FileManager.default.fileExists(atPath: target) {
                try pool.writeWithoutTransaction { db in
                    try SQLiteFactory.attaching(db, target, for: .previousProjection) { old in
                        try db.execute(sql: "INSERT OR REPLACE INTO main.app_settings SELECT key, value FROM \(old).app_settings")
                    }
                    try db.inTransaction {
                        try Projection.reapplyPurge(db, schema: schema)
                        return .commit
                    }
                }
            }
            try pool.writeWithoutTransaction { db in
                _ = try db.execute(sql: "PRAGMA journal_mode = WAL")
                _ = try db.checkpoint(.truncate)
            }
            try pool.close()
        } catch let e as ProjectionError {
            throw e
        } catch {
            throw ProjectionError.database("rebuild: \(error)")
        }
        return n
    }

    /// An index or trigger a bulk load sets aside and recreates.
    struct SchemaObject: Hashable { var type: String, name: String, sql: String }

    /// The indexes and triggers of the open database that a bulk load may set aside (not the
    /// conflicts' index, which each flush uses), as data.
    static func indexesAndTriggers(_ db: Database) throws -> [SchemaObject] {
        try Row.fetchAll(db, sql: """
            SELECT type, name, sql FROM sqlite_master
            WHERE type IN ('index', 'trigger') AND sql IS NOT NULL AND tbl_name NOT LIKE 'sqlite_%' AND tbl_name <> 'conflicts'
            ORDER BY type, name
            """).compactMap { row in
            guard let t = SnapshotSchema.text(row[0]), let n = SnapshotSchema.text(row[1]), let q = SnapshotSchema.text(row[2]) else { return nil }
            return SchemaObject(type: t, name: n, sql: q)
        }
    }

    /// The same, as this build's own migrations of `schema` make them (in a private in-memory
    /// database): the only SQL a bulk load runs to recreate them.
    static func ownIndexesAndTriggers(_ schema: ProjectionSchema) throws -> [SchemaObject] {
        let q = try SQLiteFactory.queue(nil, .ours)
        defer { try? q.close() }
        try schema.migrator().migrate(q)
        return try q.read(indexesAndTriggers)
    }

    /// fsyncs `temp`, checkpoints and closes out the old file's WAL, renames, fsyncs the directory.
    static func swapIn(_ temp: String, over target: String) throws {
        try DurableFile.sync(temp, op: "rebuild")
        let journal = target + "-journal"
        if FileManager.default.fileExists(atPath: target) {
            // Fold the old WAL into the old file first: a stale WAL must never meet the new file.
            // Opening it also plays back a hot journal a crashed fill left (`claimFileForFill`),
            // so the old file is whole should the swap not happen.
            if let old = try? SQLiteFactory.queue(target, .ours, configuration()) {
                try? old.writeWithoutTransaction { db in _ = try db.checkpoint(.truncate) }
                try? old.close()
            }
        }
        // A rollback journal must never meet the new file either (SQLite would play it into it).
        // One the old file could not take back is set aside, not deleted: it is what restores it.
        if FileManager.default.fileExists(atPath: journal) {
            // Named uniquely: a second journal set aside in the same second must not replace the first.
            let aside = journal + ".stale-\(Int(Date().timeIntervalSince1970))-\(UUID().uuidString.prefix(8).lowercased())"
            guard rename(journal, aside) == 0 else {
                throw ProjectionError.database("cannot set aside \(journal), a rollback journal the old projection did not take back: \(String(cString: strerror(errno)))")
            }
        }
        for suffix in StoreLayout.sqliteSidecarSuffixes {
            try? FileManager.default.removeItem(atPath: temp + suffix)
            if suffix != "-journal" { try? FileManager.default.removeItem(atPath: target + suffix) }
        }
        guard rename(temp, target) == 0 else {
            throw ProjectionError.database("cannot move the rebuilt projection into place: \(String(cString: strerror(errno)))")
        }
        try DurableFile.syncDirectory(of: target, op: "rebuild")
    }

    /// Closes the database connections.
    public func close() throws {
        hub.finish()
        try pool.close()
    }
}
