import EventLog
import Foundation

/// Reads and decodes events on a thread of its own while the caller applies the ones before:
/// a rebuild's reading (segments, checksums, hash chain, LZ4, decoding and upcasting) and the
/// placing of each field (`FieldLayout.prepare`) overlap its merging on a second core. Events come
/// out in exactly the order `LogReader.forEachEvent` gives them, origin after origin, in batches;
/// at most `depth` batches wait decoded, which bounds memory.
///
/// An error of the reading thread is thrown to the caller where it would have been met reading
/// in line (after the events before it); when the caller stops early or throws, the reader is
/// told to stop and joined before `run` returns, so no thread outlives it.
enum EventPrefetcher {
    /// Calls `body` with each event of each `(origin, from)` in `work`, in order.
    static func run(reader: LogReader, work: [(ReplicaID, Seq)], depth: Int = 8, batchEvents: Int = 4096,
                    _ body: (Event) throws -> Void) throws {
        try runBatches(reader: reader, work: work, layout: nil, depth: depth, batchEvents: batchEvents) { batch in
            // Through the buffer: each event is lent to `body`.
            try batch.events.withUnsafeBufferPointer { events in
                for i in events.indices { try body(events[i]) }
            }
        }
    }

    /// Calls `body` with each batch of the events of each `(origin, from)` in `work`, in order;
    /// with `layout`, each batch's events are prepared for merging (`PreparedBatch.prepared`,
    /// `PreparedBatch.fields`). The batch is the caller's until `body` returns.
    static func runBatches(reader: LogReader, work: [(ReplicaID, Seq)], layout: FieldLayout?, depth: Int = 8, batchEvents: Int = 4096,
                           _ body: (PreparedBatch) throws -> Void) throws {
        // Batches are freed on another thread once applied (`FreeAside`): freeing every event's
        // fields and texts took a tenth of merging, and the reading core, which waits for the
        // merging one, has the time.
        let retired = FreeAside.Retirer<PreparedBatch>()
        defer { retired.finish() }
        try Handoff<PreparedBatch>.run(name: "logbook.prefetch", depth: depth, produce: { hand, _ in
            var batch = PreparedBatch(capacity: batchEvents, layout: layout)
            var stopped = false
            do {
                for (origin, from) in work where !stopped {
                    // This thread is already the stage beside the projector: no third one.
                    try reader.forEachEvent(origin: origin, from: from, pipelined: false) { e in
                        if let layout { batch.prepared.append(layout.prepare(e, into: &batch.fields, pairEagerly: true)) }
                        batch.events.append(e)
                        guard batch.count >= batchEvents else { return true }
                        guard hand(batch) else { stopped = true; return false }
                        batch = PreparedBatch(capacity: batchEvents, layout: layout)
                        return true
                    }
                }
            } catch {
                // The events read before the damage are applied first.
                if batch.count > 0 { _ = hand(batch) }
                throw error
            }
            if batch.count > 0 && !stopped { _ = hand(batch) }
        }, consume: { batch in
            // Retired whatever `body` does (a batch it threw on is freed aside too).
            defer { retired.retire(batch) }
            try body(batch)
        })
    }
}
