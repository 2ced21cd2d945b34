// Made from DomainSchema by `make generate` (Sources/EntitySource; EntitySourceTests checks it):
// do not edit; change Sources/Domain/DomainSchema.swift and run it again.

import Domain
import EventLog
import Foundation
import GRDB

/// An item (a task, project, folder…): `items` in the projection.
///
/// Read from the projection with every column typed as `DomainSchema` declares it; written with
/// `Item.Values`, or from a record: `Change.create(record)`, `Change.update(from: old, to: new)`.
public struct Item: EntityRecord {
    /// The entity kind this record holds.
    public static let entity = Entity.item
    /// The entity's id.
    public var id: UUID
    /// The parent item (the item's place in the tree).
    public var parentID: UUID?
    /// The title.
    public var title: String?
    /// Free notes.
    public var notes: String?
    /// Free text such as `inbox`, `next`, `done`.
    public var status: String?
    /// Free text such as `task`, `project`, `folder`.
    public var itemType: String?
    /// The place among its siblings.
    public var sortOrder: Double?
    /// When it is due.
    public var dueAt: Date?
    /// When it can start at the earliest.
    public var earliestStartAt: Date?
    /// When it was completed.
    public var completedAt: Date?
    /// An RFC 5545 RRULE.
    public var recurrenceRule: String?
    /// How urgent it is; larger is more urgent.
    public var priority: Int?
    /// How much it matters; larger matters more.
    public var importance: Int?
    /// A place's name.
    public var locationName: String?
    /// A place's address.
    public var locationAddress: String?
    /// The place's latitude, in degrees.
    public var latitude: Double?
    /// The place's longitude, in degrees.
    public var longitude: Double?
    /// The hybrid-logical-clock stamp of the newest event applied: the entity's version.
    public internal(set) var version: Int64
    /// When the app says the entity was created.
    public internal(set) var createdAt: Date?
    /// When the projection last changed it.
    public internal(set) var modifiedAt: Date?
    /// When it was soft-deleted; nil while it is live.
    public internal(set) var deletedAt: Date?
    /// Columns whose stored value is not what the schema declares (an event written
    /// before a rule existed): their property is nil (a zero UUID when required).
    public internal(set) var undecodable: [String]
    /// A record made in code (to create with `Change.create(_:)`).
    public init(id: UUID = UUID(), parentID: UUID? = nil, title: String? = nil, notes: String? = nil, status: String? = nil, itemType: String? = nil, sortOrder: Double? = nil, dueAt: Date? = nil, earliestStartAt: Date? = nil, completedAt: Date? = nil, recurrenceRule: String? = nil, priority: Int? = nil, importance: Int? = nil, locationName: String? = nil, locationAddress: String? = nil, latitude: Double? = nil, longitude: Double? = nil) {
        self.id = id
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
        version = 0
        undecodable = []
    }

    /// Decodes a row of `items`; a value that is not what its column declares is listed
    /// in `undecodable`, never trapped on or thrown.
    public init(row: Row) {
        var r = RecordRow(row)
        id = r.requiredUUID("id")
        parentID = r.uuid("parent_id")
        title = r.text("title")
        notes = r.text("notes")
        status = r.text("status")
        itemType = r.text("item_type")
        sortOrder = r.double("sort_order")
        dueAt = r.date("due_at")
        earliestStartAt = r.date("earliest_start_at")
        completedAt = r.date("completed_at")
        recurrenceRule = r.text("recurrence_rule")
        priority = r.int("priority")
        importance = r.int("importance")
        locationName = r.text("location_name")
        locationAddress = r.text("location_address")
        latitude = r.double("latitude")
        longitude = r.double("longitude")
        version = r.version()
        createdAt = r.date("created_at")
        modifiedAt = r.date("modified_at")
        deletedAt = r.date("deleted_at")
        undecodable = r.undecodable
    }

    /// Edits to items: a field left nil is not part of the mutation (an update leaves it as
    /// it is); `.clear` sets it to null.
    public struct Values: EntityValues, Equatable {
        /// The entity kind these values belong to.
        public static let entity = Entity.item
        /// The parent item (the item's place in the tree).
        public var parentID: Edit<UUID>?
        /// The title.
        public var title: Edit<String>?
        /// Free notes.
        public var notes: Edit<String>?
        /// Free text such as `inbox`, `next`, `done`.
        public var status: Edit<String>?
        /// Free text such as `task`, `project`, `folder`.
        public var itemType: Edit<String>?
        /// The place among its siblings.
        public var sortOrder: Edit<Double>?
        /// When it is due.
        public var dueAt: Edit<Date>?
        /// When it can start at the earliest.
        public var earliestStartAt: Edit<Date>?
        /// When it was completed.
        public var completedAt: Edit<Date>?
        /// An RFC 5545 RRULE.
        public var recurrenceRule: Edit<String>?
        /// How urgent it is; larger is more urgent.
        public var priority: Edit<Int>?
        /// How much it matters; larger matters more.
        public var importance: Edit<Int>?
        /// A place's name.
        public var locationName: Edit<String>?
        /// A place's address.
        public var locationAddress: Edit<String>?
        /// The place's latitude, in degrees.
        public var latitude: Edit<Double>?
        /// The place's longitude, in degrees.
        public var longitude: Edit<Double>?
        /// Fields the schema does not describe: kept in the log, surfaced once a projection knows them.
        public var extra: [Field] = []

