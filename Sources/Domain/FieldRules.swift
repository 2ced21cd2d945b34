import Crypto
import EventLog
import Foundation

/// What a known field may hold. Fields without a rule may hold any scalar: they are kept in the
/// log and surface once a projection knows them.
public enum FieldKind: Sendable, Equatable {
    case text, uuid, integer, number, boolean, timestamp, date

    var expected: String {
        switch self {
        case .text: "text"
        case .uuid: "a UUID string"
        case .integer: "an integer"
        case .number: "a number"
        case .boolean: "a boolean"
        case .timestamp: "an ISO 8601 timestamp string"
        case .date: "an ISO 8601 date string (YYYY-MM-DD)"
        }
    }

    /// Whether `value` has a storage type this kind holds (null always does); formats (a UUID's
    /// or a timestamp's text) are `FieldRules.check`'s concern. The projection applies only
    /// values that pass, whoever wrote them.
    @inline(__always)
    public func holds(_ value: FieldValue) -> Bool {
        switch (self, value) {
        case (_, .null): true
        case (.text, .text), (.uuid, .text), (.timestamp, .text), (.date, .text): true
        case (.integer, .integer), (.number, .integer), (.number, .real), (.boolean, .boolean): true
        default: false
        }
    }
}

/// The input rules for mutations: field kinds, name syntax and size bounds.
public enum FieldRules {
    /// Text values larger than this are refused (bytes of UTF-8).
    public static let textBytesMax = 256 << 10
    /// Fields per mutation at most.
    public static let fieldsMax = 64
    /// Field names: a lowercase letter, then lowercase letters, digits or `_`; at most this many bytes.
    public static let nameBytesMax = 64
    /// Actor ids at most this many bytes.
    public static let actorBytesMax = 256
    /// One mutation's field names, texts and actor together at most this many bytes: what keeps
    /// its record in the log within the 1 MiB an event may take (docs/FORMAT.md, "Event
    /// record"), the 2 KiB left being room for the record's own bytes (ids, clock, codes,
    /// lengths and numbers of up to 64 fields).
    public static let eventBytesMax = (1 << 20) - (2 << 10)

    /// The bytes `eventBytesMax` bounds: field names and texts, and the actor.
    public static func eventBytes(_ m: Mutation) -> Int {
        var n = m.actor?.utf8.count ?? 0
        for f in m.fields { n += valueBytes(f.name, f.value) }
        return n
    }

    /// A field's share of `eventBytes`: its name's bytes, and its text's.
    @inline(__always)
    public static func valueBytes(_ name: String, _ value: FieldValue) -> Int {
        if case .text(let s) = value { return name.utf8.count + s.utf8.count }
        return name.utf8.count
    }

    /// The message for a mutation whose `eventBytes` is `bytes`.
    static func eventTooLarge(_ bytes: Int) -> String {
        "the event's field names, texts and actor take \(bytes) bytes, more than the \(eventBytesMax) an event may hold (its record in the log takes at most 1 MiB)"
    }

    /// Known fields: (kind, whether null is allowed), from `DomainSchema`.
    public static let known: [String: (FieldKind, Bool)] = DomainSchema.fieldRules.mapValues { ($0.kind, $0.nullable) }

    static let kindsByCode: [(FieldKind, Bool)?] = FieldCodes.names.map { known[$0] }

    /// Checks a field against its rule; returns a message naming what is wrong, or nil.
    public static func check(_ name: String, _ value: FieldValue) -> String? {
        check(name, code: FieldCodes.code(name), value)
    }

    /// `check(_:_:)` of a field whose name's code (`FieldCodes.code(name)`) is known already.
    static func check(_ name: String, code: Int, _ value: FieldValue) -> String? {
        if case .text(let s) = value {
            if s.utf8.count > textBytesMax { return "text of \(s.utf8.count) bytes exceeds the limit of \(textBytesMax)" }
            // SQLite keeps such text whole, but its readers (and GRDB's) end a string at the NUL:
            // what follows would be lost to every query, so it is refused on the way in.
            if let at = nulOffset(s) {
                return "text contains a NUL character (U+0000) at byte \(at); text read back would end there"
            }
        }
        // Fields added after format version 1 have no one-byte code: looked up by name.
        guard let (kind, nullable) = code != 0 ? kindsByCode[code] : known[name] else { return nil }
        if case .null = value { return nullable ? nil : "must not be null (expected \(kind.expected))" }
        let ok: Bool
        switch (kind, value) {
        case (.uuid, .text(let s)): ok = UUIDText.parse(s) != nil
        case (.timestamp, .text(let s)): ok = Timestamp.isValid(s, dateOnly: false)
        case (.date, .text(let s)): ok = Timestamp.isValid(s, dateOnly: true)
        default: ok = kind.holds(value)
        }
        return ok ? nil : "expected \(kind.expected), got \(describe(value))"
    }

