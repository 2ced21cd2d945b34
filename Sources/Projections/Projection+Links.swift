import EventLog
import Foundation
import GRDB
import GRDBSQLite

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
        guard depth <= Bounds.walkDepthMax else {
            throw ProjectionError.invalid("depth \(depth) is more than the \(Bounds.walkDepthMax) levels a walk follows")
        }
        let root = try Projection.argument(start, "the start").lowercased()
        return try reading { db in
            // Each direction's query reads one partial index (links_from, links_to; covering, as
            // links is WITHOUT ROWID) by its first column and looks the far end up in items by
            // primary key. Rows come in index order and are read through SQLite's C interface.
            let outgoing = try db.cachedStatement(sql: """
                SELECT l.to_id, l.id, l.kind, i.title, i.deleted_at IS NOT NULL, i.id IS NOT NULL FROM links l
                LEFT JOIN items i ON i.id = l.to_id
                WHERE l.from_id = ? AND l.deleted_at IS NULL AND l.to_id IS NOT NULL
                """)
            let incoming = try db.cachedStatement(sql: """
                SELECT l.from_id, l.id, l.kind, i.title, i.deleted_at IS NOT NULL, i.id IS NOT NULL FROM links l
                LEFT JOIN items i ON i.id = l.from_id
                WHERE l.to_id = ? AND l.deleted_at IS NULL AND l.from_id IS NOT NULL
                """)
            let statements = switch direction {
            case .outgoing: [outgoing.sqliteStatement]
            case .incoming: [incoming.sqliteStatement]
            case .both: [outgoing.sqliteStatement, incoming.sqliteStatement]
            }
            defer { for s in statements { sqlite3_reset(s); sqlite3_clear_bindings(s) } }
            var seen: Set<String> = [root]
            var out: [LinkedItem] = []
            var frontier = [root]
            var level = 0
            while level < depth, !frontier.isEmpty, out.count < limit {
                level += 1
                // An item is reached from the first frontier item (by id) that links to it,
                // outgoing before incoming, by the least link id between the two.
                var next: [LinkedItem] = []
                var reachedBy: [String: (index: Int, from: Int, direction: Int)] = [:]
                for (f, from) in frontier.enumerated() {
                    for (d, s) in statements.enumerated() {
                        sqlite3_reset(s)
                        guard let length = Int32(exactly: from.utf8.count) else {
                            throw ProjectionError.invalid("the id \(printable(from, limit: 40)) is \(from.utf8.count) bytes long, more than SQLite can bind")
                        }
                        guard from.withCString({ sqlite3_bind_text(s, 1, $0, length, Self.sqliteTransient) }) == SQLITE_OK else {
                            throw ProjectionError.database("cannot read the links of \(printable(from, limit: 40)): \(String(cString: sqlite3_errmsg(db.sqliteConnection)))")
                        }
                        while true {
                            let rc = sqlite3_step(s)
                            if rc == SQLITE_DONE { break }
                            guard rc == SQLITE_ROW else {
                                throw ProjectionError.database("cannot read the links of \(printable(from, limit: 40)): \(String(cString: sqlite3_errmsg(db.sqliteConnection)))")
                            }
                            // The kind is read as text only when a filter or a reached item needs it.
                            if let kinds, !kinds.contains(Self.text(s, 2) ?? "") { continue }
                            guard let id = Self.text(s, 0) else { continue }  // the query excludes NULL
                            if seen.contains(id) {
                                // A parallel link from the same item and way, of a smaller id.
                                if let r = reachedBy[id], r.from == f, r.direction == d, let link = Self.text(s, 1), link < next[r.index].linkID {
                                    next[r.index].linkID = link
                                    next[r.index].kind = Self.text(s, 2)
                                }
                                continue
                            }
                            let exists = sqlite3_column_int(s, 5) != 0
                            if exists && sqlite3_column_int(s, 4) != 0 { continue }  // deleted: not returned, not followed
                            seen.insert(id)
                            reachedBy[id] = (next.count, f, d)
                            next.append(LinkedItem(id: id, depth: level, via: from, linkID: Self.text(s, 1) ?? "", kind: Self.text(s, 2),
                                                   title: Self.text(s, 3), exists: exists))
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

    private static let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    /// Column `column` of the row `statement` is on, as text (nil when NULL).
    private static func text(_ statement: OpaquePointer, _ column: Int32) -> String? {
        guard let p = sqlite3_column_text(statement, column) else { return nil }
        return String(decoding: UnsafeBufferPointer(start: p, count: Int(sqlite3_column_bytes(statement, column))), as: UTF8.self)
    }

    /// The links that start or end at `item` (deleted ones only when asked for), by kind then id.
    public func links(of item: String, includeDeleted: Bool = false) throws -> [LinkRow] {
        let item = try Projection.argument(item, "the item id")
        return try reading { db in
            try LinkRow.fetchAll(db, sql: """
                SELECT * FROM links WHERE (from_id = ? OR to_id = ?)\(includeDeleted ? "" : " AND deleted_at IS NULL")
                ORDER BY kind, id
                """, arguments: [item.lowercased(), item.lowercased()])
        }
    }
}
