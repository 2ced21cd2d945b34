import EventLog
import Foundation
import GRDB

/// Tombstone purge (docs/PROJECTION.md, "Purging tombstones"): rows deleted before a time leave
/// the projection's tables, only when asked. Each keeps its merge state in `projection_purged`,
/// so a late update never brings it back; a later restore or create does, made again from the
/// log, which keeps everything. The cutoff is a device-local setting, so a rebuild purges the
/// same rows again and `verify --deep` compares like with like.
extension Projection {
    /// The device-local setting holding the latest cutoff purged (ISO 8601).
    public static let purgedBeforeSetting = "purge_deleted_before"
    /// The device-local setting holding a retention in days (purged at every open for writing).
    public static let retainDaysSetting = "purge_retain_days"

    /// Purges rows deleted before `cutoff` (ISO 8601, compared with `deleted_at`).
    /// - Returns: rows purged per table (tables with none left out).
    @discardableResult
    public func purge(deletedBefore cutoff: String) throws -> [String: Int] {
        let counts = try pool.write { db -> [String: Int] in
            let previous = try String.fetchOne(db, sql: "SELECT value FROM app_settings WHERE key = ?", arguments: [Projection.purgedBeforeSetting])
            if previous.map({ $0 < cutoff }) ?? true {
                try db.execute(sql: "INSERT INTO app_settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                               arguments: [Projection.purgedBeforeSetting, cutoff])
            }
            return try Projection.purgeRows(db, schema: schema, before: cutoff)
        }
        if counts.values.reduce(0, +) > 0, !hub.isEmpty {
            hub.publish(ProjectionChange(cursor: try cursor(), events: [], rebuilt: true))
        }
        return counts
    }

    static func purgeRows(_ db: Database, schema: ProjectionSchema, before cutoff: String) throws -> [String: Int] {
        var counts: [String: Int] = [:]
        for t in schema.tables {
            try db.execute(sql: """
                INSERT OR REPLACE INTO projection_purged (tbl, id, version, deleted_at, _clocks)
                SELECT ?, id, version, deleted_at, _clocks FROM \(t.name) WHERE deleted_at IS NOT NULL AND deleted_at < ?
                """, arguments: [t.name, cutoff])
            try db.execute(sql: "DELETE FROM \(t.name) WHERE deleted_at IS NOT NULL AND deleted_at < ?", arguments: [cutoff])
            if db.changesCount > 0 { counts[t.name] = db.changesCount }
        }
        return counts
    }

    /// Purges again what the settings of `db` say was purged (after a rebuild or a rebuild aside).
    static func reapplyPurge(_ db: Database, schema: ProjectionSchema, settingsFrom settings: Database? = nil) throws {
        let source = settings ?? db
        guard let cutoff = try String.fetchOne(source, sql: "SELECT value FROM app_settings WHERE key = ?", arguments: [purgedBeforeSetting]) else { return }
        _ = try purgeRows(db, schema: schema, before: cutoff)
    }

    /// The retention in days this store was told to keep deleted rows for, if any.
    public func retainDays() throws -> Int? {
        try setting(Projection.retainDaysSetting).flatMap { Int($0) }
    }

    /// Sets (or, with nil, removes) the retention; the caller purges.
    public func setRetainDays(_ days: Int?) throws {
        try setSetting(Projection.retainDaysSetting, days.map { String($0) })
    }

    /// Purges what the retention says is old enough: rows deleted more than `days` ago.
    @discardableResult
    public func purgeByRetention(now: Date = Date()) throws -> [String: Int] {
        guard let days = try retainDays(), days > 0 else { return [:] }
        let cutoff = ISOTime.millis(now.addingTimeInterval(-Double(days) * 86_400))
        return try purge(deletedBefore: ISOTime.string(millis: cutoff))
    }
}
