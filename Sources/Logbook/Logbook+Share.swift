import EventLog
import Foundation
import Domain
import GRDB
import Projections

/// A share as this replica knows it (docs/SHARING.md).
public struct ShareInfo: Sendable, Equatable {
    public let id: ShareID
    public let name: String
    /// The replica that created the share and alone changes its members.
    public let admin: ReplicaID
    /// Current members (the admin among them).
    public let members: [ReplicaID]
    /// The newest content key epoch (one more per removal).
    public let epoch: UInt32
    /// Whether this replica holds the newest key (it can read and write the share).
    public let holdsKey: Bool
    /// Whether the share was deleted (its keys are destroyed here).
    public let deleted: Bool
    /// Membership records that were skipped, and why (the first `ShareState.problemsMax`).
    public let problems: [String]
    /// Skipped records past those listed.
    public let problemsNotListed: Int
}

extension Logbook {
    /// Shares whose membership logs this store holds.
    package func shares() throws -> [ShareInfo] {
        let ring = try ShareKeyring.of(store)
        return try ShareDirectory.shares(store).values.sorted { $0.share < $1.share }.map { s in
            ShareInfo(id: s.share, name: s.name, admin: s.adminID, members: s.members.keys.sorted(), epoch: s.epoch,
                      holdsKey: ring.key(s.share, epoch: s.epoch) != nil, deleted: s.deleted || ring.isDeleted(s.share), problems: s.problems,
                      problemsNotListed: s.problemsNotListed)
        }
    }

    /// This replica's member card, which a share's admin adds it by; nil for an unsigned store.
    package func memberCard() throws -> MemberCard? { try store.signingKey(op: "share")?.memberCard }

    private func sharing<T>(_ op: String, _ body: (LogAppender) throws -> T) throws -> T {
        let w = try requireWriter(op)
        return try w.exclusive {
            let r = try body(w.appender)
            if w.projects { _ = try w.catchUp() }
            return r
        }
    }

    package func createShare(name: String) throws -> ShareID {
        guard !name.isEmpty, name.utf8.count <= FieldRules.textBytesMax else { throw LogbookError(.invalid, "a share's name is 1 to \(FieldRules.textBytesMax) bytes") }
        return try sharing("share create") { try $0.createShare(name: name) }
    }
    package func addMember(_ card: MemberCard, to share: ShareID) throws { try sharing("share add") { try $0.addMember(card, to: share) } }
    package func removeMember(_ member: ReplicaID, from share: ShareID) throws { try sharing("share remove") { try $0.removeMember(member, from: share) } }
    package func deleteShare(_ share: ShareID) throws { try sharing("share delete") { try $0.deleteShare(share) } }
    package func setRelay(_ on: Bool) throws { try sharing(on ? "share relay" : "share relay --off") { try ShareDirectory.setRelay($0.store, on) } }
    package var isRelay: Bool { ShareDirectory.isRelay(store) }
    package func leaveShare(_ share: ShareID) throws { try sharing("share leave") { try ShareDirectory.leave($0.store, share: share) } }

    /// Drops deleted `share`'s sealed logs from this store (`evctl purge --share`; docs/SHARING.md,
    /// "Purge"): its ciphertext is removed from disk, its frames are declined from then on, and
    /// the projection forgets how far it read them. Refused for a share not deleted.
    package func purgeShare(_ share: ShareID) throws -> SharePurgeResult {
        let w = try requireWriter("purge --share")
        return try w.exclusive {
            let r = try w.appender.purgeShare(share)
            try w.projection.forget(origins: r.recorded)
            return r
        }
    }

    /// Appends `mutations` (checked like any append) to this replica's sealed log of `share`.
    package func append(mutations: [Mutation], toShare share: ShareID) throws -> ReceiveResult {
        var ms = mutations
        for i in ms.indices {
            try FieldRules.validate(ms[i], position: i + 1)
            FieldRules.normalize(&ms[i])
        }
        let w = try requireWriter("share append")
        return try sharing("share append") { appender in
            try w.projection.checkScopes(ms, share: share)
            try w.projection.fillBases(&ms)
            return try appender.appendShared(ms, to: share)
        }
    }
}

