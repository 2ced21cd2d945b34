import Domain
import EventLog
import Foundation

/// Where each field of an event goes in the projection's tables: worked out from the schema
/// alone, so it may run on any thread. A rebuild prepares events on its reading thread while the
/// merging thread merges the ones before (`Projector.apply(_:_:fields:db:)`), and the merging thread
/// then reads each event's fields from one flat buffer instead of chasing each event's own arrays.
struct FieldLayout: @unchecked Sendable {
    /// Table of each entity, by the entity's raw value (-1: none).
    let tableByEntity: [Int]
    let columnIndex: [[String: Int]]
    /// Column of each known field code (the event codec's one-byte names) of table t at
    /// `t * codeStride + code`, or -1. Flat: a lookup copies no array.
    let columnByCode: [Int]
    let codeStride: Int
    /// What column c of table t may hold (DomainSchema) at `kindStart[t] + c`, or nil when anything goes.
    let columnKinds: [FieldKind?]
    let kindStart: [Int]
    /// Per table: the columns of item_tag's pair (item_id, tag_id), when it has both.
    let pairColumns: [(item: Int, tag: Int)?]
    /// The codes of the pair's field names (both known names: format version 1).
    static let itemIDCode = FieldCodes.code("item_id")
    static let tagIDCode = FieldCodes.code("tag_id")

    init(schema: ProjectionSchema) {
        var tableByEntity = [Int](repeating: -1, count: 256)
        var kindStart: [Int] = []
        var columnKinds: [FieldKind?] = []
        for (i, t) in schema.tables.enumerated() {
            tableByEntity[Int(t.entity.rawValue)] = i
            kindStart.append(columnKinds.count)
            columnKinds += t.columns.map { DomainSchema.fieldRules[$0]?.kind }
        }
        self.tableByEntity = tableByEntity
        self.kindStart = kindStart
        self.columnKinds = columnKinds
        codeStride = FieldCodes.names.count
        columnIndex = schema.tables.map { t in Dictionary(uniqueKeysWithValues: t.columns.enumerated().map { ($1, $0) }) }
        columnByCode = schema.tables.flatMap { t in FieldCodes.names.map { name in t.columns.firstIndex(of: name) ?? -1 } }
        pairColumns = schema.tables.map { t in t.columns.firstIndex(of: "item_id").flatMap { i in t.columns.firstIndex(of: "tag_id").map { (i, $0) } } }
    }

    /// Appends to `fields` each field of `e` that names a column of its entity's table, in the
    /// event's order, with its column and whether its value may be applied (a value of another
    /// type than its column holds is not: it stays in the log). UUID values are lowercased,
    /// whoever wrote them (an older build kept them as given).
    /// With `pairEagerly`, also whether an item_tag's pair fields name the entity (a hash: the
    /// reading thread does it); without, merging works it out only when the row does not hold that pair already.
    func prepare(_ e: Event, into fields: inout [PreparedField], pairEagerly: Bool) -> PreparedEvent {
        let start = fields.count
        let t = tableByEntity[Int(e.entity.rawValue)]  // 256 entries: every raw value
        guard t >= 0 else { return PreparedEvent(table: -1, keyHash: 0, fieldStart: start, fieldEnd: start, pairFields: false, pairIsEntity: nil) }
        let codeBase = t * codeStride, kindBase = kindStart[t]
        let itemTag = e.entity == .itemTag
        var pairFields = false
        for f in e.fields {
            let code = Int(f.knownCode)
            let column = code != 0 ? columnByCode[codeBase + code] : (columnIndex[t][f.name] ?? -1)
            let pair = itemTag && (code == FieldLayout.itemIDCode || code == FieldLayout.tagIDCode)
            pairFields = pairFields || pair
            guard column >= 0 else { continue }  // not a column of this schema: stays in the log
            var value = f.value
            var applies = true
            if let kind = columnKinds[kindBase + column] {
                applies = kind.holds(value)
                if applies && kind == .uuid { value = FieldRules.lowercasingUUID(value) }
            }
            fields.append(PreparedField(column: Int32(column), applies: applies, pair: pair, value: value))
        }
        // An item_tag is the pair it was created with: whether these pair fields name it.
        let pairIsEntity = pairFields && pairEagerly ? FieldRules.pairID(e) == e.entityID : nil
        return PreparedEvent(table: t, keyHash: 0, fieldStart: start, fieldEnd: fields.count, pairFields: pairFields, pairIsEntity: pairIsEntity)
    }
}

/// A field of an event, placed: its column, and its value ready to be taken into a row.
struct PreparedField {
    var column: Int32
    /// The value's type is one the column holds.
    var applies: Bool
    /// item_id or tag_id of an item_tag.
    var pair: Bool
    /// Optional so that merging can move it into the row (nothing copied, nothing counted).
    var value: FieldValue?
}

/// An event's place: its table (-1: none of this schema) and its fields in a `PreparedField` buffer.
struct PreparedEvent {
    var table: Int
    /// The hash of the event's row key in a `RowTable` (`RowTable.hash`), when `table` is one:
    /// set by the merging thread, which looks the row up (0 until then).
    var keyHash: Int
    var fieldStart: Int
    var fieldEnd: Int
    /// An item_tag event carrying item_id or tag_id; and whether those fields' pair id is the
    /// entity's id (nil: not worked out yet).
    var pairFields: Bool
    var pairIsEntity: Bool?
}

/// Events read and decoded, and prepared for merging when a layout was given: made on the
/// reading thread, then owned by the merging thread alone (handed over, never shared).
final class PreparedBatch: @unchecked Sendable {
    // Unchecked: one thread at a time holds a batch (the handoff orders them), and the checks at
    // each event's append to these arrays were a part of a bulk append's time.
    @exclusivity(unchecked) var events: [Event] = []
    @exclusivity(unchecked) var prepared: [PreparedEvent] = []
    @exclusivity(unchecked) var fields: [PreparedField] = []

    init(capacity: Int, layout: FieldLayout?) {
        events.reserveCapacity(capacity)
        if layout != nil {
            prepared.reserveCapacity(capacity)
            fields.reserveCapacity(capacity * 4)
        }
    }

    /// The bytes of the input the events came from, when a caller knows them (a projected
    /// append's lines).
    var inputBytes = 0
    /// About what the batch holds in memory: its lines' bytes (the texts are no larger), its
    /// events, and each field twice (in its event and placed).
    var heldBytes: Int {
        inputBytes + events.count * MemoryLayout<Event>.stride + fields.count * 2 * MemoryLayout<PreparedField>.stride
    }
    var count: Int { events.count }
}
