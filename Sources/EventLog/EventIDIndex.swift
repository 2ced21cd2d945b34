import Foundation
import GRDB

/// The persistent index of writer-supplied event ids (`<store>/eventids.sqlite`), so a retried
/// write is recognised without holding every id in memory.
///
/// Derived from the log and rebuilt from it: each origin's `indexed_through` says how far the
/// log has been indexed, and opening catches up from there. Not thread-safe: owned by the writer.
final class EventIDIndex {
    private let db: DatabaseQueue
    private var inTransaction = false

    init(path: String) throws {
        var config = SQLiteGuard.configuration()
        config.allowsUnsafeTransactions = true
        config.prepareDatabase { db in
            // The log is the truth; a lost index tail is rebuilt from it at open.
            try db.execute(sql: "PRAGMA synchronous = OFF")
        }
        do {
            db = try DatabaseQueue(path: path, configuration: config)
            try db.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA journal_mode = WAL")
                try db.execute(sql: """
                    CREATE TABLE IF NOT EXISTS event_ids (id BLOB PRIMARY KEY, origin BLOB NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE IF NOT EXISTS indexed_through (origin BLOB PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID;
                    """)
            }
        } catch {
            throw LogError(.io, "open event-id index", "\(error)", file: path,
                           hint: "the index is derived from the log: delete the file and reopen to rebuild it")
        }
    }

    private func run<T>(_ op: String, _ body: (Database) throws -> T) throws -> T {
        do {
            return try db.writeWithoutTransaction(body)
        } catch let e as LogError {
            throw e
        } catch {
            throw LogError(.io, op, "event-id index: \(error)")
        }
    }

    func indexedThrough(_ origin: ReplicaID) throws -> Seq {
        try run("read event-id index") { db in
            Seq(UInt64(try Int64.fetchOne(db, sql: "SELECT seq FROM indexed_through WHERE origin = ?", arguments: [blob(origin.rawValue)]) ?? 0))
        }
    }

    /// Where the event with this id is, if the log holds it.
    func lookup(_ id: UUID) throws -> (ReplicaID, Seq)? {
        try run("read event-id index") { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT origin, seq FROM event_ids WHERE id = ?", arguments: [blob(id)]) else { return nil }
            let o: Data = row[0]
            let s: Int64 = row[1]
            return (ReplicaID(rawValue: o.withUnsafeBytes { UUID(bytes: $0) }), Seq(UInt64(s)))
        }
    }

    func begin() throws {
        precondition(!inTransaction, "event-id index transaction already open")
        try run("write event-id index") { try $0.execute(sql: "BEGIN IMMEDIATE") }
        inTransaction = true
    }

    func insert(_ id: UUID, origin: ReplicaID, seq: Seq) throws {
        precondition(inTransaction)
        try run("write event-id index") { db in
            try db.execute(sql: "INSERT OR IGNORE INTO event_ids (id, origin, seq) VALUES (?, ?, ?)",
                           arguments: [blob(id), blob(origin.rawValue), Int64(seq.rawValue)])
        }
    }

    func setIndexedThrough(_ origin: ReplicaID, _ seq: Seq) throws {
        precondition(inTransaction)
        try run("write event-id index") { db in
            try db.execute(sql: "INSERT INTO indexed_through (origin, seq) VALUES (?, ?) ON CONFLICT(origin) DO UPDATE SET seq = excluded.seq",
                           arguments: [blob(origin.rawValue), Int64(seq.rawValue)])
        }
    }

    /// Forgets ids past `tip` (their frames were cut off by recovery).
    func forget(after tip: Seq, origin: ReplicaID) throws {
        precondition(inTransaction)
        try run("write event-id index") { db in
            try db.execute(sql: "DELETE FROM event_ids WHERE origin = ? AND seq > ?", arguments: [blob(origin.rawValue), Int64(tip.rawValue)])
            try db.execute(sql: "UPDATE indexed_through SET seq = ? WHERE origin = ? AND seq > ?",
                           arguments: [Int64(tip.rawValue), blob(origin.rawValue), Int64(tip.rawValue)])
        }
    }

    func commit() throws {
        precondition(inTransaction)
        try run("write event-id index") { try $0.execute(sql: "COMMIT") }
        inTransaction = false
    }

    func rollback() {
        guard inTransaction else { return }
        _ = try? db.writeWithoutTransaction { try $0.execute(sql: "ROLLBACK") }
        inTransaction = false
    }

    var isInTransaction: Bool { inTransaction }

    /// The table a snapshot carries the ids in: the columns of `event_ids`.
    static let snapshotTable = "snapshot_event_ids"
    /// Its columns, as `CREATE TABLE snapshot_event_ids` gives them (snapshots are checked against it).
    static let snapshotTableColumns = "(id BLOB PRIMARY KEY, origin BLOB NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID"

    /// Copies every indexed id into `snapshot_event_ids` of the SQLite file at `path` (a snapshot
    /// being made), so a replica bootstrapped from it still recognises retries of events older
    /// than its log.
    func export(toSnapshot path: String) throws {
        precondition(!inTransaction)
        try run("export event ids to a snapshot") { db in
            try db.execute(sql: "ATTACH DATABASE ? AS snap", arguments: [path])
            defer { try? db.execute(sql: "DETACH DATABASE snap") }
            try db.inTransaction {
                try db.execute(sql: "CREATE TABLE snap.\(Self.snapshotTable) \(Self.snapshotTableColumns)")
                try db.execute(sql: "INSERT INTO snap.\(Self.snapshotTable) SELECT id, origin, seq FROM event_ids")
                return .commit
            }
        }
    }

    /// Adds the ids the snapshot at `path` carries for `origin` at or below `through` (the part
    /// of that origin's log this store does not hold, being past a floor). Returns false when the
    /// snapshot carries no ids (made before they were included).
    func adopt(fromSnapshot path: String, origin: ReplicaID, through: Seq) throws -> Bool {
        precondition(!inTransaction)
        return try run("adopt event ids from a snapshot") { db in
            try db.execute(sql: "ATTACH DATABASE ? AS snap", arguments: [path])
            defer { try? db.execute(sql: "DETACH DATABASE snap") }
            guard try Bool.fetchOne(db, sql: "SELECT count(*) > 0 FROM snap.sqlite_master WHERE name = ?", arguments: [Self.snapshotTable]) == true else {
                return false
            }
            try db.inTransaction {
                // Only well-formed rows: 16-byte ids, seqs in range (a snapshot is checked at install,
                // but the index must never hold a value that its readers cannot decode).
                try db.execute(sql: """
                    INSERT OR IGNORE INTO event_ids SELECT id, origin, seq FROM snap.\(Self.snapshotTable)
                    WHERE origin = ? AND typeof(id) = 'blob' AND length(id) = 16 AND typeof(seq) = 'integer' AND seq BETWEEN 1 AND ?
                    """, arguments: [blob(origin.rawValue), Int64(through.rawValue)])
                return .commit
            }
            return true
        }
    }
}

@inline(__always) private func blob(_ u: UUID) -> Data {
    withUnsafeBytes(of: u.uuid) { Data($0) }
}
