import Domain
import Benchmark
import BenchmarkSupport
import EventLog
import Foundation

// Each benchmark measures its subject and its baseline in the same iteration, on this machine,
// and records: the subject's rate, the baseline's rate, and their ratio (×100), because absolute
// figures on a shared 2-core VM drift from run to run. See README "Benchmarks".

/// A configuration that reports wall clock and the given custom metrics.
func config(_ custom: [String], iterations: Int = 5, warmup: Int = 1) -> Benchmark.Configuration {
    Benchmark.Configuration(
        metrics: [.wallClock] + custom.map { metric($0) },
        timeUnits: .milliseconds,
        warmupIterations: warmup,
        maxDuration: .seconds(60),
        maxIterations: iterations
    )
}

/// Custom metrics are reported as measured (no scaling); larger is better unless the name says "us" or "bytes".
func metric(_ name: String) -> BenchmarkMetric {
    let smaller = name.contains("(us)") || name.contains("bytes") || name.contains("per mille") || name.contains("10M / 1M")
    return .custom(name, polarity: smaller ? .prefersSmaller : .prefersLarger, useScalingFactor: false)
}

let benchmarks: @Sendable () -> Void = {

    // Batched append: 1,000 events per frame; encode + compress + checksum + write + one fsync per frame.
    Benchmark("append batched 1000/frame", configuration: config(["events/s (K)", "raw write+fsync same bytes, events/s (K)", "ratio to raw write+fsync (%)",
                                                                  "ratio to raw write+fsync, interleaved (%)"], iterations: 5, warmup: 1)) { benchmark in
        let dir = Scratch()
        let (batches, logBytes) = try BatchedAppend.run(events: 400_000, perCall: 1000, in: dir, benchmark)
        // The same ratio with the two taken in turns, frame by frame (an append of 1,000 into a
        // second store, then a raw write+fsync of a frame's bytes): the disk's speed drifts from
        // second to second on this VM, and in turns both meet the same disk.
        let store2 = try Store.create(at: dir.path + "/s2")
        let appender2 = try LogAppender(store: store2)
        let turns = try RawDisk.inTurns(with: batches.count, bytes: logBytes / batches.count, in: dir.path) { k in _ = try appender2.append(batches[k]) }
        try appender2.close()
        benchmark.measurement(metric("ratio to raw write+fsync, interleaved (%)"), Int(turns.raw / turns.subject * 100))
    }

    // Batched append of several frames per call: 10,000 events, frames of 1,000, one fsync per
    // call (an app's large batch, an import's chunk).
    Benchmark("append batched 10000/call, 1000/frame", configuration: config(["events/s (K)", "raw write+fsync same bytes, events/s (K)", "ratio to raw write+fsync (%)"],
                                                                               iterations: 5, warmup: 1)) { benchmark in
        _ = try BatchedAppend.run(events: 400_000, perCall: 10_000, in: Scratch(), benchmark)
    }

    // The same with every event carrying a note of 1 to 3 KB of words: frames are cut by bytes
    // (about 500 events to a frame of 1 MiB of records), not by count.
    Benchmark("append batched 10000/call, notes of 1-3 KB", configuration: config(["events/s (K)", "raw write+fsync same bytes, events/s (K)", "ratio to raw write+fsync (%)"],
                                                                                 iterations: 5, warmup: 1)) { benchmark in
        _ = try BatchedAppend.run(Workload.withNotes(Workload.mutations(100_000), bytes: 1_000...3_000), perCall: 10_000, in: Scratch(), benchmark)
    }

    // Single-event durable appends from 64 concurrent callers (group commit) vs one fsync per event.
    Benchmark("append single events, 64 concurrent callers", configuration: config(["events/s", "one append+fsync per event, events/s", "raw 200-byte write+fsync per event, events/s", "ratio to one fsync per event (x100)", "ratio to raw fsync per event (x100)"], iterations: 5, warmup: 1)) { benchmark in
        let perCaller = 250
        let callers = 64
        let ms = Workload.mutations(callers * perCaller)
        let dir = Scratch()
        let store = try Store.create(at: dir.path + "/s")
        let writer = try LogWriter(store: store)
        let t0 = Clock.now()
        benchmark.startMeasurement()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for c in 0..<callers {
                group.addTask {
                    for k in 0..<perCaller { _ = try await writer.append([ms[c * perCaller + k]]) }
                }
            }
            try await group.waitForAll()
        }
        benchmark.stopMeasurement()
        let subject = Clock.now() - t0
        try await writer.close()
        // Baseline: the same number of events, each its own append (one frame, one fsync).
        let single = 2000
        let store2 = try Store.create(at: dir.path + "/s2")
        let one = try LogAppender(store: store2)
        let t1 = Clock.now()
        for m in ms.prefix(single) { _ = try one.append([m]) }
        let perEvent = (Clock.now() - t1) / Double(single)
        try one.close()
        let rawPerEvent = try RawDisk.writeAndSync(totalBytes: 200 * single, writes: single, in: dir.path) / Double(single)
        let rate = Double(callers * perCaller) / subject
        benchmark.measurement(metric("events/s"), Int(rate))
        benchmark.measurement(metric("one append+fsync per event, events/s"), Int(1 / perEvent))
        benchmark.measurement(metric("raw 200-byte write+fsync per event, events/s"), Int(1 / rawPerEvent))
        benchmark.measurement(metric("ratio to one fsync per event (x100)"), Int(rate * perEvent * 100))
        benchmark.measurement(metric("ratio to raw fsync per event (x100)"), Int(rate * rawPerEvent * 100))
    }

    // Signed logs: the same appends and receives into a signing store (Ed25519 per frame, a
    // SHA-256 of each payload, a 96-byte block) and an unsigned one (a fixed v4 id, as stores
    // made before signed logs), in the same iteration.
    Benchmark("signed vs unsigned: append and receive", configuration: config([
        "batched append signed, events/s (K)", "batched append unsigned, events/s (K)", "batched append signed / unsigned (%)",
        "single-event append signed / unsigned (%)",
        "receive signed, events/s (K)", "receive unsigned, events/s (K)", "receive signed / unsigned (%)",
        "single-event receive signed / unsigned (%)",
    ], iterations: 5, warmup: 1)) { benchmark in
        let events = 200_000, singles = 500
        let ms = Workload.mutations(events)
        let dir = Scratch()
        func run(signed: Bool) throws -> (batched: Double, single: Double, receive: Double, receiveSingles: Double) {
            let name = signed ? "signed" : "unsigned"
            let store = signed ? try Store.create(at: dir.path + "/" + name) : try Store.create(at: dir.path + "/" + name, replicaID: .random())
            let appender = try LogAppender(store: store)
            var t = Clock.now()
            for start in stride(from: 0, to: events, by: 1000) { _ = try appender.append(Array(ms[start..<start + 1000])) }
            let batched = Clock.now() - t
            t = Clock.now()
            for m in ms.prefix(singles) { _ = try appender.append([m]) }
            let single = Clock.now() - t
            try appender.close()
            var frames: [[UInt8]] = []
            try LogReader(store: store).forEachFrame(origin: store.replicaID) { _, bytes in
                frames.append(Array(bytes))
                return true
            }
            let big = Array(frames.prefix(events / 1000)), small = Array(frames.suffix(singles))
            let receiver = try LogAppender(store: try Store.create(at: dir.path + "/" + name + "-r"))
            t = Clock.now()
            for start in stride(from: 0, to: big.count, by: 16) { _ = try receiver.receive(Array(big[start..<min(big.count, start + 16)])) }
            let receive = Clock.now() - t
            t = Clock.now()
            _ = try receiver.receive(small)
            let receiveSingles = Clock.now() - t
            try receiver.close()
            return (batched, single, receive, receiveSingles)
        }
        benchmark.startMeasurement()
        let signed = try run(signed: true)
        let unsigned = try run(signed: false)
        benchmark.stopMeasurement()
        benchmark.measurement(metric("batched append signed, events/s (K)"), Int(Double(events) / signed.batched / 1000))
        benchmark.measurement(metric("batched append unsigned, events/s (K)"), Int(Double(events) / unsigned.batched / 1000))
        benchmark.measurement(metric("batched append signed / unsigned (%)"), Int(unsigned.batched / signed.batched * 100))
        benchmark.measurement(metric("single-event append signed / unsigned (%)"), Int(unsigned.single / signed.single * 100))
        benchmark.measurement(metric("receive signed, events/s (K)"), Int(Double(events) / signed.receive / 1000))
        benchmark.measurement(metric("receive unsigned, events/s (K)"), Int(Double(events) / unsigned.receive / 1000))
        benchmark.measurement(metric("receive signed / unsigned (%)"), Int(unsigned.receive / signed.receive * 100))
        benchmark.measurement(metric("single-event receive signed / unsigned (%)"), Int(unsigned.receiveSingles / signed.receiveSingles * 100))
    }

    // Shares (docs/SHARING.md): appends sealed into a share's log (ChaCha20-Poly1305 and the
    // share block, on top of signing) against appends to the replica's own signed log; and a
    // member's pull of a share's events (receive, then read them back, opening every frame)
    // against the same events as a signed log that is not sealed. In the same iteration.
    Benchmark("shares: sealed append and pull", configuration: config([
        "append to a share, events/s (K)", "append to own log, events/s (K)", "share append / own append (%)",
        "pull of shared events, events/s (K)", "pull of unsealed events, events/s (K)", "shared pull / unsealed pull (%)",
    ], iterations: 3, warmup: 1)) { benchmark in
        let events = 1_000_000, appendEvents = 200_000
        let ms = Workload.mutations(events)
        let dir = Scratch()
        let aliceKey = ReplicaKey.generate(), bobKey = ReplicaKey.generate()
        let alice = try Store.create(at: dir.path + "/alice", signingKey: aliceKey)
        let plain = try Store.create(at: dir.path + "/plain")
        let a = try LogAppender(store: alice)
        let share = try a.createShare(name: "bench")
        try a.addMember(bobKey.memberCard, to: share)
        let p = try LogAppender(store: plain)
        benchmark.startMeasurement()
        var t = Clock.now()
        for start in stride(from: 0, to: appendEvents, by: 1000) { _ = try a.appendShared(Array(ms[start..<start + 1000]), to: share) }
        let sharedAppend = Clock.now() - t
        t = Clock.now()
        for start in stride(from: 0, to: appendEvents, by: 1000) { _ = try p.append(Array(ms[start..<start + 1000])) }
        let ownAppend = Clock.now() - t
        benchmark.stopMeasurement()
        for start in stride(from: appendEvents, to: events, by: 1000) {
            _ = try a.appendShared(Array(ms[start..<start + 1000]), to: share)
            _ = try p.append(Array(ms[start..<start + 1000]))
        }
        try a.close()
        try p.close()
        func frames(_ store: Store, _ origin: ReplicaID) throws -> [[UInt8]] {
            var out: [[UInt8]] = []
            try LogReader(store: store).forEachFrame(origin: origin) { _, b in out.append(Array(b)); return true }
            return out
        }
        let members = try frames(alice, ReplicaID.shareMembers(share, signingKey: aliceKey.publicKey))
        let sealed = try frames(alice, ReplicaID.shareLog(share, signingKey: aliceKey.publicKey))
        let unsealed = try frames(plain, plain.replicaID)
        func pull(_ frames: [[UInt8]], into name: String, first: [[UInt8]]) throws -> Double {
            let store = try Store.create(at: dir.path + "/" + name, signingKey: name.hasPrefix("bob") ? bobKey : .generate())
            let r = try LogAppender(store: store)
            if !first.isEmpty { _ = try r.receive(first) }
            let origin = FrameHeader(parsing: frames[0])!.origin
            let t = Clock.now()
            for start in stride(from: 0, to: frames.count, by: 64) { _ = try r.receive(Array(frames[start..<min(frames.count, start + 64)])) }
            var n = 0
            try LogReader(store: store).forEachEventView(origin: origin) { _ in n += 1; return true }
            let elapsed = Clock.now() - t
            precondition(n == events, "the pull read \(n) of \(events) events")
            try r.close()
            return elapsed
        }
        benchmark.startMeasurement()
        let sharedPull = try pull(sealed, into: "bob-\(UUID().uuidString.prefix(6))", first: members)
        let plainPull = try pull(unsealed, into: "carol-\(UUID().uuidString.prefix(6))", first: [])
        benchmark.stopMeasurement()
        benchmark.measurement(metric("append to a share, events/s (K)"), Int(Double(appendEvents) / sharedAppend / 1000))
        benchmark.measurement(metric("append to own log, events/s (K)"), Int(Double(appendEvents) / ownAppend / 1000))
        benchmark.measurement(metric("share append / own append (%)"), Int(ownAppend / sharedAppend * 100))
        benchmark.measurement(metric("pull of shared events, events/s (K)"), Int(Double(events) / sharedPull / 1000))
        benchmark.measurement(metric("pull of unsealed events, events/s (K)"), Int(Double(events) / plainPull / 1000))
        benchmark.measurement(metric("shared pull / unsealed pull (%)"), Int(plainPull / sharedPull * 100))
    }

    // Bytes on disk against the NDJSON input of the sample workload.
    Benchmark("bytes on disk vs NDJSON input", configuration: config(["NDJSON input bytes per event", "log bytes per event", "log / input (per mille)"], iterations: 1, warmup: 0)) { benchmark in
        let events = 500_000
        var input = 0
        var ms: [Mutation] = []
        ms.reserveCapacity(events)
        for (i, line) in SampleWorkload(seed: 1, count: events).enumerated() {
            input += line.utf8.count + 1
            ms.append(try MutationParser.parse(line, lineNumber: i + 1))
        }
        let dir = Scratch()
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender(store: store)
        for start in stride(from: 0, to: events, by: 1000) { _ = try appender.append(Array(ms[start..<start + 1000])) }
        try appender.close()
        let log = try store.status().logBytes
        benchmark.measurement(metric("NDJSON input bytes per event"), input / events)
        benchmark.measurement(metric("log bytes per event"), log / events)
        benchmark.measurement(metric("log / input (per mille)"), log * 1000 / input)
    }

    // Reading the whole log back: checksum, hash chain and every record checked, each event made
    // whole (its fields decoded as they are read: `EventFields`). Then the same read with every
    // field of every event read (its name and value looked at), timed apart: what a consumer that
    // needs every value pays on top.
    Benchmark("read back 1M events (decode + verify)", configuration: config(["events/s (K)", "raw read of the same files, events/s (K)", "raw read + LZ4 decompress, events/s (K)", "ratio to raw read + LZ4 (%)", "every field read, events/s (K)", "every field read, ratio to raw read + LZ4 (%)"], iterations: 5, warmup: 1)) { benchmark in
        let store = try Workload.store(events: 1_000_000)
        let reader = LogReader(store: store)
        var count = 0
        let t0 = Clock.now()
        benchmark.startMeasurement()
        try reader.forEachEvent(origin: store.replicaID) { e in
            count += e.fields.count >= 0 ? 1 : 0
            return true
        }
        benchmark.stopMeasurement()
        let subject = Clock.now() - t0
        precondition(count == 1_000_000)
        var read = 0, bytes = 0
        let t1 = Clock.now()
        try reader.forEachEvent(origin: store.replicaID) { e in
            read += 1
            for f in e.fields {
                bytes += f.name.utf8.count
                switch f.value {
                case .text(let t): bytes += t.utf8.count
                case .integer(let i): bytes += Int(truncatingIfNeeded: i) & 1
                case .real(let d): bytes += d > 0 ? 1 : 0
                case .boolean(let b): bytes += b ? 1 : 0
                case .null: break
                }
            }
            return true
        }
        let everyField = Clock.now() - t1
        precondition(read == 1_000_000 && bytes > 0)
        let raw = try RawDisk.readAll(store.path + "/log")
        let floor = try ReadFloor.run(logDirectory: store.path + "/log/" + store.replicaID.description).seconds
        benchmark.measurement(metric("events/s (K)"), Int(Double(count) / subject / 1000))
        benchmark.measurement(metric("raw read of the same files, events/s (K)"), Int(Double(count) / raw / 1000))
        benchmark.measurement(metric("raw read + LZ4 decompress, events/s (K)"), Int(Double(count) / floor / 1000))
        benchmark.measurement(metric("ratio to raw read + LZ4 (%)"), Int(floor / subject * 100))
        benchmark.measurement(metric("every field read, events/s (K)"), Int(Double(read) / everyField / 1000))
        benchmark.measurement(metric("every field read, ratio to raw read + LZ4 (%)"), Int(floor / everyField * 100))
    }

    // Reading the whole log back as views: the same checks (checksum, hash chain, every record),
    // each event's ids, entity and clock read in place; fields decoded only when asked for.
    Benchmark("read back 1M events as views (verify, ids in place)", configuration: config(["events/s (K)", "raw read + LZ4 decompress, events/s (K)", "ratio to raw read + LZ4 (%)"], iterations: 5, warmup: 1)) { benchmark in
        let store = try Workload.store(events: 1_000_000)
        let reader = LogReader(store: store)
        var count = 0, items = 0
        let t0 = Clock.now()
        benchmark.startMeasurement()
        try reader.forEachEventView(origin: store.replicaID) { v in
            count += 1
            if v.entity == .item && v.entityID.uuid.0 == 7 { items += 1 }
            return true
        }
        benchmark.stopMeasurement()
        let subject = Clock.now() - t0
        precondition(count == 1_000_000 && items > 0)
        let floor = try ReadFloor.run(logDirectory: store.path + "/log/" + store.replicaID.description).seconds
        benchmark.measurement(metric("events/s (K)"), Int(Double(count) / subject / 1000))
        benchmark.measurement(metric("raw read + LZ4 decompress, events/s (K)"), Int(Double(count) / floor / 1000))
        benchmark.measurement(metric("ratio to raw read + LZ4 (%)"), Int(floor / subject * 100))
    }

    // Opening a store must not read every frame: open time at 1M and 10M events.
    Benchmark("open store, 1M vs 10M events", configuration: config(["open 1M events (us)", "open 10M events (us)", "10M / 1M open time (x100)"], iterations: 3, warmup: 0)) { benchmark in
        let small = try Workload.store(events: 1_000_000)
        let large = try Workload.store(events: 10_000_000)
        func openTime(_ s: Store) throws -> Double {
            var best = Double.infinity
            for _ in 0..<5 {
                let t = Clock.now()
                let a = try LogAppender(store: s)
                best = min(best, Clock.now() - t)
                try a.close()
            }
            return best
        }
        let a = try openTime(small), b = try openTime(large)
        benchmark.measurement(metric("open 1M events (us)"), Int(a * 1e6))
        benchmark.measurement(metric("open 10M events (us)"), Int(b * 1e6))
        benchmark.measurement(metric("10M / 1M open time (x100)"), Int(b / a * 100))
    }
}

