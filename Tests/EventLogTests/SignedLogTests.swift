import Crypto
import Domain
import Foundation
import TestSupport
import Testing
@testable import EventLog

/// Signed logs: a store made now signs every frame with a key its replica id derives from, and
/// every receiver refuses a frame of such an origin that a relay rewrote, stripped or re-signed,
/// like a damaged one. Attacks first (a relay holding the author's frames and its own key),
/// then what stays working (stores made before, receivers that require signatures).
@Suite struct SignedLogTests {
    /// Every frame of `origin` in `store`, in log order.
    static func frames(_ store: Store, _ origin: ReplicaID? = nil) throws -> [[UInt8]] {
        var out: [[UInt8]] = []
        try LogReader(store: store).forEachFrame(origin: origin ?? store.replicaID) { _, bytes in
            out.append(Array(bytes))
            return true
        }
        return out
    }

    /// A signing author with `appends` appends of a few events each.
    static func author(_ dir: TempDir, appends: Int = 3, key: ReplicaKey = .generate()) throws -> Store {
        let store = try Store.create(at: dir.path + "/author", signingKey: key)
        let a = try LogAppender(store: store)
        for i in 0..<appends { _ = try a.append((0..<4).map { item("task \(i).\($0)") }) }
        try a.close()
        return store
    }

    /// Rewrites a frame's header fields and stored section, then recomputes its CRC: what a
    /// relay that knows the format can do to any frame.
    static func reframe(_ frame: [UInt8], signed: Bool, stored: [UInt8]) -> [UInt8] {
        var f = Array(frame[0..<FrameHeader.size]) + stored
        f[6] = (f[6] & 1) | (signed ? 2 : 0)
        let n = UInt32(stored.count)
        for i in 0..<4 { f[56 + i] = UInt8(truncatingIfNeeded: n >> (8 * UInt32(i))) }
        if f[5] == FrameHeader.Codec.raw.rawValue {
            let raw = n &- (signed ? UInt32(FrameSignature.blockBytes) : 0)
            for i in 0..<4 { f[36 + i] = UInt8(truncatingIfNeeded: raw >> (8 * UInt32(i))) }
        }
        var crc = CRC32C()
        f.withUnsafeBytes { p in
            crc.update(UnsafeRawBufferPointer(rebasing: p[0..<FrameHeader.size - 4]))
            crc.update(UnsafeRawBufferPointer(rebasing: p[FrameHeader.size...]))
        }
        for i in 0..<4 { f[92 + i] = UInt8(truncatingIfNeeded: crc.final >> (8 * UInt32(i))) }
        return f
    }

    /// The payload of a signed frame (its stored section without the signature block).
    static func payload(_ frame: [UInt8]) -> [UInt8] { Array(frame[FrameHeader.size..<frame.count - FrameSignature.blockBytes]) }

    /// Re-signs `frame` (already reframed) with `key`, whoever's it is.
    static func resign(_ frame: [UInt8], with key: ReplicaKey) -> [UInt8] {
        let body = Array(frame[0..<frame.count - FrameSignature.blockBytes])
        let message = body.withUnsafeBytes { FrameSignature.message(header: $0, payload: UnsafeRawBufferPointer(rebasing: $0[FrameHeader.size...])) }
        return reframe(frame, signed: true, stored: Array(body[FrameHeader.size...]) + key.publicKey + key.sign(message))
    }

    /// Receives `frames` into a fresh receiver; returns the error and checks nothing was kept.
    static func refusal(_ frames: [[UInt8]], origin: ReplicaID, options: AppendOptions = AppendOptions()) throws -> LogError? {
        let dir = TempDir()
        let receiver = try Store.create(at: dir.path + "/receiver")
        let a = try LogAppender(store: receiver, options: options)
        defer { try? a.close() }
        do {
            _ = try a.receive(frames)
            return nil
        } catch let e as LogError {
            #expect(try a.currentTip(origin) == .empty, "a refused batch leaves the receiver unchanged")
            return e
        }
    }

    // MARK: Attacks

