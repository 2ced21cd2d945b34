import EventLog
import Foundation
import GRDB

/// Which way a traversal follows links.
public enum LinkDirection: String, Sendable, CaseIterable {
    /// From `from_id` to `to_id` (what the item links to).
    case outgoing
    /// From `to_id` back to `from_id` (what links to the item).
    case incoming
    /// Both ways.
    case both
}

/// An item reached by following links, with the least number of links from the start.
public struct LinkedItem: Sendable, Equatable {
    /// The item's id (lowercase).
    public var id: String
    /// The least number of links from the start to it (1: linked directly).
    public var depth: Int
    /// The item it was first reached from at that depth, and the link that reached it.
    public var via: String
    public var linkID: String
    /// The kind of that link (LINK, SEQUENCE, AFFINITY, …), when it has one.
    public var kind: String?
    /// The item's title, or nil when the projection has no such item (an orphan link: the item
    /// may not have arrived yet).
    public var title: String?
    /// False when the projection has no item of that id.
    public var exists: Bool
}

/// A link row of the projection.
public struct LinkRow: Sendable, Equatable, FetchableRecord {
    public var id: String
    public var fromID: String?
    public var toID: String?
    public var kind: String?
    public var weight: Double?
    public var label: String?
    public var deletedAt: String?

    public init(row: Row) throws {
        id = row["id"]
        fromID = row["from_id"]
        toID = row["to_id"]
        kind = row["kind"]
        weight = row["weight"]
        label = row["label"]
        deletedAt = row["deleted_at"]
    }
}

extension Projection {
    /// The items reachable from `start` by links that are not deleted, each once, with its least
    /// depth, in breadth-first order (by depth, then id). Cycle-safe: an item is visited once.
    /// Deleted items are neither returned nor followed; an id no item has (an orphan link) is
    /// returned with `exists` false and not followed further. The start itself is never returned.
    /// - Parameters:
    ///   - depth: the most links to follow (at least 1).
    ///   - kinds: follow only links of these kinds (nil: every kind).
    ///   - limit: stop after this many items.
    public func linked(from start: String, depth: Int = 1, kinds: Set<String>? = nil, direction: LinkDirection = .outgoing,
                       limit: Int = 100_000) throws -> [LinkedItem] {
        guard depth >= 1 else { throw ProjectionError.invalid("depth must be at least 1 (got \(depth))") }
        let root = start.lowercased()
        return try pool.read { db in
            var seen: Set<String> = [root]
            var out: [LinkedItem] = []
            var frontier = [root]
            // Each direction's query reads one partial index (links_from, links_to) by its first
            // column and looks the far end up in items by primary key.
            let outgoing = try db.cachedStatement(sql: """
                SELECT l.to_id, l.id, l.kind, i.title, i.deleted_at, i.id IS NOT NULL FROM links l
                LEFT JOIN items i ON i.id = l.to_id
                WHERE l.from_id = ? AND l.deleted_at IS NULL AND l.to_id IS NOT NULL ORDER BY l.to_id, l.id
                """)
            let incoming = try db.cachedStatement(sql: """
                SELECT l.from_id, l.id, l.kind, i.title, i.deleted_at, i.id IS NOT NULL FROM links l
                LEFT JOIN items i ON i.id = l.from_id
                WHERE l.to_id = ? AND l.deleted_at IS NULL AND l.from_id IS NOT NULL ORDER BY l.from_id, l.id
                """)
            let statements: [Statement] = switch direction {
            case .outgoing: [outgoing]
            case .incoming: [incoming]
            case .both: [outgoing, incoming]
            }
            var level = 0
            while level < depth, !frontier.isEmpty, out.count < limit {
                level += 1
                var next: [LinkedItem] = []
                for from in frontier {
                    for statement in statements {
                        let rows = try Row.fetchCursor(statement, arguments: [from])
                        while let r = try rows.next() {
                            let kind: String? = r[2]
                            if let kinds, !kinds.contains(kind ?? "") { continue }
                            let id: String = r[0]
                            guard !seen.contains(id) else { continue }
                            let exists: Bool = r[5]
                            let deletedAt: String? = r[4]
                            if exists && deletedAt != nil { continue }  // deleted: not returned, not followed
                            seen.insert(id)
                            next.append(LinkedItem(id: id, depth: level, via: from, linkID: r[1], kind: kind, title: r[3], exists: exists))
                        }
                    }
                }
                next.sort { $0.id < $1.id }
                if out.count + next.count > limit { next = Array(next.prefix(limit - out.count)) }
                out += next
                frontier = next.filter(\.exists).map(\.id)
            }
            return out
        }
    }

    /// The links that start or end at `item` (deleted ones only when asked for), by kind then id.
    public func links(of item: String, includeDeleted: Bool = false) throws -> [LinkRow] {
        try pool.read { db in
            try LinkRow.fetchAll(db, sql: """
                SELECT * FROM links WHERE (from_id = ? OR to_id = ?)\(includeDeleted ? "" : " AND deleted_at IS NULL")
                ORDER BY kind, id
                """, arguments: [item.lowercased(), item.lowercased()])
        }
    }
}
