import Foundation
import TestSupport
import Testing
@testable import EventLog

@Suite struct LogTests {
    @Test func appendsAndReadsBackInOrder() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let ms = sampleMutations(2500)
        let appender = try LogAppender(store: store, wallClock: ManualClock())
        let r1 = try appender.append(Array(ms[..<1]))
        let r2 = try appender.append(Array(ms[1...]))
        #expect(r1.firstSeq == Seq(1) && r1.lastSeq == Seq(1))
        #expect(r2.firstSeq == Seq(2) && r2.lastSeq == Seq(2500) && r2.appended == 2499)
        try appender.close()
        let events = try LogReader(store: store).events(origin: store.replicaID)
        #expect(events.count == 2500)
        #expect(events.map(\.seq.rawValue) == Array(1...2500))
        for (e, m) in zip(events, ms) {
            #expect(e.entity == m.entity && e.op == m.op && e.entityID == m.entityID && e.fields == m.fields)
        }
        #expect(zip(events, events.dropFirst()).allSatisfy { $0.hlc < $1.hlc })
        // 2,499 events in frames of at most 1,000: three frames, the first two flagged `continues`.
        let headers = frameHeaders(store)
        #expect(headers.map(\.count) == [1, 1000, 1000, 499])
        #expect(headers.map(\.continues) == [false, true, true, false])
        #expect(try Verifier(store: store).run().isClean)
    }

    /// Fields are kept in the byte order of their names' UTF-8, whatever the names (ASCII,
    /// multi-byte, prefixes of each other, empty, long enough to live on the heap).
    @Test func fieldNameOrderIsTheBytesOrder() {
        var rng = SystemRandomNumberGenerator()
        let pieces = ["", "a", "b", "ab", "a_b", "é", "e\u{301}", "z", "zz", "title", "titles", "\u{10FFFF}", "ü", "Z", "_", String(repeating: "x", count: 40)]
        for _ in 0..<2000 {
            let a = (0..<Int.random(in: 1...3, using: &rng)).map { _ in pieces.randomElement(using: &rng)! }.joined()
            let b = Bool.random(using: &rng) ? a + pieces.randomElement(using: &rng)! : (0..<Int.random(in: 1...3, using: &rng)).map { _ in pieces.randomElement(using: &rng)! }.joined()
            let x = Field(a, .null), y = Field(b, .null)
            #expect(Field.inNameOrder(x, y) == a.utf8.lexicographicallyPrecedes(b.utf8), "\(a) vs \(b)")
            #expect(Field.inNameOrder(y, x) == b.utf8.lexicographicallyPrecedes(a.utf8), "\(b) vs \(a)")
        }
    }

    /// A frame built on several cores whose blocks would not be smaller than its records is
    /// stored raw like any other: its records, joined from the runs, byte for byte those of the
    /// frame built one event at a time (and so is a frame too small to compress); an event added
    /// after a batch, or a batch dropped unfinished, leaves the frame one event at a time makes.
    @Test func aBatchTooRandomToCompressIsStoredRawFromItsRuns() throws {
        var rng = SystemRandomNumberGenerator()
        // One short record of random four-byte characters per run: next to nothing for LZ4 to
        // match, so the blocks' framing outweighs what it finds.
        let noise = (0..<3).map { _ in
            item(String(String.UnicodeScalarView((0..<300).map { _ in Unicode.Scalar(UInt32.random(in: 0x10000...0x10FFFF, using: &rng))! })))
        }
        let tiny = [Mutation(entity: .tag, op: .delete, entityID: UUID())]
        let origin = ReplicaID(rawValue: UUID())
        for ms in [noise, tiny] {
            let hlcs = ms.indices.map { HLC(wallMillis: 1_000 + UInt64($0), counter: 0) }
            let atOnce = FrameEncoder(), oneByOne = FrameEncoder()
            #expect(atOnce.add(ms, picks: Array(ms.indices), origin: origin, baseSeq: Seq(1), hlcs: hlcs, workers: 3, bytesLimit: FrameHeader.payloadBytesMax))
            for (k, m) in ms.enumerated() { try oneByOne.add(m, origin: origin, seq: Seq(UInt64(k + 1)), hlc: hlcs[k]) }
            #expect(atOnce.recordBytes == oneByOne.recordBytes)
            let a = atOnce.finish(continues: false, previousHash: .zero), b = oneByOne.finish(continues: false, previousHash: .zero)
            #expect(a[5] == FrameHeader.Codec.raw.rawValue && a == b)
            let h = try a.withUnsafeBytes { try FrameHeader.decode($0) }
            #expect(try a.withUnsafeBytes { try FrameDecoder().events(of: $0, header: h) }.map(\.fields.array) == ms.map(\.fields))
        }
        // An event added after a batch joins its runs first: the frame is the one-at-a-time frame.
        let ms = sampleMutations(300, seed: 12)
        let hlcs = ms.indices.map { HLC(wallMillis: 1_000 + UInt64($0), counter: 0) }
        let atOnce = FrameEncoder(), oneByOne = FrameEncoder()
        #expect(atOnce.add(Array(ms.dropLast()), picks: Array(ms.indices.dropLast()), origin: origin, baseSeq: Seq(1), hlcs: Array(hlcs.dropLast()),
                           workers: 3, bytesLimit: FrameHeader.payloadBytesMax))
        try atOnce.add(ms[299], origin: origin, seq: Seq(300), hlc: hlcs[299])
        for (k, m) in ms.enumerated() { try oneByOne.add(m, origin: origin, seq: Seq(UInt64(k + 1)), hlc: hlcs[k]) }
        #expect(atOnce.finish(continues: false, previousHash: .zero) == oneByOne.finish(continues: false, previousHash: .zero))
        // A batch dropped unfinished leaves nothing in the next frame.
        #expect(atOnce.add(ms, picks: Array(ms.indices), origin: origin, baseSeq: Seq(1), hlcs: hlcs, workers: 3, bytesLimit: FrameHeader.payloadBytesMax))
        atOnce.reset()
        for (k, m) in ms.prefix(5).enumerated() { try atOnce.add(m, origin: origin, seq: Seq(UInt64(k + 1)), hlc: hlcs[k]) }
        for (k, m) in ms.prefix(5).enumerated() { try oneByOne.add(m, origin: origin, seq: Seq(UInt64(k + 1)), hlc: hlcs[k]) }
        #expect(atOnce.finish(continues: false, previousHash: .zero) == oneByOne.finish(continues: false, previousHash: .zero))
    }

    /// Where a batch's runs split is the writer's choice: with the calling thread's run made
    /// longer (`callerLead`, any size, clamped so that every run keeps events), the records are
    /// byte for byte those of one event at a time, and the frame reads back as the same events.
    @Test func aBatchWhoseFirstRunIsLongerHoldsTheSameRecords() throws {
        let origin = ReplicaID(rawValue: UUID())
        do {
            // The appender's lead on two cores: 19/32 of the batch for the first run.
            let ms = sampleMutations(1000, seed: 22)
            let hlcs = ms.indices.map { HLC(wallMillis: 5_000 + UInt64($0), counter: 0) }
            let e = FrameEncoder()
            #expect(e.add(ms, picks: Array(ms.indices), origin: origin, baseSeq: Seq(1), hlcs: hlcs, workers: 2,
                          callerLead: 1000 * 3 / 32, bytesLimit: FrameHeader.payloadBytesMax))
            #expect(e.runStarts == [0, 593, 1000])
        }
        for (count, workers) in [(1000, 2), (256, 2), (300, 3), (9, 8), (2, 2), (40, 8)] {
            let ms = sampleMutations(count, seed: 21)
            let hlcs = ms.indices.map { HLC(wallMillis: 5_000 + UInt64($0), counter: 0) }
            let oneByOne = FrameEncoder()
            for (k, m) in ms.enumerated() { try oneByOne.add(m, origin: origin, seq: Seq(UInt64(k + 1)), hlc: hlcs[k]) }
            let expected = oneByOne.recordBytes
            let single = oneByOne.finish(continues: false, previousHash: .zero)
            let singleHeader = try single.withUnsafeBytes { try FrameHeader.decode($0) }
            let events = try single.withUnsafeBytes { try FrameDecoder().events(of: $0, header: singleHeader) }
            for lead in [0, 1, count * 3 / 32, count, Int.max / 2] {
                let atOnce = FrameEncoder()
                #expect(atOnce.add(ms, picks: Array(ms.indices), origin: origin, baseSeq: Seq(1), hlcs: hlcs, workers: workers,
                                   callerLead: lead, bytesLimit: FrameHeader.payloadBytesMax))
                #expect(atOnce.recordBytes == expected, "\(count) events, \(workers) workers, lead \(lead)")
                // The first run is longer by the lead, at most half a share; the last one shorter.
                let runs = min(workers, count), share = count / runs, applied = min(lead, share / 2)
                let starts = (0...runs).map { $0 == 0 ? 0 : $0 == runs ? count : count * $0 / runs + applied }
                #expect(atOnce.runStarts == starts, "\(count) events, \(workers) workers, lead \(lead)")
                let frame = atOnce.finish(continues: false, previousHash: .zero)
                let h = try frame.withUnsafeBytes { try FrameHeader.decode($0) }
                let read = try frame.withUnsafeBytes { try FrameDecoder().events(of: $0, header: h) }
                #expect(read == events, "\(count) events, \(workers) workers, lead \(lead)")
            }
        }
    }

    /// A run cut by bytes (`addUpToLimit`) takes the events one at a time would put in the frame:
    /// up to and including the first whose record brings the records to the limit, wherever the
    /// runs split (in the first run or a later one); its records take as many bytes as theirs,
    /// and it reads back as the same events.
    @Test func aRunCutByBytesEndsWhereOneAtATimeCutsTheFrame() throws {
        let origin = ReplicaID(rawValue: UUID())
        var ms = sampleMutations(600, seed: 23)
        for i in stride(from: 5, to: ms.count, by: 9) {
            ms[i].fields = [Field("notes", .text(String(repeating: "w\(i % 7) ", count: 40 + i % 300)))]
        }
        let hlcs = ms.indices.map { HLC(wallMillis: 9_000 + UInt64($0), counter: 0) }
        // Where each record ends, one event at a time.
        var ends: [Int] = []
        let probe = FrameEncoder()
        for (k, m) in ms.enumerated() {
            try probe.add(m, origin: origin, seq: Seq(UInt64(k + 1)), hlc: hlcs[k])
            ends.append(probe.recordBytes)
        }
        // Limits met in the first run, in the second, on a record's last byte, past them all.
        let limits = [ends[40], ends[40] + 1, ends[400] - 1, ends[599], ends[599] + 1, 1]
        for limit in limits {
            let cut = ends.firstIndex { $0 >= limit }.map { $0 + 1 } ?? ms.count
            let oneByOne = FrameEncoder()
            for k in 0..<cut { try oneByOne.add(ms[k], origin: origin, seq: Seq(UInt64(k + 1)), hlc: hlcs[k]) }
            let expected = oneByOne.finish(continues: false, previousHash: .zero)
            let eh = try expected.withUnsafeBytes { try FrameHeader.decode($0) }
            let events = try expected.withUnsafeBytes { try FrameDecoder().events(of: $0, header: eh) }
            for workers in [1, 2, 3] {
                let e = FrameEncoder()
                let taken = try e.addUpToLimit(ms, picks: Array(ms.indices), origin: origin, baseSeq: Seq(1), hlcs: hlcs,
                                           workers: workers, bytesLimit: limit)
                #expect(taken == cut, "limit \(limit), \(workers) workers")
                #expect(e.count == cut && e.recordBytes == ends[cut - 1], "limit \(limit), \(workers) workers")
                let frame = e.finish(continues: false, previousHash: .zero)
                let h = try frame.withUnsafeBytes { try FrameHeader.decode($0) }
                #expect(h.count == eh.count && h.rawBytes == eh.rawBytes && h.firstHLC == eh.firstHLC && h.lastHLC == eh.lastHLC)
                let read = try frame.withUnsafeBytes { try FrameDecoder().events(of: $0, header: h) }
                #expect(read == events, "limit \(limit), \(workers) workers")
            }
        }
    }

    /// What sizes a run cut by bytes is a lower bound of each record's bytes: never more than
    /// `encode` writes, for every kind of value, name, id, actor and clock, and not far below it.
    @Test func aRecordsSizeIsNeverLessThanItsLowerBound() {
        var ms = sampleMutations(2_000, seed: 24)
        let uuidText = UUID().uuidString.lowercased()
        ms.append(Mutation(entity: .item, op: .update, entityID: UUID(), fields: [
            Field("a_name_of_no_code", .text("")), Field("notes", .text(uuidText)), Field("title", .text(uuidText.uppercased())),
            Field("sort_order", .integer(.min)), Field("latitude", .real(-0.0)), Field("status", .null), Field("is_pinned", .boolean(true)),
            Field("#200", .integer(Int64.max)), Field("#5", .integer(-1)), Field("#040", .null),
            Field("#" + String(repeating: "x", count: 5_000), .boolean(false)), Field("note", .text(String(repeating: "é", count: 18))),
        ], eventID: UUID(), base: HLC(rawValue: .max), actor: String(repeating: "a", count: 300)))
        ms.append(Mutation(entity: .tag, op: .delete, entityID: UUID(), actor: ""))
        for (k, m) in ms.enumerated() {
            var w = ByteWriter()
            EventCodec.encode(m, hlcDelta: UInt64(k) << 40, into: &w)
            let bound = withUnsafePointer(to: m) { EventCodec.recordBytesAtLeast($0) }
            #expect(bound <= w.count, "mutation \(k): bound \(bound), record \(w.count)")
            // And close to it: runs sized by it are not much longer than the frame takes.
            #expect(w.count - bound <= 24, "mutation \(k): bound \(bound), record \(w.count)")
        }
    }

    /// A batch that one frame holds has its records encoded, and compressed, on every core at
    /// once. Its frames hold exactly the records of the same events added one at a time: the same
    /// duplicates skipped (from the log and within the batch), the same seqs and clock values;
    /// only the payload's LZ4 blocks differ (independent, one run per core, instead of linked).
    /// A batch whose records pass the frame's byte limit is cut where one-at-a-time cuts it, its
    /// runs then sized by bytes and still made on every core.
    @Test func aBatchEncodedOnEveryCoreMakesTheFramesOfOneAtATime() throws {
        let dir = TempDir()
        let key = ReplicaKey.generate()
        var ms = sampleMutations(900, seed: 11)
        for i in stride(from: 0, to: ms.count, by: 7) { ms[i].eventID = UUID() }
        ms[700].eventID = ms[14].eventID  // repeats one earlier in the batch
        let head = Array(ms[..<3])          // the first already holds ms[0]'s id
        var smallFrames = AppendOptions()
        smallFrames.frameRawBytesMax = 20_000
        for (n, options) in [AppendOptions(), smallFrames].enumerated() {
            let (parallel, r1) = try headAndBatch(at: dir.path + "/parallel\(n)", key: key, options: options, head: head, batch: ms, atOnce: true)
            let (serial, r2) = try headAndBatch(at: dir.path + "/serial\(n)", key: key, options: options, head: head, batch: ms, atOnce: false)
            #expect(parallel.count == serial.count)
            for (p, q) in zip(parallel, serial) {
                let hp = try p.withUnsafeBytes { try FrameHeader.decode($0) }, hq = try q.withUnsafeBytes { try FrameHeader.decode($0) }
                #expect(hp.baseSeq == hq.baseSeq && hp.count == hq.count && hp.rawBytes == hq.rawBytes)
                #expect(hp.firstHLC == hq.firstHLC && hp.lastHLC == hq.lastHLC && hp.continues == hq.continues)
                let ep = try p.withUnsafeBytes { try FrameDecoder().events(of: $0, header: hp) }
                let eq = try q.withUnsafeBytes { try FrameDecoder().events(of: $0, header: hq) }
                #expect(ep == eq)
            }
            #expect(parallel[0] == serial[0])
            if n == 0 {
                // The batch's frame: one LZ4 block per core's run, where one at a time makes one block.
                #expect(lz4BlockCount(parallel[1]) == LogAppender.cores)
                #expect(lz4BlockCount(serial[1]) == 1)
            } else {
                // Cut by bytes (about 280 events a frame): the runs sized to reach the limit are
                // made on every core, cut where one at a time cuts them; the rest, under the limit
                // and too few to share out, one event at a time.
                #expect(parallel.dropFirst().map(lz4BlockCount) == [LogAppender.cores, LogAppender.cores, 1])
                #expect(serial.dropFirst().map(lz4BlockCount) == [1, 1, 1])
            }
            #expect(r1 == r2)
            #expect(r1[1].duplicateCount == 2 && r1[1].appended == 898)
            #expect(parallel.count == (n == 0 ? 2 : serial.count) && (n == 0 || parallel.count > 3), "frames: \(parallel.count)")
        }
    }

    /// A batch of several frames is encoded on every core a frame's worth at a time. Its frames
    /// hold exactly the records of the same events added one at a time, cut at the same places:
    /// the same duplicates skipped (within the batch, frames apart), seqs and clock values; a run
    /// whose records pass the frame's byte limit is made again by bytes, and so are the runs after
    /// it until a frame the limit does not cut; frames too small to share out go one at a time
    /// (then byte for byte the same), and the frames after them are shared out again.
    @Test func aBatchOfSeveralFramesIsEncodedOnEveryCoreFrameByFrame() throws {
        let dir = TempDir()
        let key = ReplicaKey.generate()
        var ms = sampleMutations(2_700, seed: 31)
        for i in stride(from: 0, to: ms.count, by: 7) { ms[i].eventID = UUID() }
        ms[2_100].eventID = ms[14].eventID  // repeats one two frames earlier
        let head = Array(ms[..<3])           // appended first: the batch's first repeats an id in the log
        // Large notes in the second frame's run: it passes a limit the first run stays under.
        var big = ms
        for i in 1_500..<1_540 {
            big[i] = Mutation(entity: .item, op: .update, entityID: UUID(), fields: [Field("notes", .text(String(repeating: "n\(i % 10)", count: 10_000)))])
        }
        var bytesCut = AppendOptions()
        bytesCut.frameRawBytesMax = 200_000
        var narrow = AppendOptions()
        narrow.frameEventsMax = 100
        var shared = AppendOptions()
        shared.frameEventsMax = 300
        // Frames of 1,000; cut by bytes in the second run; too narrow to share out; of 300; and
        // a last run too short to share out after two full ones (placed one at a time, its first
        // event writes the frame built on every core before it).
        // Small frames cut by bytes (a 15,000-byte limit): 100 events with notes of 1 KB, about
        // 15 to a frame, then events of a few dozen bytes, about 500 to a frame, among them one
        // whose record alone passes the limit.
        var tiny = AppendOptions()
        tiny.frameRawBytesMax = 15_000
        var mixed = ms
        for i in mixed.indices {
            let m = mixed[i]
            mixed[i] = i < 100
                ? Mutation(entity: .item, op: .update, entityID: m.entityID, fields: [Field("notes", .text(String(repeating: "n\(i % 10) ", count: 340)))], eventID: m.eventID)
                : Mutation(entity: .tag, op: .delete, entityID: m.entityID, eventID: m.eventID)
        }
        mixed[1_200].fields = [Field("notes", .text(String(repeating: "huge ", count: 8_000)))]
        let cases = [(AppendOptions(), ms), (bytesCut, big), (narrow, ms), (shared, ms), (AppendOptions(), Array(ms[..<2_103])), (tiny, mixed)]
        for (n, (options, batch)) in cases.enumerated() {
            let (parallel, r1) = try headAndBatch(at: dir.path + "/parallel\(n)", key: key, options: options, head: head, batch: batch, atOnce: true)
            let (serial, r2) = try headAndBatch(at: dir.path + "/serial\(n)", key: key, options: options, head: head, batch: batch, atOnce: false)
            #expect(r1 == r2 && r1[1].duplicateCount == 2 && r1[1].appended == batch.count - 2, "\(n)")
            #expect(parallel.count == serial.count, "\(n)")
            for (p, q) in zip(parallel, serial) {
                let hp = try p.withUnsafeBytes { try FrameHeader.decode($0) }, hq = try q.withUnsafeBytes { try FrameHeader.decode($0) }
                #expect(hp.baseSeq == hq.baseSeq && hp.count == hq.count && hp.rawBytes == hq.rawBytes, "\(n)")
                #expect(hp.firstHLC == hq.firstHLC && hp.lastHLC == hq.lastHLC && hp.continues == hq.continues, "\(n)")
                let ep = try p.withUnsafeBytes { try FrameDecoder().events(of: $0, header: hp) }
                let eq = try q.withUnsafeBytes { try FrameDecoder().events(of: $0, header: hq) }
                #expect(ep == eq, "\(n)")
            }
            // The first frame is the head's, the same in both; the batch's follow.
            #expect(parallel.first == serial.first)
            let batchFrames = Array(parallel.dropFirst()), serialFrames = Array(serial.dropFirst())
            let counts = try batchFrames.map { p in Int(try p.withUnsafeBytes { try FrameHeader.decode($0) }.count) }
            switch n {
            case 0:
                // Frames of 1,000, 1,000 and 698, each made of one block per core's run.
                #expect(counts == [1_000, 1_000, 698])
                #expect(batchFrames.map(lz4BlockCount) == [Int](repeating: LogAppender.cores, count: 3))
                #expect(serialFrames.map(lz4BlockCount) == [1, 1, 1])
            case 1:
                // The first run by count fits; the second passes the limit, so runs are then
                // sized to reach it (508 events, then ten large ones at a time), each made on
                // every core and cut where one at a time cuts it; after the large records a frame
                // of 1,000 is not cut by bytes, and runs go back to counts; the last 160 one at a time.
                #expect(counts == [1_000, 508, 10, 10, 10, 1_000, 160])
                let raw = try batchFrames.map { p in Int(try p.withUnsafeBytes { try FrameHeader.decode($0) }.rawBytes) }
                #expect(raw[1...4].allSatisfy { $0 >= 200_000 } && raw[5] < 200_000, "\(raw)")
                #expect(batchFrames.map(lz4BlockCount) == [Int](repeating: LogAppender.cores, count: 6) + [1])
                #expect(serialFrames.map(lz4BlockCount) == [Int](repeating: 1, count: 7))
            case 2:
                #expect(counts.count == 27 && parallel == serial)
            case 3:
                // Nine frames, the last (298 events) still large enough to share out.
                #expect(counts == [Int](repeating: 300, count: 8) + [298])
                #expect(batchFrames.map(lz4BlockCount) == [Int](repeating: LogAppender.cores, count: 9))
            case 4:
                // The last 101 events one at a time, after two frames made on every core.
                #expect(counts == [1_000, 1_000, 101])
                #expect(batchFrames.map(lz4BlockCount) == [LogAppender.cores, LogAppender.cores, 1])
            default:
                // Frames of 15 notes, too few events and bytes to share out, one event at a time,
                // and so the frame where the notes give way to small events; then frames of the
                // small events made on every core, cut where one at a time cuts them, among them
                // one that ends with the record that alone passes the limit (the batch's 1,201st,
                // seq 1,203 after the head's three and a repeat skipped); the last (346 events)
                // still large enough to share out.
                #expect(counts == [Int](repeating: 15, count: 6) + [225, 576, 309, 576, 576, 346])
                #expect(batchFrames.map(lz4BlockCount) == [Int](repeating: 1, count: 7) + [Int](repeating: LogAppender.cores, count: 5))
                #expect(serialFrames.map(lz4BlockCount) == [Int](repeating: 1, count: 12))
                let huge = try batchFrames[8].withUnsafeBytes { try FrameHeader.decode($0) }
                #expect(huge.rawBytes > 40_000 && huge.lastSeq.rawValue == 1_203, "\(huge.rawBytes) bytes to seq \(huge.lastSeq)")
            }
        }
    }

    /// A batch of fewer events than a run shares out, but whose records are large, is made on
    /// every core too: the same frame, event for event, as one at a time makes.
    @Test func aFewLargeEventsAreEncodedOnEveryCore() throws {
        let dir = TempDir()
        let key = ReplicaKey.generate()
        let notes = sampleMutations(120, seed: 33).enumerated().map { k, m in
            Mutation(entity: m.entity, op: m.op, entityID: m.entityID,
                     fields: m.fields + [Field("notes", .text(String(repeating: "note \(k) ", count: 100)))])
        }
        let head = sampleMutations(2, seed: 34)
        for (batch, shared) in [(notes, true), (Array(notes.prefix(40)), false)] {
            let (parallel, r1) = try headAndBatch(at: dir.path + "/p\(batch.count)", key: key, options: AppendOptions(), head: head, batch: batch, atOnce: true)
            let (serial, r2) = try headAndBatch(at: dir.path + "/s\(batch.count)", key: key, options: AppendOptions(), head: head, batch: batch, atOnce: false)
            #expect(r1 == r2 && parallel.count == 2 && serial.count == 2)
            let hp = try parallel[1].withUnsafeBytes { try FrameHeader.decode($0) }, hq = try serial[1].withUnsafeBytes { try FrameHeader.decode($0) }
            #expect(hp.count == UInt32(batch.count) && hp.rawBytes == hq.rawBytes)
            #expect(try parallel[1].withUnsafeBytes { try FrameDecoder().events(of: $0, header: hp) }
                    == serial[1].withUnsafeBytes { try FrameDecoder().events(of: $0, header: hq) })
            // 120 records of about 1 KB pass the 64 KiB worth sharing out; 40 do not.
            #expect(lz4BlockCount(parallel[1]) == (shared ? LogAppender.cores : 1), "\(batch.count) events")
        }
    }

    /// A frame holds 1 to 65,536 events: a writer asked for frames outside that is refused at
    /// open, with what was asked and what is allowed, instead of trapping at the append that
    /// would reach the bound.
    @Test func framesOutsideWhatAFrameHoldsAreRefusedAtOpen() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        for bad in [0, -1, FrameHeader.eventsMax + 1] {
            var options = AppendOptions()
            options.frameEventsMax = bad
            let error = #expect(throws: LogError.self) { try LogAppender(store: store, options: options) }
            #expect(error?.kind == .invalidInput && error?.message.contains("\(bad)") == true, "\(String(describing: error))")
        }
        var widest = AppendOptions()
        widest.frameEventsMax = FrameHeader.eventsMax
        let a = try LogAppender(store: store, options: widest)
        #expect(try a.append(sampleMutations(300)).appended == 300)
        try a.close()
    }

    /// An origin's folder found without segments may be one a crash left between its mkdir and
    /// the sync of `log/` (so its entry may not be on disk): `log/` is synced before the first
    /// segment is made in it, as for a folder made now; and so for a floor's folder.
    @Test func aFolderACrashLeftUnsyncedIsSyncedBeforeItsFirstSegment() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let own = store.directory(store.replicaID).path
        try FileIO.makeDirectory(own, op: "test")  // made, never synced: what the crash left
        let floored = try Store.create(at: dir.path + "/f").directory(ReplicaID(rawValue: UUID()))
        try FileIO.makeDirectory(floored.path, op: "test")
        let synced = Locked<[String]>([])
        FileIO.directorySyncObserver.withLock { $0 = { path in synced.withLock { $0.append(path) } } }
        defer { FileIO.directorySyncObserver.withLock { $0 = nil } }
        let a = try LogAppender(store: store)
        _ = try a.append([item("first")])
        try a.close()
        // `log/` is synced, and before the first segment is published in the origin's folder.
        let order = synced.withLock { $0 }
        let logSynced = try #require(order.firstIndex(of: FileIO.parent(own)))
        let segmentPublished = try #require(order.firstIndex(of: own))
        #expect(logSynced < segmentPublished)
        try floored.writeFloor(LogTip(lastSeq: Seq(3), lastHLC: HLC(rawValue: 1), lastHash: .zero))
        #expect(synced.withLock { $0 }.contains(FileIO.parent(floored.path)))
    }

    /// A group of pushes of several origins new to the store makes their logs on several threads,
    /// syncs the filesystem once, then each origin's log: every origin's frames are then marked
    /// durable and read back whole, in this process and the next.
    @Test func aGroupOfManyOriginsIsDurableForEachOrigin() throws {
        let dir = TempDir()
        var batches: [[[UInt8]]] = []
        var origins: [ReplicaID] = []
        for k in 0..<(LogAppender.newLogsThreadsMax + 3) {
            let peer = try Store.create(at: dir.path + "/peer\(k)", replicaID: ReplicaID.random())
            let w = try LogAppender(store: peer)
            _ = try w.append(sampleMutations(3 + k, seed: UInt64(k)))
            try w.close()
            var frames: [[UInt8]] = []
            try LogReader(store: peer).forEachFrame(origin: peer.replicaID) { _, b in frames.append(Array(b)); return true }
            batches.append(frames)
            origins.append(peer.replicaID)
        }
        let hub = try Store.create(at: dir.path + "/hub", replicaID: ReplicaID.random())
        let r = try LogAppender(store: hub)
        let results = try r.receive(batches: batches)
        #expect(results.allSatisfy { (try? $0.get().events) ?? 0 > 0 })
        try r.close()
        #expect(try Verifier(store: hub).run().isClean)
        for (k, o) in origins.enumerated() {
            #expect(hub.directory(o).loadDurable() == Seq(UInt64(3 + k)), "origin \(k) marked durable through its last seq")
            var n = 0
            try LogReader(store: hub).forEachEvent(origin: o, from: Seq(1)) { _ in n += 1; return true }
            #expect(n == 3 + k)
        }
        #if os(Linux)
        // The write-back is a real call here, not a no-op that would leave each fdatasync all the work.
        let fd = open(dir.path, O_RDONLY)
        defer { close(fd) }
        #expect(Sys.syncFilesystem(fd))
        #endif
    }

    @Test func readsFromAnySeq() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.frameEventsMax = 7
        options.segmentBytesMax = 4096
        let appender = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        for chunk in stride(from: 0, to: 600, by: 20) { _ = try appender.append(sampleMutations(600)[chunk..<chunk + 20].map { $0 }) }
        try appender.close()
        #expect(segmentFiles(store).count > 3)
        let reader = LogReader(store: store)
        for from in [1, 2, 7, 8, 99, 300, 599, 600] {
            let got = try reader.events(origin: store.replicaID, from: Seq(UInt64(from)), limit: 5)
            #expect(got.first?.seq == Seq(UInt64(from)))
            #expect(got.count == min(5, 600 - from + 1))
        }
        #expect(try reader.events(origin: store.replicaID, from: Seq(601)).isEmpty)
        #expect(try reader.tip(origin: store.replicaID).lastSeq == Seq(600))
    }

    @Test func reopensAndContinuesTheChain() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let clock = ManualClock()
        do {
            let a = try LogAppender(store: store, wallClock: clock)
            _ = try a.append(sampleMutations(10))
            try a.close()
        }
        // The wall clock stepped back between runs: hlc must still move forward.
        clock.set(1000)
        let b = try LogAppender(store: store, wallClock: clock)
        #expect(b.recovery.isClean)
        let r = try b.append(sampleMutations(5, seed: 9))
        #expect(r.firstSeq == Seq(11) && r.lastSeq == Seq(15))
        try b.close()
        let events = try LogReader(store: store).events(origin: store.replicaID)
        #expect(zip(events, events.dropFirst()).allSatisfy { $0.hlc < $1.hlc })
        #expect(try Verifier(store: store).run().isClean)
    }

    /// The segment index is written after the append is durable: a failure to write it (here a
    /// directory stands where it goes) must not report the append as failed (a retry would append
    /// its events twice). The events stay, and a reopened log reads them without the index.
    @Test func anIndexThatCannotBeWrittenDoesNotFailADurableAppend() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.indexCheckpointBytes = 1
        let appender = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        _ = try appender.append(sampleMutations(1))
        let index = store.directory(store.replicaID).indexPath(Seq(1))
        try? FileManager.default.removeItem(atPath: index)
        try FileManager.default.createDirectory(atPath: index + "/blocked", withIntermediateDirectories: true)
        let r = try appender.append(Array(sampleMutations(50)[1...]))
        #expect(r.appended == 49 && r.lastSeq == Seq(50))
        try? appender.close()
        try FileManager.default.removeItem(atPath: index)
        #expect(try LogReader(store: store).events(origin: store.replicaID).count == 50)
        let again = try LogAppender(store: store, wallClock: ManualClock())
        #expect(again.tip.lastSeq == Seq(50))
        try again.close()
    }

    @Test func rollsSegmentsAndChainsAcrossThem() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.segmentBytesMax = 2000
        let appender = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        for m in sampleMutations(300) { _ = try appender.append([m]) }
        try appender.close()
        let segs = segmentFiles(store)
        #expect(segs.count > 5)
        for s in segs { #expect(FileManager.default.fileExists(atPath: s.replacingOccurrences(of: ".seg", with: ".idx"))) }
        let names = segs.map { ($0 as NSString).lastPathComponent }
        #expect(names.first == "00000000000000000001.seg")
        #expect(names == names.sorted())
        #expect(try LogReader(store: store).events(origin: store.replicaID).count == 300)
        let report = try Verifier(store: store).run()
        #expect(report.isClean && report.events == 300 && report.segments == segs.count)
    }

    @Test func rollbackLeavesNothing() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.frameEventsMax = 10
        let appender = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        _ = try appender.append(sampleMutations(3))
        let size = framesEnd(segmentFiles(store)[0])
        try appender.begin()
        for m in sampleMutations(95, seed: 4) { try appender.add(item(m.entityID.uuidString, eventID: UUID())) }
        #expect(framesEnd(segmentFiles(store)[0]) > size)  // frames were written...
        try appender.rollback()
        #expect(FileIO.size(of: segmentFiles(store)[0])! == size)  // ...and are gone, with the zero fill
        let r = try appender.append(sampleMutations(2, seed: 5))
        #expect(r.firstSeq == Seq(4))
        try appender.close()
        #expect(try LogReader(store: store).events(origin: store.replicaID).count == 5)
        #expect(try Verifier(store: store).run().isClean)
    }

    @Test func eventIDsMakeRetriesHarmless() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let id1 = UUID(), id2 = UUID()
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            let r = try a.append([item("a", eventID: id1), item("b", eventID: id2), item("a again", eventID: id1), item("no id")])
            #expect(r.appended == 3 && r.duplicateCount == 1)
            #expect(r.duplicates.first?.inputIndex == 2 && r.duplicates.first?.seq == Seq(1))
            let retry = try a.append([item("a", eventID: id1), item("b", eventID: id2)])
            #expect(retry.appended == 0 && retry.duplicateCount == 2 && retry.firstSeq == nil)
            try a.close()
        }
        // Persistent: a new process still knows them, and rebuilds the index when it is lost.
        for deleteIndex in [false, true] {
            if deleteIndex {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store.path + "/eventids.sqlite" + suffix) }
            }
            let b = try LogAppender(store: store, wallClock: ManualClock())
            let r = try b.append([item("a", eventID: id1), item("c", eventID: UUID())])
            #expect(r.appended == 1 && r.duplicateCount == 1)
            try b.close()
        }
        let events = try LogReader(store: store).events(origin: store.replicaID)
        #expect(events.count == 5)
        #expect(events[0].eventID == id1 && events[0].hasExplicitEventID)
        #expect(!events[2].hasExplicitEventID)
    }

    /// An open that fails while catching the event-id index up (here: another origin's damaged
    /// FLOOR, met before this store's own origin) records nothing: the index must not claim this
    /// store's log indexed, or a retry of an event written before would be appended again.
    @Test func anOpenThatFailsLeavesTheEventIDIndexUnclaimed() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let id1 = UUID()
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            try a.append([item("a", eventID: id1), item("b")])
            try a.close()
        }
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store.layout.eventIDs + suffix) }
        let other = ReplicaID("00000000-0000-4000-8000-000000000001")!
        let otherDir = store.layout.originDirectory(other)
        try FileManager.default.createDirectory(atPath: otherDir, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: otherDir + "/" + StoreLayout.floorName, contents: Data(repeating: 0x5A, count: 60))
        do {
            _ = try LogAppender(store: store, wallClock: ManualClock())
            Issue.record("a damaged floor was opened")
        } catch {}
        try FileManager.default.removeItem(atPath: otherDir)
        let b = try LogAppender(store: store, wallClock: ManualClock())
        let retry = try b.append([item("a", eventID: id1)])
        #expect(retry.appended == 0 && retry.duplicateCount == 1, "the retried event was appended again")
        try b.close()
    }

    /// A committed frame of this store's own log lost to damage: the next append would give
    /// new events its seq, which a peer may already hold with other content. Appends are
    /// refused, naming the evidence, until the lost frame comes back from a peer.
    @Test func aLostCommittedOwnTailRefusesAppendsUntilRestoredFromAPeer() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let id = UUID()
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            _ = try a.append([item("keep")])
            _ = try a.append([item("cut", eventID: id)])
            try a.close()
        }
        copyTree(store.path, dir.path + "/peer")  // a peer that pulled both frames
        let peer = try Store.open(at: dir.path + "/peer")
        var lost: [[UInt8]] = []
        try LogReader(store: peer).forEachFrame(origin: store.replicaID) { _, b in lost.append(Array(b)); return true }
        let seg = segmentFiles(store)[0]
        let offsets = frameOffsets(seg)
        let bytes = readBytes(seg)
        writeBytes(seg, Array(bytes[..<(offsets[1] + 10)]))  // tear the second, committed frame
        try? FileManager.default.removeItem(atPath: seg.replacingOccurrences(of: ".seg", with: ".idx"))
        let b = try LogAppender(store: store, wallClock: ManualClock())
        #expect(!b.recovery.isClean)
        #expect(b.lostOwnTail == LogAppender.LostTail(holds: Seq(1), committed: Seq(2), evidence: "its durable mark (DURABLE)"))
        #expect { try b.append([item("new")]) } throws: { e in
            guard let e = e as? LogError, e.isOwnLogDamaged else { return false }
            return e.description.contains("ends at seq 1, but seq 2 was committed") && e.hint?.contains("evctl pull") == true
        }
        try b.close()
        // Reopening does not forget it (the mark is kept as evidence).
        let c = try LogAppender(store: store, wallClock: ManualClock())
        #expect(c.lostOwnTail?.committed == Seq(2))
        // The peer sends the frame back: the log is whole again, and appends go on after it.
        #expect(try c.receive(lost).frames == 1)
        #expect(c.lostOwnTail == nil)
        let r = try c.append([item("cut", eventID: id), item("new")])
        #expect(r.appended == 1 && r.duplicateCount == 1 && r.firstSeq == Seq(3))
        try c.close()
        #expect(try Verifier(store: store).run().isClean)
    }

    /// A store restored from a backup (every file of it older, its durable mark and event-id
    /// index too) holds no evidence of the tail it lost. A peer that holds that tail returns
    /// frames signed by this replica's own key: only this replica could have written them, so
    /// they are taken back and appends go on after them. An unsigned origin's frames prove no
    /// author and stay refused. A store that was written to after the restore has forked: the
    /// peer's frames are refused, naming the fork, and nothing is written.
    @Test func aStoreRestoredFromABackupTakesBackItsOwnTailSignedByItsKey() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/store")
        let id = UUID()
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            _ = try a.append([item("kept")])
            try a.close()
        }
        copyTree(store.path, dir.path + "/backup")
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            _ = try a.append([item("lost", eventID: id), item("lost too")])
            try a.close()
        }
        var tail: [[UInt8]] = []
        try LogReader(store: store).forEachFrame(origin: store.replicaID, from: Seq(2)) { _, b in tail.append(Array(b)); return true }
        #expect(tail.count == 1)
        func restore() throws -> Store {
            copyTree(dir.path + "/backup", store.path)
            return try Store.open(at: store.path)
        }
        // Restored: no evidence of the loss; the peer's frames are taken back.
        var restored = try restore()
        do {
            let b = try LogAppender(store: restored, wallClock: ManualClock())
            #expect(b.lostOwnTail == nil && b.tip.lastSeq == Seq(1))
            #expect(try b.receive(tail).frames == 1)
            #expect(b.tip.lastSeq == Seq(3))
            let r = try b.append([item("lost", eventID: id), item("new")])
            #expect(r.appended == 1 && r.duplicateCount == 1 && r.firstSeq == Seq(4))
            try b.close()
        }
        #expect(try Verifier(store: restored).run().isClean)
        #expect(try LogReader(store: restored).events(origin: restored.replicaID).map { $0.field("title") } == ["kept", "lost", "lost too", "new"].map { .text($0) })
        // Written to after the restore: the peer's frame does not follow, and says why.
        restored = try restore()
        do {
            let b = try LogAppender(store: restored, wallClock: ManualClock())
            _ = try b.append([item("written after the restore")])
            #expect { try b.receive(tail) } throws: { e in
                let text = String(describing: e)
                return text.contains("this replica's own log has forked") && text.contains("restored from a backup")
            }
            #expect(b.tip.lastSeq == Seq(2))
            try b.close()
        }
        #expect(try LogReader(store: restored).events(origin: restored.replicaID).count == 2)
        // A frame of the own origin whose signature fails is damage, never taken, never called
        // a fork (only this replica's key can prove one), whether it follows the log or not.
        var forged = tail[0]
        forged[forged.count - 1] ^= 0x01  // the signature's last byte
        forged = SignedLogTests.reframe(forged, signed: true, stored: Array(forged[FrameHeader.size...]))
        for writtenSince in [false, true] {
            restored = try restore()
            let b = try LogAppender(store: restored, wallClock: ManualClock())
            if writtenSince { _ = try b.append([item("written after the restore")]) }
            #expect { try b.receive([forged]) } throws: { e in
                let text = String(describing: e)
                return text.contains("signature does not verify") && !text.contains("forked")
            }
            #expect(b.tip.lastSeq == Seq(writtenSince ? 2 : 1))
            try b.close()
        }
        // An unsigned origin: its frames prove no author, and stay refused.
        let plainDir = TempDir()
        let plain = try makeStore(plainDir)
        do {
            let a = try LogAppender(store: plain, wallClock: ManualClock())
            _ = try a.append([item("kept")])
            try a.close()
        }
        copyTree(plain.path, plainDir.path + "/backup")
        var plainTail: [[UInt8]] = []
        do {
            let a = try LogAppender(store: plain, wallClock: ManualClock())
            _ = try a.append([item("lost")])
            try a.close()
            try LogReader(store: plain).forEachFrame(origin: plain.replicaID, from: Seq(2)) { _, b in plainTail.append(Array(b)); return true }
        }
        copyTree(plainDir.path + "/backup", plain.path)
        let c = try LogAppender(store: try Store.open(at: plain.path), wallClock: ManualClock())
        #expect { try c.receive(plainTail) } throws: { e in
            guard let e = e as? LogError else { return false }
            return e.isOwnLogDamaged && e.description.contains("which only this replica writes")
        }
        try c.close()
    }

    /// The lost tail may come back an append at a time over several pages: while its last frame
    /// has not arrived, the next request asks from where it got to (`openAppends`), an append of
    /// this store's own is refused (it would link onto the open frames and take the seqs of the
    /// rest), and closing keeps that refusal: the open frames are dropped at the next open, and
    /// the event-id index, which claims them, says the log lost them until they come back.
    @Test func anOwnAppendGivenBackOverSeveralPagesIsCompletedBeforeAnyAppend() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/store")
        var options = AppendOptions()
        options.frameEventsMax = 2
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock(), options: options)
            _ = try a.append([item("kept")])
            try a.close()
        }
        copyTree(store.path, dir.path + "/backup")
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock(), options: options)
            _ = try a.append((1...5).map { item("lost \($0)") })  // one append, three frames
            try a.close()
        }
        var tail: [[UInt8]] = []
        try LogReader(store: store).forEachFrame(origin: store.replicaID, from: Seq(2)) { _, b in tail.append(Array(b)); return true }
        #expect(tail.count == 3)
        copyTree(dir.path + "/backup", store.path)
        let restored = try Store.open(at: store.path)
        do {
            let b = try LogAppender(store: restored, wallClock: ManualClock(), options: options)
            let first = try b.receive(Array(tail.prefix(2)))
            #expect(first.incomplete == 2 && first.events == 0)
            #expect(b.openAppends[restored.replicaID] == Seq(5))
            #expect(try b.receivePosition()[restored.replicaID] == Seq(5))
            #expect { try b.append([item("too soon")]) } throws: { e in
                // The pull going on completes it: an app may try again.
                guard let e = e as? LogError else { return false }
                return e.isOwnLogDamaged && e.isOwnLogRestoring && e.isRetryable && e.description.contains("still open")
            }
            try b.close()
        }
        do {
            // Reopened, and reopened again: the open frames are dropped, and the index says they
            // were lost, at every open until they come back.
            for k in 0..<2 {
                let b = try LogAppender(store: restored, wallClock: ManualClock(), options: options)
                #expect(b.lostOwnTail == LogAppender.LostTail(holds: Seq(1), committed: Seq(5), evidence: "its event-id index") && b.tip.lastSeq == Seq(1))
                #expect { try b.append([item("too soon")]) } throws: { e in
                    // Lost, not arriving: only a pull brings it back.
                    guard let e = e as? LogError else { return false }
                    return e.isOwnLogDamaged && !e.isOwnLogRestoring && !e.isRetryable
                }
                if k == 0 { copyTree(restored.path, dir.path + "/crashed") }  // its files as a crash leaves them
                try b.close()
            }
            // Crashed after that open, before any close: the evidence is still there.
            let crashed = try LogAppender(store: try Store.open(at: dir.path + "/crashed"), wallClock: ManualClock(), options: options)
            #expect(crashed.lostOwnTail?.committed == Seq(5))
            try crashed.close()
            let b = try LogAppender(store: restored, wallClock: ManualClock(), options: options)
            _ = try b.receive(Array(tail.prefix(2)))
            #expect(try b.receive([tail[2]]).events == 5)
            #expect(b.openAppends.isEmpty && b.tip.lastSeq == Seq(6) && b.lostOwnTail == nil)
            #expect(try b.append([item("new")]).firstSeq == Seq(7))
            try b.close()
        }
        #expect(try Verifier(store: restored).run().isClean)
    }

    @Test func aSecondWriterIsRefusedNamingTheHolder() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let a = try LogAppender(store: store)
        do {
            _ = try LogAppender(store: store)
            Issue.record("second writer opened")
        } catch let e as LogError {
            #expect(e.isLocked)
            #expect(e.description.contains("process \(getpid())"))
        }
        try a.close()
        let b = try LogAppender(store: store)
        try b.close()
    }

    @Test func readersSeeOnlyWholeCommittedAppends() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.frameEventsMax = 10
        let appender = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        _ = try appender.append(sampleMutations(5))
        try appender.begin()
        for m in sampleMutations(45, seed: 2) { try appender.add(m) }  // four frames written, not committed
        let reader = LogReader(store: store)
        #expect(try reader.events(origin: store.replicaID).count == 5)
        #expect(try reader.tip(origin: store.replicaID).lastSeq == Seq(5))
        _ = try appender.commit()
        #expect(try reader.events(origin: store.replicaID).count == 50)
        try appender.close()
    }

    @Test func storeOpenErrorsAreClear() throws {
        let dir = TempDir()
        do {
            _ = try Store.open(at: dir.path + "/nothing")
            Issue.record("opened a missing store")
        } catch let e as LogError {
            #expect(e.isNotAStore && e.description.contains("evctl init"))
        }
        _ = try makeStore(dir)
        #expect(throws: LogError.self) { try makeStore(dir) }
        _ = FileManager.default.createFile(atPath: dir.path + "/store/store.json", contents: Data("{\"format_version\":99,\"replica_id\":\"x\"}".utf8))
        #expect(throws: LogError.self) { try Store.open(at: dir.path + "/store") }
    }
}

