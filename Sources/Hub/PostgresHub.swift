import EventLog
import LogbookServer
import Foundation
import Logging
import NIOCore
import PostgresNIO
import Replicator

/// `evctl serve --hub postgres://…`: a serve node whose frames, cursors and origin owners live in
/// PostgreSQL, so that several nodes on one database are interchangeable (docs/HUB.md).
///
/// - Frames are stored unchanged, one per row (`logbook_frames`), each origin's chain state in
///   `logbook_origins`. A push locks the rows of its origins (`FOR UPDATE`), verifies its frames
///   against the tips it finds (`ReceivedFrames.verify`, as a store does) and writes them in one
///   transaction: two nodes given the same frames at once never fork or duplicate a log (the
///   later one finds them held), and the primary keys refuse what a bug would let through.
/// - Reads are enforced by row-level security: every transaction sets `logbook.readers` (the
///   users whose origins the principal may read) and `logbook.writer` (its user), and the
///   policies on both tables (enabled and forced, so they bind the tables' owner too) let a
///   transaction see and write only those rows.
/// - An append sent over several pushes is held as it comes and visible once its last frame is
///   in (`committed_seq`).
/// - Every principal must have a user (`--hub` refuses a tokens file with one that has not).
public final class PostgresHub: ReplicaBackend, @unchecked Sendable {
    public let policies: PolicySource
    public let metrics: ServerMetrics
    public let memory: MemoryBudget
    public let pushBytesMax: Int
    public let pageMax: PageLimits
    public let clockDriftMaxMs: UInt64
    /// This hub's replica id (kept in the database: the same for every node).
    public let hubID: ReplicaID
    /// How often a watch stream looks at the database for a moved cursor when no notification
    /// came (a notification lost while the listening connection was down).
    public var watchInterval: Duration = .seconds(5)
    /// The watch streams of this node, woken by notifications of moved users.
    let watchers = Watchers()
    /// Whether the hub holds any share's members: until it does, transactions skip looking up
    /// the readers' shares (a lookup per transaction cost a quarter of the throughput).
    let sharesSeen = SharesSeen()
    /// The membership logs as this node last read them (committed): a log that grows is read
    /// from there on, not again from its start.
    let membershipFolds = MembershipFolds()
    /// The users whose origins pushes through this node moved, notified in batches.
    let notifier: Notifier
    private var listening: Task<Void, Never>?
    let client: PostgresClient
    let logger: Logger
    private let running: Task<Void, Never>

    /// Connects to `database`, creates or migrates the schema, and returns a node ready to serve.
    /// - Throws: `HubError` when the database cannot be reached or its schema is not one this
    ///   build knows.
    public static func open(_ database: HubDatabase, policies: PolicySource, connectTimeoutSeconds: Int = 20, pageMax: PageLimits = .serverMax, pushBytesMax: Int = 64 << 20,
                            memoryBytesMax: Int = ServerConfiguration.defaultMemoryBytesMax,
                            clockDriftMaxMs: UInt64 = AppendOptions.defaultClockDriftMaxMs, logger: Logger) async throws -> PostgresHub {
        try HubPolicy.check(policies.current)
        try await HubSchema.probe(database, logger: logger)
        let client = PostgresClient(configuration: database.configuration(), backgroundLogger: logger)
        let running = Task { await client.run() }
        do {
            // A pool waits for a database that does not answer; a node starting says so instead.
            let id = try await withThrowingTaskGroup(of: ReplicaID?.self) { group in
                group.addTask {
                    let id = try await HubSchema.migrate(client, logger: logger, database: database)
                    try await HubSchema.checkRowLevelSecurity(client, logger: logger, database: database)
                    return id
                }
                group.addTask {
                    try await Task.sleep(for: .seconds(connectTimeoutSeconds))
                    return nil
                }
                defer { group.cancelAll() }
                guard let first = try await group.next(), let id = first else {
                    throw HubError("the hub's database \(database) did not answer within \(connectTimeoutSeconds) s (is it running, and the address, user and password right?)")
                }
                return id
            }
            let hub = PostgresHub(client: client, running: running, hubID: id, policies: policies, pageMax: pageMax, pushBytesMax: pushBytesMax,
                                  memoryBytesMax: memoryBytesMax, clockDriftMaxMs: clockDriftMaxMs, logger: logger)
            hub.listen()
            return hub
        } catch {
            running.cancel()
            throw error
        }
    }

    private init(client: PostgresClient, running: Task<Void, Never>, hubID: ReplicaID, policies: PolicySource, pageMax: PageLimits, pushBytesMax: Int,
                 memoryBytesMax: Int, clockDriftMaxMs: UInt64, logger: Logger) {
        self.client = client
        self.running = running
        self.hubID = hubID
        self.policies = policies
        self.pageMax = pageMax
        self.pushBytesMax = pushBytesMax
        self.memory = MemoryBudget(bytesMax: memoryBytesMax)
        self.metrics = ServerMetrics()
        self.clockDriftMaxMs = clockDriftMaxMs
        self.logger = logger
        notifier = Notifier(client: client, channel: Self.channel, logger: logger)
    }

    /// Closes the node's connections.
    public func close() {
        notifier.stop()
        listening?.cancel()
        running.cancel()
    }

    deinit {
        listening?.cancel()
        running.cancel()
    }

