import EventLog
import Foundation

/// Appends NDJSON mutations from a file descriptor as one atomic append, streaming: a reader
/// thread cuts the input into chunks of lines, the chunks are parsed and validated on every core
/// (a worker each, or the writer itself when it gets to a chunk no worker has started), and the
/// calling thread encodes, compresses and writes their frames in input order. Memory stays
/// bounded whatever the input's size: at most `queueBatchesMax` chunks wait, and one more is read.
///
/// A bad line stops everything: the append is rolled back and the `InputError` (with its line
/// number) is thrown; nothing of the input remains in the log. Chunks are handed out in order, so
/// the error is the first bad line's, as if the lines were read one by one.
package enum NDJSONAppend {
    /// Mutations per batch handed from the parser to the writer.
    static let batchMutations = 1024
    /// Batches in flight at most (bounds memory to a few MiB).
    static let queueBatchesMax = 4

    /// - Parameters:
    ///   - progress: called on the writer thread with (lines read, bytes read) every 100,000 lines.
    /// - Throws: `InputError` for a bad line, `LogError` for I/O; in both cases nothing is appended.
    ///   - prepare: called with each batch before it is written, e.g. to fill in `base` from a
    ///     projection; it may throw to stop the append. Calls never overlap, but they come from
    ///     worker threads or the calling thread, and not in input order: it must only read what
    ///     the append does not change, and take no lock the caller may hold.
    ///   - placed: called on the writer thread with each chunk's events, in input order, as they
    ///     are placed in the append (duplicates skipped), and the bytes of the chunk's lines (a
    ///     measure of what its events hold): their seq and clock are final, but they
    ///     are durable only once this function returns; if it throws, none of them happened.
    public static func append(from fd: Int32, name: String, to appender: LogAppender,
                              prepare: (@Sendable (inout [Mutation]) throws -> Void)? = nil,
                              placed: (([Event], Int) -> Void)? = nil,
                              progress: ((Int, Int) -> Void)? = nil) throws -> AppendResult {
        try appender.begin()
        do {
            var lastReport = 0
            let chunks = ChunkParsing(prepare: prepare)
            do {
                // No chunk is still being parsed (nor `prepare` running) once this returns.
                defer { chunks.drain() }
                try Handoff<LineChunk>.run(name: "ndjson-reader", depth: queueBatchesMax, produce: { hand, stopped in
                    let lines = LineReader(fd: fd, name: name)
                    lines.stopped = stopped
                    let held = HeldLines()
                    // Hands on the lines held so far; false once the writer has stopped.
                    func handHeld() -> Bool {
                        guard held.raw.count > 0 else { return true }
                        guard !stopped() else { return false }
                        defer { held.raw = RawLines() }
                        return hand(chunks.start(held.raw, line: lines.lineNumber, bytes: lines.bytesRead))
                    }
                    do {
                        // Input that stalls (a pipe) does not hold back the lines before it: a
                        // bad one among them is reported now, not once more input comes.
                        while try lines.next(willWait: { _ = handHeld() }, { line in
                            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { return }
                            held.raw.add(line, number: lines.lineNumber)
                        }) {
                            if held.raw.count >= batchMutations { guard handHeld() else { return } }
                        }
                    } catch {
                        // The lines before a line too long (or a failed read) go first: a bad
                        // one among them is the error to report.
                        _ = handHeld()
                        throw error
                    }
                    _ = handHeld()
                }, consume: { chunk in
                    let ms = try chunk.mutations()
                    // The clock is read every few events of a chunk, as `append` reads it.
                    var wall: UInt64 = 0
                    if let placed {
                        var events: [Event] = []
                        events.reserveCapacity(ms.count)
                        let origin = appender.origin
                        for (i, m) in ms.enumerated() {
                            if let (seq, hlc) = try appender.add(m, batchIndex: i, wall: &wall) {
                                events.append(Event(origin: origin, seq: seq, hlc: hlc, mutation: m))
                            }
                        }
                        placed(events, chunk.lineBytes)
                    } else {
                        for (i, m) in ms.enumerated() { try appender.add(m, batchIndex: i, wall: &wall) }
                    }
                    if chunk.line - lastReport >= 100_000 {
                        lastReport = chunk.line
                        progress?(chunk.line, chunk.bytes)
                    }
                })
            }
            return try appender.commit()
        } catch {
            try? appender.rollback()
            throw error
        }
    }
}