/// Appends `head`, then `batch` (at once, or one event at a time between `begin` and `commit`),
/// into a new store at `path` signed with `key`; checks the log whole (CRCs, signatures, its hash
/// chain) and returns its frames and the two appends' results.
func headAndBatch(at path: String, key: ReplicaKey, options: AppendOptions, head: [Mutation], batch: [Mutation],
                  atOnce: Bool) throws -> ([[UInt8]], [AppendResult]) {
    let store = try Store.create(at: path, signingKey: key)
    let a = try LogAppender(store: store, wallClock: ManualClock(), options: options)
    var results = [try a.append(head)]
    if atOnce {
        results.append(try a.append(batch))
    } else {
        try a.begin()
        for m in batch { try a.add(m) }
        results.append(try a.commit())
    }
    try a.close()
    #expect(try Verifier(store: store).run().isClean)
    var out: [[UInt8]] = []
    try LogReader(store: store).forEachFrame(origin: store.replicaID) { _, bytes in
        out.append(Array(bytes))
        return true
    }
    return (out, results)
}

func frameHeaders(_ store: Store) -> [FrameHeader] {
    var out: [FrameHeader] = []
    try! LogReader(store: store).forEachFrame(origin: store.replicaID) { h, _ in
        out.append(h)
        return true
    }
    return out
}
