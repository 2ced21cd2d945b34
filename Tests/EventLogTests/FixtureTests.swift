import Foundation
import TestSupport
import Testing
@testable import EventLog

@Suite(.serialized) struct FixtureTests {
    init() throws {
        if ProcessInfo.processInfo.environment["LOGBOOK_WRITE_FIXTURES"] == "1" {
            try Fixtures.writeAll(to: Fixtures.root)
        }
    }

    /// Every file of the committed golden log decodes to the committed events, and rebuilding it
    /// from the same inputs gives the same bytes.
    @Test func goldenLogDecodesAndIsReproducible() throws {
        let golden = try Store.open(at: Fixtures.root + "/log/golden")
        let events = try LogReader(store: golden).events(origin: golden.replicaID)
        let expected = try String(contentsOfFile: Fixtures.root + "/log/golden-events.txt", encoding: .utf8)
        #expect(events.map(Fixtures.describe).joined(separator: "\n") + "\n" == expected)
        #expect(events.count == 85)
        #expect(try Verifier(store: golden).run().isClean)

        let dir = TempDir()
        let rebuilt = try Fixtures.buildGolden(at: dir.path + "/golden")
        let a = segmentFiles(golden), b = segmentFiles(rebuilt)
        #expect(a.count == 4 && b.count == 4)
        for (x, y) in zip(a, b) {
            #expect(readBytes(x) == readBytes(y), "segment \(x) differs from a fresh encoding: the format changed")
            let xi = x.replacingOccurrences(of: ".seg", with: ".idx"), yi = y.replacingOccurrences(of: ".seg", with: ".idx")
            #expect(readBytes(xi) == readBytes(yi), "index \(xi) differs from a fresh encoding")
        }
    }

