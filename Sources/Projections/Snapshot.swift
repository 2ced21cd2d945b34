import EventLog
import Foundation
import GRDB

/// A consistent copy of a store's projection and the log position it covers: the first half of
/// bootstrapping a replica whose cursor a peer can no longer serve. See docs/PROTOCOL.md, "Snapshot".
///
/// The file is an SQLite database made with `VACUUM INTO` from the projection (device-local
/// `app_settings` emptied), plus three tables: `snapshot_meta` (key, value: `format`, `replica_id`,
/// `created_at`), `snapshot_anchors` (origin, last_seq, last_hlc, last_hash): for each origin,
/// the end of the log the projection covers, with the hash of its last frame, so that frames
/// received after a bootstrap can be checked against the chain, and `snapshot_event_ids` (id,
/// origin, seq: the writer-supplied event ids), so retries of older events stay recognised.
public enum Snapshot {
    public static let formatVersion = 1

    /// What a snapshot covers.
    public struct Info: Sendable, Equatable {
        public var replicaID: ReplicaID
        public var anchors: [ReplicaID: LogTip]
        public var bytes: Int
    }

    /// Writes a snapshot of `projected` to `path` (temp file, fsync, rename). Taken with the
    /// writer open, so the log cannot move: the projection is caught up first and must then sit
    /// exactly at the end of every origin's log.
    public static func make(_ projected: ProjectedStore, to path: String) throws -> Info {
        let store = projected.store
        try projected.projection.catchUp()
        let reader = LogReader(store: store)
        var anchors: [ReplicaID: LogTip] = [:]
        // Shares' logs are left out: a store that holds no key of a share cannot project its
        // sealed log, and one that does must not hand its rows on. They are pulled whole, frame
        // by frame, never cut below a floor (a membership log read from its first record).
        var shareLogs = Set<ReplicaID>()
        for o in try store.origins() {
            if try ShareDirectory.isShareLog(store, origin: o) { shareLogs.insert(o); continue }
            let tip = try reader.tip(origin: o, hashing: true)
            if tip.lastSeq.rawValue > 0 { anchors[o] = tip }
        }
        let applied = try projected.projection.cursor().filter { $0.value.rawValue > 0 && !shareLogs.contains($0.key) }
        guard applied == anchors.mapValues(\.lastSeq) else {
            throw ProjectionError.database("the projection does not sit at the end of the log (run `evctl replay`); no snapshot written")
        }
        let tmp = path + ".tmp"
        try? FileManager.default.removeItem(atPath: tmp)
        do {
            let scoped = try projected.projection.pool.read { db in
                try db.tableExists("projection_scopes") && (try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM projection_scopes)") ?? false)
            }
            if scoped || !shareLogs.isEmpty {
                // Shares' rows are left out (below): stripped from a first copy, which is then
                // copied again, so no free page or index segment of the file keeps their values.
                let strip = path + ".strip"
                try? FileManager.default.removeItem(atPath: strip)
                defer { try? FileManager.default.removeItem(atPath: strip) }
                try projected.projection.pool.writeWithoutTransaction { db in try SQLiteFactory.vacuum(db, into: strip) }
                let copy = try SQLiteFactory.queue(strip, .ours)
                try copy.write { db in try stripShares(db, shareLogs: shareLogs, schema: projected.projection.schema) }
                try copy.writeWithoutTransaction { db in try SQLiteFactory.vacuum(db, into: tmp) }
                try copy.close()
            } else {
                try projected.projection.pool.writeWithoutTransaction { db in
                    try SQLiteFactory.vacuum(db, into: tmp)
                }
            }
            let queue = try SQLiteFactory.queue(tmp, .ours)
            try queue.write { db in
                try db.execute(sql: "DELETE FROM app_settings")
                for sql in SnapshotSchema.snapshotTablesSQL { try db.execute(sql: sql) }
                for (k, v) in [("format", String(formatVersion)), ("replica_id", store.replicaID.description),
                               ("created_at", ISO8601DateFormatter().string(from: Date()))] {
                    try db.execute(sql: "INSERT INTO snapshot_meta (key, value) VALUES (?, ?)", arguments: [k, v])
                }
                for (o, t) in anchors {
                    try db.execute(sql: "INSERT INTO snapshot_anchors VALUES (?, ?, ?, ?)",
                                   arguments: [o.description, Int64(t.lastSeq.rawValue), Int64(bitPattern: t.lastHLC.rawValue), Data(t.lastHash.bytes)])
                }
            }
            try queue.write { db in
                try db.execute(sql: SnapshotSchema.eventIDsTableSQL)
                let insert = try db.makeStatement(sql: "INSERT INTO \(eventIDsTable) (id, origin, seq) VALUES (?, ?, ?)")
                try projected.appender.forEachEventID { batch in
                    for (id, o, seq) in batch { try insert.execute(arguments: [blob(id), blob(o.rawValue), Int64(seq.rawValue)]) }
                }
            }
            try queue.close()
            try DurableFile.publish(tmp, as: path, op: "snapshot")
        } catch {
            try? FileManager.default.removeItem(atPath: tmp)
            throw error
        }
        let bytes = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        return Info(replicaID: store.replicaID, anchors: anchors, bytes: bytes)
    }

