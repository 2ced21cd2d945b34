import Foundation
import TestSupport
import Testing
@testable import EventLog

/// `LogReader.forEachEventView`, and `forEachEvent` decoding in batches: the same events, in the
/// same order, with the same checks and the same stopping points as decoding one frame at a time
/// on the caller's thread, whichever way the work is split.
@Suite struct EventViewTests {
    /// A log of many small frames over several segments, with explicit ids, actors and a base.
    func makeLog(_ dir: TempDir) throws -> Store {
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.frameEventsMax = 7
        options.segmentBytesMax = 4096
        let a = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        var ms = sampleMutations(400)
        for k in stride(from: 0, to: ms.count, by: 5) {
            ms[k].eventID = UUID()
            // Some actors too long to be held inline (a string of its own on the heap).
            ms[k].actor = k % 10 == 0 ? "a member of the household, number \(k)" : "user-\(k % 3)"
            ms[k].base = HLC(rawValue: UInt64(k) << 16)
        }
        for chunk in stride(from: 0, to: ms.count, by: 20) { _ = try a.append(Array(ms[chunk..<chunk + 20])) }
        _ = try a.append([item("one alone")])  // a frame of one event (its payload may be stored raw)
        try a.close()
        return store
    }

    func views(_ store: Store, from: Seq = Seq(1), pipelined: Bool) throws -> [EventView] {
        var out: [EventView] = []
        try LogReader(store: store).forEachEventView(origin: store.replicaID, from: from, pipelined: pipelined) { out.append($0); return true }
        return out
    }

    @Test(arguments: [false, true]) func viewsAreTheDecodedEvents(pipelined: Bool) throws {
        let dir = TempDir()
        let store = try makeLog(dir)
        #expect(segmentFiles(store).count > 3)
        let reader = LogReader(store: store)
        for from in [1, 2, 8, 199, 400, 401, 402] {
            // The reference: one frame at a time, on this thread.
            var events: [Event] = []
            try reader.forEachEvent(origin: store.replicaID, from: Seq(UInt64(from)), pipelined: false) { events.append($0); return true }
            var batched: [Event] = []
            try reader.forEachEvent(origin: store.replicaID, from: Seq(UInt64(from)), pipelined: pipelined) { batched.append($0); return true }
            #expect(batched == events)
            // Kept past the read that handed them out: they hold their payload.
            let vs = try views(store, from: Seq(UInt64(from)), pipelined: pipelined)
            #expect(vs.count == events.count && vs.count == max(0, 402 - from))
            for (v, e) in zip(vs, events) {
                #expect(v.seq == e.seq && v.hlc == e.hlc && v.origin == e.origin)
                #expect(v.entity == e.entity && v.op == e.op && v.entityID == e.entityID)
                #expect(v.eventID == e.eventID && v.explicitEventID == e.explicitEventID && v.hasExplicitEventID == e.hasExplicitEventID)
                #expect(v.schemaVersion == e.schemaVersion && v.isUnderstood == e.isUnderstood)
                #expect(try v.event() == e)
            }
        }
        #expect(try views(store, pipelined: pipelined).contains { $0.hasExplicitEventID })
    }

