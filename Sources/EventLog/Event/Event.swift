import Foundation

/// The kinds of entity a task manager keeps. Codes are part of the on-disk format.
///
/// A value may hold a code this build does not know: a newer build's entity, read from the log
/// or received from a peer. Such events are kept and shipped like any other; the projection
/// skips them and records that it did (`isKnown`, docs/FORMAT.md "Evolution").
public struct Entity: RawRepresentable, Hashable, Sendable, CustomStringConvertible, CaseIterable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let item = Entity(rawValue: 1)
    public static let tag = Entity(rawValue: 2)
    public static let itemTag = Entity(rawValue: 3)
    public static let timeEntry = Entity(rawValue: 4)
    public static let savedSearch = Entity(rawValue: 5)
    public static let completion = Entity(rawValue: 6)
    public static let recurrenceException = Entity(rawValue: 7)
    /// A directed link between two items (since event schema version 2).
    public static let link = Entity(rawValue: 8)
    /// A record of a share's membership log (docs/SHARING.md): not an entity of the task
    /// manager, never projected, and only read from a share's membership log.
    public static let shareRecord = Entity(rawValue: 64)

    /// The entities this build knows, in code order.
    public static let allCases: [Entity] = (1...8).map { Entity(rawValue: $0) }
    private static let names = ["item", "tag", "item_tag", "time_entry", "saved_search", "completion", "recurrence_exception", "link"]

    /// True when this build knows the entity.
    public var isKnown: Bool { rawValue >= 1 && Int(rawValue) <= Entity.names.count }

    /// The entity's name in NDJSON and outputs; `entity#N` for a code this build does not know.
    public var name: String { isKnown ? Entity.names[Int(rawValue) - 1] : self == .shareRecord ? "share_record" : "entity#\(rawValue)" }

    /// The known entity of that name.
    public init?(name: String) {
        guard let i = Entity.names.firstIndex(of: name) else { return nil }
        self.rawValue = UInt8(i + 1)
    }
    public var description: String { name }
}

/// What an event does to its entity. Codes are part of the on-disk format. Like `Entity`, a
/// value may hold a newer build's code; the projection does not apply such an event.
public struct Op: RawRepresentable, Hashable, Sendable, CustomStringConvertible, CaseIterable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let create = Op(rawValue: 1)
    public static let update = Op(rawValue: 2)
    public static let delete = Op(rawValue: 3)
    public static let restore = Op(rawValue: 4)

    /// The ops this build knows, in code order.
    public static let allCases: [Op] = (1...4).map { Op(rawValue: $0) }
    private static let names = ["create", "update", "delete", "restore"]

    /// True when this build knows the op.
    public var isKnown: Bool { rawValue >= 1 && Int(rawValue) <= Op.names.count }

    /// The op's name; `op#N` for a code this build does not know.
    public var name: String { isKnown ? Op.names[Int(rawValue) - 1] : "op#\(rawValue)" }

    /// The known op of that name.
    public init?(name: String) {
        guard let i = Op.names.firstIndex(of: name) else { return nil }
        self.rawValue = UInt8(i + 1)
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
    public var name: String {
        didSet { knownCode = UInt8(FieldCodes.code(name)) }
    }
    public var value: FieldValue
    /// The one-byte code of `name` when it is a known field name (`FieldCodes`), else 0: found
    /// once, when the field is made or renamed, since every encoding, check and projection of
    /// the field asks for it (a lookup by name compares bytes each time).
    package private(set) var knownCode: UInt8

    public init(_ name: String, _ value: FieldValue) {
        self.name = name
        self.value = value
        knownCode = UInt8(FieldCodes.code(name))
    }

    /// The field of the known name with code `code` (1 ..< `FieldCodes.names.count`; any other
    /// code traps).
    @inline(__always)
    package init(knownCode code: Int, _ value: FieldValue) {
        precondition(code > 0, "field code 0 names no field")
        name = EventCodec.knownFieldNames[code]
        self.value = value
        knownCode = UInt8(code)
    }

    /// The order fields are kept in: by name, byte by byte (UTF-8, shorter first on a tie),
    /// compared in place (every event's fields are sorted on the way in). Two known names
    /// compare by their rank in that order, found once (`FieldTable`).
    @inline(__always)
    public static func inNameOrder(_ a: Field, _ b: Field) -> Bool {
        if a.knownCode != 0 && b.knownCode != 0 { return FieldCodes.precedes(Int(a.knownCode), Int(b.knownCode)) }
        var x = a.name, y = b.name
        return x.withUTF8 { p in
            y.withUTF8 { q in
                let n = min(p.count, q.count)
                let c = n == 0 ? 0 : memcmp(p.baseAddress!, q.baseAddress!, n)
                return c != 0 ? c < 0 : p.count < q.count
            }
        }
    }

    /// Whether `fields` are in `inNameOrder` already (sorting them would leave them as they are).
    @inline(__always)
    public static func areInNameOrder(_ fields: [Field]) -> Bool {
        fields.withUnsafeBufferPointer { fs in
            guard fs.count > 1 else { return true }
            for k in 1..<fs.count where precedes(fs, k, k - 1) { return false }
            return true
        }
    }

    /// Sorts `fields` into `inNameOrder`, keeping the order of equal names (as `sort(by:)` does).
    /// Fields are moved, never copied: an event's few fields are sorted in place by insertion,
    /// where `sort(by: inNameOrder)` copied each field it moved and each it compared (a count of
    /// references up and down on its name and value every time). Many fields (a peer's event may
    /// hold any number, and is read again at every rebuild) go to the library's sort, whose time
    /// grows as n log n where insertion's grows as the square.
    public static func sortInNameOrder(_ fields: inout [Field]) {
        guard !areInNameOrder(fields) else { return }
        guard fields.count <= insertionSortMax else { return fields.sort(by: inNameOrder) }
        fields.withUnsafeMutableBufferPointer { fs in
            for i in 1..<fs.count {
                var j = i
                while j > 0 && precedes(fs, j, j - 1) {
                    fs.swapAt(j, j - 1)
                    j -= 1
                }
            }
        }
    }

    /// The most fields sorted by insertion (a line holds at most 64; most hold a handful).
    static let insertionSortMax = 32

    /// `inNameOrder(fs[a], fs[b])`, reading two known names' codes in place (no field copied).
    @inline(__always)
    private static func precedes(_ fs: UnsafeBufferPointer<Field>, _ a: Int, _ b: Int) -> Bool {
        let x = fs[a].knownCode, y = fs[b].knownCode
        if x != 0 && y != 0 { return FieldCodes.precedes(Int(x), Int(y)) }
        return inNameOrder(fs[a], fs[b])
    }

    @inline(__always)
    private static func precedes(_ fs: UnsafeMutableBufferPointer<Field>, _ a: Int, _ b: Int) -> Bool {
        precedes(UnsafeBufferPointer(fs), a, b)
    }
}

