import Dispatch
import Domain
import EventLog
import Foundation
import GRDB

/// Every call throws `LogbookError` alone (its `code` to match on, the lower error as `underlying`).
///
/// Reads a store, from any process, and never takes its writer lock: queries, observation,
/// history, status. What another process commits is seen at once (inotify, or polling where the
/// filesystem gives no events). The projection is read as it is: a reader does not catch it up;
/// the store's writers do, at every write.
///
/// ```swift
/// let reader = try await LogbookReader.open(at: path)
/// for try await inbox in reader.observe({ try $0.items(.init(search: "inbox")) }) { render(inbox) }
/// ```
public struct LogbookReader: Sendable {
    /// The Logbook underneath, opened to touch nothing (`.inspect`).
    let book: Logbook

    init(book: Logbook) { self.book = book }

    /// Opens the store at `path` for reading.
    /// - Throws: `LogbookError` (`.notAStore` when `path` holds no store).
    public static func open(at path: String, options: Logbook.Options = Logbook.Options()) throws -> LogbookReader {
        try LogbookError.door { LogbookReader(book: try Logbook.open(at: path, access: .inspect, options: options)) }
    }

    /// `open(at:options:)` off the caller's thread.
    public static func open(at path: String, options: Logbook.Options = Logbook.Options()) async throws -> LogbookReader {
        try await Logbook.offThread { try open(at: path, options: options) }
    }

    /// The store's replica id.
    public var replicaID: ReplicaID { book.replicaID }
    /// The store's directory.
    public var path: String { book.path }
    /// The names of the store's files.
    public var layout: StoreLayout { book.store.layout }

    /// Closes the files.
    public func close() throws { try LogbookError.door { try book.close() } }

    /// Items, typed (`Item`): every item by default, or those a query selects.
    public func items(_ query: Logbook.ItemQuery = Logbook.ItemQuery()) throws -> [Item] { try LogbookError.door { try book.records(query) } }
    /// `items(_:)` off the caller's thread.
    public func items(_ query: Logbook.ItemQuery = Logbook.ItemQuery()) async throws -> [Item] {
        try await LogbookError.door { try await Logbook.offThread { [book] in try book.records(query) } }
    }
    /// One item, deleted or not; nil when there is none with that id.
    public func item(_ id: UUID) throws -> Item? { try record(Item.self, id) }
    /// `item(_:)` off the caller's thread.
    public func item(_ id: UUID) async throws -> Item? { try await record(Item.self, id) }
    /// Tags by name (deleted ones only when asked for).
    public func tags(includeDeleted: Bool = false) throws -> [Tag] {
        try LogbookError.door { try book.tagRecords(includeDeleted) }
    }
    /// `tags(includeDeleted:)` off the caller's thread.
    public func tags(includeDeleted: Bool = false) async throws -> [Tag] {
        try await LogbookError.door { try await Logbook.offThread { [book] in try book.tagRecords(includeDeleted) } }
    }
    /// The tags each item carries now (a live link to a live tag), by item id.
    public func tags(of items: [Item]) throws -> [UUID: [Tag]] { try LogbookError.door { try book.tagRecords(of: items.map(\.id)) } }
    /// `tags(of:)` off the caller's thread.
    public func tags(of items: [Item]) async throws -> [UUID: [Tag]] {
        let ids = items.map(\.id)
        return try await LogbookError.door { try await Logbook.offThread { [book] in try book.tagRecords(of: ids) } }
    }
    /// Every entity of one kind (`TimeEntry.self`, `Completion.self`, …), deleted ones only when
    /// asked for, in id order.
    public func all<R: EntityRecord>(_ type: R.Type, includeDeleted: Bool = false) throws -> [R] {
        try LogbookError.door { try book.projection.rows(of: R.entity, includeDeleted: includeDeleted, as: R.self) }
    }
    /// `all(_:includeDeleted:)` off the caller's thread.
    public func all<R: EntityRecord>(_ type: R.Type, includeDeleted: Bool = false) async throws -> [R] {
        try await LogbookError.door { try await Logbook.offThread { [book] in try book.projection.rows(of: R.entity, includeDeleted: includeDeleted, as: R.self) } }
    }
    /// One entity of a kind by id, deleted or not; nil when there is none.
    public func record<R: EntityRecord>(_ type: R.Type, _ id: UUID) throws -> R? {
        try LogbookError.door { try book.projection.row(of: R.entity, id: id, as: R.self) }
    }
    /// `record(_:_:)` off the caller's thread.
    public func record<R: EntityRecord>(_ type: R.Type, _ id: UUID) async throws -> R? {
        try await LogbookError.door { try await Logbook.offThread { [book] in try book.projection.row(of: R.entity, id: id, as: R.self) } }
    }
    public func links(of item: UUID, includeDeleted: Bool = false) throws -> [LinkRow] { try LogbookError.door { try book.links(of: item, includeDeleted: includeDeleted) } }
    public func linked(from item: UUID, depth: Int = 1, kinds: Set<String>? = nil, direction: LinkDirection = .outgoing,
                       limit: Int = 100_000) throws -> [LinkedItem] {
        try LogbookError.door { try book.linked(from: item, depth: depth, kinds: kinds, direction: direction, limit: limit) }
    }
    public func history(of entity: Entity, id: UUID) throws -> Logbook.History { try LogbookError.door { try book.history(of: entity, id: id) } }
    public func history(of entity: Entity, id: UUID) async throws -> Logbook.History { try await LogbookError.door { try await book.history(of: entity, id: id) } }
    public func conflicts(includeResolved: Bool = false) throws -> [ConflictRow] { try LogbookError.door { try book.conflicts(includeResolved: includeResolved) } }
    public func conflicts(includeResolved: Bool = false) async throws -> [ConflictRow] { try await LogbookError.door { try await book.conflicts(includeResolved: includeResolved) } }
    public func anomalies() throws -> [AnomalyRow] { try LogbookError.door { try book.anomalies() } }
    public func unreadEvents() throws -> [UnreadEvents] { try LogbookError.door { try book.unreadEvents() } }
    public func status() throws -> LogbookStatus { try LogbookError.door { try book.status() } }
    public func status() async throws -> LogbookStatus { try await LogbookError.door { try await book.status() } }
    public func cursor() throws -> ReplicationCursor { try LogbookError.door { try book.cursor() } }
    public func peers() throws -> [PeerState.Peer] { try LogbookError.door { try book.peers() } }
    public func forEachEvent(_ filter: Logbook.EventFilter = Logbook.EventFilter(), _ body: (Event) throws -> Bool) throws {
        try LogbookError.door { try book.forEachEvent(filter, body) }
    }
    /// SQL of your own on a read-only connection (see `Logbook.read(_:)`).
    public func read<T>(_ body: (Database) throws -> T) throws -> T { try LogbookError.door { try book.read(body) } }
    public func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T { try await LogbookError.door { try await book.read(body) } }

