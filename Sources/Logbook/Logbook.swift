import Domain
import EventLog
import Foundation
import GRDB
import Projections
import Replicator

/// A store opened with an access mode, below the door: what `evctl`'s commands, the server and
/// the pages are built on, and what a `LogbookWriter` burst and a `LogbookReader` wrap. Not API
/// (`package`): an app opens a `LogbookWriter` or a `LogbookReader`, which have no modes.
///
/// Opened `.readWrite`, it holds the store's writer lock until `close()` (one writer per store,
/// across processes; `evctl serve` on the same store waits for it). Opened `.readOnly`, it takes
/// no lock: it reads the projection as the writer left it and follows the writer's commits
/// (`changes()`, within milliseconds through inotify on the store).
///
/// Thread-safe: appends and syncs from several threads or tasks are serialized; queries run
/// concurrently with them.
package final class Logbook: @unchecked Sendable {
    /// How a store is opened.
    package enum Access: Sendable, Equatable {
        /// Take the writer lock (waiting up to `Options.lockWait` for another process to let it
        /// go), recover the log, bring the projection up to date; appends are allowed.
        case readWrite
        /// Take no lock. When no other process writes, the lock is taken for a moment to recover
        /// the log and catch the projection up; when one does, the projection is read as it is
        /// (`behindAtOpen` says how far behind the log it was).
        case readOnly
        /// Touch nothing: no lock, no recovery, no catching up. The log and the projection are
        /// read exactly as they are on disk (what `verify`, `log` and `status` want); the
        /// projection is opened on first use.
        case inspect
    }

    package typealias Options = LogbookOptions

    /// The store underneath (its path, replica id, log): below the door, for this package's code.
    package let store: Store
    /// How this store was opened.
    package let access: Access
    /// The projection: the tables the log projects to, readable from any thread. Below the
    /// door: an app reads through the queries and `read { db in … }`.
    package var projection: Projection {
        get throws {
            try state.withLock {
                guard !closed else { throw LogbookError(.closed, "the Logbook is closed") }
                // A reader follows a projection file renamed in by a rebuild or a snapshot install.
                if let p = opened, writer != nil || p.isCurrentFile { return p }
                let stale = opened
                let p = try writer == nil ? Projection(readingIfNeeded: store) : Projection(store: store)
                opened = p
                // Closing the old file's pool ends its change streams; a writer's own is never replaced.
                try? stale?.close()
                return p
            }
        }
    }
    private var opened: Projection?
    /// The peer bookkeeping, opened at the first exchange.
    private var peerBook: PeerState?

    /// The peer bookkeeping file, opened once.
    func peerState() throws -> PeerState {
        try state.withLock {
            if let p = peerBook { return p }
            let p = try PeerState(store: store)
            peerBook = p
            return p
        }
    }
    /// What recovery repaired when the store was opened for writing (a torn tail cut, an index
    /// rebuilt); empty when nothing was wrong or nothing was recovered.
    package let recovery: RecoveryReport?
    /// Events the log held that the projection had not applied when the store was opened
    /// read-only while another process was writing.
    package let behindAtOpen: UInt64
    let options: Options
    let writer: ProjectedStore?
    private let state = Lock()
    /// The queue the async forms of writes run on, one after another (Logbook+Async.swift).
    let writes = DispatchQueue(label: "logbook.writes", qos: .userInitiated)
    private var closed = false
    /// True once `close()` was called.
    var isClosed: Bool { state.withLock { closed } }

    init(store: Store, access: Access, options: Options, projection: Projection?, writer: ProjectedStore?, recovery: RecoveryReport?, behind: UInt64) {
        self.store = store
        self.access = access
        self.options = options
        opened = projection
        self.writer = writer
        self.recovery = recovery
        behindAtOpen = behind
    }

    /// Opens the store at `path`.
    /// - Parameters:
    ///   - creating: create the store (with a new replica id) when there is none at `path`.
    /// - Throws: `LogError` when the path holds no store (and `creating` is false), the store is
    ///   locked past `options.lockWait`, or its files are damaged beyond recovery.
    package static func open(at path: String, access: Access = .readWrite, creating: Bool = false, options: Options = Options()) throws -> Logbook {
        let store: Store
        do {
            store = try Store.open(at: path)
        } catch let e as LogError where creating && e.isNotAStore {
            store = try Store.create(at: path)
        }
        return try open(store, access: access, options: options)
    }

    /// Creates a new store at `path` (a new replica id) and opens it for writing.
    /// - Throws: `LogError` when `path` already holds a store or cannot be written.
    package static func create(at path: String, options: Options = Options()) throws -> Logbook {
        try open(try Store.create(at: path), access: .readWrite, options: options)
    }

    /// Opens an already opened `Store`.
    package static func open(_ store: Store, access: Access = .readWrite, options: Options = Options()) throws -> Logbook {
        let progress = options.progress
        switch access {
        case .readWrite:
            let w = try ProjectedStore.open(store: store, waitingUpTo: options.lockWait, project: options.project,
                                            progress: progress)
            options.recovered?(w.appender.recovery)
            return Logbook(store: store, access: access, options: options, projection: w.projection, writer: w,
                           recovery: w.appender.recovery, behind: 0)
        case .readOnly:
            do {
                let appender = try LogAppender.opening(store)
                defer { try? appender.close() }
                options.recovered?(appender.recovery)
                let projection = try Projection(store: store)
                try projection.catchUp(progress: progress)
                return Logbook(store: store, access: access, options: options, projection: projection, writer: nil,
                               recovery: appender.recovery, behind: 0)
            } catch where (error as? LogError)?.isLocked == true || DiskSpace.cannotWrite(error, near: store.path) {
                // Another process writes, or the store cannot be written now (a full disk, a
                // read-only mount, a lock file that cannot be written): reads never need to write,
                // so the projection is read as it is (how far behind, reported).
                let projection = try Projection(readingIfNeeded: store)
                let behind = Seq.total(try projection.lag().values)
                return Logbook(store: store, access: access, options: options, projection: projection, writer: nil,
                               recovery: nil, behind: behind)
            }
        case .inspect:
            return Logbook(store: store, access: access, options: options, projection: nil, writer: nil, recovery: nil, behind: 0)
        }
    }

    /// This store's replica id: the origin of the events it appends.
    package var replicaID: ReplicaID { store.replicaID }

    /// The store's directory.
    package var path: String { store.path }

    /// Lets the writer lock go and closes the files. Further calls throw.
    package func close() throws {
        let (first, p) = state.withLock { () -> (Bool, Projection?) in
            defer { closed = true }
            return (!closed, opened)
        }
        guard first else { return }
        if let writer { try writer.close() } else { try p?.close() }
    }

    deinit { try? close() }

    // MARK: Writing

    /// The writer, or the error that says why there is none.
    func requireWriter(_ operation: String) throws -> ProjectedStore {
        guard state.withLock({ !closed }) else { throw LogbookError(.closed, "\(operation): the Logbook is closed") }
        guard let writer else {
            throw LogbookError(.readOnly, "\(operation): the store \(store.path) is opened read-only", hint: "open it with access .readWrite")
        }
        return writer
    }

    /// Appends `changes` atomically (all land or none do), then projects them. Each change's
    /// fields are checked first, like NDJSON input: nothing is appended when one is refused.
    /// - Returns: the seqs assigned, and the changes skipped because their event id was already in the log.
    /// - Throws: `InputError` naming the change (1-based) and field refused; `LogError` when the log
    ///   cannot be written (it is then unchanged); `LogbookError` when opened read-only.
    @discardableResult
    package func append(_ changes: [Change]) throws -> AppendResult {
        try append(mutations: changes.map(\.mutation))
    }

    /// Appends mutations built by hand, checked like `append(_:)`.
    @discardableResult
    package func append(mutations: [Mutation]) throws -> AppendResult {
        let w = try requireWriter("append")
        var ms = mutations
        for i in ms.indices {
            try FieldRules.validate(ms[i], position: i + 1)
            FieldRules.normalize(&ms[i])
        }
        return try w.append(ms)
    }

    /// Appends NDJSON mutations (one JSON object per line, see `MutationParser`) given as text.
    @discardableResult
    package func append(ndjson text: String) throws -> AppendResult {
        var ms: [Mutation] = []
        var n = 0
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            n += 1
            if line.allSatisfy(\.isWhitespace) { continue }
            ms.append(try MutationParser.parse(String(line), lineNumber: n))
        }
        return try requireWriter("append").append(ms)
    }

    /// Streams NDJSON mutations from a file descriptor (a file, a pipe) into one atomic append:
    /// every line lands or none does. Lines are parsed on another thread while batches are written.
    /// - Parameters:
    ///   - name: how errors name the input (a file name, "standard input").
    ///   - progress: lines and bytes read so far.
    /// - Returns: the append, and the projection's failure when the events were appended
    ///   (durably) but not projected: do not append them again; `replay()` completes it.
    /// - Throws: `InputError` (with the line) when a line is refused; nothing is appended.
    /// - Parameter actor: the actor of every line that names none (a scoped principal's hub
    ///   takes only events whose actor is its user).
    /// - Parameter claimingProjection: an append into an empty projection may take its file for
    ///   itself while it fills it (`Projection.claimFileForFill`): for a process that is its only
    ///   user meanwhile, as `evctl append` is; an app's own readers keep the WAL.
    package func appendNDJSON(from fd: Int32, name: String, actor: String? = nil, claimingProjection: Bool = false,
                              progress: ((Int, Int) -> Void)? = nil) throws -> (AppendResult, projectionError: (any Error)?) {
        let w = try requireWriter("append")
        if let actor, actor.isEmpty || actor.utf8.count > FieldRules.actorBytesMax {
            throw LogbookError(.invalid, "actor must be 1 to \(FieldRules.actorBytesMax) bytes")
        }
        return try w.exclusive {
            // What each batch goes through before it is written; made when the append starts
            // (after the projection has settled anything owed).
            let filling = { () -> (@Sendable (inout [Mutation]) throws -> Void)? in
                var fill: (@Sendable (inout [Mutation]) throws -> Void)?
                if w.projects {
                    let p = w.projection
                    if (try? p.cursor().isEmpty) == true {
                        // An empty projection has no rows (rows and cursor commit together), and
                        // it stays so to readers until this append commits (every writer holds the
                        // store's lock): every base is 0 and no scope refuses anything, without
                        // asking it for each batch.
                        fill = { (batch: inout [Mutation]) throws -> Void in
                            for i in batch.indices where batch[i].base == nil { batch[i].base = HLC.zero }
                        }
                    } else {
                        fill = { (batch: inout [Mutation]) throws -> Void in
                            try p.checkScopes(batch, share: nil)
                            try p.fillBases(&batch)
                        }
                    }
                }
                if let actor {
                    let bases = fill
                    fill = { (batch: inout [Mutation]) throws -> Void in
                        for i in batch.indices where batch[i].actor == nil { batch[i].actor = actor }
                        try bases?(&batch)
                    }
                }
                return fill
            }
            // Projected as it is appended when the projection is level with the log: the events
            // are merged beside the append, and the projection commits once they are durable.
            // `progress` is called on this thread either way.
            if w.projects, let (r, failure) = try w.projection.projecting(own: w.appender.origin, from: w.appender.tip.lastSeq, progress: progress,
                                                                          claimingFile: claimingProjection, { placed, progress in
                try NDJSONAppend.append(from: fd, name: name, to: w.appender, prepare: filling(), placed: placed, progress: progress)
            }) {
                // The append is durable from here (see below); other origins' events, if the log
                // holds any not yet projected, are applied now.
                if let failure { return (r, failure) }
                do {
                    try w.projection.catchUp(progress: options.progress)
                    return (r, nil)
                } catch {
                    return (r, error)
                }
            }
            let r = try NDJSONAppend.append(from: fd, name: name, to: w.appender, prepare: filling(), progress: progress)
            // The append is durable from here: a failure to project must not read as "nothing
            // happened", or a retry would append the same mutations twice.
            guard w.projects else { return (r, nil) }
            do {
                try w.projection.catchUp(progress: options.progress)
                return (r, nil)
            } catch {
                return (r, error)
            }
        }
    }

    /// Creates an entity and returns its id: `id` (a new random one by default), or the id
    /// derived from the values for item_tags and occurrences.
    @discardableResult
    package func create<V: EntityValues>(_ values: V, id: UUID = UUID()) throws -> UUID {
        let c = Change.create(values, id: id)
        try append([c])
        return c.mutation.entityID
    }

    /// Sets the fields `values` holds on entity `id`.
    package func update<V: EntityValues>(_ id: UUID, _ values: V) throws {
        try append([.update(id, values)])
    }

    /// Soft-deletes entity `id` of kind `entity`.
    package func delete(_ entity: Entity, _ id: UUID) throws {
        try append([.delete(entity, id)])
    }

    /// Restores soft-deleted entity `id` of kind `entity`.
    package func restore(_ entity: Entity, _ id: UUID) throws {
        try append([.restore(entity, id)])
    }

    package typealias Side = ConflictSide

    package typealias Resolution = ConflictResolution

    /// Settles conflict `id` (see `conflicts()`) by appending an update that re-asserts the kept value.
    /// - Throws: `LogbookError` `.notFound` when there is no such conflict, `.invalid` when it is
    ///   already resolved.
    @discardableResult
    package func resolve(conflict id: Int64, keep side: Side) throws -> Resolution {
        let w = try requireWriter("resolve")
        return try w.exclusive {
            guard let c = try projection.conflict(id) else {
                throw LogbookError(.notFound, "no conflict #\(id)", hint: "`evctl conflicts --all` lists them")
            }
            if let by = c.resolvedBy { throw LogbookError(.invalid, "conflict #\(id) is already resolved by event \(by)") }
            let me = store.replicaID.description
            let localIsWinner = c.winnerOrigin == me || c.loserOrigin != me
            let keepWinner = (side == .local) == localIsWinner
            let valueJSON = keepWinner ? c.winnerValue : c.loserValue
            guard let entity = Entity(name: c.entity), let entityID = UUID(uuidString: c.entityID) else {
                throw LogbookError(.invalid, "conflict #\(id) names an unknown entity \(printable(c.entity, limit: 40))")
            }
            let value = try Self.fieldValue(json: valueJSON, field: c.field)
            let m = Mutation(entity: entity, op: .update, entityID: entityID, fields: [Field(c.field, value)])
            try FieldRules.validate(m, position: 1)
            return Resolution(keptValue: valueJSON, field: c.field, append: try w.append([m]))
        }
    }

    /// A field value from the JSON text the conflicts table keeps, read by the NDJSON parser so
    /// both agree on every value.
    static func fieldValue(json: String, field: String) throws -> FieldValue {
        let line = "{\"entity\":\"tag\",\"op\":\"update\",\"id\":\"00000000-0000-0000-0000-000000000000\",\"fields\":{\"v\":\(json)}}"
        guard let v = try? MutationParser.parse(line).fields.first?.value else {
            throw LogbookError(.invalid, "the kept value of field \(field) is not a JSON scalar: \(printable(json, limit: 80))")
        }
        return v
    }

    /// Brings the projection up to date with the log (what a Logbook opened with
    /// `Options.project` false leaves behind).
    /// - Returns: the events applied.
    @discardableResult
    package func replay(progress: ((Int, Int) -> Void)? = nil) throws -> Int {
        let w = try requireWriter("replay")
        return try w.exclusive { try w.projection.catchUp(progress: progress) }
    }

    /// Rebuilds the projection of the store at `path` from the whole log: a new file written
    /// beside the old one and swapped in atomically (a crash mid-rebuild leaves the old one
    /// usable). Takes the writer lock for the whole rebuild, so no Logbook may have the store
    /// open for writing. Device-local settings (`app_settings`) are carried over.
    /// - Returns: the events applied.
    @discardableResult
    package static func rebuildProjection(at path: String, lockWait: Double = 2, recovered: ((RecoveryReport) -> Void)? = nil,
                                         progress: ((Int, Int) -> Void)? = nil) throws -> Int {
        let store = try Store.open(at: path)
        let appender = try retryingWhileLocked(upTo: lockWait) { try LogAppender.opening(store) }  // one writer throughout
        defer { try? appender.close() }
        recovered?(appender.recovery)
        return try Projection.rebuild(store: store, progress: progress)
    }

    /// Writes a consistent copy of the projection and the log position it covers to `file`.
    package func snapshot(to file: String) throws -> Snapshot.Info {
        let w = try requireWriter("snapshot")
        return try w.exclusive { try Snapshot.make(w, to: file) }
    }

    // MARK: Reading


    /// Items from the projection.
    package func items(_ query: ItemQuery = ItemQuery()) throws -> [ItemRow] {
        try projection.items(search: query.search, under: query.under?.lowercasedString, includeDeleted: query.includeDeleted, limit: query.limit)
    }

    /// One item, deleted or not; nil when the projection has none with that id.
    package func item(_ id: UUID) throws -> ItemRow? {
        try projection.items(under: id.lowercasedString, includeDeleted: true, limit: 1).first { $0.id == id.lowercasedString }
    }

    /// Tags by name.
    package func tags(includeDeleted: Bool = false) throws -> [TagRow] { try projection.tags(includeDeleted: includeDeleted) }

    /// Items as typed records (`LogbookReader.items`).
    func records(_ query: ItemQuery) throws -> [Item] {
        try projection.items(search: query.search, under: query.under?.lowercasedString, includeDeleted: query.includeDeleted,
                             limit: query.limit, as: Item.self)
    }

    /// The subtree under `root`, each item with its depth.
    func tree(under root: UUID, includeDeleted: Bool, limit: Int) throws -> [ItemInTree] {
        try projection.items(under: root.lowercasedString, includeDeleted: includeDeleted, limit: limit, as: ItemInTree.self)
    }

    /// Tags as typed records, by name.
    func tagRecords(_ includeDeleted: Bool) throws -> [Tag] {
        try projection.tags(includeDeleted: includeDeleted, as: Tag.self)
    }

    /// The tags of items as typed records, by item id.
    func tagRecords(of items: [UUID]) throws -> [UUID: [Tag]] {
        var out: [UUID: [Tag]] = [:]
        for (id, tags) in try projection.tags(of: items.map(\.lowercasedString), as: Tag.self) {
            if let u = UUIDText.parse(id) { out[u] = tags }
        }
        return out
    }

    /// The tags each of `items` carries now, by item id (lowercase text, as `ItemRow.id`).
    package func tags(of items: [ItemRow]) throws -> [String: [TagRow]] { try projection.tags(of: items.map(\.id)) }

    /// The items reachable from `item` by links that are not deleted, each once with its least
    /// depth (breadth first; cycle-safe). Deleted items are skipped; an item not in the
    /// projection (an orphan link) is returned with `exists` false.
    /// - Parameters:
    ///   - depth: the most links to follow, at least 1.
    ///   - kinds: follow only links of these kinds (nil: all).
    ///   - direction: outgoing (what `item` links to), incoming, or both.
    package func linked(from item: UUID, depth: Int = 1, kinds: Set<String>? = nil, direction: LinkDirection = .outgoing,
                       limit: Int = 100_000) throws -> [LinkedItem] {
        do {
            return try projection.linked(from: item.lowercasedString, depth: depth, kinds: kinds, direction: direction, limit: limit)
        } catch let e as ProjectionError {
            if case .invalid(let m) = e { throw LogbookError(.invalid, m) }
            throw e
        }
    }

    /// The links that start or end at `item`.
    package func links(of item: UUID, includeDeleted: Bool = false) throws -> [LinkRow] {
        try projection.links(of: item.lowercasedString, includeDeleted: includeDeleted)
    }

    /// Purges tombstones: rows deleted before `date` leave the projection's tables (the log
    /// keeps every event; each row's merge state is kept, so a late update never brings it back,
    /// while a later restore does, in full). Off unless asked; the cutoff is remembered, so a
    /// rebuild purges the same rows. docs/PROJECTION.md, "Purging tombstones".
    /// - Returns: rows purged per table.
    @discardableResult
    package func purge(deletedBefore date: Date) throws -> [String: Int] {
        let w = try requireWriter("purge")
        let cutoff = ISOTime.string(millis: ISOTime.millis(date))
        return try w.exclusive { try w.projection.purge(deletedBefore: cutoff) }
    }

    /// Keeps deleted rows for `days` days: purges older ones now and at every open for writing.
    /// nil (or 0) turns the retention off (nothing purged is brought back by that).
    @discardableResult
    package func setRetention(days: Int?) throws -> [String: Int] {
        let w = try requireWriter("purge")
        guard let days, days > 0 else {
            try w.projection.setRetainDays(nil)
            return [:]
        }
        return try w.exclusive {
            try w.projection.setRetainDays(days)
            return try w.projection.purgeByRetention()
        }
    }

    /// Events in the log that this build did not understand entirely when it projected them
    /// (written by a newer build): kept, shipped, and projected as far as understood. Opening
    /// for writing with a build that understands them rebuilds the projection.
    package func unreadEvents() throws -> [UnreadEvents] { try projection.unreadEvents() }

    package typealias History = EntityHistory

    /// The history of entity `id`: its events in merge order (hlc, origin, seq).
    package func history(of entity: Entity, id: UUID) throws -> History {
        RegionRecorder.readsOutsideTheProjection()
        let events = try projection.history(entity: entity, id: id)
        var holds: [UUID: [String]] = [:]
        for (field, s) in try projection.fieldSources(entity: entity, id: id).sorted(by: { $0.key < $1.key }) {
            holds[s.eventID, default: []].append(field)
        }
        return History(entity: entity, id: id, entries: events.map { History.Entry(event: $0, holds: holds[$0.eventID] ?? []) })
    }

    /// Concurrent edits the merge settled, both values and the winner.
    package func conflicts(includeResolved: Bool = false) throws -> [ConflictRow] {
        try projection.conflicts(includeResolved: includeResolved)
    }

    /// Writes a domain rule set aside (a skip or reschedule of a completed occurrence).
    package func anomalies() throws -> [AnomalyRow] { try projection.anomalies() }

    /// The store's cursor: the last seq held of every origin.
    package func cursor() throws -> ReplicationCursor {
        RegionRecorder.readsOutsideTheProjection()
        return try store.cursor()
    }


    /// Calls `body` with each event the filter lets through, per origin in seq order, until it
    /// returns false. Reads the log itself (checked frame by frame), not the projection.
    package func forEachEvent(_ filter: EventFilter = EventFilter(), _ body: (Event) throws -> Bool) throws {
        RegionRecorder.readsOutsideTheProjection()
        let origins = try filter.origin.map { [$0] } ?? store.origins()
        let sinceMs = filter.since.map(ISOTime.millis)
        let untilMs = filter.until.map(ISOTime.millis)
        let reader = LogReader(store: store)
        var going = true
        for o in origins where going {
            // Filtered in place: only the events let through are decoded.
            try reader.forEachEventView(origin: o, from: Seq(max(1, filter.fromSeq))) { v in
                if let untilMs, v.hlc.wallMillis >= untilMs { return false }
                if let sinceMs, v.hlc.wallMillis < sinceMs { return true }
                if let entity = filter.entity, v.entity != entity { return true }
                if let id = filter.id, v.entityID != id { return true }
                going = try body(try v.event())
                return going
            }
        }
    }

    /// Checks every frame (checksums, hash chain, seq contiguity, decodability); with `deep`,
    /// also rebuilds the projection aside and compares it with the live one.
    /// - Returns: the report, and with `deep` the first difference found (nil: identical).
    package func verify(deep: Bool = false, progress: ((Int, Int) -> Void)? = nil,
                       projectionProgress: ((Int, Int) -> Void)? = nil) throws -> (VerifyReport, projectionDifference: String?) {
        let report = try Verifier(store: store).run(progress: progress)
        guard deep, report.isClean else {
            recordVerify(report, deep: false, difference: nil)
            return (report, nil)
        }
        let difference = try projection.verifyDeep(progress: projectionProgress)
        recordVerify(report, deep: true, difference: difference)
        return (report, difference)
    }

    // MARK: Live

    /// Every commit of the projection, as it happens, whatever made it: an append, a sync, a
    /// replay here, or — opened read-only — another process writing this store (seen through
    /// inotify on the store within milliseconds, or within `pollInterval` seconds where the
    /// filesystem gives no events). The stream ends when the consumer stops iterating.
    package func changes(pollInterval: Double = 1) -> AsyncStream<ProjectionChange> {
        (try? changeFeed(pollInterval: pollInterval))?.stream ?? AsyncStream { $0.finish() }
    }

    /// The commits of the projection, and what ended them when an error did (the watcher that
    /// follows other processes' commits failed).
    func changeFeed(pollInterval: Double = 1) throws -> (stream: AsyncStream<ProjectionChange>, ended: (@Sendable () -> (any Error)?)?) {
        if let writer { return (writer.projection.changes(), nil) }
        let watcher = try ProjectionWatcher(store: store)
        watcher.pollInterval = pollInterval
        return (watcher.changes(), { watcher.failure })
    }

    /// Follows the projection from `cursor` (what a consumer saw last, e.g. a `watch` line's):
    /// first what was applied past it, then each change as it is applied. Blocking; run it on
    /// a thread of its own.
    package func watch(from cursor: ReplicationCursor? = nil) throws -> ProjectionWatcher {
        try ProjectionWatcher(store: store, from: cursor?.entries)
    }

    /// A query kept up to date: its result now, then again after every commit that wrote a table
    /// the query read, delivered only when it differs from the last result delivered. The tables
    /// are recorded as the query runs (every read of the Logbook and `read { db in }` counts), so
    /// nothing is declared and nothing is missed; a query that read none (the log only) runs
    /// after every commit. Opened read-only, commits of other processes count too.
    ///
    /// ```swift
    /// for try await open in book.observe({ try $0.items(.init(search: "milk")) }) { render(open) }
    /// ```
    package func observe<T: Equatable & Sendable>(_ query: @escaping @Sendable (Logbook) throws -> T) -> AsyncThrowingStream<T, any Error> {
        do {
            let feed = try changeFeed()
            return try projection.observe(changes: feed.stream, ended: feed.ended) { [self] _ in try query(self) }
        } catch {
            return AsyncThrowingStream { $0.finish(throwing: error) }
        }
    }

    /// `items(_:)`, kept up to date (see `observe`).
    package func observeItems(_ query: ItemQuery = ItemQuery()) -> AsyncThrowingStream<[ItemRow], any Error> {
        observe { try $0.items(query) }
    }

    /// `items(_:)` with a search, kept up to date.
    package func observeItems(search: String) -> AsyncThrowingStream<[ItemRow], any Error> {
        observeItems(ItemQuery(search: search))
    }
}

