import Foundation

/// The binary encoding of event records inside a frame payload. See docs/FORMAT.md, "Event record".
///
/// Deterministic: fields are written sorted by name, known field names as one-byte codes, and
/// text that is a canonical lowercase UUID as its 16 bytes; the same event always encodes to the
/// same bytes.
enum EventCodec {
    /// Field names with a one-byte code. Part of format version 1: append only, never reorder.
    /// Codes 27 to 36 came with event schema version 2; a reader that meets a code it does not
    /// know keeps the field under the name `#N` (docs/FORMAT.md, "Evolution").
    static let knownFieldNames: [String] = [
        "",  // 0: the name follows as text
        "title", "notes", "status", "item_type", "parent_id", "sort_order", "due_at",
        "earliest_start_at", "completed_at", "recurrence_rule", "name", "color", "item_id",
        "tag_id", "started_at", "ended_at", "duration_seconds", "query", "occurrence_date",
        "rescheduled_to", "kind", "user_id", "created_at", "is_pinned", "note", "original_occurrence_date",
        // Event schema version 2: links, and seed 001's item fields.
        "from_id", "to_id", "weight", "label", "priority", "importance", "location_name", "location_address",
        "latitude", "longitude",
    ]

    /// The name a field with an unknown code is kept under: `#` and the code (a name no input
    /// may use: names start with a lowercase letter), written back as the same code.
    static func unknownCodeName(_ code: Int) -> String { "#\(code)" }

    /// The code an `unknownCodeName` stands for, or 0: only a name written exactly as
    /// `unknownCodeName` writes it (`#40`, not `#040` or `#+40`, which would read back as `#40`).
    static func unknownCode(_ name: String) -> Int {
        guard name.utf8.first == UInt8(ascii: "#"), let n = Int(name.dropFirst()), n >= knownFieldNames.count, n <= 255,
              unknownCodeName(n) == name else { return 0 }
        return n
    }
    /// The one-byte code of a known field name, or 0.
    @inline(__always)
    static func knownCode(_ name: String) -> Int { FieldTable.shared.code(name) }

    static func knownCode(_ u: UnsafeBufferPointer<UInt8>) -> Int { FieldTable.shared.code(u) }

    enum ValueTag: UInt8 {
        case null = 0, boolFalse = 1, boolTrue = 2, integer = 3, real = 4, text = 5, uuidText = 6
    }

    enum Flag {
        static let explicitEventID: UInt8 = 1
        static let base: UInt8 = 2
        static let actor: UInt8 = 4
        static let known: UInt8 = 7
    }

    /// Appends one record (length-prefixed) to `out`.
    static func encode(_ e: Event, firstHLC: HLC, into out: inout ByteWriter) {
        encode(entity: e.entity, op: e.op, entityID: e.entityID, eventID: e.explicitEventID, base: e.base,
               actor: e.actor, fields: e.fields.array, hlcDelta: e.hlc.rawValue - firstHLC.rawValue, schemaVersion: e.schemaVersion,
               into: &out)
    }

    static func encode(_ m: Mutation, hlcDelta: UInt64, into out: inout ByteWriter) {
        encode(entity: m.entity, op: m.op, entityID: m.entityID, eventID: m.eventID, base: m.base, actor: m.actor,
               fields: m.fields, hlcDelta: hlcDelta, schemaVersion: Event.currentSchemaVersion, into: &out)
    }

    /// `encode(_:hlcDelta:into:)` of the mutation `m` points to, read in place: passing
    /// `pointer.pointee` (or a buffer's element) to a function copies it, retaining and
    /// releasing its fields and actor for every event (about 6% of a batch's encoding).
    @inline(__always)
    static func encode(_ m: UnsafePointer<Mutation>, hlcDelta: UInt64, into out: inout ByteWriter) {
        encode(entity: m.pointee.entity, op: m.pointee.op, entityID: m.pointee.entityID, eventID: m.pointee.eventID,
               base: m.pointee.base, actor: m.pointee.actor, fields: m.pointee.fields, hlcDelta: hlcDelta,
               schemaVersion: Event.currentSchemaVersion, into: &out)
    }

