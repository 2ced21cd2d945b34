import EventLog
import Foundation

extension Projection {
    /// A query kept up to date: its result now, then again after every commit that touched one
    /// of the entity kinds it reads (or rebuilt the projection), delivered only when it differs
    /// from the last result delivered. A commit that touches only other kinds (a sync of tags, for
    /// a query over items) does not run the query at all.
    ///
    /// ```swift
    /// for try await inbox in projection.observe(reading: [.item], { try $0.items(search: "inbox") }) {
    ///     render(inbox)
    /// }
    /// ```
    /// - Parameters:
    ///   - entities: the kinds whose events can change the result.
    ///   - changes: where commits come from; by default this projection's own (`changes()`). Pass
    ///     another stream (e.g. fed by a `ProjectionWatcher`) to follow other processes' commits.
    public func observe<T: Equatable & Sendable>(reading entities: Set<Entity>, changes: AsyncStream<ProjectionChange>? = nil,
                                                 _ query: @escaping @Sendable (Projection) throws -> T) -> AsyncThrowingStream<T, any Error> {
        // Subscribed before the first run: no commit can fall between the two.
        let source = changes ?? self.changes()
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: T.self)
        let task = Task { [self] in
            do {
                var last = try query(self)
                continuation.yield(last)
                for await change in source {
                    guard change.rebuilt || !entities.isDisjoint(with: change.touched.keys) else { continue }
                    let result = try query(self)
                    if result != last {
                        last = result
                        continuation.yield(result)
                    }
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// `items(search:under:includeDeleted:limit:)`, kept up to date (see `observe`).
    public func observeItems(search: String? = nil, under root: String? = nil, includeDeleted: Bool = false,
                             limit: Int = 1000) -> AsyncThrowingStream<[ItemRow], any Error> {
        observe(reading: [.item]) { try $0.items(search: search, under: root, includeDeleted: includeDeleted, limit: limit) }
    }
}
