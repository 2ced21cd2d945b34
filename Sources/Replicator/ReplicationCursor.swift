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

    /// Total events `source` holds past this cursor (held at `UInt64.max`: `Seq.total`).
    public func lag(behind source: ReplicationCursor) -> UInt64 {
        Seq.total(missing(from: source).values.lazy.map { $0.upperBound - $0.lowerBound + 1 })
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
        return Self.tokenPrefix + Base64URL.encode(bytes)
    }

    /// Reads a token.
    /// - Throws: `CursorTokenError` naming what is wrong (prefix, encoding, checksum, layout).
    public init(token: String) throws(CursorTokenError) {
        guard token.hasPrefix(Self.tokenPrefix) else { throw CursorTokenError("a cursor token starts with \"\(Self.tokenPrefix)\"") }
        guard let bytes = Base64URL.decode(token.utf8.dropFirst(Self.tokenPrefix.utf8.count)), bytes.count >= 4 else {
            throw CursorTokenError("the cursor token is not valid base64url")
        }
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

/// Base64url without padding (RFC 4648, section 5), as cursor tokens use it: written and read
/// directly (Foundation's base64 and three character replacements cost more than the rest of a
/// page's head).
enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var i = 0
        while i + 3 <= bytes.count {
            let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            out += [alphabet[Int(v >> 18)], alphabet[Int(v >> 12 & 63)], alphabet[Int(v >> 6 & 63)], alphabet[Int(v & 63)]]
            i += 3
        }
        switch bytes.count - i {
        case 1:
            let v = UInt32(bytes[i]) << 16
            out += [alphabet[Int(v >> 18)], alphabet[Int(v >> 12 & 63)]]
        case 2:
            let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8
            out += [alphabet[Int(v >> 18)], alphabet[Int(v >> 12 & 63)], alphabet[Int(v >> 6 & 63)]]
        default:
            break
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// nil for anything but unpadded base64url whose unused last bits are zero.
    static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(text.count * 3 / 4)
        var acc: UInt32 = 0, bits = 0
        for c in text {
            let v: UInt32
            switch c {
            case 0x41...0x5A: v = UInt32(c - 0x41)
            case 0x61...0x7A: v = UInt32(c - 0x61) + 26
            case 0x30...0x39: v = UInt32(c - 0x30) + 52
            case 0x2D: v = 62
            case 0x5F: v = 63
            default: return nil
            }
            acc = (acc << 6 | v) & 0xFFFFFF
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
            }
        }
        // 2 or 4 bits left over are padding and must be zero; 6 is a lone character (no byte).
        guard bits < 6, acc & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return out
    }
}