    /// Writes the record's body through a raw cursor into room for its largest size (so writing
    /// checks neither capacity nor uniqueness byte by byte), then appends its length and body.
    @inline(__always)
    static func encode(entity: Entity, op: Op, entityID: UUID, eventID: UUID?, base: HLC?, actor: String?, fields: [Field],
                       hlcDelta: UInt64, schemaVersion: UInt8, into out: inout ByteWriter) {
        // At most: four bytes, hlc delta, two ids, base, actor, count.
        var bound = 4 + 10 + 16 + 16 + 10 + (actor.map { 10 + $0.utf8.count } ?? 0) + 10
        // The fields are read in place, through a pointer's borrowing subscript: a loop over
        // the array (or a buffer's subscript) would copy, and so retain and release, each one.
        fields.withUnsafeBufferPointer { buffer in
            let fs = buffer.baseAddress
            for i in 0..<buffer.count { bound += 10 + 10 + fs![i].name.utf8.count + 1 + valueBound(fs![i].value) }
            out.writeRecord(bound: bound) { c in
                c.u8(schemaVersion)
                var flags: UInt8 = 0
                if eventID != nil { flags |= Flag.explicitEventID }
                if base != nil { flags |= Flag.base }
                if actor != nil { flags |= Flag.actor }
                c.u8(flags)
                c.u8(entity.rawValue)
                c.u8(op.rawValue)
                c.varint(hlcDelta)
                c.uuid(entityID)
                if let eventID { c.uuid(eventID) }
                if let base { c.varint(base.rawValue) }
                if let actor { c.text(actor) }
                c.varint(UInt64(buffer.count))
                for i in 0..<buffer.count {
                    var code = Int(fs![i].knownCode)
                    if code == 0 && fs![i].name.utf8.first == UInt8(ascii: "#") { code = unknownCode(fs![i].name) }
                    if code != 0 {
                        c.varint(UInt64(code))
                    } else {
                        c.varint(0)
                        c.text(fs![i].name)
                    }
                    encodeValue(fs![i].value, into: &c)
                }
            }
        }
    }

    /// At most the bytes `encode` writes for `m`'s record, its length prefix included: the room
    /// `encode` makes for it.
    static func recordBytesAtMost(_ m: Mutation) -> Int {
        var bound = 4 + 10 + 16 + 16 + 10 + (m.actor.map { 10 + $0.utf8.count } ?? 0) + 10
        for f in m.fields { bound += 10 + 10 + f.name.utf8.count + 1 + valueBound(f.value) }
        return ByteWriter.lengthRoom + bound
    }

    /// At least the bytes `encode` writes for the record of the mutation `m` points to, its
    /// length prefix included: what sizes the runs of a batch whose frames are cut by bytes
    /// (`LogAppender`), before their records are encoded and cut exactly.
    static func recordBytesAtLeast(_ m: UnsafePointer<Mutation>) -> Int {
        // Length, version, flags, entity, op, hlc delta, entity id, field count.
        var n = 1 + 4 + 1 + 16 + 1
        if m.pointee.eventID != nil { n += 16 }
        if let base = m.pointee.base { n += varintBytes(base.rawValue) }
        if let actor = m.pointee.actor { n += 1 + actor.utf8.count }
        m.pointee.fields.withUnsafeBufferPointer { fs in
            for i in fs.indices {
                n += 2  // the name's code (or 0 and the name), the value's tag
                // A name without a code (nor one kept for a newer build's) is written out.
                if fs[i].knownCode == 0 && unknownCode(fs[i].name) == 0 { n += 1 + fs[i].name.utf8.count }
                switch fs[i].value {
                case .null, .boolean: break
                case .integer(let v): n += varintBytes(zigzag(v))
                case .real: n += 8
                case .text(let s):
                    // A canonical UUID is written as its 16 bytes, other text as its length and bytes.
                    let c = s.utf8.count
                    n += c == 36 && canonicalUUID(s) != nil ? 16 : 1 + c
                }
            }
        }
        return n
    }

    /// The bytes of `v` as a varint.
    @inline(__always)
    static func varintBytes(_ v: UInt64) -> Int { v == 0 ? 1 : (64 - v.leadingZeroBitCount + 6) / 7 }

