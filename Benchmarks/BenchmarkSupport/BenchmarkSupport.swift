// What both benchmark suites share: a clock, scratch folders, and the seeded sample stores
// (built once into .build/bench-data and reused across runs).
import Domain
import EventLog
import Foundation

public enum Clock {
    public static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}

/// A scratch directory under the benchmark output folder, removed afterwards.
public final class Scratch {
    public let path: String
    public init() {
        path = Workload.root + "/scratch-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

public enum Workload {
    /// Large stores are built once and kept here between runs (delete the folder to rebuild).
    public static let root: String = ProcessInfo.processInfo.environment["LOGBOOK_BENCH_DIR"] ?? (FileManager.default.currentDirectoryPath + "/.build/bench-data")

    public static func mutations(_ n: Int, seed: UInt64 = 1) -> [Mutation] {
        var out: [Mutation] = []
        out.reserveCapacity(n)
        for (i, line) in SampleWorkload(seed: seed, count: n).enumerated() {
            out.append(try! MutationParser.parse(line, lineNumber: i + 1))
        }
        return out
    }

    /// `ms` with a `notes` field of words added to each, of a length drawn from `bytes` (seeded:
    /// the same notes every run).
    public static func withNotes(_ ms: [Mutation], bytes: ClosedRange<Int>) -> [Mutation] {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(truncatingIfNeeded: state >> 33)
        }
        let words = SampleWorkload.words
        return ms.map { m in
            var m = m
            let length = bytes.lowerBound + next() % (bytes.count)
            var note = ""
            note.reserveCapacity(length + 16)
            while note.utf8.count < length { note += words[next() % words.count] + " " }
            m.fields.removeAll { $0.name == "notes" }
            m.fields.append(Field("notes", .text(note)))
            m.fields.sort(by: Field.inNameOrder)
            return m
        }
    }

    /// A store holding `events` sample events in frames of 1,000, built on first use.
    public static func store(events: Int) throws -> Store {
        // Named by the workload's version: a store built by an older workload (no links) is not reused.
        // w3: made by a build that signs (its frames carry signature blocks, as new stores' do).
        let path = root + "/store-w3-\(events)"
        if FileManager.default.fileExists(atPath: path + "/complete"), let s = try? Store.open(at: path) { return s }
        try? FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let store = try Store.create(at: path)
        let appender = try LogAppender(store: store)
        var produced = 0
        var workload = SampleWorkload(seed: 1, count: events)
        var batch: [Mutation] = []
        batch.reserveCapacity(1000)
        while let line = workload.next() {
            produced += 1
            batch.append(try MutationParser.parse(line, lineNumber: produced))
            if batch.count == 1000 {
                _ = try appender.append(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        if !batch.isEmpty { _ = try appender.append(batch) }
        try appender.close()
        _ = FileManager.default.createFile(atPath: path + "/complete", contents: Data())
        return store
    }
}

