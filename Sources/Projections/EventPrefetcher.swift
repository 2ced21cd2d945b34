import EventLog
import Foundation

/// Reads and decodes events on a thread of its own while the caller applies the ones before:
/// a rebuild's reading (segments, checksums, hash chain, LZ4, decoding and upcasting) overlaps its
/// merging on a second core. Events come out in exactly the order `LogReader.forEachEvent` gives
/// them, origin after origin, in batches; at most `depth` batches wait decoded, which bounds memory.
///
/// An error of the reading thread is thrown to the caller where it would have been met reading
/// in line (after the events before it); when the caller stops early or throws, the reader is
/// told to stop and joined before `run` returns, so no thread outlives it.
final class EventPrefetcher: @unchecked Sendable {
    private let condition = NSCondition()
    private var ready: [[Event]] = []
    private var failure: Error?
    private var finished = false
    private var cancelled = false
    private let depth: Int
    private let batchEvents: Int

    private init(depth: Int, batchEvents: Int) {
        self.depth = depth
        self.batchEvents = batchEvents
    }

    /// Calls `body` with each event of each `(origin, from)` in `work`, in order.
    static func run(reader: LogReader, work: [(ReplicaID, Seq)], depth: Int = 8, batchEvents: Int = 4096,
                    _ body: (Event) throws -> Void) throws {
        let p = EventPrefetcher(depth: depth, batchEvents: batchEvents)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread { [p] in
            p.produce(reader: reader, work: work)
            done.signal()
        }
        thread.name = "logbook.prefetch"
        thread.stackSize = 1 << 22
        thread.start()
        defer {
            p.condition.lock()
            p.cancelled = true
            p.condition.broadcast()
            p.condition.unlock()
            done.wait()
        }
        while let batch = try p.next() {
            // Through the buffer: each event is lent to `body`, not copied (a copy retains every field).
            try batch.withUnsafeBufferPointer { events in
                for i in events.indices { try body(events[i]) }
            }
        }
    }

    private func produce(reader: LogReader, work: [(ReplicaID, Seq)]) {
        var batch: [Event] = []
        batch.reserveCapacity(batchEvents)
        do {
            for (origin, from) in work {
                try reader.forEachEvent(origin: origin, from: from) { e in
                    batch.append(e)
                    if batch.count >= batchEvents {
                        guard hand(batch) else { return false }
                        batch = []
                        batch.reserveCapacity(batchEvents)
                    }
                    return true
                }
                if isCancelled { break }
            }
            if !batch.isEmpty { _ = hand(batch) }
        } catch {
            if !batch.isEmpty { _ = hand(batch) }
            condition.lock()
            failure = error
            condition.unlock()
        }
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    private var isCancelled: Bool {
        condition.lock()
        defer { condition.unlock() }
        return cancelled
    }

    /// Queues a batch, waiting while `depth` are queued; false when the consumer has gone.
    private func hand(_ batch: [Event]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while ready.count >= depth && !cancelled { condition.wait() }
        guard !cancelled else { return false }
        ready.append(batch)
        condition.broadcast()
        return true
    }

    /// The next batch; nil at the end; the reader's error once the batches before it are taken.
    private func next() throws -> [Event]? {
        condition.lock()
        defer { condition.unlock() }
        while ready.isEmpty && !finished { condition.wait() }
        if !ready.isEmpty {
            let b = ready.removeFirst()
            condition.broadcast()
            return b
        }
        if let failure { throw failure }
        return nil
    }
}
