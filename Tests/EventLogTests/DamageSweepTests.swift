import Domain
import Foundation
import TestSupport
import Testing
@testable import EventLog

/// For a log whose last frame is cut at every byte offset, or has any one bit flipped, recovery
/// keeps exactly the earlier frames, and the log then verifies and continues.
@Suite struct DamageSweepTests {
    struct Built {
        let dir: TempDir
        let store: Store
        let segment: String
        let bytes: [UInt8]
        let lastFrame: Int
        let earlier: [Event]
    }

    func build() throws -> Built {
        let dir = TempDir()
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock())
        _ = try a.append(sampleMutations(3, seed: 1))
        _ = try a.append(sampleMutations(40, seed: 2))
        _ = try a.append(sampleMutations(4, seed: 3))  // the frame the sweep damages
        try a.close()
        let seg = segmentFiles(store)[0]
        let earlier = Array(try LogReader(store: store).events(origin: store.replicaID).prefix(43))
        return Built(dir: dir, store: store, segment: seg, bytes: readBytes(seg), lastFrame: frameOffsets(seg).last!, earlier: earlier)
    }

    /// Recovers a copy of the segment holding `bytes`, and checks what survives. A file that is
    /// the earlier frames and zeros (a writer's zero fill) is cut without a report.
    func check(_ b: Built, _ bytes: [UInt8], _ what: String) throws {
        let dir = b.store.directory(b.store.replicaID)
        writeBytes(b.segment, bytes)
        try? FileManager.default.removeItem(atPath: dir.indexPath(Seq(1)))
        var report = RecoveryReport()
        let r = try Recovery.recover(dir, report: &report)
        #expect(r.tip.lastSeq == Seq(43), "\(what)")
        #expect(FileIO.size(of: b.segment) == b.lastFrame, "\(what)")
        if bytes.count != b.lastFrame && bytes[b.lastFrame...].contains(where: { $0 != 0 }) {
            #expect(report.actions.contains { if case .truncatedTail(_, let o, let n, _, _) = $0 { o == b.lastFrame && n == bytes.count - b.lastFrame } else { false } }, "\(what): \(report.actions)")
        }
        let events = try LogReader(store: b.store).events(origin: b.store.replicaID)
        #expect(events == b.earlier, "\(what)")
    }

    @Test func cutAtEveryOffsetOfTheLastFrame() throws {
        let b = try build()
        for cut in b.lastFrame..<b.bytes.count {
            try check(b, Array(b.bytes[..<cut]), "cut at \(cut)")
        }
    }

    /// The same over the zero fill a writer keeps past its last frame (a crash while the frame
    /// was being written over it): the frame cut at every offset, zeros after it to the fill's end.
    @Test func cutAtEveryOffsetOfTheLastFrameOverTheZeroFill() throws {
        let b = try build()
        let fillEnd = (b.bytes.count + 3000 + 4095) & ~4095  // a fill ends on a 4 KiB boundary
        // (A cut inside zero bytes the frame ends with leaves it whole: not a cut.)
        for cut in b.lastFrame..<b.bytes.count where b.bytes[cut...].contains(where: { $0 != 0 }) {
            try check(b, Array(b.bytes[..<cut]) + [UInt8](repeating: 0, count: fillEnd - cut), "cut at \(cut), zero fill after")
        }
        // Whole, then the fill: nothing is cut but the fill.
        writeBytes(b.segment, b.bytes + [UInt8](repeating: 0, count: fillEnd - b.bytes.count))
        var report = RecoveryReport()
        let r = try Recovery.recover(b.store.directory(b.store.replicaID), report: &report)
        #expect(r.tip.lastSeq == Seq(47) && FileIO.size(of: b.segment) == b.bytes.count && report.actions.isEmpty, "\(report.actions)")
    }

    @Test func everySingleBitFlipInTheLastFrameOverTheZeroFill() throws {
        let b = try build()
        let fill = [UInt8](repeating: 0, count: 3000)
        for offset in b.lastFrame..<b.bytes.count {
            for bit in 0..<8 {
                var bytes = b.bytes
                bytes[offset] ^= 1 << bit
                try check(b, bytes + fill, "bit \(bit) of byte \(offset), zero fill after")
            }
        }
    }

    @Test func everySingleBitFlipInTheLastFrame() throws {
        let b = try build()
        for offset in b.lastFrame..<b.bytes.count {
            for bit in 0..<8 {
                var bytes = b.bytes
                bytes[offset] ^= 1 << bit
                try check(b, bytes, "bit \(bit) of byte \(offset)")
            }
        }
    }

    /// The same damage in a sealed segment is never skipped: reads stop with the file and offset.
    @Test func bitFlipsInASealedSegmentAreReportedNotSkipped() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.segmentBytesMax = 600
        let a = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        for i in 0..<12 { _ = try a.append(sampleMutations(5, seed: UInt64(i))) }
        try a.close()
        let segs = segmentFiles(store)
        #expect(segs.count >= 3)
        let sealed = segs[0]
        let original = readBytes(sealed)
        let offsets = frameOffsets(sealed)
        var rng = SplitMix64(seed: 99)
        for _ in 0..<200 {
            let at = SegmentHeader.size + Int(rng.next() % UInt64(original.count - SegmentHeader.size))
            var bytes = original
            bytes[at] ^= 1 << (rng.next() % 8)
            writeBytes(sealed, bytes)
            let frameStart = offsets.last { $0 <= at }!
            do {
                _ = try LogReader(store: store).events(origin: store.replicaID)
                Issue.record("read through damage at \(at)")
            } catch let e as LogError {
                #expect(e.isCorruption && e.file == sealed && e.offset == frameStart, "\(e)")
            }
            let report = try Verifier(store: store).run()
            #expect(report.problems.first?.file == sealed && report.problems.first?.offset == frameStart)
        }
        writeBytes(sealed, original)
        #expect(try Verifier(store: store).run().isClean)
    }

    /// One walk decides what damage means for every reader of segments: a multi-frame append
    /// whose last frame is damaged, at the end of the newest segment, is a tail to the reader
    /// (none of its frames is returned, not even the valid ones before the damage), to the
    /// verifier (reported as a torn tail at the damaged frame) and to recovery (cut where the
    /// append starts). The same damage in a sealed segment is an error to all three.
    @Test func readerVerifierAndRecoveryAgreeOnADamagedMultiFrameAppend() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.frameEventsMax = 5
        let a = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        _ = try a.append(sampleMutations(4, seed: 1))
        _ = try a.append(sampleMutations(12, seed: 2))  // three frames: 5, 5, 2
        try a.close()
        let seg = segmentFiles(store)[0]
        let offsets = frameOffsets(seg)
        #expect(offsets.count == 4)
        var bytes = readBytes(seg)
        bytes[bytes.count - 3] ^= 0x40  // inside the payload of the append's last frame
        writeBytes(seg, bytes)

        let events = try LogReader(store: store).events(origin: store.replicaID)
        #expect(events.map(\.seq.rawValue) == Array(1...4), "the reader returns none of the damaged append")
        let verify = try Verifier(store: store).run()
        #expect(verify.problems.count == 1)
        #expect(verify.problems.first?.offset == offsets[3])
        #expect(verify.problems.first?.message.contains("torn tail") == true)

        var report = RecoveryReport()
        let r = try Recovery.recover(store.directory(store.replicaID), report: &report)
        #expect(r.tip.lastSeq == Seq(4))
        #expect(FileIO.size(of: seg) == offsets[1])
        #expect(report.actions.contains { if case .truncatedTail(_, offsets[1], _, 5...16, _) = $0 { true } else { false } }, "\(report.actions)")
        #expect(try Verifier(store: store).run().isClean)
    }

    @Test func aDamagedSealedSegmentIsAnErrorToTheReaderAndAProblemToTheVerifier() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.segmentBytesMax = 1024
        let a = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        for k in 0..<6 { _ = try a.append(sampleMutations(8, seed: UInt64(k))) }
        try a.close()
        let segs = segmentFiles(store)
        #expect(segs.count > 2)
        var bytes = readBytes(segs[0])
        bytes[bytes.count - 3] ^= 0x01
        writeBytes(segs[0], bytes)
        #expect(throws: LogError.self) { _ = try LogReader(store: store).events(origin: store.replicaID) }
        let verify = try Verifier(store: store).run()
        #expect(verify.problems.contains { $0.file == segs[0] && $0.message.contains("sealed segment") })
        // Recovery reads a sealed segment only to rebuild its index.
        try FileManager.default.removeItem(atPath: store.directory(store.replicaID).indexPath(Seq(1)))
        var report = RecoveryReport()
        _ = try Recovery.recover(store.directory(store.replicaID), report: &report)
        #expect(report.actions.contains { if case .damagedSealedSegment(let f, _, _) = $0 { f == segs[0] } else { false } }, "\(report.actions)")
    }
}