    /// Leaves shares out of a copy of a projection: the cursor rows of their logs (whoever
    /// installs the snapshot applies those afresh, from their first record), the rows they made
    /// (`projection_scopes`: a member makes them again from the share's logs, anyone else never
    /// holds them; docs/PROJECTION.md, "Shares"), and what names those rows or logs (conflicts,
    /// anomalies, event ids, purge states); the full-text index is made again from what is left.
    static func stripShares(_ db: Database, shareLogs: Set<ReplicaID>, schema: ProjectionSchema) throws {
        for o in shareLogs {
            try db.execute(sql: "DELETE FROM projection_cursor WHERE origin = ?", arguments: [o.description])
            try db.execute(sql: "DELETE FROM projection_event_ids WHERE origin = ?", arguments: [o.description])
        }
        guard try db.tableExists("projection_scopes") else { return }
        for t in schema.tables {
            try db.execute(sql: "DELETE FROM \(t.name) WHERE id IN (SELECT id FROM projection_scopes WHERE tbl = ?)", arguments: [t.name])
        }
        try db.execute(sql: "DELETE FROM projection_purged WHERE EXISTS (SELECT 1 FROM projection_scopes s WHERE s.tbl = projection_purged.tbl AND s.id = projection_purged.id)")
        try db.execute(sql: "DELETE FROM conflicts WHERE entity_id IN (SELECT id FROM projection_scopes)")
        try db.execute(sql: "DELETE FROM sync_anomalies WHERE entity_id IN (SELECT id FROM projection_scopes) OR item_id IN (SELECT id FROM projection_scopes)")
        try db.execute(sql: "DELETE FROM projection_scopes")
        try db.execute(sql: "INSERT INTO items_fts(items_fts) VALUES ('rebuild')")
    }

