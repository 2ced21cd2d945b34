import Dispatch

/// Work that blocks a thread (a wait for the writer lock, an fsync, a SQLite write) run from
/// async code: on a queue of threads outside Swift's cooperative pool, the caller suspended
/// meanwhile, so an app's few pool threads (two on this machine) never sit in a `usleep` or a
/// disk flush. The one place async code hands blocking work off.
package enum Blocking {
    /// Concurrent: reads run side by side; writes serialize inside the store (its lock).
    package static let queue = DispatchQueue(label: "logbook.blocking", qos: .userInitiated, attributes: .concurrent)

    /// Runs `work` on `queue` and resumes the caller with its result.
    package static func run<T: Sendable>(on queue: DispatchQueue = Blocking.queue, _ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try work() }) }
        }
    }

    /// `run(on:_:)` for a closure that does not escape: the caller is suspended until `work` has
    /// returned on the other thread, so what it captures outlives the call. The closure is let go
    /// on that thread before the caller resumes (the runtime checks that it did not escape).
    package static func run<T: Sendable>(_ work: () throws -> T) async throws -> T {
        try await withoutActuallyEscaping(work) { escapable in
            let held = Held(escapable)
            return try await run(on: queue) { try held.take()() }
        }
    }

    /// A closure sent to the blocking queue while its owner waits, taken out once to run.
    private final class Held<Value>: @unchecked Sendable {
        private var value: Value?
        init(_ value: Value) { self.value = value }
        func take() -> Value {
            defer { value = nil }
            return value!
        }
    }
}