/// A large append walked once is not walked again by every reader that starts inside it, and
/// damage written into the file afterwards (in place, same size) is still seen: the walk is
/// remembered for the file as it stood, not for its name.
@Suite struct CheckedAppendTests {
    @Test func aRememberedWalkDoesNotHideLaterDamage() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.frameEventsMax = 5
        let a = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        _ = try a.append(sampleMutations(4, seed: 1))
        _ = try a.append(sampleMutations(12, seed: 2))  // three frames: 5, 5, 2
        try a.close()
        // Walks are remembered only for files whose times are settled (two seconds old).
        Thread.sleep(forTimeInterval: 2.1)
        let reader = LogReader(store: store)
        #expect(try reader.events(origin: store.replicaID).count == 16)
        let seg0 = try #require(segmentFiles(store).first)
        let remembered = try #require(SegmentFile(path: seg0, op: "test").identity())
        #expect(CheckedAppends.shared.end(covering: frameOffsets(seg0)[1], in: remembered) != nil, "the walk is remembered")
        #expect(try reader.events(origin: store.replicaID, from: Seq(11)).map(\.seq.rawValue) == Array(11...16))
        // Damage the append's last frame in place, past the file's time granularity.
        Thread.sleep(forTimeInterval: 0.05)
        let seg = store.path + "/log/" + store.replicaID.description + "/" + (try FileManager.default.contentsOfDirectory(atPath: store.path + "/log/" + store.replicaID.description).first { $0.hasSuffix(".seg") }!)
        let h = try #require(FileHandle(forUpdatingAtPath: seg))
        let size = try h.seekToEnd()
        try h.seek(toOffset: size - 3)
        let byte = try #require(try h.read(upToCount: 1)).first!
        try h.seek(toOffset: size - 3)
        try h.write(contentsOf: [byte ^ 0x40])
        try h.close()
        #expect(try reader.events(origin: store.replicaID).map(\.seq.rawValue) == Array(1...4), "none of the damaged append")
    }
}