/// The error at the door: what `LogbookReader` and `LogbookWriter` throw, whatever failed
/// underneath, with a code to match on (stable across releases; postgres-nio's `PSQLError.Code`
/// is the model) and the lower error kept as `underlying` (a `LogError` naming file and offset,
/// an `InputError` naming line and field, a `TransferFailure` with its protocol code…).
///
/// ```swift
/// do { try await writer.create(values) }
/// catch let e as LogbookError where e.code == .locked { retryLater() }
/// ```
/// `Logbook` (the package class `evctl` is built on) throws `LogbookError` for its own refusals and the
/// lower errors as they are; `LogbookError(wrapping:)` gives any of them its code.
public struct LogbookError: Error, CustomStringConvertible, Sendable, Equatable {
    /// What kind of refusal (the four `Logbook` itself makes; `code` covers every error).
    public enum Kind: Sendable, Equatable {
        /// The store is opened read-only.
        case readOnly
        /// The Logbook was closed.
        case closed
        /// What was named does not exist (a conflict, a peer).
        case notFound
        /// The request cannot be carried out as asked.
        case invalid
        /// Another layer failed underneath (`code` says how, `underlying` with what).
        case failed
    }

    /// What failed, to match on. Its text (`description`) is stable: scripts and logs may use it.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let description: String
        init(_ name: String) { description = name }

