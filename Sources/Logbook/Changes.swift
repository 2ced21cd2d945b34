import Domain
import EventLog
import Foundation

/// One field's new value in a typed mutation: a value, or `clear` (null).
///
/// Literals work where the value type allows them: `ItemValues(title: "Buy milk", sortOrder: 2)`.
public enum Edit<Value: Sendable & Equatable>: Sendable, Equatable {
    /// Set the field to this value.
    case set(Value)
    /// Clear the field (it becomes null).
    case clear
}

extension Edit: ExpressibleByUnicodeScalarLiteral where Value == String {
    /// `"text"` sets a text field.
    public init(unicodeScalarLiteral value: String) { self = .set(value) }
}

extension Edit: ExpressibleByExtendedGraphemeClusterLiteral where Value == String {
    /// `"text"` sets a text field.
    public init(extendedGraphemeClusterLiteral value: String) { self = .set(value) }
}

extension Edit: ExpressibleByStringLiteral where Value == String {
    /// `"text"` sets a text field.
    public init(stringLiteral value: String) { self = .set(value) }
}

extension Edit: ExpressibleByIntegerLiteral where Value == Double {
    /// `2` sets a number field.
    public init(integerLiteral value: Int) { self = .set(Double(value)) }
}

extension Edit: ExpressibleByFloatLiteral where Value == Double {
    /// `2.5` sets a number field.
    public init(floatLiteral value: Double) { self = .set(value) }
}

extension Edit: ExpressibleByBooleanLiteral where Value == Bool {
    /// `true` sets a boolean field.
    public init(booleanLiteral value: Bool) { self = .set(value) }
}

/// The typed fields of one entity kind: a Swift value per entity, each field typed as
/// `DomainSchema` declares it. A field left nil is not part of the mutation (an update leaves
/// it as it is); `.clear` sets it to null.
public protocol EntityValues: Sendable {
    /// The entity kind these values belong to.
    static var entity: Entity { get }
    /// The fields set, as the log stores them.
    var fields: [Field] { get }
    /// The id every replica gives this entity when it is named by its contents (an item_tag by
    /// its pair, a completion by its item and occurrence); nil for entities with their own ids.
    var derivedID: UUID? { get }
}

extension EntityValues {
    /// No derived id: the entity has its own.
    public var derivedID: UUID? { nil }
}

/// A day, as the date fields of occurrences hold it: `YYYY-MM-DD`.
public typealias Day = String

/// Turns typed edits into log fields (timestamps as ISO 8601 UTC with milliseconds).
struct FieldList {
    var fields: [Field] = []

    mutating func add(_ name: String, _ edit: Edit<String>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, .text(v)))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func add(_ name: String, _ edit: Edit<UUID>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, .text(v.lowercasedString)))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func add(_ name: String, _ edit: Edit<Double>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, v == v.rounded() && abs(v) < 9e15 ? .integer(Int64(v)) : .real(v)))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func add(_ name: String, _ edit: Edit<Int>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, .integer(Int64(v))))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func add(_ name: String, _ edit: Edit<Bool>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, .boolean(v)))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func add(_ name: String, _ edit: Edit<Date>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, .text(Timestamps.string(v))))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func require(_ name: String, _ value: UUID) { fields.append(Field(name, .text(value.lowercasedString))) }
    mutating func require(_ name: String, _ value: Day) { fields.append(Field(name, .text(value))) }
}

/// ISO 8601 text of dates, in UTC with milliseconds, as the log keeps timestamps.
public enum Timestamps {
    /// `2026-11-23T21:20:16.123Z`.
    public static func string(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: date)
    }
}

/// An item (a task, project, folder…): `items` in the projection.
public struct ItemValues: EntityValues, Equatable {
    /// The entity kind of these values.
    public static let entity = Entity.item
    /// The parent item (an item's place in the tree).
    public var parentID: Edit<UUID>?
    /// The `title` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var title: Edit<String>?
    /// The `notes` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var notes: Edit<String>?
    /// Free text such as `inbox`, `next`, `done`.
    public var status: Edit<String>?
    /// Free text such as `task`, `project`, `folder`.
    public var itemType: Edit<String>?
    /// The `sort_order` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var sortOrder: Edit<Double>?
    /// The `due_at` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var dueAt: Edit<Date>?
    /// The `earliest_start_at` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var earliestStartAt: Edit<Date>?
    /// The `completed_at` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var completedAt: Edit<Date>?
    /// An RFC 5545 RRULE.
    public var recurrenceRule: Edit<String>?
    /// The `priority` field (an integer; larger is more urgent).
    public var priority: Edit<Int>?
    /// The `importance` field (an integer; larger matters more).
    public var importance: Edit<Int>?
    /// The `location_name` field: a place's name.
    public var locationName: Edit<String>?
    /// The `location_address` field: a place's address.
    public var locationAddress: Edit<String>?
    /// The `latitude` field, in degrees.
    public var latitude: Edit<Double>?
    /// The `longitude` field, in degrees.
    public var longitude: Edit<Double>?
    /// Fields the schema does not describe: kept in the log, surfaced once a projection knows them.
    public var extra: [Field] = []