    /// The byte offset of the first NUL in `s`, if any (searched with memchr over the bytes in
    /// place: every text value of every line is searched).
    @inline(__always)
    static func nulOffset(_ s: String) -> Int? {
        let found = s.utf8.withContiguousStorageIfAvailable { b -> Int? in
            guard let base = b.baseAddress, let p = memchr(base, 0, b.count) else { return nil }
            return UnsafeRawPointer(p) - UnsafeRawPointer(base)
        }
        if let found { return found }
        return s.utf8.firstIndex(of: 0).map { s.utf8.distance(from: s.utf8.startIndex, to: $0) }
    }

    /// A value as the log keeps it: UUID fields lowercase (every UUID Logbook takes in is stored
    /// lowercase, so Swift's uppercase `uuidString` finds the same rows).
    @inline(__always)
    public static func normalized(_ name: String, _ value: FieldValue) -> FieldValue {
        normalized(code: FieldCodes.code(name), value)
    }

    /// `normalized(_:_:)` of a field whose name's code (`FieldCodes.code(name)`) is known already.
    @inline(__always)
    static func normalized(code: Int, _ value: FieldValue) -> FieldValue {
        guard case .text(let s) = value, s.utf8.count == 36 else { return value }
        guard code != 0, let (kind, _) = kindsByCode[code], kind == .uuid else { return value }
        return lowercasingUUID(value)
    }

    /// A UUID field's value with its hex digits lowercase (unchanged when they already are).
    @inline(__always)
    public static func lowercasingUUID(_ value: FieldValue) -> FieldValue {
        guard case .text(let s) = value, s.utf8.count == 36 else { return value }
        let upper: (UInt8) -> Bool = { $0 >= 0x41 && $0 <= 0x46 }
        // In place when the text is contiguous (always, for Swift's own strings): merging asks this of every UUID field.
        guard s.utf8.withContiguousStorageIfAvailable({ $0.contains(where: upper) }) ?? s.utf8.contains(where: upper) else { return value }
        return .text(s.lowercased())
    }

    /// `normalized` over a mutation's fields.
    public static func normalize(_ m: inout Mutation) {
        for i in m.fields.indices { m.fields[i].value = normalized(code: Int(m.fields[i].knownCode), m.fields[i].value) }
    }

    static func describe(_ v: FieldValue) -> String {
        switch v {
        case .null: "null"
        case .integer(let i): "integer \(i)"
        case .real(let d): "number \(d)"
        case .boolean(let b): "boolean \(b)"
        case .text(let s): s.count > 40 ? "text \"\(s.prefix(40))…\"" : "text \"\(s)\""
        }
    }

    static func isValidName<C: Collection>(_ bytes: C) -> Bool where C.Element == UInt8 {
        guard let first = bytes.first, first >= 0x61, first <= 0x7A, bytes.count <= nameBytesMax else { return false }
        return bytes.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F }
    }

    /// The id the pair in `fields` (item_id, tag_id) derives, or nil when they do not name one.
    public static func pairID<Fields: Collection<Field>>(_ fields: Fields) -> UUID? {
        pairID(item: fields.first(where: { $0.name == "item_id" })?.value, tag: fields.first(where: { $0.name == "tag_id" })?.value)
    }

    /// `pairID` of an event's fields, each found by name in place (`Event.field(_:)`): an
    /// event read from the log decodes only those two values.
    public static func pairID(_ e: Event) -> UUID? {
        pairID(item: e.field("item_id"), tag: e.field("tag_id"))
    }

    private static func pairID(item: FieldValue?, tag: FieldValue?) -> UUID? {
        // Every item_tag create is checked this way when projected: parsed in place, no copies.
        guard case .text(let i)? = item, case .text(let t)? = tag,
              let iu = UUIDText.parse(i), let tu = UUIDText.parse(t) else { return nil }
        return itemTagID(item: iu, tag: tu)
    }

    /// The id of an item_tag entity: a UUIDv5 of its (item, tag) pair, so every replica that links
    /// the same pair names the same entity.
    public static func itemTagID(item: UUID, tag: UUID) -> UUID {
        // The name is "item:tag", both in canonical lowercase text, written as bytes directly.
        var name: [UInt8] = []
        name.reserveCapacity(73)
        UUIDText.append(item, to: &name)
        name.append(0x3A)
        UUIDText.append(tag, to: &name)
        return UUIDv5.make(namespace: itemTagNamespace, name: name)
    }

    /// The id of a completion or recurrence exception: a UUIDv5 of (kind of row, item, original
    /// occurrence date), so every replica names one occurrence's row alike (seeds/004 §3).
    public static func occurrenceID(_ entity: Entity, item: UUID, originalDate: String) -> UUID {
        UUIDv5.make(namespace: itemTagNamespace, name: Array("\(entity.name):\(item.lowercasedString):\(originalDate)".utf8))
    }

    /// Namespace of item_tag ids (a fixed random UUID, part of the format).
    public static let itemTagNamespace = UUID(uuidString: "6b1a7e0c-3f55-4c8e-9d2b-52a4f0e1c9d7")!
}

