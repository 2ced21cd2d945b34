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
enum EventPrefetcher {
    /// Calls `body` with each event of each `(origin, from)` in `work`, in order.
    static func run(reader: LogReader, work: [(ReplicaID, Seq)], depth: Int = 8, batchEvents: Int = 4096,
                    _ body: (Event) throws -> Void) throws {
        try Handoff<[Event]>.run(name: "logbook.prefetch", depth: depth, produce: { hand in
            var batch: [Event] = []
            batch.reserveCapacity(batchEvents)
            var stopped = false
            do {
                for (origin, from) in work where !stopped {
                    try reader.forEachEvent(origin: origin, from: from) { e in
                        batch.append(e)
                        guard batch.count >= batchEvents else { return true }
                        guard hand(batch) else { stopped = true; return false }
                        batch = []
                        batch.reserveCapacity(batchEvents)
                        return true
                    }
                }
            } catch {
                // The events read before the damage are applied first.
                if !batch.isEmpty { _ = hand(batch) }
                throw error
            }
            if !batch.isEmpty && !stopped { _ = hand(batch) }
        }, consume: { batch in
            // Through the buffer: each event is lent to `body`, not copied (a copy retains every field).
            try batch.withUnsafeBufferPointer { events in
                for i in events.indices { try body(events[i]) }
            }
        })
    }
}