    /// Values with the given fields set; every other field is left out.
    public init(parentID: Edit<UUID>? = nil, title: Edit<String>? = nil, notes: Edit<String>? = nil, status: Edit<String>? = nil,
                itemType: Edit<String>? = nil, sortOrder: Edit<Double>? = nil, dueAt: Edit<Date>? = nil,
                earliestStartAt: Edit<Date>? = nil, completedAt: Edit<Date>? = nil, recurrenceRule: Edit<String>? = nil,
                priority: Edit<Int>? = nil, importance: Edit<Int>? = nil, locationName: Edit<String>? = nil,
                locationAddress: Edit<String>? = nil, latitude: Edit<Double>? = nil, longitude: Edit<Double>? = nil,
                extra: [Field] = []) {
        self.parentID = parentID
        self.title = title
        self.notes = notes
        self.status = status
        self.itemType = itemType
        self.sortOrder = sortOrder
        self.dueAt = dueAt
        self.earliestStartAt = earliestStartAt
        self.completedAt = completedAt
        self.recurrenceRule = recurrenceRule
        self.priority = priority
        self.importance = importance
        self.locationName = locationName
        self.locationAddress = locationAddress
        self.latitude = latitude
        self.longitude = longitude
        self.extra = extra
    }

    /// The fields set, as the log stores them.
    public var fields: [Field] {
        var l = FieldList()
        l.add("parent_id", parentID); l.add("title", title); l.add("notes", notes); l.add("status", status)
        l.add("item_type", itemType); l.add("sort_order", sortOrder); l.add("due_at", dueAt)
        l.add("earliest_start_at", earliestStartAt); l.add("completed_at", completedAt); l.add("recurrence_rule", recurrenceRule)
        l.add("priority", priority); l.add("importance", importance); l.add("location_name", locationName)
        l.add("location_address", locationAddress); l.add("latitude", latitude); l.add("longitude", longitude)
        return l.fields + extra
    }
}

/// A tag: `tags` in the projection.
public struct TagValues: EntityValues, Equatable {
    /// The entity kind of these values.
    public static let entity = Entity.tag
    /// The `name` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var name: Edit<String>?
    /// Free text such as `#30a46c`.
    public var color: Edit<String>?

    /// Values with the given fields set.
    public init(name: Edit<String>? = nil, color: Edit<String>? = nil) {
        self.name = name
        self.color = color
    }

    /// The fields set, as the log stores them.
    public var fields: [Field] {
        var l = FieldList()
        l.add("name", name); l.add("color", color)
        return l.fields
    }
}

/// An item carrying a tag: `item_tags`. Its id is derived from the pair, so every replica that
/// tags the same item with the same tag names the same entity.
public struct ItemTagValues: EntityValues, Equatable {
    /// The entity kind of these values.
    public static let entity = Entity.itemTag
    /// The `item_id` field (required; part of the entity's identity).
    public var itemID: UUID
    /// The `tag_id` field (required; part of the entity's identity).
    public var tagID: UUID

    /// The pair (item, tag).
    public init(item: UUID, tag: UUID) {
        itemID = item
        tagID = tag
    }

    /// The fields set, as the log stores them.
    public var fields: [Field] {
        var l = FieldList()
        l.require("item_id", itemID); l.require("tag_id", tagID)
        return l.fields
    }

    /// The id every replica derives from these values.
    public var derivedID: UUID? { FieldRules.itemTagID(item: itemID, tag: tagID) }
}

/// A directed link between two items: `links` in the projection (seed 001's edges). Follow links
/// with `Logbook.linked(from:depth:kinds:direction:)`.
public struct LinkValues: EntityValues, Equatable {
    /// The entity kind of these values.
    public static let entity = Entity.link
    /// The `from_id` field: the item the link starts at (required when the link is created).
    public var from: Edit<UUID>?
    /// The `to_id` field: the item the link points to (required when the link is created).
    public var to: Edit<UUID>?
    /// The `kind` field: LINK, NEST, SEQUENCE, AFFINITY or any text of your own.
    public var kind: Edit<String>?
    /// The `weight` field.
    public var weight: Edit<Double>?
    /// The `label` field.
    public var label: Edit<String>?

