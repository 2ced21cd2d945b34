import Domain
import Foundation
import Testing
import TestSupport
@testable import EventLog

/// NDJSON appends parse their chunks of lines on every core: what lands, and what a bad line or
/// a failing `prepare` reports, must be exactly what reading the lines one by one gives.
@Suite struct NDJSONAppendTests {
    /// `count` sample lines written to a file in `dir`, with `replace` lines swapped in (by
    /// 1-based line number); the file's descriptor and the lines.
    func input(_ dir: TempDir, count: Int, replace: [Int: String] = [:], blankEvery: Int = 0) throws -> (Int32, [String]) {
        var lines = Array(SampleWorkload(seed: 31, count: count))
        for (n, text) in replace { lines[n - 1] = text }
        var text = ""
        for (i, line) in lines.enumerated() {
            text += line + "\n"
            if blankEvery > 0 && i % blankEvery == 0 { text += "  \n" }
        }
        let path = dir.path + "/in-\(UUID().uuidString).ndjson"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        return (fd, lines)
    }

    /// Lines cut into many chunks land in input order, each once, and every batch is prepared
    /// exactly once, never two at a time.
    @Test func manyChunksLandInInputOrderAndArePreparedOnceEach() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender(store: store)
        defer { try? appender.close() }
        let (fd, lines) = try input(dir, count: 9_500, blankEvery: 7)
        defer { close(fd) }
        let inFlight = Locked(0), prepared = Locked(0), overlapped = Locked(false)
        let r = try NDJSONAppend.append(from: fd, name: "input", to: appender, prepare: { batch in
            if inFlight.withLock({ n in n += 1; return n }) > 1 { overlapped.withLock { $0 = true } }
            usleep(1_000)
            prepared.withLock { $0 += batch.count }
            inFlight.withLock { $0 -= 1 }
        })
        #expect(r.appended == 9_500)
        #expect(prepared.withLock { $0 } == 9_500)
        #expect(!overlapped.withLock { $0 }, "two prepares ran at once")
        let events = try LogReader(store: store).events(origin: store.replicaID)
        let expected = try lines.enumerated().map { i, line in try MutationParser.parse(line, lineNumber: i + 1) }
        #expect(events.map(\.entityID) == expected.map(\.entityID))
        #expect(events.map(\.fields.array) == expected.map(\.fields))
    }

    /// Bad lines in several chunks: the error is the first one's, with its line number, and
    /// nothing is appended.
    @Test func theFirstBadLineIsReportedAndNothingLands() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender(store: store)
        defer { try? appender.close() }
        for bad in [[2_300: "not json", 6_100: #"{"entity":"robot"}"#], [9_000: #"{"entity":"item","op":"create","id":"nope"}"#], [1: "{"]] {
            let (fd, _) = try input(dir, count: 9_500, replace: bad)
            defer { close(fd) }
            let first = bad.keys.min()!
            // The first batch prepared waits, so later chunks (and their errors) finish first.
            let calls = Locked(0)
            do {
                _ = try NDJSONAppend.append(from: fd, name: "input", to: appender, prepare: { _ in
                    if calls.withLock({ n in n += 1; return n }) == 1 { usleep(50_000) }
                })
                Issue.record("a bad line was taken in")
            } catch let e as InputError {
                #expect(e.line == first, "\(e)")
            } catch {
                Issue.record("not an input error: \(error)")
            }
            #expect(try LogReader(store: store).tip(origin: store.replicaID).lastSeq == Seq(0))
        }
        // The appender is usable after each failure.
        let (fd, _) = try input(dir, count: 10)
        defer { close(fd) }
        #expect(try NDJSONAppend.append(from: fd, name: "input", to: appender).appended == 10)
    }

    /// A line too long (the reader's own error) after a bad line: the bad line is reported.
    @Test func aBadLineBeforeALineTooLongIsTheError() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender(store: store)
        defer { try? appender.close() }
        let long = #"{"entity":"item","op":"create","id":"5a3c0e4e-9b7d-4f0a-8c2e-1d6f3b9a7e21","fields":{"notes":""# + String(repeating: "n", count: MutationParser.lineBytesMax) + #""}}"#
        for (bad, tooLong) in [(5, 900), (1_500, 1_700)] {
            let (fd, _) = try input(dir, count: 2_000, replace: [bad: "not json", tooLong: long])
            defer { close(fd) }
            do {
                _ = try NDJSONAppend.append(from: fd, name: "input", to: appender)
                Issue.record("a bad line was taken in")
            } catch let e as InputError {
                #expect(e.line == bad && e.message.contains("expected '{'"), "\(e)")
            } catch {
                Issue.record("not an input error: \(error)")
            }
            #expect(try LogReader(store: store).tip(origin: store.replicaID).lastSeq == Seq(0))
        }
    }

    /// Input that stalls (a pipe its writer keeps open) does not hold back a bad line read
    /// before it: the error comes while the pipe is still open.
    @Test func aBadLineIsReportedWhileThePipeStaysOpen() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender(store: store)
        defer { try? appender.close() }
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]) }
        let lines = Array(SampleWorkload(seed: 5, count: 20)) + ["not json"]
        let text = Array((lines.joined(separator: "\n") + "\n").utf8)
        #expect(text.withUnsafeBytes { write(ends[1], $0.baseAddress, $0.count) } == text.count)
        // The writer end is closed only after 10 s (or once the append has answered).
        let closed = Locked(false), answered = DispatchSemaphore(value: 0)
        let writer = ends[1]
        DispatchQueue.global().async {
            _ = answered.wait(timeout: .now() + 10)
            closed.withLock { $0 = true }
            close(writer)
        }
        let result = Result { try NDJSONAppend.append(from: ends[0], name: "pipe", to: appender) }
        #expect(!closed.withLock { $0 }, "the error waited for the pipe to close")
        answered.signal()
        guard case .failure(let e as InputError) = result else {
            Issue.record("expected an input error, got \(result)")
            return
        }
        #expect(e.line == 21)
        #expect(try LogReader(store: store).tip(origin: store.replicaID).lastSeq == Seq(0))
    }

    /// A `prepare` that throws for one batch stops the append: its error, nothing appended.
    @Test func aFailingPrepareStopsTheAppend() throws {
        struct Refused: Error {}
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender(store: store)
        defer { try? appender.close() }
        let refusedID = UUID()
        let (fd, _) = try input(dir, count: 6_000, replace: [4_201: #"{"entity":"tag","op":"create","id":"\#(refusedID.lowercasedString)","fields":{"name":"refused"}}"#])
        defer { close(fd) }
        #expect(throws: Refused.self) {
            try NDJSONAppend.append(from: fd, name: "input", to: appender, prepare: { batch in
                if batch.contains(where: { $0.entityID == refusedID }) { throw Refused() }
            })
        }
        #expect(try LogReader(store: store).tip(origin: store.replicaID).lastSeq == Seq(0))
    }

    /// A wall clock that counts its readings and moves a millisecond at each.
    final class CountingClock: WallClock, @unchecked Sendable {
        let reads = Locked(0)
        func nowMillis() -> UInt64 {
            1_767_225_600_000 + UInt64(reads.withLock { n in n += 1; return n })
        }
    }

    /// The clock is read at the first event of a chunk and every `LogAppender.wallReadEvery`
    /// after, not per event: each reading (a new millisecond) stamps the 64 events from it, and
    /// the events' clocks still increase strictly.
    @Test func theClockIsReadEveryFewEventsAndClocksStillIncrease() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let clock = CountingClock()
        let appender = try LogAppender(store: store, wallClock: clock)
        defer { try? appender.close() }
        let (fd, _) = try input(dir, count: 3_000)
        defer { close(fd) }
        let before = clock.reads.withLock { $0 }
        #expect(try NDJSONAppend.append(from: fd, name: "input", to: appender).appended == 3_000)
        // Chunks of 1,024, 1,024 and 952 lines: 16, 16 and 15 readings.
        let every = LogAppender.wallReadEvery
        let perChunk = [1_024, 1_024, 952].map { ($0 + every - 1) / every }
        #expect(clock.reads.withLock { $0 } - before == perChunk.reduce(0, +))
        let events = try LogReader(store: store).events(origin: store.replicaID)
        #expect(events.count == 3_000)
        #expect(zip(events, events.dropFirst()).allSatisfy { $0.hlc < $1.hlc })
        // Within a chunk, event k has the wall of reading k / 64 (the counter orders the rest).
        var k = 0
        for (c, size) in [1_024, 1_024, 952].enumerated() {
            let first = events[k].hlc.wallMillis
            for j in 0..<size {
                let reading = first + UInt64(j / every)
                #expect(events[k + j].hlc.wallMillis == reading, "chunk \(c) event \(j)")
                if events[k + j].hlc.wallMillis != reading { break }
            }
            k += size
        }
    }
}
