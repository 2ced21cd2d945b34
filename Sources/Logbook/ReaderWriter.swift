import Dispatch
import Domain
import EventLog
import Foundation
import GRDB

/// Reads a store, from any process, and never takes its writer lock: queries, observation,
/// history, status. What another process commits is seen at once (inotify, or polling where the
/// filesystem gives no events). The projection is read as it is: a reader does not catch it up;
/// the store's writers do, at every write.
///
/// ```swift
/// let reader = try await LogbookReader.open(at: path)
/// for try await inbox in reader.observe({ try $0.items(.init(search: "inbox")) }) { render(inbox) }
/// ```
///
/// ## Errors
/// Every call throws `LogbookError` alone: its `code` to match on, the lower error as
/// `underlying`. Any call may throw `.closed` (after `close()`), `.damaged` (a file of the store
/// fails its checksum; `underlying` names file and offset), `.io` and `.database`; each call's
/// documentation names the codes it adds.
public struct LogbookReader: Sendable {
    /// The Logbook underneath: opened to touch nothing (`.inspect`), or a burst's, locked.
    package let book: Logbook
    /// False for a burst's reader, which is closed with its burst, never by itself.
    private let owns: Bool

    /// A reader over a Logbook already open (evctl's, a burst's); `owns` when `close()` closes it.
    package init(book: Logbook, owns: Bool = true) {
        self.book = book
        self.owns = owns
    }

    /// Runs `body` on the Logbook underneath, its errors turned into `LogbookError`; `.closed`
    /// once the reader (or the burst it belongs to) is closed.
    private func run<T>(_ body: (Logbook) throws -> T) throws -> T {
        try LogbookError.door {
            guard !book.isClosed else { throw LogbookError(.closed, "the LogbookReader of \(book.path) is closed") }
            return try body(book)
        }
    }

    /// `run(_:)` off the caller's thread.
    private func runOff<T: Sendable>(_ body: @escaping @Sendable (Logbook) throws -> T) async throws -> T {
        try await Logbook.offThread { [self] in try run(body) }
    }

    /// Opens the store at `path` for reading.
    /// - Throws: `.notAStore` when `path` holds no store; `.unsupportedFormat` when a newer build
    ///   wrote it.
    public static func open(at path: String, options: LogbookOptions = LogbookOptions()) throws -> LogbookReader {
        try LogbookError.door { LogbookReader(book: try Logbook.open(at: path, access: .inspect, options: options)) }
    }

    /// `open(at:options:)` off the caller's thread.
    public static func open(at path: String, options: LogbookOptions = LogbookOptions()) async throws -> LogbookReader {
        try await Logbook.offThread { try open(at: path, options: options) }
    }

    /// The store's replica id.
    public var replicaID: ReplicaID { book.replicaID }
    /// This replica's public signing key, which every frame it appends is signed with (its
    /// replica id derives from it); nil for a store made before signed logs, whose frames are
    /// unsigned. Show it to people who want to check what they receive came from this replica.
    /// - Throws: `.corrupt` when the key file is missing or damaged.
    public func publicKey() throws(LogbookError) -> ReplicaPublicKey? {
        try LogbookError.door { try book.store.signingKey()?.public }
    }
    /// This replica's member card (`LBM1-…`): what a share's admin adds it by. It binds the
    /// replica's key agreement key, which shares' keys are sealed to, to its signing key.
    public func memberCard() throws(LogbookError) -> MemberCard? { try LogbookError.door { try book.memberCard() } }
    /// The shares whose membership logs this store holds.
    public func shares() throws(LogbookError) -> [ShareInfo] { try LogbookError.door { try book.shares() } }
    /// The store's directory.
    public var path: String { book.path }
    /// The names of the store's files.
    public var layout: StoreLayout { book.store.layout }

    /// Closes the files. Calls after it throw `.closed`. A burst's reader closes with its burst.
    /// - Throws: `.invalid` for a burst's reader.
    public func close() throws {
        guard owns else { throw LogbookError(.invalid, "a burst's reader is closed with its burst, not by itself") }
        try LogbookError.door { try book.close() }
    }

    // MARK: Records

    /// Items, typed (`Item`): every item by default, or those a query selects (a search, a
    /// subtree in depth order; `tree(under:)` gives the depths).
    public func items(_ query: ItemQuery = ItemQuery()) throws -> [Item] { try run { try $0.records(query) } }
    /// `items(_:)` off the caller's thread.
    public func items(_ query: ItemQuery = ItemQuery()) async throws -> [Item] { try await runOff { try $0.records(query) } }

