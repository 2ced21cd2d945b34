import EventLog
import Foundation

/// A refused input line: which line, where in it, which field, and what is wrong.
public struct InputError: Error, CustomStringConvertible, Sendable, Equatable {
    /// 1-based line number in the input.
    public var line: Int
    /// 1-based byte column in the line, when known.
    public var column: Int?
    /// The field or key concerned, when there is one.
    public var field: String?
    public var message: String
    /// What `line` counts: "line" for NDJSON input, "mutation" for a list of mutations built in code.
    public var unit = "line"

    public init(line: Int, column: Int? = nil, field: String? = nil, message: String, unit: String = "line") {
        self.line = line
        self.column = column
        self.field = field
        self.message = message
        self.unit = unit
    }

    public var description: String {
        var s = "\(unit) \(line)"
        if let column { s += ", column \(column)" }
        if let field { s += ", field \"\(field)\"" }
        return s + ": " + message
    }
}

/// Parses one NDJSON mutation line, e.g.
/// `{"entity":"item","op":"create","id":"…","fields":{"title":"Buy milk","parent_id":null}}`,
/// with optional `event_id` (UUID), `base` (integer hlc) and `actor` (text).
///
/// Strict: unknown or repeated keys, non-scalar field values, bad UUIDs, values of the wrong
/// kind for a known field (see `FieldRules`) and oversized values are refused with the line,
/// column and field. Written over raw bytes because Foundation's JSON decoding is an order of
/// magnitude too slow for bulk appends. Stateless; safe from any thread. Fuzzed: `FuzzNDJSON`.
public enum MutationParser {
    /// Lines longer than this are refused (they cannot be a valid mutation within the field limits).
    public static let lineBytesMax = 1 << 20

    public static func parse(_ line: UnsafeRawBufferPointer, lineNumber: Int) throws(InputError) -> Mutation {
        var p = JSONScanner(bytes: line, line: lineNumber)
        return try p.mutation()
    }

    public static func parse(_ line: String, lineNumber: Int = 1) throws(InputError) -> Mutation {
        let bytes = Array(line.utf8)
        let result: Result<Mutation, InputError> = bytes.withUnsafeBytes { b in
            Result { () throws(InputError) in try parse(b, lineNumber: lineNumber) }
        }
        return try result.get()
    }
}

private struct JSONScanner {
    let bytes: UnsafeRawBufferPointer
    let line: Int
    var i = 0
    /// The fields' names and texts, and the actor, in bytes so far (`FieldRules.eventBytesMax`).
    var eventBytes = 0

    init(bytes: UnsafeRawBufferPointer, line: Int) {
        self.bytes = bytes
        self.line = line
    }

    func fail(_ message: String, field: String? = nil, at: Int? = nil) -> InputError {
        InputError(line: line, column: (at ?? i) + 1, field: field, message: message)
    }