        /// Values with the given fields set; every other field is left out.
        public init(parentID: Edit<UUID>? = nil, title: Edit<String>? = nil, notes: Edit<String>? = nil, status: Edit<String>? = nil, itemType: Edit<String>? = nil, sortOrder: Edit<Double>? = nil, dueAt: Edit<Date>? = nil, earliestStartAt: Edit<Date>? = nil, completedAt: Edit<Date>? = nil, recurrenceRule: Edit<String>? = nil, priority: Edit<Int>? = nil, importance: Edit<Int>? = nil, locationName: Edit<String>? = nil, locationAddress: Edit<String>? = nil, latitude: Edit<Double>? = nil, longitude: Edit<Double>? = nil, extra: [Field] = []) {
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
            l.add("parent_id", parentID)
            l.add("title", title)
            l.add("notes", notes)
            l.add("status", status)
            l.add("item_type", itemType)
            l.add("sort_order", sortOrder)
            l.add("due_at", dueAt)
            l.add("earliest_start_at", earliestStartAt)
            l.add("completed_at", completedAt)
            l.add("recurrence_rule", recurrenceRule)
            l.add("priority", priority)
            l.add("importance", importance)
            l.add("location_name", locationName)
            l.add("location_address", locationAddress)
            l.add("latitude", latitude)
            l.add("longitude", longitude)
            return l.fields + extra
        }
    }

    /// Every field this record holds, as values for a create.
    public var values: Values {
        var v = Values()
        v.parentID = parentID.map(Edit.set)
        v.title = title.map(Edit.set)
        v.notes = notes.map(Edit.set)
        v.status = status.map(Edit.set)
        v.itemType = itemType.map(Edit.set)
        v.sortOrder = sortOrder.map(Edit.set)
        v.dueAt = dueAt.map(Edit.set)
        v.earliestStartAt = earliestStartAt.map(Edit.set)
        v.completedAt = completedAt.map(Edit.set)
        v.recurrenceRule = recurrenceRule.map(Edit.set)
        v.priority = priority.map(Edit.set)
        v.importance = importance.map(Edit.set)
        v.locationName = locationName.map(Edit.set)
        v.locationAddress = locationAddress.map(Edit.set)
        v.latitude = latitude.map(Edit.set)
        v.longitude = longitude.map(Edit.set)
        return v
    }

    /// The edits that turn `old` into this record: the fields that differ.
    public func changes(from old: Item) -> Values {
        var v = Values()
        if parentID != old.parentID { v.parentID = Edit(parentID) }
        if title != old.title { v.title = Edit(title) }
        if notes != old.notes { v.notes = Edit(notes) }
        if status != old.status { v.status = Edit(status) }
        if itemType != old.itemType { v.itemType = Edit(itemType) }
        if sortOrder != old.sortOrder { v.sortOrder = Edit(sortOrder) }
        if dueAt != old.dueAt { v.dueAt = Edit(dueAt) }
        if earliestStartAt != old.earliestStartAt { v.earliestStartAt = Edit(earliestStartAt) }
        if completedAt != old.completedAt { v.completedAt = Edit(completedAt) }
        if recurrenceRule != old.recurrenceRule { v.recurrenceRule = Edit(recurrenceRule) }
        if priority != old.priority { v.priority = Edit(priority) }
        if importance != old.importance { v.importance = Edit(importance) }
        if locationName != old.locationName { v.locationName = Edit(locationName) }
        if locationAddress != old.locationAddress { v.locationAddress = Edit(locationAddress) }
        if latitude != old.latitude { v.latitude = Edit(latitude) }
        if longitude != old.longitude { v.longitude = Edit(longitude) }
        return v
    }
}

/// The values of `Item` (its edit form).
public typealias ItemValues = Item.Values

/// A tag: `tags` in the projection.
///
/// Read from the projection with every column typed as `DomainSchema` declares it; written with
/// `Tag.Values`, or from a record: `Change.create(record)`, `Change.update(from: old, to: new)`.
public struct Tag: EntityRecord {
    /// The entity kind this record holds.
    public static let entity = Entity.tag
    /// The entity's id.
    public var id: UUID
    /// The tag's name.
    public var name: String?
    /// Free text such as `#30a46c`.
    public var color: String?
    /// The hybrid-logical-clock stamp of the newest event applied: the entity's version.
    public internal(set) var version: Int64
    /// When the app says the entity was created.
    public internal(set) var createdAt: Date?
    /// When the projection last changed it.
    public internal(set) var modifiedAt: Date?
    /// When it was soft-deleted; nil while it is live.
    public internal(set) var deletedAt: Date?
    /// Columns whose stored value is not what the schema declares (an event written
    /// before a rule existed): their property is nil (a zero UUID when required).
    public internal(set) var undecodable: [String]
    /// A record made in code (to create with `Change.create(_:)`).
    public init(id: UUID = UUID(), name: String? = nil, color: String? = nil) {
        self.id = id
        self.name = name
        self.color = color
        version = 0
        undecodable = []
    }