    /// The subtree under `root` (`root` included, at depth 0), in depth order, each item with its
    /// depth, at most `limit` items. A cycle in the parent links is walked once; the walk stops
    /// at the depth bound.
    public func tree(under root: UUID, includeDeleted: Bool = false, limit: Int = 1000) throws -> [ItemInTree] {
        try run { try $0.tree(under: root, includeDeleted: includeDeleted, limit: limit) }
    }
    /// `tree(under:includeDeleted:limit:)` off the caller's thread.
    public func tree(under root: UUID, includeDeleted: Bool = false, limit: Int = 1000) async throws -> [ItemInTree] {
        try await runOff { try $0.tree(under: root, includeDeleted: includeDeleted, limit: limit) }
    }

    /// One item, deleted or not; nil when there is none with that id.
    public func item(_ id: UUID) throws -> Item? { try record(Item.self, id) }
    /// `item(_:)` off the caller's thread.
    public func item(_ id: UUID) async throws -> Item? { try await record(Item.self, id) }

    /// Tags by name (deleted ones only when asked for).
    public func tags(includeDeleted: Bool = false) throws -> [Tag] { try run { try $0.tagRecords(includeDeleted) } }
    /// `tags(includeDeleted:)` off the caller's thread.
    public func tags(includeDeleted: Bool = false) async throws -> [Tag] { try await runOff { try $0.tagRecords(includeDeleted) } }

    /// The tags each item carries now (a live link to a live tag), by item id.
    public func tags(of items: [Item]) throws -> [UUID: [Tag]] { try run { try $0.tagRecords(of: items.map(\.id)) } }
    /// `tags(of:)` off the caller's thread.
    public func tags(of items: [Item]) async throws -> [UUID: [Tag]] {
        let ids = items.map(\.id)
        return try await runOff { try $0.tagRecords(of: ids) }
    }

    /// Every entity of one kind (`TimeEntry.self`, `Completion.self`, …), deleted ones only when
    /// asked for, in id order.
    public func all<R: EntityRecord>(_ type: R.Type, includeDeleted: Bool = false) throws -> [R] {
        try run { try $0.projection.rows(of: R.entity, includeDeleted: includeDeleted, as: R.self) }
    }
    /// `all(_:includeDeleted:)` off the caller's thread.
    public func all<R: EntityRecord>(_ type: R.Type, includeDeleted: Bool = false) async throws -> [R] {
        try await runOff { try $0.projection.rows(of: R.entity, includeDeleted: includeDeleted, as: R.self) }
    }

    /// One entity of a kind by id, deleted or not; nil when there is none.
    public func record<R: EntityRecord>(_ type: R.Type, _ id: UUID) throws -> R? {
        try run { try $0.projection.row(of: R.entity, id: id, as: R.self) }
    }
    /// `record(_:_:)` off the caller's thread.
    public func record<R: EntityRecord>(_ type: R.Type, _ id: UUID) async throws -> R? {
        try await runOff { try $0.projection.row(of: R.entity, id: id, as: R.self) }
    }

    // MARK: Links, history, conflicts

    /// The links from and to `item`.
    public func links(of item: UUID, includeDeleted: Bool = false) throws -> [LinkRow] {
        try run { try $0.links(of: item, includeDeleted: includeDeleted) }
    }
    /// `links(of:includeDeleted:)` off the caller's thread.
    public func links(of item: UUID, includeDeleted: Bool = false) async throws -> [LinkRow] {
        try await runOff { try $0.links(of: item, includeDeleted: includeDeleted) }
    }
    /// The items `depth` links away from `item` (following `kinds`, all by default), each once,
    /// at its shortest distance.
    /// - Throws: `.invalid` when `depth` or `limit` is out of bounds.
    public func linked(from item: UUID, depth: Int = 1, kinds: Set<String>? = nil, direction: LinkDirection = .outgoing,
                       limit: Int = 100_000) throws -> [LinkedItem] {
        try run { try $0.linked(from: item, depth: depth, kinds: kinds, direction: direction, limit: limit) }
    }
    /// `linked(from:depth:kinds:direction:limit:)` off the caller's thread.
    public func linked(from item: UUID, depth: Int = 1, kinds: Set<String>? = nil, direction: LinkDirection = .outgoing,
                       limit: Int = 100_000) async throws -> [LinkedItem] {
        try await runOff { try $0.linked(from: item, depth: depth, kinds: kinds, direction: direction, limit: limit) }
    }
    /// The events of one entity in merge order, with the fields whose current value each set.
    public func history(of entity: Entity, id: UUID) throws -> EntityHistory { try run { try $0.history(of: entity, id: id) } }
    /// `history(of:id:)` off the caller's thread.
    public func history(of entity: Entity, id: UUID) async throws -> EntityHistory { try await runOff { try $0.history(of: entity, id: id) } }
    /// Concurrent edits the merge settled, both values and the winner.
    public func conflicts(includeResolved: Bool = false) throws -> [ConflictRow] { try run { try $0.conflicts(includeResolved: includeResolved) } }
    /// `conflicts(includeResolved:)` off the caller's thread.
    public func conflicts(includeResolved: Bool = false) async throws -> [ConflictRow] {
        try await runOff { try $0.conflicts(includeResolved: includeResolved) }
    }
    /// Writes a domain rule set aside (a skip or reschedule of a completed occurrence).
    public func anomalies() throws -> [AnomalyRow] { try run { try $0.anomalies() } }
    /// `anomalies()` off the caller's thread.
    public func anomalies() async throws -> [AnomalyRow] { try await runOff { try $0.anomalies() } }
    /// Events written by a newer build whose entity or fields this build does not know: kept,
    /// shipped, and projected as far as understood.
    public func unreadEvents() throws -> [UnreadEvents] { try run { try $0.unreadEvents() } }
    /// `unreadEvents()` off the caller's thread.
    public func unreadEvents() async throws -> [UnreadEvents] { try await runOff { try $0.unreadEvents() } }

