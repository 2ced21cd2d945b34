import Dispatch
import Foundation

/// Appends from many concurrent callers with group commit: appends that arrive while a frame
/// is being written and fsynced wait, then go out together in the next frame (one write and
/// one fsync for all of them). Each call returns only once its events are durable, and gets
/// its own seqs back.
///
/// ```swift
/// let writer = try LogWriter(store: store)
/// let r = try await writer.append([mutation])
/// ```
/// Thread safety: an actor; call it from any task. The disk work runs on a dedicated queue.
public actor LogWriter {
    /// Confines the appender to `io`: every use of it runs there, one at a time.
    private final class Confined: @unchecked Sendable {
        let appender: LogAppender
        init(_ a: LogAppender) { appender = a }
    }
    private let confined: Confined
    /// What recovery did at open.
    public nonisolated let recovery: RecoveryReport
    private let io = DispatchQueue(label: "logbook.log-writer")
    private var waiting: [Request] = []
    private var flushing = false
    /// Callers of `close` waiting for the last group to be written.
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []
    /// Yields before a group is taken while requests keep arriving; bounds the added latency.
    private let yieldsMax = 8

    private struct Request {
        var mutations: [Mutation]
        var continuation: CheckedContinuation<AppendResult, any Error>
    }

    /// Opens the store for writing (see `LogAppender.init`).
    public init(store: Store, wallClock: any WallClock = SystemWallClock(), options: AppendOptions = AppendOptions()) throws {
        let appender = try LogAppender(store: store, wallClock: wallClock, options: options)
        confined = Confined(appender)
        recovery = appender.recovery
    }

    /// Appends `mutations` atomically; returns once they are durable.
    /// - Throws: `LogError`; a failed group leaves the log unchanged and every caller in it gets the
    ///   error, except for input refused (an event too large): the group's requests are then
    ///   committed one by one, and only the caller whose events were refused gets the error.
    public func append(_ mutations: [Mutation]) async throws -> AppendResult {
        try await withCheckedThrowingContinuation { c in
            waiting.append(Request(mutations: mutations, continuation: c))
            if !flushing {
                flushing = true
                Task { await self.flushLoop() }
            }
        }
    }

    /// Writes the index and releases the store's lock, after every pending append.
    public func close() async throws {
        if flushing || !waiting.isEmpty {
            await withCheckedContinuation { idleWaiters.append($0) }
        }
        let confined = self.confined
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            io.async { c.resume(with: Result { try confined.appender.close() }) }
        }
    }

    private func flushLoop() async {
        while !waiting.isEmpty {
            // Callers resumed by the previous group are re-enqueueing right now: let them, so the
            // next group is not just the first of them (a few yields; a lone caller waits microseconds).
            var seen = -1
            var yields = 0
            while waiting.count != seen && yields < yieldsMax {
                seen = waiting.count
                await Task.yield()
                yields += 1
            }
            // Every waiting request goes into one frame group (bounded by the frame limits inside
            // the appender, which splits a group into as many frames as it needs).
            let group = waiting
            waiting.removeAll()
            let confined = self.confined
            let batches = group.map(\.mutations)
            let results: Result<[AppendResult], any Error> = await withCheckedContinuation { c in
                io.async { c.resume(returning: Result { try Self.commitGroup(confined.appender, batches) }) }
            }
            switch results {
            case .success(let rs):
                for (req, r) in zip(group, rs) { req.continuation.resume(returning: r) }
            case .failure(let e as LogError) where e.isInvalidInput && group.count > 1:
                // A caller's events were refused (an event too large, a clock that cannot move):
                // each request is then committed on its own, so that only its caller hears of it.
                for req in group {
                    let one: Result<[AppendResult], any Error> = await withCheckedContinuation { c in
                        io.async { c.resume(returning: Result { try Self.commitGroup(confined.appender, [req.mutations]) }) }
                    }
                    req.continuation.resume(with: one.map { $0[0] })
                }
            case .failure(let e):
                for req in group { req.continuation.resume(throwing: e) }
            }
        }
        flushing = false
        let waiters = idleWaiters
        idleWaiters.removeAll()
        for w in waiters { w.resume() }
    }

    /// One append for the whole group; each request's share of the seqs is computed from it.
    private static func commitGroup(_ appender: LogAppender, _ batches: [[Mutation]]) throws -> [AppendResult] {
        try appender.begin(listingAllDuplicates: true)
        var perRequest: [AppendResult] = []
        do {
            var nextSeq = appender.tip.lastSeq.next
            var inputBase = 0
            for batch in batches {
                var r = AppendResult()
                let before = appender.pendingDuplicateCount
                for m in batch { try appender.add(m) }
                let dups = appender.pendingDuplicates(since: before)
                r.duplicateCount = dups.count
                r.duplicates = dups.map { var d = $0; d.inputIndex -= inputBase; return d }
                let n = batch.count - dups.count
                if n > 0 {
                    r.firstSeq = nextSeq
                    r.lastSeq = Seq(nextSeq.rawValue + UInt64(n) - 1)
                    nextSeq = Seq(nextSeq.rawValue + UInt64(n))
                }
                r.appended = n
                inputBase += batch.count
                perRequest.append(r)
            }
            _ = try appender.commit()
        } catch {
            // A rollback that fails leaves frames of the group behind: its error, not the one
            // that caused it, so that no request is retried on top of them (only refused input,
            // rolled back, is retried one request at a time).
            try appender.rollback()
            throw error
        }
        return perRequest
    }
}