        /// The store was opened only to read.
        public static let readOnly = Code("read_only")
        /// The store was closed.
        public static let closed = Code("closed")
        /// What was named does not exist (a conflict, a peer, an item).
        public static let notFound = Code("not_found")
        /// The request cannot be carried out as asked.
        public static let invalid = Code("invalid")
        /// A change or an input line was refused (nothing was appended); `underlying` is the `InputError`.
        public static let invalidInput = Code("invalid_input")
        /// Another process held the writer lock past `Options.lockWait`.
        public static let locked = Code("locked")
        /// The path holds no store.
        public static let notAStore = Code("not_a_store")
        /// The path already holds a store.
        public static let alreadyExists = Code("already_exists")
        /// A file is damaged (a checksum, a hash chain, a gap): one of the store's, or one handed in
        /// (a bundle, a peer's frames); `underlying` names file and offset.
        public static let damaged = Code("damaged")
        /// This store's own log: an append waits because the log is behind what it committed
        /// (a damaged tail cut off, the log alone restored from a backup: a pull gives the rest
        /// back) or its tail is still arriving from a peer (`isRetryable` on the `LogError`
        /// underneath: the pull going on completes it); or frames of it handed in (a bundle, or a
        /// peer's when that ends a sync) were refused: unsigned ones it has no evidence of losing,
        /// or a fork of it (the store restored from a backup, then written to), which no pull
        /// mends. `underlying` says which.
        public static let ownLog = Code("own_log")
        /// A file was written by a newer format than this build reads.
        public static let unsupportedFormat = Code("unsupported_format")
        /// A write was refused for lack of space; nothing acknowledged was lost.
        public static let diskFull = Code("disk_full")
        /// A read or write of a file failed (`underlying` has the errno).
        public static let io = Code("io")
        /// The projection's database failed.
        public static let database = Code("database")
        /// A peer refused the token, or the token may not do this.
        public static let unauthorized = Code("unauthorized")
        /// The peer no longer holds the log from this store's cursor (it compacted).
        public static let cursorExpired = Code("cursor_expired")
        /// The peer could not be reached, or the link failed (retry later).
        public static let network = Code("network")
        /// A peer answered with what this store refuses (bad frames, another store's log); the
        /// `TransferFailure` underneath has the protocol's own code.
        public static let peer = Code("peer")
        /// The operation was cancelled.
        public static let cancelled = Code("cancelled")
        /// Anything else; `underlying` says what.
        public static let other = Code("other")
    }

    /// What kind of refusal.
    public var kind: Kind
    /// What failed, to match on.
    public var code: Code
    /// What was refused and why.
    public var message: String
    /// What to do about it.
    public var hint: String?
    /// The error that failed underneath, if this one wraps another.
    public var underlying: (any Error)?

    /// A refusal of `kind`.
    public init(_ kind: Kind, _ message: String, hint: String? = nil) {
        self.kind = kind
        self.message = message
        self.hint = hint
        switch kind {
        case .readOnly: code = .readOnly
        case .closed: code = .closed
        case .notFound: code = .notFound
        case .invalid: code = .invalid
        case .failed: code = .other
        }
    }

    /// `error` at the door: itself when it is a `LogbookError`, else wrapped with its code, its
    /// message and hint, and kept as `underlying`.
    public init(wrapping error: any Error) {
        if let e = error as? LogbookError {
            self = e
            return
        }
        self.init(.failed, String(describing: error))
        underlying = error
        switch error {
        case let e as InputError:
            code = .invalidInput
            message = e.description
        case let e as LogError:
            message = e.message
            hint = e.hint
            switch e.kindName {
            case "locked": code = .locked
            case "notAStore": code = .notAStore
            case "alreadyExists": code = .alreadyExists
            case "corrupt": code = .damaged
            case "ownLogDamaged", "ownLogRestoring": code = .ownLog
            case "gap", "clockAhead": code = .peer  // received frames this store refuses
            case "unsupportedFormat": code = .unsupportedFormat
            case "invalidInput": code = .invalidInput
            default: code = DiskSpace.isFull(e, near: e.file) ? .diskFull : .io
            }
            message = e.description
        case let f as TransferFailure:
            switch f.code {
            case .unauthorized, .forbidden: code = .unauthorized
            case .cursorExpired: code = .cursorExpired
            case .network, .timeout, .tls, .busy, .rateLimited, .serverError: code = .network
            case .ownLog: code = .ownLog  // the same refusal as a bundle's frames of it get
            case .cancelled: code = .cancelled
            case .local: code = .other
            default: code = .peer
            }
            message = f.description
        case let p as ProjectionError:
            switch p {
            case .notFound: code = .notFound
            case .invalid: code = .invalid
            case .damagedClocks: code = .damaged
            default: code = .database
            }
        case let d as DatabaseError:
            switch d.resultCode {
            case .SQLITE_CORRUPT, .SQLITE_NOTADB: code = .damaged
            case .SQLITE_FULL: code = .diskFull
            case .SQLITE_BUSY, .SQLITE_LOCKED: code = .locked
            default: code = .database
            }
        case let b as BundleError:
            switch b.kind {
            case .io: code = DiskSpace.isFull(error, near: nil) ? .diskFull : .io
            case .damaged: code = .damaged
            case .unsupportedVersion: code = .unsupportedFormat
            }
        case is CancellationError:
            code = .cancelled
        default:
            code = DiskSpace.isFull(error, near: nil) ? .diskFull : .other
        }
    }

    /// Runs `body`, turning whatever it throws into a `LogbookError`.
    static func door<T>(_ body: () throws -> T) throws(LogbookError) -> T {
        do { return try body() } catch { throw LogbookError(wrapping: error) }
    }

    /// Runs `body`, turning whatever it throws into a `LogbookError`.
    static func door<T>(_ body: () async throws -> T) async throws(LogbookError) -> T {
        do { return try await body() } catch { throw LogbookError(wrapping: error) }
    }

    /// Errors are equal when code, message and hint are (`underlying` is not compared).
    public static func == (a: LogbookError, b: LogbookError) -> Bool {
        a.kind == b.kind && a.code == b.code && a.message == b.message && a.hint == b.hint
    }

    /// The message, and the hint on its own line.
    public var description: String { message + (hint.map { "\nhint: \($0)" } ?? "") }
}

/// What a store holds and whom it syncs with.
public struct LogbookStatus: Sendable {
    /// Origins, events, segments and bytes of the log.
    public var log: StoreStatus
    /// The peers this store exchanged with.
    public var peers: [PeerState.Peer]
    /// Events the projection could not apply entirely because a newer build wrote them (empty
    /// when there is no projection yet, or it cannot be read).
    public var unread: [UnreadEvents]
}

extension Logbook {
    /// What the store holds (origins, events, segments, bytes), its peers, and the events the
    /// projection did not understand. Reads the projection file without writing to it.
    package func status() throws -> LogbookStatus {
        RegionRecorder.readsOutsideTheProjection()
        return LogbookStatus(log: try store.status(), peers: try peers(),
                      unread: (try? Projection.unreadEvents(at: Projection.path(for: store))) ?? [])
    }
}
