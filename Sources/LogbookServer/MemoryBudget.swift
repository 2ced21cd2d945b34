import EventLog
import Replicator
import Foundation

/// The bytes a server may hold in pages being sent and pushed bodies being read, over all its
/// connections at once (Kafka's `queued.max.request.bytes`, for the same reason): a request
/// reserves what it may need before it allocates, and waits, first come first served, while the
/// budget is spent. So 1,000 connections each asking for a 32 MiB page, or each pushing 64 MiB,
/// cost at most the budget, not 32 or 64 GiB. A request needing more than the whole budget
/// reserves all of it and runs alone.
public final class MemoryBudget: @unchecked Sendable {
    public let bytesMax: Int
    private let lock = Lock()
    private var reserved = 0
    private var peak = 0
    private var waiters: [(id: UInt64, bytes: Int, continuation: CheckedContinuation<Void, any Error>)] = []
    private var nextID: UInt64 = 0

    public init(bytesMax: Int) {
        precondition(bytesMax > 0)
        self.bytesMax = bytesMax
    }

    /// Bytes held now, and the most held at once since the start.
    public var usage: (reserved: Int, peak: Int) { lock.withLock { (reserved, peak) } }
    /// Requests waiting for bytes.
    public var waiting: Int { lock.withLock { waiters.count } }

    /// What one request holds; `release` (or `shrink`) gives bytes back. Releasing twice is harmless.
    public final class Reservation: @unchecked Sendable {
        private let budget: MemoryBudget
        private let lock = Lock()
        private var bytes: Int
        fileprivate init(_ budget: MemoryBudget, _ bytes: Int) {
            self.budget = budget
            self.bytes = bytes
        }
        public var held: Int { lock.withLock { bytes } }
        /// Keeps only `to` bytes (what the request turned out to need).
        public func shrink(to: Int) {
            let freed: Int = lock.withLock {
                let keep = max(0, min(bytes, to))
                defer { bytes = keep }
                return bytes - keep
            }
            if freed > 0 { budget.give(freed) }
        }
        public func release() { shrink(to: 0) }
        deinit { release() }
    }

    /// Waits until `bytes` (at most the whole budget) can be held, then holds them.
    /// - Throws: `CancellationError` when the task is cancelled while waiting.
    public func reserve(_ bytes: Int) async throws -> Reservation {
        let n = max(0, min(bytes, bytesMax))
        let id: UInt64 = lock.withLock { nextID += 1; return nextID }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let now: Bool = lock.withLock {
                    if Task.isCancelled { return false }
                    if waiters.isEmpty && reserved + n <= bytesMax {
                        take(n)
                        return true
                    }
                    waiters.append((id, n, c))
                    return false
                }
                if now { c.resume() } else if Task.isCancelled { c.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let waiter: CheckedContinuation<Void, any Error>? = lock.withLock {
                guard let i = waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return waiters.remove(at: i).continuation
            }
            waiter?.resume(throwing: CancellationError())
        }
        return Reservation(self, n)
    }

    private func take(_ n: Int) {
        reserved += n
        peak = max(peak, reserved)
    }

    fileprivate func give(_ n: Int) {
        var ready: [CheckedContinuation<Void, any Error>] = []
        lock.withLock {
            reserved -= n
            // First come, first served: a large request at the head is not overtaken forever.
            while let first = waiters.first, reserved + first.bytes <= bytesMax {
                take(first.bytes)
                ready.append(waiters.removeFirst().continuation)
            }
        }
        for c in ready { c.resume() }
    }
}