    /// A query kept up to date (see `Logbook.observe(_:)`); the closure is handed this reader.
    public func observe<T: Equatable & Sendable>(_ query: @escaping @Sendable (LogbookReader) throws -> T) -> AsyncThrowingStream<T, any Error> {
        book.observe { book in try query(LogbookReader(book: book)) }
    }
    /// Every commit of the projection, whoever made it.
    public func changes(pollInterval: Double = 1) -> AsyncStream<ProjectionChange> { book.changes(pollInterval: pollInterval) }
    /// Follows the projection from a cursor, missing nothing (see `Logbook.watch(from:)`).
    public func watch(from cursor: ReplicationCursor? = nil) throws -> ProjectionWatcher { try LogbookError.door { try book.watch(from: cursor) } }
    /// Checks every frame (see `Logbook.verify(deep:progress:projectionProgress:)`).
    public func verify(deep: Bool = false) throws -> (VerifyReport, projectionDifference: String?) { try LogbookError.door { try book.verify(deep: deep) } }
    /// Writes the frames past `since` to a bundle file, verbatim.
    public func exportBundle(to file: String, since: ReplicationCursor = .empty) throws -> FrameBundle.ExportResult {
        try LogbookError.door { try book.exportBundle(to: file, since: since) }
    }
}

/// Every call throws `LogbookError` alone (its `code` to match on, the lower error as `underlying`).
///
/// Writes a store: appends, resolves, purges, imports, sync and compaction. It takes the store's
/// writer lock for each burst of writes and lets it go after (waiting up to `Options.lockWait`
/// while another process holds it), so `evctl serve` and an app, or two apps, share one store;
/// every burst first recovers the log and catches the projection up, as an open for writing does.
/// Reads go through `reader`, which never takes the lock.
///
/// ```swift
/// let writer = try await LogbookWriter.open(at: path, creating: true)
/// let milk = try await writer.create(ItemValues(title: "Buy milk"))
/// try await writer.write { book in          // one burst: one lock, one recovery
///     try book.create(TagValues(name: "home"))
///     try book.update(milk, ItemValues(status: "done"))
/// }
/// try await writer.sync(with: Peer("https://hub.example:8427", token: token))
/// let open = try await writer.reader.items()
/// ```
public final class LogbookWriter: Sendable {
    /// Reads the same store; never takes the lock.
    public let reader: LogbookReader
    private let options: Logbook.Options
    /// One burst at a time in this process (the lock is per open file, so a second burst here
    /// would wait on the first's lock anyway).
    private let bursts = Lock()