/// A mutation as a writer states it, before the log assigns its position and clock.
public struct Mutation: Sendable, Equatable {
    public var entity: Entity
    public var op: Op
    /// Whether the mutation has an actor (`actor`): kept beside the entity and op, in what would
    /// be padding (after the actor's text, it made the struct a word longer).
    fileprivate var hasActor: Bool
    public var entityID: UUID
    /// Changed fields, sorted by name, names unique (see `normalized`).
    public var fields: [Field]
    /// Supplied for idempotent writes; a mutation whose id is already in the log is not appended again.
    public var eventID: UUID?
    /// The entity version (hlc of its latest event) the author had seen.
    public var base: HLC?
    /// User id, for multi-user hubs.
    public var actor: String? {
        get { hasActor ? actorText : nil }
        set { actorText = newValue ?? ""; hasActor = newValue != nil }
    }
    // The actor is kept as a text and a flag (`hasActor`), not as `String?`: a struct this size
    // holding an optional string is copied by every initializer (a retain and release of its
    // fields and actor per event, read or appended; Swift 6.3's code, 2026-11-29). Set through
    // `actor`.
    fileprivate var actorText: String

    public init(entity: Entity, op: Op, entityID: UUID, fields: [Field] = [], eventID: UUID? = nil, base: HLC? = nil, actor: String? = nil) {
        self.entity = entity
        self.op = op
        self.entityID = entityID
        var fields = fields
        Field.sortInNameOrder(&fields)
        self.fields = fields
        self.eventID = eventID
        self.base = base
        self.actorText = actor ?? ""
        self.hasActor = actor != nil
    }
}

/// An event in the log: a mutation with its origin, position and clock.
public struct Event: Sendable, Equatable {
    /// The event schema version this code writes and reads events into (docs/FORMAT.md,
    /// "Evolution"). Events written in an older version are turned into this shape when read
    /// (`EventUpcasters`); events of a newer version are kept as written.
    public static let currentSchemaVersion: UInt8 = 2

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
    /// Changed fields, sorted by name, names unique. An event read from the log decodes each
    /// field when it is read (`EventFields`).
    public var fields: EventFields
    public var base: HLC?
    /// User id, for multi-user hubs.
    public var actor: String? {
        get { hasActor ? actorText : nil }
        set { actorText = newValue ?? ""; hasActor = newValue != nil }
    }
    // Kept as a text and a flag, as `Mutation`'s is: see there.
    fileprivate var actorText: String
    fileprivate var hasActor: Bool
    /// The schema version of the event's shape: the current one for every event written in an
    /// older version (the reader upcasts it), the written one for an event of a newer version.
    public var schemaVersion: UInt8

    /// True when this build understands the event entirely: its entity, its op and its schema
    /// version. The projection applies the fields it knows of any event of a known entity and
    /// op (a field name never changes meaning), and records the rest (`projection_unread`).
    public var isUnderstood: Bool { entity.isKnown && op.isKnown && schemaVersion <= Event.currentSchemaVersion }

    public init(origin: ReplicaID, seq: Seq, hlc: HLC, mutation m: Mutation, schemaVersion: UInt8 = Event.currentSchemaVersion) {
        self.origin = origin
        self.seq = seq
        self.hlc = hlc
        self.entity = m.entity
        self.entityID = m.entityID
        self.op = m.op
        self.fields = EventFields(m.fields)
        self.base = m.base
        self.actorText = m.actorText
        self.hasActor = m.hasActor
        self.schemaVersion = schemaVersion
        self.explicitEventID = m.eventID
    }

    init(origin: ReplicaID, seq: Seq, hlc: HLC, entity: Entity, entityID: UUID, op: Op, fields: EventFields, base: HLC?,
         actor: String?, explicitEventID: UUID?, schemaVersion: UInt8) {
        self.origin = origin
        self.seq = seq
        self.hlc = hlc
        self.entity = entity
        self.entityID = entityID
        self.op = op
        self.fields = fields
        self.base = base
        self.actorText = actor ?? ""
        self.hasActor = actor != nil
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
        fields.value(named: name)
    }
}