enum BatchedAppend {
    /// Appends `events` of the workload into a new store in `dir`, `perCall` a call (the batches
    /// are made before the clock starts: copying them is the caller's work), and reports the
    /// events a second beside a raw write + fsync of the same bytes in as many writes as calls.
    /// Returns the batches and the log's bytes.
    static func run(events: Int, perCall: Int, in dir: Scratch, _ benchmark: Benchmark) throws -> (batches: [[Mutation]], logBytes: Int) {
        try run(Workload.mutations(events), perCall: perCall, in: dir, benchmark)
    }

    /// As `run(events:…)`, of the mutations `ms`.
    static func run(_ ms: [Mutation], perCall: Int, in dir: Scratch, _ benchmark: Benchmark) throws -> (batches: [[Mutation]], logBytes: Int) {
        let events = ms.count
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender(store: store)
        let batches = stride(from: 0, to: events, by: perCall).map { Array(ms[$0..<min(events, $0 + perCall)]) }
        let t0 = Clock.now()
        benchmark.startMeasurement()
        for batch in batches {
            _ = try appender.append(batch)
        }
        benchmark.stopMeasurement()
        let subject = Clock.now() - t0
        try appender.close()
        let logBytes = try store.status().logBytes
        let raw = try RawDisk.writeAndSync(totalBytes: logBytes, writes: batches.count, in: dir.path)
        benchmark.measurement(metric("events/s (K)"), Int(Double(events) / subject / 1000))
        benchmark.measurement(metric("raw write+fsync same bytes, events/s (K)"), Int(Double(events) / raw / 1000))
        benchmark.measurement(metric("ratio to raw write+fsync (%)"), Int(raw / subject * 100))
        return (batches, logBytes)
    }
}

