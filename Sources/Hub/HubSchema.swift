import EventLog
import LogbookServer
import Foundation
import Logging
import PostgresNIO

/// The hub's tables in PostgreSQL (docs/HUB.md, "Schema"), created and migrated by the first
/// node to start: nodes starting together take an advisory lock, so one migrates and the others
/// find it done.
enum HubSchema {
    /// The schema version this build writes. A database at a later version is refused (an older
    /// node must not write to a schema it does not know).
    static let version = 4
    /// `pg_advisory_xact_lock` key of migrations ("LBHUB" in ASCII).
    static let lockKey: Int64 = 0x4C42_4855_42

    /// What a principal's transaction may read of a share's row of `logbook_origins` or
    /// `logbook_frames` beyond what it reads by owner (`origins_read`, `frames_read`, unchanged):
    /// a row of one of the shares in `logbook.shares`, which the node sets with the readers, at the
    /// start of each transaction, to the shares a replica of one of the readers is a member of
    /// (`PostgresHub.transaction`). A second permissive policy with no subquery: rows of no share
    /// are judged by owner alone, as before. (A subquery in a read policy, as a CASE in one
    /// policy or as a second one, halved every read: hub-load 380 against 620 events/s.)
    static let sharedVisible = "(share = ANY (string_to_array(current_setting('logbook.shares', true), ',')::uuid[]))"

