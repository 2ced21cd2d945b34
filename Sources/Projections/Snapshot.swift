import EventLog
import Foundation
import GRDB

/// A consistent copy of a store's projection and the log position it covers: the first half of
/// bootstrapping a replica whose cursor a peer can no longer serve. See docs/PROTOCOL.md, "Snapshot".
///
/// The file is an SQLite database made with `VACUUM INTO` from the projection (device-local
/// `app_settings` emptied), plus two tables: `snapshot_meta` (key, value: `format`, `replica_id`,
/// `created_at`) and `snapshot_anchors` (origin, last_seq, last_hlc, last_hash): for each origin,
/// the end of the log the projection covers, with the hash of its last frame, so that frames
/// received after a bootstrap can be checked against the chain.
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
        for o in try store.origins() {
            let tip = try reader.tip(origin: o, hashing: true)
            if tip.lastSeq.rawValue > 0 { anchors[o] = tip }
        }
        let applied = try projected.projection.cursor().filter { $0.value.rawValue > 0 }
        guard applied == anchors.mapValues(\.lastSeq) else {
            throw ProjectionError.database("the projection does not sit at the end of the log (run `evctl replay`); no snapshot written")
        }
        let tmp = path + ".tmp"
        try? FileManager.default.removeItem(atPath: tmp)
        do {
            try projected.projection.pool.writeWithoutTransaction { db in
                try db.execute(sql: "VACUUM INTO ?", arguments: [tmp])
            }
            let queue = try DatabaseQueue(path: tmp)
            try queue.write { db in
                try db.execute(sql: "DELETE FROM app_settings")
                try db.execute(sql: "CREATE TABLE snapshot_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                try db.execute(sql: "CREATE TABLE snapshot_anchors (origin TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, last_hlc INTEGER NOT NULL, last_hash BLOB NOT NULL)")
                for (k, v) in [("format", String(formatVersion)), ("replica_id", store.replicaID.description),
                               ("created_at", ISO8601DateFormatter().string(from: Date()))] {
                    try db.execute(sql: "INSERT INTO snapshot_meta (key, value) VALUES (?, ?)", arguments: [k, v])
                }
                for (o, t) in anchors {
                    try db.execute(sql: "INSERT INTO snapshot_anchors VALUES (?, ?, ?, ?)",
                                   arguments: [o.description, Int64(t.lastSeq.rawValue), Int64(bitPattern: t.lastHLC.rawValue), Data(t.lastHash.bytes)])
                }
            }
            try queue.close()
            let fd = open(tmp, O_RDONLY)
            guard fd >= 0, fsync(fd) == 0 else {
                if fd >= 0 { close(fd) }
                throw ProjectionError.database("cannot sync \(tmp)")
            }
            close(fd)
            guard rename(tmp, path) == 0 else { throw ProjectionError.database("cannot move the snapshot into place at \(path): \(String(cString: strerror(errno)))") }
        } catch {
            try? FileManager.default.removeItem(atPath: tmp)
            throw error
        }
        let bytes = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        return Info(replicaID: store.replicaID, anchors: anchors, bytes: bytes)
    }

    /// Reads what a snapshot file covers.
    /// - Throws: `ProjectionError` naming the file and what is missing or malformed.
    public static func read(_ path: String) throws -> Info {
        guard FileManager.default.fileExists(atPath: path) else { throw ProjectionError.database("\(path): no such snapshot") }
        var config = Configuration()
        config.readonly = true
        let queue: DatabaseQueue
        do { queue = try DatabaseQueue(path: path, configuration: config) } catch {
            throw ProjectionError.database("\(path) is not a snapshot (not an SQLite database: \(error))")
        }
        defer { try? queue.close() }
        return try queue.read { db in
            guard try db.tableExists("snapshot_meta"), try db.tableExists("snapshot_anchors") else {
                throw ProjectionError.database("\(path) is not a snapshot (no snapshot_meta or snapshot_anchors table)")
            }
            let meta = try Dictionary(uniqueKeysWithValues: Row.fetchAll(db, sql: "SELECT key, value FROM snapshot_meta").map { (row: Row) -> (String, String) in (row[0], row[1]) })
            guard meta["format"] == String(formatVersion) else {
                throw ProjectionError.database("\(path): snapshot format \(meta["format"] ?? "missing") is not supported (this build reads \(formatVersion))")
            }
            guard let idText = meta["replica_id"], let id = ReplicaID(idText) else { throw ProjectionError.database("\(path): snapshot_meta.replica_id is missing or not a UUID") }
            var anchors: [ReplicaID: LogTip] = [:]
            for (i, row) in try Row.fetchAll(db, sql: "SELECT origin, last_seq, last_hlc, last_hash FROM snapshot_anchors").enumerated() {
                let text: String = row[0]
                let seq: Int64 = row[1]
                let hlc: Int64 = row[2]
                let hash: Data = row[3]
                guard let o = ReplicaID(text), seq > 0, hash.count == 32 else {
                    throw ProjectionError.database("\(path): snapshot_anchors row \(i + 1) is malformed")
                }
                anchors[o] = LogTip(lastSeq: Seq(UInt64(seq)), lastHLC: HLC(rawValue: UInt64(bitPattern: hlc)), lastHash: FrameHash(bytes: Array(hash)))
            }
            let bytes = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
            return Info(replicaID: id, anchors: anchors, bytes: bytes)
        }
    }
}