    @inline(__always) mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 || bytes[i] == 0x0D || bytes[i] == 0x0A { i += 1 }
    }

    @inline(__always) mutating func expect(_ c: UInt8, _ what: String) throws(InputError) {
        skipSpace()
        guard i < bytes.count, bytes[i] == c else {
            throw fail(i < bytes.count ? "expected \(what), found '\(Character(Unicode.Scalar(bytes[i])))'" : "expected \(what), line ends")
        }
        i += 1
    }

    @inline(__always) mutating func peek() -> UInt8? {
        skipSpace()
        return i < bytes.count ? bytes[i] : nil
    }

    /// A string: where its bytes lie in the line when it has no escapes (the common case, no
    /// allocation), else its decoded bytes.
    enum Str {
        case slice(Range<Int>)
        case owned([UInt8])
    }

    @inline(__always)
    func withBytes<R>(_ s: Str, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        switch s {
        case .slice(let r): body(UnsafeRawBufferPointer(rebasing: bytes[r]))
        case .owned(let a): a.withUnsafeBytes(body)
        }
    }

    mutating func stringBytes(field: String?) throws(InputError) -> Str {
        try expect(0x22, "a string")
        let start = i
        // Eight bytes at a time past those that need no look (not '"', not '\\', not below
        // 0x20); the loop below then decides on the byte that stopped this one.
        while i + 8 <= bytes.count && !JSONScanner.needsLook(bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)) { i += 8 }
        while i < bytes.count {
            let c = bytes[i]
            if c == 0x22 {
                i += 1
                return .slice(start..<i - 1)
            }
            if c == 0x5C { return try slowString(from: start, field: field) }
            if c < 0x20 { throw fail("control character in string (escape it)", field: field) }
            i += 1
        }
        throw fail("string is not closed", field: field, at: start - 1)
    }

    /// Whether any of the eight bytes of `w` is '"', '\\' or below 0x20 (exact: no byte is
    /// missed; which byte it is, is left to the byte loop).
    @inline(__always) static func needsLook(_ w: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        @inline(__always) func hasZero(_ v: UInt64) -> Bool { (v &- ones) & ~v & highs != 0 }
        let below20 = (w &- ones &* 0x20) & ~w & highs != 0
        return below20 || hasZero(w ^ (ones &* 0x22)) || hasZero(w ^ (ones &* 0x5C))
    }

    mutating func slowString(from start: Int, field: String?) throws(InputError) -> Str {
        var out = Array(UnsafeRawBufferPointer(rebasing: bytes[start..<i]))
        while i < bytes.count {
            let c = bytes[i]
            if c == 0x22 {
                i += 1
                return .owned(out)
            }
            if c < 0x20 { throw fail("control character in string (escape it)", field: field) }
            if c != 0x5C {
                out.append(c)
                i += 1
                continue
            }
            i += 1
            guard i < bytes.count else { break }
            let e = bytes[i]
            i += 1
            switch e {
            case 0x22: out.append(0x22)
            case 0x5C: out.append(0x5C)
            case 0x2F: out.append(0x2F)
            case 0x62: out.append(0x08)
            case 0x66: out.append(0x0C)
            case 0x6E: out.append(0x0A)
            case 0x72: out.append(0x0D)
            case 0x74: out.append(0x09)
            case 0x75:
                var scalar = try hex4(field: field)
                if scalar >= 0xD800 && scalar < 0xDC00 {
                    guard i + 1 < bytes.count, bytes[i] == 0x5C, bytes[i + 1] == 0x75 else { throw fail("unpaired surrogate in \\u escape", field: field) }
                    i += 2
                    let low = try hex4(field: field)
                    guard low >= 0xDC00 && low < 0xE000 else { throw fail("unpaired surrogate in \\u escape", field: field) }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if scalar >= 0xDC00 && scalar < 0xE000 {
                    throw fail("unpaired surrogate in \\u escape", field: field)
                }
                guard let u = Unicode.Scalar(scalar) else { throw fail("invalid \\u escape", field: field) }
                out.append(contentsOf: Array(String(Character(u)).utf8))
            default:
                throw fail("invalid escape \\\(Character(Unicode.Scalar(e)))", field: field, at: i - 2)
            }
        }
        throw fail("string is not closed", field: field, at: start - 1)
    }

    mutating func hex4(field: String?) throws(InputError) -> UInt32 {
        guard i + 4 <= bytes.count else { throw fail("truncated \\u escape", field: field) }
        var v: UInt32 = 0
        for k in 0..<4 {
            guard let h = UUIDText.hex(bytes[i + k]) else { throw fail("invalid \\u escape", field: field) }
            v = v << 4 | UInt32(h)
        }
        i += 4
        return v
    }

    mutating func text(field: String?) throws(InputError) -> String {
        let at = i
        let b = try stringBytes(field: field)
        guard let s = withBytes(b, { makeUTF8String($0) }) else {
            throw fail("string is not valid UTF-8", field: field, at: at)
        }
        return s
    }

    mutating func uuid(field: String) throws(InputError) -> UUID {
        skipSpace()
        let at = i
        let b = try stringBytes(field: field)
        guard let u = withBytes(b, { UUIDText.parse($0) }) else {
            let shown = withBytes(b) { String(decoding: $0.prefix(60), as: UTF8.self) }
            throw fail("not a UUID: \"\(shown)\"", field: field, at: at)
        }
        return u
    }

    mutating func literal(_ word: StaticString) -> Bool {
        let n = word.utf8CodeUnitCount
        guard i + n <= bytes.count else { return false }
        for k in 0..<n where bytes[i + k] != word.utf8Start[k] { return false }
        i += n
        return true
    }

    mutating func scalar(field: String) throws(InputError) -> FieldValue {
        guard let c = peek() else { throw fail("value missing, line ends", field: field) }
        switch c {
        case 0x22: return .text(try text(field: field))
        case 0x6E: if literal("null") { return .null }
        case 0x74: if literal("true") { return .boolean(true) }
        case 0x66: if literal("false") { return .boolean(false) }
        case 0x2D, 0x30...0x39: return try number(field: field)
        case 0x7B, 0x5B: throw fail("wrong value type: objects and arrays are not field values (use null, a number, text or a boolean)", field: field)
        default: break
        }
        throw fail("not a JSON value", field: field)
    }

    mutating func number(field: String) throws(InputError) -> FieldValue {
        let start = i
        if bytes[i] == 0x2D { i += 1 }
        guard i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39 else { throw fail("malformed number", field: field, at: start) }
        if bytes[i] == 0x30, i + 1 < bytes.count, bytes[i + 1] >= 0x30, bytes[i + 1] <= 0x39 { throw fail("malformed number (leading zero)", field: field, at: start) }
        var isReal = false
        while i < bytes.count {
            let c = bytes[i]
            if c >= 0x30 && c <= 0x39 { i += 1; continue }
            if c == 0x2E || c == 0x65 || c == 0x45 || c == 0x2B || (c == 0x2D && i > start) { isReal = true; i += 1; continue }
            break
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)
        if !isReal {
            guard let v = Int64(text) else { throw fail("integer \(text) is out of the 64-bit range", field: field, at: start) }
            return .integer(v)
        }
        guard isValidJSONReal(start..<i), let d = Double(text), d.isFinite else { throw fail("malformed number \(text)", field: field, at: start) }
        return .real(d)
    }

    func isValidJSONReal(_ r: Range<Int>) -> Bool {
        var k = r.lowerBound
        func digits() -> Bool {
            let s = k
            while k < r.upperBound, bytes[k] >= 0x30, bytes[k] <= 0x39 { k += 1 }
            return k > s
        }
        if bytes[k] == 0x2D { k += 1 }
        guard digits() else { return false }
        if k < r.upperBound, bytes[k] == 0x2E { k += 1; guard digits() else { return false } }
        if k < r.upperBound, bytes[k] == 0x65 || bytes[k] == 0x45 {
            k += 1
            if k < r.upperBound, bytes[k] == 0x2B || bytes[k] == 0x2D { k += 1 }
            guard digits() else { return false }
        }
        return k == r.upperBound
    }

    /// Which top-level key this is, matched on bytes without allocating.
    enum Key { case entity, op, id, fields, eventID, base, actor }

    /// The key at `keyIndex`'s index, and its name (literals: every line names several keys,
    /// and a table in a global was a lazy initialisation check at each).
    @inline(__always)
    static func key(at index: Int) -> (Key, String) {
        switch index {
        case 0: (.entity, "entity")
        case 1: (.op, "op")
        case 2: (.id, "id")
        case 3: (.fields, "fields")
        case 4: (.eventID, "event_id")
        case 5: (.base, "base")
        default: (.actor, "actor")
        }
    }

    /// The index (`key(at:)`) of the key spelled `b`, found by its length and first letter (every
    /// line names several keys: no table is walked, no bytes copied).
    @inline(__always)
    static func keyIndex(_ b: UnsafeRawBufferPointer) -> Int? {
        func spells(_ word: StaticString) -> Bool {
            b.count == word.utf8CodeUnitCount && memcmp(b.baseAddress!, word.utf8Start, b.count) == 0
        }
        guard let first = b.first else { return nil }
        switch (b.count, first) {
        case (6, 0x65): return spells("entity") ? 0 : nil
        case (2, 0x6F): return spells("op") ? 1 : nil
        case (2, 0x69): return spells("id") ? 2 : nil
        case (6, 0x66): return spells("fields") ? 3 : nil
        case (8, 0x65): return spells("event_id") ? 4 : nil
        case (4, 0x62): return spells("base") ? 5 : nil
        case (5, 0x61): return spells("actor") ? 6 : nil
        default: return nil
        }
    }

    mutating func mutation() throws(InputError) -> Mutation {
        var entity: Entity?
        var op: Op?
        var id: UUID?
        var fields: [Field]?
        var eventID: UUID?
        var base: HLC?
        var actor: String?
        var seen: UInt8 = 0
        try expect(0x7B, "'{' (each line is one JSON object)")
        if peek() == 0x7D {
            i += 1
        } else {
            while true {
                let keyAt = i
                skipSpace()
                let kb = try stringBytes(field: nil)
                guard let keyIndex = withBytes(kb, JSONScanner.keyIndex) else {
                    let shown = withBytes(kb) { String(decoding: $0.prefix(60), as: UTF8.self) }
                    throw fail("unknown key \"\(shown)\" (expected entity, op, id, fields, event_id, base, actor)", at: keyAt)
                }
                let (key, keyName) = JSONScanner.key(at: keyIndex)
                guard seen & (1 << keyIndex) == 0 else {
                    throw fail("key \"\(keyName)\" appears twice", field: keyName, at: keyAt)
                }
                seen |= 1 << keyIndex
                try expect(0x3A, "':'")
                skipSpace()
                let valueAt = i
                switch key {
                case .entity:
                    let t = try text(field: keyName)
                    guard let e = Entity(name: t) else {
                        throw fail("unknown entity \"\(t)\" (expected one of \(Entity.allCases.map(\.name).joined(separator: ", ")))", field: keyName, at: valueAt)
                    }
                    entity = e
                case .op:
                    let t = try text(field: keyName)
                    guard let o = Op(name: t) else {
                        throw fail("unknown op \"\(t)\" (expected one of \(Op.allCases.map(\.name).joined(separator: ", ")))", field: keyName, at: valueAt)
                    }
                    op = o
                case .id: id = try uuid(field: keyName)
                case .eventID:
                    if peek() == 0x6E, literal("null") { eventID = nil } else { eventID = try uuid(field: keyName) }
                case .base:
                    switch try scalar(field: keyName) {
                    case .null: base = nil
                    case .integer(let v) where v >= 0: base = HLC(rawValue: UInt64(v))
                    default: throw fail("expected a non-negative integer hlc or null", field: keyName, at: valueAt)
                    }
                case .actor:
                    if peek() == 0x6E, literal("null") {
                        actor = nil
                    } else {
                        let a = try text(field: keyName)
                        guard !a.isEmpty, a.utf8.count <= FieldRules.actorBytesMax else {
                            throw fail("actor must be 1 to \(FieldRules.actorBytesMax) bytes", field: keyName, at: valueAt)
                        }
                        eventBytes += a.utf8.count
                        guard eventBytes <= FieldRules.eventBytesMax else { throw fail(FieldRules.eventTooLarge(eventBytes), field: keyName, at: valueAt) }
                        actor = a
                    }
                case .fields: fields = try fieldsObject()
                }
                guard let c = peek() else { throw fail("object is not closed, line ends") }
                i += 1
                if c == 0x7D { break }
                guard c == 0x2C else { throw fail("expected ',' or '}'", at: i - 1) }
            }
        }
        skipSpace()
        guard i == bytes.count else { throw fail("unexpected text after the object") }
        guard let entity else { throw InputError(line: line, column: nil, field: "entity", message: "missing key \"entity\"") }
        guard let op else { throw InputError(line: line, column: nil, field: "op", message: "missing key \"op\"") }
        // Taken out of `fields`, so that sorting does not copy it (a second reference would).
        var fs = fields.take() ?? []
        var entityID = id
        if entity == .itemTag {
            let item = fs.first { $0.name == "item_id" }
            let tag = fs.first { $0.name == "tag_id" }
            if op == .create && (item == nil || tag == nil) {
                throw InputError(line: line, column: nil, field: item == nil ? "item_id" : "tag_id",
                                 message: "an item_tag create names its pair in fields item_id and tag_id")
            }
            if let pairID = FieldRules.pairID(fs) {
                // The pair is the item_tag's identity (seed 000): it never changes after creation.
                if let entityID, entityID != pairID {
                    throw InputError(line: line, column: nil, field: "item_id",
                                     message: "item_tag \(entityID.lowercasedString) is the pair it was created with; fields item_id and tag_id name another pair (\(pairID.lowercasedString)): a pair cannot change, delete this one and tag the other")
                }
                entityID = pairID
            } else if op != .create && (item != nil || tag != nil) {
                throw InputError(line: line, column: nil, field: item != nil ? "item_id" : "tag_id",
                                 message: "an item_tag names its pair with both item_id and tag_id, or with neither (a pair cannot change)")
            }
        }
        if entity == .link, op == .create, let missing = FieldRules.missingLinkEnd(fs) {
            throw InputError(line: line, column: nil, field: missing, message: "a link create names both ends in fields from_id and to_id")
        }
        if entityID == nil, entity == .completion || entity == .recurrenceException {
            guard case .text(let it)? = fs.first(where: { $0.name == "item_id" })?.value,
                  case .text(let date)? = fs.first(where: { $0.name == "original_occurrence_date" })?.value,
                  let iu = UUIDText.parse(it) else {
                throw InputError(line: line, column: nil, field: "id", message: "missing key \"id\" (or fields item_id and original_occurrence_date)")
            }
            entityID = FieldRules.occurrenceID(entity, item: iu, originalDate: date)
        }
        guard let entityID else {
            throw InputError(line: line, column: nil, field: "id", message: entity == .itemTag ? "missing key \"id\" (or fields item_id and tag_id)" : "missing key \"id\"")
        }
        // Most lines name their fields in order already (or name one): checked, not sorted. Set
        // after the initializer, which would check the order a second time.
        Field.sortInNameOrder(&fs)
        var m = Mutation(entity: entity, op: op, entityID: entityID, eventID: eventID, base: base, actor: actor)
        m.fields = fs
        return m
    }

    mutating func fieldsObject() throws(InputError) -> [Field] {
        try expect(0x7B, "'{' for fields")
        var out: [Field] = []
        let names = FieldCodes.names
        if peek() == 0x7D {
            i += 1
            return out
        }
        while true {
            skipSpace()
            let nameAt = i
            let nb = try stringBytes(field: nil)
            // A known name (most are) is found by its bytes and taken from the table of names,
            // its code kept: neither made into a string nor looked up again.
            let code = withBytes(nb, FieldCodes.code)
            let name = code != 0 ? names[code] : withBytes(nb) { String(decoding: $0, as: UTF8.self) }
            guard code != 0 || withBytes(nb, { FieldRules.isValidName($0) }) else {
                throw fail("field name \"\(name.prefix(70))\" must be a lowercase letter followed by lowercase letters, digits or _ (at most \(FieldRules.nameBytesMax) bytes)", at: nameAt)
            }
            try expect(0x3A, "':'")
            skipSpace()
            let valueAt = i
            let value = try scalar(field: name)
            if let problem = FieldRules.check(name, code: code, value) { throw fail(problem, field: name, at: valueAt) }
            if out.contains(where: { code != 0 ? $0.knownCode == code : $0.name == name }) {
                throw fail("field appears twice", field: name, at: nameAt)
            }
            eventBytes += FieldRules.valueBytes(name, value)
            guard eventBytes <= FieldRules.eventBytesMax else { throw fail(FieldRules.eventTooLarge(eventBytes), field: name, at: valueAt) }
            let normalized = FieldRules.normalized(code: code, value)
            out.append(code != 0 ? Field(knownCode: code, normalized) : Field(name, normalized))
            guard out.count <= FieldRules.fieldsMax else { throw fail("more than \(FieldRules.fieldsMax) fields", at: nameAt) }
            guard let c = peek() else { throw fail("fields object is not closed, line ends") }
            i += 1
            if c == 0x7D { return out }
            guard c == 0x2C else { throw fail("expected ',' or '}' in fields", at: i - 1) }
        }
    }
}
