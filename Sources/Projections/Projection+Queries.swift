import EventLog
import Foundation
import GRDB

/// A row of the `items` table.
public struct ItemRow: Sendable, Equatable, Codable, FetchableRecord {
    public var id: String
    public var parentID: String?
    public var title: String?
    public var notes: String?
    public var status: String?
    public var itemType: String?
    public var sortOrder: Double?
    public var dueAt: String?
    public var earliestStartAt: String?
    public var completedAt: String?
    public var recurrenceRule: String?
    /// Seed 001's priority and importance (numbers; larger is more).
    public var priority: Double?
    public var importance: Double?
    /// A place: its name, address and coordinates.
    public var locationName: String?
    public var locationAddress: String?
    public var latitude: Double?
    public var longitude: Double?
    public var version: Int64
    public var createdAt: String?
    public var modifiedAt: String
    public var deletedAt: String?
    /// Depth below the queried root (subtree queries), else 0.
    public var depth: Int

    public init(row: Row) throws {
        id = try row.decode(forColumn: "id")
        parentID = try row.decode(forColumn: "parent_id")
        title = try row.decode(forColumn: "title")
        notes = try row.decode(forColumn: "notes")
        status = try row.decode(forColumn: "status")
        itemType = try row.decode(forColumn: "item_type")
        sortOrder = try row.decode(forColumn: "sort_order")
        dueAt = try row.decode(forColumn: "due_at")
        earliestStartAt = try row.decode(forColumn: "earliest_start_at")
        completedAt = try row.decode(forColumn: "completed_at")
        recurrenceRule = try row.decode(forColumn: "recurrence_rule")
        priority = try row.decode(forColumn: "priority")
        importance = try row.decode(forColumn: "importance")
        locationName = try row.decode(forColumn: "location_name")
        locationAddress = try row.decode(forColumn: "location_address")
        latitude = try row.decode(forColumn: "latitude")
        longitude = try row.decode(forColumn: "longitude")
        version = try row.decode(forColumn: "version")
        createdAt = try row.decode(forColumn: "created_at")
        modifiedAt = try row.decode(forColumn: "modified_at")
        deletedAt = try row.decode(forColumn: "deleted_at")
        depth = try row.decode(Int?.self, forColumn: "depth") ?? 0
    }
}

/// A row of the `tags` table.
public struct TagRow: Sendable, Equatable, FetchableRecord {
    public var id: String
    public var name: String?
    public var color: String?
    public var version: Int64
    public var modifiedAt: String
    public var deletedAt: String?

    public init(row: Row) throws {
        id = try row.decode(forColumn: "id")
        name = try row.decode(forColumn: "name")
        color = try row.decode(forColumn: "color")
        version = try row.decode(forColumn: "version")
        modifiedAt = try row.decode(forColumn: "modified_at")
        deletedAt = try row.decode(forColumn: "deleted_at")
    }
}

/// A row of the `conflicts` table.
public struct ConflictRow: Sendable, Equatable, FetchableRecord {
    public var id: Int64
    public var entity: String
    public var entityID: String
    public var field: String
    /// JSON text of each value.
    public var winnerValue: String
    public var loserValue: String
    public var winnerEventID: String
    public var loserEventID: String
    public var winnerOrigin: String
    public var loserOrigin: String
    public var detectedAt: String
    public var resolvedBy: String?

    public init(row: Row) throws {
        id = try row.decode(forColumn: "id")
        entity = try row.decode(forColumn: "entity")
        entityID = try row.decode(forColumn: "entity_id")
        field = try row.decode(forColumn: "field")
        winnerValue = try row.decode(String?.self, forColumn: "winner_value") ?? "null"
        loserValue = try row.decode(String?.self, forColumn: "loser_value") ?? "null"
        winnerEventID = try row.decode(forColumn: "winner_event_id")
        loserEventID = try row.decode(forColumn: "loser_event_id")
        winnerOrigin = try row.decode(forColumn: "winner_origin")
        loserOrigin = try row.decode(forColumn: "loser_origin")
        detectedAt = try row.decode(forColumn: "detected_at")
        resolvedBy = try row.decode(forColumn: "resolved_by")
    }
}