/// The lines read and not yet handed on, shared by the closures that read and hand them on (a
/// `var` those closures captured was checked for exclusive access at every line: one thread
/// uses it, and nothing re-enters).
private final class HeldLines {
    @exclusivity(unchecked) var raw = RawLines()
}

/// Lines of input, copied out of the reader's buffer, each with its line number.
struct RawLines {
    private var bytes: [UInt8] = []
    private var ends: [Int] = []
    private var numbers: [Int] = []
    var count: Int { ends.count }
    /// The bytes of the lines held.
    var byteCount: Int { bytes.count }

    mutating func add(_ line: UnsafeRawBufferPointer, number: Int) {
        bytes.append(contentsOf: line)
        ends.append(bytes.count)
        numbers.append(number)
    }

    /// The lines' mutations, in order; the first bad line's error.
    func parse() throws(InputError) -> [Mutation] {
        var out: [Mutation] = []
        out.reserveCapacity(ends.count)
        var failure: InputError?
        bytes.withUnsafeBytes { p in
            var start = 0
            for k in ends.indices {
                do throws(InputError) {
                    out.append(try MutationParser.parse(UnsafeRawBufferPointer(rebasing: p[start..<ends[k]]), lineNumber: numbers[k]))
                } catch {
                    failure = error
                    return
                }
                start = ends[k]
            }
        }
        if let failure { throw failure }
        return out
    }
}

/// The chunks of one append being parsed: each is parsed by whichever thread claims it first (a
/// worker started for it, or the writer once it is the next to write), and `drain` waits for any
/// still being parsed, so none outlives the append.
private final class ChunkParsing: @unchecked Sendable {
    private let prepare: (@Sendable (inout [Mutation]) throws -> Void)?
    private let prepareLock = Lock()
    private let lock = Lock()
    private var live: [ClaimedWork<[Mutation]>] = []  // under `lock`: started, maybe not parsed yet

    init(prepare: (@Sendable (inout [Mutation]) throws -> Void)?) {
        self.prepare = prepare
    }

    /// A chunk for `raw`, its parsing started on a worker.
    func start(_ raw: RawLines, line: Int, bytes: Int) -> LineChunk {
        let work = ClaimedWork { [self] in try parse(raw) }
        lock.withLock {
            live.removeAll { $0.isFinished }
            live.append(work)
        }
        DispatchQueue.global(qos: .userInitiated).async { work.runIfUnclaimed() }
        return LineChunk(line: line, bytes: bytes, lineBytes: raw.byteCount, parsing: work)
    }

    /// Parses `raw` and prepares its batch (one `prepare` at a time).
    private func parse(_ raw: RawLines) throws -> [Mutation] {
        var batch = try raw.parse()
        if let prepare { try prepareLock.withLock { try prepare(&batch) } }
        return batch
    }

    /// Claims every chunk not started and waits for those being parsed.
    func drain() {
        for work in lock.withLock({ live }) { work.abandon() }
        lock.withLock { live.removeAll() }
    }
}

/// A chunk of lines handed from the reader to the writer, in input order, parsed (and prepared)
/// by the first thread to take it.
struct LineChunk: Sendable {
    /// How far the input was read when the chunk was cut (for progress).
    let line: Int
    let bytes: Int
    /// The bytes of the chunk's own lines.
    let lineBytes: Int
    let parsing: ClaimedWork<[Mutation]>

    /// On the writer: the chunk's mutations, parsed here if no worker has started on them.
    func mutations() throws -> [Mutation] { try parsing.result().get() }
}
