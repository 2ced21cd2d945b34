import Crypto
import Foundation
import TestSupport
@testable import EventLog

/// Builds the golden log in `fixtures/log/golden` and one damaged copy per failure mode.
/// Everything is deterministic (fixed replica id, manual clock, seeded workload), so rebuilding
/// must reproduce the committed bytes exactly: a change to the format fails `FixtureTests`.
/// Set LOGBOOK_WRITE_FIXTURES=1 to rewrite them after a deliberate format change.
enum Fixtures {
    static let root: String = {
        let here = URL(fileURLWithPath: #filePath)
        return here.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("fixtures").path
    }()

    static let goldenReplica = ReplicaID("0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")!

    /// Writes the golden store at `path`: three segments, single and multi-frame appends,
    /// explicit event ids, base and actor.
    static func buildGolden(at path: String) throws -> Store {
        let store = try Store.create(at: path, replicaID: goldenReplica)
        var options = AppendOptions()
        options.segmentBytesMax = 1500
        options.frameEventsMax = 10
        let clock = ManualClock(1_767_225_600_000)
        let appender = try LogAppender(store: store, wallClock: clock, options: options)
        let ms = sampleMutations(80, seed: 2026)
        var i = 0
        for size in [1, 5, 25, 3, 1, 12, 8, 1, 4, 20] {
            var batch = Array(ms[i..<i + size])
            if size == 3 {
                batch[0].eventID = UUID(uuidString: "c0ffee00-0000-4000-8000-000000000001")!
                batch[1].actor = "ann@example.com"
                batch[2].base = HLC(wallMillis: 1_767_225_600_000, counter: 2)
            }
            _ = try appender.append(batch)
            clock.advance(1500)
            i += size
        }
        // Event schema version 2: links (a cycle, a kind, a weight, a label, one deleted) and
        // seed 001's typed item fields.
        let items = ms.filter { $0.entity == .item && $0.op == .create }.map(\.entityID)
        func link(_ n: Int, _ from: UUID, _ to: UUID, _ extra: [Field]) -> Mutation {
            Mutation(entity: .link, op: .create, entityID: UUID(uuidString: String(format: "11a0c000-0000-4000-8000-%012d", n))!,
                     fields: [Field("from_id", .text(from.lowercasedString)), Field("to_id", .text(to.lowercasedString))] + extra)
        }
        _ = try appender.append([
            link(1, items[0], items[1], [Field("kind", .text("LINK")), Field("weight", .real(0.5))]),
            link(2, items[1], items[2], [Field("kind", .text("SEQUENCE")), Field("label", .text("then"))]),
            link(3, items[2], items[0], [Field("kind", .text("LINK"))]),
            Mutation(entity: .item, op: .update, entityID: items[0], fields: [
                Field("importance", .integer(2)), Field("latitude", .real(48.8566)), Field("location_name", .text("Paris")),
                Field("longitude", .real(2.3522)), Field("priority", .integer(3)),
            ]),
        ])
        clock.advance(1500)
        _ = try appender.append([Mutation(entity: .link, op: .delete, entityID: UUID(uuidString: "11a0c000-0000-4000-8000-000000000003")!)])
        try appender.close()
        // The event-id index and the lock are not part of the fixture.
        for f in ["eventids.sqlite", "eventids.sqlite-wal", "eventids.sqlite-shm", "LOCK"] {
            try? FileManager.default.removeItem(atPath: path + "/" + f)
        }
        return store
    }

    /// The golden signed log's key: a published test key (its seed is SHA-256 of this text),
    /// never one to trust.
    static let goldenSigningKey = ReplicaKey(seed: Array(SHA256.hash(data: Array("logbook golden signing key v1".utf8))))!

    /// Writes the golden signed log at `path` (`fixtures/log/golden-signed`): a store made with
    /// `goldenSigningKey`, single and multi-frame appends, every frame signed. Ed25519 signatures
    /// are deterministic (RFC 8032), so rebuilding gives the same bytes.
    static func buildGoldenSigned(at path: String) throws -> Store {
        let store = try Store.create(at: path, signingKey: goldenSigningKey)
        var options = AppendOptions()
        options.frameEventsMax = 10
        let clock = ManualClock(1_767_225_600_000)
        let appender = try LogAppender(store: store, wallClock: clock, options: options)
        let ms = sampleMutations(40, seed: 2027)
        var i = 0
        for size in [1, 4, 25, 2] {
            var batch = Array(ms[i..<i + size])
            if size == 2 {
                batch[0].eventID = UUID(uuidString: "c0ffee00-0000-4000-8000-000000000002")!
                batch[1].actor = "ann@example.com"
            }
            _ = try appender.append(batch)
            clock.advance(1500)
            i += size
        }
        try appender.close()
        for f in ["eventids.sqlite", "eventids.sqlite-wal", "eventids.sqlite-shm", "LOCK"] {
            try? FileManager.default.removeItem(atPath: path + "/" + f)
        }
        return store
    }

    /// The golden share frame (`fixtures/log/golden-share-frame.bin`): five events sealed into
    /// the share log of `goldenSigningKey` in a share whose id, content key and nonce are
    /// published (SHA-256 of fixed labels), signed. Rebuilding gives the same bytes.
    static let goldenShare = ShareID.derived(creator: goldenSigningKey.publicKey,
                                             nonce: Array(SHA256.hash(data: Array("logbook golden share nonce v1".utf8)).prefix(16)))
    static let goldenContentKey = ContentKey(epoch: 1, bytes: Array(SHA256.hash(data: Array("logbook golden content key v1".utf8))))!
    static func buildGoldenShareFrame() -> [UInt8] {
        let origin = ReplicaID.shareLog(goldenShare, signingKey: goldenSigningKey.publicKey)
        let enc = FrameEncoder()
        for (i, m) in sampleMutations(5, seed: 2028).enumerated() {
            try! enc.add(m, origin: origin, seq: Seq(UInt64(i + 1)), hlc: HLC(wallMillis: 1_767_225_600_000 + UInt64(i) * 250, counter: 0))
        }
        let nonce = Array(SHA256.hash(data: Array("logbook golden frame nonce v1".utf8)).prefix(12))
        return enc.finish(continues: false, previousHash: .zero, signer: goldenSigningKey,
                          share: (ShareBlock(share: goldenShare, epoch: 1, nonce: nonce), goldenContentKey))
    }

    /// The golden frame of independent blocks (`fixtures/log/golden-blocks-frame.bin`): 301
    /// events of `goldenSigningKey`'s log encoded as a batched append on three cores encodes them,
    /// runs of 100, 100 and 101 records each compressed as an LZ4 block of its own, joined into
    /// one LZ4 frame (docs/FORMAT.md, "Payload"), signed. The split depends on the worker count
    /// given here, not on the machine's cores, so rebuilding gives the same bytes anywhere.
    static let goldenBlocksWorkers = 3
    static func buildGoldenBlocksFrame() -> [UInt8] {
        let ms = sampleMutations(301, seed: 2029)
        let hlcs = ms.indices.map { HLC(wallMillis: 1_767_225_600_000 + UInt64($0 / 4), counter: UInt16($0 % 4)) }
        let enc = FrameEncoder()
        let built = enc.add(ms, picks: Array(ms.indices), origin: goldenSigningKey.replicaID, baseSeq: Seq(1), hlcs: hlcs,
                            workers: goldenBlocksWorkers, bytesLimit: FrameHeader.payloadBytesMax)
        precondition(built, "the golden blocks frame fits a frame")
        return enc.finish(continues: false, previousHash: .zero, signer: goldenSigningKey)
    }

    /// A canonical text line per event, committed beside the golden log.
    static func describe(_ e: Event) -> String {
        let fields = e.fields.map { f -> String in
            let v: String
            switch f.value {
            case .null: v = "null"
            case .boolean(let b): v = "\(b)"
            case .integer(let n): v = "\(n)"
            case .real(let d): v = "\(d)"
            case .text(let s): v = "\"\(s)\""
            }
            return "\(f.name)=\(v)"
        }.joined(separator: " ")
        var s = "\(e.seq) \(e.hlc.rawValue) \(e.eventID.lowercasedString) \(e.entity.name) \(e.op.name) \(e.entityID.lowercasedString)"
        if let b = e.base { s += " base=\(b.rawValue)" }
        if let a = e.actor { s += " actor=\(a)" }
        return s + (fields.isEmpty ? "" : " " + fields)
    }

    /// The failure modes: each takes a copy of the golden store and damages its newest segment
    /// (or a sealed one), and states what recovery must leave.
    struct Case: Sendable {
        var name: String
        var damage: @Sendable (_ store: Store) throws -> Void
    }

    static func lastFrame(_ store: Store) -> (path: String, offset: Int, header: FrameHeader) {
        let path = segmentFiles(store).last!
        let offset = frameOffsets(path).last!
        let b = readBytes(path)
        let h = b.withUnsafeBytes { try! FrameHeader.decode(UnsafeRawBufferPointer(rebasing: $0[offset..<offset + FrameHeader.size])) }
        return (path, offset, h)
    }

    static let cases: [Case] = [
        Case(name: "torn-header") { store in
            let (path, offset, _) = lastFrame(store)
            writeBytes(path, Array(readBytes(path)[..<(offset + 40)]))
        },
        Case(name: "torn-payload") { store in
            let (path, offset, h) = lastFrame(store)
            writeBytes(path, Array(readBytes(path)[..<(offset + h.totalBytes - 7)]))
        },
        Case(name: "bad-checksum-tail") { store in
            let (path, offset, h) = lastFrame(store)
            var b = readBytes(path)
            b[offset + FrameHeader.size + Int(h.storedBytes) / 2] ^= 0x10
            writeBytes(path, b)
        },
        Case(name: "incomplete-append") { store in
            // Cut the newest segment after the first frame of its 20-event append (2 frames of 10).
            let path = segmentFiles(store).last!
            let offsets = frameOffsets(path)
            writeBytes(path, Array(readBytes(path)[..<offsets[offsets.count - 1]]))
        },
        Case(name: "bad-checksum-sealed") { store in
            let path = segmentFiles(store).first!
            let offset = frameOffsets(path)[1]
            var b = readBytes(path)
            b[offset + FrameHeader.size + 3] ^= 0x01
            writeBytes(path, b)
        },
        Case(name: "damage-inside-newest") { store in
            // Damage in the part of the newest segment that recovery scans (no index covers it),
            // followed by valid frames: not a torn tail, so opening for writing must refuse.
            let path = segmentFiles(store).last!
            let offset = frameOffsets(path)[0]
            var b = readBytes(path)
            b[offset + FrameHeader.size + 5] ^= 0x04
            writeBytes(path, b)
            try FileManager.default.removeItem(atPath: path.replacingOccurrences(of: ".seg", with: ".idx"))
        },
        Case(name: "missing-index") { store in
            for s in segmentFiles(store) { try FileManager.default.removeItem(atPath: s.replacingOccurrences(of: ".seg", with: ".idx")) }
        },
        Case(name: "leftover-temp") { store in
            let dir = store.directory(store.replicaID)
            writeBytes(dir.path + "/" + SegmentName.index(Seq(1)) + ".tmp", [1, 2, 3])
        },
        Case(name: "torn-segment-creation") { store in
            let dir = store.directory(store.replicaID)
            let next = try LogReader(store: store).tip(origin: store.replicaID).lastSeq.next
            let header = SegmentHeader(origin: store.replicaID, firstSeq: next, previousHash: .zero).encode()
            writeBytes(dir.segmentPath(next), Array(header[..<30]))
        },
    ]

    /// Writes the golden store and every failure case under `root`.
    static func writeAll(to root: String) throws {
        // `golden-v1` (written by the build before event schema version 2) is never rewritten.
        // The damaged copies are made from it too, so their expectations (seqs, segments) hold.
        for name in ["golden", "golden-events.txt"] + cases.map(\.name) { try? FileManager.default.removeItem(atPath: root + "/log/" + name) }
        try FileManager.default.createDirectory(atPath: root + "/log", withIntermediateDirectories: true)
        for name in ["golden-signed", "golden-signed-events.txt"] { try? FileManager.default.removeItem(atPath: root + "/log/" + name) }
        writeBytes(root + "/log/golden-share-frame.bin", buildGoldenShareFrame())
        writeBytes(root + "/log/golden-blocks-frame.bin", buildGoldenBlocksFrame())
        let signed = try buildGoldenSigned(at: root + "/log/golden-signed")
        let signedEvents = try LogReader(store: signed).events(origin: signed.replicaID)
        try (signedEvents.map(describe).joined(separator: "\n") + "\n").write(toFile: root + "/log/golden-signed-events.txt", atomically: true, encoding: .utf8)
        let golden = try buildGolden(at: root + "/log/golden")
        let events = try LogReader(store: golden).events(origin: golden.replicaID)
        try (events.map(describe).joined(separator: "\n") + "\n").write(toFile: root + "/log/golden-events.txt", atomically: true, encoding: .utf8)
        for c in cases {
            let path = root + "/log/" + c.name
            copyTree(root + "/log/golden-v1", path)
            try c.damage(try Store.open(at: path))
        }
    }
}
