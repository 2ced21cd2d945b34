import EventLog
import Foundation
import GRDB

/// What this store remembers of each peer it ships with (`<store>/peers.sqlite`; device-local,
/// never replicated): the peer's cursor as last seen, when it last synced, and the last error —
/// the seeds' sync_state. Safe to use from any thread (GRDB's queue serialises access).
public final class PeerState: Sendable {
    public struct Peer: Sendable, Equatable {
        public var name: String
        public var cursor: ReplicationCursor?
        public var lastSyncAt: String?
        public var lastError: String?
        public var pulledEvents: Int
        public var pushedEvents: Int
    }

    private let db: DatabaseQueue
    /// How long a write waits for another process's transaction on peers.sqlite.
    static let busyWaitSeconds: TimeInterval = 30

    /// Whether `store` has exchanged with any peer yet (its peers file exists).
    public static func exists(in store: Store) -> Bool { FileManager.default.fileExists(atPath: path(of: store)) }

    static func path(of store: Store) -> String { store.layout.peers }

    public init(store: Store) throws {
        // Several processes may sync the same store at once (two `evctl sync` runs, a server and a
        // client): each waits its turn for the file's lock instead of failing with SQLITE_BUSY.
        var config = SQLiteFactory.configuration(.ours)
        config.busyMode = .timeout(PeerState.busyWaitSeconds)
        db = try SQLiteFactory.queue(PeerState.path(of: store), .ours, config)
        // A file that has its table is only read here: reading the peers (`evctl status`) never
        // writes, so it works on a full disk or a read-only mount.
        if try db.read({ db in try db.tableExists("peers") }) { return }
        // Created inside an immediate transaction: two processes opening a new store's peers
        // file at once take turns (a migrator's check-then-create lets both try to create).
        try db.writeWithoutTransaction { db in
            try db.inTransaction(.immediate) {
                try db.execute(sql: """
                    CREATE TABLE IF NOT EXISTS peers (name TEXT PRIMARY KEY NOT NULL, cursor TEXT, last_sync_at TEXT, last_error TEXT,
                                                      pulled_events INTEGER NOT NULL DEFAULT 0, pushed_events INTEGER NOT NULL DEFAULT 0)
                    """)
                return .commit
            }
        }
    }

    /// Records a successful exchange with `name`. `cursor` is what the peer acknowledged holding
    /// (its own answer); nil keeps the cursor recorded before.
    /// - Parameters:
    ///   - error: what went wrong though the exchange went through (origins the peer refused and
    ///     this store kept, starting with `refusalPrefix`); nil clears the last error.
    ///   - keepRefusal: keep a last error that is such a note (an exchange that pushed nothing
    ///     says nothing of what the peer refuses).
    public func recordSuccess(_ name: String, cursor: ReplicationCursor?, pulled: Int, pushed: Int, error: String? = nil,
                              keepRefusal: Bool = false, at date: Date = Date()) throws {
        try db.write { db in
            try db.execute(sql: """
                INSERT INTO peers (name, cursor, last_sync_at, last_error, pulled_events, pushed_events) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT(name) DO UPDATE SET cursor = coalesce(excluded.cursor, cursor), last_sync_at = excluded.last_sync_at,
                  last_error = CASE WHEN ? AND excluded.last_error IS NULL AND substr(last_error, 1, length(?)) = ? THEN last_error ELSE excluded.last_error END,
                  pulled_events = pulled_events + excluded.pulled_events, pushed_events = pushed_events + excluded.pushed_events
                """, arguments: [name, cursor?.token, ISOTime.string(millis: UInt64(date.timeIntervalSince1970 * 1000)), error, pulled, pushed,
                                 keepRefusal, Self.refusalPrefix, Self.refusalPrefix])
        }
    }

    /// How a last error that notes origins the peer refused (the rest went through) begins.
    public static let refusalPrefix = "the peer refused to take: "

    /// Records a failed exchange with `name` (its cursor and last success are kept).
    public func recordFailure(_ name: String, error: String) throws {
        try db.write { db in
            try db.execute(sql: """
                INSERT INTO peers (name, last_error) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET last_error = excluded.last_error
                """, arguments: [name, error])
        }
    }

    /// The peers `store` records, read without writing anything (none when its file has no
    /// table yet): what `status` shows, also on a full disk or a read-only mount.
    public static func peers(of store: Store) throws -> [Peer] {
        guard exists(in: store) else { return [] }
        var config = SQLiteFactory.configuration(.ours)
        config.readonly = true
        config.busyMode = .timeout(PeerState.busyWaitSeconds)
        let q = try SQLiteFactory.queue(path(of: store), .ours, config)
        defer { try? q.close() }
        return try q.read { db in try db.tableExists("peers") ? try Self.peers(db) : [] }
    }

    public func peers() throws -> [Peer] {
        try db.read(Self.peers)
    }

    static func peers(_ db: Database) throws -> [Peer] {
        try Row.fetchAll(db, sql: "SELECT * FROM peers ORDER BY name").map { row in
            let token: String? = try row.decode(forColumn: "cursor")
            return Peer(name: try row.decode(forColumn: "name"), cursor: token.flatMap { try? ReplicationCursor(token: $0) },
                        lastSyncAt: try row.decode(forColumn: "last_sync_at"), lastError: try row.decode(forColumn: "last_error"),
                        pulledEvents: try row.decode(forColumn: "pulled_events"), pushedEvents: try row.decode(forColumn: "pushed_events"))
        }
    }
}