    // MARK: The store

    /// The log, the projection's position, the peers and the unread events.
    public func status() throws -> LogbookStatus { try run { try $0.status() } }
    /// `status()` off the caller's thread.
    public func status() async throws -> LogbookStatus { try await runOff { try $0.status() } }
    /// The store's cursor: the last seq held of every origin.
    public func cursor() throws -> ReplicationCursor { try run { try $0.cursor() } }
    /// `cursor()` off the caller's thread.
    public func cursor() async throws -> ReplicationCursor { try await runOff { try $0.cursor() } }
    /// The peers this store has exchanged with, and how far each holds this store's log.
    public func peers() throws -> [PeerState.Peer] { try run { try $0.peers() } }
    /// `peers()` off the caller's thread.
    public func peers() async throws -> [PeerState.Peer] { try await runOff { try $0.peers() } }
    /// Calls `body` with each event the filter lets through, per origin in seq order, until it
    /// returns false. Reads the log itself (checked frame by frame), not the projection.
    /// - Throws: `.damaged` at the first frame that fails its check; what `body` throws, wrapped.
    public func forEachEvent(_ filter: EventFilter = EventFilter(), _ body: (Event) throws -> Bool) throws {
        try run { try $0.forEachEvent(filter, body) }
    }
    /// `forEachEvent(_:_:)` off the caller's thread (`body` runs there).
    public func forEachEvent(_ filter: EventFilter = EventFilter(), _ body: @escaping @Sendable (Event) throws -> Bool) async throws {
        try await runOff { try $0.forEachEvent(filter, body) }
    }
    /// SQL of your own on a read-only connection: a write is refused by SQLite (`.database`).
    /// The tables it reads count for `observe`.
    public func read<T>(_ body: (Database) throws -> T) throws -> T { try run { try $0.read(body) } }
    /// `read(_:)` off the caller's thread.
    public func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await runOff { try $0.read(body) }
    }

    // MARK: Live

    /// A query kept up to date: its result now, then again after every commit, of any process,
    /// that wrote a table the query read, delivered only when it differs from the last one. The
    /// tables are recorded as the query runs (every read of this reader counts), so nothing is
    /// declared and nothing is missed; a query that read none (the log only) runs after every
    /// commit. The stream ends with the error that stopped the query, as a `LogbookError`.
    public func observe<T: Equatable & Sendable>(_ query: @escaping @Sendable (LogbookReader) throws -> T) -> AsyncThrowingStream<T, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task { [book] in
                do {
                    // Opening the projection and the watcher touches the disk: not on the caller's thread.
                    let inner = try await Logbook.offThread {
                        book.observe { book in try LogbookError.door { try query(LogbookReader(book: book, owns: false)) } }
                    }
                    for try await value in inner { continuation.yield(value) }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: LogbookError(wrapping: error))
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
    /// Every commit of the projection, whoever made it. The stream ends when the consumer stops
    /// (or, quietly, when the store cannot be followed: `watch(from:)` says why).
    public func changes(pollInterval: Double = 1) -> AsyncStream<ProjectionChange> { book.changes(pollInterval: pollInterval) }
    /// Follows the projection from `cursor` (what a consumer saw last, nil for now), missing
    /// nothing: first what was applied past it, then each change as it is applied, each with the
    /// cursor that covers it and everything before. The watcher runs on a thread of its own; the
    /// stream ends when the consumer stops, or with the `LogbookError` that stopped it (`.invalid`
    /// for a cursor whose events the log no longer holds, `.closed`, `.damaged`).
    public func watch(from cursor: ReplicationCursor? = nil) -> AsyncThrowingStream<ProjectionChange, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    let watcher = try await runOff { try $0.watch(from: cursor) }
                    for await change in watcher.changes() { continuation.yield(change) }
                    if let failure = watcher.failure { throw failure }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: LogbookError(wrapping: error))
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    // MARK: Checking and exporting

    /// Checks every frame (checksums, hash chain, seq contiguity, decodability); with `deep`, also
    /// rebuilds the projection aside and compares it with the live one. Damage is reported in the
    /// `VerifyReport`, not thrown.
    /// - Returns: the report, and with `deep` the first difference found (nil: identical).
    public func verify(deep: Bool = false) throws -> (VerifyReport, projectionDifference: String?) { try run { try $0.verify(deep: deep) } }
    /// `verify(deep:)` off the caller's thread.
    public func verify(deep: Bool = false) async throws -> (VerifyReport, projectionDifference: String?) {
        try await runOff { try $0.verify(deep: deep) }
    }
    /// Writes the frames past `since` to a bundle file, verbatim (written aside, then renamed in).
    /// - Throws: `.io` or `.diskFull` when the file cannot be written.
    public func exportBundle(to file: String, since: ReplicationCursor = .empty) throws -> FrameBundle.ExportResult {
        try run { try $0.exportBundle(to: file, since: since) }
    }
    /// `exportBundle(to:since:)` off the caller's thread.
    public func exportBundle(to file: String, since: ReplicationCursor = .empty) async throws -> FrameBundle.ExportResult {
        try await runOff { try $0.exportBundle(to: file, since: since) }
    }
}