    @Test func aRelayThatAltersASignedFrameAndFixesItsChecksumIsRefused() throws {
        let dir = TempDir()
        let author = try Self.author(dir)
        let frames = try Self.frames(author)
        #expect(frames.count == 3)
        #expect(try Self.refusal(frames, origin: author.replicaID) == nil, "the author's frames are taken as they are")

        // One byte of the last frame's payload changed, CRC fixed: it checksums and links, and
        // its signature fails.
        var altered = frames[2]
        altered[FrameHeader.size + 3] ^= 0x40
        altered = Self.reframe(altered, signed: true, stored: Array(altered[FrameHeader.size...]))
        let e = try #require(try Self.refusal([frames[0], frames[1], altered], origin: author.replicaID))
        #expect(e.kind == .corrupt)
        #expect(e.description.contains("frame 3 of 3") && e.description.contains("signature does not verify"), "\(e)")

        // The middle frame altered and the last relinked to it (CRCs fixed): the middle frame's
        // own signature fails (and the last one's, which covers its link).
        var middle = frames[1]
        middle[FrameHeader.size + 3] ^= 0x40
        middle = Self.reframe(middle, signed: true, stored: Array(middle[FrameHeader.size...]))
        var relinked = frames[2]
        relinked.replaceSubrange(60..<92, with: middle.withUnsafeBytes { FrameHash.of($0) }.bytes)
        relinked = Self.reframe(relinked, signed: true, stored: Array(relinked[FrameHeader.size...]))
        let e2 = try #require(try Self.refusal([frames[0], middle, relinked], origin: author.replicaID))
        #expect(e2.description.contains("frame 2 of 3") && e2.description.contains("signature does not verify"), "\(e2)")
        // Not relinked, the chain breaks first.
        let e3 = try #require(try Self.refusal([frames[0], middle, frames[2]], origin: author.replicaID))
        #expect(e3.description.contains("frame 3 of 3") && e3.description.contains("hash chain"), "\(e3)")
        // Alone, the altered middle frame is the batch's last: its own signature fails.
        let e4 = try #require(try Self.refusal([frames[0], middle], origin: author.replicaID))
        #expect(e4.description.contains("frame 2 of 2") && e4.description.contains("signature does not verify"), "\(e4)")
    }

    /// A process remembers the signatures it verified (a server checks a push's actors, then
    /// receives it), so the same frame is verified once. The memory vouches only for those exact
    /// bytes: a frame altered in its header's link, its payload or its signature, its checksum
    /// fixed, is refused while the genuine frame's signature is remembered. The memory is
    /// bounded, the oldest given up first.
    @Test func aRememberedSignatureVouchesOnlyForItsOwnFrame() throws {
        let dir = TempDir()
        let frame = try Self.frames(try Self.author(dir, appends: 1))[0]
        let memory = VerifiedSignatures(capacity: 2)
        func verify(_ f: [UInt8]) throws {
            let h = try f.withUnsafeBytes { try FrameHeader.decode($0) }
            let failure: FrameDecodeError? = f.withUnsafeBytes { p in
                do throws(FrameDecodeError) {
                    try FrameSignature.verify(p, header: h, remembering: memory)
                    return nil
                } catch {
                    return error
                }
            }
            if let failure { throw failure }
        }
        try verify(frame)
        try verify(frame)
        #expect(memory.count == 1)
        // Bytes of the link (header), the payload, the public key and the signature.
        for at in [70, FrameHeader.size + 3, frame.count - FrameSignature.blockBytes + 1, frame.count - 1] {
            var altered = frame
            altered[at] ^= 0x01
            altered = Self.reframe(altered, signed: true, stored: Array(altered[FrameHeader.size...]))
            #expect(throws: FrameDecodeError.self, "byte \(at) altered") { try verify(altered) }
        }
        #expect(memory.count == 1, "a failed verification is not remembered")
        let keys = (0..<3).map { i in [UInt8](repeating: UInt8(i), count: 96).withUnsafeBytes { VerifiedSignatures.Key(message: [UInt8(i)], block: $0) } }
        for k in keys { memory.insert(k) }
        #expect(memory.count == 2)
        #expect(!memory.contains(keys[0]) && memory.contains(keys[1]) && memory.contains(keys[2]))
    }

    /// Even the key's holder cannot have a frame with a bad signature taken on the word of a
    /// later, valid one that links to it: a page may end on that frame, and the next receiver
    /// would refuse it for good. Every signed frame is verified on its own.
    @Test func aFrameWithABadSignatureIsRefusedEvenWhenALaterOneVouchesForIt() throws {
        let dir = TempDir()
        let key = ReplicaKey.generate()
        let author = try Self.author(dir, appends: 2, key: key)
        let frames = try Self.frames(author)
        var bad = frames[0]
        bad[bad.count - 1] ^= 0x01  // the signature's last byte
        bad = Self.reframe(bad, signed: true, stored: Array(bad[FrameHeader.size...]))
        var next = frames[1]
        next.replaceSubrange(60..<92, with: bad.withUnsafeBytes { FrameHash.of($0) }.bytes)
        next = Self.resign(next, with: key)  // a valid signature of the author's own key
        let e = try #require(try Self.refusal([bad, next], origin: author.replicaID))
        #expect(e.description.contains("frame 1 of 2") && e.description.contains("signature does not verify"), "\(e)")
        #expect(try Self.refusal([next], origin: author.replicaID) != nil, "alone it does not link")
    }