    /// Reads what a snapshot file covers, after checking it is one: its schema, compared as
    /// data with the one this build makes (nothing of the file is executed), the types of every
    /// value its rows hold, and its size against what its anchors can need.
    /// - Throws: `ProjectionError` naming the file and what is missing, foreign or malformed.
    public static func read(_ path: String) throws -> Info {
        guard FileManager.default.fileExists(atPath: path) else { throw ProjectionError.database("\(path): no such snapshot") }
        let queue = try SnapshotSchema.openUntrusted(path)
        defer { try? queue.close() }
        let info = try queue.read { db -> Info in
            try SnapshotSchema.check(db, path: path)
            let meta = try Dictionary(Row.fetchAll(db, sql: "SELECT key, value FROM snapshot_meta").map { (row: Row) -> (String, String) in
                (SnapshotSchema.text(row[0]) ?? "", SnapshotSchema.text(row[1]) ?? "")
            }, uniquingKeysWith: { a, _ in a })
            guard meta["format"] == String(formatVersion) else {
                throw ProjectionError.database("\(path): snapshot format \(meta["format"].map { printable($0, limit: 20) } ?? "missing") is not supported (this build reads \(formatVersion))")
            }
            guard let idText = meta["replica_id"], let id = ReplicaID(idText) else { throw ProjectionError.database("\(path): snapshot_meta.replica_id is missing or not a UUID") }
            var anchors: [ReplicaID: LogTip] = [:]
            for (i, row) in try Row.fetchAll(db, sql: "SELECT origin, last_seq, last_hlc, last_hash FROM snapshot_anchors").enumerated() {
                guard let text = SnapshotSchema.text(row[0]), let o = ReplicaID(text), o.description == text,
                      let seq = try row.decode(Int64?.self, atIndex: 1), Seq.isValid(UInt64(max(0, seq))),
                      let hlc = try row.decode(Int64?.self, atIndex: 2), let hash = SnapshotSchema.blob(row[3]), hash.count == 32 else {
                    throw ProjectionError.database("\(path): snapshot_anchors row \(i + 1) is malformed")
                }
                anchors[o] = LogTip(lastSeq: Seq(UInt64(seq)), lastHLC: HLC(rawValue: UInt64(bitPattern: hlc)), lastHash: FrameHash(bytes: Array(hash)))
            }
            // The rows must cover exactly the log the anchors name: a projection cursor past an
            // anchor would make the receiver skip those events when they arrive (it would think
            // it had applied them), one short of it would apply them twice.
            var applied: [ReplicaID: Seq] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT origin, last_seq FROM projection_cursor") {
                guard let text = SnapshotSchema.text(row[0]), let o = ReplicaID(text), let seq = try row.decode(Int64?.self, atIndex: 1), seq >= 0 else {
                    throw ProjectionError.database("\(path): projection_cursor holds a malformed row")
                }
                if seq > 0 { applied[o] = Seq(UInt64(seq)) }
            }
            guard applied == anchors.mapValues(\.lastSeq) else {
                let o = Set(applied.keys).union(anchors.keys).sorted().first { applied[$0] != anchors[$0]?.lastSeq }!
                throw ProjectionError.invalid("\(path): refused: its rows cover origin \(o) through seq \(applied[o] ?? Seq(0)), its anchors through \(anchors[o]?.lastSeq ?? Seq(0)); nothing was installed")
            }
            return Info(replicaID: id, anchors: anchors, bytes: 0)
        }
        let bytes = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        let limit = bytesMax(events: Seq.total(info.anchors.values.lazy.map(\.lastSeq.rawValue)))
        guard bytes <= limit else {
            throw ProjectionError.invalid("\(path): the snapshot is \(bytes) bytes, more than the \(limit) its \(info.anchors.count) origins' events can need; refused")
        }
        return Info(replicaID: info.replicaID, anchors: info.anchors, bytes: bytes)
    }

    /// The most bytes a snapshot covering `events` events may have: a fixed allowance plus a
    /// generous amount per event, never more than `absoluteBytesMax`. See docs/SECURITY.md.
    public static func bytesMax(events: UInt64) -> Int {
        let perEvent = UInt64(bytesPerEventMax)
        let (scaled, o1) = events.multipliedReportingOverflow(by: perEvent)
        let (sum, o2) = scaled.addingReportingOverflow(UInt64(baseBytesMax))
        if o1 || o2 || sum > UInt64(absoluteBytesMax) { return absoluteBytesMax }
        return Int(sum)
    }
    public static let baseBytesMax = 256 << 20
    public static let bytesPerEventMax = 16 << 10
    /// `LOGBOOK_SNAPSHOT_BYTES_MAX` in the environment sets it; 16 GiB by default.
    public static let absoluteBytesMax: Int = {
        if let v = ProcessInfo.processInfo.environment["LOGBOOK_SNAPSHOT_BYTES_MAX"], let n = Int(v), n > 0 { return n }
        return 16 << 30
    }()
}

/// The snapshot a store keeps (`<store>/snapshot.sqlite`): what its logs' floors start after,
/// once it was bootstrapped from a peer's snapshot or compacted. Rebuilds of the projection and
/// of the event-id index start from it. Only `Snapshot` reads or writes this file: it is made
/// here (`keep`), installed here (`install`), and its event ids are handed to the log's writer
/// here (`LogAppender.opening`), so the log never opens an SQLite file that came from a peer.
extension Snapshot {
    /// Where `store` keeps its snapshot.
    public static func keptPath(of store: Store) -> String { store.layout.snapshot }

    /// The table of writer-supplied event ids in a snapshot.
    static let eventIDsTable = "snapshot_event_ids"
    static let eventIDsColumns = "(id BLOB PRIMARY KEY, origin BLOB NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID"

    /// Makes the snapshot `store` keeps from its projection (before compacting: the events
    /// removed stay in it). The writer of `projected` is open, so the log cannot move.
    @discardableResult
    public static func keep(_ projected: ProjectedStore) throws -> Info {
        try make(projected, to: keptPath(of: projected.store))
    }