    /// The most bytes `encodeValue` writes for `v` (its tag included).
    @inline(__always)
    static func valueBound(_ v: FieldValue) -> Int {
        if case .text(let s) = v { return 1 + max(16, 10 + s.utf8.count) }
        return 1 + 10
    }

    @inline(__always)
    static func encodeValue(_ v: FieldValue, into w: inout RawCursor) {
        switch v {
        case .null: w.u8(ValueTag.null.rawValue)
        case .boolean(let b): w.u8(b ? ValueTag.boolTrue.rawValue : ValueTag.boolFalse.rawValue)
        case .integer(let i):
            w.u8(ValueTag.integer.rawValue)
            w.varint(zigzag(i))
        case .real(let d):
            w.u8(ValueTag.real.rawValue)
            w.u64(d.bitPattern)
        case .text(let s):
            if let u = canonicalUUID(s) {
                w.u8(ValueTag.uuidText.rawValue)
                w.uuid(u)
            } else {
                w.u8(ValueTag.text.rawValue)
                w.text(s)
            }
        }
    }

    /// The UUID if `s` is exactly its canonical lowercase text (36 characters); nil otherwise,
    /// so decoding the 16 bytes back to lowercase text restores `s` exactly.
    @inline(__always)
    static func canonicalUUID(_ s: String) -> UUID? {
        guard s.utf8.count == 36 else { return nil }
        var s = s
        return s.withUTF8 { UUIDText.parse(UnsafeRawBufferPointer($0), lowercaseOnly: true) }
    }

    /// A reader over the length-prefixed record at `r.offset` (the caller moves `r` to its end).
    @inline(__always)
    static func record(_ r: inout ByteReader) throws -> ByteReader {
        let length = try r.length("record length")
        return ByteReader(r.base, offset: r.offset, end: r.offset + length)
    }

    /// The fixed start of a record: schema version, flags, entity, op, and the hlc (a delta from
    /// the frame's first).
    @inline(__always)
    static func head(_ rr: inout ByteReader, firstHLC: HLC) throws -> (UInt8, UInt8, Entity, Op, HLC) {
        // Any version from 1 on: the record's layout is the same in every version (a newer one
        // adds entities, ops and fields, never flags); what it means is the reader's business.
        let version = try rr.u8()
        guard version >= 1 else { throw ByteReaderError(offset: rr.offset - 1, message: "event schema version 0 is not valid") }
        let flags = try rr.u8()
        guard flags & ~Flag.known == 0 else { throw ByteReaderError(offset: rr.offset - 1, message: "unknown event flags \(flags)") }
        // An entity or op this build does not know is a newer build's: kept, not refused.
        let entityCode = try rr.u8()
        guard entityCode != 0 else { throw ByteReaderError(offset: rr.offset - 1, message: "entity code 0 is not valid") }
        let entity = Entity(rawValue: entityCode)
        let opCode = try rr.u8()
        guard opCode != 0 else { throw ByteReaderError(offset: rr.offset - 1, message: "op code 0 is not valid") }
        let op = Op(rawValue: opCode)
        let delta = try rr.varint()
        let (hlcRaw, overflow) = firstHLC.rawValue.addingReportingOverflow(delta)
        guard !overflow else { throw ByteReaderError(offset: rr.offset, message: "hlc overflows") }
        return (version, flags, entity, op, HLC(rawValue: hlcRaw))
    }