    /// A store of format 1 (made before signed logs) is raised to format 2 before it first holds
    /// a signed frame: a build before signed logs refuses to open it rather than cutting off
    /// frames it would take for damage. One that holds unsigned frames only stays at 1.
    @Test func aStoreTakingItsFirstSignedFrameRaisesItsFormat() throws {
        let dir = TempDir()
        let old = try Store.create(at: dir.path + "/old", replicaID: .random())
        #expect(old.format == 1)
        let unsignedPeer = try Store.create(at: dir.path + "/peer", replicaID: .random())
        let p = try LogAppender(store: unsignedPeer)
        _ = try p.append([item("unsigned")])
        try p.close()
        let a = try LogAppender(store: old)
        _ = try a.receive(try Self.frames(unsignedPeer))
        #expect(try Store.open(at: old.path).format == 1)
        _ = try a.receive(try Self.frames(try Self.author(dir, appends: 1)))
        #expect(try Store.open(at: old.path).format == 2)
        #expect(a.store.format == 2)
        try a.close()
        #expect(try Store.create(at: dir.path + "/new").format == 2)
        writeBytes(old.layout.storeFile, Array("{\"format_version\":4,\"replica_id\":\"\(old.replicaID)\"}\n".utf8))
        #expect(throws: LogError.self) { try Store.open(at: old.path) }
    }

    /// Any byte of a signed frame changed, with its CRC computed again (what a relay can do
    /// without the key), is refused: the header and payload by the signature, the link by the
    /// chain, the key by the id, the signature by itself. Seeded, so a failure repeats.
    @Test(arguments: [1, 2, 3] as [UInt64]) func anyByteAlteredWithItsChecksumFixedIsRefused(seed: UInt64) throws {
        let dir = TempDir()
        let author = try Self.author(dir, appends: 2)
        let frames = try Self.frames(author)
        var rng = SplitMix64(seed: seed)
        for _ in 0..<150 {
            var f = frames[1]
            let at = Int(rng.next() % UInt64(f.count))
            guard !(92..<96).contains(at) else { continue }  // the CRC itself, computed again below
            f[at] ^= UInt8(truncatingIfNeeded: rng.next() % 255 + 1)
            // Sizes changed by the flip are put back, so the frame still parses as a frame.
            f.replaceSubrange(56..<60, with: frames[1][56..<60])
            f = Self.reframe(f, signed: f[6] & 2 != 0, stored: Array(f[FrameHeader.size...]))
            guard f != frames[1] else { continue }
            #expect(try Self.refusal([frames[0], f], origin: author.replicaID) != nil, "byte \(at) altered was taken")
        }
    }

    @Test func aRelayThatStripsTheSignatureIsRefused() throws {
        let dir = TempDir()
        let author = try Self.author(dir, appends: 1)
        let frame = try Self.frames(author)[0]
        let stripped = Self.reframe(frame, signed: false, stored: Self.payload(frame))
        #expect(FrameHeader(parsing: stripped)?.signed == false)
        let e = try #require(try Self.refusal([stripped], origin: author.replicaID))
        #expect(e.kind == .corrupt)
        #expect(e.description.contains("unsigned, but origin \(author.replicaID) is a signing replica"), "\(e)")
    }

    @Test func aRelayThatForgesAFrameUnderItsOwnKeyIsRefused() throws {
        let dir = TempDir()
        let author = try Self.author(dir, appends: 2)
        let frames = try Self.frames(author)
        let relay = ReplicaKey.generate()
        // The relay's signature over the author's own, untouched frame: valid Ed25519, wrong key.
        let resigned = Self.resign(frames[1], with: relay)
        let e = try #require(try Self.refusal([frames[0], resigned], origin: author.replicaID))
        #expect(e.description.contains("signed with a key that is not origin \(author.replicaID)'s"), "\(e)")

        // A whole history rewritten by the relay (altered payload, every later link recomputed,
        // every frame re-signed with its key) is refused at its first frame.
        var rewritten: [[UInt8]] = []
        var previous = FrameHash.zero
        for (i, f) in frames.enumerated() {
            var g = f
            g.replaceSubrange(60..<92, with: previous.bytes)
            if i == 0 { g[FrameHeader.size + 5] ^= 1 }
            g = Self.resign(g, with: relay)
            previous = g.withUnsafeBytes { FrameHash.of($0) }
            rewritten.append(g)
        }
        let e2 = try #require(try Self.refusal(rewritten, origin: author.replicaID))
        #expect(e2.description.contains("frame 1 of 2") && e2.description.contains("not origin"), "\(e2)")
    }

