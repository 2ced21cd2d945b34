import EventLog
import Foundation

/// One field of the domain: its name, what it may hold, and whether it is a column of its
/// entity's projected table.
public struct FieldSpec: Sendable, Equatable {
    /// The field's name in events and in NDJSON (`parent_id`).
    public var name: String
    /// What the field may hold; checked when a mutation comes in.
    public var kind: FieldKind
    /// Whether `null` is allowed (it clears the field).
    public var nullable: Bool
    /// Whether the projection keeps the field as a column of the entity's table. A field that is
    /// not a column is still kept in the log and checked on the way in.
    public var isColumn: Bool
    /// Whether the field is part of what names the entity (an item_tag's pair, an occurrence's
    /// item and day): given whole when the entity is made, never changed.
    public var isIdentity: Bool
    /// The name of the field in Swift (`parentID`); from `name` unless given.
    public var swiftName: String
    /// What the field means, for the documentation of the Swift types made from this schema.
    public var doc: String

    /// A field; `column` says whether the projection gives it a column, `identity` whether it
    /// is part of the entity's derived id.
    public init(_ name: String, _ kind: FieldKind, nullable: Bool = true, column: Bool = true, identity: Bool = false,
                swift: String? = nil, _ doc: String = "") {
        self.name = name
        self.kind = kind
        self.nullable = nullable
        self.isColumn = column
        self.isIdentity = identity
        self.swiftName = swift ?? FieldSpec.swiftName(of: name)
        self.doc = doc
    }

    /// `parent_id` → `parentID`, `due_at` → `dueAt`: lower camel case, `id` as `ID`.
    public static func swiftName(of name: String) -> String {
        let parts = name.split(separator: "_").map(String.init)
        guard let first = parts.first else { return name }
        return first + parts.dropFirst().map { $0 == "id" ? "ID" : $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
    }
}

/// How an entity is named: by an id of its own, or by an id every replica derives from its
/// contents (so two replicas that make the same one offline name it alike).
public enum EntityIdentity: Sendable, Equatable {
    /// A random id given when it is created.
    case own
    /// A UUIDv5 of its pair (`item_id`, `tag_id`): `FieldRules.itemTagID`.
    case pair
    /// A UUIDv5 of (entity, `item_id`, `original_occurrence_date`): `FieldRules.occurrenceID`.
    case occurrence
}

/// One entity of the domain: the table the projection fills with it and its fields.
public struct EntitySpec: Sendable {
    /// The entity kind events carry.
    public var entity: Entity
    /// The projected table's name.
    public var table: String
    /// The name of the entity's Swift type (`Item`).
    public var typeName: String
    /// How the entity is named.
    public var identity: EntityIdentity
    /// What the entity is, for the documentation of its Swift type.
    public var doc: String
    /// The entity's fields, columns in column order. Every table also has `id`, `version`,
    /// `created_at`, `modified_at`, `deleted_at` and `_clocks`.
    public var fields: [FieldSpec]

    /// An entity: its kind, table, Swift type name and fields.
    public init(_ entity: Entity, table: String, type: String, identity: EntityIdentity = .own, _ doc: String, fields: [FieldSpec]) {
        self.entity = entity
        self.table = table
        self.typeName = type
        self.identity = identity
        self.doc = doc
        self.fields = fields
    }

    /// The names of the fields that are columns, in column order.
    public var columns: [String] { fields.filter(\.isColumn).map(\.name) }

    /// The spec of one field of this entity, if it has it.
    public func field(_ name: String) -> FieldSpec? { fields.first { $0.name == name } }

