import Foundation
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

    /// Recovers a copy of the segment holding `bytes`, and checks what survives.
    func check(_ b: Built, _ bytes: [UInt8], _ what: String) throws {
        let dir = b.store.directory(b.store.replicaID)
        writeBytes(b.segment, bytes)
        try? FileManager.default.removeItem(atPath: dir.indexPath(Seq(1)))
        var report = RecoveryReport()
        let r = try Recovery.recover(dir, report: &report)
        #expect(r.tip.lastSeq == Seq(43), "\(what)")
        #expect(FileIO.size(of: b.segment) == b.lastFrame, "\(what)")
        if bytes.count != b.lastFrame {
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
}