    @Test func aSignedFrameOfAnOriginWithoutAKeyIsRefused() throws {
        // An origin made before signed logs (a random v4 id) has no key: a signed frame of it is
        // not the author's.
        let dir = TempDir()
        let legacy = try Store.create(at: dir.path + "/legacy", replicaID: .random())
        let a = try LogAppender(store: legacy)
        _ = try a.append([item("old")])
        try a.close()
        let frame = try Self.frames(legacy)[0]
        #expect(FrameHeader(parsing: frame)?.signed == false)
        let forged = Self.resign(Self.reframe(frame, signed: true, stored: Array(frame[FrameHeader.size...]) + [UInt8](repeating: 0, count: 96)),
                                 with: .generate())
        let e = try #require(try Self.refusal([forged], origin: legacy.replicaID))
        #expect(e.description.contains("not origin \(legacy.replicaID)'s"), "\(e)")
    }

    @Test func signatureBlocksThatCannotFitAreHeaderErrorsNotTraps() throws {
        let dir = TempDir()
        let frame = try Self.frames(try Self.author(dir, appends: 1))[0]
        for stored in [[UInt8](), [1], [UInt8](repeating: 9, count: 95), [UInt8](repeating: 9, count: 96)] {
            let f = Self.reframe(frame, signed: true, stored: stored)
            let message = f.withUnsafeBytes { p -> String? in
                do throws(FrameDecodeError) {
                    let h = try FrameHeader.decode(p)
                    guard h.totalBytes == p.count else { return "length" }
                    try FrameDecoder.checkCRC(p, header: h)
                    try FrameSignature.check(p, header: h)
                    _ = try FrameDecoder().events(of: p, header: h)
                    return nil
                } catch {
                    return error.message
                }
            }
            #expect(message != nil, "\(stored.count) stored bytes")
        }
    }

    // MARK: What keeps working

    @Test func aStoreMadeNowSignsEveryFrameWithAKeyItsIDDerivesFrom() throws {
        let dir = TempDir()
        let store = try Self.author(dir, appends: 2)
        #expect(store.replicaID.isKeyDerived)
        let key = try #require(try store.signingKey())
        #expect(key.replicaID == store.replicaID)
        let attributes = try FileManager.default.attributesOfItem(atPath: store.layout.signingKey)
        #expect((attributes[.posixPermissions] as? Int) == 0o600, "the private key is readable by its owner only")
        for f in try Self.frames(store) {
            let h = try #require(FrameHeader(parsing: f))
            #expect(h.signed)
            #expect(Array(f[f.count - 96..<f.count - 64]) == key.publicKey)
        }
        let report = try Verifier(store: store).run()
        #expect(report.isClean && report.frames == 2 && report.signedFrames == 2)
        // A reopened store goes on signing with the same key.
        let a = try LogAppender(store: try Store.open(at: store.path))
        _ = try a.append([item("later")])
        try a.close()
        #expect(try Verifier(store: store).run().signedFrames == 3)
    }

    @Test func storesMadeBeforeSigningKeepWorkingAndAReceiverMayRequireSignatures() throws {
        let dir = TempDir()
        let legacy = try Store.create(at: dir.path + "/legacy", replicaID: .random())
        #expect(!legacy.replicaID.isKeyDerived)
        #expect(try legacy.signingKey() == nil)
        let a = try LogAppender(store: legacy)
        _ = try a.append([item("old")])
        try a.close()
        let unsigned = try Self.frames(legacy)
        #expect(try Self.refusal(unsigned, origin: legacy.replicaID) == nil)
        let report = try Verifier(store: legacy).run()
        #expect(report.isClean && report.signedFrames == 0)

        var strict = AppendOptions()
        strict.requireSignatures = true
        let e = try #require(try Self.refusal(unsigned, origin: legacy.replicaID, options: strict))
        #expect(e.kind == .invalidInput)
        #expect(e.description.contains("unsigned") && e.description.contains("signatures are required"), "\(e)")
        let signed = try Self.frames(try Self.author(dir, appends: 1))
        #expect(try Self.refusal(signed, origin: ReplicaID.derived(fromSigningKey: Array(signed[0].suffix(96).prefix(32))), options: strict) == nil)
    }

