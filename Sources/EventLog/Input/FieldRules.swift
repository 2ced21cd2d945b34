import Crypto
import Foundation

/// What a known field may hold. Fields without a rule may hold any scalar: they are kept in the
/// log and surface once a projection knows them.
public enum FieldKind: Sendable {
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

    /// Known fields: (kind, whether null is allowed).
    public static let known: [String: (FieldKind, Bool)] = [
        "title": (.text, true), "notes": (.text, true), "status": (.text, true), "item_type": (.text, true),
        "parent_id": (.uuid, true), "sort_order": (.number, true), "due_at": (.timestamp, true),
        "earliest_start_at": (.timestamp, true), "completed_at": (.timestamp, true), "recurrence_rule": (.text, true),
        "name": (.text, true), "color": (.text, true), "item_id": (.uuid, false), "tag_id": (.uuid, false),
        "started_at": (.timestamp, true), "ended_at": (.timestamp, true), "duration_seconds": (.number, true),
        "query": (.text, true), "occurrence_date": (.date, true), "original_occurrence_date": (.date, false),
        "rescheduled_to": (.date, true),
        "kind": (.text, true), "user_id": (.text, true), "created_at": (.timestamp, true), "is_pinned": (.boolean, true),
        "note": (.text, true),
    ]

    static let kindsByCode: [(FieldKind, Bool)?] = EventCodec.knownFieldNames.map { known[$0] }

    /// Field names the format gives a one-byte code (index = code; index 0 is unused).
    public static var codedFieldNames: [String] { EventCodec.knownFieldNames }

    /// The format's one-byte code of a field name, or 0 when it has none. Fast (no hashing).
    @inline(__always)
    public static func fieldCode(_ name: String) -> Int { EventCodec.knownCode(name) }

    /// Checks a field against its rule; returns a message naming what is wrong, or nil.
    public static func check(_ name: String, _ value: FieldValue) -> String? {
        if case .text(let s) = value, s.utf8.count > textBytesMax {
            return "text of \(s.utf8.count) bytes exceeds the limit of \(textBytesMax)"
        }
        let code = EventCodec.knownCode(name)
        guard code != 0, let (kind, nullable) = kindsByCode[code] else { return nil }
        let ok: Bool
        switch (kind, value) {
        case (_, .null): return nullable ? nil : "must not be null (expected \(kind.expected))"
        case (.text, .text): ok = true
        case (.uuid, .text(var s)): ok = s.withUTF8 { UUIDText.parse(UnsafeRawBufferPointer($0)) } != nil
        case (.integer, .integer): ok = true
        case (.number, .integer), (.number, .real): ok = true
        case (.boolean, .boolean): ok = true
        case (.timestamp, .text(let s)): ok = Timestamp.isValid(s, dateOnly: false)
        case (.date, .text(let s)): ok = Timestamp.isValid(s, dateOnly: true)
        default: ok = false
        }
        return ok ? nil : "expected \(kind.expected), got \(describe(value))"
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

    /// The id of an item_tag entity: a UUIDv5 of its (item, tag) pair, so every replica that links
    /// the same pair names the same entity.
    public static func itemTagID(item: UUID, tag: UUID) -> UUID {
        UUIDv5.make(namespace: itemTagNamespace, name: Array((item.lowercasedString + ":" + tag.lowercasedString).utf8))
    }

    /// The id of a completion or recurrence exception: a UUIDv5 of (kind of row, item, original
    /// occurrence date), so every replica names one occurrence's row alike (seeds/004 §3).
    public static func occurrenceID(_ entity: Entity, item: UUID, originalDate: String) -> UUID {
        UUIDv5.make(namespace: itemTagNamespace, name: Array("\(entity.name):\(item.lowercasedString):\(originalDate)".utf8))
    }

    /// Namespace of item_tag ids (a fixed random UUID, part of the format).
    public static let itemTagNamespace = UUID(uuidString: "6b1a7e0c-3f55-4c8e-9d2b-52a4f0e1c9d7")!
}

/// Name-based UUIDs (RFC 9562 version 5, SHA-1).
public enum UUIDv5 {
    public static func make(namespace: UUID, name: [UInt8]) -> UUID {
        var h = Insecure.SHA1()
        withUnsafeBytes(of: namespace.uuid) { h.update(bufferPointer: $0) }
        h.update(data: name)
        var bytes = Array(h.finalize().prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return bytes.withUnsafeBytes { UUID(bytes: $0) }
    }
}

/// Fast parsing of UUID text (36 characters, hex digits in either case).
enum UUIDText {
    static func parse(_ b: ArraySlice<UInt8>) -> UUID? {
        b.withUnsafeBytes { parse($0) }
    }

