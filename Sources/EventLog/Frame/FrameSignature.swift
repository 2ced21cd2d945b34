import Crypto
import Foundation

/// A replica's signing key (Ed25519). A store made by this build has one, and its replica id is
/// derived from the public key (`ReplicaID.derived(fromSigningKey:)`), so any receiver can tell
/// which key an origin's frames must be signed with from the origin id alone. The private key
/// lives in the store's `replica.key` (mode 0600) and is never shipped. See docs/FORMAT.md,
/// "Signed frames".
public struct ReplicaKey: Sendable {
    let privateKey: Curve25519.Signing.PrivateKey
    /// The 32-byte Ed25519 public key.
    public let publicKey: [UInt8]
    /// The replica id this key signs for (derived once: the encoder checks it per frame).
    public let replicaID: ReplicaID

    /// A new random key.
    public static func generate() -> ReplicaKey { ReplicaKey(Curve25519.Signing.PrivateKey()) }

    /// The key with this 32-byte private key (seed); nil when it is not 32 bytes.
    public init?(seed: [UInt8]) {
        guard seed.count == 32, let k = try? Curve25519.Signing.PrivateKey(rawRepresentation: seed) else { return nil }
        self.init(k)
    }

    private init(_ k: Curve25519.Signing.PrivateKey) {
        privateKey = k
        publicKey = Array(k.publicKey.rawRepresentation)
        replicaID = ReplicaID.derived(fromSigningKey: publicKey)
    }

    func sign(_ message: [UInt8]) -> [UInt8] {
        guard let s = try? privateKey.signature(for: message), s.count == 64 else {
            preconditionFailure("Ed25519 signing failed")
        }
        return Array(s)
    }

    // MARK: The key file (`replica.key`)

    static let fileMagic: [UInt8] = Array("LBRK".utf8)
    static let fileVersion: UInt8 = 1
    static let fileBytes = 44

    /// The key file's bytes: magic, version, reserved, the 32-byte seed, CRC-32C.
    func fileContents() -> [UInt8] {
        var w = ByteWriter(capacity: Self.fileBytes)
        w.raw(Self.fileMagic)
        w.u8(Self.fileVersion)
        w.raw([0, 0, 0])
        w.raw(Array(privateKey.rawRepresentation))
        w.u32(CRC32C.checksum(w.bytes))
        return w.bytes
    }

    /// Reads a key file; names what is wrong with it.
    static func parse(_ bytes: [UInt8], path: String, op: String) throws -> ReplicaKey {
        func damaged(_ why: String) -> LogError {
            LogError(.corrupt, op, "the signing key file is damaged: \(why)", file: path,
                     hint: "restore replica.key from a backup; without it this replica cannot sign appends")
        }
        guard bytes.count == fileBytes else { throw damaged("it is \(bytes.count) bytes, a key file is \(fileBytes)") }
        guard Array(bytes[0..<4]) == fileMagic else { throw damaged("bad magic") }
        guard bytes[4] == fileVersion else {
            throw LogError(.unsupportedFormat, op, "signing key file version \(bytes[4]) is not supported (this build reads \(fileVersion))", file: path)
        }
        let crc = UInt32(bytes[40]) | UInt32(bytes[41]) << 8 | UInt32(bytes[42]) << 16 | UInt32(bytes[43]) << 24
        guard CRC32C.checksum(Array(bytes[0..<40])) == crc else { throw damaged("checksum mismatch") }
        guard bytes[5...7].allSatisfy({ $0 == 0 }) else { throw damaged("reserved bytes 5–7 are not zero") }
        guard let key = ReplicaKey(seed: Array(bytes[8..<40])) else { throw damaged("not an Ed25519 key") }
        return key
    }

    /// The public half, to show and to share.
    public var `public`: ReplicaPublicKey { ReplicaPublicKey(bytes: publicKey)! }

    /// The public key as text people can read out and a QR code holds compactly: RFC 4648
    /// base32, upper case, no padding, in groups of four (QR's alphanumeric mode takes it
    /// as is), prefixed `LBK1-`.
    public var printable: String { self.public.printable }

    /// Parses `printable`'s form (case and separators ignored); nil when it is not a key.
    public static func publicKey(fromPrintable text: String) -> [UInt8]? {
        var t = text.uppercased()
        guard t.hasPrefix("LBK1-") else { return nil }
        t.removeFirst(5)
        guard let bytes = Base32.decode(t.filter { $0 != "-" && $0 != " " }), bytes.count == 32 else { return nil }
        return bytes
    }
}

/// A replica's public signing key, as people and other replicas see it.
public struct ReplicaPublicKey: Sendable, Hashable, CustomStringConvertible {
    /// The 32-byte Ed25519 public key.
    public let bytes: [UInt8]

    /// Nil unless `bytes` is 32 bytes long.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    /// Parses the printable form (`LBK1-…`, any case, separators optional).
    public init?(printable text: String) {
        guard let b = ReplicaKey.publicKey(fromPrintable: text) else { return nil }
        bytes = b
    }

