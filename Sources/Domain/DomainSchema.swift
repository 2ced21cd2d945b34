import EventLog

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

    /// A field; `isColumn` says whether the projection gives it a column.
    public init(_ name: String, _ kind: FieldKind, nullable: Bool = true, column: Bool = true) {
        self.name = name
        self.kind = kind
        self.nullable = nullable
        self.isColumn = column
    }
}

/// One entity of the domain: the table the projection fills with it and its fields.
public struct EntitySpec: Sendable {
    /// The entity kind events carry.
    public var entity: Entity
    /// The projected table's name.
    public var table: String
    /// The entity's fields, columns in column order. Every table also has `id`, `version`,
    /// `created_at`, `modified_at`, `deleted_at` and `_clocks`.
    public var fields: [FieldSpec]

    /// The names of the fields that are columns, in column order.
    public var columns: [String] { fields.filter(\.isColumn).map(\.name) }

    /// The spec of one field of this entity, if it has it.
    public func field(_ name: String) -> FieldSpec? { fields.first { $0.name == name } }
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
        EntitySpec(entity: .item, table: "items", fields: [
            FieldSpec("parent_id", .uuid), FieldSpec("title", .text), FieldSpec("notes", .text), FieldSpec("status", .text),
            FieldSpec("item_type", .text), FieldSpec("sort_order", .number), FieldSpec("due_at", .timestamp),
            FieldSpec("earliest_start_at", .timestamp), FieldSpec("completed_at", .timestamp), FieldSpec("recurrence_rule", .text),
            // Since projection migration "v3 priority, place, query indexes" (seed 001's LATCH fields).
            FieldSpec("priority", .integer), FieldSpec("importance", .integer), FieldSpec("location_name", .text),
            FieldSpec("location_address", .text), FieldSpec("latitude", .number), FieldSpec("longitude", .number),
        ]),
        EntitySpec(entity: .tag, table: "tags", fields: [FieldSpec("name", .text), FieldSpec("color", .text)]),
        EntitySpec(entity: .itemTag, table: "item_tags", fields: [
            FieldSpec("item_id", .uuid, nullable: false), FieldSpec("tag_id", .uuid, nullable: false),
        ]),
        EntitySpec(entity: .timeEntry, table: "time_entries", fields: [
            FieldSpec("item_id", .uuid, nullable: false), FieldSpec("started_at", .timestamp), FieldSpec("ended_at", .timestamp),
            FieldSpec("duration_seconds", .number), FieldSpec("note", .text, column: false),
        ]),
        EntitySpec(entity: .savedSearch, table: "saved_searches", fields: [
            FieldSpec("name", .text), FieldSpec("query", .text), FieldSpec("sort_order", .number),
            FieldSpec("is_pinned", .boolean, column: false),
        ]),
        EntitySpec(entity: .completion, table: "completion_history", fields: [
            FieldSpec("item_id", .uuid, nullable: false), FieldSpec("original_occurrence_date", .date, nullable: false),
            FieldSpec("occurrence_date", .date), FieldSpec("completed_at", .timestamp), FieldSpec("notes", .text),
            FieldSpec("user_id", .text, column: false),
        ]),
        EntitySpec(entity: .recurrenceException, table: "recurrence_exceptions", fields: [
            FieldSpec("item_id", .uuid, nullable: false), FieldSpec("original_occurrence_date", .date, nullable: false),
            FieldSpec("kind", .text), FieldSpec("rescheduled_to", .date), FieldSpec("due_at", .timestamp), FieldSpec("notes", .text),
            FieldSpec("user_id", .text, column: false),
        ]),
        // Event schema version 2: a directed link between two items (seed 001's edges). `kind` is
        // open (LINK, NEST, SEQUENCE, AFFINITY, …); traversals follow links that are not deleted.
        EntitySpec(entity: .link, table: "links", fields: [
            FieldSpec("from_id", .uuid, nullable: false), FieldSpec("to_id", .uuid, nullable: false), FieldSpec("kind", .text),
            FieldSpec("weight", .number), FieldSpec("label", .text),
        ]),
    ]

    /// Fields every entity may carry: the time the app says the entity was created.
    public static let common: [FieldSpec] = [FieldSpec("created_at", .timestamp, column: false)]

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