    private init(reader: LogbookReader, options: Logbook.Options) {
        self.reader = reader
        self.options = options
    }

    /// Opens the store at `path` for writing: nothing is locked until the first write.
    /// - Parameter creating: create the store (with a new replica id and any missing folders)
    ///   when there is none at `path`.
    public static func open(at path: String, creating: Bool = false, options: Logbook.Options = Logbook.Options()) throws -> LogbookWriter {
        try LogbookError.door {
            let store: Store
            do {
                store = try Store.open(at: path)
            } catch let e as LogError where creating && e.isNotAStore {
                store = try Store.create(at: path)
            }
            return LogbookWriter(reader: LogbookReader(book: try Logbook.open(store, access: .inspect, options: options)), options: options)
        }
    }

    /// `open(at:creating:options:)` off the caller's thread.
    public static func open(at path: String, creating: Bool = false, options: Logbook.Options = Logbook.Options()) async throws -> LogbookWriter {
        try await Logbook.offThread { try open(at: path, creating: creating, options: options) }
    }

    /// The store's replica id: the origin of the events this writer appends.
    public var replicaID: ReplicaID { reader.replicaID }

    /// One burst of writes: takes the writer lock (waiting up to `Options.lockWait`), recovers
    /// the log, catches the projection up, runs `body` with a Logbook opened for writing, and
    /// lets the lock go, whatever `body` did. Every change `body` appends is durable and projected
    /// when it returns.
    /// - Throws: `LogbookError`: `.locked` when another process held the lock past `lockWait`;
    ///   what `body` throws, wrapped (what it appended before stays appended).
    public func write<T>(_ body: (Logbook) throws -> T) throws -> T {
        try LogbookError.door { try burst(body) }
    }

    /// The writer whose burst runs on this thread or task, to refuse a write from inside one
    /// (it would wait forever on its own burst).
    @TaskLocal private static var inBurst: ObjectIdentifier?

    private func burst<T>(_ body: (Logbook) throws -> T) throws -> T {
        guard Self.inBurst != ObjectIdentifier(self) else {
            throw LogbookError(.invalid, "a write inside a write of the same LogbookWriter",
                               hint: "use the Logbook the burst hands its body")
        }
        return try Self.$inBurst.withValue(ObjectIdentifier(self)) {
            try bursts.withLock {
                guard !reader.book.isClosed else { throw LogbookError(.closed, "the LogbookWriter is closed") }
                let book = try Logbook.open(reader.book.store, access: .readWrite, options: options)
                let result: T
                do {
                    result = try body(book)
                } catch {
                    try? book.close()
                    throw error
                }
                // What the body appended is durable and projected: a failure to close now (the
                // derived segment and event-id indexes, rebuilt at the next open) loses nothing,
                // and reporting it would invite a retry that appends twice. The lock goes anyway.
                try? book.close()
                return result
            }
        }
    }

    /// Bursts submitted from async code run one after another, in the order submitted.
    private let queue = DispatchQueue(label: "logbook.writer", qos: .userInitiated)

    /// `write(_:)` off the caller's thread; bursts from async code run in the order submitted.
    public func write<T: Sendable>(_ body: @escaping @Sendable (Logbook) throws -> T) async throws -> T {
        try await Logbook.offThread(on: queue) { try self.write(body) }
    }

    /// Creates the entity a record made in code describes (`Item(title: "Buy milk")`); returns
    /// its id (the record's, or the id its contents derive).
    /// - Throws: `LogbookError`, `.invalid` as `Change.create(_:)` says.
    public func create<R: EntityRecord>(_ record: R) throws -> UUID {
        try LogbookError.door {
            let change = try Change.create(record)
            _ = try write { try $0.append([change]) }
            return change.mutation.entityID
        }
    }
    /// `create(_:)` off the caller's thread.
    public func create<R: EntityRecord>(_ record: R) async throws -> UUID {
        let change = try Change.create(record)
        _ = try await LogbookError.door { try await write { try $0.append([change]) } }
        return change.mutation.entityID
    }
    /// Writes what changed between two versions of a record (read one, change a copy): one update
    /// with the fields that differ; nothing when none does.
    /// - Throws: `LogbookError`, `.invalid` as `Change.update(from:to:)` says.
    public func update<R: EntityRecord>(from old: R, to new: R) throws {
        try LogbookError.door { if let c = try Change.update(from: old, to: new) { _ = try write { try $0.append([c]) } } }
    }
    /// `update(from:to:)` off the caller's thread.
    public func update<R: EntityRecord>(from old: R, to new: R) async throws {
        guard let c = try Change.update(from: old, to: new) else { return }
        _ = try await LogbookError.door { try await write { try $0.append([c]) } }
    }