    /// The golden signed log decodes to the committed events, every frame's signature verifies
    /// against the key its origin id derives from, and rebuilding it gives the same bytes.
    @Test func goldenSignedLogVerifiesAndIsReproducible() throws {
        let golden = try Store.open(at: Fixtures.root + "/log/golden-signed")
        #expect(golden.replicaID == Fixtures.goldenSigningKey.replicaID)
        #expect(golden.replicaID.description == "c4095f46-d017-856c-981a-731937fe1228", "the derivation of ids from keys is pinned")
        let events = try LogReader(store: golden).events(origin: golden.replicaID)
        let expected = try String(contentsOfFile: Fixtures.root + "/log/golden-signed-events.txt", encoding: .utf8)
        #expect(events.map(Fixtures.describe).joined(separator: "\n") + "\n" == expected)
        #expect(events.count == 32)
        let report = try Verifier(store: golden).run()
        #expect(report.isClean && report.frames == 6 && report.signedFrames == 6, "\(report)")

        let dir = TempDir()
        let rebuilt = try Fixtures.buildGoldenSigned(at: dir.path + "/golden-signed")
        let a = segmentFiles(golden), b = segmentFiles(rebuilt)
        #expect(a.count == 1 && b.count == 1)
        for (x, y) in zip(a, b) { #expect(readBytes(x) == readBytes(y), "segment \(x) differs from a fresh encoding: the format changed") }
        #expect(readBytes(golden.layout.signingKey) == readBytes(rebuilt.layout.signingKey))
    }

    /// The golden share frame: its ids derive as docs/FORMAT.md "Share frames" says, it passes a
    /// receiver's checks with no key, opens with the published content key to the same events
    /// as the golden mutations, and rebuilding it gives the same bytes (ChaCha20-Poly1305 and
    /// Ed25519 are deterministic given the nonce).
    @Test func goldenShareFrameChecksOpensAndIsReproducible() throws {
        let frame = readBytes(Fixtures.root + "/log/golden-share-frame.bin")
        #expect(frame == Fixtures.buildGoldenShareFrame(), "the share frame format changed")
        #expect(Fixtures.goldenShare.description == "5f5f962b-0cfa-8b1c-85f4-7d65cf29f77a", "the derivation of share ids is pinned")
        let h = try #require(FrameHeader(parsing: frame))
        #expect(h.signed && h.shared && h.sealed && h.origin == ReplicaID.shareLog(Fixtures.goldenShare, signingKey: Fixtures.goldenSigningKey.publicKey))
        try frame.withUnsafeBytes { p in
            try FrameDecoder.checkCRC(p, header: h)
            #expect(try FrameSignature.check(p, header: h))
            #expect(throws: FrameDecodeError.locked(Fixtures.goldenShare, 1)) { try FrameDecoder().events(of: p, header: h) }
        }
        let ring = ShareKeyring()
        let dir = TempDir()
        let path = dir.path + "/\(Fixtures.goldenShare).keys"
        writeBytes(path, ShareKeyring.encode([Fixtures.goldenContentKey], writers: [Fixtures.goldenSigningKey.replicaID: nil]))
        try ring.load(dir.path)
        let events = try frame.withUnsafeBytes { p in try FrameDecoder(keys: ring).events(of: p, header: h) }
        #expect(events.map(\.entityID) == sampleMutations(5, seed: 2028).map(\.entityID))
        #expect(frame.firstRange(of: Array("golden".utf8)) == nil)
    }

    /// The golden frame of independent blocks: its bytes are what a batched append on three
    /// cores writes for its events (the split into runs is pinned, not only the records), it
    /// passes a receiver's checks, the reference tool decodes its payload, and it decodes to the
    /// events a frame built one event at a time holds.
    @Test func goldenBlocksFrameChecksDecodesAndIsReproducible() throws {
        let frame = readBytes(Fixtures.root + "/log/golden-blocks-frame.bin")
        #expect(frame == Fixtures.buildGoldenBlocksFrame(), "the frame of independent blocks changed")
        let h = try #require(FrameHeader(parsing: frame))
        #expect(h.codec == .lz4Frame && h.signed && !h.shared && h.count == 301 && h.origin == Fixtures.goldenSigningKey.replicaID)
        #expect(frame[FrameHeader.size + 4] & 0x20 != 0, "the descriptor says the blocks are independent")
        #expect(lz4BlockCount(frame) == Fixtures.goldenBlocksWorkers)
        let events = try frame.withUnsafeBytes { p in
            try FrameDecoder.checkCRC(p, header: h)
            #expect(try FrameSignature.check(p, header: h))
            try expectLZ4ToolDecodes(p, header: h)
            return try FrameDecoder().events(of: p, header: h)
        }
        let ms = sampleMutations(301, seed: 2029)
        #expect(events.map(\.fields.array) == ms.map(\.fields) && events.map(\.entityID) == ms.map(\.entityID))
        let one = FrameEncoder()
        for e in events { one.add(e) }
        let single = one.finish(continues: false, previousHash: .zero, signer: Fixtures.goldenSigningKey)
        let h1 = try #require(FrameHeader(parsing: single))
        #expect(lz4BlockCount(single) == 1 && h1.rawBytes == h.rawBytes)
        #expect(try single.withUnsafeBytes { try FrameDecoder().events(of: $0, header: h1) } == events)
    }

    /// The golden log written by the build before event schema version 2 still decodes to the
    /// same events (upcast to the current shape, which for these events changes nothing) and
    /// verifies clean: a log is never rewritten, so every older version stays readable.
    @Test func theVersion1GoldenLogStillDecodes() throws {
        let golden = try Store.open(at: Fixtures.root + "/log/golden-v1")
        let events = try LogReader(store: golden).events(origin: golden.replicaID)
        let expected = try String(contentsOfFile: Fixtures.root + "/log/golden-v1-events.txt", encoding: .utf8)
        #expect(events.map(Fixtures.describe).joined(separator: "\n") + "\n" == expected)
        #expect(events.count == 80)
        #expect(events.allSatisfy { $0.schemaVersion == Event.currentSchemaVersion })
        #expect(try Verifier(store: golden).run().isClean)
    }

    /// The reference `lz4` tool decodes a payload cut out of a segment.
    @Test func lz4ToolDecodesAPayloadCutOutOfASegment() throws {
        let golden = try Store.open(at: Fixtures.root + "/log/golden")
        var checked = 0
        try LogReader(store: golden).forEachFrame(origin: golden.replicaID) { h, bytes in
            guard h.codec == .lz4Frame else { return true }
            try expectLZ4ToolDecodes(bytes, header: h)
            checked += 1
            return true
        }
        #expect(checked >= 3)
    }

    /// A batched append's runs of records, compressed on several cores as independent blocks
    /// (several per run when a run passes 256 KiB), still make one standard LZ4 frame: the
    /// reference tool decodes it to the records, the reader to the events appended, and the
    /// store verifies.
    @Test func aFrameOfIndependentBlocksIsAStandardLZ4Frame() throws {
        try #require(LogAppender.cores > 1, "runs are compressed apart only on more than one core")
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender(store: store)
        let small = sampleMutations(1000)
        // About 900 KiB of records (under a frame's 1 MiB): each worker's run spans two blocks.
        let large = (0..<400).map { i in item(String(repeating: "note \(i) ", count: 250)) }
        _ = try appender.append(small)
        _ = try appender.append(large)
        try appender.close()
        var blocks: [Int] = []
        try LogReader(store: store).forEachFrame(origin: store.replicaID) { h, bytes in
            #expect(h.codec == .lz4Frame)
            #expect(bytes[FrameHeader.size + 4] & 0x20 != 0, "the descriptor says the blocks are independent")
            try expectLZ4ToolDecodes(bytes, header: h)
            blocks.append(lz4BlockCount(Array(bytes)))
            return true
        }
        #expect(blocks == [min(LogAppender.cores, 1000), blocks[1]])
        #expect(blocks[1] >= max(LogAppender.cores, 4), "runs past 256 KiB span several blocks")
        let events = try LogReader(store: store).events(origin: store.replicaID)
        #expect(events.count == 1400)
        #expect(events.map(\.fields.array) == (small + large).map(\.fields))
        #expect(try Verifier(store: store).run().isClean)
    }

    /// `lz4 -d` decodes the payload of `bytes` (a whole frame) to exactly its records.
    private func expectLZ4ToolDecodes(_ bytes: UnsafeRawBufferPointer, header h: FrameHeader) throws {
        let lz4 = ["/usr/bin/lz4", "/usr/local/bin/lz4"].first { FileManager.default.isExecutableFile(atPath: $0) }
        try #require(lz4 != nil, "the lz4 tool is not installed (apt-get install lz4)")
        let tmp = TempDir()
        let payload = Data(bytes[FrameHeader.size..<(FrameHeader.size + Int(h.storedBytes) - h.trailerBytes)])
        try payload.write(to: URL(fileURLWithPath: tmp.path + "/p.lz4"))
        let p = Process()
        p.executableURL = URL(fileURLWithPath: lz4!)
        p.arguments = ["-d", "-f", "-q", tmp.path + "/p.lz4", tmp.path + "/p.raw"]
        try p.run()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        let raw = try Data(contentsOf: URL(fileURLWithPath: tmp.path + "/p.raw"))
        #expect(raw.count == Int(h.rawBytes))
        // The decoded bytes are the event records: decoding them as a raw frame gives the same events.
        var rawFrame = Array(bytes[..<FrameHeader.size]) + Array(raw)
        rawFrame[5] = FrameHeader.Codec.raw.rawValue
        var hh = h
        hh.codec = .raw
        hh.signed = false
        hh.storedBytes = UInt32(raw.count)
        let viaTool = try rawFrame.withUnsafeBytes { try FrameDecoder().events(of: $0, header: hh) }
        #expect(viaTool == (try FrameDecoder().events(of: bytes, header: h)))
    }

    struct Expectation: Sendable {
        var name: String
        var lastSeq: UInt64?  // nil: opening for writing must fail
        var actions: [String]  // substrings, one per expected action, in order
        var truncatedAt: Int? = nil
        var droppedSeqs: ClosedRange<UInt64>? = nil
    }

    /// Each failure fixture, recovered: the exact surviving seqs, cut offset and report.
    @Test(arguments: [
        Expectation(name: "torn-header", lastSeq: 60, actions: ["truncated", "rebuilt index"], droppedSeqs: nil),
        Expectation(name: "torn-payload", lastSeq: 60, actions: ["truncated", "rebuilt index"], droppedSeqs: 61...80),
        Expectation(name: "bad-checksum-tail", lastSeq: 60, actions: ["truncated", "rebuilt index"], droppedSeqs: 61...80),
        Expectation(name: "incomplete-append", lastSeq: 60, actions: ["truncated", "rebuilt index"], droppedSeqs: 61...70),
        Expectation(name: "bad-checksum-sealed", lastSeq: 80, actions: ["event-id index of origin"]),
        Expectation(name: "damage-inside-newest", lastSeq: nil, actions: []),
        Expectation(name: "missing-index", lastSeq: 80, actions: ["rebuilt index", "rebuilt index", "rebuilt index"]),
        Expectation(name: "leftover-temp", lastSeq: 80, actions: ["removed leftover temp file"]),
        Expectation(name: "torn-segment-creation", lastSeq: 80, actions: ["removed torn segment"]),
    ])
    func failureFixtureRecovers(_ x: Expectation) throws {
        let dir = TempDir()
        copyTree(Fixtures.root + "/log/" + x.name, dir.path + "/s")
        let store = try Store.open(at: dir.path + "/s")
        guard let lastSeq = x.lastSeq else {
            do {
                _ = try LogAppender(store: store)
                Issue.record("opened a store with damage inside its newest segment")
            } catch let e as LogError {
                #expect(e.isCorruption)
                #expect(e.file == segmentFiles(store).last && e.offset == frameOffsets(segmentFiles(store).last!)[0])
            }
            return
        }
        let appender = try LogAppender(store: store)
        let got = appender.recovery.actions.map(\.description)
        #expect(got.count == x.actions.count, "\(got)")
        for (g, want) in zip(got, x.actions) { #expect(g.contains(want), "\(g)") }
        if let drop = x.droppedSeqs {
            guard case .truncatedTail(_, _, _, let seqs, _)? = appender.recovery.actions.first else {
                Issue.record("no truncation")
                return
            }
            #expect(seqs == drop)
        }
        #expect(appender.tip.lastSeq == Seq(lastSeq))
        // The log continues cleanly after recovery.
        let r = try appender.append([item("after recovery")])
        #expect(r.firstSeq == Seq(lastSeq + 1))
        try appender.close()
        if x.name == "bad-checksum-sealed" {
            // Never skipped: reading stops at the damage, naming the file and offset.
            do {
                _ = try LogReader(store: store).events(origin: store.replicaID)
                Issue.record("read through a damaged sealed segment")
            } catch let e as LogError {
                #expect(e.isCorruption && e.file == segmentFiles(store).first)
                #expect(e.offset == frameOffsets(segmentFiles(store).first!)[1])
            }
            let report = try Verifier(store: store).run()
            #expect(report.problems.count == 1 && report.problems[0].file == segmentFiles(store).first)
        } else {
            let events = try LogReader(store: store).events(origin: store.replicaID)
            #expect(events.map(\.seq.rawValue) == Array(1...lastSeq + 1))
            #expect(try Verifier(store: store).run().isClean)
        }
    }

    /// A sealed segment whose index is lost and whose frames are damaged is reported by recovery.
    @Test func damagedSealedSegmentWithoutIndexIsReported() throws {
        let dir = TempDir()
        copyTree(Fixtures.root + "/log/bad-checksum-sealed", dir.path + "/s")
        let store = try Store.open(at: dir.path + "/s")
        let first = segmentFiles(store).first!
        try FileManager.default.removeItem(atPath: first.replacingOccurrences(of: ".seg", with: ".idx"))
        let appender = try LogAppender(store: store)
        #expect(appender.recovery.actions.contains { if case .damagedSealedSegment(let f, let o, _) = $0 { f == first && o == frameOffsets(first)[1] } else { false } })
        #expect(appender.recovery.actions.contains { if case .eventIDIndexIncomplete(_, let s, _) = $0 { s == 1 } else { false } })
        try appender.close()
    }
}