/// A row of the `sync_anomalies` table.
public struct AnomalyRow: Sendable, Equatable, FetchableRecord {
    public var id: Int64
    public var kind: String
    public var entity: String
    public var entityID: String
    public var itemID: String?
    public var originalOccurrenceDate: String?
    public var attemptedOp: String
    public var eventID: String
    public var otherID: String?
    public var correlationID: String
    public var detectedAt: String
    public var details: String?

    public init(row: Row) throws {
        id = try row.decode(forColumn: "id")
        kind = try row.decode(forColumn: "kind")
        entity = try row.decode(forColumn: "entity")
        entityID = try row.decode(forColumn: "entity_id")
        itemID = try row.decode(forColumn: "item_id")
        originalOccurrenceDate = try row.decode(forColumn: "original_occurrence_date")
        attemptedOp = try row.decode(forColumn: "attempted_op")
        eventID = try row.decode(forColumn: "event_id")
        otherID = try row.decode(forColumn: "other_event_id")
        correlationID = try row.decode(forColumn: "correlation_id")
        detectedAt = try row.decode(forColumn: "detected_at")
        details = try row.decode(forColumn: "details")
    }
}

extension Projection {
    /// `text` as an argument of a query, refused when it holds a NUL character: a string bound
    /// through GRDB ends at its first NUL, so `a\0b` would be read as `a` and match, or write,
    /// what it does not name. Text kept here never holds one (`FieldRules` refuses it on the way in).
    static func argument(_ text: String, _ what: String) throws -> String {
        if let at = text.utf8.firstIndex(of: 0) {
            throw ProjectionError.invalid("\(what) contains a NUL character (U+0000) at byte \(text.utf8.distance(from: text.utf8.startIndex, to: at))")
        }
        return text
    }

    /// Items, optionally matching a full-text search (prefix search, diacritics folded) and/or
    /// limited to the subtree under an item; deleted items are excluded unless asked for.
    public func items(search: String? = nil, under root: String? = nil, includeDeleted: Bool = false, limit: Int = 1000) throws -> [ItemRow] {
        try items(search: search, under: root, includeDeleted: includeDeleted, limit: limit, as: ItemRow.self)
    }

    /// `items(search:under:includeDeleted:limit:)`, each row decoded as `R`.
    public func items<R: FetchableRecord>(search: String? = nil, under root: String? = nil, includeDeleted: Bool = false, limit: Int = 1000,
                                          as: R.Type) throws -> [R] {
        try reading { db in
            var sql: String
            var args: [DatabaseValueConvertible?] = []
            if let root { _ = try Projection.argument(root, "the subtree's root") }
            if let search { _ = try Projection.argument(search, "the search") }
            if let root {
                // Cycle-safe: a visited path string stops the recursion at a repeated id; and
                // bounded: no deeper than `Bounds.walkDepthMax` levels (the path string grows
                // with depth, and the walk with its square).
                sql = """
                    WITH RECURSIVE sub(id, depth, path) AS (
                        SELECT id, 0, '/' || id || '/' FROM items WHERE id = ?
                        UNION ALL
                        SELECT i.id, sub.depth + 1, sub.path || i.id || '/' FROM items i JOIN sub ON i.parent_id = sub.id
                        WHERE instr(sub.path, '/' || i.id || '/') = 0 AND sub.depth < \(Bounds.walkDepthMax)
                    )
                    SELECT items.*, sub.depth AS depth FROM sub JOIN items ON items.id = sub.id
                    """
                args.append(root.lowercased())
            } else {
                sql = "SELECT items.*, 0 AS depth FROM items"
            }
            var conditions: [String] = []
            if let search, let match = Projection.ftsQuery(search) {
                conditions.append("items.rowid IN (SELECT rowid FROM items_fts WHERE items_fts MATCH ?)")
                args.append(match)
            }
            if !includeDeleted { conditions.append("items.deleted_at IS NULL") }
            if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
            if root != nil {
                sql += " ORDER BY depth, items.sort_order, items.id"
            } else if search != nil {
                // Most recently added first, in the index's own order: no sort over every match.
                sql += " ORDER BY items.rowid DESC"
            } else {
                sql += " ORDER BY items.sort_order, items.id"
            }
            sql += " LIMIT \(max(0, limit))"
            return try R.fetchAll(db, sql: sql, arguments: StatementArguments(args))
        }
    }

