import EventLog
import Replicator
import Foundation

/// The bytes a server may hold in pages being sent and pushed bodies being read, over all its
/// connections at once (Kafka's `queued.max.request.bytes`, for the same reason): a request
/// reserves what it may need before it allocates, and waits, first come first served, while the
/// budget is spent. So 1,000 connections each asking for a 32 MiB page, or each pushing 64 MiB,
/// cost at most the budget, not 32 or 64 GiB. A request needing more than the whole budget
/// reserves all of it and runs alone.
///
/// One holder (a user, or a principal without one) holds at most `holderBytesMax` at once, a quarter of the
/// budget unless set, so that one client cannot take the whole budget and keep it: a push whose
/// body trickles in for the request timeout, or pages a client reads slowly, held everything
/// else waiting before. A holder's request that would pass its share waits for that holder's
/// own requests to end, and is overtaken meanwhile by other holders' requests; among requests
/// within their share the order is first come, first served. A holder holding nothing may
/// always take a request (of up to the whole budget), and a holder's requests go in the order
/// they came, so no request waits forever for its share. A holder has at most
/// `holderWaitingMax` requests waiting: each holds a connection while it waits.
public final class MemoryBudget: @unchecked Sendable {
    public let bytesMax: Int
    /// The most one holder holds at once (a single request of more is taken when it holds nothing).
    public let holderBytesMax: Int
    /// The most requests one holder may have waiting at once; one more is answered 429.
    public let holderWaitingMax: Int
    private let lock = Lock()
    private var reserved = 0
    private var peak = 0
    private var byHolder: [String: Int] = [:]
    private var waiters: [(id: UInt64, bytes: Int, holder: String?, continuation: CheckedContinuation<Void, any Error>)] = []
    private var nextID: UInt64 = 0

    public init(bytesMax: Int, holderBytesMax: Int? = nil, holderWaitingMax: Int = 16) {
        precondition(bytesMax > 0)
        self.bytesMax = bytesMax
        self.holderBytesMax = max(1, min(bytesMax, holderBytesMax ?? bytesMax / 4))
        self.holderWaitingMax = max(1, holderWaitingMax)
    }

    /// Bytes held now, and the most held at once since the start.
    public var usage: (reserved: Int, peak: Int) { lock.withLock { (reserved, peak) } }
    /// Requests waiting for bytes.
    public var waiting: Int { lock.withLock { waiters.count } }
    /// Bytes `holder` holds now.
    public func held(by holder: String) -> Int { lock.withLock { byHolder[holder] ?? 0 } }

    /// What one request holds; `release` (or `shrink`) gives bytes back. Releasing twice is harmless.
    public final class Reservation: @unchecked Sendable {
        private let budget: MemoryBudget
        private let holder: String?
        private let lock = Lock()
        private var bytes: Int
        fileprivate init(_ budget: MemoryBudget, _ bytes: Int, holder: String?) {
            self.budget = budget
            self.bytes = bytes
            self.holder = holder
        }
        public var held: Int { lock.withLock { bytes } }
        /// Keeps only `to` bytes (what the request turned out to need).
        public func shrink(to: Int) {
            let freed: Int = lock.withLock {
                let keep = max(0, min(bytes, to))
                defer { bytes = keep }
                return bytes - keep
            }
            if freed > 0 { budget.give(freed, holder: holder) }
        }
        public func release() { shrink(to: 0) }
        deinit { release() }
    }

    /// Waits until `bytes` (at most the whole budget) can be held, then holds them.
    /// - Parameter holder: who asks (`ReplicaBackend.memoryHolder`), held to `holderBytesMax`; nil for no
    ///   share of its own (a server without tokens, whose clients are this machine's programs).
    /// - Throws: `CancellationError` when the task is cancelled while waiting; `EndpointError`
    ///   (429) when `holder` already has `holderWaitingMax` requests waiting (each holds a
    ///   connection while it waits: one holder's waiting requests could take every connection).
    public func reserve(_ bytes: Int, holder: String? = nil) async throws -> Reservation {
        let n = max(0, min(bytes, bytesMax))
        let id: UInt64 = lock.withLock { nextID += 1; return nextID }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let ready: Result<[CheckedContinuation<Void, any Error>], any Error> = lock.withLock {
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if let holder, waiters.lazy.filter({ $0.holder == holder }).count >= holderWaitingMax {
                        return .failure(EndpointError(429, "\(holder) has \(holderWaitingMax) requests waiting for memory already, the most one may; try again once some are answered",
                                                      retryAfter: 1))
                    }
                    waiters.append((id, n, holder, c))
                    return .success(grant())
                }
                switch ready {
                case .success(let ready): for r in ready { r.resume() }
                case .failure(let error): c.resume(throwing: error)
                }
            }
        } onCancel: {
            let waiter: CheckedContinuation<Void, any Error>? = lock.withLock {
                guard let i = waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return waiters.remove(at: i).continuation
            }
            waiter?.resume(throwing: CancellationError())
        }
        return Reservation(self, n, holder: holder)
    }

    /// Takes the bytes of every waiter that may go now, in order (call under the lock): a waiter
    /// past its holder's share is passed over, and so are that holder's waiters after it (first
    /// come, first served within a holder: its later small requests do not overtake its large
    /// one forever); the first other one that does not fit stops the walk (a large request at
    /// the head is not overtaken forever by those within their share).
    private func grant() -> [CheckedContinuation<Void, any Error>] {
        var ready: [CheckedContinuation<Void, any Error>] = []
        var passed = Set<String>()
        var i = 0
        while i < waiters.count {
            let w = waiters[i]
            if let h = w.holder, passed.contains(h) || (byHolder[h].map { $0 > 0 && $0 + w.bytes > holderBytesMax } ?? false) {
                passed.insert(h)
                i += 1
                continue
            }
            guard reserved + w.bytes <= bytesMax else { break }
            take(w.bytes, holder: w.holder)
            ready.append(waiters.remove(at: i).continuation)
        }
        return ready
    }

    private func take(_ n: Int, holder: String?) {
        reserved += n
        peak = max(peak, reserved)
        if let holder { byHolder[holder, default: 0] += n }
    }

    fileprivate func give(_ n: Int, holder: String?) {
        let ready: [CheckedContinuation<Void, any Error>] = lock.withLock {
            reserved -= n
            if let holder {
                let left = (byHolder[holder] ?? 0) - n
                byHolder[holder] = left > 0 ? left : nil
            }
            return grant()
        }
        for c in ready { c.resume() }
    }
}
