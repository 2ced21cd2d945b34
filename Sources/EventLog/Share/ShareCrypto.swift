import Crypto
import Foundation

/// A share: a named set of entities with members, replicated, sealed and erased as a unit
/// (docs/SHARING.md). Its id is derived from its creator's public key and a random nonce, so the
/// share's membership log (whose origin id is derived from the id and the creator's key) can be
/// told from any other log claiming the same id: forging one needs a second preimage of SHA-256.
public struct ShareID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UUID
    public init(rawValue: UUID) { self.rawValue = rawValue }
    /// Parses the canonical text form; nil when it is not a UUID.
    public init?(_ text: String) {
        guard let u = UUIDText.parse(text) else { return nil }
        rawValue = u
    }
    public var description: String { UUIDText.format(rawValue) }
    public static func < (a: ShareID, b: ShareID) -> Bool { a.rawValue.bytes.lexicographicallyPrecedes(b.rawValue.bytes) }

    /// SHA-256("logbook share v1" ‖ creator key ‖ nonce), first 16 bytes, as a version-8 UUID.
    public static func derived(creator publicKey: [UInt8], nonce: [UInt8]) -> ShareID {
        ShareID(rawValue: ShareCrypto.uuid8("logbook share v1", publicKey, nonce))
    }
}

extension ReplicaID {
    /// The origin of the log a member (`publicKey`) writes a share's sealed events into.
    public static func shareLog(_ share: ShareID, signingKey publicKey: [UInt8]) -> ReplicaID {
        ReplicaID(rawValue: ShareCrypto.uuid8("logbook share log v1", share.rawValue.bytes, publicKey))
    }

    /// The origin of a share's membership log, written by its creator (`publicKey`).
    public static func shareMembers(_ share: ShareID, signingKey publicKey: [UInt8]) -> ReplicaID {
        ReplicaID(rawValue: ShareCrypto.uuid8("logbook share members v1", share.rawValue.bytes, publicKey))
    }
}

/// The 32-byte block a share's frame carries after its payload and before its signature block
/// (docs/FORMAT.md, "Share frames"): the share, the content key's epoch (0 in a membership log,
/// whose frames are not sealed) and the AEAD nonce (zero when not sealed).
public struct ShareBlock: Sendable, Equatable {
    public static let bytes = 32
    public var share: ShareID
    public var epoch: UInt32
    public var nonce: [UInt8]

    public init(share: ShareID, epoch: UInt32, nonce: [UInt8]) {
        precondition(nonce.count == 12, "a nonce is 12 bytes")
        self.share = share
        self.epoch = epoch
        self.nonce = nonce
    }

    func encode(into w: inout ByteWriter) {
        w.uuid(share.rawValue)
        w.u32(epoch)
        w.raw(nonce)
    }

    static func decode(_ p: UnsafeRawBufferPointer) -> ShareBlock {
        precondition(p.count == bytes, "a share block is \(bytes) bytes")
        let share = ShareID(rawValue: UUID(bytes: UnsafeRawBufferPointer(rebasing: p[0..<16])))
        let epoch = UInt32(p[16]) | UInt32(p[17]) << 8 | UInt32(p[18]) << 16 | UInt32(p[19]) << 24
        return ShareBlock(share: share, epoch: epoch, nonce: Array(p[20..<32]))
    }

    /// The block of a frame whose header says it has one.
    static func of(_ frame: UnsafeRawBufferPointer, header: FrameHeader) -> ShareBlock? {
        guard header.shared else { return nil }
        let at = header.payloadEnd
        return decode(UnsafeRawBufferPointer(rebasing: frame[at..<at + bytes]))
    }
}

/// A share's content key for one epoch: ChaCha20-Poly1305, 32 bytes.
public struct ContentKey: Sendable, Equatable {
    public let epoch: UInt32
    public let bytes: [UInt8]
    public init?(epoch: UInt32, bytes: [UInt8]) {
        guard epoch >= 1, bytes.count == 32 else { return nil }
        self.epoch = epoch
        self.bytes = bytes
    }
    public static func generate(epoch: UInt32) -> ContentKey {
        ContentKey(epoch: epoch, bytes: SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) })!
    }
    var symmetric: SymmetricKey { SymmetricKey(data: bytes) }
}