    /// Parses 36 bytes of UUID text; with `lowercaseOnly`, only the canonical lowercase form.
    @inline(__always)
    static func parse(_ b: UnsafeRawBufferPointer, lowercaseOnly: Bool = false) -> UUID? {
        guard b.count == 36, b[8] == 0x2D, b[13] == 0x2D, b[18] == 0x2D, b[23] == 0x2D else { return nil }
        var tuple: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let ok = hexValues.withUnsafeBufferPointer { table in
            withUnsafeMutableBytes(of: &tuple) { out -> Bool in
                var i = 0
                var bad: UInt8 = 0
                var upper: UInt8 = 0
                for o in 0..<16 {
                    if i == 8 || i == 13 || i == 18 || i == 23 { i += 1 }
                    let h = b[i], l = b[i + 1]
                    let hi = table[Int(h)], lo = table[Int(l)]
                    bad |= hi | lo
                    // Bit 0x20 clear on a letter means uppercase.
                    upper |= (h >= 0x41 && h <= 0x46 ? 1 : 0) | (l >= 0x41 && l <= 0x46 ? 1 : 0)
                    out[o] = hi << 4 | (lo & 0x0F)
                    i += 2
                }
                return bad & 0xF0 == 0 && !(lowercaseOnly && upper != 0)
            }
        }
        return ok ? UUID(uuid: tuple) : nil
    }

    @inline(__always) static func lowerHex(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x61...0x66: c - 0x61 + 10
        default: nil
        }
    }

    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Canonical lowercase text of a UUID, without Foundation's formatting.
    static func format(_ u: UUID) -> String {
        withUnsafeBytes(of: u.uuid) { src in
            String(unsafeUninitializedCapacity: 36) { out in
                var o = 0
                for i in 0..<16 {
                    if i == 4 || i == 6 || i == 8 || i == 10 {
                        out[o] = 0x2D
                        o += 1
                    }
                    out[o] = digits[Int(src[i] >> 4)]
                    out[o + 1] = digits[Int(src[i] & 0x0F)]
                    o += 2
                }
                return 36
            }
        }
    }

    /// Hex digit values; 0xFF for bytes that are not hex digits.
    static let hexValues: [UInt8] = (0..<256).map { c -> UInt8 in
        switch c {
        case 0x30...0x39: UInt8(c - 0x30)
        case 0x61...0x66: UInt8(c - 0x61 + 10)
        case 0x41...0x46: UInt8(c - 0x41 + 10)
        default: 0xFF
        }
    }

    @inline(__always) static func hex(_ c: UInt8) -> UInt8? {
        let v = hexValues.withUnsafeBufferPointer { $0[Int(c)] }
        return v == 0xFF ? nil : v
    }
}

/// ISO 8601 shapes accepted in timestamp fields: `YYYY-MM-DD`, or that followed by
/// `THH:MM[:SS[.fraction]]` and `Z` or `±HH:MM`.
enum Timestamp {
    static func isValid(_ s: String, dateOnly: Bool) -> Bool {
        var s = s
        return s.withUTF8 { isValid($0, dateOnly: dateOnly) }
    }

    static func isValid(_ b: UnsafeBufferPointer<UInt8>, dateOnly: Bool) -> Bool {
        func digits(_ at: Int, _ n: Int) -> Int? {
            guard at + n <= b.count else { return nil }
            var v = 0
            for i in at..<at + n {
                guard b[i] >= 0x30 && b[i] <= 0x39 else { return nil }
                v = v * 10 + Int(b[i] - 0x30)
            }
            return v
        }
        guard let _ = digits(0, 4), b.count >= 10, b[4] == 0x2D, let mo = digits(5, 2), b[7] == 0x2D, let d = digits(8, 2),
              (1...12).contains(mo), (1...31).contains(d) else { return false }
        if b.count == 10 { return true }
        if dateOnly { return false }
        guard b[10] == 0x54 || b[10] == 0x74 || b[10] == 0x20, let h = digits(11, 2), b.count > 13, b[13] == 0x3A, let mi = digits(14, 2),
              h < 24, mi < 60 else { return false }
        var i = 16
        if i < b.count, b[i] == 0x3A {
            guard let sec = digits(i + 1, 2), sec <= 60 else { return false }
            i += 3
            if i < b.count, b[i] == 0x2E {
                i += 1
                let start = i
                while i < b.count, b[i] >= 0x30, b[i] <= 0x39 { i += 1 }
                guard i > start else { return false }
            }
        }
        guard i < b.count else { return false }
        if b[i] == 0x5A || b[i] == 0x7A { return i + 1 == b.count }
        guard b[i] == 0x2B || b[i] == 0x2D, let oh = digits(i + 1, 2), i + 3 < b.count, b[i + 3] == 0x3A, let om = digits(i + 4, 2),
              oh < 24, om < 60 else { return false }
        return i + 6 == b.count
    }
}