    /// `LISTEN logbook_moved` on a connection of the pool: a push through any node notifies the
    /// users whose origins it moved (`pg_notify` at commit), and this node wakes the watch streams
    /// that read one of them. Reconnects after a failure, waking every stream (a notification may
    /// have been missed).
    private func listen() {
        let client = self.client, logger = self.logger, watchers = self.watchers
        listening = Task {
            while !Task.isCancelled {
                do {
                    try await client.withConnection { conn in
                        try await conn.listen(on: Self.channel) { notifications in
                            watchers.wakeAll()
                            for try await n in notifications {
                                for user in n.payload.split(separator: ",") { watchers.wake(user: String(user)) }
                            }
                        }
                    }
                } catch {
                    if Task.isCancelled { break }
                    logger.warning("hub: listening for pushes failed (\(HubSchema.describe(error))); watch streams poll until it is back")
                }
                watchers.wakeAll()
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// The channel pushes notify.
    static let channel = "logbook_moved"

    // MARK: Transactions

    /// Who a transaction acts for: the users it may read, the user it may write as.
    struct Scope: Sendable {
        var readers: Set<String>
        var writer: String?
    }

    /// The scope of `principal`; every principal of a hub has a user.
    func scope(of principal: AccessPolicy.Principal) throws(EndpointError) -> Scope {
        guard let user = principal.user, let readers = principal.readableUsers else {
            throw EndpointError(403, "principal \"\(principal.name)\" has no user: a hub serves only principals with a \"user\" (see docs/HUB.md)")
        }
        var mayPush = true
        if case .origins(let set) = principal.push, set.isEmpty { mayPush = false }
        return Scope(readers: readers, writer: mayPush ? user : nil)
    }

    /// Runs `body` in a transaction whose row-level security is `scope`: the settings are local to
    /// the transaction, so a connection goes back to the pool with no user set. Errors thrown by
    /// `body` come out as they are (after a rollback).
    func transaction<T: Sendable>(_ scope: Scope, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        let readers = scope.readers.sorted().joined(separator: ",")
        let writer = scope.writer ?? ""
        let logger = self.logger, seen = sharesSeen
        return try await client.withConnection { conn in
            try await conn.query("BEGIN", logger: logger)
            do {
                // The shares a replica of the readers is a member of, in the same statement (no
                // round trip more): the second read policy of each table (HubSchema.sharedVisible).
                if try await seen.mayExist(conn, logger: logger) {
                    try await conn.query("""
                        SELECT set_config('logbook.readers', \(readers), true), set_config('logbook.writer', \(writer), true),
                            set_config('logbook.taking', '', true), set_config('logbook.purging', '', true),
                            set_config('logbook.shares', coalesce((SELECT string_agg(DISTINCT m.share::text, ',') FROM logbook_replica_users r
                                JOIN logbook_share_members m ON m.replica = r.replica WHERE r.owner = ANY (string_to_array(\(readers), ','))), ''), true)
                        """, logger: logger)
                } else {
                    try await conn.query("""
                        SELECT set_config('logbook.readers', \(readers), true), set_config('logbook.writer', \(writer), true),
                            set_config('logbook.taking', '', true), set_config('logbook.purging', '', true)
                        """, logger: logger)
                }
                let r = try await body(conn)
                try await conn.query("COMMIT", logger: logger)
                return r
            } catch {
                _ = try? await conn.query("ROLLBACK", logger: logger)
                throw error
            }
        }
    }

    /// Runs a database step, turning a failure to reach the database into a 503 (the client retries).
    func db<T: Sendable>(_ what: String, _ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let e as EndpointError { throw e } catch let e as LogError { throw e } catch {
            logger.error("hub: \(what) failed: \(String(reflecting: error))")
            throw EndpointError(503, "the hub's database did not answer (\(what)); try again", retryAfter: 1)
        }
    }

    /// The committed cursor the transaction may see. Filtered here too, not only by row-level
    /// security: one layer failing (a policy dropped, RLS switched off by hand) leaks nothing.
    /// Both say what the read policies say (HubSchema): an origin of the scope's users, or a
    /// share's log of which a replica of one of its users is a member (two index-led branches).
    static func cursor(_ conn: PostgresConnection, _ scope: Scope, logger: Logger) async throws -> ReplicationCursor {
        var entries: [ReplicaID: Seq] = [:]
        let readers = scope.readers.sorted()
        // Two index-led branches (the owner index; the share members through their users), so
        // the visibility test runs only on candidate rows, not on every origin of the hub.
        let rows = try await conn.query("""
            SELECT o.origin, o.committed_seq FROM logbook_origins o
            WHERE o.owner = ANY(\(readers)) AND o.committed_seq > 0
            UNION
            SELECT o.origin, o.committed_seq FROM logbook_origins o
            WHERE o.share = ANY (string_to_array(current_setting('logbook.shares', true), ',')::uuid[]) AND o.committed_seq > 0
            """, logger: logger)
        for try await (origin, seq) in rows.decode((UUID, Int64).self) where seq > 0 {
            entries[ReplicaID(rawValue: origin)] = Seq(UInt64(seq))
        }
        return ReplicationCursor(entries)
    }

    // MARK: Reads

    public func metricsText(principal p: AccessPolicy.Principal) async -> String {
        guard let scope = try? scope(of: p) else { return metrics.render(current: nil, memory: memory, scope: .init(origins: { _ in false }, user: "")) }
        let logger = self.logger
        let current = try? await transaction(scope) { try await Self.cursor($0, scope, logger: logger) }
        let held = Set(current?.origins ?? [])
        return metrics.render(current: current, memory: memory, scope: .init(origins: { held.contains($0) }, user: p.user ?? ""))
    }

    public func cursor(principal: AccessPolicy.Principal) async throws -> (replica: ReplicaID, cursor: ReplicationCursor) {
        if let d = AccessPolicy.checkPull(principal) { throw EndpointError(d.status, d.message) }
        let scope = try scope(of: principal)
        let logger = self.logger
        let c = try await db("reading the cursor") { try await transaction(scope) { try await Self.cursor($0, scope, logger: logger) } }
        return (hubID, c)
    }

    /// The committed frames past `since` the scope may read, within `limits`, origin by origin
    /// in seq order (as a store's page), with the cursor they were read under: only origins the
    /// cursor (filtered as well as bound by row-level security) names are read.
    func readPage(_ scope: Scope, since: ReplicationCursor, limits: PageLimits, framesOnly: Bool) async throws -> (OutgoingPage, ReplicationCursor) {
        let logger = self.logger
        let (frames, next, more, held) = try await db("reading frames") {
            try await transaction(scope) { conn -> ([ByteBuffer], ReplicationCursor, Bool, ReplicationCursor) in
                let held = try await Self.cursor(conn, scope, logger: logger)
                var frames: [ByteBuffer] = []
                var next = since
                var bytes = 0, raw = 0
                var more = false
                for origin in held.origins where held[origin] > since[origin] {
                    if bytes >= limits.maxBytes || frames.count >= limits.maxFrames || raw >= limits.maxRawBytes {
                        more = true
                        break
                    }
                    var after = Int64(since[origin].rawValue)
                    let through = Int64(held[origin].rawValue)
                    // Rows are fetched in batches that start small and double (to 512): a page
                    // found full partway through a batch drops the rest of it, so a first batch
                    // of 512 frames (each up to 16 MiB) read for a page of one byte was a lever
                    // for any client; now what is dropped is at most about what was taken.
                    var batchSize = 8
                    while after < through {
                        let batch = min(batchSize, limits.maxFrames - frames.count + 1)
                        batchSize = min(512, batchSize * 2)
                        let rows = try await conn.query("""
                            SELECT last_seq, frame FROM logbook_frames
                            WHERE origin = \(origin.rawValue) AND last_seq > \(after) AND last_seq <= \(through)
                            ORDER BY first_seq LIMIT \(batch)
                            """, logger: logger)
                        var got = 0
                        for try await (last, frame) in rows.decode((Int64, ByteBuffer).self) {
                            got += 1
                            // A page ends before a frame that would take what its frames hold
                            // uncompressed past the bound, unless it is the page's first.
                            let frameRaw = frame.withUnsafeReadableBytes { FrameHeader.rawBytes(of: $0) }
                            if bytes >= limits.maxBytes || frames.count >= limits.maxFrames || (!frames.isEmpty && raw + frameRaw > limits.maxRawBytes) {
                                more = true
                                continue
                            }
                            frames.append(frame)
                            raw += frameRaw
                            bytes += frame.readableBytes
                            after = last
                        }
                        if more || got == 0 { break }
                    }
                    if after > Int64(since[origin].rawValue) { next = next.merged(with: ReplicationCursor([origin: Seq(UInt64(after))])) }
                    if more { break }
                }
                return (frames, next, more, held)
            }
        }
        let page = try OutgoingPage(framesOnly: framesOnly) { put in
            for f in frames { try f.withUnsafeReadableBytes { try put($0) } }
            return (next, more)
        }
        return (page, held)
    }

    public func reservedPage(principal: AccessPolicy.Principal, since token: String?, maxBytes: String?, maxFrames: String?,
                             peer: String?) async throws -> (page: OutgoingPage, cursor: ReplicationCursor, reservation: MemoryBudget.Reservation) {
        let (since, limits) = try PageRequest.check(principal: principal, since: token, maxBytes: maxBytes, maxFrames: maxFrames, pageMax: pageMax)
        let scope = try scope(of: principal)
        let reservation = try await memory.reserve(OutgoingPage.bytesBound(limits), holder: memoryHolder(principal))
        do {
            let (page, held) = try await readPage(scope, since: since, limits: limits, framesOnly: false)
            reservation.shrink(to: page.frameBytes + 4 * page.frames + (1 << 16))
            served(principal, peer: peer, frames: page.frames, bytes: page.frameBytes, since: since, at: page.next, held: held)
            return (page, held, reservation)
        } catch {
            reservation.release()
            throw error
        }
    }

    public func streamedPage(principal: AccessPolicy.Principal, since token: String?, maxBytes: String?, maxFrames: String?,
                             peer: String?) async throws -> StreamedPage {
        let (since, limits) = try PageRequest.check(principal: principal, since: token, maxBytes: maxBytes, maxFrames: maxFrames, pageMax: pageMax)
        let scope = try scope(of: principal)
        let logger = self.logger
        let holder = try await db("reading the cursor") { try await transaction(scope) { try await Self.cursor($0, scope, logger: logger) } }
        var slice = limits
        slice.maxBytes = min(limits.maxBytes, OutgoingPage.chunkBytes)
        let reservation = try await memory.reserve(OutgoingPage.bytesBound(slice), holder: memoryHolder(principal))
        return StreamedPage(since: since, limits: limits, reservation: reservation, holder: holder, slice: { from, sliceLimits in
            try await self.readPage(scope, since: from, limits: sliceLimits, framesOnly: true).0
        }, finished: { at, frames, bytes in
            self.served(principal, peer: peer, frames: frames, bytes: bytes, since: since, at: at, held: holder)
        })
    }

    private func served(_ principal: AccessPolicy.Principal, peer: String?, frames: Int, bytes: Int, since: ReplicationCursor, at: ReplicationCursor,
                        held: ReplicationCursor) {
        metrics.served(frames: frames, bytes: bytes, cursor: held)
        if let peer, let id = ReplicaID(peer) {
            metrics.peer("\(principal.name)/\(id)", user: principal.user, lag: at.merged(with: since).lag(behind: held))
        }
    }

    /// The principal's cursor now and whenever it moves: read again when a push through any node
    /// notifies one of its users, and at least every `watchInterval`.
    public func watch(principal: AccessPolicy.Principal) throws -> AsyncStream<ReplicationCursor> {
        if let d = AccessPolicy.checkPull(principal) { throw EndpointError(d.status, d.message) }
        let scope = try scope(of: principal)
        let logger = self.logger, interval = watchInterval, watchers = self.watchers
        // Only the newest cursor matters: a watcher that does not read holds one, not every move.
        return AsyncStream(bufferingPolicy: .bufferingNewest(1)) { continuation in
            let wakeup = watchers.add(readers: scope.readers)
            let task = Task {
                var last: ReplicationCursor?
                while !Task.isCancelled {
                    if let c = try? await self.transaction(scope, { try await Self.cursor($0, scope, logger: logger) }), c != last {
                        continuation.yield(c)
                        last = c
                    }
                    await wakeup.wait(upTo: interval)
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in
                task.cancel()
                watchers.remove(wakeup)
                wakeup.signal()
            }
        }
    }

    public func stopWatching() {}

    public func snapshot(principal: AccessPolicy.Principal) async throws -> SnapshotFile {
        if let d = AccessPolicy.checkPull(principal) { throw EndpointError(d.status, d.message) }
        throw EndpointError(403, "a hub serves no snapshots: it keeps every origin's log whole, so a replica pulls its users' origins frame by frame")
    }

    // MARK: Push

    public func push(principal: AccessPolicy.Principal, body: [UInt8], peer: String?) async throws -> PushAnswer {
        let request = try PushRequest.check(principal: principal, body: body, pushBytesMax: pushBytesMax)
        let (frames, pushed, denied) = (request.frames, request.origins, request.denied)
        let origins = Set(pushed)
        let scope = try scope(of: principal)
        guard let user = scope.writer else { throw EndpointError(403, "principal \"\(principal.name)\" may not push to this server") }
        let logger = self.logger, drift = clockDriftMaxMs, name = principal.name, seen = sharesSeen, folds = membershipFolds
        let (answer, wake, read) = try await db("receiving frames") {
            try await transaction(scope) { conn -> (PushAnswer, [String], [ReplicaID: ShareDirectory.Fold]) in
                // Each origin claimed (the first push of an origin makes it its user's) and locked,
                // in one order on every node, so concurrent pushes queue instead of deadlocking.
                // No conflict target: two nodes claiming a new origin at once conflict on both of
                // its unique keys, and a target naming one of them lets the other raise.
                var tips: [ReplicaID: LogTip] = [:]
                var committed: [ReplicaID: Int64] = [:]
                // Share logs another user pushed first (a member pushing what it pulled, say a
                // removed member whose cursor here no longer covers them): left out of the push,
                // not refused, and the answer's cursor moves the client past them.
                var foreignShareLogs: [ReplicaID: Seq] = [:]
                // The frames of each origin, grouped once (a push may carry many origins).
                var byOrigin: [ReplicaID: [[UInt8]]] = [:]
                for f in frames { if let h = FrameHeader(parsing: f) { byOrigin[h.origin, default: []].append(f) } }
                let writers = PushRequest.shareWriters(frames)
                // How far the hub holds a share log whose take by its writer's user was undone.
                var writerHeld: [ReplicaID: Int64] = [:]
                // Share logs to hand to this user once the page is verified.
                var taking: [ReplicaID] = []
                /// Whether `own`, frames of the share's log `origin` (of `share`, up to `last`)
                /// that this push does not write, are held here: left out then.
                func held(_ origin: ReplicaID, _ own: [[UInt8]], last: Seq, share: UUID?) async throws -> Bool {
                    // A purged share's sealed log: left out, as held (docs/SHARING.md, "Purge").
                    if let share, own.first.flatMap(FrameHeader.init(parsing:))?.sealed == true,
                       try await Self.isPurged(ShareID(rawValue: share), conn, logger: logger) {
                        return true
                    }
                    // Only frames their writer signed, verified (every one, whatever their
                    // seqs) before the log's seqs are read: a made-up frame is refused, and
                    // neither its answer nor its answer's time says how far the log goes. A
                    // writer's frames at or below the hub's are held here, or were never its
                    // to show (the writer signed two frames of one seq).
                    let signed = own.allSatisfy(FrameInspector.isSignedShareFrame)
                    var held: Int64 = 0
                    for try await c in try await conn.query("SELECT committed_seq FROM logbook_share_logs WHERE origin = \(origin.rawValue)", logger: logger).decode(Int64.self) {
                        held = c
                    }
                    held = max(held, writerHeld[origin] ?? 0)
                    return signed && held > 0 && Int64(last.rawValue) <= held
                }
                func shareOf(_ own: [[UInt8]], _ origin: ReplicaID) -> (last: Seq?, share: UUID?) {
                    let last = Self.shareLogFrames(own, of: origin)
                    return (last, last == nil ? nil : own.first.flatMap { FrameInspector.share(of: $0)?.rawValue })
                }
                // Share logs the principal may not push first, before any claim or lock (as a
                // store's hub refuses them before looking at owners): left out when held here,
                // else refused for the right.
                for origin in origins.sorted() {
                    guard let refusal = denied[origin] else { continue }
                    let own = byOrigin[origin] ?? []
                    let (shareLog, share) = shareOf(own, origin)
                    guard let last = shareLog, try await held(origin, own, last: last, share: share) else { throw refusal }
                    foreignShareLogs[origin] = last
                }
                for origin in origins.sorted() where denied[origin] == nil {
                    // A share's log says so from its first row (its kind derives from its id).
                    let own = byOrigin[origin] ?? []
                    let (shareLog, share) = shareOf(own, origin)
                    // A replica belongs to the user that owns its own log (the first to push it),
                    // noted in the same statement as the claim.
                    // A purged share's sealed log is not claimed again (the statement sees a purge
                    // that committed while it waited for the purge's lock).
                    try await conn.query("""
                        WITH claimed AS (
                            INSERT INTO logbook_origins (origin, owner, claimed_by, share)
                            SELECT \(origin.rawValue), \(user), \(name), \(share)
                            WHERE \(share)::uuid IS NULL OR NOT EXISTS (
                                SELECT 1 FROM logbook_purged_shares p WHERE p.share = \(share) AND p.membership_origin <> \(origin.rawValue))
                            ON CONFLICT DO NOTHING RETURNING origin, owner, share)
                        INSERT INTO logbook_replica_users (replica, owner) SELECT origin, owner FROM claimed WHERE share IS NULL
                        ON CONFLICT DO NOTHING
                        """, logger: logger)
                    let rows = try await conn.query("""
                        SELECT committed_seq, held_seq, held_hlc, held_hash FROM logbook_origins WHERE origin = \(origin.rawValue) AND owner = \(user) FOR UPDATE
                        """, logger: logger)
                    func take(_ rows: PostgresRowSequence) async throws -> Bool {
                        var found = false
                        for try await (c, seq, hlc, hash) in rows.decode((Int64, Int64, Int64, ByteBuffer).self) {
                            guard c >= 0, seq >= c, hash.readableBytes == 32 else { throw HubError("origin \(origin): its row in logbook_origins is damaged") }
                            found = true
                            committed[origin] = c
                            tips[origin] = LogTip(lastSeq: Seq(UInt64(seq)), lastHLC: HLC(rawValue: UInt64(bitPattern: hlc)),
                                                  lastHash: FrameHash(bytes: Array(hash.readableBytesView)))
                        }
                        return found
                    }
                    var found = try await take(rows)
                    // A share's log another user pushed first is its writer's (docs/SHARING.md,
                    // "Hubs and snapshots"): when this page's frames of it name, as the key that
                    // signs them, a replica of this user, its row and frames become this user's.
                    // Their signatures are verified below, before the row changes hands.
                    // Only by a page that carries a frame past what the hub holds of it: the
                    // receive check takes frames at or below the held tip as held without looking
                    // at them, so a page of those alone proves nothing. Such a page takes
                    // nothing, and is judged as any other user's: left out when its writer's.
                    if !found, shareLog != nil, let w = writers[origin], try await Self.owner(of: w, conn, logger: logger) == user {
                        // Its row read and locked now; handed over only once the page's frames are
                        // verified (below): a refused page rewrites none of the log's rows.
                        try await conn.query("SELECT set_config('logbook.taking', \(origin.description), true)", logger: logger)
                        found = try await take(try await conn.query("""
                            SELECT committed_seq, held_seq, held_hlc, held_hash FROM logbook_origins WHERE origin = \(origin.rawValue) AND share IS NOT NULL FOR UPDATE
                            """, logger: logger))
                        try await conn.query("SELECT set_config('logbook.taking', '', true)", logger: logger)
                        let heldTip = tips[origin]?.lastSeq ?? Seq(0)
                        if found && !own.contains(where: { FrameHeader(parsing: $0).map { $0.lastSeq > heldTip } ?? false }) {
                            found = false
                            tips[origin] = nil
                            committed[origin] = nil
                            // Its writer's frames the hub holds, an append another user began
                            // relaying included, are left out below as far as the held tip:
                            // the answer moves the writer past them, and its next page carries
                            // a frame past the tip, which takes the log.
                            writerHeld[origin] = Int64(heldTip.rawValue)
                        } else if found {
                            taking.append(origin)
                        }
                    }
                    // Claimed by another user: its row is not visible to this one. Of a share's
                    // log, what the hub holds already is left out (as a store's hub does).
                    if !found, let last = shareLog, try await held(origin, own, last: last, share: share) {
                        foreignShareLogs[origin] = last
                        continue
                    }
                    guard found else { throw ReplicaEndpoint.foreignOrigin(origin, principal: principal, user: user) }
                }
                let frames = foreignShareLogs.isEmpty ? frames : frames.filter { f in
                    FrameHeader(parsing: f).map { foreignShareLogs[$0.origin] == nil } ?? true
                }
                // Owners first (as a store's hub answers), then each event's actor.
                try ReplicaEndpoint.checkActors(frames, principal: principal, user: user)
                let checked: ReceivedFrames
                do {
                    checked = try ReceivedFrames.verify(frames, nowMillis: Self.wallNow(), clockDriftMaxMs: drift,
                                                        requireSignatures: AppendOptions.defaultRequireSignatures, tip: { tips[$0] ?? .empty })
                } catch let e as LogError {
                    throw EndpointError(422, "frames refused, nothing was written: \(e.description)", code: FailureCode(refusal: e), seqs: e.seqs)
                }
                // The share logs this user's writer takes, now that a frame past each one's held
                // tip verified and links to it: the row, and its frames by the cascade, are this
                // user's before this page's frames of it are written.
                for origin in taking {
                    try await conn.query("SELECT set_config('logbook.taking', \(origin.description), true)", logger: logger)
                    try await conn.query("""
                        UPDATE logbook_origins SET owner = \(user), claimed_by = \(name) WHERE origin = \(origin.rawValue) AND share IS NOT NULL
                        """, logger: logger)
                    try await conn.query("SELECT set_config('logbook.taking', '', true)", logger: logger)
                }
                var result = ReceiveResult()
                result.alreadyHeld = checked.alreadyHeld
                var pendingFrames: [ReplicaID: (frames: Int, events: Int)] = [:]
                for a in checked.accepted {
                    let h = a.header
                    var buffer = ByteBuffer()
                    buffer.writeBytes(frames[a.index])
                    let share: UUID? = h.shared ? FrameInspector.share(of: frames[a.index])?.rawValue : nil
                    try await conn.query("""
                        INSERT INTO logbook_frames (origin, first_seq, last_seq, owner, frame, share)
                        VALUES (\(h.origin.rawValue), \(Int64(h.baseSeq.rawValue)), \(Int64(h.lastSeq.rawValue)), \(user), \(buffer), \(share))
                        """, logger: logger)
                    var p = pendingFrames[h.origin] ?? (0, 0)
                    p.frames += 1
                    p.events += Int(h.count)
                    if h.continues {
                        pendingFrames[h.origin] = p
                    } else {
                        pendingFrames[h.origin] = nil
                        result.frames += p.frames
                        result.events += p.events
                        result.tips[h.origin] = h.lastSeq
                        committed[h.origin] = Int64(h.lastSeq.rawValue)
                    }
                }
                result.incomplete = pendingFrames.values.reduce(0) { $0 + $1.frames }
                for (origin, tip) in checked.tips {
                    try await conn.query("""
                        UPDATE logbook_origins SET held_seq = \(Int64(tip.lastSeq.rawValue)), held_hlc = \(Int64(bitPattern: tip.lastHLC.rawValue)),
                            held_hash = \(ByteBuffer(bytes: tip.lastHash.bytes)), committed_seq = \(committed[origin] ?? 0)
                        WHERE origin = \(origin.rawValue)
                        """, logger: logger)
                }
                let (wake, read) = try await Self.noteShares(conn, frames: frames, accepted: checked.accepted.map(\.index), committed: committed, seen: seen,
                                                             folds: folds, logger: logger)
                // An append still open is shown to the push that carried its origin (this user's),
                // as far as the hub holds it and no further than this page's own last frame of
                // it: the cursor holds committed appends only, and a page collected past it
                // began again at the append's start, so an append longer than a page was never
                // taken (three pages without progress). Its frames are held in the database;
                // readers still see it only once whole.
                var open: [ReplicaID: Seq] = [:]
                for (origin, own) in byOrigin {
                    guard let before = tips[origin], let last = own.compactMap({ FrameHeader(parsing: $0)?.lastSeq }).max() else { continue }
                    open[origin] = min(checked.tips[origin]?.lastSeq ?? before.lastSeq, last)
                }
                let cursor = try await Self.cursor(conn, scope, logger: logger).merged(with: ReplicationCursor(foreignShareLogs))
                    .merged(with: ReplicationCursor(open))
                return (PushAnswer(result: result, cursor: cursor), wake, read)
            }
        }
        // Kept once committed: a transaction rolled back leaves the folds as they were.
        folds.keep(read)
        // Every node listening wakes its watch streams of this user (after the commit, batched),
        // and of the users of the members of the shares whose logs moved.
        if !answer.result.tips.isEmpty { notifier.moved(user) }
        for u in wake where u != user { notifier.moved(u) }
        metrics.received(frames: answer.result.frames, events: answer.result.events, bytes: body.count, cursor: answer.cursor)
        if let peer, let id = ReplicaID(peer) { metrics.peer("\(principal.name)/\(id)", user: principal.user, lag: nil) }
        return answer
    }

    /// The user a replica belongs to here (the owner of its own log), if any.
    static func owner(of replica: ReplicaID, _ conn: PostgresConnection, logger: Logger) async throws -> String? {
        var owner: String?
        for try await o in try await conn.query("SELECT owner FROM logbook_replica_users WHERE replica = \(replica.rawValue)", logger: logger).decode(String.self) {
            owner = o
        }
        return owner
    }

    /// The last seq `frames` offer of `origin` when they are a share's log (a share block and an
    /// origin that derives from it and the key); nil otherwise.
    static func shareLogFrames(_ frames: [[UInt8]], of origin: ReplicaID) -> Seq? {
        var last: Seq?
        for f in frames {
            guard let h = FrameHeader(parsing: f), h.origin == origin else { continue }
            guard h.shared, FrameInspector.isWellFormedShareFrame(f) else { return nil }
            last = max(last ?? h.lastSeq, h.lastSeq)
        }
        return last
    }

    /// Keeps the share tables in step with frames just written (docs/SHARING.md, "Hubs"): which
    /// origins are a share's logs and how far each is committed, and, when a membership log grew,
    /// the share's members, from the committed log as verified (a log whose first record does not
    /// prove the share changes nothing). A membership log is read from where `folds` left it
    /// (its records are a fold in seq order), so a log's life is not quadratic in its records.
    /// - Returns: the users of the members of the shares whose logs moved, to wake; and the
    ///   membership logs as read, to keep once the transaction commits.
    static func noteShares(_ conn: PostgresConnection, frames: [[UInt8]], accepted: [Int], committed: [ReplicaID: Int64], seen: SharesSeen,
                           folds: MembershipFolds, logger: Logger) async throws -> ([String], [ReplicaID: ShareDirectory.Fold]) {
        var read: [ReplicaID: ShareDirectory.Fold] = [:]
        var noted = false
        var shareOf: [ReplicaID: (share: ShareID, membership: Bool)] = [:]
        for i in accepted {
            guard let h = FrameHeader(parsing: frames[i]) else { continue }
            if h.shared, let share = FrameInspector.share(of: frames[i]) { shareOf[h.origin] = (share, !h.sealed) }
        }
        guard !shareOf.isEmpty else { return ([], [:]) }
        for (origin, s) in shareOf.sorted(by: { $0.key < $1.key }) {
            let through = committed[origin] ?? 0
            try await conn.query("""
                INSERT INTO logbook_share_logs (origin, share, committed_seq) VALUES (\(origin.rawValue), \(s.share.rawValue), \(through))
                ON CONFLICT (origin) DO UPDATE SET committed_seq = GREATEST(logbook_share_logs.committed_seq, excluded.committed_seq)
                """, logger: logger)
            guard s.membership else { continue }
            // Where this node last read the log, unless it read past what this transaction sees.
            let known = folds[origin].flatMap { $0.through.rawValue <= UInt64(max(0, through)) ? $0 : nil }
            let after = Int64(clamping: known?.through.rawValue ?? 0)
            var events: [Event] = []
            let rows = try await conn.query("SELECT frame FROM logbook_frames WHERE origin = \(origin.rawValue) AND first_seq > \(after) AND last_seq <= \(through) ORDER BY first_seq", logger: logger)
            var whole = true
            for try await frame in rows.decode(ByteBuffer.self) {
                guard whole, let (_, e) = try? frame.withUnsafeReadableBytes({ try FrameInspector.eventsUnlessSealed(in: $0) }) else {
                    whole = false  // read to the end (the rows must be drained), then leave the members as they are
                    continue
                }
                events += e
            }
            guard whole, let fold = ShareDirectory.state(share: s.share, origin: origin, continuing: known, events: events) else { continue }
            read[origin] = fold.withoutKeys()
            let state = fold.state
            try await conn.query("DELETE FROM logbook_share_members WHERE share = \(s.share.rawValue)", logger: logger)
            noted = true
            for m in state.members.keys.sorted() {
                try await conn.query("INSERT INTO logbook_share_members (share, replica) VALUES (\(s.share.rawValue), \(m.rawValue))", logger: logger)
            }
        }
        let shares = Array(Set(shareOf.values.map { $0.share.rawValue }))
        if noted { seen.note() }
        var users: [String] = []
        let rows = try await conn.query("""
            SELECT DISTINCT r.owner FROM logbook_share_members m JOIN logbook_replica_users r ON r.replica = m.replica WHERE m.share = ANY(\(shares))
            """, logger: logger)
        for try await u in rows.decode(String.self) { users.append(u) }
        return (users, read)
    }

    static func wallNow() -> UInt64 {
        let ms = Date().timeIntervalSince1970 * 1000
        return ms <= 0 ? 0 : min(UInt64(ms), HLC.wallMillisMax)
    }
}

/// Sends the users whose origins moved on `channel`, at most every `every`, several users per
/// notification (comma-separated, as user names have no comma). One `pg_notify` per push cost
/// about 30% of a hub's pushes per second under load (each is a transaction that wakes every
/// listening backend); batching costs a follower at most `every` more.
/// Whether the hub's database holds any share's members, as a node last saw: once it does, for
/// good; until then asked again at most every `recheckSeconds` (a share another node noted is
/// served through this one within that), and set at once when this node notes one.
final class SharesSeen: @unchecked Sendable {
    private let lock = Lock()
    private var seen = false
    private var checkedAt: Double = -.infinity
    static let recheckSeconds = 5.0

    func note() { lock.withLock { seen = true } }

    func mayExist(_ conn: PostgresConnection, logger: Logger) async throws -> Bool {
        let now = Date().timeIntervalSince1970
        let ask: Bool = lock.withLock {
            if seen { return false }
            if now - checkedAt < Self.recheckSeconds { return false }
            checkedAt = now
            return true
        }
        if ask {
            for try await found in try await conn.query("SELECT EXISTS (SELECT 1 FROM logbook_share_members)", logger: logger).decode(Bool.self) where found {
                note()
            }
        }
        return lock.withLock { seen }
    }
}

/// The membership logs as a node last read them in a committed transaction
/// (`PostgresHub.noteShares`). Safe to use from any thread.
final class MembershipFolds: @unchecked Sendable {
    private let lock = Lock()
    private var folds: [ReplicaID: ShareDirectory.Fold] = [:]

    subscript(origin: ReplicaID) -> ShareDirectory.Fold? { lock.withLock { folds[origin] } }

    /// Keeps each of `read` that goes further than what is kept (pushes commit in any order).
    func keep(_ read: [ReplicaID: ShareDirectory.Fold]) {
        guard !read.isEmpty else { return }
        lock.withLock {
            for (o, f) in read where folds[o].map({ f.through > $0.through }) ?? true { folds[o] = f }
        }
    }
}

final class Notifier: @unchecked Sendable {
    private let lock = Lock()
    private var pending: Set<String> = []
    private var flushing = false
    private var stopped = false
    let client: PostgresClient
    let channel: String
    let logger: Logger
    let every: Duration = .milliseconds(25)
    /// A notification's payload is limited to 8000 bytes.
    static let payloadBytesMax = 7900

    init(client: PostgresClient, channel: String, logger: Logger) {
        self.client = client
        self.channel = channel
        self.logger = logger
    }

    func moved(_ user: String) {
        let start: Bool = lock.withLock {
            pending.insert(user)
            if flushing || stopped { return false }
            flushing = true
            return true
        }
        if start { Task { await self.flush() } }
    }

    func stop() { lock.withLock { stopped = true } }

    private func flush() async {
        try? await Task.sleep(for: every)
        let users: [String] = lock.withLock {
            defer {
                pending = []
                flushing = false
            }
            return pending.sorted()
        }
        var batch: [String] = [], bytes = 0
        func send() async {
            guard !batch.isEmpty else { return }
            let payload = batch.joined(separator: ",")
            do { try await client.query("SELECT pg_notify(\(channel), \(payload))", logger: logger) } catch {
                logger.warning("hub: notifying pushes failed (\(HubSchema.describe(error))); followers see them at their next look")
            }
            batch = []
            bytes = 0
        }
        for u in users {
            if bytes + u.utf8.count + 1 > Self.payloadBytesMax { await send() }
            batch.append(u)
            bytes += u.utf8.count + 1
        }
        await send()
    }
}

/// The watch streams of a node, by the users they read (a notification names users; waking
/// them looks up those users only, whatever the number of streams).
final class Watchers: @unchecked Sendable {
    private let lock = Lock()
    private var byUser: [String: [ObjectIdentifier: Wakeup]] = [:]
    private var readers: [ObjectIdentifier: Set<String>] = [:]

    func add(readers users: Set<String>) -> Wakeup {
        let w = Wakeup()
        let id = ObjectIdentifier(w)
        lock.withLock {
            readers[id] = users
            for u in users { byUser[u, default: [:]][id] = w }
        }
        return w
    }

    func remove(_ w: Wakeup) {
        let id = ObjectIdentifier(w)
        lock.withLock {
            for u in readers.removeValue(forKey: id) ?? [] {
                byUser[u]?[id] = nil
                if byUser[u]?.isEmpty == true { byUser[u] = nil }
            }
        }
    }

    func wake(user: String) {
        for w in lock.withLock({ Array((byUser[user] ?? [:]).values) }) { w.signal() }
    }

    func wakeAll() {
        for w in lock.withLock({ byUser.values.flatMap(\.values) }) { w.signal() }
    }
}

/// Wakes one waiting task; a signal with nobody waiting is kept for the next wait.
final class Wakeup: @unchecked Sendable {
    private let lock = Lock()
    private var pending = false
    private var waiter: CheckedContinuation<Void, Never>?

    func signal() {
        let w: CheckedContinuation<Void, Never>? = lock.withLock {
            if let w = waiter {
                waiter = nil
                return w
            }
            pending = true
            return nil
        }
        w?.resume()
    }

    /// Returns at the next signal, or after `limit`.
    func wait(upTo limit: Duration) async {
        let timer = Task {
            guard (try? await Task.sleep(for: limit)) != nil else { return }  // cancelled: woken already
            self.signal()
        }
        defer { timer.cancel() }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now: Bool = lock.withLock {
                if pending {
                    pending = false
                    return true
                }
                waiter = c
                return false
            }
            if now { c.resume() }
        }
    }
}

/// What a hub asks of its tokens file.
public enum HubPolicy {
    /// Every principal must have a user (a hub has no unscoped reader or relay).
    public static func check(_ policy: AccessPolicy) throws {
        if policy.isOpen { throw HubError("--hub needs --tokens: every principal of a hub has a user, and an open server has no principals") }
        if let p = policy.principals.first(where: { $0.user == nil }) {
            throw HubError("--hub: principal \"\(p.name)\" has no \"user\"; on a hub every principal acts for a user")
        }
    }
}