    /// The id every replica derives for this entity from `fields`, or nil when the entity has
    /// ids of its own or the fields do not name one.
    public func derivedID(_ fields: [Field]) -> UUID? {
        switch identity {
        case .own: return nil
        case .pair: return FieldRules.pairID(fields)
        case .occurrence:
            guard case .text(let i)? = fields.first(where: { $0.name == "item_id" })?.value,
                  case .text(let day)? = fields.first(where: { $0.name == "original_occurrence_date" })?.value,
                  let item = UUIDText.parse(i) else { return nil }
            return FieldRules.occurrenceID(entity, item: item, originalDate: day)
        }
    }
}

/// The task-manager domain described once: the entities, their fields and what each may hold,
/// and which fields become columns. The input rules (`FieldRules`), the projection's tables
/// (`ProjectionSchema`) and the typed mutations of the Logbook module all read it from here.
///
/// Fields are checked by name, whatever the entity: a name means the same thing everywhere
/// (`sort_order` is a number in items and in saved searches). A field no entity declares may hold
/// any scalar; it is kept in the log and surfaces once a projection knows it.
public enum DomainSchema {
    /// Every entity, in the order of `Entity.allCases`.
    public static let entities: [EntitySpec] = [
        EntitySpec(.item, table: "items", type: "Item", "An item (a task, project, folder…): `items` in the projection.", fields: [
            FieldSpec("parent_id", .uuid, "The parent item (the item's place in the tree)."),
            FieldSpec("title", .text, "The title."),
            FieldSpec("notes", .text, "Free notes."),
            FieldSpec("status", .text, "Free text such as `inbox`, `next`, `done`."),
            FieldSpec("item_type", .text, "Free text such as `task`, `project`, `folder`."),
            FieldSpec("sort_order", .number, "The place among its siblings."),
            FieldSpec("due_at", .timestamp, "When it is due."),
            FieldSpec("earliest_start_at", .timestamp, "When it can start at the earliest."),
            FieldSpec("completed_at", .timestamp, "When it was completed."),
            FieldSpec("recurrence_rule", .text, "An RFC 5545 RRULE."),
            // Since projection migration "v3 priority, place, query indexes" (seed 001's LATCH fields).
            FieldSpec("priority", .integer, "How urgent it is; larger is more urgent."),
            FieldSpec("importance", .integer, "How much it matters; larger matters more."),
            FieldSpec("location_name", .text, "A place's name."),
            FieldSpec("location_address", .text, "A place's address."),
            FieldSpec("latitude", .number, "The place's latitude, in degrees."),
            FieldSpec("longitude", .number, "The place's longitude, in degrees."),
        ]),
        EntitySpec(.tag, table: "tags", type: "Tag", "A tag: `tags` in the projection.", fields: [
            FieldSpec("name", .text, "The tag's name."),
            FieldSpec("color", .text, "Free text such as `#30a46c`."),
        ]),
        EntitySpec(.itemTag, table: "item_tags", type: "ItemTag", identity: .pair,
                   "An item carrying a tag: `item_tags`. Its id is derived from the pair, so every replica that tags the same item with the same tag names the same entity.",
                   fields: [
            FieldSpec("item_id", .uuid, nullable: false, identity: true, "The item tagged."),
            FieldSpec("tag_id", .uuid, nullable: false, identity: true, "The tag it carries."),
        ]),
        EntitySpec(.timeEntry, table: "time_entries", type: "TimeEntry", "Time spent on an item: `time_entries`.", fields: [
            FieldSpec("item_id", .uuid, nullable: false, "The item the time was spent on (required when the entry is created)."),
            FieldSpec("started_at", .timestamp, "When the time began."),
            FieldSpec("ended_at", .timestamp, "When the time ended."),
            FieldSpec("duration_seconds", .number, "How long, in seconds."),
            FieldSpec("note", .text, column: false, "A note (kept in the log, not a column)."),
        ]),
        EntitySpec(.savedSearch, table: "saved_searches", type: "SavedSearch", "A saved search: `saved_searches`.", fields: [
            FieldSpec("name", .text, "The search's name."),
            FieldSpec("query", .text, "The query text."),
            FieldSpec("sort_order", .number, "The place among the saved searches."),
            FieldSpec("is_pinned", .boolean, column: false, "Whether it is pinned (kept in the log, not a column)."),
        ]),
        EntitySpec(.completion, table: "completion_history", type: "Completion", identity: .occurrence,
                   "One completed occurrence of a recurring item: `completion_history`. Named by (item, original occurrence date), as every replica names it.",
                   fields: [
            FieldSpec("item_id", .uuid, nullable: false, identity: true, "The recurring item."),
            FieldSpec("original_occurrence_date", .date, nullable: false, identity: true, "The occurrence's scheduled day (`YYYY-MM-DD`), part of its identity."),
            FieldSpec("occurrence_date", .date, "The day it was done on, when it differs."),
            FieldSpec("completed_at", .timestamp, "When it was completed."),
            FieldSpec("notes", .text, "Free notes."),
            FieldSpec("user_id", .text, column: false, "Who completed it (kept in the log, not a column)."),
        ]),
        EntitySpec(.recurrenceException, table: "recurrence_exceptions", type: "RecurrenceException", identity: .occurrence,
                   "A skipped or rescheduled occurrence of a recurring item: `recurrence_exceptions`.", fields: [
            FieldSpec("item_id", .uuid, nullable: false, identity: true, "The recurring item."),
            FieldSpec("original_occurrence_date", .date, nullable: false, identity: true, "The occurrence's scheduled day (`YYYY-MM-DD`), part of its identity."),
            FieldSpec("kind", .text, "`skip` or `reschedule`."),
            FieldSpec("rescheduled_to", .date, "The day it moves to."),
            FieldSpec("due_at", .timestamp, "When the moved occurrence is due."),
            FieldSpec("notes", .text, "Free notes."),
            FieldSpec("user_id", .text, column: false, "Who made the exception (kept in the log, not a column)."),
        ]),
        // Event schema version 2: a directed link between two items (seed 001's edges). `kind` is
        // open (LINK, NEST, SEQUENCE, AFFINITY, …); traversals follow links that are not deleted.
        EntitySpec(.link, table: "links", type: "Link",
                   "A directed link between two items: `links` in the projection (seed 001's edges). Follow links with `linked(from:depth:kinds:direction:)`.",
                   fields: [
            FieldSpec("from_id", .uuid, nullable: false, swift: "from", "The item the link starts at (required when the link is created)."),
            FieldSpec("to_id", .uuid, nullable: false, swift: "to", "The item the link points to (required when the link is created)."),
            FieldSpec("kind", .text, "LINK, NEST, SEQUENCE, AFFINITY or any text of your own."),
            FieldSpec("weight", .number, "The link's weight."),
            FieldSpec("label", .text, "The link's label."),
        ]),
    ]

    /// Fields every entity may carry: the time the app says the entity was created.
    public static let common: [FieldSpec] = [FieldSpec("created_at", .timestamp, column: false, "When the app says the entity was created.")]

    /// The spec of an entity.
    public static func spec(for entity: Entity) -> EntitySpec {
        guard let s = entities.first(where: { $0.entity == entity }) else { preconditionFailure("DomainSchema has no \(entity.name)") }
        return s
    }

    /// The rule of every field name the domain declares. A name declared by several entities has
    /// one rule; `DomainSchemaTests` checks they agree, and the first declaration wins.
    public static let fieldRules: [String: FieldSpec] = {
        var rules: [String: FieldSpec] = [:]
        for f in common + entities.flatMap(\.fields) where rules[f.name] == nil { rules[f.name] = f }
        return rules
    }()
}
