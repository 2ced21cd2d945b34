import EventLog
import Foundation
import Logging
import NIOCore
import PostgresNIO

/// What `PostgresHub.purgeShare` dropped.
public struct HubSharePurge: Sendable, Equatable {
    /// Sealed logs dropped.
    public var logs = 0
    /// Frames and bytes of ciphertext deleted.
    public var frames = 0
    public var bytes = 0
    /// The share was purged before (nothing was left to drop).
    public var alreadyPurged = false
}

extension PostgresHub {
    /// `evctl purge --share SHARE --hub …` (docs/SHARING.md, "Purge"): deletes the frames and
    /// origin rows of deleted `share`'s sealed logs from the hub's database and records the purge
    /// (`logbook_purged_shares`), so that every node leaves those logs' frames out of later pushes.
    /// The membership log stays: it carries the deletion to members that have not synced it.
    ///
    /// Refused unless the hub holds the share's membership log, committed, whose first record
    /// proves the share and which holds a `delete` record (every frame of it was verified, signed
    /// by the admin's key, when pushed): a node's operator cannot drop a live share's logs by
    /// this command. One transaction: all of it or nothing. The deleted rows' space is reclaimed
    /// by a `VACUUM` of both tables afterwards (freed to PostgreSQL, not overwritten on disk).
    public static func purgeShare(_ share: ShareID, in database: HubDatabase, logger: Logger) async throws -> HubSharePurge {
        try await HubSchema.probe(database, logger: logger)
        let client = PostgresClient(configuration: database.configuration(), backgroundLogger: logger)
        let running = Task { await client.run() }
        defer { running.cancel() }
        _ = try await HubSchema.migrate(client, logger: logger, database: database)
        try await HubSchema.checkRowLevelSecurity(client, logger: logger, database: database)
        let result: HubSharePurge
        do {
            result = try await client.withConnection { conn in
                try await HubSchema.inTransaction(conn, logger: logger) { try await purge(share, conn, logger: logger) }
            }
        } catch let e as HubError {
            throw e
        } catch {
            throw HubError("purging share \(share) from \(database) failed, nothing was removed: \(HubSchema.describe(error))")
        }
        if result.frames > 0 {
            for table in ["logbook_frames", "logbook_origins"] {
                do { try await client.query(PostgresQuery(unsafeSQL: "VACUUM " + table), logger: logger) } catch {
                    logger.warning("purge: VACUUM \(table) failed (\(HubSchema.describe(error))); the rows are deleted, their space is reclaimed by autovacuum")
                }
            }
        }
        return result
    }