    /// Decodes a row of `tags`; a value that is not what its column declares is listed
    /// in `undecodable`, never trapped on or thrown.
    public init(row: Row) {
        var r = RecordRow(row)
        id = r.requiredUUID("id")
        name = r.text("name")
        color = r.text("color")
        version = r.version()
        createdAt = r.date("created_at")
        modifiedAt = r.date("modified_at")
        deletedAt = r.date("deleted_at")
        undecodable = r.undecodable
    }

    /// Edits to tags: a field left nil is not part of the mutation (an update leaves it as
    /// it is); `.clear` sets it to null.
    public struct Values: EntityValues, Equatable {
        /// The entity kind these values belong to.
        public static let entity = Entity.tag
        /// The tag's name.
        public var name: Edit<String>?
        /// Free text such as `#30a46c`.
        public var color: Edit<String>?
        /// Fields the schema does not describe: kept in the log, surfaced once a projection knows them.
        public var extra: [Field] = []

        /// Values with the given fields set; every other field is left out.
        public init(name: Edit<String>? = nil, color: Edit<String>? = nil, extra: [Field] = []) {
            self.name = name
            self.color = color
            self.extra = extra
        }

        /// The fields set, as the log stores them.
        public var fields: [Field] {
            var l = FieldList()
            l.add("name", name)
            l.add("color", color)
            return l.fields + extra
        }
    }

    /// Every field this record holds, as values for a create.
    public var values: Values {
        var v = Values()
        v.name = name.map(Edit.set)
        v.color = color.map(Edit.set)
        return v
    }

    /// The edits that turn `old` into this record: the fields that differ.
    public func changes(from old: Tag) -> Values {
        var v = Values()
        if name != old.name { v.name = Edit(name) }
        if color != old.color { v.color = Edit(color) }
        return v
    }
}

/// The values of `Tag` (its edit form).
public typealias TagValues = Tag.Values

/// An item carrying a tag: `item_tags`. Its id is derived from the pair, so every replica that tags the same item with the same tag names the same entity.
///
/// Read from the projection with every column typed as `DomainSchema` declares it; written with
/// `ItemTag.Values`, or from a record: `Change.create(record)`, `Change.update(from: old, to: new)`.
public struct ItemTag: EntityRecord {
    /// The entity kind this record holds.
    public static let entity = Entity.itemTag
    /// The entity's id.
    public var id: UUID
    /// The item tagged.
    public var itemID: UUID
    /// The tag it carries.
    public var tagID: UUID
    /// The hybrid-logical-clock stamp of the newest event applied: the entity's version.
    public internal(set) var version: Int64
    /// When the app says the entity was created.
    public internal(set) var createdAt: Date?
    /// When the projection last changed it.
    public internal(set) var modifiedAt: Date?
    /// When it was soft-deleted; nil while it is live.
    public internal(set) var deletedAt: Date?
    /// Columns whose stored value is not what the schema declares (an event written
    /// before a rule existed): their property is nil (a zero UUID when required).
    public internal(set) var undecodable: [String]
    /// A record made in code (to create with `Change.create(_:)`).
    public init(id: UUID = UUID(), itemID: UUID, tagID: UUID) {
        self.id = id
        self.itemID = itemID
        self.tagID = tagID
        version = 0
        undecodable = []
    }

    /// Decodes a row of `item_tags`; a value that is not what its column declares is listed
    /// in `undecodable`, never trapped on or thrown.
    public init(row: Row) {
        var r = RecordRow(row)
        id = r.requiredUUID("id")
        itemID = r.requiredUUID("item_id")
        tagID = r.requiredUUID("tag_id")
        version = r.version()
        createdAt = r.date("created_at")
        modifiedAt = r.date("modified_at")
        deletedAt = r.date("deleted_at")
        undecodable = r.undecodable
    }

    /// Edits to item_tags: a field left nil is not part of the mutation (an update leaves it as
    /// it is); `.clear` sets it to null.
    public struct Values: EntityValues, Equatable {
        /// The entity kind these values belong to.
        public static let entity = Entity.itemTag
        /// The item tagged.
        public var itemID: UUID
        /// The tag it carries.
        public var tagID: UUID
        /// Fields the schema does not describe: kept in the log, surfaced once a projection knows them.
        public var extra: [Field] = []

        /// Values with the given fields set; every other field is left out.
        public init(itemID: UUID, tagID: UUID, extra: [Field] = []) {
            self.itemID = itemID
            self.tagID = tagID
            self.extra = extra
        }

