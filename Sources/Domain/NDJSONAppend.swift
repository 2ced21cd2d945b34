import EventLog
import Foundation

/// Appends NDJSON mutations from a file descriptor as one atomic append, streaming: a reader
/// thread parses and validates lines in batches while the calling thread encodes, compresses and
/// writes frames, so both cores work and memory stays bounded whatever the input's size.
///
/// A bad line stops everything: the append is rolled back and the `InputError` (with its line
/// number) is thrown; nothing of the input remains in the log.
package enum NDJSONAppend {
    /// Mutations per batch handed from the parser to the writer.
    static let batchMutations = 1024
    /// Batches in flight at most (bounds memory to a few MiB).
    static let queueBatchesMax = 4

    /// - Parameters:
    ///   - progress: called on the writer thread with (lines read, bytes read) every 100,000 lines.
    /// - Throws: `InputError` for a bad line, `LogError` for I/O; in both cases nothing is appended.
    ///   - prepare: called on the reader thread with each batch before it is written, e.g. to fill
    ///     in `base` from a projection; it may throw to stop the append.
    public static func append(from fd: Int32, name: String, to appender: LogAppender,
                              prepare: (@Sendable (inout [Mutation]) throws -> Void)? = nil,
                              progress: ((Int, Int) -> Void)? = nil) throws -> AppendResult {
        try appender.begin()
        do {
            var lastReport = 0
            try Handoff<Batch>.run(name: "ndjson-reader", depth: queueBatchesMax, produce: { hand, stopped in
                let lines = LineReader(fd: fd, name: name)
                lines.stopped = stopped
                var batch: [Mutation] = []
                batch.reserveCapacity(batchMutations)
                while try lines.next({ line in
                    if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { return }
                    let m: Mutation
                    do throws(InputError) {
                        m = try MutationParser.parse(line, lineNumber: lines.lineNumber)
                    } catch {
                        throw error
                    }
                    batch.append(m)
                }) {
                    if batch.count >= batchMutations {
                        try prepare?(&batch)
                        guard hand(Batch(mutations: batch, line: lines.lineNumber, bytes: lines.bytesRead)) else { return }
                        batch.removeAll(keepingCapacity: true)
                    }
                }
                if !batch.isEmpty {
                    try prepare?(&batch)
                    _ = hand(Batch(mutations: batch, line: lines.lineNumber, bytes: lines.bytesRead))
                }
            }, consume: { b in
                for m in b.mutations { try appender.add(m) }
                if b.line - lastReport >= 100_000 {
                    lastReport = b.line
                    progress?(b.line, b.bytes)
                }
            })
            return try appender.commit()
        } catch {
            try? appender.rollback()
            throw error
        }
    }

    /// Parsed lines handed from the reader thread: the mutations, and how far the input was read.
    struct Batch {
        var mutations: [Mutation]
        var line: Int
        var bytes: Int
    }
}
