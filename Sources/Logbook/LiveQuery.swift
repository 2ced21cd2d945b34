import Observation

/// A query kept up to date as an `@Observable` model, for SwiftUI-style code: `value` is the
/// query's latest result, set on the actor the caller names (the main actor unless told
/// otherwise), so a view reading it is re-rendered when it changes and never sees it change
/// from another thread.
///
/// ```swift
/// @Observable final class AppModel {           // made once, for the app's lifetime
///     let inbox: LiveQuery<[Item]>
///     init(reader: LogbookReader) { inbox = LiveQuery(reader, initial: []) { try $0.items(.init(search: "inbox")) } }
/// }
/// // in a view: ForEach(model.inbox.value, id: \.id) { … }
/// ```
/// Make it once (an app model, not a view's `@State` initial value, which SwiftUI evaluates at
/// every rebuild of the view): each one follows the store until released.
///
/// The query is `LogbookReader.observe(_:)`'s: it runs again only after a commit that wrote a table it
/// read, and `value` is set only when the result differs. `error` holds what ended it, if
/// anything did; `cancel()` (or releasing the model) stops it.
@Observable
public final class LiveQuery<Value: Equatable & Sendable>: @unchecked Sendable {
    /// The latest result; `initial` until the first run completes.
    public private(set) var value: Value
    /// How many results have been delivered (the first run's included).
    public private(set) var updates = 0
    /// Why the query stopped, if it failed.
    public private(set) var error: (any Error)?

    @ObservationIgnored private var task: Task<Void, Never>?

    /// Starts observing `query` on `reader`.
    /// - Parameters:
    ///   - reader: the store to follow (any process's commits count).
    ///   - initial: the value until the first result arrives.
    ///   - actor: where `value`, `updates` and `error` are set (and so where they should be read).
    ///   - query: the reads whose result `value` holds; the tables it reads decide when it runs again.
    public init(_ reader: LogbookReader, initial: Value, on actor: any Actor = MainActor.shared,
                _ query: @escaping @Sendable (LogbookReader) throws -> Value) {
        value = initial
        let stream = reader.observe(query)
        task = Task { [weak self] in
            do {
                for try await result in stream {
                    guard let self else { return }
                    await self.deliver(result, on: actor)
                }
            } catch {
                guard let self else { return }
                await self.fail(error, on: actor)
            }
        }
    }

    /// Stops following the query; `value` keeps its last result.
    public func cancel() { task?.cancel() }

    deinit { task?.cancel() }

    private func deliver(_ result: Value, on actor: isolated any Actor) {
        value = result
        updates += 1
    }

    private func fail(_ failure: any Error, on actor: isolated any Actor) {
        if !(failure is CancellationError) { error = failure }
    }
}