    /// The statements of each version, in order.
    static let migrations: [[String]] = [
        [
            """
            CREATE TABLE logbook_origins (
                origin uuid PRIMARY KEY,
                owner text NOT NULL CHECK (owner <> ''),
                claimed_by text NOT NULL,
                claimed_at timestamptz NOT NULL DEFAULT now(),
                committed_seq bigint NOT NULL DEFAULT 0 CHECK (committed_seq >= 0),
                held_seq bigint NOT NULL DEFAULT 0 CHECK (held_seq >= committed_seq),
                held_hlc bigint NOT NULL DEFAULT 0,
                held_hash bytea NOT NULL DEFAULT decode(repeat('00', 32), 'hex') CHECK (length(held_hash) = 32),
                UNIQUE (origin, owner)
            )
            """,
            """
            CREATE TABLE logbook_frames (
                origin uuid NOT NULL,
                first_seq bigint NOT NULL CHECK (first_seq >= 1),
                last_seq bigint NOT NULL,
                owner text NOT NULL,
                frame bytea NOT NULL,
                PRIMARY KEY (origin, first_seq),
                UNIQUE (origin, last_seq),
                CHECK (last_seq >= first_seq),
                FOREIGN KEY (origin, owner) REFERENCES logbook_origins (origin, owner)
            )
            """,
            "CREATE INDEX logbook_origins_owner ON logbook_origins (owner)",
            // Row-level security, forced so that it binds the tables' owner (the role the hub
            // connects as) too. No policy allows DELETE: frames are never removed by a node.
            "ALTER TABLE logbook_origins ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE logbook_origins FORCE ROW LEVEL SECURITY",
            "ALTER TABLE logbook_frames ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE logbook_frames FORCE ROW LEVEL SECURITY",
            """
            CREATE POLICY origins_read ON logbook_origins FOR SELECT
                USING (owner = ANY (string_to_array(current_setting('logbook.readers', true), ',')))
            """,
            """
            CREATE POLICY origins_claim ON logbook_origins FOR INSERT
                WITH CHECK (owner = current_setting('logbook.writer', true))
            """,
            """
            CREATE POLICY origins_advance ON logbook_origins FOR UPDATE
                USING (owner = current_setting('logbook.writer', true))
                WITH CHECK (owner = current_setting('logbook.writer', true))
            """,
            """
            CREATE POLICY frames_read ON logbook_frames FOR SELECT
                USING (owner = ANY (string_to_array(current_setting('logbook.readers', true), ',')))
            """,
            """
            CREATE POLICY frames_write ON logbook_frames FOR INSERT
                WITH CHECK (owner = current_setting('logbook.writer', true))
            """,
        ],
        // Shares (docs/SHARING.md, "Hubs"): a share's logs are read by the users of its
        // members, not by their owner's readers. Each origin and frame row says which share's log
        // it is (null: none), as the first push of the origin shows (an origin's kind derives from
        // its id); the share's logs and how far each is committed, its current members (from its
        // verified membership log) and which user each replica belongs to (the user that owns its
        // own log) are kept by the nodes as pushes arrive: ids and seqs only, no content. Rows of
        // no share are judged by their owner alone, as before (no lookup).
        [
            "ALTER TABLE logbook_origins ADD COLUMN share uuid",
            "ALTER TABLE logbook_frames ADD COLUMN share uuid",
            "CREATE INDEX logbook_origins_share ON logbook_origins (share) WHERE share IS NOT NULL",
            "CREATE TABLE logbook_share_logs (origin uuid PRIMARY KEY, share uuid NOT NULL, committed_seq bigint NOT NULL DEFAULT 0)",
            "CREATE TABLE logbook_share_members (share uuid NOT NULL, replica uuid NOT NULL, PRIMARY KEY (share, replica))",
            "CREATE INDEX logbook_share_members_replica ON logbook_share_members (replica)",
            "CREATE TABLE logbook_replica_users (replica uuid PRIMARY KEY, owner text NOT NULL CHECK (owner <> ''))",
            "CREATE INDEX logbook_replica_users_owner ON logbook_replica_users (owner)",
            // The replicas whose own logs the hub holds already: read with the table's row-level
            // security lifted for this statement only (the migration's transaction is all or nothing).
            "ALTER TABLE logbook_origins NO FORCE ROW LEVEL SECURITY",
            "INSERT INTO logbook_replica_users (replica, owner) SELECT origin, owner FROM logbook_origins ON CONFLICT DO NOTHING",
            "ALTER TABLE logbook_origins FORCE ROW LEVEL SECURITY",
            // Written out in each policy, not called as a function: a SQL function holding a
            // subquery is not inlined, and was called for every row read (half the throughput).
            """
            CREATE POLICY origins_read_shares ON logbook_origins FOR SELECT USING \(sharedVisible)
            """,
            """
            CREATE POLICY frames_read_shares ON logbook_frames FOR SELECT USING \(sharedVisible)
            """,
        ],
        // Purge (docs/SHARING.md, "Purge"): a deleted share's sealed logs are dropped by
        // `evctl purge --share --hub`, and their frames left out of later pushes. The only
        // policies that allow DELETE: rows of the one share named in `logbook.purging` (which
        // only the purge's transaction sets, after checking the admin's signed deletion) that
        // are recorded as purged and are not its membership log. A purged share's sealed log is
        // never claimed again (a restrictive policy: also against a node of an older build).
        [
            """
            CREATE TABLE logbook_purged_shares (
                share uuid PRIMARY KEY,
                membership_origin uuid NOT NULL,
                purged_at timestamptz NOT NULL DEFAULT now(),
                frames bigint NOT NULL,
                bytes bigint NOT NULL
            )
            """,
            """
            CREATE POLICY frames_purge ON logbook_frames FOR DELETE
                USING (share IS NOT NULL AND share::text = current_setting('logbook.purging', true)
                    AND EXISTS (SELECT 1 FROM logbook_purged_shares p WHERE p.share = logbook_frames.share AND p.membership_origin <> logbook_frames.origin))
            """,
            """
            CREATE POLICY origins_purge ON logbook_origins FOR DELETE
                USING (share IS NOT NULL AND share::text = current_setting('logbook.purging', true)
                    AND EXISTS (SELECT 1 FROM logbook_purged_shares p WHERE p.share = logbook_origins.share AND p.membership_origin <> logbook_origins.origin))
            """,
            """
            CREATE POLICY origins_not_purged ON logbook_origins AS RESTRICTIVE FOR INSERT
                WITH CHECK (share IS NULL
                    OR NOT EXISTS (SELECT 1 FROM logbook_purged_shares p WHERE p.share = logbook_origins.share AND p.membership_origin <> logbook_origins.origin))
            """,
        ],
        // A share's log is its writer's (docs/SHARING.md, "Hubs and snapshots"): another member
        // that pushed it first holds its row until the writer pushes it, and the row (with its
        // frames, by the cascade) is then handed to the writer's user. Only the one share log
        // named in `logbook.taking`, which a push's transaction sets once it found the log's
        // frames signed by a replica of its own user (verified before the transaction commits),
        // and only to that user. Compared as a uuid, so the primary key finds it.
        // The key is added `NOT VALID`: the rows held met the same key a statement before, and
        // checking them again would read the whole table under the migration's lock (the key
        // binds every row written or cascaded from now on all the same).
        [
            "ALTER TABLE logbook_frames DROP CONSTRAINT logbook_frames_origin_owner_fkey",
            """
            ALTER TABLE logbook_frames ADD CONSTRAINT logbook_frames_origin_owner_fkey
                FOREIGN KEY (origin, owner) REFERENCES logbook_origins (origin, owner) ON UPDATE CASCADE NOT VALID
            """,
            """
            CREATE POLICY origins_read_taking ON logbook_origins FOR SELECT
                USING (share IS NOT NULL AND origin = nullif(current_setting('logbook.taking', true), '')::uuid)
            """,
            """
            CREATE POLICY origins_take ON logbook_origins FOR UPDATE
                USING (share IS NOT NULL AND origin = nullif(current_setting('logbook.taking', true), '')::uuid)
                WITH CHECK (owner = current_setting('logbook.writer', true))
            """,
        ],
    ]

    /// One connection first, before a pool: a wrong address, user or password is named now (a
    /// pool would only keep retrying); and a role that row-level security would not bind is
    /// refused before it creates or touches anything.
    static func probe(_ database: HubDatabase, logger: Logger) async throws {
        do {
            let probe = try await PostgresConnection.connect(configuration: database.connectionConfiguration(), id: 0, logger: logger)
            do {
                try await checkRole(probe, logger: logger, database: database)
            } catch {
                try? await probe.close()
                throw error
            }
            try await probe.close()
        } catch let e as HubError {
            throw e
        } catch {
            throw HubError("cannot connect to the hub's database \(database): \(describe(error))")
        }
    }