    /// Decodes the record at `r.offset`; `seq` and `origin` come from the frame. On an error,
    /// `r.offset` is left just past the record's length (`skim` moves it to the record's end):
    /// a record that does not decode ends its frame.
    static func decode(_ r: inout ByteReader, origin: ReplicaID, seq: Seq, firstHLC: HLC) throws -> Event {
        var rr = try record(&r)
        let (version, flags, entity, op, hlc) = try head(&rr, firstHLC: firstHLC)
        let entityID = try rr.uuid()
        let explicit = flags & Flag.explicitEventID != 0
        let eventID: UUID? = explicit ? try rr.uuid() : nil
        let base: HLC? = flags & Flag.base != 0 ? HLC(rawValue: try rr.varint()) : nil
        var actor: String?
        if flags & Flag.actor != 0 {
            actor = try decodeText(&rr, count: try rr.length("actor length"))
        }
        let count = try fieldCount(&rr)
        var fields: [Field] = []
        fields.reserveCapacity(count)
        for _ in 0..<count { fields.append(try decodeField(&rr)) }
        guard rr.remaining == 0 else { throw ByteReaderError(offset: rr.offset, message: "\(rr.remaining) bytes left over in record") }
        r.offset = rr.end
        // The fields and actor are moved into the event, not copied.
        var e = Event(origin: origin, seq: seq, hlc: hlc, entity: entity, entityID: entityID, op: op, fields: EventFields(consume fields),
                      base: base, actor: consume actor, explicitEventID: eventID, schemaVersion: version)
        if version < Event.currentSchemaVersion { EventUpcasters.upcast(&e) }
        return e
    }

    /// The event of a record `skim` checked in `records` (at `k`, whose fields are
    /// `records.fieldOffsets[firstField...]`): its fixed part read now, its fields when read
    /// (`EventFields`). Equal to what `decode` makes of the same record; tests hold them to it.
    static func event(_ k: SkimmedRecord, records: FrameRecords, firstField: Int, origin: ReplicaID, seq: Seq) -> Event {
        let (entityID, actor): (UUID, String?) = records.bytes.withUnsafeBytes { p in
            (UUID.load(from: p, at: k.entityIDAt),
             k.actorAt < 0 ? nil : makeUTF8String(UnsafeRawBufferPointer(rebasing: p[k.actorAt..<k.actorAt + k.actorBytes])) ?? "")
        }
        var e = Event(origin: origin, seq: seq, hlc: k.hlc, entity: k.entity, entityID: entityID, op: k.op,
                      fields: EventFields(records: records, first: firstField, count: k.fieldCount),
                      base: k.base, actor: actor, explicitEventID: k.eventID, schemaVersion: k.version)
        if k.version < Event.currentSchemaVersion { EventUpcasters.upcast(&e) }
        return e
    }

    /// The name a field reads as were its checked bytes not to decode (`FrameRecords.field(at:)`),
    /// which the check before rules out. A peer may write this name too, so it tells nothing
    /// apart: the fuzz oracle holds every event read in place to the same event decoded whole.
    static let unreadableFieldName = "#unreadable"

    /// Decodes the field (code or name, then value) at `r.offset`.
    @inline(__always)
    static func decodeField(_ rr: inout ByteReader) throws -> Field {
        let code = try rr.small("field code", atMost: 255)
        if code > 0 && code < knownFieldNames.count { return Field(knownCode: code, try decodeValue(&rr)) }
        // Written out, or a newer build's field (kept).
        let name = code == 0 ? try decodeText(&rr, count: try rr.length("field name length")) : unknownCodeName(code)
        return Field(name, try decodeValue(&rr))
    }

    /// Reads a record's field count (`decode` and `skim` alike). A field takes two bytes at least
    /// (its code and its value's tag): a count the record cannot hold is refused at the count,
    /// before room is made for it (room for up to 40 bytes for each byte of the record).
    @inline(__always)
    static func fieldCount(_ rr: inout ByteReader) throws -> Int {
        let countAt = rr.offset
        let count = try rr.length("field count")
        guard count <= rr.remaining / 2 else {
            throw ByteReaderError(offset: countAt, message: "field count \(count) exceeds what the \(rr.remaining) bytes left can hold")
        }
        return count
    }

    /// What skimming a record learns of it: its fixed start, where its entity id and actor are,
    /// its base and its field count.
    struct SkimmedRecord {
        var version: UInt8
        var flags: UInt8
        var entity: Entity
        var op: Op
        var hlc: HLC
        var eventID: UUID?
        /// The offset of the entity id (the 16 bytes after the hlc).
        var entityIDAt: Int
        var base: HLC?
        /// The offset and length of the actor's text; -1 without an actor.
        var actorAt: Int
        var actorBytes: Int
        var fieldCount: Int
    }

