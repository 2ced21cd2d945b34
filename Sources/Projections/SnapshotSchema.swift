import EventLog
import Foundation
import GRDB

/// What a snapshot file must look like, and how one that came from elsewhere is opened: the
/// checks behind `Snapshot.read`. A snapshot is data, never code: its schema is compared row by
/// row with the one this build creates, its values' types with the columns' declared types, and
/// the connection that reads it runs with defensive mode on, untrusted schema, and no triggers
/// or views. See docs/SECURITY.md, "Snapshots".
enum SnapshotSchema {
    /// The tables a snapshot adds to the projection's (`Snapshot.make` creates them).
    static let snapshotTablesSQL = [
        "CREATE TABLE snapshot_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE snapshot_anchors (origin TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, last_hlc INTEGER NOT NULL, last_hash BLOB NOT NULL)",
    ]
    static var eventIDsTableSQL: String { "CREATE TABLE \(Snapshot.eventIDsTable) \(Snapshot.eventIDsColumns)" }

    /// One row of `sqlite_master`, compared as text.
    struct Entry: Hashable, Comparable {
        var type: String, name: String, table: String, sql: String?
        static func < (a: Entry, b: Entry) -> Bool { (a.type, a.name) < (b.type, b.name) }
    }

    /// A column's name and the storage classes its values may have.
    struct Column { var name: String; var allowed: Set<String> }

    /// The schema this build's snapshots have, with the declared column types of every table;
    /// made once, in memory, by the same migrations and statements that make a real snapshot.
    struct Reference {
        var entries: Set<Entry>
        var columns: [String: [Column]]
    }

    /// This build's schema.
    static var reference: Result<Reference, any Error> { reference(migrations: ProjectionSchema.current.migrations.count) }

    private static let references = Lock()
    nonisolated(unsafe) private static var built: [Int: Result<Reference, any Error>] = [:]

    /// The schema a build that had the first `count` of this build's migrations gave its
    /// snapshots (older snapshots are accepted: their tables are copied as far as they go).
    static func reference(migrations count: Int) -> Result<Reference, any Error> {
        references.withLock {
            if let r = built[count] { return r }
            let r = Result { try makeReference(migrations: count) }
            built[count] = r
            return r
        }
    }

    private static func makeReference(migrations count: Int) throws -> Reference {
        let queue = try SQLiteFactory.queue(nil, .ours)
        try ProjectionSchema.current.migrator(upTo: count).migrate(queue)
        return try queue.write { db in
            for sql in snapshotTablesSQL + [eventIDsTableSQL] { try db.execute(sql: sql) }
            let entries = try entriesOf(db)
            var columns: [String: [Column]] = [:]
            for e in entries where e.type == "table" {
                columns[e.name] = try Row.fetchAll(db, sql: "SELECT name, type, \"notnull\" FROM pragma_table_info(?)", arguments: [e.name]).map { row in
                    let type = (row[1] as String? ?? "").uppercased()
                    var allowed: Set<String> = switch type {
                    case "TEXT": ["text"]
                    case "INTEGER": ["integer"]
                    case "BLOB": ["blob"]
                    case "NUMERIC", "REAL": ["integer", "real"]
                    default: ["null", "integer", "real", "text", "blob"]
                    }
                    if (row[2] as Int? ?? 0) == 0 { allowed.insert("null") }
                    return Column(name: row[0], allowed: allowed)
                }
            }
            return Reference(entries: entries, columns: columns)
        }
    }

    static func entriesOf(_ db: Database, schema: String = "main") throws -> Set<Entry> {
        Set(try Row.fetchAll(db, sql: "SELECT type, name, tbl_name, sql FROM \(quote(schema)).sqlite_master").map { row in
            Entry(type: text(row[0]) ?? "?", name: text(row[1]) ?? "?", table: text(row[2]) ?? "?", sql: text(row[3]))
        })
    }

    /// The projection tables whose rows a snapshot carries into a new projection, with their
    /// columns: every table this build's projection has, except the full-text index (rebuilt by
    /// this build's own triggers as rows arrive), the migration log, the commit journal (local to
    /// a file) and device-local settings; for a snapshot of an older schema (`from`), only the
    /// tables and columns it has (a column it lacks starts null).
    static func copiedTables(from snapshot: Reference? = nil) throws -> [(String, [String])] {
        let ref = try reference.get()
        let skipped: Set<String> = ["grdb_migrations", "app_settings", "snapshot_meta", "snapshot_anchors", Snapshot.eventIDsTable, "projection_commits",
                                      // A rebuild owed is the file's own state: a snapshot never carries it.
                                      "projection_owed_rebuild"]
        return ref.entries.filter { $0.type == "table" && !skipped.contains($0.name) && !$0.name.hasPrefix("items_fts") && !$0.name.hasPrefix("sqlite_") }
            .map(\.name).sorted().compactMap { table in
                let mine = ref.columns[table]!.map(\.name)
                guard let snapshot else { return (table, mine) }
                guard let theirs = snapshot.columns[table].map({ Set($0.map(\.name)) }) else { return nil }
                return (table, mine.filter(theirs.contains))
            }
    }