/// What only the holder of a replica key can show: a member card binds the replica's key
/// agreement key (X25519, derived from its signing seed) to its signing key, signed by it. An
/// admin adds a member by its card; the share's content keys are sealed (HPKE) to the card's
/// agreement key, and the card's signature shows the card was made by the replica it names.
public struct MemberCard: Sendable, Hashable, CustomStringConvertible {
    public let signingKey: [UInt8]
    public let agreementKey: [UInt8]
    public let signature: [UInt8]
    static let domain: [UInt8] = Array("LBMC".utf8) + [1]
    static let bytes = 128

    /// The replica this card is for.
    public var replicaID: ReplicaID { ReplicaID.derived(fromSigningKey: signingKey) }

    /// Parses and verifies a card's bytes; nil when they are not a card its key signed.
    public init?(bytes b: [UInt8]) {
        guard b.count == Self.bytes else { return nil }
        let card = MemberCard(signingKey: Array(b[0..<32]), agreementKey: Array(b[32..<64]), signature: Array(b[64..<128]))
        guard let pub = try? Curve25519.Signing.PublicKey(rawRepresentation: card.signingKey),
              (try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: card.agreementKey)) != nil,
              pub.isValidSignature(card.signature, for: Self.domain + card.signingKey + card.agreementKey) else { return nil }
        self = card
    }

    /// Parses the printable form (`LBM1-…`, any case, separators ignored) and verifies it.
    public init?(printable text: String) {
        var t = text.uppercased().filter { $0 != "-" && $0 != " " && $0 != "\n" }
        guard t.hasPrefix("LBM1") else { return nil }
        t.removeFirst(4)
        guard let b = Base32.decode(t) else { return nil }
        self.init(bytes: b)
    }

    fileprivate init(signingKey: [UInt8], agreementKey: [UInt8], signature: [UInt8]) {
        self.signingKey = signingKey
        self.agreementKey = agreementKey
        self.signature = signature
    }

    init(key: ReplicaKey) {
        let agreement = Array(key.agreementKey.publicKey.rawRepresentation)
        self.init(signingKey: key.publicKey, agreementKey: agreement, signature: key.sign(Self.domain + key.publicKey + agreement))
    }

    public var encoded: [UInt8] { signingKey + agreementKey + signature }
    /// `LBM1-` and the card in base32, groups of four.
    public var printable: String { "LBM1-" + Base32.encode(encoded).chunked(4).joined(separator: "-") }
    public var description: String { printable }
}

extension ReplicaKey {
    /// The replica's X25519 key agreement key: HKDF-SHA256 of the signing seed with its own
    /// label, so one 32-byte secret in `replica.key` holds both and neither reveals the other.
    var agreementKey: Curve25519.KeyAgreement.PrivateKey {
        let seed = SymmetricKey(data: privateKey.rawRepresentation)
        let derived = HKDF<SHA256>.deriveKey(inputKeyMaterial: seed, salt: Array("logbook x25519 v1".utf8), info: [], outputByteCount: 32)
        return derived.withUnsafeBytes { try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: Array($0)) }
    }

    /// This replica's member card: what an admin needs to add it to a share.
    public var memberCard: MemberCard { MemberCard(key: self) }
}