        /// The fields set, as the log stores them.
        public var fields: [Field] {
            var l = FieldList()
            l.require("item_id", itemID)
            l.require("tag_id", tagID)
            return l.fields + extra
        }
    }

    /// Every field this record holds, as values for a create.
    public var values: Values {
        Values(itemID: itemID, tagID: tagID)
    }

    /// The edits that turn `old` into this record: the fields that differ.
    public func changes(from old: ItemTag) -> Values {
        Values(itemID: itemID, tagID: tagID)
    }
}

/// The values of `ItemTag` (its edit form).
public typealias ItemTagValues = ItemTag.Values

/// Time spent on an item: `time_entries`.
///
/// Read from the projection with every column typed as `DomainSchema` declares it; written with
/// `TimeEntry.Values`, or from a record: `Change.create(record)`, `Change.update(from: old, to: new)`.
public struct TimeEntry: EntityRecord {
    /// The entity kind this record holds.
    public static let entity = Entity.timeEntry
    /// The entity's id.
    public var id: UUID
    /// The item the time was spent on (required when the entry is created).
    public var itemID: UUID?
    /// When the time began.
    public var startedAt: Date?
    /// When the time ended.
    public var endedAt: Date?
    /// How long, in seconds.
    public var durationSeconds: Double?
    /// The hybrid-logical-clock stamp of the newest event applied: the entity's version.
    public internal(set) var version: Int64
    /// When the app says the entity was created.
    public internal(set) var createdAt: Date?
    /// When the projection last changed it.
    public internal(set) var modifiedAt: Date?
    /// When it was soft-deleted; nil while it is live.
    public internal(set) var deletedAt: Date?
    /// Columns whose stored value is not what the schema declares (an event written
    /// before a rule existed): their property is nil (a zero UUID when required).
    public internal(set) var undecodable: [String]
    /// A record made in code (to create with `Change.create(_:)`).
    public init(id: UUID = UUID(), itemID: UUID? = nil, startedAt: Date? = nil, endedAt: Date? = nil, durationSeconds: Double? = nil) {
        self.id = id
        self.itemID = itemID
        self.startedAt = startedAt
        self.endedAt = endedAt
        self.durationSeconds = durationSeconds
        version = 0
        undecodable = []
    }

    /// Decodes a row of `time_entries`; a value that is not what its column declares is listed
    /// in `undecodable`, never trapped on or thrown.
    public init(row: Row) {
        var r = RecordRow(row)
        id = r.requiredUUID("id")
        itemID = r.uuid("item_id")
        startedAt = r.date("started_at")
        endedAt = r.date("ended_at")
        durationSeconds = r.double("duration_seconds")
        version = r.version()
        createdAt = r.date("created_at")
        modifiedAt = r.date("modified_at")
        deletedAt = r.date("deleted_at")
        undecodable = r.undecodable
    }

    /// Edits to time_entries: a field left nil is not part of the mutation (an update leaves it as
    /// it is); `.clear` sets it to null.
    public struct Values: EntityValues, Equatable {
        /// The entity kind these values belong to.
        public static let entity = Entity.timeEntry
        /// The item the time was spent on (required when the entry is created).
        public var itemID: Edit<UUID>?
        /// When the time began.
        public var startedAt: Edit<Date>?
        /// When the time ended.
        public var endedAt: Edit<Date>?
        /// How long, in seconds.
        public var durationSeconds: Edit<Double>?
        /// A note (kept in the log, not a column).
        public var note: Edit<String>?
        /// Fields the schema does not describe: kept in the log, surfaced once a projection knows them.
        public var extra: [Field] = []

        /// Values with the given fields set; every other field is left out.
        public init(itemID: Edit<UUID>? = nil, startedAt: Edit<Date>? = nil, endedAt: Edit<Date>? = nil, durationSeconds: Edit<Double>? = nil, note: Edit<String>? = nil, extra: [Field] = []) {
            self.itemID = itemID
            self.startedAt = startedAt
            self.endedAt = endedAt
            self.durationSeconds = durationSeconds
            self.note = note
            self.extra = extra
        }

        /// The fields set, as the log stores them.
        public var fields: [Field] {
            var l = FieldList()
            l.add("item_id", itemID)
            l.add("started_at", startedAt)
            l.add("ended_at", endedAt)
            l.add("duration_seconds", durationSeconds)
            l.add("note", note)
            return l.fields + extra
        }
    }

    /// Every field this record holds, as values for a create.
    public var values: Values {
        var v = Values()
        v.itemID = itemID.map(Edit.set)
        v.startedAt = startedAt.map(Edit.set)
        v.endedAt = endedAt.map(Edit.set)
        v.durationSeconds = durationSeconds.map(Edit.set)
        return v
    }