    /// The replica id this key signs for.
    public var replicaID: ReplicaID { ReplicaID.derived(fromSigningKey: bytes) }
    /// `LBK1-` and the key in base32, groups of four: to read out, compare, or put in a QR code.
    public var printable: String { "LBK1-" + Base32.encode(bytes).chunked(4).joined(separator: "-") }
    /// Lowercase hex.
    public var hex: String { bytes.map { String(format: "%02x", $0) }.joined() }
    public var description: String { printable }
}

extension ReplicaID {
    /// The replica id of a signing key: the first 16 bytes of SHA-256("logbook replica key v1" ‖
    /// key) with the UUID version set to 8 and the RFC 9562 variant. Ids of any other version
    /// (a random v4 id of a store made before signing, a legacy import's v5 id) have no key.
    public static func derived(fromSigningKey publicKey: [UInt8]) -> ReplicaID {
        var h = SHA256()
        h.update(data: Array("logbook replica key v1".utf8))
        h.update(data: publicKey)
        var b = Array(h.finalize().prefix(16))
        b[6] = (b[6] & 0x0F) | 0x80
        b[8] = (b[8] & 0x3F) | 0x80
        return ReplicaID(rawValue: b.withUnsafeBytes { UUID(bytes: $0) })
    }

    /// Whether this id is derived from a signing key (UUID version 8): then every frame of its
    /// log must be signed by that key.
    public var isKeyDerived: Bool {
        withUnsafeBytes(of: rawValue.uuid) { $0[6] >> 4 == 8 && $0[8] & 0xC0 == 0x80 }
    }
}

/// The signature block of a signed frame and its checks. See docs/FORMAT.md, "Signed frames".
package enum FrameSignature {
    /// Public key (32) then signature (64), at the end of the stored section.
    public static let blockBytes = 96
    static let domain: [UInt8] = Array("LBSG".utf8) + [1]

    /// What a signature signs: the domain tag, header bytes 0..<92 (everything but the CRC:
    /// origin, seqs, clocks, sizes, flags and the link to the previous frame) and the SHA-256
    /// of the payload (the stored section without the signature block).
    static func message(header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) -> [UInt8] {
        var m = domain
        m.reserveCapacity(domain.count + FrameHeader.size - 4 + 32)
        m.append(contentsOf: UnsafeRawBufferPointer(rebasing: header[0..<FrameHeader.size - 4]))
        m.append(contentsOf: SHA256.hash(data: payload))
        return m
    }

    /// Checks a frame whose header parsed and whose CRC checked, signature included: a signed
    /// frame's key must be its origin's (the origin id derives from it) and its signature must
    /// verify; a frame of a key-derived origin must be signed.
    /// - Returns: whether the frame is signed.
    @discardableResult
    static func check(_ frame: UnsafeRawBufferPointer, header: FrameHeader) throws(FrameDecodeError) -> Bool {
        let signed = try checkForm(frame, header: header)
        if signed { try verify(frame, header: header) }
        return signed
    }

    /// The checks of `check` that need no signature verification (cheap): whether a frame that
    /// must be signed is, and whether a signed frame's key is its origin's.
    @discardableResult
    static func checkForm(_ frame: UnsafeRawBufferPointer, header: FrameHeader) throws(FrameDecodeError) -> Bool {
        let origin = header.origin
        guard header.signed else {
            if origin.isKeyDerived {
                throw .invalid("unsigned, but origin \(origin) is a signing replica (its id derives from its key): forged or altered")
            }
            return false
        }
        let end = header.totalBytes
        let key = Array(UnsafeRawBufferPointer(rebasing: frame[end - blockBytes..<end - blockBytes + 32]))
        guard origin.isKeyDerived else { throw .invalid("signed with a key that is not origin \(origin)'s (its id derives from no key): forged") }
        guard let share = ShareBlock.of(frame, header: header) else {
            guard ReplicaID.derived(fromSigningKey: key) == origin else {
                throw .invalid("signed with a key that is not origin \(origin)'s: forged")
            }
            return true
        }
        // A share's frame: a membership log (epoch 0, not sealed) or a member's sealed log, whose
        // origin ids derive from the share and the writer's key.
        if header.sealed {
            guard share.epoch >= 1 else { throw .invalid("a sealed frame of share \(share.share) with key epoch 0") }
            guard ReplicaID.shareLog(share.share, signingKey: key) == origin else {
                throw .invalid("signed with a key that is not origin \(origin)'s (share \(share.share)): forged")
            }
        } else {
            guard share.epoch == 0, share.nonce.allSatisfy({ $0 == 0 }) else {
                throw .invalid("a share's frame that is not sealed has key epoch \(share.epoch) or a nonce")
            }
            guard ReplicaID.shareMembers(share.share, signingKey: key) == origin else {
                throw .invalid("signed with a key that is not origin \(origin)'s (membership of share \(share.share)): forged")
            }
        }
        return true
    }

    /// The replica whose key signs `frame`, a share's frame: the replica id that key derives,
    /// when the frame's form checks (its origin derives from that key and its share). nil for
    /// any other frame. Its signature is not verified here (receiving does).
    package static func shareWriter(of frame: UnsafeRawBufferPointer, header: FrameHeader) -> ReplicaID? {
        guard header.shared, header.totalBytes <= frame.count, (try? checkForm(frame, header: header)) == true else { return nil }
        let end = header.totalBytes
        return ReplicaID.derived(fromSigningKey: Array(UnsafeRawBufferPointer(rebasing: frame[end - blockBytes..<end - blockBytes + 32])))
    }

    /// Verifies the signature of a signed frame that passed `checkForm`.
    static func verify(_ frame: UnsafeRawBufferPointer, header: FrameHeader) throws(FrameDecodeError) {
        try verify(frame, header: header, remembering: .shared)
    }

    /// `verify`, answered from `verified` when these exact message, key and signature verified
    /// before in this process, and remembered there once they do.
    static func verify(_ frame: UnsafeRawBufferPointer, header: FrameHeader, remembering verified: VerifiedSignatures) throws(FrameDecodeError) {
        let end = header.totalBytes
        let block = UnsafeRawBufferPointer(rebasing: frame[end - blockBytes..<end])
        let message = Self.message(header: frame, payload: UnsafeRawBufferPointer(rebasing: frame[FrameHeader.size..<end - blockBytes]))
        let seen = VerifiedSignatures.Key(message: message, block: block)
        if verified.contains(seen) { return }
        guard let pub = try? Curve25519.Signing.PublicKey(rawRepresentation: Array(block[0..<32])),
              pub.isValidSignature(Array(block[32..<96]), for: message) else {
            throw .invalid("its signature does not verify against origin \(header.origin)'s key: forged or altered")
        }
        verified.insert(seen)
    }
}

