import Foundation
import GRDB

/// The persistent index of writer-supplied event ids (`<store>/eventids.sqlite`), so a retried
/// write is recognised without holding every id in memory.
///
/// Derived from the log and rebuilt from it: each origin's `ids_through` says how far the log has
/// been indexed, and opening catches up from there. `indexed_through` is the same seq, except for
/// the store's own origin, where it is the last seq its log is known to have committed, past ids
/// still owed, and past the log's end when a tail was lost or is still arriving (the evidence,
/// kept until the tail comes back). Stores of builds before `ids_through` have only
/// `indexed_through`, which then says both. Not thread-safe: owned by the writer.
final class EventIDIndex {
    private let db: DatabaseQueue
    private var inTransaction = false

    init(path: String) throws {
        var config = SQLiteFactory.configuration(.ours)
        config.allowsUnsafeTransactions = true
        // The previous writer's connection may be closing (its last close checkpoints the WAL).
        config.busyMode = .timeout(5)
        config.prepareDatabase { db in
            // The log is the truth; a lost index tail is rebuilt from it at open.
            try db.execute(sql: "PRAGMA synchronous = OFF")
        }
        do {
            db = try SQLiteFactory.queue(path, .ours, config)
            try db.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA journal_mode = WAL")
                try db.execute(sql: """
                    CREATE TABLE IF NOT EXISTS event_ids (id BLOB PRIMARY KEY, origin BLOB NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE IF NOT EXISTS indexed_through (origin BLOB PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE IF NOT EXISTS adopted_through (origin BLOB PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE IF NOT EXISTS ids_through (origin BLOB PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID;
                    """)
            }
        } catch {
            throw LogError(.io, "open event-id index", "\(error)", file: path,
                           hint: "the index is derived from the log: delete the file and reopen to rebuild it")
        }
    }

    /// Closes the file: the last connection's checkpoint happens now, while the writer still
    /// holds the store's lock, not later in another writer's way.
    func close() { try? db.close() }

    private func run<T>(_ op: String, _ body: (Database) throws -> T) throws -> T {
        do {
            return try db.writeWithoutTransaction(body)
        } catch let e as LogError {
            throw e
        } catch {
            throw LogError(.io, op, "event-id index: \(error)")
        }
    }

    /// How far `origin`'s ids are indexed (`ids`), and its mark (`mark`: the same, or, for the
    /// store's own origin, how far its log is known to have committed). A file of an older build
    /// holds the mark alone (`idsRecorded` false), which then says both; a mark below
    /// `ids_through` was moved down by such a build, and bounds it.
    func marks(_ origin: ReplicaID) throws -> (ids: Seq, mark: Seq, idsRecorded: Bool) {
        try run("read event-id index") { db in
            let o = blob(origin.rawValue)
            let mark = max(0, try Int64.fetchOne(db, sql: "SELECT seq FROM indexed_through WHERE origin = ?", arguments: [o]) ?? 0)
            let recorded = try Int64.fetchOne(db, sql: "SELECT seq FROM ids_through WHERE origin = ?", arguments: [o])
            let ids = max(0, recorded ?? mark)
            return (Seq(UInt64(min(ids, mark))), Seq(UInt64(mark)), recorded != nil)
        }
    }

    /// Where the event with this id is, if the log holds it.
    func lookup(_ id: UUID) throws -> (ReplicaID, Seq)? {
        try run("read event-id index") { db in
            guard let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT origin, seq FROM event_ids WHERE id = ?"), arguments: [blob(id)]) else { return nil }
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
        try failInsertIfAsked()
        try run("write event-id index") { db in
            try db.cachedStatement(sql: Self.insertSQL).execute(arguments: [blob(id), blob(origin.rawValue), Int64(seq.rawValue)])
        }
    }

    private static let insertSQL = "INSERT OR IGNORE INTO event_ids (id, origin, seq) VALUES (?, ?, ?)"

    /// `insert` of many ids of one origin, in one call to the database (a received page's).
    func insert(_ entries: [(UUID, Seq)], origin: ReplicaID) throws {
        precondition(inTransaction)
        guard !entries.isEmpty else { return }
        try failInsertIfAsked()
        try run("write event-id index") { db in
            let statement = try db.cachedStatement(sql: Self.insertSQL)
            let o = blob(origin.rawValue)
            for (id, seq) in entries { try statement.execute(arguments: [blob(id), o, Int64(seq.rawValue)]) }
        }
    }

    /// Records that `origin`'s ids are indexed through `seq`, and its mark at `seq` or at
    /// `evidence`, whichever is later (the store's own origin: the last seq its log is known to
    /// have committed, a lost or open tail's included, which the mark keeps as evidence without
    /// claiming their ids indexed).
    func setIndexedThrough(_ origin: ReplicaID, _ seq: Seq, evidence: Seq = Seq(0)) throws {
        precondition(inTransaction)
        try run("write event-id index") { db in
            let o = blob(origin.rawValue)
            // Written at every index commit (an append with ids): statements kept prepared.
            try db.cachedStatement(sql: "INSERT INTO ids_through (origin, seq) VALUES (?, ?) ON CONFLICT(origin) DO UPDATE SET seq = excluded.seq")
                .execute(arguments: [o, Int64(seq.rawValue)])
            try db.cachedStatement(sql: "INSERT INTO indexed_through (origin, seq) VALUES (?, ?) ON CONFLICT(origin) DO UPDATE SET seq = excluded.seq")
                .execute(arguments: [o, Int64(max(seq, evidence).rawValue)])
        }
    }

    /// Forgets ids past `tip` (their frames were cut off by recovery): the ids are indexed
    /// through `tip` at most. `keepingMark`: the mark stays where it is (the store's own
    /// origin: the mark past its log is the evidence that it lost a committed tail, kept until
    /// the tail comes back).
    func forget(after tip: Seq, origin: ReplicaID, keepingMark: Bool = false) throws {
        precondition(inTransaction)
        try run("write event-id index") { db in
            let o = blob(origin.rawValue), t = Int64(tip.rawValue)
            try db.execute(sql: "DELETE FROM event_ids WHERE origin = ? AND seq > ?", arguments: [o, t])
            // A file of an older build has no row here yet: its ids went as far as its mark.
            try db.execute(sql: """
                INSERT INTO ids_through (origin, seq) VALUES (?, ?)
                ON CONFLICT(origin) DO UPDATE SET seq = min(seq, excluded.seq)
                """, arguments: [o, t])
            guard !keepingMark else { return }
            try db.execute(sql: "UPDATE indexed_through SET seq = ? WHERE origin = ? AND seq > ?", arguments: [t, o, t])
        }
    }

    func commit() throws {
        precondition(inTransaction)
        if commitsToFail > 0 {
            commitsToFail -= 1
            throw LogError(.io, "write event-id index", "event-id index: the commit failed (a fault a test asked for)")
        }
        try run("write event-id index") { try $0.execute(sql: "COMMIT") }
        inTransaction = false
    }

    /// Tests only: how many of the next inserts fail as a refused write would (the transaction
    /// stays open, to be rolled back).
    var insertsToFail = 0

    private func failInsertIfAsked() throws {
        guard insertsToFail > 0 else { return }
        insertsToFail -= 1
        throw LogError(.io, "write event-id index", "event-id index: an insert failed (a fault a test asked for)")
    }

    /// Tests only: how many of the next commits fail as a full disk's would (the transaction
    /// stays open, to be rolled back), after the log's frames were made durable.
    var commitsToFail = 0

    func rollback() {
        guard inTransaction else { return }
        _ = try? db.writeWithoutTransaction { try $0.execute(sql: "ROLLBACK") }
        inTransaction = false
    }

    var isInTransaction: Bool { inTransaction }

    /// How far the ids of `origin`'s events before its floor were adopted (0 when never).
    func adoptedThrough(_ origin: ReplicaID) throws -> Seq {
        try run("read event-id index") { db in
            Seq(UInt64(max(0, try Int64.fetchOne(db, sql: "SELECT seq FROM adopted_through WHERE origin = ?", arguments: [blob(origin.rawValue)]) ?? 0)))
        }
    }

    /// Adds ids of `origin`'s events at or below `through` that no segment here holds (they lie
    /// before its floor), and records that they were adopted.
    func adopt(_ entries: [(UUID, Seq)], origin: ReplicaID, through: Seq) throws {
        precondition(!inTransaction)
        try run("adopt event ids") { db in
            try db.inTransaction {
                let o = blob(origin.rawValue)
                for (id, seq) in entries where seq.rawValue >= 1 && seq <= through {
                    try db.execute(sql: "INSERT OR IGNORE INTO event_ids (id, origin, seq) VALUES (?, ?, ?)", arguments: [blob(id), o, Int64(seq.rawValue)])
                }
                try db.execute(sql: "INSERT INTO adopted_through (origin, seq) VALUES (?, ?) ON CONFLICT(origin) DO UPDATE SET seq = excluded.seq",
                               arguments: [o, Int64(through.rawValue)])
                return .commit
            }
        }
    }

    /// Every indexed id, in id order, `batch` at a time.
    func forEach(batch: Int = 10_000, _ body: ([(UUID, ReplicaID, Seq)]) throws -> Void) throws {
        precondition(!inTransaction)
        var after = Data()
        while true {
            let rows = try run("read event-id index") { db in
                try Row.fetchAll(db, sql: "SELECT id, origin, seq FROM event_ids WHERE id > ? ORDER BY id LIMIT ?", arguments: [after, batch])
            }
            guard !rows.isEmpty else { return }
            var out: [(UUID, ReplicaID, Seq)] = []
            out.reserveCapacity(rows.count)
            for row in rows {
                guard let id = row[0] as Data?, id.count == 16, let o = row[1] as Data?, o.count == 16, let s = row[2] as Int64?, s >= 1 else {
                    throw LogError(.corrupt, "read event-id index", "a row of event_ids is malformed", hint: "the index is derived from the log: delete eventids.sqlite and reopen to rebuild it")
                }
                out.append((id.withUnsafeBytes { UUID(bytes: $0) }, ReplicaID(rawValue: o.withUnsafeBytes { UUID(bytes: $0) }), Seq(UInt64(s))))
                after = id
            }
            try body(out)
        }
    }
}

@inline(__always) private func blob(_ u: UUID) -> Data {
    withUnsafeBytes(of: u.uuid) { Data($0) }
}