    /// The edits that turn `old` into this record: the fields that differ.
    public func changes(from old: TimeEntry) -> Values {
        var v = Values()
        if itemID != old.itemID { v.itemID = Edit(itemID) }
        if startedAt != old.startedAt { v.startedAt = Edit(startedAt) }
        if endedAt != old.endedAt { v.endedAt = Edit(endedAt) }
        if durationSeconds != old.durationSeconds { v.durationSeconds = Edit(durationSeconds) }
        return v
    }
}

/// The values of `TimeEntry` (its edit form).
public typealias TimeEntryValues = TimeEntry.Values

/// A saved search: `saved_searches`.
///
/// Read from the projection with every column typed as `DomainSchema` declares it; written with
/// `SavedSearch.Values`, or from a record: `Change.create(record)`, `Change.update(from: old, to: new)`.
public struct SavedSearch: EntityRecord {
    /// The entity kind this record holds.
    public static let entity = Entity.savedSearch
    /// The entity's id.
    public var id: UUID
    /// The search's name.
    public var name: String?
    /// The query text.
    public var query: String?
    /// The place among the saved searches.
    public var sortOrder: Double?
    /// The hybrid-logical-clock stamp of the newest event applied: the entity's version.
    public internal(set) var version: Int64
    /// When the app says the entity was created.
    public internal(set) var createdAt: Date?
    /// When the projection last changed it.
    public internal(set) var modifiedAt: Date?
    /// When it was soft-deleted; nil while it is live.
    public internal(set) var deletedAt: Date?
    /// Columns whose stored value is not what the schema declares (an event written
    /// before a rule existed): their property is nil (a zero UUID when required).
    public internal(set) var undecodable: [String]
    /// A record made in code (to create with `Change.create(_:)`).
    public init(id: UUID = UUID(), name: String? = nil, query: String? = nil, sortOrder: Double? = nil) {
        self.id = id
        self.name = name
        self.query = query
        self.sortOrder = sortOrder
        version = 0
        undecodable = []
    }

    /// Decodes a row of `saved_searches`; a value that is not what its column declares is listed
    /// in `undecodable`, never trapped on or thrown.
    public init(row: Row) {
        var r = RecordRow(row)
        id = r.requiredUUID("id")
        name = r.text("name")
        query = r.text("query")
        sortOrder = r.double("sort_order")
        version = r.version()
        createdAt = r.date("created_at")
        modifiedAt = r.date("modified_at")
        deletedAt = r.date("deleted_at")
        undecodable = r.undecodable
    }

    /// Edits to saved_searches: a field left nil is not part of the mutation (an update leaves it as
    /// it is); `.clear` sets it to null.
    public struct Values: EntityValues, Equatable {
        /// The entity kind these values belong to.
        public static let entity = Entity.savedSearch
        /// The search's name.
        public var name: Edit<String>?
        /// The query text.
        public var query: Edit<String>?
        /// The place among the saved searches.
        public var sortOrder: Edit<Double>?
        /// Whether it is pinned (kept in the log, not a column).
        public var isPinned: Edit<Bool>?
        /// Fields the schema does not describe: kept in the log, surfaced once a projection knows them.
        public var extra: [Field] = []

        /// Values with the given fields set; every other field is left out.
        public init(name: Edit<String>? = nil, query: Edit<String>? = nil, sortOrder: Edit<Double>? = nil, isPinned: Edit<Bool>? = nil, extra: [Field] = []) {
            self.name = name
            self.query = query
            self.sortOrder = sortOrder
            self.isPinned = isPinned
            self.extra = extra
        }

        /// The fields set, as the log stores them.
        public var fields: [Field] {
            var l = FieldList()
            l.add("name", name)
            l.add("query", query)
            l.add("sort_order", sortOrder)
            l.add("is_pinned", isPinned)
            return l.fields + extra
        }
    }

    /// Every field this record holds, as values for a create.
    public var values: Values {
        var v = Values()
        v.name = name.map(Edit.set)
        v.query = query.map(Edit.set)
        v.sortOrder = sortOrder.map(Edit.set)
        return v
    }

    /// The edits that turn `old` into this record: the fields that differ.
    public func changes(from old: SavedSearch) -> Values {
        var v = Values()
        if name != old.name { v.name = Edit(name) }
        if query != old.query { v.query = Edit(query) }
        if sortOrder != old.sortOrder { v.sortOrder = Edit(sortOrder) }
        return v
    }
}

/// The values of `SavedSearch` (its edit form).
public typealias SavedSearchValues = SavedSearch.Values

