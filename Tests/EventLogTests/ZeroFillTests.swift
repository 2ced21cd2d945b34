import Domain
import Foundation
import TestSupport
import Testing
@testable import EventLog

/// The zero fill a writer keeps past its last frame (docs/FORMAT.md, "Zero fill"): readers stop
/// at it as at the end of the file, recovery cuts it without a word when it is all zero and judges
/// anything else in it as bytes that are not a frame, and no sealed or closed segment keeps it.
@Suite struct ZeroFillTests {
    func isZero(_ b: ArraySlice<UInt8>) -> Bool { !b.contains { $0 != 0 } }

    @Test func aWriterKeepsZerosPastItsLastFrameAndReadersStopThere() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock())
        for i in 0..<3 { _ = try a.append(sampleMutations(40, seed: UInt64(i))) }
        let seg = segmentFiles(store)[0]
        let bytes = readBytes(seg)
        let end = framesEnd(seg)
        #expect(bytes.count > end && bytes.count <= end + SegmentWriter.fillSpanMax, "the fill is written ahead")
        #expect(isZero(bytes[end...]))
        // Another reader, while the writer is open, sees every committed event and stops at the fill.
        let reader = LogReader(store: store)
        #expect(try reader.events(origin: store.replicaID).count == 120)
        #expect(try reader.tip(origin: store.replicaID).lastSeq == Seq(120))
        #expect(try Verifier(store: store).run().isClean)
        // The status counts the log's bytes to its last frame, the fill only on disk.
        let open = try store.status()
        #expect(open.logBytes == end)
        #expect(open.bytesOnDisk >= bytes.count)
        // An append lands inside the fill and is read; the file does not grow.
        _ = try a.append(sampleMutations(5, seed: 9))
        #expect(readBytes(seg).count == bytes.count)
        #expect(try reader.events(origin: store.replicaID).count == 125)
        let grown = framesEnd(seg)
        #expect(try store.status().logBytes == grown)
        try a.close()
        // Closed, the segment ends with its last frame, and the status says the same.
        #expect(FileIO.size(of: seg) == framesEnd(seg))
        #expect(try store.status().logBytes == grown)
        #expect(try Verifier(store: store).run().isClean)
    }

    @Test func aCrashLeavesTheFillAndRecoveryCutsItWithoutAReport() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock())
        for i in 0..<3 { _ = try a.append(sampleMutations(20, seed: UInt64(i))) }
        // The store as a crash leaves it: the writer never closed.
        copyTree(store.path, dir.path + "/crashed")
        try a.close()
        let crashed = try Store.open(at: dir.path + "/crashed")
        let seg = segmentFiles(crashed)[0]
        let end = framesEnd(seg)
        #expect(FileIO.size(of: seg)! > end)
        let b = try LogAppender(store: crashed, wallClock: ManualClock())
        #expect(!b.recovery.actions.contains { if case .truncatedTail = $0 { true } else { false } }, "\(b.recovery.actions)")
        #expect(FileIO.size(of: seg) == end)
        #expect(try LogReader(store: crashed).events(origin: crashed.replicaID).count == 60)
        let r = try b.append(sampleMutations(2, seed: 7))
        #expect(r.firstSeq == Seq(61))
        try b.close()
        #expect(try Verifier(store: crashed).run().isClean)
    }

    /// Zeros where a frame should be, followed by a valid frame, are damage (a lost write inside
    /// the log), never the end: the reader stops with an error and the verifier names the offset.
    @Test func zerosFollowedByAValidFrameAreDamageNotTheEnd() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock())
        for i in 0..<3 { _ = try a.append(sampleMutations(10, seed: UInt64(i))) }
        try a.close()
        let seg = segmentFiles(store)[0]
        let offsets = frameOffsets(seg)
        #expect(offsets.count == 3)
        var bytes = readBytes(seg)
        for i in offsets[1]..<offsets[2] { bytes[i] = 0 }
        writeBytes(seg, bytes)
        do {
            let events = try LogReader(store: store).events(origin: store.replicaID)
            Issue.record("read past zeros inside the log: \(events.count) events")
        } catch let e as LogError {
            #expect(e.isCorruption && e.file == seg && e.offset == offsets[1], "\(e)")
        }
        let report = try Verifier(store: store).run()
        #expect(report.problems.first?.offset == offsets[1] && report.problems.first?.message.contains("followed by valid frames") == true,
                "\(report.problems)")
        // Recovery at open trusts the index, whose last frame checks (it never reads every frame);
        // the damage stays where the reader and the verifier find it, and nothing is cut.
        _ = try? LogAppender(store: store, wallClock: ManualClock()).close()
        #expect(readBytes(seg) == bytes, "nothing was cut")
    }

    /// Past the last frame, zeros and then bytes that are not a frame: a torn tail, cut and reported.
    @Test func aFillWithOtherBytesInItIsATornTail() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock())
        for i in 0..<2 { _ = try a.append(sampleMutations(10, seed: UInt64(i))) }
        try a.close()
        let seg = segmentFiles(store)[0]
        let end = FileIO.size(of: seg)!
        writeBytes(seg, readBytes(seg) + [UInt8](repeating: 0, count: 5000) + [UInt8](repeating: 0xA5, count: 300) + [UInt8](repeating: 0, count: 700))
        let b = try LogAppender(store: store, wallClock: ManualClock())
        #expect(b.recovery.actions.contains { if case .truncatedTail(_, end, 6000, _, _) = $0 { true } else { false } }, "\(b.recovery.actions)")
        #expect(FileIO.size(of: seg) == end)
        #expect(try LogReader(store: store).events(origin: store.replicaID).count == 20)
        try b.close()
    }

    /// More zeros than any fill (or not ending on a 4 KiB boundary, as a fill does) are writes a
    /// crash lost: cut all the same, and reported.
    @Test func moreZerosThanAFillAreCutAndReported() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock())
        _ = try a.append(sampleMutations(10, seed: 1))
        try a.close()
        let seg = segmentFiles(store)[0]
        let end = FileIO.size(of: seg)!
        let size = (end + SegmentWriter.fillBytesMax + 8192 + 4095) & ~4095
        writeBytes(seg, readBytes(seg) + [UInt8](repeating: 0, count: size - end))
        let b = try LogAppender(store: store, wallClock: ManualClock())
        #expect(b.recovery.actions.contains { if case .truncatedTail(_, end, size - end, nil, let why) = $0 { why.contains("zero bytes") } else { false } },
                "\(b.recovery.actions)")
        #expect(FileIO.size(of: seg) == end)
        try b.close()
    }

    @Test func sealedSegmentsEndWithTheirLastFrame() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.segmentBytesMax = 4096
        // The newest segment's index is written part-way (the status counts from it).
        options.indexCheckpointBytes = 1024
        let a = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        for i in 0..<12 { _ = try a.append(sampleMutations(20, seed: UInt64(i))) }
        let segs = segmentFiles(store)
        #expect(segs.count >= 3)
        for s in segs.dropLast() { #expect(FileIO.size(of: s) == framesEnd(s), "\(s)") }
        #expect(FileIO.size(of: segs.last!)! > framesEnd(segs.last!), "the newest keeps its fill")
        let origin = store.directory(store.replicaID)
        let newest = try origin.segments(op: "test").last!
        #expect(origin.loadIndex(newest, segmentSize: FileIO.size(of: segs.last!)!) != nil, "the newest segment has an index")
        #expect(try store.status().logBytes == segs.reduce(0) { $0 + framesEnd($1) })
        #expect(try LogReader(store: store).events(origin: store.replicaID).count == 240)
        #expect(try Verifier(store: store).run().isClean)
        try a.close()
        #expect(try Verifier(store: store).run().isClean)
    }

    /// Readers in other threads, reading while the writer writes frames over its fill, never
    /// see damage, never a wrong or partial event, and see the log only grow.
    @Test func readersBesideAWriterWritingOverItsFillSeeNoDamage() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock())
        let batches = (0..<60).map { sampleMutations(1000, seed: UInt64($0)) }
        let (errors, reads) = try readBeside(a, batches: batches, readers: 2) { reader, seen in
            let events = try reader.events(origin: store.replicaID)
            let tip = try reader.tip(origin: store.replicaID)
            let ok = events.count >= seen && events.count % 1000 == 0 && events.enumerated().allSatisfy { $0.element.seq.rawValue == UInt64($0.offset + 1) }
                && Int(tip.lastSeq.rawValue) >= events.count
            defer { seen = events.count }
            return ok ? nil : "read \(events.count) after \(seen), tip \(tip.lastSeq)"
        }
        #expect(errors.isEmpty, "\(errors.prefix(5))")
        #expect(reads > 0)
        #expect(try LogReader(store: store).events(origin: store.replicaID).count == 60_000)
        #expect(try Verifier(store: store).run().isClean)
    }

    /// The same with frames of about 2 MB (larger than a reader's read-ahead), where a reader is
    /// likelier to meet a frame half copied over the fill. (A reader that then finds the next
    /// frame whole reads the first again before it calls it damage; this test has not been seen
    /// to hit that window, with or without the second read.)
    @Test func readersBesideAWriterWritingLargeFramesSeeNoDamage() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.frameEventsMax = 20_000
        options.frameRawBytesMax = 4 << 20
        let a = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        var rng = SplitMix64(seed: 5)
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/")
        let batches = (0..<20).map { _ in
            (0..<8000).map { _ in item(String((0..<200).map { _ in alphabet[Int(rng.next() % 64)] })) }
        }
        let (errors, reads) = try readBeside(a, batches: batches, readers: 2) { reader, seen in
            let tip = Int(try reader.tip(origin: store.replicaID).lastSeq.rawValue)
            defer { seen = tip }
            return tip < seen || tip % 8000 != 0 ? "tip \(tip) after \(seen)" : nil
        }
        #expect(errors.isEmpty, "\(errors.prefix(5))")
        #expect(reads > 0)
        #expect(try LogReader(store: store).tip(origin: store.replicaID).lastSeq == Seq(160_000))
    }

    /// Appends `batches` with `a` while `readers` threads each call `read` (with a reader and a
    /// count of their own, for what they have seen) over and over until the appends end; then
    /// closes `a`.
    /// - Returns: what the reads said was wrong (a message, or an error thrown), and how many ran.
    func readBeside(_ a: LogAppender, batches: [[Mutation]], readers: Int,
                    _ read: @escaping @Sendable (LogReader, inout Int) throws -> String?) throws -> (errors: [String], reads: Int) {
        final class Outcome: @unchecked Sendable {
            let lock = NSLock()
            var errors: [String] = []
            var reads = 0
            var done = false
        }
        let outcome = Outcome()
        let store = a.store
        let threads = (0..<readers).map { _ in
            Thread {
                let reader = LogReader(store: store)
                var seen = 0
                while !outcome.lock.withLock({ outcome.done }) {
                    let wrong: String?
                    do { wrong = try read(reader, &seen) } catch { wrong = "\(error)" }
                    outcome.lock.withLock {
                        if let wrong { outcome.errors.append(wrong) }
                        outcome.reads += 1
                    }
                }
            }
        }
        threads.forEach { $0.start() }
        do {
            // The readers stop whatever the appends do.
            defer {
                outcome.lock.withLock { outcome.done = true }
                while threads.contains(where: { !$0.isFinished }) { usleep(1000) }
            }
            for batch in batches { _ = try a.append(batch) }
        }
        try a.close()
        return outcome.lock.withLock { (outcome.errors, outcome.reads) }
    }

    /// Received origins' logs are written without a fill (a hub holds thousands of them).
    @Test func aReceivedOriginKeepsNoFill() throws {
        let dir = TempDir()
        let source = try makeStore(dir)
        let a = try LogAppender(store: source, wallClock: ManualClock())
        for i in 0..<3 { _ = try a.append(sampleMutations(10, seed: UInt64(i))) }
        try a.close()
        let target = try Store.create(at: dir.path + "/target", replicaID: ReplicaID(rawValue: UUID()))
        let t = try LogAppender(store: target, wallClock: ManualClock())
        let seg = segmentFiles(source)[0]
        let bytes = readBytes(seg)
        let offsets = frameOffsets(seg) + [bytes.count]
        #expect(offsets.count == 4)
        _ = try t.receive((0..<3).map { Array(bytes[offsets[$0]..<offsets[$0 + 1]]) })
        let received = segmentFiles(target, source.replicaID)[0]
        #expect(FileIO.size(of: received) == framesEnd(received))
        try t.close()
    }
}
