import CSQLiteGuard
import Foundation
import GRDB

/// The one way Logbook opens SQLite: every connection, to a file of its own (projection, event
/// ids, peers, origin owners, audit index, snapshots it makes) or to a file from elsewhere (a
/// peer's snapshot, a legacy database), comes from here, so none can forget a setting:
///
/// - defensive mode (no writable schema, no shadow-table writes), no extension loading;
/// - no ATTACH: the attached-database limit is 0, raised to 1 only inside `attaching`, which
///   names each internal use (GRDB keeps SQLite's one authorizer for itself: it tracks what a
///   statement reads with it, so the limit is what denies ATTACH here);
/// - length limits lowered to what the data can need (`lengthMax`, `sqlLengthMax`);
/// - for a foreign file: untrusted schema, no triggers, no views, read-only, cell size checks,
///   and tables read only through `plainTable`, which refuses generated and hidden columns and
///   virtual tables (their expressions or modules would run as the rows are read).
///
/// No SQL text read from a file is ever executed: schema SQL is compared as data with what this
/// build's own migrations make. Identifiers not written literally in Logbook's source go
/// through `quote`. See docs/SECURITY.md, "SQLite".
package enum SQLiteFactory {
    /// Whose file a connection opens.
    public enum Trust: Sendable {
        /// A file Logbook writes. Triggers are allowed (the projection's FTS5 index needs them).
        case ours
        /// A file from elsewhere: read-only, untrusted schema, no triggers, no views.
        case foreign
    }

    /// The largest string or blob a connection takes: above the largest event record (4 MiB)
    /// with room for a row's clocks; the audit index keeps shortened values.
    public static let lengthMax = 32 << 20
    /// The longest SQL statement: Logbook's own statements are a few kilobytes at most.
    public static let sqlLengthMax = 1 << 20

    /// A GRDB configuration whose connections get the settings above (`base` is kept otherwise).
    public static func configuration(_ trust: Trust, _ base: Configuration = Configuration()) -> Configuration {
        var c = base
        if trust == .foreign { c.readonly = true }
        c.prepareDatabase { db in try harden(db, trust) }
        return c
    }

    /// Opens a queue on `path` (nil: a private in-memory database). `base` adds settings of the
    /// caller's own (busy mode, pragmas); the factory's are applied whatever it holds.
    public static func queue(_ path: String?, _ trust: Trust, _ base: Configuration = Configuration()) throws -> DatabaseQueue {
        let c = configuration(trust, base)
        if let path { return try DatabaseQueue(path: path, configuration: c) }
        return try DatabaseQueue(configuration: c)
    }

    /// Opens a pool (WAL) on a file of Logbook's own; `base` as for `queue`.
    public static func pool(_ path: String, _ base: Configuration = Configuration()) throws -> DatabasePool {
        try DatabasePool(path: path, configuration: configuration(.ours, base))
    }

    /// Applies the settings to an open connection.
    static func harden(_ db: Database, _ trust: Trust) throws {
        guard let connection = db.sqliteConnection else { throw DatabaseError(message: "no SQLite connection to harden") }
        let raw = UnsafeMutableRawPointer(connection)
        var rc = logbook_sqlite_guard(raw, trust == .ours ? 1 : 0)
        if rc == 0 { rc = logbook_sqlite_limits(raw, Int32(lengthMax), Int32(sqlLengthMax)) }
        guard rc == 0 else {
            throw DatabaseError(resultCode: ResultCode(rawValue: rc), message: "cannot harden the SQLite connection (defensive mode, untrusted schema, limits)")
        }
        if trust == .foreign { try db.execute(sql: "PRAGMA cell_size_check = ON") }
    }

    /// Writes a copy of the open database to `path` (`VACUUM INTO`, which SQLite runs by
    /// attaching the new file: allowed here for that one statement).
    public static func vacuum(_ db: Database, into path: String) throws {
        guard let connection = db.sqliteConnection else { throw DatabaseError(message: "no connection") }
        let raw = UnsafeMutableRawPointer(connection)
        let previous = logbook_sqlite_allow_attach(raw, 1)
        defer { _ = logbook_sqlite_allow_attach(raw, previous) }
        try db.execute(sql: "VACUUM INTO ?", arguments: [path])
    }

    /// The internal uses of ATTACH, each named: nothing else can attach a database.
    public enum AttachUse: String, Sendable {
        /// Building a projection from a checked snapshot (its tables' rows copied by name).
        case snapshotRows = "snap"
        /// Keeping a store's device-local settings when a snapshot replaces its projection.
        case previousProjection = "old"
    }

    /// Attaches `path` as the schema `use` names, runs `body`, and detaches it again. ATTACH is
    /// allowed for this one statement only (the limit goes back to 0 before `body` runs).
    public static func attaching<T>(_ db: Database, _ path: String, for use: AttachUse, _ body: (_ schema: String) throws -> T) throws -> T {
        guard let connection = db.sqliteConnection else { throw DatabaseError(message: "no connection") }
        let raw = UnsafeMutableRawPointer(connection)
        let previous = logbook_sqlite_allow_attach(raw, 1)
        do {
            try db.execute(sql: "ATTACH DATABASE ? AS \(use.rawValue)", arguments: [path])
        } catch {
            _ = logbook_sqlite_allow_attach(raw, previous)
            throw error
        }
        _ = logbook_sqlite_allow_attach(raw, previous)
        defer { try? db.execute(sql: "DETACH DATABASE \(use.rawValue)") }
        return try body(use.rawValue)
    }

    /// An SQL identifier, quoted: names that are not written literally in Logbook's source reach
    /// SQL only this way.
    public static func quote(_ name: String) -> String { "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }

    /// Checks that `table` of a foreign file is an ordinary table whose every column is stored
    /// as it is read: no virtual table, no generated column (its expression runs on read), no
    /// hidden column. Returns whether it exists.
    /// - Throws: `DatabaseError` naming the table and column.
    @discardableResult
    public static func plainTable(_ db: Database, _ table: String, file: String) throws -> Bool {
        // SQLite's own word on what the object is (not the schema's SQL text, which a crafted
        // file can spell in ways a text check misses).
        guard let type = try String.fetchOne(db, sql: "SELECT type FROM pragma_table_list WHERE schema = 'main' AND name = ?", arguments: [table]) else { return false }
        guard type == "table" else { throw refusal(file, "\(table) is a \(type == "view" ? "view" : type == "virtual" ? "virtual table" : "\(printable(type, limit: 20)) table"), not a table") }
        for c in try Row.fetchAll(db, sql: "SELECT name, hidden FROM pragma_table_xinfo(?)", arguments: [table]) {
            let hidden: Int64 = c[1] ?? 0
            if hidden != 0 {
                let what = hidden == 2 || hidden == 3 ? "a generated column" : "a hidden column"
                throw refusal(file, "column \(printable((c[0] as String?) ?? "?", limit: 60)) of table \(table) is \(what): its value would be computed as it is read")
            }
        }
        return true
    }

    private static func refusal(_ file: String, _ what: String) -> DatabaseError {
        DatabaseError(resultCode: .SQLITE_AUTH, message: "\(file): refused: \(what); nothing is read from it")
    }
}