/// One completed occurrence of a recurring item: `completion_history`. Named by (item, original occurrence date), as every replica names it.
///
/// Read from the projection with every column typed as `DomainSchema` declares it; written with
/// `Completion.Values`, or from a record: `Change.create(record)`, `Change.update(from: old, to: new)`.
public struct Completion: EntityRecord {
    /// The entity kind this record holds.
    public static let entity = Entity.completion
    /// The entity's id.
    public var id: UUID
    /// The recurring item.
    public var itemID: UUID
    /// The occurrence's scheduled day (`YYYY-MM-DD`), part of its identity.
    public var originalOccurrenceDate: Day
    /// The day it was done on, when it differs.
    public var occurrenceDate: Day?
    /// When it was completed.
    public var completedAt: Date?
    /// Free notes.
    public var notes: String?
    /// The hybrid-logical-clock stamp of the newest event applied: the entity's version.
    public internal(set) var version: Int64
    /// When the app says the entity was created.
    public internal(set) var createdAt: Date?
    /// When the projection last changed it.
    public internal(set) var modifiedAt: Date?
    /// When it was soft-deleted; nil while it is live.
    public internal(set) var deletedAt: Date?
    /// Columns whose stored value is not what the schema declares (an event written
    /// before a rule existed): their property is nil (a zero UUID when required).
    public internal(set) var undecodable: [String]
    /// A record made in code (to create with `Change.create(_:)`).
    public init(id: UUID = UUID(), itemID: UUID, originalOccurrenceDate: Day, occurrenceDate: Day? = nil, completedAt: Date? = nil, notes: String? = nil) {
        self.id = id
        self.itemID = itemID
        self.originalOccurrenceDate = originalOccurrenceDate
        self.occurrenceDate = occurrenceDate
        self.completedAt = completedAt
        self.notes = notes
        version = 0
        undecodable = []
    }

    /// Decodes a row of `completion_history`; a value that is not what its column declares is listed
    /// in `undecodable`, never trapped on or thrown.
    public init(row: Row) {
        var r = RecordRow(row)
        id = r.requiredUUID("id")
        itemID = r.requiredUUID("item_id")
        originalOccurrenceDate = r.requiredDay("original_occurrence_date")
        occurrenceDate = r.day("occurrence_date")
        completedAt = r.date("completed_at")
        notes = r.text("notes")
        version = r.version()
        createdAt = r.date("created_at")
        modifiedAt = r.date("modified_at")
        deletedAt = r.date("deleted_at")
        undecodable = r.undecodable
    }

    /// Edits to completion_history: a field left nil is not part of the mutation (an update leaves it as
    /// it is); `.clear` sets it to null.
    public struct Values: EntityValues, Equatable {
        /// The entity kind these values belong to.
        public static let entity = Entity.completion
        /// The recurring item.
        public var itemID: UUID
        /// The occurrence's scheduled day (`YYYY-MM-DD`), part of its identity.
        public var originalOccurrenceDate: Day
        /// The day it was done on, when it differs.
        public var occurrenceDate: Edit<Day>?
        /// When it was completed.
        public var completedAt: Edit<Date>?
        /// Free notes.
        public var notes: Edit<String>?
        /// Who completed it (kept in the log, not a column).
        public var userID: Edit<String>?
        /// Fields the schema does not describe: kept in the log, surfaced once a projection knows them.
        public var extra: [Field] = []

        /// Values with the given fields set; every other field is left out.
        public init(itemID: UUID, originalOccurrenceDate: Day, occurrenceDate: Edit<Day>? = nil, completedAt: Edit<Date>? = nil, notes: Edit<String>? = nil, userID: Edit<String>? = nil, extra: [Field] = []) {
            self.itemID = itemID
            self.originalOccurrenceDate = originalOccurrenceDate
            self.occurrenceDate = occurrenceDate
            self.completedAt = completedAt
            self.notes = notes
            self.userID = userID
            self.extra = extra
        }

        /// The fields set, as the log stores them.
        public var fields: [Field] {
            var l = FieldList()
            l.require("item_id", itemID)
            l.require("original_occurrence_date", originalOccurrenceDate)
            l.add("occurrence_date", occurrenceDate)
            l.add("completed_at", completedAt)
            l.add("notes", notes)
            l.add("user_id", userID)
            return l.fields + extra
        }
    }

    /// Every field this record holds, as values for a create.
    public var values: Values {
        var v = Values(itemID: itemID, originalOccurrenceDate: originalOccurrenceDate)
        v.occurrenceDate = occurrenceDate.map(Edit.set)
        v.completedAt = completedAt.map(Edit.set)
        v.notes = notes.map(Edit.set)
        return v
    }

    /// The edits that turn `old` into this record: the fields that differ.
    public func changes(from old: Completion) -> Values {
        var v = Values(itemID: itemID, originalOccurrenceDate: originalOccurrenceDate)
        if occurrenceDate != old.occurrenceDate { v.occurrenceDate = Edit(occurrenceDate) }
        if completedAt != old.completedAt { v.completedAt = Edit(completedAt) }
        if notes != old.notes { v.notes = Edit(notes) }
        return v
    }
}

/// The values of `Completion` (its edit form).
public typealias CompletionValues = Completion.Values