enum RawDisk {
    /// Seconds to write `totalBytes` in `writes` equal writes, each followed by fdatasync.
    static func writeAndSync(totalBytes: Int, writes: Int, in dir: String) throws -> Double {
        try inTurns(with: writes, bytes: totalBytes / writes, in: dir) { _ in }.raw
    }

    /// Runs `subject(k)` for k in 0..<count, each followed by one raw write of `bytes` and an
    /// fdatasync; returns the seconds spent in each, summed.
    static func inTurns(with count: Int, bytes: Int, in dir: String, _ subject: (Int) throws -> Void) throws -> (subject: Double, raw: Double) {
        let path = dir + "/raw-\(UUID().uuidString.prefix(8))"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        precondition(fd >= 0)
        defer {
            close(fd)
            unlink(path)
        }
        let chunk = [UInt8](repeating: 0x5A, count: max(1, bytes))
        var s = 0.0, r = 0.0
        for k in 0..<count {
            let t0 = Clock.now()
            try subject(k)
            let t1 = Clock.now()
            let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            precondition(n == chunk.count && fdatasync(fd) == 0, "raw write+fsync failed")
            let t2 = Clock.now()
            s += t1 - t0
            r += t2 - t1
        }
        return (s, r)
    }

    /// Seconds to read every file under `dir` (from the page cache, like the reader).
    static func readAll(_ dir: String) throws -> Double {
        let files = FileManager.default.enumerator(atPath: dir)!.compactMap { $0 as? String }.filter { $0.hasSuffix(".seg") }
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        let t = Clock.now()
        for f in files {
            let fd = open(dir + "/" + f, O_RDONLY)
            while buf.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
            close(fd)
        }
        return Clock.now() - t
    }
}