    @discardableResult
    public func append(_ changes: [Change]) throws -> AppendResult { try LogbookError.door { try write { try $0.append(changes) } } }
    @discardableResult
    public func append(_ changes: [Change]) async throws -> AppendResult { try await LogbookError.door { try await write { try $0.append(changes) } } }
    @discardableResult
    public func append(ndjson text: String) throws -> AppendResult { try LogbookError.door { try write { try $0.append(ndjson: text) } } }
    @discardableResult
    public func create<V: EntityValues>(_ values: V, id: UUID = UUID()) throws -> UUID { try LogbookError.door { try write { try $0.create(values, id: id) } } }
    @discardableResult
    public func create<V: EntityValues>(_ values: V, id: UUID = UUID()) async throws -> UUID { try await LogbookError.door { try await write { try $0.create(values, id: id) } } }
    public func update<V: EntityValues>(_ id: UUID, _ values: V) throws { try LogbookError.door { try write { try $0.update(id, values) } } }
    public func update<V: EntityValues>(_ id: UUID, _ values: V) async throws { try await LogbookError.door { try await write { try $0.update(id, values) } } }
    public func delete(_ entity: Entity, _ id: UUID) throws { try LogbookError.door { try write { try $0.delete(entity, id) } } }
    public func delete(_ entity: Entity, _ id: UUID) async throws { try await LogbookError.door { try await write { try $0.delete(entity, id) } } }
    public func restore(_ entity: Entity, _ id: UUID) throws { try LogbookError.door { try write { try $0.restore(entity, id) } } }
    @discardableResult
    public func resolve(conflict id: Int64, keep side: Logbook.Side) throws -> Logbook.Resolution {
        try LogbookError.door { try write { try $0.resolve(conflict: id, keep: side) } }
    }
    @discardableResult
    public func resolve(conflict id: Int64, keep side: Logbook.Side) async throws -> Logbook.Resolution {
        try await LogbookError.door { try await write { try $0.resolve(conflict: id, keep: side) } }
    }
    @discardableResult
    public func purge(deletedBefore date: Date) throws -> [String: Int] { try LogbookError.door { try write { try $0.purge(deletedBefore: date) } } }
    @discardableResult
    public func importLegacy(from path: String) throws -> LegacyImportReport { try LogbookError.door { try write { try $0.importLegacy(from: path) } } }
    @discardableResult
    public func importLegacy(from path: String) async throws -> LegacyImportReport { try await LogbookError.door { try await write { try $0.importLegacy(from: path) } } }

    /// Appends a bundle's frames (the lock taken for the moment).
    @discardableResult
    public func importBundle(_ file: String) throws -> ReceiveResult { try LogbookError.door { try bursts.withLock { try reader.book.importBundle(file) } } }

    /// Drops old segments every peer holds (the lock taken for the moment; see `Logbook.compact`).
    @discardableResult
    public func compact(withoutPeers: Bool = false) throws -> Compactor.Report {
        try bursts.withLock { try LogbookError.door { try reader.book.compact(withoutPeers: withoutPeers) } }
    }

    /// Pulls what `peer` holds and this store lacks; bootstraps from its snapshot when it no
    /// longer holds the log from this store's cursor. The lock is taken at the first page that
    /// brings frames and held to the end of the pull: a burst meanwhile, from this process or
    /// another, waits up to `lockWait` and then throws `.locked` (retry it after the sync).
    public func pull(from peer: Peer, progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> Exchange {
        try await LogbookError.door { try await reader.book.pull(from: peer, progress: progress) }
    }

    /// Pushes what this store holds and `peer` lacks.
    public func push(to peer: Peer, progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> Exchange {
        try await LogbookError.door { try await reader.book.push(to: peer, progress: progress) }
    }

    /// Pulls, then pushes.
    public func sync(with peer: Peer, progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> Exchange {
        try await LogbookError.door { try await reader.book.sync(with: peer, progress: progress) }
    }

    /// Closes the files (no lock is held between bursts).
    public func close() throws { try LogbookError.door { try reader.close() } }
}