extension FieldRules {
    /// Checks a mutation built in code (not parsed from NDJSON) against the rules input lines
    /// obey: field names, their number, each value against its field's rule, the actor's size,
    /// an item_tag create naming its pair.
    /// - Parameter position: the mutation's 1-based place in its list, named by the error.
    public static func validate(_ m: Mutation, position: Int) throws(InputError) {
        func fail(_ message: String, field: String? = nil) -> InputError {
            InputError(line: position, field: field, message: message, unit: "mutation")
        }
        guard m.fields.count <= fieldsMax else { throw fail("more than \(fieldsMax) fields") }
        var names = Set<String>()
        for f in m.fields {
            guard isValidName(f.name.utf8) else {
                throw fail("field name \"\(f.name.prefix(70))\" must be a lowercase letter followed by lowercase letters, digits or _ (at most \(nameBytesMax) bytes)")
            }
            guard names.insert(f.name).inserted else { throw fail("field appears twice", field: f.name) }
            if case .real(let d) = f.value, !d.isFinite { throw fail("a number must be finite", field: f.name) }
            if let problem = check(f.name, f.value) { throw fail(problem, field: f.name) }
        }
        if let a = m.actor, a.isEmpty || a.utf8.count > actorBytesMax {
            throw fail("actor must be 1 to \(actorBytesMax) bytes", field: "actor")
        }
        let bytes = eventBytes(m)
        guard bytes <= eventBytesMax else { throw fail(eventTooLarge(bytes)) }
        guard m.entity.isKnown else { throw fail("unknown entity code \(m.entity.rawValue)", field: "entity") }
        guard m.op.isKnown else { throw fail("unknown op code \(m.op.rawValue)", field: "op") }
        if m.entity == .link, m.op == .create, let missing = missingLinkEnd(m.fields) {
            throw fail("a link create names both ends in fields from_id and to_id", field: missing)
        }
        if m.entity == .itemTag {
            if m.op == .create && !(names.contains("item_id") && names.contains("tag_id")) {
                throw fail("an item_tag create names its pair in fields item_id and tag_id", field: names.contains("item_id") ? "tag_id" : "item_id")
            }
            if names.contains("item_id") || names.contains("tag_id") {
                guard let pair = pairID(m.fields), pair == m.entityID else {
                    throw fail("an item_tag is the pair it was created with: fields item_id and tag_id must both name it (a pair cannot change)", field: "item_id")
                }
            }
        }
    }
}

extension FieldRules {
    /// The end a link create leaves out (`from_id` or `to_id`), or nil when it names both.
    public static func missingLinkEnd(_ fields: [Field]) -> String? {
        if !fields.contains(where: { $0.name == "from_id" }) { return "from_id" }
        if !fields.contains(where: { $0.name == "to_id" }) { return "to_id" }
        return nil
    }
}

/// Name-based UUIDs (RFC 9562 version 5, SHA-1).
public enum UUIDv5 {
    public static func make(namespace: UUID, name: [UInt8]) -> UUID {
        var h = Insecure.SHA1()
        withUnsafeBytes(of: namespace.uuid) { h.update(bufferPointer: $0) }
        h.update(data: name)
        var u: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        h.finalize().withUnsafeBytes { digest in
            withUnsafeMutableBytes(of: &u) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: digest[0..<16])) }
        }
        u.6 = (u.6 & 0x0F) | 0x50
        u.8 = (u.8 & 0x3F) | 0x80
        return UUID(uuid: u)
    }
}

/// ISO 8601 shapes accepted in timestamp fields: `YYYY-MM-DD`, or that followed by
/// `THH:MM[:SS[.fraction]]` and `Z` or `±HH:MM` (`ISOTime.parse`, the one reader).
enum Timestamp {
    static func isValid(_ s: String, dateOnly: Bool) -> Bool {
        var s = s
        return s.withUTF8 { isValid($0, dateOnly: dateOnly) }
    }

    static func isValid(_ b: UnsafeBufferPointer<UInt8>, dateOnly: Bool) -> Bool {
        ISOTime.parse(b, dateOnly: dateOnly) != nil
    }
}
