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
        let queue = BoundedQueue<Batch>(capacity: queueBatchesMax)
        let reader = Thread {
            let lines = LineReader(fd: fd, name: name)
            var batch: [Mutation] = []
            batch.reserveCapacity(batchMutations)
            do {
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
                        guard queue.put(.mutations(batch, lines.lineNumber, lines.bytesRead)) else { return }
                        batch.removeAll(keepingCapacity: true)
                    }
                }
                if !batch.isEmpty {
                    try prepare?(&batch)
                    guard queue.put(.mutations(batch, lines.lineNumber, lines.bytesRead)) else { return }
                }
                _ = queue.put(.end)
            } catch {
                _ = queue.put(.failed(error))
            }
        }
        reader.stackSize = 1 << 20
        reader.start()
        defer { queue.close() }  // unblocks the reader if the writer stops first

        try appender.begin()
        do {
            var lastReport = 0
            loop: while true {
                switch queue.take() {
                case .mutations(let ms, let line, let bytes):
                    for m in ms { try appender.add(m) }
                    if line - lastReport >= 100_000 {
                        lastReport = line
                        progress?(line, bytes)
                    }
                case .end, nil:
                    break loop
                case .failed(let e):
                    throw e
                }
            }
            return try appender.commit()
        } catch {
            try? appender.rollback()
            throw error
        }
    }

    enum Batch {
        case mutations([Mutation], Int, Int)
        case end
        case failed(any Error)
    }
}

/// A blocking queue with a fixed capacity, for handing work between two threads.
/// Thread-safe (a condition variable guards it).
package final class BoundedQueue<T>: @unchecked Sendable {
    private let condition = NSCondition()
    private var items: [T] = []
    private var head = 0
    private let capacity: Int
    private var closed = false

    public init(capacity: Int) { self.capacity = capacity }

    /// Blocks while full; false once the queue is closed.
    public func put(_ item: T) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while items.count - head >= capacity && !closed { condition.wait() }
        if closed { return false }
        items.append(item)
        condition.broadcast()
        return true
    }

    /// Blocks while empty; nil once closed and drained.
    public func take() -> T? {
        condition.lock()
        defer { condition.unlock() }
        while items.count == head && !closed { condition.wait() }
        if items.count == head { return nil }
        let item = items[head]
        head += 1
        if head > 64 {
            items.removeFirst(head)
            head = 0
        }
        condition.broadcast()
        return item
    }

    public func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }
}