    /// A link from one item to another.
    public init(from: UUID, to: UUID, kind: Edit<String>? = nil, weight: Edit<Double>? = nil, label: Edit<String>? = nil) {
        self.from = .set(from)
        self.to = .set(to)
        self.kind = kind
        self.weight = weight
        self.label = label
    }

    /// Values for an update: only the fields given.
    public init(kind: Edit<String>? = nil, weight: Edit<Double>? = nil, label: Edit<String>? = nil) {
        self.kind = kind
        self.weight = weight
        self.label = label
    }

    /// The fields set, as the log stores them.
    public var fields: [Field] {
        var l = FieldList()
        l.add("from_id", from); l.add("to_id", to); l.add("kind", kind); l.add("weight", weight); l.add("label", label)
        return l.fields
    }
}

/// Time spent on an item: `time_entries`.
public struct TimeEntryValues: EntityValues, Equatable {
    /// The entity kind of these values.
    public static let entity = Entity.timeEntry
    /// The `item_id` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var itemID: Edit<UUID>?
    /// The `started_at` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var startedAt: Edit<Date>?
    /// The `ended_at` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var endedAt: Edit<Date>?
    /// The `duration_seconds` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var durationSeconds: Edit<Double>?

    /// Values with the given fields set (a create names its item).
    public init(itemID: Edit<UUID>? = nil, startedAt: Edit<Date>? = nil, endedAt: Edit<Date>? = nil, durationSeconds: Edit<Double>? = nil) {
        self.itemID = itemID
        self.startedAt = startedAt
        self.endedAt = endedAt
        self.durationSeconds = durationSeconds
    }

    /// The fields set, as the log stores them.
    public var fields: [Field] {
        var l = FieldList()
        l.add("item_id", itemID); l.add("started_at", startedAt); l.add("ended_at", endedAt); l.add("duration_seconds", durationSeconds)
        return l.fields
    }
}

/// A saved search: `saved_searches`.
public struct SavedSearchValues: EntityValues, Equatable {
    /// The entity kind of these values.
    public static let entity = Entity.savedSearch
    /// The `name` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var name: Edit<String>?
    /// The `query` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var query: Edit<String>?
    /// The `sort_order` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var sortOrder: Edit<Double>?

    /// Values with the given fields set.
    public init(name: Edit<String>? = nil, query: Edit<String>? = nil, sortOrder: Edit<Double>? = nil) {
        self.name = name
        self.query = query
        self.sortOrder = sortOrder
    }

    /// The fields set, as the log stores them.
    public var fields: [Field] {
        var l = FieldList()
        l.add("name", name); l.add("query", query); l.add("sort_order", sortOrder)
        return l.fields
    }
}

/// One completed occurrence of a recurring item: `completion_history`. Named by (item, original
/// occurrence date), like every replica names it.
public struct CompletionValues: EntityValues, Equatable {
    /// The entity kind of these values.
    public static let entity = Entity.completion
    /// The `item_id` field: the item this belongs to (required).
    public var itemID: UUID
    /// The occurrence's scheduled day (`YYYY-MM-DD`), its identity.
    public var originalOccurrenceDate: Day
    /// The day it was done on, when it differs.
    public var occurrenceDate: Edit<Day>?
    /// The `completed_at` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var completedAt: Edit<Date>?
    /// The `notes` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var notes: Edit<String>?

    /// The occurrence of `item` scheduled on `originalOccurrenceDate`.
    public init(item: UUID, originalOccurrenceDate: Day, occurrenceDate: Edit<Day>? = nil, completedAt: Edit<Date>? = nil,
                notes: Edit<String>? = nil) {
        itemID = item
        self.originalOccurrenceDate = originalOccurrenceDate
        self.occurrenceDate = occurrenceDate
        self.completedAt = completedAt
        self.notes = notes
    }

    /// The fields set, as the log stores them.
    public var fields: [Field] {
        var l = FieldList()
        l.require("item_id", itemID); l.require("original_occurrence_date", originalOccurrenceDate)
        l.add("occurrence_date", occurrenceDate); l.add("completed_at", completedAt); l.add("notes", notes)
        return l.fields
    }

