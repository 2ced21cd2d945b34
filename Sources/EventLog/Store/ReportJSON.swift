import Foundation

/// Writes an `Encodable` report as JSON through `JSONBytes`, the one writer: keys in the order
/// the type encodes them (declaration order, for a synthesized conformance), camelCase names as
/// snake_case (`replicaID` → `replica_id`), nil optionals as `null` (a synthesized conformance
/// would leave them out, and `--json` readers expect every key), integral doubles as `1.0`, no
/// whitespace. evctl's `--json` outputs are such reports, byte for byte what they were when each
/// command built its JSON by hand.
package enum ReportJSON {
    /// The JSON text of `value`.
    package static func string<T: Encodable>(_ value: T) throws -> String {
        var j = JSONBytes()
        try write(node(value), to: &j)
        return String(decoding: j.bytes, as: UTF8.self)
    }

    /// `replicaID` → `replica_id`, `lastSeq` → `last_seq`: an underscore before an uppercase
    /// letter that follows a lowercase one or a digit, then all lowercase.
    package static func snakeCase(_ key: String) -> String {
        var out = ""
        var previous: Character?
        for c in key {
            if c.isUppercase, let p = previous, p.isLowercase || p.isNumber { out.append("_") }
            out.append(contentsOf: c.lowercased())
            previous = c
        }
        return out
    }

    /// An object whose keys are data (origins, table names), written as given and in the order
    /// given: `{"<origin>": 12, …}`.
    package struct Map<Value: Encodable>: Encodable {
        package var pairs: [(String, Value)]
        package init(_ pairs: [(String, Value)]) { self.pairs = pairs }
        package func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: VerbatimKey.self)
            for (k, v) in pairs { try c.encode(v, forKey: VerbatimKey(k)) }
        }
    }

    /// A number written with a fixed count of decimals (`1.250`).
    package struct Fixed: Encodable {
        package var value: Double
        package var decimals: Int
        package init(_ value: Double, decimals: Int) { self.value = value; self.decimals = decimals }
        package func encode(to encoder: any Encoder) throws {
            var c = encoder.singleValueContainer()
            try c.encode(value)  // ReportJSON writes it as `Fixed`; other encoders as a plain number
        }
    }

    /// JSON text written by the one writer already (a field value as the log keeps it), put in
    /// as it is.
    package struct Raw: Encodable {
        package var json: String
        package init(_ json: String) { self.json = json }
        package func encode(to encoder: any Encoder) throws {
            var c = encoder.singleValueContainer()
            try c.encode(json)
        }
    }

    /// A key that is data: written verbatim, never turned into snake_case.
    package struct VerbatimKey: CodingKey {
        package var stringValue: String
        package var intValue: Int? { nil }
        package init(_ s: String) { stringValue = s }
        package init?(stringValue: String) { self.stringValue = stringValue }
        package init?(intValue: Int) { nil }
    }

    final class Object { var pairs: [(String, Node)] = [] }
    final class Array { var items: [Node] = [] }

    enum Node {
        case null, bool(Bool), number(String), string(String), object(Object), array(Array)
    }

    static func number(_ d: Double) -> Node {
        d.isFinite ? .number(d == d.rounded() && abs(d) < 1e15 ? String(format: "%.1f", d) : "\(d)") : .null
    }

    static func node<T: Encodable>(_ value: T) throws -> Node {
        switch value {
        case let v as Fixed: return v.value.isFinite ? .number(String(format: "%.\(max(0, min(v.decimals, 17)))f", v.value)) : .null
        case let v as Raw: return .number(v.json)
        case let v as String: return .string(v)
        case let v as Bool: return .bool(v)
        case let v as Double: return number(v)
        case let v as Float: return number(Double(v))
        case let v as Int: return .number(String(v))
        case let v as Int64: return .number(String(v))
        case let v as UInt64: return .number(String(v))
        case let v as UInt32: return .number(String(v))
        case let v as Int32: return .number(String(v))
        case let v as UInt8: return .number(String(v))
        case let v as UInt: return .number(String(v))
        default:
            let e = NodeEncoder()
            try value.encode(to: e)
            return e.result
        }
    }

    static func write(_ node: Node, to j: inout JSONBytes) throws {
        switch node {
        case .null: j.raw("null")
        case .bool(let b): j.raw(b ? "true" : "false")
        case .number(let n): j.raw(n)
        case .string(let s): j.string(s)
        case .object(let o):
            j.raw("{")
            for (i, (k, v)) in o.pairs.enumerated() {
                if i > 0 { j.raw(",") }
                j.string(k)
                j.raw(":")
                try write(v, to: &j)
            }
            j.raw("}")
        case .array(let a):
            j.raw("[")
            for (i, v) in a.items.enumerated() {
                if i > 0 { j.raw(",") }
                try write(v, to: &j)
            }
            j.raw("]")
        }
    }

    final class NodeEncoder: Encoder {
        var codingPath: [any CodingKey] = []
        var userInfo: [CodingUserInfoKey: Any] = [:]
        var result: Node = .null

        func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
            if case .object(let o) = result { return KeyedEncodingContainer(Keyed<Key>(object: o)) }
            let o = Object()
            result = .object(o)
            return KeyedEncodingContainer(Keyed<Key>(object: o))
        }

        func unkeyedContainer() -> any UnkeyedEncodingContainer {
            if case .array(let a) = result { return Unkeyed(array: a) }
            let a = Array()
            result = .array(a)
            return Unkeyed(array: a)
        }

        func singleValueContainer() -> any SingleValueEncodingContainer { Single(encoder: self) }
    }

    struct Keyed<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let object: Object
        var codingPath: [any CodingKey] = []

        private func put(_ key: Key, _ node: Node) {
            object.pairs.append((key is VerbatimKey ? key.stringValue : ReportJSON.snakeCase(key.stringValue), node))
        }

        mutating func encodeNil(forKey key: Key) throws { put(key, .null) }
        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws { put(key, try ReportJSON.node(value)) }
        mutating func encode(_ value: Bool, forKey key: Key) throws { put(key, .bool(value)) }
        mutating func encode(_ value: String, forKey key: Key) throws { put(key, .string(value)) }
        mutating func encode(_ value: Double, forKey key: Key) throws { put(key, ReportJSON.number(value)) }
        mutating func encode(_ value: Float, forKey key: Key) throws { put(key, ReportJSON.number(Double(value))) }
        mutating func encode(_ value: Int, forKey key: Key) throws { put(key, .number(String(value))) }
        mutating func encode(_ value: Int8, forKey key: Key) throws { put(key, .number(String(value))) }
        mutating func encode(_ value: Int16, forKey key: Key) throws { put(key, .number(String(value))) }
        mutating func encode(_ value: Int32, forKey key: Key) throws { put(key, .number(String(value))) }
        mutating func encode(_ value: Int64, forKey key: Key) throws { put(key, .number(String(value))) }
        mutating func encode(_ value: UInt, forKey key: Key) throws { put(key, .number(String(value))) }
        mutating func encode(_ value: UInt8, forKey key: Key) throws { put(key, .number(String(value))) }
        mutating func encode(_ value: UInt16, forKey key: Key) throws { put(key, .number(String(value))) }
        mutating func encode(_ value: UInt32, forKey key: Key) throws { put(key, .number(String(value))) }
        mutating func encode(_ value: UInt64, forKey key: Key) throws { put(key, .number(String(value))) }

        // Every key is written: a nil optional as null.
        mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws { put(key, try value.map { try ReportJSON.node($0) } ?? .null) }
        mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { put(key, value.map(Node.bool) ?? .null) }
        mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { put(key, value.map(Node.string) ?? .null) }
        mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { put(key, value.map(ReportJSON.number) ?? .null) }
        mutating func encodeIfPresent(_ value: Float?, forKey key: Key) throws { put(key, value.map { ReportJSON.number(Double($0)) } ?? .null) }
        mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { put(key, value.map { .number(String($0)) } ?? .null) }
        mutating func encodeIfPresent(_ value: Int8?, forKey key: Key) throws { put(key, value.map { .number(String($0)) } ?? .null) }
        mutating func encodeIfPresent(_ value: Int16?, forKey key: Key) throws { put(key, value.map { .number(String($0)) } ?? .null) }
        mutating func encodeIfPresent(_ value: Int32?, forKey key: Key) throws { put(key, value.map { .number(String($0)) } ?? .null) }
        mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { put(key, value.map { .number(String($0)) } ?? .null) }
        mutating func encodeIfPresent(_ value: UInt?, forKey key: Key) throws { put(key, value.map { .number(String($0)) } ?? .null) }
        mutating func encodeIfPresent(_ value: UInt8?, forKey key: Key) throws { put(key, value.map { .number(String($0)) } ?? .null) }
        mutating func encodeIfPresent(_ value: UInt16?, forKey key: Key) throws { put(key, value.map { .number(String($0)) } ?? .null) }
        mutating func encodeIfPresent(_ value: UInt32?, forKey key: Key) throws { put(key, value.map { .number(String($0)) } ?? .null) }
        mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws { put(key, value.map { .number(String($0)) } ?? .null) }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
            let o = Object()
            put(key, .object(o))
            return KeyedEncodingContainer(Keyed<NestedKey>(object: o))
        }

        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            let a = Array()
            put(key, .array(a))
            return Unkeyed(array: a)
        }

        mutating func superEncoder() -> any Encoder { SlotEncoder { [object] in object.pairs.append(("super", $0)) } }
        mutating func superEncoder(forKey key: Key) -> any Encoder { SlotEncoder { [object] in object.pairs.append((ReportJSON.snakeCase(key.stringValue), $0)) } }
    }

    struct Unkeyed: UnkeyedEncodingContainer {
        let array: Array
        var codingPath: [any CodingKey] = []
        var count: Int { array.items.count }

        mutating func encodeNil() throws { array.items.append(.null) }
        mutating func encode<T: Encodable>(_ value: T) throws { array.items.append(try ReportJSON.node(value)) }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
            let o = Object()
            array.items.append(.object(o))
            return KeyedEncodingContainer(Keyed<NestedKey>(object: o))
        }

        mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
            let a = Array()
            array.items.append(.array(a))
            return Unkeyed(array: a)
        }

        mutating func superEncoder() -> any Encoder { SlotEncoder { [array] in array.items.append($0) } }
    }

    struct Single: SingleValueEncodingContainer {
        let encoder: NodeEncoder
        var codingPath: [any CodingKey] = []

        mutating func encodeNil() throws { encoder.result = .null }
        mutating func encode<T: Encodable>(_ value: T) throws { encoder.result = try ReportJSON.node(value) }
    }

    /// An encoder whose value lands where a container kept a place for it (super encoders).
    final class SlotEncoder: Encoder {
        var codingPath: [any CodingKey] = []
        var userInfo: [CodingUserInfoKey: Any] = [:]
        private let inner = NodeEncoder()
        private let land: (Node) -> Void

        init(_ land: @escaping (Node) -> Void) { self.land = land }
        deinit { land(inner.result) }

        func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> { inner.container(keyedBy: type) }
        func unkeyedContainer() -> any UnkeyedEncodingContainer { inner.unkeyedContainer() }
        func singleValueContainer() -> any SingleValueEncodingContainer { inner.singleValueContainer() }
    }
}