    /// The writer-supplied ids a snapshot carries for `origin` at or below `through`. Read on a
    /// hardened connection; a malformed row is an error naming it, never a value.
    /// nil when the snapshot carries no ids (made by an older build).
    static func eventIDs(in path: String, origin: ReplicaID, through: Seq) throws -> [(UUID, Seq)]? {
        let queue = try SnapshotSchema.openUntrusted(path)
        defer { try? queue.close() }
        return try queue.read { db in
            guard try Bool.fetchOne(db, sql: "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?", arguments: [eventIDsTable]) == true else {
                return nil  // a snapshot made before ids were carried
            }
            var out: [(UUID, Seq)] = []
            let rows = try Row.fetchCursor(db, sql: "SELECT id, seq FROM \(eventIDsTable) WHERE origin = ? AND seq <= ?",
                                           arguments: [blob(origin.rawValue), Int64(through.rawValue)])
            var n = 0
            while let row = try rows.next() {
                n += 1
                guard let id = SnapshotSchema.blob(row[0]), id.count == 16, let seq = try row.decode(Int64?.self, atIndex: 1), seq >= 1 else {
                    throw ProjectionError.database("\(path): \(eventIDsTable) row \(n) of origin \(origin) is malformed")
                }
                out.append((id.withUnsafeBytes { UUID(bytes: $0) }, Seq(UInt64(seq))))
            }
            return out
        }
    }

    /// Hands `appender` the ids of events before its logs' floors that its event-id index lacks,
    /// from the snapshot the store keeps. Without a kept snapshot they stay missing (reported).
    static func restoreEventIDs(into appender: LogAppender, store: Store) throws {
        let kept = keptPath(of: store)
        for (origin, through) in appender.eventIDsMissingBeforeFloor.sorted(by: { $0.key < $1.key }) where FileManager.default.fileExists(atPath: kept) {
            if let ids = try eventIDs(in: kept, origin: origin, through: through) {
                try appender.adoptEventIDs(ids, origin: origin, through: through)
            } else {
                // Nothing more can be learned: reported by this open, not looked for again.
                try appender.adoptEventIDs([], origin: origin, through: through, complete: false)
            }
        }
    }
}

extension LogAppender {
    /// Opens the writer of `store` (see `LogAppender.init`), and takes in the event ids the
    /// snapshot it keeps carries for events before its logs' floors. Every writer Logbook opens
    /// outside EventLog's tests is opened this way.
    public static func opening(_ store: Store, wallClock: any WallClock = SystemWallClock(), options: AppendOptions = AppendOptions()) throws -> LogAppender {
        let appender = try LogAppender(store: store, wallClock: wallClock, options: options)
        do {
            try Snapshot.restoreEventIDs(into: appender, store: store)
        } catch {
            try? appender.close()
            throw error
        }
        return appender
    }
}

extension Snapshot {

    /// Bootstraps `store` from a snapshot: each origin the store holds nothing of gets a floor at
    /// the snapshot's anchor (its log will start right after it, linked to the anchor's hash), the
    /// projection is replaced by the snapshot's (this store's app_settings kept), and the snapshot
    /// is kept for rebuilds. Events the store holds past the snapshot are projected at the next
    /// catch-up. Takes the writer lock; no projection of `store` may be open in this process.
    /// - Throws: when the store already holds part of an origin's log that the snapshot covers
    ///   further (its log cannot have a gap), or holds less of its own log than the snapshot.
    @discardableResult
    public static func install(_ path: String, into store: Store, lockWait: Double = 2) throws -> Info {
        let info = try read(path)
        let appender = try retryingWhileLocked(upTo: lockWait) { try LogAppender.opening(store) }
        defer { try? appender.close() }
        let reader = LogReader(store: store)
        var floors: [(ReplicaID, LogTip)] = []
        for (o, anchor) in info.anchors.sorted(by: { $0.key < $1.key }) {
            let mine = try reader.tip(origin: o, hashing: false).lastSeq
            if o == store.replicaID {
                guard mine >= anchor.lastSeq else {
                    throw ProjectionError.invalid("the snapshot holds this replica's own log through seq \(anchor.lastSeq), the store only through \(mine); refusing to bootstrap")
                }
                continue
            }
            if mine >= anchor.lastSeq { continue }
            guard mine.rawValue == 0 else {
                throw ProjectionError.invalid("this store holds origin \(o) through seq \(mine) and the snapshot through \(anchor.lastSeq); a bootstrap needs a store without that origin's log (pull from a peer that still holds it instead)")
            }
            floors.append((o, anchor))
        }
        // The snapshot, kept for rebuilds, then the projection built from it, then the floors.
        let kept = keptPath(of: store)
        try copyDurably(path, to: kept)
        let target = Projection.path(for: store)
        let temp = target + ".bootstrap"
        for s in [""] + StoreLayout.sqliteSidecarSuffixes { try? FileManager.default.removeItem(atPath: temp + s) }
        let queue = try copyAsProjection(kept, to: temp, checked: true)  // a copy of the file `read` checked above
        try queue.writeWithoutTransaction { db in
            if FileManager.default.fileExists(atPath: target) {
                // This store's own projection file: its device-local settings stay.
                try SQLiteFactory.attaching(db, target, for: .previousProjection) { old in
                    if try Bool.fetchOne(db, sql: "SELECT count(*) > 0 FROM \(old).sqlite_master WHERE type = 'table' AND name = 'app_settings'") == true {
                        try db.execute(sql: "INSERT OR REPLACE INTO main.app_settings (key, value) SELECT key, value FROM \(old).app_settings")
                    }
                }
            }
        }
        try queue.close()
        try Projection.swapIn(temp, over: target)
        for (o, anchor) in floors {
            do { try store.writeFloor(anchor, origin: o) } catch { throw ProjectionError.database("cannot write the floor of origin \(o): \(error)") }
            if let ids = try eventIDs(in: kept, origin: o, through: anchor.lastSeq) {
                try appender.adoptEventIDs(ids, origin: o, through: anchor.lastSeq)
            }  // else the next writer to open reports what is missing
        }
        return info
    }