enum ShareCrypto {
    static func uuid8(_ label: String, _ a: [UInt8], _ b: [UInt8]) -> UUID {
        var h = SHA256()
        h.update(data: Array(label.utf8))
        h.update(data: a)
        h.update(data: b)
        var bytes = Array(h.finalize().prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x80
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return bytes.withUnsafeBytes { UUID(bytes: $0) }
    }

    /// What a sealed payload's AEAD authenticates besides itself: the share, the epoch, the
    /// origin and the first seq (a payload cannot be moved to another frame, log or share).
    static func associatedData(_ block: ShareBlock, origin: ReplicaID, baseSeq: Seq) -> [UInt8] {
        var w = ByteWriter(capacity: 48)
        w.raw(Array("LBSE".utf8) + [1])
        w.uuid(block.share.rawValue)
        w.u32(block.epoch)
        w.uuid(origin.rawValue)
        w.u64(baseSeq.rawValue)
        return w.bytes
    }

    /// Seals `plain` with `key`: ciphertext then the 16-byte tag.
    static func seal(_ plain: UnsafeRawBufferPointer, key: ContentKey, block: ShareBlock, origin: ReplicaID, baseSeq: Seq) -> [UInt8] {
        guard let nonce = try? ChaChaPoly.Nonce(data: block.nonce),
              let box = try? ChaChaPoly.seal(plain, using: key.symmetric, nonce: nonce,
                                             authenticating: associatedData(block, origin: origin, baseSeq: baseSeq)) else {
            preconditionFailure("ChaChaPoly sealing failed")
        }
        return Array(box.ciphertext) + Array(box.tag)
    }

    /// Opens a sealed payload; nil when it does not authenticate under `key`.
    static func open(_ sealed: UnsafeRawBufferPointer, key: ContentKey, block: ShareBlock, origin: ReplicaID, baseSeq: Seq) -> [UInt8]? {
        guard sealed.count >= 16, let nonce = try? ChaChaPoly.Nonce(data: block.nonce),
              let box = try? ChaChaPoly.SealedBox(nonce: nonce, ciphertext: sealed[..<(sealed.count - 16)], tag: sealed[(sealed.count - 16)...]),
              let plain = try? ChaChaPoly.open(box, using: key.symmetric, authenticating: associatedData(block, origin: origin, baseSeq: baseSeq)) else { return nil }
        return Array(plain)
    }

    /// Seals a share's name with its first key (members read it; a hub sees the id only):
    /// nonce (12 bytes), ciphertext, tag.
    static func sealName(_ name: String, key: ContentKey, share: ShareID) -> [UInt8] {
        guard let box = try? ChaChaPoly.seal(Array(name.utf8), using: key.symmetric, nonce: ChaChaPoly.Nonce(),
                                             authenticating: Array("LBSN".utf8) + share.rawValue.bytes) else {
            preconditionFailure("ChaChaPoly sealing failed")
        }
        return Array(box.combined)
    }

    /// Opens a sealed name; nil when it does not open with `key`.
    static func openName(_ sealed: [UInt8], key: ContentKey, share: ShareID) -> String? {
        guard sealed.count >= 28, let box = try? ChaChaPoly.SealedBox(combined: sealed),
              let plain = try? ChaChaPoly.open(box, using: key.symmetric, authenticating: Array("LBSN".utf8) + share.rawValue.bytes) else { return nil }
        return String(decoding: plain, as: UTF8.self)
    }

    static let hpkeSuite = HPKE.Ciphersuite.Curve25519_SHA256_ChachaPoly

    static func wrapInfo(_ share: ShareID, epoch: UInt32) -> [UInt8] {
        var w = ByteWriter(capacity: 40)
        w.raw(Array("logbook share key v1".utf8))
        w.uuid(share.rawValue)
        w.u32(epoch)
        return w.bytes
    }

    /// Seals a content key to a member (HPKE base mode, X25519, ChaCha20-Poly1305): the
    /// encapsulated key (32 bytes) then the sealed key (48 bytes).
    static func wrap(_ key: ContentKey, share: ShareID, to card: MemberCard) throws -> [UInt8] {
        let recipient = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: card.agreementKey)
        var sender = try HPKE.Sender(recipientKey: recipient, ciphersuite: hpkeSuite, info: Data(wrapInfo(share, epoch: key.epoch)))
        let sealed = try sender.seal(key.bytes, authenticating: card.replicaID.rawValue.bytes)
        return Array(sender.encapsulatedKey) + Array(sealed)
    }

    /// Opens a wrapped content key sealed to `key`'s replica; nil when it is not for it.
    static func unwrap(_ wrapped: [UInt8], share: ShareID, epoch: UInt32, with key: ReplicaKey) -> ContentKey? {
        guard wrapped.count == 32 + 48,
              let r = try? HPKE.Recipient(privateKey: key.agreementKey, ciphersuite: hpkeSuite, info: Data(wrapInfo(share, epoch: epoch)),
                                          encapsulatedKey: Data(wrapped[0..<32])) else { return nil }
        var recipient = r
        guard let plain = try? recipient.open(wrapped[32...], authenticating: key.replicaID.rawValue.bytes) else { return nil }
        return ContentKey(epoch: epoch, bytes: Array(plain))
    }
}