    /// The id every replica derives from these values.
    public var derivedID: UUID? { FieldRules.occurrenceID(.completion, item: itemID, originalDate: originalOccurrenceDate) }
}

/// A skipped or rescheduled occurrence of a recurring item: `recurrence_exceptions`.
public struct RecurrenceExceptionValues: EntityValues, Equatable {
    /// The entity kind of these values.
    public static let entity = Entity.recurrenceException
    /// The `item_id` field: the item this belongs to (required).
    public var itemID: UUID
    /// The occurrence's scheduled day (`YYYY-MM-DD`), part of its identity.
    public var originalOccurrenceDate: Day
    /// `skip` or `reschedule`.
    public var kind: Edit<String>?
    /// The `rescheduled_to` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var rescheduledTo: Edit<Day>?
    /// The `due_at` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var dueAt: Edit<Date>?
    /// The `notes` field: nil leaves it out of the mutation, `.clear` sets it to null.
    public var notes: Edit<String>?

    /// The exception for the occurrence of `item` scheduled on `originalOccurrenceDate`.
    public init(item: UUID, originalOccurrenceDate: Day, kind: Edit<String>? = nil, rescheduledTo: Edit<Day>? = nil,
                dueAt: Edit<Date>? = nil, notes: Edit<String>? = nil) {
        itemID = item
        self.originalOccurrenceDate = originalOccurrenceDate
        self.kind = kind
        self.rescheduledTo = rescheduledTo
        self.dueAt = dueAt
        self.notes = notes
    }

    /// The fields set, as the log stores them.
    public var fields: [Field] {
        var l = FieldList()
        l.require("item_id", itemID); l.require("original_occurrence_date", originalOccurrenceDate)
        l.add("kind", kind); l.add("rescheduled_to", rescheduledTo); l.add("due_at", dueAt); l.add("notes", notes)
        return l.fields
    }

    /// The id every replica derives from these values.
    public var derivedID: UUID? { FieldRules.occurrenceID(.recurrenceException, item: itemID, originalDate: originalOccurrenceDate) }
}

/// One change to append: a typed mutation. Build it with `create`, `update`, `delete` or
/// `restore`; several land together, atomically, through `Logbook.append(_:)`.
public struct Change: Sendable, Equatable {
    /// The mutation as the log takes it.
    public var mutation: Mutation

    /// Wraps a mutation built by hand (its fields are checked when appended).
    public init(_ mutation: Mutation) { self.mutation = mutation }

    /// Creates an entity (or brings back one created before). The id is the values' derived id
    /// when the entity is named by its contents (item_tag, completion, recurrence_exception),
    /// else `id`, a new random one by default.
    public static func create<V: EntityValues>(_ values: V, id: UUID = UUID()) -> Change {
        Change(Mutation(entity: V.entity, op: .create, entityID: values.derivedID ?? id, fields: sorted(values.fields)))
    }

    /// Sets the fields `values` holds on entity `id`, leaving the others as they are.
    public static func update<V: EntityValues>(_ id: UUID, _ values: V) -> Change {
        Change(Mutation(entity: V.entity, op: .update, entityID: id, fields: sorted(values.fields)))
    }

    /// Soft-deletes an entity (the log keeps everything; `restore` brings it back).
    public static func delete(_ entity: Entity, _ id: UUID) -> Change {
        Change(Mutation(entity: entity, op: .delete, entityID: id))
    }

    /// Restores a soft-deleted entity.
    public static func restore(_ entity: Entity, _ id: UUID) -> Change {
        Change(Mutation(entity: entity, op: .restore, entityID: id))
    }

    /// Tags an item.
    public static func tag(_ item: UUID, with tag: UUID) -> Change { create(ItemTagValues(item: item, tag: tag)) }

    /// Takes a tag off an item.
    public static func untag(_ item: UUID, from tag: UUID) -> Change {
        var m = Mutation(entity: .itemTag, op: .delete, entityID: FieldRules.itemTagID(item: item, tag: tag))
        m.fields = sorted(ItemTagValues(item: item, tag: tag).fields)
        return Change(m)
    }

    /// With an event id: appending the same change twice (a retry after a crash) appends it once.
    public func withEventID(_ id: UUID) -> Change {
        var c = self
        c.mutation.eventID = id
        return c
    }

    /// With the actor (user or device) the change is made on behalf of.
    public func by(_ actor: String) -> Change {
        var c = self
        c.mutation.actor = actor
        return c
    }

    static func sorted(_ fields: [Field]) -> [Field] { fields.sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) } }
}
