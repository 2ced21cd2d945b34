import Dispatch
import EventLog
import GRDB
import Foundation
import Projections

/// The `async` form of every call that blocks (an fsync, a query, a file read): each runs on a
/// queue of the store's and suspends the caller meanwhile, so an app's main actor or a server's
/// event loop never waits on the disk (GRDB's `DatabaseWriter.write` is the model). In an async
/// context Swift picks these forms; the synchronous ones stay for command-line code and threads.
///
/// Writes from async code go through one serial queue per Logbook: they hold one thread at
/// most and run in the order submitted; reads run side by side on a shared queue.
extension Logbook {
    /// Runs `work` on `queue` (`Blocking.queue` by default) and resumes the caller with its result.
    static func offThread<T: Sendable>(on queue: DispatchQueue = Blocking.queue, _ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await Blocking.run(on: queue, work)
    }

    /// Runs a write on this Logbook's serial queue: writes from async code hold one thread at
    /// most, and run in the order they were submitted.
    func offThreadWriting<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await Self.offThread(on: writes, work)
    }

    // MARK: Opening and closing

    /// `open(at:access:creating:options:)` off the caller's thread (it may recover the log, wait
    /// for the writer lock and catch the projection up).
    package static func open(at path: String, access: Access = .readWrite, creating: Bool = false,
                            options: Options = Options()) async throws -> Logbook {
        try await offThread { try open(at: path, access: access, creating: creating, options: options) }
    }

    /// `create(at:options:)` off the caller's thread.
    package static func create(at path: String, options: Options = Options()) async throws -> Logbook {
        try await offThread { try create(at: path, options: options) }
    }

    /// `close()` off the caller's thread (it fsyncs and lets the lock go).
    package func close() async throws {
        try await offThreadWriting { try self.close() }
    }

    // MARK: Writes

    /// `append(_:)` off the caller's thread: returns once the events are durable and projected.
    @discardableResult
    package func append(_ changes: [Change]) async throws -> AppendResult {
        try await offThreadWriting { try self.append(changes) }
    }

    /// `append(ndjson:)` off the caller's thread.
    @discardableResult
    package func append(ndjson text: String) async throws -> AppendResult {
        try await offThreadWriting { try self.append(ndjson: text) }
    }

    /// `create(_:id:)` off the caller's thread.
    @discardableResult
    package func create<V: EntityValues>(_ values: V, id: UUID = UUID()) async throws -> UUID {
        try await offThreadWriting { try self.create(values, id: id) }
    }

    /// `update(_:_:)` off the caller's thread.
    package func update<V: EntityValues>(_ id: UUID, _ values: V) async throws {
        try await offThreadWriting { try self.update(id, values) }
    }

    /// `delete(_:_:)` off the caller's thread.
    package func delete(_ entity: Entity, _ id: UUID) async throws {
        try await offThreadWriting { try self.delete(entity, id) }
    }

    /// `restore(_:_:)` off the caller's thread.
    package func restore(_ entity: Entity, _ id: UUID) async throws {
        try await offThreadWriting { try self.restore(entity, id) }
    }

    /// `resolve(conflict:keep:)` off the caller's thread.
    @discardableResult
    package func resolve(conflict id: Int64, keep side: Side) async throws -> Resolution {
        try await offThreadWriting { try self.resolve(conflict: id, keep: side) }
    }

    /// `purge(deletedBefore:)` off the caller's thread.
    @discardableResult
    package func purge(deletedBefore date: Date) async throws -> [String: Int] {
        try await offThreadWriting { try self.purge(deletedBefore: date) }
    }

    /// `compact(withoutPeers:)` off the caller's thread.
    @discardableResult
    package func compact(withoutPeers: Bool = false) async throws -> Compactor.Report {
        try await offThreadWriting { try self.compact(withoutPeers: withoutPeers) }
    }

    /// `importBundle(_:)` off the caller's thread.
    @discardableResult
    package func importBundle(_ file: String) async throws -> ReceiveResult {
        try await offThreadWriting { try self.importBundle(file) }
    }

    /// `exportBundle(to:since:)` off the caller's thread.
    @discardableResult
    package func exportBundle(to file: String, since: ReplicationCursor = .empty) async throws -> FrameBundle.ExportResult {
        try await Self.offThread { try self.exportBundle(to: file, since: since) }
    }

    /// `importLegacy(from:)` off the caller's thread.
    @discardableResult
    package func importLegacy(from path: String) async throws -> LegacyImportReport {
        try await offThreadWriting { try self.importLegacy(from: path) }
    }

    // MARK: Reads

    /// `items(_:)` off the caller's thread.
    package func items(_ query: ItemQuery = ItemQuery()) async throws -> [ItemRow] {
        try await Self.offThread { try self.items(query) }
    }

    /// `item(_:)` off the caller's thread.
    package func item(_ id: UUID) async throws -> ItemRow? {
        try await Self.offThread { try self.item(id) }
    }

    /// `tags(includeDeleted:)` off the caller's thread.
    package func tags(includeDeleted: Bool = false) async throws -> [TagRow] {
        try await Self.offThread { try self.tags(includeDeleted: includeDeleted) }
    }

    /// `links(of:includeDeleted:)` off the caller's thread.
    package func links(of item: UUID, includeDeleted: Bool = false) async throws -> [LinkRow] {
        try await Self.offThread { try self.links(of: item, includeDeleted: includeDeleted) }
    }

    /// `history(of:id:)` off the caller's thread.
    package func history(of entity: Entity, id: UUID) async throws -> History {
        try await Self.offThread { try self.history(of: entity, id: id) }
    }

    /// `conflicts(includeResolved:)` off the caller's thread.
    package func conflicts(includeResolved: Bool = false) async throws -> [ConflictRow] {
        try await Self.offThread { try self.conflicts(includeResolved: includeResolved) }
    }

    /// `status()` off the caller's thread.
    package func status() async throws -> LogbookStatus {
        try await Self.offThread { try self.status() }
    }

    /// `verify(deep:)` off the caller's thread.
    package func verify(deep: Bool = false) async throws -> (VerifyReport, projectionDifference: String?) {
        try await Self.offThread { try self.verify(deep: deep) }
    }

    /// Runs `body` on a read-only connection to the projection, for SQL of your own (GRDB's
    /// `Row`, records, `ValueObservation`): a write in it fails, so only the log changes the tables.
    package func read<T>(_ body: (Database) throws -> T) throws -> T { try projection.read(body) }

    /// `read(_:)` off the caller's thread, on GRDB's reader queue.
    package func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await projection.read(body)
    }
}