extension Logbook {
    /// The rows one move writes at most (an item's subtree and what hangs on it).
    static let moveRowsMax = 10_000

    /// Moves item `root` and its subtree into `destination` (a share; nil: this replica's private
    /// data) by the move rule (docs/PROJECTION.md, "Shares: one scope per row"): each row is
    /// written anew in the destination under an id derived from its own and the destination's
    /// (so a retried move writes the same rows), with its current values, then deleted where it
    /// was. Moved with the items: their item tags (and the tags they name, copied, as tags are
    /// rows of a scope too), time entries, completions, recurrence exceptions, and links between
    /// moved items. Items under `root` of another scope than its own stay where they are.
    /// - Returns: each moved row's new id, by its old one.
    package func moveItem(_ root: UUID, to destination: ShareID?) throws -> [UUID: UUID] {
        let w = try requireWriter("move")
        return try w.exclusive {
            let p = w.projection
            let source = try p.share(of: .item, id: root)
            guard try !p.items(under: root.lowercasedString, limit: 1).isEmpty else {
                throw LogbookError(.notFound, "no item \(root.lowercasedString) to move")
            }
            guard source != destination else {
                throw LogbookError(.invalid, "item \(root.lowercasedString) is already in \(destination.map { "share \($0)" } ?? "this replica's private data")")
            }
            let subtree = try p.items(under: root.lowercasedString, limit: Self.moveRowsMax + 1)
            guard subtree.count <= Self.moveRowsMax else {
                throw LogbookError(.invalid, "item \(root.lowercasedString) has more than \(Self.moveRowsMax) items under it: move parts of it")
            }
            var moved = Set<String>()
            for item in subtree {
                guard let id = UUID(uuidString: item.id), try p.share(of: .item, id: id) == source else { continue }
                moved.insert(item.id)
            }
            let scopeName = destination.map { "share:\($0)" } ?? "private"
            func newID(_ old: String) -> UUID {
                UUIDv5.make(namespace: Self.moveNamespace, name: Array("\(scopeName):\(old.lowercased())".utf8))
            }
            var creates: [Mutation] = [], deletes: [Mutation] = []
            var renamed: [UUID: UUID] = [:]
            try p.read { db in
                let list = String(data: try JSONSerialization.data(withJSONObject: moved.sorted()), encoding: .utf8) ?? "[]"
                var tags = Set<String>()
                for table in p.schema.tables {
                    let sql: String
                    switch table.entity {
                    case .item: sql = "SELECT * FROM items WHERE id IN (SELECT value FROM json_each(?)) AND deleted_at IS NULL"
                    case .itemTag, .timeEntry, .completion, .recurrenceException:
                        sql = "SELECT * FROM \(table.name) WHERE item_id IN (SELECT value FROM json_each(?)) AND deleted_at IS NULL"
                    case .link: sql = "SELECT * FROM links WHERE from_id IN (SELECT value FROM json_each(?)) AND to_id IN (SELECT value FROM json_each(?)) AND deleted_at IS NULL"
                    default: continue
                    }
                    for row in try Row.fetchAll(db, sql: sql, arguments: StatementArguments(Array(repeating: list, count: table.entity == .link ? 2 : 1))) {
                        guard let oldText: String = row["id"], let old = UUID(uuidString: oldText) else { continue }
                        var fields: [Field] = []
                        for c in table.columns {
                            guard var v = Self.fieldValue(row[c] as DatabaseValue) else { continue }
                            if ["item_id", "parent_id", "from_id", "to_id"].contains(c), case .text(let ref) = v {
                                if moved.contains(ref.lowercased()) {
                                    v = .text(newID(ref).lowercasedString)
                                } else if c == "parent_id" {
                                    continue  // the moved root: at the top of the destination
                                }
                            }
                            if c == "tag_id", case .text(let tag) = v {
                                tags.insert(tag.lowercased())
                                v = .text(newID(tag).lowercasedString)
                            }
                            fields.append(Field(c, v))
                        }
                        let id: UUID
                        switch table.entity {
                        case .itemTag:
                            guard let item: String = row["item_id"], let tag: String = row["tag_id"] else { continue }
                            id = FieldRules.itemTagID(item: newID(item), tag: newID(tag))
                        case .completion, .recurrenceException:
                            guard let item: String = row["item_id"], let date: String = row["original_occurrence_date"] else { continue }
                            id = FieldRules.occurrenceID(table.entity, item: newID(item), originalDate: date)
                        default:
                            id = newID(oldText)
                        }
                        renamed[old] = id
                        creates += Self.withinBound(Mutation(entity: table.entity, op: .create, entityID: id, fields: fields.sorted { $0.name < $1.name }))
                        deletes.append(Mutation(entity: table.entity, op: .delete, entityID: old))
                    }
                }
                // The tags the moved items carry, copied (each scope has its own rows).
                if !tags.isEmpty, let table = p.schema.table(for: .tag) {
                    let tagList = String(data: try JSONSerialization.data(withJSONObject: tags.sorted()), encoding: .utf8) ?? "[]"
                    for row in try Row.fetchAll(db, sql: "SELECT * FROM tags WHERE id IN (SELECT value FROM json_each(?))", arguments: [tagList]) {
                        guard let oldText: String = row["id"], let old = UUID(uuidString: oldText) else { continue }
                        let fields = table.columns.compactMap { c in Self.fieldValue(row[c] as DatabaseValue).map { Field(c, $0) } }
                        renamed[old] = newID(oldText)
                        creates.insert(Mutation(entity: .tag, op: .create, entityID: newID(oldText), fields: fields.sorted { $0.name < $1.name }), at: 0)
                    }
                }
            }
            // The new rows first: a move cut short leaves both, never neither.
            if let destination { _ = try append(mutations: creates, toShare: destination) } else { try append(mutations: creates) }
            if let source { _ = try append(mutations: deletes, toShare: source) } else { try append(mutations: deletes) }
            return renamed
        }
    }

    /// `m`, a row written anew, as events each within `FieldRules.eventBytesMax`: the row's
    /// columns came from valid events, each within the bound, but together may pass it (seven
    /// texts of an item, up to 256 KiB each). Then its fields are laid out in order into the
    /// create and updates of the same entity after it, each as full as the bound allows; a
    /// create's identity fields (an item tag's pair, an occurrence's item and day) are small, and
    /// come first in a create of their entity's fields.
    static func withinBound(_ m: Mutation) -> [Mutation] {
        guard FieldRules.eventBytes(m) > FieldRules.eventBytesMax else { return [m] }
        var out: [Mutation] = []
        var current = Mutation(entity: m.entity, op: m.op, entityID: m.entityID, actor: m.actor)
        var bytes = current.actor?.utf8.count ?? 0
        for f in m.fields {
            let n = FieldRules.valueBytes(f.name, f.value)
            if bytes + n > FieldRules.eventBytesMax && !current.fields.isEmpty {
                out.append(current)
                current = Mutation(entity: m.entity, op: .update, entityID: m.entityID, actor: m.actor)
                bytes = current.actor?.utf8.count ?? 0
            }
            current.fields.append(f)
            bytes += n
        }
        out.append(current)
        return out
    }

    /// The namespace of the ids a move derives (UUIDv5 of "<destination>:<old id>").
    static let moveNamespace = UUID(uuidString: "6d6f7665-0000-5000-8000-6c6f67626f6f")!

    static func fieldValue(_ v: DatabaseValue) -> FieldValue? {
        switch v.storage {
        case .null, .blob: nil
        case .int64(let i): .integer(i)
        case .double(let d): .real(d)
        case .string(let s): .text(s)
        }
    }
}
