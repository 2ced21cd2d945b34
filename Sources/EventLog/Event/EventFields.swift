import Foundation

/// The changed fields of an event (`Event.fields`): a random-access collection of `Field`, in
/// name order, that reads and writes like an array.
///
/// An event read from the log holds its fields as the records they were read from: the frame's
/// decoded payload, shared by every event of that frame and checked whole before any of them was
/// handed out (every record, as decoding checks it). A field is decoded when it is read, so a
/// read that looks at an event's ids, entity, clock or field count pays nothing for its fields;
/// one that reads every field pays what decoding them up front did. Reading a field twice decodes
/// it twice: `array` decodes them all once.
///
/// Like a `Substring` or an `ArraySlice`, such an event keeps its frame's payload (the frame's
/// decompressed records, about 60 KiB for a frame of a thousand small events, and where each
/// field starts) alive while it is kept. A frame of more than 1 MiB of records
/// (`FrameDecoder.keptPayloadBytesMax`) is decoded whole instead, its events' fields in arrays.
/// Changing a field, or `detach()`, turns the fields into an array of their own and lets the
/// payload go.
public struct EventFields: Sendable {
    enum Storage: Sendable {
        /// Fields as values.
        case decoded([Field])
        /// Fields `first ..< first + count` of `records.fieldOffsets`, decoded when read.
        case encoded(FrameRecords, first: UInt32, count: UInt32)
    }

    var storage: Storage

    /// No fields.
    public init() { storage = .decoded([]) }

    /// `fields`, as given (an event's fields are kept in name order: `Mutation` sorts them).
    public init(_ fields: [Field]) { storage = .decoded(fields) }

    /// Fields `first ..< first + count` of `records`' checked records, decoded when read.
    init(records: FrameRecords, first: Int, count: Int) {
        storage = .encoded(records, first: UInt32(truncatingIfNeeded: first), count: UInt32(truncatingIfNeeded: count))
    }

    /// The fields as an array, each decoded once.
    public var array: [Field] {
        switch storage {
        case .decoded(let fields): return fields
        case .encoded(let records, let first, let count):
            var fields: [Field] = []
            fields.reserveCapacity(Int(count))
            for k in Int(first)..<Int(first) + Int(count) { fields.append(records.field(at: k)) }
            return fields
        }
    }

    /// Decodes the fields into an array of their own, letting go of the frame they were read from.
    public mutating func detach() {
        if case .encoded = storage { storage = .decoded(array) }
    }

    /// Whether the fields are still read from their frame's records (not yet an array).
    package var isEncoded: Bool {
        if case .encoded = storage { return true }
        return false
    }

    /// The value of the field named `name`, or nil. Read from the records, only the field found
    /// is decoded: the others' names are compared by their codes, their values skipped.
    func value(named name: String) -> FieldValue? {
        switch storage {
        case .decoded(let fields): return fields.first { $0.name == name }?.value
        case .encoded(let records, let first, let count):
            return records.value(named: name, in: Int(first)..<Int(first) + Int(count))
        }
    }

    /// Calls `body` with the fields as an array it may change, which they then are.
    mutating func withArray<R>(_ body: (inout [Field]) throws -> R) rethrows -> R {
        var fields = array
        storage = .decoded([])  // `fields` is then the array's only holder: changed in place
        defer { storage = .decoded(fields) }
        return try body(&fields)
    }
}

extension EventFields: RandomAccessCollection, MutableCollection, RangeReplaceableCollection {
    public typealias Index = Int
    public typealias Indices = Range<Int>
    public typealias SubSequence = Slice<EventFields>

    public var startIndex: Int { 0 }

    public var endIndex: Int { count }

    public var count: Int {
        switch storage {
        case .decoded(let fields): return fields.count
        case .encoded(_, _, let count): return Int(count)
        }
    }

    public var isEmpty: Bool { count == 0 }

    public subscript(position: Int) -> Field {
        get {
            switch storage {
            case .decoded(let fields): return fields[position]
            case .encoded(let records, let first, let count):
                precondition(position >= 0 && position < Int(count), "EventFields index out of range")
                return records.field(at: Int(first) + position)
            }
        }
        set { withArray { $0[position] = newValue } }
    }

    public mutating func replaceSubrange<C: Collection>(_ subrange: Range<Int>, with newElements: C) where C.Element == Field {
        withArray { $0.replaceSubrange(subrange, with: newElements) }
    }

    public mutating func reserveCapacity(_ n: Int) {
        withArray { $0.reserveCapacity(n) }
    }
}

extension EventFields {
    /// Walks the fields in order: an array's in place, a frame's decoding each as it is reached
    /// (no check of which storage per field, no count of references up and down on the array).
    public struct Iterator: IteratorProtocol {
        private let fields: [Field]
        private let records: FrameRecords?
        private var at: Int
        private let end: Int

        init(_ storage: Storage) {
            switch storage {
            case .decoded(let fields):
                self.fields = fields
                records = nil
                at = 0
                end = fields.count
            case .encoded(let records, let first, let count):
                fields = []
                self.records = records
                at = Int(first)
                end = Int(first) + Int(count)
            }
        }

        public mutating func next() -> Field? {
            guard at < end else { return nil }
            defer { at += 1 }
            if let records { return records.field(at: at) }
            return fields[at]
        }
    }

    public func makeIterator() -> Iterator { Iterator(storage) }
}

extension EventFields: ExpressibleByArrayLiteral {
    public init(arrayLiteral elements: Field...) { self.init(elements) }
}

extension EventFields: Equatable, Hashable {
    public static func == (a: EventFields, b: EventFields) -> Bool {
        if case .decoded(let x) = a.storage, case .decoded(let y) = b.storage { return x == y }
        if case .encoded(let r, let f, let n) = a.storage, case .encoded(let s, let g, let m) = b.storage, r === s, f == g, n == m { return true }
        return a.count == b.count && a.elementsEqual(b)
    }

    /// Whether `a` holds the fields of `b`, in the same order.
    public static func == (a: EventFields, b: [Field]) -> Bool { a.count == b.count && a.elementsEqual(b) }
    public static func == (a: [Field], b: EventFields) -> Bool { b == a }

    /// As an array of the same fields hashes.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(count)
        for f in self { hasher.combine(f) }
    }
}

extension EventFields: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String { array.description }
    public var debugDescription: String { array.debugDescription }
}

extension Array where Element == Field {
    /// The fields of `fields`, as an array.
    public init(_ fields: EventFields) { self = fields.array }
}