    /// Every row of an entity's table (deleted ones only when asked for), in id order, each
    /// decoded as `R`.
    public func rows<R: FetchableRecord>(of entity: Entity, includeDeleted: Bool = false, limit: Int = Int.max, as: R.Type) throws -> [R] {
        guard let table = schema.table(for: entity)?.name else { return [] }
        return try reading { db in
            try R.fetchAll(db, sql: "SELECT * FROM \(SQLiteFactory.quote(table))" + (includeDeleted ? "" : " WHERE deleted_at IS NULL") + " ORDER BY id LIMIT ?",
                           arguments: [Int64(clamping: limit)])
        }
    }

    /// The row of one entity, deleted or not, decoded as `R`; nil when there is none.
    public func row<R: FetchableRecord>(of entity: Entity, id: UUID, as: R.Type) throws -> R? {
        guard let table = schema.table(for: entity)?.name else { return nil }
        return try reading { db in try R.fetchOne(db, sql: "SELECT * FROM \(SQLiteFactory.quote(table)) WHERE id = ?", arguments: [id.lowercasedString]) }
    }

    /// Tags by name (deleted ones only when asked for).
    public func tags(includeDeleted: Bool = false) throws -> [TagRow] { try tags(includeDeleted: includeDeleted, as: TagRow.self) }

    /// `tags(includeDeleted:)`, each tag decoded as `R`.
    public func tags<R: FetchableRecord>(includeDeleted: Bool = false, as: R.Type) throws -> [R] {
        try reading { db in
            try R.fetchAll(db, sql: "SELECT * FROM tags" + (includeDeleted ? "" : " WHERE deleted_at IS NULL") + " ORDER BY name, id")
        }
    }

    /// The tags each of `items` carries now (a live link to a live tag), by item id.
    public func tags(of items: [String]) throws -> [String: [TagRow]] { try tags(of: items, as: TagRow.self) }

    /// `tags(of:)`, each tag decoded as `R`.
    public func tags<R: FetchableRecord>(of items: [String], as: R.Type) throws -> [String: [R]] {
        guard !items.isEmpty else { return [:] }
        return try reading { db in
            var out: [String: [R]] = [:]
            // In chunks: SQLite bounds the number of parameters of one statement.
            for start in stride(from: 0, to: items.count, by: 500) {
                let chunk = items[start..<min(items.count, start + 500)].map { $0.lowercased() }
                let rows = try Row.fetchAll(db, sql: """
                    SELECT it.item_id AS _item, t.* FROM item_tags it JOIN tags t ON t.id = it.tag_id
                    WHERE it.deleted_at IS NULL AND t.deleted_at IS NULL
                      AND it.item_id IN (\(Array(repeating: "?", count: chunk.count).joined(separator: ",")))
                    ORDER BY t.name, t.id
                    """, arguments: StatementArguments(chunk))
                for r in rows { out[r["_item"], default: []].append(try R(row: r)) }
            }
            return out
        }
    }

    /// The path from an item up to its root (the item first), stopping at a cycle, and after
    /// `Bounds.walkDepthMax` ancestors (then the last row returned is not a root: its
    /// `parentID` is set).
    public func pathToRoot(_ id: String) throws -> [ItemRow] {
        let id = try Projection.argument(id, "the item id")
        return try reading { db in
            try ItemRow.fetchAll(db, sql: """
                WITH RECURSIVE up(id, parent_id, depth, path) AS (
                    SELECT id, parent_id, 0, '/' || id || '/' FROM items WHERE id = ?
                    UNION ALL
                    SELECT i.id, i.parent_id, up.depth + 1, up.path || i.id || '/' FROM items i JOIN up ON i.id = up.parent_id
                    WHERE instr(up.path, '/' || i.id || '/') = 0 AND up.depth < \(Bounds.walkDepthMax)
                )
                SELECT items.*, up.depth AS depth FROM up JOIN items ON items.id = up.id ORDER BY up.depth
                """, arguments: [id.lowercased()])
        }
    }

