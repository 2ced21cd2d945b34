import Foundation

/// Work made on a thread of its own and handed, in order, to the caller's thread: a rebuild reads
/// and decodes the log ahead of merging (`EventPrefetcher`), and lays out rows ahead of SQLite
/// writing them (`Projector.writeRows`), and NDJSON is cut into chunks of lines ahead of being
/// parsed and appended (`NDJSONAppend`), each on the second core. The one hand-off between two
/// threads.
///
/// At most `depth` items wait, which bounds memory. An error of the producer is thrown to the
/// caller after the items made before it. When the caller's `consume` throws (or returns), the
/// producer is told to stop (`hand` answers false) and joined before `run` returns, so no thread
/// outlives it and nothing it reads may change before then.
package final class Handoff<Item>: @unchecked Sendable {
    private let condition = NSCondition()
    private var ready: [Item] = []
    private var failure: Error?
    private var finished = false
    private var cancelled = false
    private let depth: Int

    private init(depth: Int) { self.depth = depth }

    /// Runs `produce` on a new thread named `name`; `produce` gives each item to `hand`, which
    /// answers false once the caller has stopped (then it should return), and may ask `stopped`
    /// between reads that could wait (a pipe), so the join never waits on input that does not
    /// come. Calls `consume` on this thread with each item, in the order handed.
    package static func run(name: String, depth: Int,
                            produce: @escaping @Sendable (_ hand: (Item) -> Bool, _ stopped: @escaping @Sendable () -> Bool) throws -> Void,
                            consume: (Item) throws -> Void) throws {
        let h = Handoff(depth: max(1, depth))
        let done = DispatchSemaphore(value: 0)
        let thread = Thread { [h] in
            do {
                try produce({ h.hand($0) }, { h.isCancelled })
            } catch {
                h.condition.lock()
                h.failure = error
                h.condition.unlock()
            }
            h.condition.lock()
            h.finished = true
            h.condition.broadcast()
            h.condition.unlock()
            done.signal()
        }
        thread.name = name
        thread.stackSize = 1 << 22
        thread.start()
        defer {
            h.condition.lock()
            h.cancelled = true
            h.condition.broadcast()
            h.condition.unlock()
            done.wait()
        }
        while let item = try h.next() { try consume(item) }
    }

    /// True once the consumer has gone.
    private var isCancelled: Bool {
        condition.lock()
        defer { condition.unlock() }
        return cancelled
    }

    /// Queues an item, waiting while `depth` are queued; false when the consumer has gone.
    private func hand(_ item: Item) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while ready.count >= depth && !cancelled { condition.wait() }
        guard !cancelled else { return false }
        ready.append(item)
        condition.broadcast()
        return true
    }

    /// The next item; nil at the end; the producer's error once the items before it are taken.
    private func next() throws -> Item? {
        condition.lock()
        defer { condition.unlock() }
        while ready.isEmpty && !finished { condition.wait() }
        if !ready.isEmpty {
            let item = ready.removeFirst()
            condition.broadcast()
            return item
        }
        if let failure { throw failure }
        return nil
    }
}