/// A skipped or rescheduled occurrence of a recurring item: `recurrence_exceptions`.
///
/// Read from the projection with every column typed as `DomainSchema` declares it; written with
/// `RecurrenceException.Values`, or from a record: `Change.create(record)`, `Change.update(from: old, to: new)`.
public struct RecurrenceException: EntityRecord {
    /// The entity kind this record holds.
    public static let entity = Entity.recurrenceException
    /// The entity's id.
    public var id: UUID
    /// The recurring item.
    public var itemID: UUID
    /// The occurrence's scheduled day (`YYYY-MM-DD`), part of its identity.
    public var originalOccurrenceDate: Day
    /// `skip` or `reschedule`.
    public var kind: String?
    /// The day it moves to.
    public var rescheduledTo: Day?
    /// When the moved occurrence is due.
    public var dueAt: Date?
    /// Free notes.
    public var notes: String?
    /// The hybrid-logical-clock stamp of the newest event applied: the entity's version.
    public internal(set) var version: Int64
    /// When the app says the entity was created.
    public internal(set) var createdAt: Date?
    /// When the projection last changed it.
    public internal(set) var modifiedAt: Date?
    /// When it was soft-deleted; nil while it is live.
    public internal(set) var deletedAt: Date?
    /// Columns whose stored value is not what the schema declares (an event written
    /// before a rule existed): their property is nil (a zero UUID when required).
    public internal(set) var undecodable: [String]
    /// A record made in code (to create with `Change.create(_:)`).
    public init(id: UUID = UUID(), itemID: UUID, originalOccurrenceDate: Day, kind: String? = nil, rescheduledTo: Day? = nil, dueAt: Date? = nil, notes: String? = nil) {
        self.id = id
        self.itemID = itemID
        self.originalOccurrenceDate = originalOccurrenceDate
        self.kind = kind
        self.rescheduledTo = rescheduledTo
        self.dueAt = dueAt
        self.notes = notes
        version = 0
        undecodable = []
    }

    /// Decodes a row of `recurrence_exceptions`; a value that is not what its column declares is listed
    /// in `undecodable`, never trapped on or thrown.
    public init(row: Row) {
        var r = RecordRow(row)
        id = r.requiredUUID("id")
        itemID = r.requiredUUID("item_id")
        originalOccurrenceDate = r.requiredDay("original_occurrence_date")
        kind = r.text("kind")
        rescheduledTo = r.day("rescheduled_to")
        dueAt = r.date("due_at")
        notes = r.text("notes")
        version = r.version()
        createdAt = r.date("created_at")
        modifiedAt = r.date("modified_at")
        deletedAt = r.date("deleted_at")
        undecodable = r.undecodable
    }

    /// Edits to recurrence_exceptions: a field left nil is not part of the mutation (an update leaves it as
    /// it is); `.clear` sets it to null.
    public struct Values: EntityValues, Equatable {
        /// The entity kind these values belong to.
        public static let entity = Entity.recurrenceException
        /// The recurring item.
        public var itemID: UUID
        /// The occurrence's scheduled day (`YYYY-MM-DD`), part of its identity.
        public var originalOccurrenceDate: Day
        /// `skip` or `reschedule`.
        public var kind: Edit<String>?
        /// The day it moves to.
        public var rescheduledTo: Edit<Day>?
        /// When the moved occurrence is due.
        public var dueAt: Edit<Date>?
        /// Free notes.
        public var notes: Edit<String>?
        /// Who made the exception (kept in the log, not a column).
        public var userID: Edit<String>?
        /// Fields the schema does not describe: kept in the log, surfaced once a projection knows them.
        public var extra: [Field] = []

        /// Values with the given fields set; every other field is left out.
        public init(itemID: UUID, originalOccurrenceDate: Day, kind: Edit<String>? = nil, rescheduledTo: Edit<Day>? = nil, dueAt: Edit<Date>? = nil, notes: Edit<String>? = nil, userID: Edit<String>? = nil, extra: [Field] = []) {
            self.itemID = itemID
            self.originalOccurrenceDate = originalOccurrenceDate
            self.kind = kind
            self.rescheduledTo = rescheduledTo
            self.dueAt = dueAt
            self.notes = notes
            self.userID = userID
            self.extra = extra
        }

        /// The fields set, as the log stores them.
        public var fields: [Field] {
            var l = FieldList()
            l.require("item_id", itemID)
            l.require("original_occurrence_date", originalOccurrenceDate)
            l.add("kind", kind)
            l.add("rescheduled_to", rescheduledTo)
            l.add("due_at", dueAt)
            l.add("notes", notes)
            l.add("user_id", userID)
            return l.fields + extra
        }
    }

    /// Every field this record holds, as values for a create.
    public var values: Values {
        var v = Values(itemID: itemID, originalOccurrenceDate: originalOccurrenceDate)
        v.kind = kind.map(Edit.set)
        v.rescheduledTo = rescheduledTo.map(Edit.set)
        v.dueAt = dueAt.map(Edit.set)
        v.notes = notes.map(Edit.set)
        return v
    }

