import Foundation

/// A position in one origin's log: contiguous from 1.
public struct Seq: RawRepresentable, Comparable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(_ value: UInt64) { self.rawValue = value }
    public static func < (a: Seq, b: Seq) -> Bool { a.rawValue < b.rawValue }
    /// The largest seq a log may hold (SQLite's largest integer). Every decoder refuses a seq past
    /// it, so `next` of any seq that came from outside cannot overflow.
    public static let max = Seq(UInt64(Int64.max))
    /// Whether `raw` may be a seq: 1 through `Seq.max` (0 means "none" where a cursor allows it).
    @inline(__always) public static func isValid(_ raw: UInt64) -> Bool { raw >= 1 && raw <= max.rawValue }
    /// The seq after this one; saturates at `UInt64.max` rather than trapping (decoders bound
    /// seqs by `Seq.max`, so this is never reached from valid input).
    public var next: Seq { Seq(rawValue == UInt64.max ? rawValue : rawValue + 1) }
    public var description: String { String(rawValue) }

    /// The sum of `counts` (events of each origin, seqs), held at `UInt64.max` instead of
    /// trapping: each may be up to `Seq.max`, and a peer's snapshot can set a floor there for any
    /// number of origins, so three of them already pass what a `UInt64` holds.
    public static func total<S: Sequence<UInt64>>(_ counts: S) -> UInt64 {
        var total: UInt64 = 0
        for c in counts {
            let (sum, overflow) = total.addingReportingOverflow(c)
            if overflow { return .max }
            total = sum
        }
        return total
    }
}

/// The identity of a replica; every event a replica authors carries it as `origin`.
public struct ReplicaID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UUID
    public init(rawValue: UUID) { self.rawValue = rawValue }
    /// Parses the canonical text form (any case); nil when it is not a UUID.
    public init?(_ text: String) {
        guard let uuid = UUIDText.parse(text) else { return nil }
        self.rawValue = uuid
    }
    public static func random() -> ReplicaID { ReplicaID(rawValue: UUID()) }
    /// Lowercase canonical text, as used in directory names and output.
    public var description: String { UUIDText.format(rawValue) }
    public static func < (a: ReplicaID, b: ReplicaID) -> Bool { a.rawValue.bytes.lexicographicallyPrecedes(b.rawValue.bytes) }
}

extension UUID {
    /// The 16 bytes of the UUID in network order.
    @inlinable
    public var bytes: [UInt8] {
        withUnsafeBytes(of: uuid) { Array($0) }
    }

    /// Builds a UUID from exactly 16 bytes.
    @inlinable
    public init(bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count == 16, "a UUID is 16 bytes")
        var tuple: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &tuple) { $0.copyMemory(from: bytes) }
        self.init(uuid: tuple)
    }

    /// Lowercase canonical text form.
    public var lowercasedString: String { UUIDText.format(self) }
}