/// Frame signatures this process verified lately, by a SHA-256 of what verifying reads (the
/// signed message, which binds the header and a hash of the payload; the key; the signature).
/// The same frame is often checked twice in one process: a server checks a push's events for
/// their actors, then receives the push on its writer. Ed25519 verification is the cost there,
/// and a check whose exact inputs verified before needs no second one. Only a verification
/// that succeeded is remembered, so nothing sent can make a bad signature pass (a frame that
/// differs in any byte the signature covers is another key); at most `capacity` are kept,
/// the oldest given up first.
final class VerifiedSignatures: @unchecked Sendable {
    static let shared = VerifiedSignatures(capacity: 16_384)

    struct Key: Hashable {
        let a: UInt64, b: UInt64, c: UInt64, d: UInt64

        init(message: [UInt8], block: UnsafeRawBufferPointer) {
            var h = SHA256()
            h.update(data: message)
            h.update(bufferPointer: block)
            var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            h.finalize().withUnsafeBytes { d in withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: d) } }
            (a, b, c, d) = words
        }
    }

    private let lock = NSLock()
    private var held: Set<Key> = []
    /// Keys in the order they came, as a ring: `order[next]` goes out first when full.
    private var order: [Key] = []
    private var next = 0
    let capacity: Int

    init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
    }

    func contains(_ k: Key) -> Bool { lock.withLock { held.contains(k) } }

    func insert(_ k: Key) {
        lock.withLock {
            guard held.insert(k).inserted else { return }
            if order.count < capacity {
                order.append(k)
            } else {
                held.remove(order[next])
                order[next] = k
                next = (next + 1) % capacity
            }
        }
    }

    var count: Int { lock.withLock { held.count } }
}

/// RFC 4648 base32 (upper case, no padding).
enum Base32 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for b in bytes {
            buffer = buffer << 8 | UInt32(b)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[Int(buffer >> UInt32(bits - 5) & 31)])
                bits -= 5
            }
            buffer &= (1 << UInt32(bits)) - 1
        }
        if bits > 0 { out.append(alphabet[Int(buffer << UInt32(5 - bits) & 31)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Nil for a character outside the alphabet or leftover bits that are not zero.
    static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for c in text.utf8 {
            guard let v = alphabet.firstIndex(of: c) else { return nil }
            buffer = buffer << 5 | UInt32(v)
            bits += 5
            if bits >= 8 {
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits - 8)))
                bits -= 8
            }
            buffer &= (1 << UInt32(bits)) - 1
        }
        guard bits < 5, buffer == 0 else { return nil }
        return out
    }
}

extension String {
    func chunked(_ n: Int) -> [String] {
        var out: [String] = []
        var i = startIndex
        while i < endIndex {
            let j = index(i, offsetBy: n, limitedBy: endIndex) ?? endIndex
            out.append(String(self[i..<j]))
            i = j
        }
        return out
    }
}
