import Foundation
import TestSupport
import Testing
@testable import EventLog

/// Bytes from outside (a peer's frames, a crafted store) that once trapped the process: each
/// must give a typed error that says where, and leave the store unchanged.
@Suite struct HostileInputTests {
    static let peer = ReplicaID("0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")!
    static let now: UInt64 = 1_767_225_600_000

    /// A frame with a raw (uncompressed) payload of the given records, checksummed as the
    /// encoder would, but with whatever header values the test wants.
    static func frame(records: [UInt8], baseSeq: UInt64 = 1, count: UInt32 = 1, firstHLC: UInt64 = HLC(wallMillis: now, counter: 0).rawValue,
                      lastHLC: UInt64? = nil, previous: FrameHash = .zero, origin: ReplicaID = peer) -> [UInt8] {
        var header = FrameHeader(codec: .raw, continues: false, origin: origin, baseSeq: Seq(baseSeq), count: count,
                                 rawBytes: UInt32(records.count), firstHLC: HLC(rawValue: firstHLC), lastHLC: HLC(rawValue: lastHLC ?? firstHLC),
                                 storedBytes: UInt32(records.count), previousHash: previous, crc: 0)
        var w = ByteWriter()
        header.encode(into: &w)
        var crc = CRC32C()
        w.bytes.withUnsafeBytes { crc.update(UnsafeRawBufferPointer(rebasing: $0[0..<FrameHeader.size - 4])) }
        records.withUnsafeBytes { crc.update($0) }
        header.crc = crc.final
        w.removeAll()
        header.encode(into: &w)
        return w.bytes + records
    }

    /// One event record: the fixed head, an entity id, then `tail` (field count and fields).
    static func record(hlcDelta: [UInt8] = [0], tail: [UInt8] = [0], length: [UInt8]? = nil) -> [UInt8] {
        let body: [UInt8] = [1, 0, Entity.item.rawValue, Op.create.rawValue] + hlcDelta + [UInt8](repeating: 7, count: 16) + tail
        var w = ByteWriter()
        w.varint(UInt64(body.count))
        return (length ?? w.bytes) + body
    }

    /// 2^63 and 2^64 - 1 as LEB128 varints: past any Int, past any length.
    static let huge: [[UInt8]] = [[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
                                  [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]]

    func decodeError(_ f: [UInt8]) -> String? {
        f.withUnsafeBytes { p -> String? in
            do throws(FrameDecodeError) {
                let h = try FrameHeader.decode(p)
                try FrameDecoder.checkCRC(p, header: h)
                _ = try FrameDecoder().events(of: p, header: h)
                _ = try FrameDecoder().check(p, header: h)
                _ = try FrameDecoder().views(of: p, header: h)
                return nil
            } catch {
                return error.message
            }
        }
    }

    /// After a bad frame in the newest segment, the reader looks for a good frame further on
    /// (damage, when one is there; a torn tail, when none is). Each candidate header costs a read
    /// and a checksum of all it claims, up to 16 MiB: a file of headers each claiming the rest of
    /// it grew as the square of its size (4 MiB of them here: about 80 GB of checksums, 13 s; a
    /// file of 1 GiB, days). The search is bounded by the file's size; past the bound, the file
    /// reads as damage (reported, never cut), where before it read as a torn tail.
    @Test func aFileOfCandidateHeadersIsSearchedInBoundedWork() throws {
        let dir = TempDir()
        let path = dir.path + "/crafted.seg"
        let junk = [UInt8](repeating: 0xA5, count: 100)
        let n = 40_000
        let size = junk.count + n * FrameHeader.size
        var bytes = junk
        for k in 0..<n {
            let pos = junk.count + k * FrameHeader.size
            let claimed = min(FrameHeader.payloadBytesMax, size - pos - FrameHeader.size)
            var h = FrameHeader(codec: .lz4Frame, continues: false, origin: Self.peer, baseSeq: Seq(1), count: 1, rawBytes: 64,
                                firstHLC: HLC(wallMillis: Self.now, counter: 0), lastHLC: HLC(wallMillis: Self.now, counter: 0),
                                storedBytes: UInt32(claimed), previousHash: .zero, crc: 0)
            var w = ByteWriter()
            h.encode(into: &w)
            bytes += w.bytes
        }
        #expect(bytes.count == size)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let file = try SegmentFile(path: path, op: "test")
        #expect(try file.hasValidFrame(after: 0, origin: Self.peer), "too many candidates to check: taken as damage")
        // A file of junk alone has none: a torn tail.
        try Data(junk + [UInt8](repeating: 0, count: 4096)).write(to: URL(fileURLWithPath: path + ".2"))
        #expect(try !SegmentFile(path: path + ".2", op: "test").hasValidFrame(after: 0, origin: Self.peer))
    }

    @Test func hugeLengthsAndCountsAreErrorsNotTraps() throws {
        #expect(decodeError(Self.frame(records: Self.record())) == nil)  // the well-formed one decodes
        for v in Self.huge {
            // As the record's length, a field count, an actor length, a field-name length, a text length.
            let cases: [[UInt8]] = [
                Self.record(length: v),
                Self.record(tail: v),
                Self.record(tail: [1, 0] + v + [0x41]),           // field code 0: its name length
                Self.record(tail: [1, 1, 5] + v + [0x41]),        // field "title": text of that length
                Self.record(tail: [1] + v + [0]),                 // the field code itself
            ]
            for records in cases {
                let message = try #require(decodeError(Self.frame(records: records)))
                #expect(message.contains("event record at payload offset"))
            }
        }
    }

    @Test func nonCanonicalVarintsAreRefused() {
        // 0 spelled in two bytes, as the hlc delta: the same event would have two encodings.
        let message = decodeError(Self.frame(records: Self.record(hlcDelta: [0x80, 0x00])))
        #expect(message?.contains("canonical") == true)
        var r = ByteReader(UnsafeRawBufferPointer(start: nil, count: 0))
        #expect(throws: ByteReaderError.self) { try r.varint() }
    }

    /// `varint()` reads one and two bytes in place and leaves the rest to `varintSlow`: on every
    /// two bytes (and a third after them), with the reader ending after one, two or three of
    /// them, it reads what `varintSlow` reads, or refuses what it refuses at the same offset, and
    /// stops where it stops.
    @Test func varintsReadInPlaceAsByteByByte() {
        var bytes: [UInt8] = [0, 0, 0]
        for third in [UInt8(0x00), 0x01, 0x7F, 0x80] {
            bytes[2] = third
            for a in 0...255 {
                for b in 0...255 {
                    bytes[0] = UInt8(a)
                    bytes[1] = UInt8(b)
                    bytes.withUnsafeBytes { p in
                        for end in 1...3 {
                            var fast = ByteReader(p, end: end), slow = ByteReader(p, end: end)
                            let x = Result { try fast.varint() }.mapError { $0 as! ByteReaderError }
                            let y = Result { try slow.varintSlow() }.mapError { $0 as! ByteReaderError }
                            if x != y || (x.isSuccess && fast.offset != slow.offset) {
                                Issue.record("bytes \(bytes.prefix(end)): \(x) at \(fast.offset), byte by byte \(y) at \(slow.offset)")
                            }
                        }
                    }
                }
            }
        }
    }

    @Test func seqRangesPastTheLargestSeqAreRefused() {
        for (base, count) in [(UInt64.max, UInt32(1)), (Seq.max.rawValue, 2), (Seq.max.rawValue + 1, 1)] {
            let message = decodeError(Self.frame(records: Self.record(), baseSeq: base, count: count))
            #expect(message?.contains("largest seq") == true || message?.contains("event count") == true, "\(base)+\(count): \(message ?? "accepted")")
        }
        #expect(decodeError(Self.frame(records: Self.record(), baseSeq: Seq.max.rawValue, count: 1)) == nil)
        #expect(Seq(UInt64.max).next == Seq(UInt64.max))  // saturates, never traps
    }

    @Test func receivingAFrameThatTrappedLeavesTheStoreUnchanged() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let appender = try LogAppender(store: store, wallClock: ManualClock(Self.now))
        defer { try? appender.close() }
        for v in Self.huge {
            #expect { try appender.receive([Self.frame(records: Self.record(length: v))]) } throws: { ($0 as? LogError)?.isCorruption == true }
        }
        #expect(try LogReader(store: store).tip(origin: Self.peer).lastSeq == Seq(0))
    }