    @Test(arguments: [false, true]) func stopsWhereTheBodySays(pipelined: Bool) throws {
        let dir = TempDir()
        let store = try makeLog(dir)
        for stop in [1, 7, 8, 150, 401] {
            var seen: [Seq] = []
            try LogReader(store: store).forEachEventView(origin: store.replicaID, from: Seq(1), pipelined: pipelined) { v in
                seen.append(v.seq)
                return seen.count < stop
            }
            #expect(seen == (1...stop).map { Seq(UInt64($0)) })
            var decoded: [Seq] = []
            try LogReader(store: store).forEachEvent(origin: store.replicaID, from: Seq(1), pipelined: pipelined) { e in
                decoded.append(e.seq)
                return decoded.count < stop
            }
            #expect(decoded == seen)
        }
        // An error of the body ends the read: the body is not called again.
        struct Enough: Error {}
        var calls = 0
        #expect(throws: Enough.self) {
            try LogReader(store: store).forEachEventView(origin: store.replicaID, from: Seq(1), pipelined: pipelined) { _ in
                calls += 1
                if calls == 30 { throw Enough() }
                return true
            }
        }
        #expect(calls == 30)
        // The same for decoded events: the error is the body's, not one of the log.
        var decodedCalls = 0
        #expect(throws: Enough.self) {
            try LogReader(store: store).forEachEvent(origin: store.replicaID, from: Seq(1), pipelined: pipelined) { _ in
                decodedCalls += 1
                if decodedCalls == 30 { throw Enough() }
                return true
            }
        }
        #expect(decodedCalls == 30)
    }

    /// Each event is lent to the body as a copy of its bytes, its references left to the batch
    /// that frees them (or, `asBytes` false, moved out of the batch and back, the way taken were
    /// an `Event` not to move as its bytes): what the body keeps is whole after the read, whether
    /// it ends, stops or the body throws (on the first event, mid-frame, at a frame's end), and
    /// the same events read again are unchanged.
    @Test(arguments: [false, true], [false, true]) func eventsTheBodyKeepsOutliveTheRead(pipelined: Bool, asBytes: Bool) throws {
        // The lending a read takes by default is the byte copy (an event moves as its bytes).
        #expect(LogReader.lendsAsBytes)
        let dir = TempDir()
        let store = try makeLog(dir)
        let reader = LogReader(store: store)
        let all = try reader.events(origin: store.replicaID)
        #expect(all.count == 401 && all.contains { $0.actor != nil })
        struct Enough: Error {}
        // From the first event, and from inside a frame (the events before it are not lent).
        for from in [1, 5, 60] {
            let wanted = all.filter { $0.seq.rawValue >= from }
            for end in [1, 3, 7, 14, 150, wanted.count] {
                for throwing in [false, true] {
                    var kept: [Event] = []
                    do {
                        try reader.forEachEvent(origin: store.replicaID, from: Seq(UInt64(from)), pipelined: pipelined, lendingAsBytes: asBytes) { e in
                            kept.append(e)
                            if kept.count == end && throwing { throw Enough() }
                            return kept.count < end
                        }
                        #expect(!throwing)
                    } catch is Enough {
                        #expect(throwing)
                    }
                    #expect(kept == Array(wanted.prefix(end)))
                    #expect(try reader.events(origin: store.replicaID) == all)
                }
            }
        }
    }

    /// What a read lends leaves no reference behind and takes none away: once its batches are
    /// freed (the worker's queue drained), the payloads a body's kept events read their fields
    /// from are held by those events alone (gone once they are), every kept event reads as it
    /// did, and one detached holds its fields in an array of its own.
    @Test(arguments: [false, true], [false, true]) func aReadLeavesTheEventsItLendsHeldOnlyByTheBody(pipelined: Bool, asBytes: Bool) throws {
        let dir = TempDir()
        let store = try makeLog(dir)
        let reader = LogReader(store: store)
        var kept: [Event] = []
        try reader.forEachEvent(origin: store.replicaID, from: Seq(1), pipelined: pipelined, lendingAsBytes: asBytes) { kept.append($0); return true }
        checkQueue.sync {}
        #expect(kept.count == 401)
        #expect(kept.contains { ($0.actor?.utf8.count ?? 0) > 15 })
        let expected = try reader.events(origin: store.replicaID, from: Seq(1), limit: .max)
        checkQueue.sync {}
        #expect(kept == expected)
        struct Weak { weak var records: FrameRecords? }
        var payloads: [Weak] = []
        for e in kept {
            guard case .encoded(let records, _, _) = e.fields.storage else { continue }
            if payloads.last?.records !== records { payloads.append(Weak(records: records)) }
        }
        #expect(payloads.count > 30, "the events keep their frames' payloads")
        var one = kept.first { !$0.fields.isEmpty }!
        let fields = one.fields.array
        one.fields.detach()
        #expect(!one.fields.isEncoded && one.fields == fields)
        kept.removeAll()
        #expect(payloads.allSatisfy { $0.records == nil }, "a payload is held after the events reading it are gone")
        #expect(Array(one.fields) == fields)
    }

    /// Damage in a sealed segment: the events before it are handed out, then the error names the
    /// file and offset, exactly as the decoding reader does.
    @Test(arguments: [false, true]) func damageStopsTheReadWhereTheDecodingReaderStops(pipelined: Bool) throws {
        let dir = TempDir()
        let store = try makeLog(dir)
        let segs = segmentFiles(store)
        let offsets = frameOffsets(segs[2])
        var bytes = readBytes(segs[2])
        bytes[offsets[1] + FrameHeader.size + 3] ^= 0x40
        writeBytes(segs[2], bytes)
        var decoded: [Seq] = []
        var decodedError: LogError?
        do {
            try LogReader(store: store).forEachEvent(origin: store.replicaID, from: Seq(1), pipelined: false) { decoded.append($0.seq); return true }
        } catch let e as LogError { decodedError = e }
        var batched: [Seq] = []
        var batchedError: LogError?
        do {
            try LogReader(store: store).forEachEvent(origin: store.replicaID, from: Seq(1), pipelined: pipelined) { batched.append($0.seq); return true }
        } catch let e as LogError { batchedError = e }
        #expect(batched == decoded && batchedError?.offset == decodedError?.offset && batchedError?.file == decodedError?.file)
        var viewed: [Seq] = []
        var viewError: LogError?
        do {
            try LogReader(store: store).forEachEventView(origin: store.replicaID, from: Seq(1), pipelined: pipelined) { viewed.append($0.seq); return true }
        } catch let e as LogError { viewError = e }
        #expect(!decoded.isEmpty && viewed == decoded)
        // A body that stops just before the damaged frame ends the read without an error, though
        // the reader has read ahead into the damage.
        let stopAt = decoded.count - 3
        var early: [Seq] = []
        try LogReader(store: store).forEachEventView(origin: store.replicaID, from: Seq(1), pipelined: pipelined) { v in
            early.append(v.seq)
            return early.count < stopAt
        }
        #expect(early == Array(decoded.prefix(stopAt)))
        var earlyDecoded: [Seq] = []
        try LogReader(store: store).forEachEvent(origin: store.replicaID, from: Seq(1), pipelined: pipelined) { e in
            earlyDecoded.append(e.seq)
            return earlyDecoded.count < stopAt
        }
        #expect(earlyDecoded == early)
        let d = try #require(decodedError), v = try #require(viewError)
        #expect(v.isCorruption && v.file == segs[2] && v.offset == d.offset && v.file == d.file)
    }

    /// A frame in the log whose checksum and hash link are right but one of whose records is not
    /// (a faulty writer: receiving refuses such frames, so only this replica's own could be one):
    /// the events before it are handed out, none of its own, and the read fails naming its seqs;
    /// decoded events and views alike, in turn and batched.
    @Test(arguments: [false, true]) func aFrameThatDoesNotDecodeEndsTheReadNamingItsSeqs(pipelined: Bool) throws {
        let dir = TempDir()
        let store = try makeStore(dir)  // unsigned: the crafted frame needs no signature
        let a = try LogAppender(store: store, wallClock: ManualClock())
        _ = try a.append((0..<3).map { item("task \($0)") })
        try a.close()
        let segment = try #require(segmentFiles(store).last)
        var bytes = readBytes(segment)
        let lastAt = try #require(frameOffsets(segment).last)
        let last = Array(bytes[lastAt...])
        let (lastHeader, previous) = try last.withUnsafeBytes { (try FrameHeader.decode($0), FrameHash.of($0)) }
        let first = lastHeader.lastHLC.rawValue + 1_000
        let good = HostileInputTests.record()
        let badText = HostileInputTests.record(hlcDelta: [1], tail: [1, 1, 5, 2, 0xC3, 0x28])  // title: invalid UTF-8
        bytes += HostileInputTests.frame(records: good + badText, baseSeq: 4, count: 2, firstHLC: first, lastHLC: first + 1,
                                         previous: previous, origin: store.replicaID)
        writeBytes(segment, bytes)

        var decoded: [Seq] = []
        let e1 = #expect(throws: LogError.self) {
            try LogReader(store: store).forEachEvent(origin: store.replicaID, from: Seq(1), pipelined: pipelined) { decoded.append($0.seq); return true }
        }
        var viewed: [Seq] = []
        let e2 = #expect(throws: LogError.self) {
            try LogReader(store: store).forEachEventView(origin: store.replicaID, from: Seq(1), pipelined: pipelined) { viewed.append($0.seq); return true }
        }
        #expect(decoded == [Seq(1), Seq(2), Seq(3)] && viewed == decoded)
        for e in [e1, e2] {
            let e = try #require(e)
            #expect(e.isCorruption && e.seqs == 4...5, "\(e)")
            #expect(e.message.contains("does not decode") && e.message.contains("UTF-8"), "\(e.message)")
        }
    }

    /// A number that is not a number (a NaN, any of its bit patterns: a peer's frame may carry
    /// one, though no input does) reads the same decoded and as a view. The fuzz oracle compared
    /// the two with `==`, under which a NaN differs from itself, and stopped on such a frame.
    @Test func aNaNReadsTheSameDecodedAndAsAView() throws {
        for bits: UInt64 in [0x7FF8_0000_0000_0000, 0xFFF0_0000_0000_0001, 0x7FF0_0000_0000_0000] {
            let le = withUnsafeBytes(of: bits.littleEndian) { Array($0) }
            let frame = HostileInputTests.frame(records: HostileInputTests.record(tail: [1, 1, 4] + le))
            #expect(frame.withUnsafeBytes { FrameInspector.crossCheck($0) })
            let event = try frame.withUnsafeBytes { try FrameInspector.events(in: $0).1.first }
            guard case .real(let d)? = event?.fields.first?.value else { Issue.record("no real"); continue }
            #expect(d.bitPattern == bits)
        }
    }

    /// A frame whose checksum is right but one of whose records is not (a faulty or hostile
    /// author) is refused whole, with the verdict decoding gives: none of its events is handed out.
    @Test func aFrameWithOneBadRecordGivesNoViews() throws {
        let good = HostileInputTests.record()
        let badText = HostileInputTests.record(hlcDelta: [1], tail: [1, 1, 5, 2, 0xC3, 0x28])  // title: invalid UTF-8
        let frame = HostileInputTests.frame(records: good + badText, count: 2,
                                            lastHLC: HLC(wallMillis: HostileInputTests.now, counter: 0).rawValue + 1)
        #expect(frame.withUnsafeBytes { FrameInspector.crossCheck($0) } == false)
        let verdict = frame.withUnsafeBytes { p -> String? in
            do throws(FrameDecodeError) {
                let h = try FrameHeader.decode(p)
                _ = try FrameDecoder().views(of: p, header: h)
                return nil
            } catch { return error.message }
        }
        #expect(verdict?.contains("UTF-8") == true, "\(String(describing: verdict))")
        // Without the bad record, the same bytes are a valid frame of one event.
        let one = HostileInputTests.frame(records: good)
        #expect(one.withUnsafeBytes { FrameInspector.crossCheck($0) })
    }
}