/// One item of a subtree and its depth under the root (the root is at 0).
public struct ItemInTree: Sendable, Equatable, FetchableRecord {
    /// The item.
    public var item: Item
    /// Links from the root down to it.
    public var depth: Int

    /// Reads an item row that carries a `depth` column.
    public init(row: Row) {
        item = Item(row: row)
        depth = ((try? row.decode(Int?.self, forColumn: "depth")) ?? nil) ?? 0
    }
}

/// Writes a store: appends, resolves, purges, imports, sync and compaction. It takes the store's
/// writer lock for each burst of writes and lets it go after (waiting up to `Options.lockWait`
/// while another process holds it), so `evctl serve` and an app, or two apps, share one store;
/// every burst first recovers the log and catches the projection up, as an open for writing does.
/// Reads go through `reader`, which never takes the lock.
///
/// ```swift
/// let writer = try await LogbookWriter.open(at: path, creating: true)
/// let milk = try await writer.create(Item(title: "Buy milk"))
/// try await writer.write { burst in          // one burst: one lock, one recovery
///     try burst.create(TagValues(name: "home"))
///     try burst.update(milk, ItemValues(status: "done"))
/// }
/// try await writer.sync(with: Peer("https://hub.example:8427", token: token))
/// let open = try await writer.reader.items()
/// ```
///
/// ## Errors
/// Every call throws `LogbookError` alone: its `code` to match on, the lower error as
/// `underlying`. Every write may throw `.locked` (another process held the lock past
/// `lockWait`), `.diskFull` (nothing acknowledged is lost; the append did not happen),
/// `.damaged` (recovery found the store's own log damaged beyond a torn tail), `.ownLog` (the
/// store's own log is behind what it committed, or its tail is still arriving from a peer:
/// appends wait until a pull gives it back), `.io`, `.database` and `.closed`; each call's
/// documentation names the codes it adds.
public final class LogbookWriter: Sendable {
    /// Reads the same store; never takes the lock.
    public let reader: LogbookReader
    private let options: LogbookOptions
    /// One burst at a time in this process (the lock is per open file, so a second burst here
    /// would wait on the first's lock anyway).
    private let bursts = Lock()

    private init(reader: LogbookReader, options: LogbookOptions) {
        self.reader = reader
        self.options = options
    }