    @Test func framesFromFarInTheFutureAreRefusedUntilTheClockCatchesUp() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let wall = ManualClock(Self.now)
        var options = AppendOptions()
        options.clockDriftMaxMs = 60_000
        let ahead = HLC(wallMillis: Self.now + 3_600_000, counter: 0).rawValue
        let f = Self.frame(records: Self.record(), firstHLC: ahead)
        do {
            let appender = try LogAppender(store: store, wallClock: wall, options: options)
            defer { try? appender.close() }
            #expect { try appender.receive([f]) } throws: { e in
                guard let e = e as? LogError, e.isClockAhead else { return false }
                return e.description.contains("3600000 ms ahead") && e.description.contains(Self.peer.description)
            }
            #expect(try LogReader(store: store).tip(origin: Self.peer).lastSeq == Seq(0))
            // A local append is not held up: the clock was not moved by the refused frame.
            let r = try appender.append([item("local")])
            #expect(try LogReader(store: store).events(origin: store.replicaID).first?.hlc.wallMillis == Self.now)
            #expect(r.appended == 1)
        }
        // An hour later (less the drift) the same frame is taken.
        wall.set(Self.now + 3_600_000 - 60_000)
        let appender = try LogAppender(store: store, wallClock: wall, options: options)
        defer { try? appender.close() }
        #expect(try appender.receive([f]).frames == 1)
    }

    @Test func aClockAtTheEndOfTimeFailsAppendsInsteadOfTrapping() throws {
        var clock = HybridClock(wall: ManualClock(Self.now), last: HLC(rawValue: .max))
        #expect(throws: ClockError.self) { try clock.tick() }
        // A store that took such a frame before drift was bounded (no bound here) refuses appends.
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.clockDriftMaxMs = .max
        let appender = try LogAppender(store: store, wallClock: ManualClock(Self.now), options: options)
        defer { try? appender.close() }
        #expect(try appender.receive([Self.frame(records: Self.record(), firstHLC: .max)]).frames == 1)
        #expect { try appender.append([item("x")]) } throws: { ($0 as? LogError)?.description.contains("cannot advance") == true }
        #expect(try LogReader(store: store).events(origin: store.replicaID).isEmpty)
        // verify names the far-future frame.
        var verifier = Verifier(store: store)
        verifier.wallClock = ManualClock(Self.now)
        let report = try verifier.run()
        #expect(report.problems.contains { $0.message.contains("ms ahead of this machine's") && $0.message.contains("seq 1…1") })
    }
}

private extension Result {
    var isSuccess: Bool { if case .success = self { true } else { false } }
}