    /// Runs `body` between BEGIN and COMMIT on `conn`, rolling back when it throws.
    static func inTransaction<T>(_ conn: PostgresConnection, logger: Logger, _ body: () async throws -> T) async throws -> T {
        try await conn.query("BEGIN", logger: logger)
        do {
            let r = try await body()
            try await conn.query("COMMIT", logger: logger)
            return r
        } catch {
            _ = try? await conn.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    /// Creates or migrates the schema; returns the hub's replica id (made with the schema).
    static func migrate(_ client: PostgresClient, logger: Logger, database: HubDatabase) async throws -> ReplicaID {
        do {
            return try await client.withConnection { conn in
                try await inTransaction(conn, logger: logger) {
                    try await conn.query("SELECT pg_advisory_xact_lock(\(lockKey))", logger: logger)
                    try await conn.query("CREATE TABLE IF NOT EXISTS logbook_hub (key text PRIMARY KEY, value text NOT NULL)", logger: logger)
                    var found = 0
                    var id: String?
                    for try await (key, value) in try await conn.query("SELECT key, value FROM logbook_hub", logger: logger).decode((String, String).self) {
                        if key == "schema_version" {
                            guard let v = Int(value), v >= 0 else { throw HubError("the hub's schema version \"\(value.prefix(20))\" in logbook_hub is not a number") }
                            found = v
                        }
                        if key == "hub_id" { id = value }
                    }
                    guard found <= version else {
                        throw HubError("the database's hub schema is version \(found), newer than this build's \(version): upgrade evctl on this node")
                    }
                    for v in found..<version {
                        for statement in migrations[v] { try await conn.query(PostgresQuery(unsafeSQL: statement), logger: logger) }
                    }
                    if id == nil {
                        let made = UUID().uuidString.lowercased()
                        try await conn.query("INSERT INTO logbook_hub (key, value) VALUES ('hub_id', \(made))", logger: logger)
                        id = made
                    }
                    try await conn.query("""
                        INSERT INTO logbook_hub (key, value) VALUES ('schema_version', \(String(version)))
                        ON CONFLICT (key) DO UPDATE SET value = excluded.value
                        """, logger: logger)
                    guard let id, let replica = ReplicaID(id) else { throw HubError("the hub id in logbook_hub is not a UUID") }
                    return replica
                }
            }
        } catch let e as HubError {
            throw e
        } catch {
            throw HubError("cannot set up the hub's schema in \(database): \(Self.describe(error))")
        }
    }

    /// The guarantees the hub relies on, checked at start instead of trusted: the role it
    /// connects as is bound by row-level security (not a superuser, no BYPASSRLS), and both
    /// tables have it enabled and forced (it then binds their owner, the hub's own role, too).
    static let protectedTables = ["logbook_origins", "logbook_frames"]

    /// Refuses a role that row-level security does not bind.
    static func checkRole(_ conn: PostgresConnection, logger: Logger, database: HubDatabase) async throws {
        var found = false
        for try await (name, superuser, bypass) in try await conn.query("SELECT rolname::text, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user", logger: logger)
            .decode((String, Bool, Bool).self) {
            found = true
            if superuser || bypass {
                throw HubError("the role \(printable(name, limit: 64)) the hub connects as to \(database) is \(superuser ? "a superuser" : "allowed to bypass row-level security (BYPASSRLS)"): row-level security would not bind it, and every user would be handed everyone's frames; connect as an ordinary role (scripts/pg-cluster.sh makes one, docs/HUB.md)")
            }
        }
        guard found else { throw HubError("the role the hub connects as to \(database) is not in pg_roles") }
    }

    /// Refuses tables whose row-level security is not enabled and forced.
    static func checkRowLevelSecurity(_ client: PostgresClient, logger: Logger, database: HubDatabase) async throws {
        var seen: Set<String> = []
        for try await (name, enabled, forced) in try await client.query("""
            SELECT c.relname::text, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c
            WHERE c.relname = ANY(\(protectedTables)) AND c.relnamespace = to_regnamespace(current_schema())::oid
            """, logger: logger).decode((String, Bool, Bool).self) {
            seen.insert(name)
            guard enabled && forced else {
                throw HubError("table \(name) in \(database) has row-level security \(enabled ? "enabled but not forced" : "disabled"): the hub relies on it to keep each user's frames from the others; restore it (ALTER TABLE \(name) ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY)")
            }
        }
        for t in protectedTables where !seen.contains(t) { throw HubError("table \(t) is missing from \(database)") }
    }

    /// A database error in a line (the server's message when there is one).
    static func describe(_ error: any Error) -> String {
        if let e = error as? PSQLError {
            if let m = e.serverInfo?[.message] { return m }
            if let u = e.underlying { return "\(e.code): \(u)" }
            return "\(e.code)"
        }
        return "\(error)"
    }
}
