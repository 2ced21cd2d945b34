import EventLog
import Foundation

/// A replica's position: for each origin, the last seq it holds (a version vector). Shipping
/// sends everything past the receiver's cursor; the cursor replaces the seeds' `needs_push`
/// flag and change token.
///
/// As text (`token`) it is opaque and stable: `lbc1.` followed by base64url of the entries
/// sorted by origin (16 bytes of origin, varint seq each) and a CRC-32C of them, so a token
/// copied by hand is either read exactly or refused.
///
/// ```swift
/// let mine = ReplicationCursor([a: Seq(10), b: Seq(3)])
/// let needed = theirs.missing(from: mine)   // ranges `theirs` lacks that `mine` holds
/// ```
/// A value type; safe to share between threads.
public struct ReplicationCursor: Sendable, Hashable, CustomStringConvertible {
    /// Last seq held per origin. Origins at seq 0 are not stored.
    public private(set) var entries: [ReplicaID: Seq]

    public init(_ entries: [ReplicaID: Seq] = [:]) {
        self.entries = entries.filter { $0.value.rawValue > 0 }
    }

    public static let empty = ReplicationCursor()

    /// The last seq held of `origin` (0 when none).
    public subscript(origin: ReplicaID) -> Seq {
        get { entries[origin] ?? Seq(0) }
        set {
            if newValue.rawValue == 0 { entries.removeValue(forKey: origin) } else { entries[origin] = newValue }
        }
    }

    /// The origins this cursor holds any events of, sorted.
    public var origins: [ReplicaID] { entries.keys.sorted() }

    /// The larger position of each origin: what a replica holds after receiving what `other` holds.
    public func merged(with other: ReplicationCursor) -> ReplicationCursor {
        var out = self
        for (o, s) in other.entries where s > out[o] { out[o] = s }
        return out
    }

    /// The positions of the origins `keep` accepts (what a scoped principal may see of a cursor).
    public func filtered(_ keep: (ReplicaID) -> Bool) -> ReplicationCursor {
        ReplicationCursor(entries.filter { keep($0.key) })
    }

    /// True when this cursor holds everything `other` holds.
    public func includes(_ other: ReplicationCursor) -> Bool {
        other.entries.allSatisfy { self[$0.key] >= $0.value }
    }

    /// How two cursors relate: equal, one ahead of the other, or each holding something the other lacks.
    public enum Order: Sendable, Equatable { case equal, ahead, behind, concurrent }

    public func compare(_ other: ReplicationCursor) -> Order {
        switch (includes(other), other.includes(self)) {
        case (true, true): .equal
        case (true, false): .ahead
        case (false, true): .behind
        case (false, false): .concurrent
        }
    }

    /// The seqs, per origin, that `source` holds past this cursor: exactly what must be shipped
    /// to bring this replica up to `source`.
    public func missing(from source: ReplicationCursor) -> [ReplicaID: ClosedRange<UInt64>] {
        var out: [ReplicaID: ClosedRange<UInt64>] = [:]
        for (o, s) in source.entries where s > self[o] {
            out[o] = (self[o].rawValue + 1)...s.rawValue
        }
        return out
    }

    /// Total events `source` holds past this cursor.
    public func lag(behind source: ReplicationCursor) -> UInt64 {
        missing(from: source).values.reduce(0) { $0 + ($1.upperBound - $1.lowerBound + 1) }
    }

    // MARK: Token

    public static let tokenPrefix = "lbc1."

    /// The opaque, stable text form: the same cursor always gives the same token.
    public var token: String {
        var bytes: [UInt8] = []
        for o in origins {
            withUnsafeBytes(of: o.rawValue.uuid) { bytes.append(contentsOf: $0) }
            var v = entries[o]!.rawValue
            while v >= 0x80 {
                bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
                v >>= 7
            }
            bytes.append(UInt8(v))
        }
        let crc = CRC32C.checksum(bytes)
        withUnsafeBytes(of: crc.littleEndian) { bytes.append(contentsOf: $0) }
        return Self.tokenPrefix + Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// Reads a token.
    /// - Throws: `CursorTokenError` naming what is wrong (prefix, encoding, checksum, layout).
    public init(token: String) throws(CursorTokenError) {
        guard token.hasPrefix(Self.tokenPrefix) else { throw CursorTokenError("a cursor token starts with \"\(Self.tokenPrefix)\"") }
        var b64 = String(token.dropFirst(Self.tokenPrefix.count)).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.count % 4 != 0 { b64 += "=" }
        guard let data = Data(base64Encoded: b64), data.count >= 4 else { throw CursorTokenError("the cursor token is not valid base64url") }
        let bytes = [UInt8](data)
        let body = Array(bytes[..<(bytes.count - 4)])
        let stored = bytes[(bytes.count - 4)...].withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) }
        guard CRC32C.checksum(body) == stored else { throw CursorTokenError("the cursor token is damaged (checksum mismatch)") }
        var entries: [ReplicaID: Seq] = [:]
        var i = 0
        var previous: ReplicaID?
        while i < body.count {
            guard i + 16 < body.count else { throw CursorTokenError("the cursor token is truncated") }
            let origin = ReplicaID(rawValue: body[i..<i + 16].withUnsafeBytes { UUID(bytes: $0) })
            i += 16
            // A canonical LEB128 varint of at most 9 bytes (a seq is at most Seq.max, 63 bits).
            var v: UInt64 = 0
            var shift: UInt64 = 0
            let start = i
            while true {
                guard i < body.count, shift <= 56 else { throw CursorTokenError("the cursor token has a malformed seq at byte \(start)") }
                let c = body[i]
                i += 1
                v |= UInt64(c & 0x7F) << shift
                if c < 0x80 {
                    guard c != 0 || i - start == 1 else { throw CursorTokenError("the cursor token is not in canonical form (seq at byte \(start))") }
                    break
                }
                shift += 7
            }
            guard v <= Seq.max.rawValue else { throw CursorTokenError("the cursor token names seq \(v), past the largest seq \(Seq.max)") }
            guard previous.map({ $0 < origin }) ?? true, v > 0 else { throw CursorTokenError("the cursor token is not in canonical form") }
            previous = origin
            entries[origin] = Seq(v)
        }
        self.entries = entries
    }

    public var description: String {
        origins.map { "\($0): \(entries[$0]!)" }.joined(separator: ", ")
    }
}

/// A cursor token that could not be read, and why.
public struct CursorTokenError: Error, CustomStringConvertible, Equatable, Sendable {
    public var message: String
    init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension Store {
    /// This store's cursor: the last seq it holds of every origin. Reads each origin's newest
    /// index and the frames past it, not the whole log.
    public func cursor() throws -> ReplicationCursor {
        let reader = LogReader(store: self)
        var c = ReplicationCursor()
        for o in try origins() { c[o] = try reader.tip(origin: o, hashing: false).lastSeq }
        return c
    }
}
