import EventLog
import Foundation
import GRDB

/// Queries for audit inspection (the inspector's pages): pages of conflicts and anomalies by
/// id, one entity's conflicts, and one entity's current row as text.
extension Projection {
    /// At most `limit` conflicts with an id above `afterID`, by id (resolved ones too when asked for).
    public func conflicts(afterID: Int64, limit: Int, includeResolved: Bool = true) throws -> [ConflictRow] {
        try reading { db in
            try ConflictRow.fetchAll(db, sql: "SELECT * FROM conflicts WHERE id > ?" + (includeResolved ? "" : " AND resolved_by IS NULL") + " ORDER BY id LIMIT ?",
                                     arguments: [afterID, max(0, limit)])
        }
    }

    /// How many conflicts there are, and how many are not resolved.
    public func conflictCounts() throws -> (all: Int, open: Int) {
        try reading { db in
            let row = try Row.fetchOne(db, sql: "SELECT count(*), count(*) FILTER (WHERE resolved_by IS NULL) FROM conflicts")
            return (row?[0] ?? 0, row?[1] ?? 0)
        }
    }

    /// The conflicts settled on one entity, oldest first (at most `limit`).
    public func conflicts(entity: Entity, id: UUID, limit: Int = 1000) throws -> [ConflictRow] {
        try reading { db in
            try ConflictRow.fetchAll(db, sql: "SELECT * FROM conflicts WHERE entity = ? AND entity_id = ? ORDER BY id LIMIT ?",
                                     arguments: [entity.name, id.lowercasedString, max(0, limit)])
        }
    }

    /// At most `limit` anomalies with an id above `afterID`, by id.
    public func anomalies(afterID: Int64, limit: Int) throws -> [AnomalyRow] {
        try reading { db in
            try AnomalyRow.fetchAll(db, sql: "SELECT * FROM sync_anomalies WHERE id > ? ORDER BY id LIMIT ?", arguments: [afterID, max(0, limit)])
        }
    }

    /// How many anomalies there are.
    public func anomalyCount() throws -> Int {
        try reading { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sync_anomalies") ?? 0 }
    }

    /// One entity's projected row as (column, value as text) pairs in the table's order, merge
    /// clocks left out; nil when the projection has no such row (never created, or purged).
    public func currentRow(entity: Entity, id: UUID) throws -> [(column: String, value: String?)]? {
        guard let table = schema.table(for: entity) else { return nil }
        return try reading { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM \(table.name) WHERE id = ?", arguments: [id.lowercasedString]) else { return nil }
            var out: [(String, String?)] = []
            for (column, value) in row where column != "_clocks" {
                switch value.storage {
                case .null: out.append((column, nil))
                case .int64(let i): out.append((column, String(i)))
                case .double(let d): out.append((column, String(d)))
                case .string(let s): out.append((column, s))
                case .blob(let b): out.append((column, "\(b.count) bytes"))
                }
            }
            return out
        }
    }
}

extension Projection {
    /// For many entities at once: which fields each event holds now (its value is the current
    /// one), by event id, with `deleted_at` for the event that set the lifecycle. One read.
    public func heldFields(_ keys: [(Entity, UUID)]) throws -> [UUID: [String]] {
        guard !keys.isEmpty else { return [:] }
        return try reading { db in
            let p = try Projector(schema: schema, db: db, fresh: true)
            var out: [UUID: [String]] = [:]
            var seen = Set<String>()
            for (entity, id) in keys {
                guard let table = schema.table(for: entity), seen.insert("\(entity.rawValue)/\(id.lowercasedString)").inserted,
                      let row = try Row.fetchOne(db, sql: "SELECT _clocks, version FROM \(table.name) WHERE id = ?", arguments: [id.lowercasedString])
                else { continue }
                let blob: Data = try row.decode(atIndex: 0)
                let version: Int64 = try row.decode(atIndex: 1)
                let state = try RowState.decodeClocks(Array(blob), columns: table.columns.count, version: UInt64(bitPattern: version), origins: p.origins.count)
                for (c, cell) in state.cells.enumerated() {
                    guard let s = cell.stamp else { continue }
                    out[p.eventID(state.stamps[s]), default: []].append(table.columns[c])
                }
                if let l = state.lifecycle { out[p.eventID(state.stamps[l.stamp]), default: []].append("deleted_at") }
            }
            for k in out.keys { out[k]?.sort() }
            return out
        }
    }
}

extension Projection {
    /// The first `limit` items under `root` (not deleted), breadth first: depth 1 first, then
    /// depth 2, …. The recursion itself stops after `limit` rows, so the cost is bounded by
    /// `limit` whatever the size of the subtree; cycle-safe like `items(under:)`.
    public func subtree(of root: String, limit: Int) throws -> [ItemRow] {
        let root = try Projection.argument(root, "the subtree's root")
        return try reading { db in
            try ItemRow.fetchAll(db, sql: """
                WITH RECURSIVE sub(id, depth, path) AS (
                    SELECT ?, 0, '/' || ? || '/'
                    UNION ALL
                    SELECT i.id, sub.depth + 1, sub.path || i.id || '/' FROM sub JOIN items i ON i.parent_id = sub.id
                    WHERE i.deleted_at IS NULL AND instr(sub.path, '/' || i.id || '/') = 0
                    LIMIT ?
                )
                SELECT items.*, sub.depth AS depth FROM sub JOIN items ON items.id = sub.id WHERE sub.depth > 0
                ORDER BY sub.depth, items.sort_order, items.id
                """, arguments: [root.lowercased(), root.lowercased(), max(0, limit) + 1])
        }
    }
}

extension Projection {
    /// At most `limit` live links that start or end at `item`, by kind and id.
    public func links(of item: String, limit: Int) throws -> [LinkRow] {
        let item = try Projection.argument(item, "the item id")
        return try reading { db in
            try LinkRow.fetchAll(db, sql: """
                SELECT * FROM (SELECT * FROM links WHERE from_id = ? AND deleted_at IS NULL
                               UNION SELECT * FROM links WHERE to_id = ? AND deleted_at IS NULL)
                ORDER BY kind, id LIMIT ?
                """, arguments: [item.lowercased(), item.lowercased(), max(0, limit)])
        }
    }
}