    /// Where a skim puts the offset of each field it checks: nowhere (`NoFieldOffsets`), or
    /// an array (for events whose fields are decoded when read).
    protocol FieldOffsets {
        mutating func field(at offset: Int)
    }

    struct NoFieldOffsets: FieldOffsets {
        @inline(__always) mutating func field(at offset: Int) {}
    }

    /// Reads the record at `r.offset` with every check `decode` makes, building nothing; returns
    /// its fixed start and explicit event id. Tests hold the two to the same verdict on any bytes.
    @inline(__always)
    static func skim(_ r: inout ByteReader, firstHLC: HLC) throws -> SkimmedRecord {
        var none = NoFieldOffsets()
        return try skim(&r, firstHLC: firstHLC, fieldOffsets: &none)
    }

    /// As `skim(_:firstHLC:)`, telling `fieldOffsets` where each field starts (a payload is at
    /// most `FrameHeader.payloadBytesMax` bytes, so an offset fits 32 bits).
    static func skim<O: FieldOffsets>(_ r: inout ByteReader, firstHLC: HLC, fieldOffsets: inout O) throws -> SkimmedRecord {
        var rr = try record(&r)
        defer { r.offset = rr.end }
        let (version, flags, entity, op, hlc) = try head(&rr, firstHLC: firstHLC)
        try rr.need(16)
        let entityIDAt = rr.offset
        rr.offset += 16
        let eventID: UUID? = flags & Flag.explicitEventID != 0 ? try rr.uuid() : nil
        let base: HLC? = flags & Flag.base != 0 ? HLC(rawValue: try rr.varint()) : nil
        var actorAt = -1, actorBytes = 0
        if flags & Flag.actor != 0 {
            actorBytes = try rr.length("actor length")
            actorAt = rr.offset
            try skimText(&rr, count: actorBytes)
        }
        let count = try fieldCount(&rr)
        for _ in 0..<count {
            fieldOffsets.field(at: rr.offset)
            let code = try rr.small("field code", atMost: 255)
            if code == 0 {
                try skimText(&rr, count: try rr.length("field name length"))
            }
            let tagByte = try rr.u8()
            guard let tag = ValueTag(rawValue: tagByte) else { throw ByteReaderError(offset: rr.offset - 1, message: "unknown value tag \(tagByte)") }
            switch tag {
            case .null, .boolFalse, .boolTrue: break
            case .integer: _ = try rr.varint()
            case .real: _ = try rr.u64()
            case .text: try skimText(&rr, count: try rr.length("text length"))
            case .uuidText: try rr.need(16); rr.offset += 16
            }
        }
        guard rr.remaining == 0 else { throw ByteReaderError(offset: rr.offset, message: "\(rr.remaining) bytes left over in record") }
        return SkimmedRecord(version: version, flags: flags, entity: entity, op: op, hlc: hlc, eventID: eventID, entityIDAt: entityIDAt,
                             base: base, actorAt: actorAt, actorBytes: actorBytes, fieldCount: count)
    }

    /// Checks `count` bytes of text are valid UTF-8, as `decodeText` does, without keeping them.
    @inline(__always)
    static func skimText(_ r: inout ByteReader, count: Int) throws {
        let b = try r.bytes(count)
        guard isValidUTF8(b) else { throw ByteReaderError(offset: r.offset - count, message: "text is not valid UTF-8") }
    }

    @inline(__always)
    static func decodeText(_ r: inout ByteReader, count: Int) throws -> String {
        let b = try r.bytes(count)
        guard let s = makeUTF8String(b) else {
            throw ByteReaderError(offset: r.offset - count, message: "text is not valid UTF-8")
        }
        return s
    }

    @inline(__always)
    static func decodeValue(_ r: inout ByteReader) throws -> FieldValue {
        let tagByte = try r.u8()
        guard let tag = ValueTag(rawValue: tagByte) else { throw ByteReaderError(offset: r.offset - 1, message: "unknown value tag \(tagByte)") }
        switch tag {
        case .null: return .null
        case .boolFalse: return .boolean(false)
        case .boolTrue: return .boolean(true)
        case .integer: return .integer(unzigzag(try r.varint()))
        case .real: return .real(Double(bitPattern: try r.u64()))
        case .text:
            return .text(try decodeText(&r, count: try r.length("text length")))
        case .uuidText: return .text(UUIDText.format(bytes: try r.bytes(16)))
        }
    }
}