    /// The edits that turn `old` into this record: the fields that differ.
    public func changes(from old: RecurrenceException) -> Values {
        var v = Values(itemID: itemID, originalOccurrenceDate: originalOccurrenceDate)
        if kind != old.kind { v.kind = Edit(kind) }
        if rescheduledTo != old.rescheduledTo { v.rescheduledTo = Edit(rescheduledTo) }
        if dueAt != old.dueAt { v.dueAt = Edit(dueAt) }
        if notes != old.notes { v.notes = Edit(notes) }
        return v
    }
}

/// The values of `RecurrenceException` (its edit form).
public typealias RecurrenceExceptionValues = RecurrenceException.Values

/// A directed link between two items: `links` in the projection (seed 001's edges). Follow links with `linked(from:depth:kinds:direction:)`.
///
/// Read from the projection with every column typed as `DomainSchema` declares it; written with
/// `Link.Values`, or from a record: `Change.create(record)`, `Change.update(from: old, to: new)`.
public struct Link: EntityRecord {
    /// The entity kind this record holds.
    public static let entity = Entity.link
    /// The entity's id.
    public var id: UUID
    /// The item the link starts at (required when the link is created).
    public var from: UUID?
    /// The item the link points to (required when the link is created).
    public var to: UUID?
    /// LINK, NEST, SEQUENCE, AFFINITY or any text of your own.
    public var kind: String?
    /// The link's weight.
    public var weight: Double?
    /// The link's label.
    public var label: String?
    /// The hybrid-logical-clock stamp of the newest event applied: the entity's version.
    public internal(set) var version: Int64
    /// When the app says the entity was created.
    public internal(set) var createdAt: Date?
    /// When the projection last changed it.
    public internal(set) var modifiedAt: Date?
    /// When it was soft-deleted; nil while it is live.
    public internal(set) var deletedAt: Date?
    /// Columns whose stored value is not what the schema declares (an event written
    /// before a rule existed): their property is nil (a zero UUID when required).
    public internal(set) var undecodable: [String]
    /// A record made in code (to create with `Change.create(_:)`).
    public init(id: UUID = UUID(), from: UUID? = nil, to: UUID? = nil, kind: String? = nil, weight: Double? = nil, label: String? = nil) {
        self.id = id
        self.from = from
        self.to = to
        self.kind = kind
        self.weight = weight
        self.label = label
        version = 0
        undecodable = []
    }

    /// Decodes a row of `links`; a value that is not what its column declares is listed
    /// in `undecodable`, never trapped on or thrown.
    public init(row: Row) {
        var r = RecordRow(row)
        id = r.requiredUUID("id")
        from = r.uuid("from_id")
        to = r.uuid("to_id")
        kind = r.text("kind")
        weight = r.double("weight")
        label = r.text("label")
        version = r.version()
        createdAt = r.date("created_at")
        modifiedAt = r.date("modified_at")
        deletedAt = r.date("deleted_at")
        undecodable = r.undecodable
    }

    /// Edits to links: a field left nil is not part of the mutation (an update leaves it as
    /// it is); `.clear` sets it to null.
    public struct Values: EntityValues, Equatable {
        /// The entity kind these values belong to.
        public static let entity = Entity.link
        /// The item the link starts at (required when the link is created).
        public var from: Edit<UUID>?
        /// The item the link points to (required when the link is created).
        public var to: Edit<UUID>?
        /// LINK, NEST, SEQUENCE, AFFINITY or any text of your own.
        public var kind: Edit<String>?
        /// The link's weight.
        public var weight: Edit<Double>?
        /// The link's label.
        public var label: Edit<String>?
        /// Fields the schema does not describe: kept in the log, surfaced once a projection knows them.
        public var extra: [Field] = []

        /// Values with the given fields set; every other field is left out.
        public init(from: Edit<UUID>? = nil, to: Edit<UUID>? = nil, kind: Edit<String>? = nil, weight: Edit<Double>? = nil, label: Edit<String>? = nil, extra: [Field] = []) {
            self.from = from
            self.to = to
            self.kind = kind
            self.weight = weight
            self.label = label
            self.extra = extra
        }

        /// The fields set, as the log stores them.
        public var fields: [Field] {
            var l = FieldList()
            l.add("from_id", from)
            l.add("to_id", to)
            l.add("kind", kind)
            l.add("weight", weight)
            l.add("label", label)
            return l.fields + extra
        }
    }

    /// Every field this record holds, as values for a create.
    public var values: Values {
        var v = Values()
        v.from = from.map(Edit.set)
        v.to = to.map(Edit.set)
        v.kind = kind.map(Edit.set)
        v.weight = weight.map(Edit.set)
        v.label = label.map(Edit.set)
        return v
    }

    /// The edits that turn `old` into this record: the fields that differ.
    public func changes(from old: Link) -> Values {
        var v = Values()
        if from != old.from { v.from = Edit(from) }
        if to != old.to { v.to = Edit(to) }
        if kind != old.kind { v.kind = Edit(kind) }
        if weight != old.weight { v.weight = Edit(weight) }
        if label != old.label { v.label = Edit(label) }
        return v
    }
}

/// The values of `Link` (its edit form).
public typealias LinkValues = Link.Values