    /// Which of this build's migrations the snapshot's projection had: its `grdb_migrations`
    /// must name exactly the first few of them (a snapshot from a newer build, or one naming
    /// migrations this build never had, is refused).
    static func migrationCount(_ db: Database, path: String) throws -> Int {
        let names = ProjectionSchema.current.migrations.map(\.name)
        let found: [String]
        do {
            found = try Row.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations").map { text($0[0]) ?? "\u{0}" }
        } catch {
            throw ProjectionError.invalid("\(path): refused: the snapshot has no readable migration log (grdb_migrations); nothing was installed")
        }
        guard found.count <= names.count, Set(found) == Set(names.prefix(found.count)), found.count == Set(found).count else {
            let unknown = found.first { !names.contains($0) }
            throw ProjectionError.invalid("\(path): refused: the snapshot was made by a build with other projection migrations" +
                                          (unknown.map { " (\(printable($0, limit: 80)) is not one of this build's)" } ?? "") +
                                          "; nothing was installed")
        }
        return found.count
    }

    /// Opens a snapshot that came from elsewhere, read-only, on a connection that cannot run
    /// anything the file asks for.
    static func openUntrusted(_ path: String) throws -> DatabaseQueue {
        do {
            try ForeignFile.checkRegular(path, bytesMax: Snapshot.absoluteBytesMax, op: "open a snapshot")
            return try SQLiteFactory.queue(path, .foreign)
        } catch {
            throw ProjectionError.database("\(path) is not a snapshot (not an SQLite database: \(error))")
        }
    }

    /// Refuses a snapshot whose schema is not exactly the one this build's migrations made at the
    /// point its migration log names (an older snapshot without `snapshot_event_ids` is accepted), or whose rows hold values of other types than their
    /// columns declare.
    @discardableResult
    static func check(_ db: Database, path: String) throws -> Reference {
        let ref = try reference(migrations: try migrationCount(db, path: path)).get()
        let found: Set<Entry>
        do { found = try entriesOf(db) } catch {
            throw ProjectionError.database("\(path) is not a snapshot (its schema cannot be read: \(error))")
        }
        var expected = ref.entries
        if !found.contains(where: { $0.name == Snapshot.eventIDsTable }) {
            expected = expected.filter { $0.name != Snapshot.eventIDsTable }
        }
        if !found.contains(where: { $0.name == "snapshot_meta" }) {
            throw ProjectionError.database("\(path) is not a snapshot (no snapshot_meta or snapshot_anchors table)")
        }
        if found != expected {
            let extra = found.subtracting(expected).sorted().first
            let missing = expected.subtracting(found).sorted().first
            let what = extra.map { "it has \($0.type) \(printable($0.name, limit: 80)) that this build's snapshots do not have (or with other SQL)" }
                ?? missing.map { "it lacks \($0.type) \($0.name)" } ?? "its schema differs"
            throw ProjectionError.invalid("\(path): refused: the snapshot's schema is not the one this build makes: \(what); nothing was installed")
        }
        for (table, columns) in ref.columns.sorted(by: { $0.key < $1.key }) where found.contains(where: { $0.type == "table" && $0.name == table }) {
            guard !table.hasPrefix("items_fts") else { continue }
            let conditions = columns.filter { $0.allowed.count < 5 }.map { c in
                "typeof(\(quote(c.name))) NOT IN (\(c.allowed.sorted().map { "'\($0)'" }.joined(separator: ", ")))"
            }
            guard !conditions.isEmpty else { continue }
            let probe = columns.map { "typeof(\(quote($0.name)))" }.joined(separator: ", ")
            if let row = try Row.fetchOne(db, sql: "SELECT \(probe) FROM \(quote(table)) WHERE \(conditions.joined(separator: " OR ")) LIMIT 1") {
                let bad = columns.indices.first { !columns[$0].allowed.contains(row[$0] as String? ?? "") }.map { columns[$0] }
                throw ProjectionError.invalid("\(path): refused: table \(table), column \(bad?.name ?? "?") holds a \(row[columns.firstIndex { $0.name == bad?.name } ?? 0] as String? ?? "?") value where this build stores \(bad.map { $0.allowed.sorted().joined(separator: " or ") } ?? "?"); nothing was installed")
            }
        }
        return ref
    }

    /// An SQL identifier, quoted (names reach SQL only this way).
    static func quote(_ name: String) -> String { SQLiteFactory.quote(name) }

    /// A value as text when it is text (never converted from another type: no trap on bad data).
    static func text(_ v: DatabaseValue) -> String? {
        if case .string(let s) = v.storage { return s }
        return nil
    }

    static func blob(_ v: DatabaseValue) -> Data? {
        if case .blob(let d) = v.storage { return d }
        return nil
    }
}