/// The field names format version 1 writes as one-byte codes (docs/FORMAT.md, "Event record").
package enum FieldCodes {
    /// Field names with a code (index = code; index 0 is unused: the name follows as text).
    public static var names: [String] { EventCodec.knownFieldNames }

    /// The code of a field name, or 0 when it has none. Fast (no hashing).
    @inline(__always)
    public static func code(_ name: String) -> Int { EventCodec.knownCode(name) }

    /// The code of the field name spelled by `bytes`, or 0 when it has none.
    @inline(__always)
    package static func code(_ bytes: UnsafeRawBufferPointer) -> Int {
        bytes.withMemoryRebound(to: UInt8.self, EventCodec.knownCode)
    }

    /// Whether the known name of code `a` comes before that of `b` in `Field.inNameOrder`.
    @inline(__always)
    package static func precedes(_ a: Int, _ b: Int) -> Bool {
        let rank = FieldTable.shared.rank
        return rank[a] < rank[b]
    }
}

/// Known field names' codes, found by (name length, first letter) so that finding a name's code
/// costs one or two byte comparisons instead of hashing: slot `len * 26 + letter` lists its codes
/// at `candidates[slots[slot] ..< slots[slot + 1]]`; each name's bytes are at
/// `nameBytes[nameStarts[code] ..< nameStarts[code + 1]]`. Flat, so a lookup copies nothing; one
/// value, so an encoder reaches all four tables through one lazy global.
struct FieldTable: Sendable {
    static let shared = FieldTable(names: EventCodec.knownFieldNames)

    let slots: [Int]
    let candidates: [UInt8]
    let nameBytes: [UInt8]
    let nameStarts: [Int]
    /// Each code's place among the known names in byte order (`Field.inNameOrder`).
    let rank: [UInt8]

    init(names: [String]) {
        func slot(_ name: String) -> Int {
            let u = Array(name.utf8)
            return u.count * 26 + Int(u[0] - 0x61)
        }
        var counts = [Int](repeating: 0, count: 32 * 26 + 1)
        for n in names.dropFirst() { counts[slot(n)] += 1 }
        var starts = [0]
        for c in counts.dropLast() { starts.append(starts.last! + c) }
        slots = starts
        var byCode = Array(names.indices.dropFirst())
        byCode.sort { (slot(names[$0]), $0) < (slot(names[$1]), $1) }
        candidates = byCode.map { UInt8($0) }
        nameBytes = names.flatMap { Array($0.utf8) }
        nameStarts = names.reduce(into: [0]) { $0.append($0.last! + $1.utf8.count) }
        var rank = [UInt8](repeating: 0, count: names.count)
        for (place, code) in names.indices.sorted(by: { names[$0].utf8.lexicographicallyPrecedes(names[$1].utf8) }).enumerated() {
            rank[code] = UInt8(place)
        }
        self.rank = rank
    }

    /// The code of a known field name, or 0.
    @inline(__always)
    func code(_ name: String) -> Int {
        name.utf8.withContiguousStorageIfAvailable(code) ?? Array(name.utf8).withUnsafeBufferPointer(code)
    }

    func code(_ u: UnsafeBufferPointer<UInt8>) -> Int {
        guard u.count < 32, let f = u.first, f >= 0x61, f <= 0x7A else { return 0 }
        let slot = u.count * 26 + Int(f - 0x61)
        return nameBytes.withUnsafeBufferPointer { bytes in
            for i in slots[slot]..<slots[slot + 1] {
                let c = Int(candidates[i])
                if memcmp(bytes.baseAddress! + nameStarts[c], u.baseAddress!, u.count) == 0 { return c }
            }
            return 0
        }
    }
}

extension Array: EventCodec.FieldOffsets where Element == UInt32 {
    @inline(__always)
    mutating func field(at offset: Int) { append(UInt32(truncatingIfNeeded: offset)) }
}