    /// Turns user text into an FTS5 query: each word a quoted prefix term, all required.
    static func ftsQuery(_ text: String) -> String? {
        let words = text.split(whereSeparator: { !$0.isLetter && !$0.isNumber })
        guard !words.isEmpty else { return nil }
        return words.map { "\"\($0.replacingOccurrences(of: "\"", with: ""))\"*" }.joined(separator: " ")
    }

    public func conflicts(includeResolved: Bool = false) throws -> [ConflictRow] {
        try reading { db in
            try ConflictRow.fetchAll(db, sql: "SELECT * FROM conflicts" + (includeResolved ? "" : " WHERE resolved_by IS NULL") + " ORDER BY id")
        }
    }

    public func conflict(_ id: Int64) throws -> ConflictRow? {
        try reading { db in try ConflictRow.fetchOne(db, sql: "SELECT * FROM conflicts WHERE id = ?", arguments: [id]) }
    }

    public func anomalies() throws -> [AnomalyRow] {
        try reading { db in try AnomalyRow.fetchAll(db, sql: "SELECT * FROM sync_anomalies ORDER BY id") }
    }

    /// The current version (hlc of the newest event) of each entity that exists, for `base`.
    public func versions(_ keys: [(Entity, UUID)]) throws -> [UUID: HLC] {
        var byTable: [String: [String]] = [:]
        for (e, id) in keys {
            guard let t = schema.table(for: e) else { continue }
            byTable[t.name, default: []].append(id.lowercasedString)
        }
        return try reading { db in
            var out: [UUID: HLC] = [:]
            for (table, ids) in byTable {
                // A table with no row (a first import, a kind not used yet) holds no version: one
                // probe instead of a lookup per id, in the same read transaction as the lookups.
                let empty = "SELECT NOT EXISTS (SELECT 1 FROM \(SQLiteFactory.quote(table)))"
                if try Bool.fetchOne(db, sql: empty) ?? false { continue }
                for chunk in stride(from: 0, to: ids.count, by: 500) {
                    let part = Array(ids[chunk..<min(chunk + 500, ids.count)])
                    let sql = "SELECT id, version FROM \(table) WHERE id IN (\(part.map { _ in "?" }.joined(separator: ",")))"
                    for row in try Row.fetchAll(db, sql: sql, arguments: StatementArguments(part)) {
                        let id: String = try row.decode(atIndex: 0)
                        let v: Int64 = try row.decode(atIndex: 1)
                        if let u = UUID(uuidString: id) { out[u] = HLC(rawValue: UInt64(bitPattern: v)) }
                    }
                }
            }
            return out
        }
    }

    /// Which event's value each column of an entity holds now: column → (event id, origin, seq, hlc).
    public func fieldSources(entity: Entity, id: UUID) throws -> [String: (eventID: UUID, origin: ReplicaID, seq: Seq, hlc: HLC)] {
        guard let table = schema.table(for: entity) else { return [:] }
        return try reading { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT _clocks, version FROM \(table.name) WHERE id = ?", arguments: [id.lowercasedString]) else { return [:] }
            let blob: Data = try row.decode(atIndex: 0)
            let version: Int64 = try row.decode(atIndex: 1)
            let p = try Projector(schema: schema, db: db, fresh: true)
            let state = try RowState.decodeClocks(Array(blob), columns: table.columns.count, version: UInt64(bitPattern: version), origins: p.origins.count)
            var out: [String: (UUID, ReplicaID, Seq, HLC)] = [:]
            for (c, cell) in state.cells.enumerated() {
                guard let s = cell.stamp else { continue }
                let st = state.stamps[s]
                out[table.columns[c]] = (p.eventID(st), p.origin(st), Seq(st.seq), HLC(rawValue: st.hlc))
            }
            if let l = state.lifecycle {
                let st = state.stamps[l.stamp]
                out["deleted_at"] = (p.eventID(st), p.origin(st), Seq(st.seq), HLC(rawValue: st.hlc))
            }
            return out
        }
    }

    /// Every event of one entity, across origins, in merge order (hlc, origin, seq). Scans the log.
    public func history(entity: Entity, id: UUID) throws -> [Event] {
        try Projection.history(store: store, entity: entity, id: id)
    }

    static func history(store: Store, entity: Entity, id: UUID) throws -> [Event] {
        let ref = EntityRef(entity: entity, id: id)
        return try histories(store: store, of: [ref])[ref] ?? []
    }

    /// Every event of each entity of `refs`, each list in merge order, in one pass over the log
    /// (bringing back many purged rows at once reads the log once, not once per row).
    static func histories(store: Store, of refs: Set<EntityRef>) throws -> [EntityRef: [Event]] {
        guard !refs.isEmpty else { return [:] }
        let reader = LogReader(store: store)
        var out: [EntityRef: [Event]] = [:]
        for o in try store.origins() {
            // Matched in place: only the events of `refs` are decoded.
            try reader.forEachEventView(origin: o) { v in
                let ref = EntityRef(entity: v.entity, id: v.entityID)
                if refs.contains(ref) { out[ref, default: []].append(try v.event()) }
                return true
            }
        }
        for k in out.keys {
            out[k]!.sort { a, b in
                if a.hlc != b.hlc { return a.hlc < b.hlc }
                if a.origin != b.origin { return a.origin < b.origin }
                return a.seq < b.seq
            }
        }
        return out
    }

    // MARK: Canonical dump

    /// Names of the tables whose contents must agree on every replica.
    public var syncedTables: [String] { schema.tables.map(\.name) }

    /// A canonical text dump of every synced table (rows sorted by id, values typed by `quote`),
    /// identical for identical projections whatever the order events arrived in. Excludes the
    /// per-replica bookkeeping (`_clocks` encoding, origin numbering, cursor, conflicts as
    /// detected, app_settings).
    public func canonicalDump() throws -> [String] {
        try reading { db in try Projection.canonicalDump(db, schema: schema) }
    }

    static func canonicalDump(_ db: Database, schema: ProjectionSchema) throws -> [String] {
        var lines: [String] = []
        for t in schema.tables {
            let cols = ["id"] + t.columns + ["version", "created_at", "modified_at", "deleted_at"]
            let expr = cols.map { "quote(\($0))" }.joined(separator: " || '|' || ")
            lines.append("# \(t.name)")
            lines += try String.fetchAll(db, sql: "SELECT \(expr) FROM \(t.name) ORDER BY id")
        }
        return lines
    }

    /// Rebuilds the projection aside (in a temporary file) and compares its canonical dump with
    /// this one. Returns nil when they agree, else the first difference.
    public func verifyDeep(progress: ((Int, Int) -> Void)? = nil) throws -> String? {
        let temp = path + ".verify-\(UUID().uuidString.prefix(8))"
        defer { for s in [""] + StoreLayout.sqliteSidecarSuffixes { try? FileManager.default.removeItem(atPath: temp + s) } }
        let live = try canonicalDump()
        let cursorNow = try cursor()
        let seeded = try Projection.seedFromSnapshot(store, at: temp)
        let pool = try Projection.openPool(temp, schema: schema)
        _ = try Projection.project(store: store, into: pool, schema: schema, fresh: !seeded, progress: progress)
        if let cutoff = try setting(Projection.purgedBeforeSetting) {
            try pool.write { db in _ = try Projection.purgeRows(db, schema: schema, before: cutoff) }  // purged alike
        }
        let aside = try pool.read { db in try Projection.canonicalDump(db, schema: schema) }
        let asideCursor = try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT origin, last_seq FROM projection_cursor").reduce(into: [String: Int64]()) { $0[$1[0]] = $1[1] }
        }
        try pool.close()
        for (o, s) in cursorNow where asideCursor[o.description] != Int64(s.rawValue) {
            return "projection cursor of origin \(o) is at seq \(s), the log holds \(asideCursor[o.description] ?? 0) (run `evctl replay`)"
        }
        for (i, (a, b)) in zip(live, aside).enumerated() where a != b {
            return "line \(i + 1) of the canonical dump differs:\n  live:    \(a)\n  rebuilt: \(b)"
        }
        if live.count != aside.count {
            let i = min(live.count, aside.count)
            return "the live projection has \(live.count) dump lines, the rebuild \(aside.count); first extra: \((live.count > i ? live[i] : aside[i]))"
        }
        return nil
    }

    // MARK: app_settings (device-local, never derived from the log nor shipped)

    public func setting(_ key: String) throws -> String? {
        let key = try Projection.argument(key, "the setting's key")
        return try reading { db in try String.fetchOne(db, sql: "SELECT value FROM app_settings WHERE key = ?", arguments: [key]) }
    }

    public func setSetting(_ key: String, _ value: String?) throws {
        let key = try Projection.argument(key, "the setting's key")
        if let value { _ = try Projection.argument(value, "the value of setting \(printable(key, limit: 40))") }
        try pool.write { db in
            if let value {
                try db.execute(sql: "INSERT INTO app_settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", arguments: [key, value])
            } else {
                try db.execute(sql: "DELETE FROM app_settings WHERE key = ?", arguments: [key])
            }
        }
    }
}