    @Test func aStoreWithoutItsKeyRefusesAppendsButStillReceives() throws {
        let dir = TempDir()
        let store = try Self.author(dir, appends: 1)
        let keyFile = store.layout.signingKey
        let good = readBytes(keyFile)

        func appendError() throws -> LogError? {
            let a = try LogAppender(store: store)  // opening needs no key
            defer { try? a.close() }
            do {
                _ = try a.append([item("more")])
                return nil
            } catch let e as LogError {
                return e
            }
        }
        try FileManager.default.removeItem(atPath: keyFile)
        let missing = try #require(try appendError(), "an append without the key")
        #expect(missing.description.contains("key file is missing"), "\(missing)")
        // Receiving goes on without the key, here and reached by path as a peer's store.
        let otherDir = TempDir()
        let other = try Self.frames(try Self.author(otherDir, appends: 1))
        let r = try LogAppender(store: store)
        #expect(try r.receive(other).frames == 1)
        try r.close()
        let peer = try LogAppender.receivingForPeer(store)
        try peer.close()

        var damaged = good
        damaged[20] ^= 1
        writeBytes(keyFile, damaged)
        let bad = try #require(try appendError(), "a damaged key file was used")
        #expect(bad.kind == .corrupt && bad.description.contains("damaged"), "\(bad)")
        writeBytes(keyFile, ReplicaKey.generate().fileContents())
        let foreign = try #require(try appendError(), "another replica's key was used")
        #expect(foreign.description.contains("not this store's"), "\(foreign)")
        writeBytes(keyFile, good)
        #expect(try appendError() == nil)
        #expect(try Verifier(store: store).run().signedFrames == 3, "two of its own and one received")
    }

    /// Frames built for a signing origin elsewhere than its store (`OriginFrameBuilder`, as the
    /// load generator's replicas) are signed like an appender's and received the same way.
    @Test func framesBuiltForASigningOriginAreSignedAndReceived() throws {
        let key = ReplicaKey.generate()
        let builder = OriginFrameBuilder(signer: key)
        #expect(builder.origin == key.replicaID)
        for i in 0..<5 { try builder.add(item("built \(i)"), at: HLC(wallMillis: 1_767_225_600_000 + UInt64(i), counter: 0)) }
        let frames = builder.finish()
        #expect(frames.allSatisfy { FrameHeader(parsing: $0)?.signed == true })
        #expect(try Self.refusal(frames, origin: key.replicaID) == nil)
    }

    @Test func aKeyDerivedIDCannotBeGivenWithoutItsKey() throws {
        let dir = TempDir()
        let id = ReplicaKey.generate().replicaID
        #expect(throws: LogError.self) { try Store.create(at: dir.path + "/s", replicaID: id) }
        #expect(!ReplicaID.random().isKeyDerived)
    }

    @Test func printableKeysRoundTripAndBase32MatchesRFC4648() throws {
        // RFC 4648 section 10 vectors, without padding.
        for (text, encoded) in [("", ""), ("f", "MY"), ("fo", "MZXQ"), ("foo", "MZXW6"), ("foob", "MZXW6YQ"), ("fooba", "MZXW6YTB"), ("foobar", "MZXW6YTBOI")] {
            #expect(Base32.encode(Array(text.utf8)) == encoded)
            #expect(Base32.decode(encoded) == Array(text.utf8))
        }
        #expect(Base32.decode("MZXW6YTBO1") == nil)  // 1 is not in the alphabet
        #expect(Base32.decode("MZ") == nil)  // leftover bits that are not zero
        let key = ReplicaKey.generate()
        let text = key.printable
        #expect(text.hasPrefix("LBK1-"))
        #expect(text.allSatisfy { "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567-".contains($0) || $0.isNumber })
        #expect(ReplicaKey.publicKey(fromPrintable: text) == key.publicKey)
        #expect(ReplicaKey.publicKey(fromPrintable: text.lowercased().replacingOccurrences(of: "-", with: " ").replacingOccurrences(of: "lbk1 ", with: "LBK1-")) == key.publicKey)
        #expect(ReplicaKey.publicKey(fromPrintable: "LBK1-AAAA") == nil)
    }
}
