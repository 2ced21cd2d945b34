import Foundation

/// The kinds of entity a task manager keeps. Codes are part of the on-disk format.
public enum Entity: UInt8, CaseIterable, Sendable, CustomStringConvertible {
    case item = 1
    case tag = 2
    case itemTag = 3
    case timeEntry = 4
    case savedSearch = 5
    case completion = 6
    case recurrenceException = 7

    public var name: String {
        switch self {
        case .item: "item"
        case .tag: "tag"
        case .itemTag: "item_tag"
        case .timeEntry: "time_entry"
        case .savedSearch: "saved_search"
        case .completion: "completion"
        case .recurrenceException: "recurrence_exception"
        }
    }
    public init?(name: String) {
        switch name {
        case "item": self = .item
        case "tag": self = .tag
        case "item_tag": self = .itemTag
        case "time_entry": self = .timeEntry
        case "saved_search": self = .savedSearch
        case "completion": self = .completion
        case "recurrence_exception": self = .recurrenceException
        default: return nil
        }
    }
    public var description: String { name }
}

/// What an event does to its entity. Codes are part of the on-disk format.
public enum Op: UInt8, CaseIterable, Sendable, CustomStringConvertible {
    case create = 1
    case update = 2
    case delete = 3
    case restore = 4

    public var name: String {
        switch self {
        case .create: "create"
        case .update: "update"
        case .delete: "delete"
        case .restore: "restore"
        }
    }
    public init?(name: String) {
        switch name {
        case "create": self = .create
        case "update": self = .update
        case "delete": self = .delete
        case "restore": self = .restore
        default: return nil
        }
    }
    public var description: String { name }
}

/// A field value: the JSON scalar types.
public enum FieldValue: Sendable, Equatable, Hashable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case boolean(Bool)
}

/// One changed field of an event.
public struct Field: Sendable, Equatable, Hashable {
    public var name: String
    public var value: FieldValue
    public init(_ name: String, _ value: FieldValue) {
        self.name = name
        self.value = value
    }
}

/// A mutation as a writer states it, before the log assigns its position and clock.
public struct Mutation: Sendable, Equatable {
    public var entity: Entity
    public var op: Op
    public var entityID: UUID
    /// Changed fields, sorted by name, names unique (see `normalized`).
    public var fields: [Field]
    /// Supplied for idempotent writes; a mutation whose id is already in the log is not appended again.
    public var eventID: UUID?
    /// The entity version (hlc of its latest event) the author had seen.
    public var base: HLC?
    /// User id, for multi-user hubs.
    public var actor: String?

    public init(entity: Entity, op: Op, entityID: UUID, fields: [Field] = [], eventID: UUID? = nil, base: HLC? = nil, actor: String? = nil) {
        self.entity = entity
        self.op = op
        self.entityID = entityID
        self.fields = fields.sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        self.eventID = eventID
        self.base = base
        self.actor = actor
    }
}

/// An event in the log: a mutation with its origin, position and clock.
public struct Event: Sendable, Equatable {
    /// The format's schema version for event records written by this code.
    public static let currentSchemaVersion: UInt8 = 1

    /// The writer-supplied event id, if any.
    public var explicitEventID: UUID?
    /// The event id: the writer's, else one derived from (origin, seq) (computed when asked for).
    public var eventID: UUID { explicitEventID ?? Event.derivedEventID(origin: origin, seq: seq) }
    /// True when the writer supplied the event id; false when it is derived from (origin, seq).
    public var hasExplicitEventID: Bool { explicitEventID != nil }
    public var origin: ReplicaID
    public var seq: Seq
    public var hlc: HLC
    public var entity: Entity
    public var entityID: UUID
    public var op: Op
    public var fields: [Field]
    public var base: HLC?
    public var actor: String?
    public var schemaVersion: UInt8

    public init(origin: ReplicaID, seq: Seq, hlc: HLC, mutation m: Mutation, schemaVersion: UInt8 = Event.currentSchemaVersion) {
        self.origin = origin
        self.seq = seq
        self.hlc = hlc
        self.entity = m.entity
        self.entityID = m.entityID
        self.op = m.op
        self.fields = m.fields
        self.base = m.base
        self.actor = m.actor
        self.schemaVersion = schemaVersion
        self.explicitEventID = m.eventID
    }

    init(origin: ReplicaID, seq: Seq, hlc: HLC, entity: Entity, entityID: UUID, op: Op, fields: [Field], base: HLC?,
         actor: String?, explicitEventID: UUID?, schemaVersion: UInt8) {
        self.origin = origin
        self.seq = seq
        self.hlc = hlc
        self.entity = entity
        self.entityID = entityID
        self.op = op
        self.fields = fields
        self.base = base
        self.actor = actor
        self.explicitEventID = explicitEventID
        self.schemaVersion = schemaVersion
    }

    /// The event id of an event whose writer supplied none: a version-8 UUID made from the
    /// origin's bytes with the seq folded into the last eight bytes. Unique per (origin, seq),
    /// identical on every replica, and never stored.
    public static func derivedEventID(origin: ReplicaID, seq: Seq) -> UUID {
        var b = origin.rawValue.uuid
        withUnsafeMutableBytes(of: &b) { p in
            p[6] = (p[6] & 0x0F) | 0x80
            var s = seq.rawValue
            for i in stride(from: 15, through: 8, by: -1) {
                p[i] ^= UInt8(truncatingIfNeeded: s)
                s >>= 8
            }
            p[8] = (p[8] & 0x3F) | 0x80
        }
        return UUID(uuid: b)
    }

    /// The field's value, or nil when the event does not set it.
    public func field(_ name: String) -> FieldValue? {
        fields.first { $0.name == name }?.value
    }
}