    private static func purge(_ share: ShareID, _ conn: PostgresConnection, logger: Logger) async throws -> HubSharePurge {
        let id = share.description
        // Pushes wait for the purge (and it for them): a push that read "not purged" before it
        // commits cannot claim a purged log after (the claim's statement sees the purge).
        try await conn.query("LOCK TABLE logbook_origins IN SHARE ROW EXCLUSIVE MODE", logger: logger)
        // The share's rows are visible to this transaction (its read policy), and deletable (its
        // purge policy); nothing else is.
        try await conn.query("""
            SELECT set_config('logbook.readers', '', true), set_config('logbook.writer', '', true),
                set_config('logbook.shares', \(id), true), set_config('logbook.purging', \(id), true)
            """, logger: logger)
        // The membership log: of the share's logs, one whose frames are not sealed and whose
        // first record proves the share (anyone may push a log claiming to be it, under a key
        // of their own: it proves nothing, and is not taken for it).
        var candidates: [(origin: ReplicaID, committed: Int64)] = []
        var sealed: [ReplicaID] = []
        let first = try await conn.query("""
            SELECT o.origin, o.committed_seq, f.frame FROM logbook_origins o JOIN logbook_frames f ON f.origin = o.origin AND f.first_seq = 1
            WHERE o.share = \(share.rawValue)
            """, logger: logger)
        for try await (origin, committed, frame) in first.decode((UUID, Int64, ByteBuffer).self) {
            let bytes = Array(frame.readableBytesView)
            guard let h = FrameHeader(parsing: bytes), h.shared, FrameInspector.share(of: bytes) == share else { continue }
            if h.sealed { sealed.append(ReplicaID(rawValue: origin)) } else { candidates.append((ReplicaID(rawValue: origin), committed)) }
        }
        var purgedBefore = false
        for try await _ in try await conn.query("SELECT 1 FROM logbook_purged_shares WHERE share = \(share.rawValue)", logger: logger).decode(Int.self) {
            purgedBefore = true
        }
        guard !candidates.isEmpty else {
            throw HubError("the hub holds no membership log of share \(share): nothing was removed (a share is purged once its admin's deletion reached the hub)")
        }
        var found: (origin: ReplicaID, state: ShareState)?
        for candidate in candidates.sorted(by: { $0.origin < $1.origin }) {
            var events: [Event] = []
            let rows = try await conn.query("""
                SELECT frame FROM logbook_frames WHERE origin = \(candidate.origin.rawValue) AND last_seq <= \(candidate.committed) ORDER BY first_seq
                """, logger: logger)
            var whole = true
            for try await frame in rows.decode(ByteBuffer.self) {
                guard whole, let (_, e) = try? frame.withUnsafeReadableBytes({ try FrameInspector.eventsUnlessSealed(in: $0) }) else {
                    whole = false  // read to the end (the rows must be drained)
                    continue
                }
                events += e
            }
            if found == nil, whole, let state = ShareDirectory.state(share: share, origin: candidate.origin, events: events) { found = (candidate.origin, state) }
        }
        guard let (membershipOrigin, state) = found else {
            throw HubError("no membership log of share \(share) here proves the share (its first record is not the admin's create, or a frame does not read): nothing was removed")
        }
        guard state.deleted else {
            throw HubError("share \(share) is not deleted: only a share its admin deleted is purged, and nothing was removed (its admin deletes it with `evctl share delete`; the deletion reaches the hub by a push)")
        }
        var result = HubSharePurge()
        result.alreadyPurged = purgedBefore && sealed.isEmpty
        let counts = try await conn.query("""
            SELECT count(*)::bigint, coalesce(sum(length(frame)), 0)::bigint FROM logbook_frames WHERE share = \(share.rawValue) AND origin <> \(membershipOrigin.rawValue)
            """, logger: logger)
        for try await (n, bytes) in counts.decode((Int64, Int64).self) {
            result.frames = Int(n)
            result.bytes = Int(bytes)
        }
        try await conn.query("""
            INSERT INTO logbook_purged_shares (share, membership_origin, frames, bytes)
            VALUES (\(share.rawValue), \(membershipOrigin.rawValue), \(Int64(result.frames)), \(Int64(result.bytes)))
            ON CONFLICT (share) DO UPDATE SET purged_at = now(), frames = logbook_purged_shares.frames + excluded.frames,
                bytes = logbook_purged_shares.bytes + excluded.bytes
            """, logger: logger)
        try await conn.query("DELETE FROM logbook_frames WHERE share = \(share.rawValue) AND origin <> \(membershipOrigin.rawValue)", logger: logger)
        let gone = try await conn.query("""
            DELETE FROM logbook_origins WHERE share = \(share.rawValue) AND origin <> \(membershipOrigin.rawValue) RETURNING origin
            """, logger: logger)
        for try await _ in gone.decode(UUID.self) { result.logs += 1 }
        try await conn.query("DELETE FROM logbook_share_logs WHERE share = \(share.rawValue) AND origin <> \(membershipOrigin.rawValue)", logger: logger)
        return result
    }

    /// Whether `share` was purged from this hub: its sealed logs' frames are left out of pushes.
    static func isPurged(_ share: ShareID, _ conn: PostgresConnection, logger: Logger) async throws -> Bool {
        var found = false
        for try await _ in try await conn.query("SELECT 1 FROM logbook_purged_shares WHERE share = \(share.rawValue)", logger: logger).decode(Int.self) {
            found = true
        }
        return found
    }
}
