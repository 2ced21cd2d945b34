import Foundation

/// One piece of work done once, by whichever thread takes it first: a worker it was handed to,
/// or the thread that needs its result, which then never waits for the worker to start, only for
/// one that has started to finish (a busy pool cannot stall it). Used for a frame's read-back
/// check beside fdatasync (`SegmentWriter.writeAndSync`) and for a chunk of NDJSON lines
/// (`NDJSONAppend`).
package final class ClaimedWork<Output>: @unchecked Sendable {
    private let state = NSCondition()
    // Under `state`: the work until a thread takes it (dropped then, with what it holds).
    private var work: (@Sendable () throws -> Output)?
    private var outcome: Result<Output, any Error>?

    package init(_ work: @escaping @Sendable () throws -> Output) {
        self.work = work
    }

    /// True once the work is done (or abandoned).
    package var isFinished: Bool { state.withLock { outcome != nil } }

    private func take() -> (@Sendable () throws -> Output)? {
        state.withLock {
            defer { work = nil }
            return work
        }
    }

    private func run(_ w: @Sendable () throws -> Output) {
        let r = Result { try w() }
        state.withLock {
            outcome = r
            state.broadcast()
        }
    }

    /// On a worker: does the work unless another thread has taken it.
    package func runIfUnclaimed() {
        if let w = take() { run(w) }
    }

    /// The work's outcome: done here if no thread has taken it, else waited for.
    package func result() -> Result<Output, any Error> {
        runIfUnclaimed()
        return state.withLock {
            while outcome == nil { state.wait() }
            return outcome!
        }
    }

    /// Ends the work undone if no thread has taken it, else waits for it to finish.
    package func abandon() {
        state.withLock {
            if work != nil {
                work = nil
                outcome = .failure(CancellationError())
                state.broadcast()
            }
            while outcome == nil { state.wait() }
        }
    }
}