    /// Opens the store at `path` for writing: nothing is locked until the first write.
    /// - Parameters:
    ///   - path: the store's directory.
    ///   - creating: create the store (with a new replica id and any missing folders) when there
    ///     is none at `path`.
    ///   - options: how long to wait for the lock, whether to project, what to tell.
    /// - Throws: `.notAStore` when `path` holds no store and `creating` is false;
    ///   `.unsupportedFormat` when a newer build wrote it; `.io` when the folders cannot be made.
    public static func open(at path: String, creating: Bool = false, options: LogbookOptions = LogbookOptions()) throws -> LogbookWriter {
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
    public static func open(at path: String, creating: Bool = false, options: LogbookOptions = LogbookOptions()) async throws -> LogbookWriter {
        try await Logbook.offThread { try open(at: path, creating: creating, options: options) }
    }

    /// The store's replica id: the origin of the events this writer appends.
    public var replicaID: ReplicaID { reader.replicaID }
    /// This replica's public signing key (see `LogbookReader.publicKey()`).
    public func publicKey() throws(LogbookError) -> ReplicaPublicKey? { try reader.publicKey() }

    // MARK: Bursts

    /// What a burst's body writes through, for as long as the body runs (the lock is held; once
    /// the body returns, every call throws `.closed`). Each write is durable and projected when
    /// it returns; a burst is not a transaction: what was appended before a failure stays.
    public struct Burst {
        let book: Logbook

        /// Reads the store as this burst leaves it, every change appended so far included.
        /// It closes with the burst: `close()` on it throws `.invalid`, and after the body every
        /// call throws `.closed`.
        public var reader: LogbookReader { LogbookReader(book: book, owns: false) }
        /// The origin of the events this burst appends.
        public var replicaID: ReplicaID { book.replicaID }

        /// Appends `changes` atomically (all land or none do), then projects them. Each change's
        /// fields are checked first, like NDJSON input.
        /// - Returns: the seqs assigned, and the changes skipped because their event id was
        ///   already in the log.
        /// - Throws: `.invalidInput` naming the change (1-based) and field refused: nothing is appended.
        @discardableResult
        public func append(_ changes: [Change]) throws -> AppendResult { try LogbookError.door { try book.append(changes) } }

        // Shares (docs/SHARING.md).

        /// Creates a share with this replica as its admin and first member; its membership log
        /// ships like any log. - Returns: the share's id.
        public func createShare(name: String) throws -> ShareID { try LogbookError.door { try book.createShare(name: name) } }
        /// Adds the replica whose member card this is, sealing every content key so far to it.
        /// Only the share's admin adds. - Throws: `.invalidInput` when this replica is not the admin.
        public func addMember(_ card: MemberCard, to share: ShareID) throws { try LogbookError.door { try book.addMember(card, to: share) } }
        /// Removes a member and rotates the share's key: it reads nothing written after.
        public func removeMember(_ member: ReplicaID, from share: ShareID) throws { try LogbookError.door { try book.removeMember(member, from: share) } }
        /// Deletes a share: each member that syncs this destroys its keys.
        public func deleteShare(_ share: ShareID) throws { try LogbookError.door { try book.deleteShare(share) } }
        /// Leaves a share on this replica: its keys are destroyed here and not learnt again. The
        /// admin should remove this replica too, which rotates the key for the others.
        public func leaveShare(_ share: ShareID) throws { try LogbookError.door { try book.leaveShare(share) } }
        /// Drops a deleted share's sealed logs (its ciphertext) from this store, and declines
        /// their frames from then on; its membership log stays, to carry the deletion on
        /// (docs/SHARING.md, "Purge"). - Throws: `.invalidInput` when the share is not deleted
        /// (its admin's signed deletion is not in this store): nothing is removed.
        @discardableResult
        public func purgeShare(_ share: ShareID) throws -> SharePurgeResult { try LogbookError.door { try book.purgeShare(share) } }
        /// Moves item `id` and its subtree (with their item tags, the tags they name, time
        /// entries, completions, exceptions and the links between them) into `share`, or into
        /// this replica's private data when `share` is nil, by the move rule (docs/PROJECTION.md):
        /// written anew there under new ids, then deleted where they were.
        /// - Returns: each moved row's new id, by its old one.
        @discardableResult
        public func moveItem(_ id: UUID, toShare share: ShareID?) throws -> [UUID: UUID] {
            try LogbookError.door { try book.moveItem(id, to: share) }
        }
        /// Makes this store a relay (`on`): it takes every share's logs it is given, as
        /// ciphertext, so replicas of a share can meet at it (a folder they all reach). Off by
        /// default: a store takes only its own shares' logs (docs/SHARING.md, "Partial replication").
        public func takeEveryShare(_ on: Bool = true) throws { try LogbookError.door { try book.setRelay(on) } }
        /// Appends `changes` atomically to this replica's log of `share`, sealed with its key:
        /// only the share's members read them; hubs hold ciphertext.
        @discardableResult
        public func append(_ changes: [Change], toShare share: ShareID) throws -> ReceiveResult {
            try LogbookError.door { try book.append(mutations: changes.map(\.mutation), toShare: share) }
        }
        /// Appends NDJSON mutations (one JSON object per line) given as text, atomically.
        /// - Throws: `.invalidInput` naming the line and field refused: nothing is appended.
        @discardableResult
        public func append(ndjson text: String) throws -> AppendResult { try LogbookError.door { try book.append(ndjson: text) } }
        /// Streams NDJSON mutations from a file descriptor (a file, a pipe) into one atomic
        /// append: every line lands or none does. Lines are parsed on another thread while
        /// batches are written; memory stays bounded whatever the input's size.
        /// - Parameters:
        ///   - fd: an open file descriptor, read to its end (not closed).
        ///   - name: how errors name the input (a file name, "standard input").
        ///   - progress: lines and bytes read so far, called on this thread.
        /// - Returns: the append, and the projection's failure when the events were appended
        ///   (durably) but not projected: do not append them again; `replay()` completes it.
        /// - Throws: `.invalidInput` naming the line and field refused: nothing is appended.
        public func appendNDJSON(from fd: Int32, name: String, progress: ((Int, Int) -> Void)? = nil) throws -> (AppendResult, projectionError: LogbookError?) {
            try LogbookError.door {
                let (r, failure) = try book.appendNDJSON(from: fd, name: name, progress: progress)
                return (r, failure.map { LogbookError(wrapping: $0) })
            }
        }
        /// Creates an entity and returns its id: `id` (a new random one by default), or the id
        /// derived from the values for item_tags and occurrences.
        /// - Throws: `.invalidInput` when a field is refused.
        @discardableResult
        public func create<V: EntityValues>(_ values: V, id: UUID = UUID()) throws -> UUID {
            try LogbookError.door { try book.create(values, id: id) }
        }
        /// Creates the entity a record made in code describes; returns its id.
        /// - Throws: `.invalid` as `Change.create(_:)` says; `.invalidInput` when a field is refused.
        @discardableResult
        public func create<R: EntityRecord>(_ record: R) throws -> UUID {
            try LogbookError.door {
                let change = try Change.create(record)
                try book.append([change])
                return change.mutation.entityID
            }
        }
        /// Sets the fields `values` holds on entity `id`.
        /// - Throws: `.invalidInput` when a field is refused.
        public func update<V: EntityValues>(_ id: UUID, _ values: V) throws { try LogbookError.door { try book.update(id, values) } }
        /// Writes what changed between two versions of a record: one update with the fields that
        /// differ; nothing when none does.
        /// - Throws: `.invalid` as `Change.update(from:to:)` says (two entities, an identity edited).
        public func update<R: EntityRecord>(from old: R, to new: R) throws {
            try LogbookError.door { if let c = try Change.update(from: old, to: new) { try book.append([c]) } }
        }
        /// Soft-deletes entity `id` of kind `entity`.
        public func delete(_ entity: Entity, _ id: UUID) throws { try LogbookError.door { try book.delete(entity, id) } }
        /// Restores soft-deleted entity `id` of kind `entity`.
        public func restore(_ entity: Entity, _ id: UUID) throws { try LogbookError.door { try book.restore(entity, id) } }
        /// Settles conflict `id` (see `LogbookReader.conflicts()`) by appending an update that
        /// re-asserts the kept value.
        /// - Throws: `.notFound` when there is no such conflict; `.invalid` when it is already resolved.
        @discardableResult
        public func resolve(conflict id: Int64, keep side: ConflictSide) throws -> ConflictResolution {
            try LogbookError.door { try book.resolve(conflict: id, keep: side) }
        }
        /// Removes from the projection what was soft-deleted before `date` (the log keeps it).
        /// - Returns: the rows removed, by table.
        @discardableResult
        public func purge(deletedBefore date: Date) throws -> [String: Int] { try LogbookError.door { try book.purge(deletedBefore: date) } }
        /// Keeps deleted rows for `days` days: purges older ones now and at every burst's open.
        /// nil (or 0 or less) turns the retention off (nothing purged is brought back by that).
        /// - Returns: the rows purged now, by table.
        @discardableResult
        public func setRetention(days: Int?) throws -> [String: Int] { try LogbookError.door { try book.setRetention(days: days) } }
        /// Imports another app's data (an SQLite database or a JSON export), kept first as a
        /// backup in the store. Rows it cannot map are counted and named in the report, not thrown.
        /// - Throws: `.invalid` when the file is no source this build reads (nothing is appended).
        @discardableResult
        public func importLegacy(from path: String) throws -> LegacyImportReport { try LogbookError.door { try book.importLegacy(from: path) } }
        /// Brings the projection up to date with the log: what a writer opened with
        /// `LogbookOptions.project` false leaves behind.
        /// - Returns: the events applied.
        @discardableResult
        public func replay(progress: ((Int, Int) -> Void)? = nil) throws -> Int { try LogbookError.door { try book.replay(progress: progress) } }
    }

    /// One burst of writes: takes the writer lock (waiting up to `Options.lockWait`), recovers
    /// the log, catches the projection up, runs `body`, and lets the lock go, whatever `body`
    /// did. Every change `body` appends is durable and projected when it returns.
    /// - Throws: `.locked` when another process held the lock past `lockWait`; `.invalid` when
    ///   called from inside a burst of the same writer on the burst's own thread (a write from
    ///   another thread waits for the burst to end: a body that waits for one never ends);
    ///   what `body` throws, wrapped (what it appended before stays appended).
    public func write<T>(_ body: (Burst) throws -> T) throws -> T {
        try LogbookError.door { try burst(body) }
    }

    /// The writer whose burst runs on this thread or task, to refuse a write from inside one
    /// (it would wait forever on its own burst).
    @TaskLocal private static var inBurst: ObjectIdentifier?

    /// Refuses a call that would wait on a burst of this writer running on this thread.
    private func notInBurst(_ operation: String) throws {
        guard Self.inBurst != ObjectIdentifier(self) else {
            throw LogbookError(.invalid, "\(operation) inside a write of the same LogbookWriter",
                               hint: "use the Burst the write hands its body, or call it after the write")
        }
        guard !reader.book.isClosed else { throw LogbookError(.closed, "the LogbookWriter is closed") }
    }

    private func burst<T>(_ body: (Burst) throws -> T) throws -> T {
        try notInBurst("a write")
        return try Self.$inBurst.withValue(ObjectIdentifier(self)) {
            try bursts.withLock {
                // Closed while this burst waited for the one before.
                guard !reader.book.isClosed else { throw LogbookError(.closed, "the LogbookWriter is closed") }
                let book = try Logbook.open(reader.book.store, access: .readWrite, options: options)
                let result: T
                do {
                    result = try body(Burst(book: book))
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
    public func write<T: Sendable>(_ body: @escaping @Sendable (Burst) throws -> T) async throws -> T {
        try await Logbook.offThread(on: queue) { try self.write(body) }
    }

    // MARK: One write, one burst (each throws what its `Burst` form does)

    /// Creates the entity a record made in code describes (`Item(title: "Buy milk")`); returns
    /// its id (the record's, or the id its contents derive). See `Burst.create(_:)`.
    @discardableResult
    public func create<R: EntityRecord>(_ record: R) throws -> UUID { try write { try $0.create(record) } }
    /// `create(_:)` off the caller's thread.
    @discardableResult
    public func create<R: EntityRecord>(_ record: R) async throws -> UUID { try await write { try $0.create(record) } }
    /// Writes what changed between two versions of a record. See `Burst.update(from:to:)`.
    public func update<R: EntityRecord>(from old: R, to new: R) throws { try write { try $0.update(from: old, to: new) } }
    /// `update(from:to:)` off the caller's thread.
    public func update<R: EntityRecord>(from old: R, to new: R) async throws { try await write { try $0.update(from: old, to: new) } }
    /// Appends `changes` atomically. See `Burst.append(_:)`.
    @discardableResult
    public func append(_ changes: [Change]) throws -> AppendResult { try write { try $0.append(changes) } }
    /// `append(_:)` off the caller's thread.
    @discardableResult
    public func append(_ changes: [Change]) async throws -> AppendResult { try await write { try $0.append(changes) } }
    /// Appends NDJSON mutations given as text. See `Burst.append(ndjson:)`.
    @discardableResult
    public func append(ndjson text: String) throws -> AppendResult { try write { try $0.append(ndjson: text) } }
    /// `append(ndjson:)` off the caller's thread.
    @discardableResult
    public func append(ndjson text: String) async throws -> AppendResult { try await write { try $0.append(ndjson: text) } }
    /// Creates an entity from values. See `Burst.create(_:id:)`.
    @discardableResult
    public func create<V: EntityValues>(_ values: V, id: UUID = UUID()) throws -> UUID { try write { try $0.create(values, id: id) } }
    /// `create(_:id:)` off the caller's thread.
    @discardableResult
    public func create<V: EntityValues>(_ values: V, id: UUID = UUID()) async throws -> UUID { try await write { try $0.create(values, id: id) } }
    /// Sets fields on an entity. See `Burst.update(_:_:)`.
    public func update<V: EntityValues>(_ id: UUID, _ values: V) throws { try write { try $0.update(id, values) } }
    /// `update(_:_:)` off the caller's thread.
    public func update<V: EntityValues>(_ id: UUID, _ values: V) async throws { try await write { try $0.update(id, values) } }
    /// Soft-deletes an entity.
    public func delete(_ entity: Entity, _ id: UUID) throws { try write { try $0.delete(entity, id) } }
    /// `delete(_:_:)` off the caller's thread.
    public func delete(_ entity: Entity, _ id: UUID) async throws { try await write { try $0.delete(entity, id) } }
    /// Restores a soft-deleted entity.
    public func restore(_ entity: Entity, _ id: UUID) throws { try write { try $0.restore(entity, id) } }
    /// `restore(_:_:)` off the caller's thread.
    public func restore(_ entity: Entity, _ id: UUID) async throws { try await write { try $0.restore(entity, id) } }
    /// Settles a conflict. See `Burst.resolve(conflict:keep:)`.
    @discardableResult
    public func resolve(conflict id: Int64, keep side: ConflictSide) throws -> ConflictResolution {
        try write { try $0.resolve(conflict: id, keep: side) }
    }
    /// `resolve(conflict:keep:)` off the caller's thread.
    @discardableResult
    public func resolve(conflict id: Int64, keep side: ConflictSide) async throws -> ConflictResolution {
        try await write { try $0.resolve(conflict: id, keep: side) }
    }
    /// Removes from the projection what was soft-deleted before `date`.
    @discardableResult
    public func purge(deletedBefore date: Date) throws -> [String: Int] { try write { try $0.purge(deletedBefore: date) } }
    /// `purge(deletedBefore:)` off the caller's thread.
    @discardableResult
    public func purge(deletedBefore date: Date) async throws -> [String: Int] { try await write { try $0.purge(deletedBefore: date) } }
    /// Imports another app's data. See `Burst.importLegacy(from:)`.
    @discardableResult
    public func importLegacy(from path: String) throws -> LegacyImportReport { try write { try $0.importLegacy(from: path) } }
    /// `importLegacy(from:)` off the caller's thread.
    @discardableResult
    public func importLegacy(from path: String) async throws -> LegacyImportReport { try await write { try $0.importLegacy(from: path) } }

    // MARK: Frames, compaction and sync (each takes the lock for the moment it writes)

    /// Appends a bundle's frames (the lock taken for the moment); nothing when any is refused.
    /// - Throws: `.damaged` when the file fails its checksums or a frame its verification;
    ///   `.peer` when the frames leave a gap or carry a clock too far ahead; `.ownLog` when a
    ///   frame of this store's own origin is refused (unsigned frames it has no evidence of
    ///   losing, or a fork of its log); `.unsupportedFormat` for a newer bundle version;
    ///   `.invalid` inside a burst of this writer.
    @discardableResult
    public func importBundle(_ file: String) throws -> ReceiveResult {
        try LogbookError.door {
            try notInBurst("importBundle")
            return try bursts.withLock { try reader.book.importBundle(file) }
        }
    }
    /// `importBundle(_:)` off the caller's thread.
    @discardableResult
    public func importBundle(_ file: String) async throws -> ReceiveResult { try await Logbook.offThread(on: queue) { try self.importBundle(file) } }

    /// Drops old segments every peer holds (the lock taken for the moment).
    /// - Throws: `.invalid` inside a burst of this writer.
    @discardableResult
    public func compact(withoutPeers: Bool = false) throws -> Compactor.Report {
        try LogbookError.door {
            try notInBurst("compact")
            return try bursts.withLock { try reader.book.compact(withoutPeers: withoutPeers) }
        }
    }
    /// `compact(withoutPeers:)` off the caller's thread.
    @discardableResult
    public func compact(withoutPeers: Bool = false) async throws -> Compactor.Report {
        try await Logbook.offThread(on: queue) { try self.compact(withoutPeers: withoutPeers) }
    }

    /// Pulls what `peer` holds and this store lacks; bootstraps from its snapshot when it no
    /// longer holds the log from this store's cursor. The lock is taken at the first page that
    /// brings frames and held to the end of the pull: a burst meanwhile, from this process or
    /// another, waits up to `lockWait` and then throws `.locked` (retry it after the sync).
    /// - Throws: `.unauthorized` (the token), `.network` (retry later), `.cursorExpired`,
    ///   `.peer` (the peer answered with what this store refuses), `.cancelled`.
    public func pull(from peer: Peer, progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> Exchange {
        try await LogbookError.door {
            try notInBurst("pull")
            return try await reader.book.pull(from: peer, progress: progress)
        }
    }

    /// Pushes what this store holds and `peer` lacks. An origin other than this store's own that
    /// the peer refuses to take from this token is left out and the rest pushed; the exchange's
    /// `pushed?.refused` names each, with the peer's message.
    /// - Throws: as `pull(from:progress:)`.
    public func push(to peer: Peer, progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> Exchange {
        try await LogbookError.door {
            try notInBurst("push")
            return try await reader.book.push(to: peer, progress: progress)
        }
    }

    /// Pulls, then pushes.
    /// - Throws: as `pull(from:progress:)`.
    public func sync(with peer: Peer, progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> Exchange {
        try await LogbookError.door {
            try notInBurst("sync")
            return try await reader.book.sync(with: peer, progress: progress)
        }
    }

    /// Keeps this store and the `evctl serve` at `peer` in sync until the task is cancelled:
    /// catches up both ways, then pulls the moment the server's cursor moves (its event stream)
    /// and pushes the moment this store's does (any process's append), reconnecting with backoff.
    /// Each exchange is remembered like a `sync`; the lock is taken only while frames are written.
    /// - Parameters:
    ///   - onExchange: told of every exchange (also those that moved nothing).
    ///   - onState: told when the follower is in sync (`.partlyInSync` naming the origins the server
    ///     refuses, when it refuses any), and when it retries and why.
    /// - Throws: `.invalid` when `peer` is a path (following needs a server); `.unauthorized` or
    ///   `.peer` when the failure is permanent (a refused token, a peer that is not a Logbook);
    ///   `.cancelled` never: cancelling the task ends it normally.
    public func follow(_ peer: Peer, onExchange: @escaping @Sendable (Exchange) -> Void = { _ in },
                       onState: @escaping @Sendable (LiveSync.State) -> Void = { _ in }) async throws {
        try await LogbookError.door {
            try notInBurst("follow")
            return try await reader.book.follow(peer, onExchange: onExchange, onState: onState)
        }
    }

    /// Closes the files (no lock is held between bursts). Calls after it throw `.closed`.
    public func close() throws { try reader.close() }
}