    /// Makes a new projection file at `to` from a snapshot: the tables are created by this
    /// build's own migrations, and only the rows of the snapshot's tables are copied in (by
    /// column names this build knows, quoted), after `read`'s checks. Nothing of the snapshot's
    /// schema (no index, trigger or view) reaches the new file. Returns it open for more changes.
    /// - Parameter checked: `from` was just checked by `read` (a second full scan is skipped).
    static func copyAsProjection(_ from: String, to: String, checked: Bool = false) throws -> DatabaseQueue {
        if !checked { _ = try read(from) }
        // The snapshot's own schema (an older build's is copied as far as it goes).
        let snapshotSchema: SnapshotSchema.Reference
        do {
            let untrusted = try SnapshotSchema.openUntrusted(from)
            defer { try? untrusted.close() }
            snapshotSchema = try untrusted.read { db in
                try SnapshotSchema.reference(migrations: try SnapshotSchema.migrationCount(db, path: from)).get()
            }
        }
        for s in [""] + StoreLayout.sqliteSidecarSuffixes { try? FileManager.default.removeItem(atPath: to + s) }
        let queue = try Projection.openRebuildQueue(to, schema: .current)
        do {
            try queue.writeWithoutTransaction { db in
                try SQLiteFactory.attaching(db, from, for: .snapshotRows) { snap in
                    try db.inTransaction {
                        for (table, columns) in try SnapshotSchema.copiedTables(from: snapshotSchema) {
                            let list = columns.map(SnapshotSchema.quote).joined(separator: ", ")
                            let name = SnapshotSchema.quote(table)
                            try db.execute(sql: "INSERT INTO main.\(name) (\(list)) SELECT \(list) FROM \(snap).\(name)")
                        }
                        return .commit
                    }
                }
            }
            try queue.writeWithoutTransaction { db in _ = try db.execute(sql: "PRAGMA journal_mode = WAL") }
        } catch {
            try? queue.close()
            throw ProjectionError.database("cannot build a projection from the snapshot \(from): \(error)")
        }
        return queue
    }

    static func copyDurably(_ from: String, to: String) throws {
        let tmp = to + ".tmp"
        try? FileManager.default.removeItem(atPath: tmp)
        do { try FileManager.default.copyItem(atPath: from, toPath: tmp) } catch {
            throw ProjectionError.database("cannot copy \(from) to \(tmp): \(error)")
        }
        try DurableFile.publish(tmp, as: to, op: "copy snapshot")
    }
}

extension Projection {
    /// For a store whose logs start past a floor: a new projection file at `path` seeded from the
    /// snapshot the store was bootstrapped from (the log alone no longer holds everything).
    /// Returns false when no origin has a floor (start empty).
    static func seedFromSnapshot(_ store: Store, at path: String) throws -> Bool {
        let reader = LogReader(store: store)
        guard try store.origins().contains(where: { try reader.floor(origin: $0) != nil }) else { return false }
        let kept = Snapshot.keptPath(of: store)
        guard FileManager.default.fileExists(atPath: kept) else {
            throw ProjectionError.database("this store's log starts after a snapshot, and the snapshot (\(kept)) is missing: a rebuild cannot recreate what came before it")
        }
        try Snapshot.copyAsProjection(kept, to: path).close()
        return true
    }
}

@inline(__always) private func blob(_ u: UUID) -> Data {
    withUnsafeBytes(of: u.uuid) { Data($0) }
}
