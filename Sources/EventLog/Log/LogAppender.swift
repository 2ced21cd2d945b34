import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Limits and intervals of a writer. Defaults suit the sample workload.
public struct AppendOptions: Sendable {
    /// A segment is sealed and a new one started at the first append boundary past this size.
    public var segmentBytesMax = 64 << 20
    /// Events per frame at most.
    public var frameEventsMax = 1000
    /// Approximate encoded bytes per frame at most (a frame is cut before it grows past this).
    public var frameRawBytesMax = 1 << 20
    /// The active segment's index file is rewritten after this many new bytes, bounding the
    /// frames that opening after a crash must scan.
    public var indexCheckpointBytes = 4 << 20
    /// The event-id index records its high-water mark at least this often (in events).
    public var idCheckpointEvents: UInt64 = 1 << 16
    /// How many received origins' logs stay open at once (each holds two descriptors): past
    /// it, the least recently used are closed after a receive and reopened when next needed,
    /// so a hub receiving thousands of origins does not run out of descriptors.
    public var receivedWritersOpenMax = 1024
    /// How far ahead of this machine's wall clock a received frame's hlc may be, in
    /// milliseconds; frames further ahead are refused (their origin waits until the clock
    /// catches up), so one peer's broken clock cannot drag every replica's clock to the end of
    /// time. Default 5 minutes; `LOGBOOK_CLOCK_DRIFT_MAX_MS` in the environment sets it.
    public var clockDriftMaxMs: UInt64 = AppendOptions.defaultClockDriftMaxMs
    public static let defaultClockDriftMaxMs: UInt64 = {
        if let v = ProcessInfo.processInfo.environment["LOGBOOK_CLOCK_DRIFT_MAX_MS"], let n = UInt64(v) { return n }
        return 5 * 60 * 1000
    }()
    /// Refuse received frames that are unsigned (of origins made before signed logs). Frames of
    /// an origin whose id derives from a key must be signed by it whatever this says. Default
    /// off; `LOGBOOK_REQUIRE_SIGNATURES=1` in the environment sets it.
    public var requireSignatures: Bool = AppendOptions.defaultRequireSignatures
    public static let defaultRequireSignatures: Bool = ProcessInfo.processInfo.environment["LOGBOOK_REQUIRE_SIGNATURES"] == "1"
    /// Take every share's logs a peer sends, as a hub or relay does (`serve --store`), instead of
    /// only those of the shares this replica belongs to (docs/SHARING.md, "Partial
    /// replication"). A store marked with `shares/RELAY` takes them whatever this says.
    public var takesEveryShare = false
    public init() {}
}

/// What one append did.
public struct AppendResult: Sendable, Equatable {
    public var appended: Int = 0
    public var firstSeq: Seq?
    public var lastSeq: Seq?
    /// Mutations skipped because their event id is already in the log.
    public var duplicateCount = 0
    /// The first duplicates (at most `duplicatesListedMax`): input position and where the log holds the id.
    public var duplicates: [Duplicate] = []
    public static let duplicatesListedMax = 100

    public struct Duplicate: Sendable, Equatable {
        public var inputIndex: Int
        public var eventID: UUID
        public var origin: ReplicaID
        public var seq: Seq
    }
}

/// The writing end of a store: appends this replica's events as checksummed, chained frames.
///
/// One `LogAppender` per store at a time (it holds the store's lock). An append of any size is
/// atomic: its frames carry a `continues` flag until the last, and recovery drops an append that
/// was cut off. `append` returns only once the frames are written, read back, compared, and fsynced.
///
/// ```swift
/// let appender = try LogAppender(store: store)
/// let r = try appender.append([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("Buy milk"))])])
/// ```
/// Not thread-safe: use it from one thread, or through `LogWriter` for concurrent callers.
public final class LogAppender {
    /// The store (its format is raised once it first takes a signed frame).
    public internal(set) var store: Store
    public var origin: ReplicaID { store.replicaID }
    /// What recovery did at open.
    public private(set) var recovery: RecoveryReport
    public let options: AppendOptions

    private let lock: StoreLock
    /// Touched per event from the appender's one thread: no runtime exclusivity bookkeeping.
    @exclusivity(unchecked) var clock: HybridClock
    /// The event-id index; nil for a peer's store reached by path (`receivingForPeer`), whose
    /// index this process never opens (its owner catches it up from the log at its next open).
    let index: EventIDIndex?
    /// The index of a writer of its own store (every use outside `receive` and `close`).
    private var ids: EventIDIndex {
        guard let index else { preconditionFailure("a peer's store reached by path has no event-id index open here") }
        return index
    }
    /// Throws for a peer receiver, whose store's event-id index is never opened here.
    private func requireIndex(_ op: String) throws {
        guard index == nil else { return }
        throw LogError(.invalidInput, op, "this is a peer's store reached by path: its event-id index is not opened here", file: store.path)
    }
    /// This replica's own log.
    let own: SegmentWriter
    private var active: SegmentIndex { own.active }
    /// Logs of other origins this store holds, opened for receiving on first use.
    var received: [ReplicaID: SegmentWriter] = [:]
    /// Counts uses of received writers (which one was used least recently).
    var receivedUse: UInt64 = 0
    /// Origins whose writer was closed to save descriptors before their index file was
    /// rewritten: `close` writes it from what the writer knew.
    var parkedStale = Set<ReplicaID>()
    var recoveredOthers: [ReplicaID: RecoveredOrigin] = [:]
    /// Received appends still open, per origin: indexed and counted once their last frame arrives.
    var pending: [ReplicaID: PendingAppend] = [:]
    /// Shares written here: their membership log, its tip when last looked at, and its state as
    /// read so far (continued from there when the log grows, not read again from its start).
    var shareCache: [ShareID: (origin: ReplicaID, seq: Seq, fold: ShareDirectory.Fold)] = [:]
    /// Share logs this store declined since it was opened (docs/SHARING.md, "Partial
    /// replication"): per origin, its share and the last seq offered. A session counts them as
    /// held (`receivePosition`), so it moves past them; once this replica joins the share they
    /// are dropped from here, and asked for again.
    public internal(set) var declinedShareLogs: [ReplicaID: (share: ShareID, through: Seq)] = [:]
    /// How many times a receive joined a share whose logs were declined before (they are then
    /// asked for again: a pull that ends goes on once more, `Replication`).
    public internal(set) var sharesJoinedAfterDeclining = 0
    /// Which of `declinedShareLogs` are members' sealed logs (kept across sessions).
    var sealedDeclines = Set<ReplicaID>()
    /// Shares purged in this store (`SharePurge`), read at first use; nil until then.
    var purgedShares: [ShareID: [ReplicaID: Seq]]?
    private var idMark: Seq
    /// Seqs of committed events, per origin, whose explicit ids the event-id index did not take:
    /// its transaction failed to begin or to commit after their frames were durable (a full disk,
    /// another connection holding the file's lock on a shared path). Index transactions read
    /// them again from the log into themselves (`payOwedIDs`), and no mark is committed past
    /// what is still owed (`markWithin`), so an open after a crash reads them from the log.
    var owedIDs: [ReplicaID: ClosedRange<Seq>] = [:]
    /// Those of `owedIDs` written into the index transaction now open: owed again if it rolls back.
    private var owedInFlight: [ReplicaID: ClosedRange<Seq>] = [:]
    /// When owed ids are next read again outside an append that looks ids up (`DispatchTime`
    /// nanoseconds), and the pause after a failure (doubling from 1 s to 64 s): a lasting failure
    /// of the index must not cost every append and receive a read of a growing range.
    private var owedRetryAt: UInt64 = 0
    private var owedRetryPause: UInt64 = 0
    let encoder = FrameEncoder()
    /// Signs this replica's frames; read from `replica.key` at the first append (a missing key
    /// stops appends, not receiving or recovery); nil for a store whose id is not derived from a key.
    private var signer: ReplicaKey?
    private var closed = false

    struct Transaction {
        var start: SegmentWriter.Mark
        var inputIndex = 0
        var result = AppendResult()
        var hasIDs = false
        /// Every duplicate of this append, for group commit's per-caller results.
        var dupLog: [AppendResult.Duplicate] = []
        var listAllDuplicates = false
        /// Why an `add` of this append failed: after one, the append can only be rolled back (its
        /// event was stamped, its id indexed, a frame before it perhaps written), so every later
        /// `add` and the `commit` throw this, and `commit` rolls back.
        var failed: LogError?
    }
    /// The append in progress; touched several times per event from the appender's one thread,
    /// so without the runtime's exclusivity bookkeeping.
    @exclusivity(unchecked) private(set) var txn: Transaction?

    /// This store's own log ends before a seq it once committed (a damaged tail was cut off):
    /// appending would give new events the seqs of lost ones, which peers may hold. Appends are
    /// refused until the lost frames are received back from a peer (`receive` takes this
    /// origin's frames while this is set).
    public struct LostTail: Sendable, Equatable {
        /// The last seq the log holds now.
        public var holds: Seq
        /// The last seq known to have been committed.
        public var committed: Seq
        /// What says so.
        public var evidence: String
    }
    public internal(set) var lostOwnTail: LostTail?

    /// Tells the appender that `seq` of its own origin was committed once (a projection applied
    /// it, a peer acknowledged it); when the log ends before it, appends are refused.
    public func noteCommitted(ownThrough seq: Seq, evidence: String) {
        guard seq > own.committed.lastSeq, seq > (lostOwnTail?.committed ?? Seq(0)) else { return }
        lostOwnTail = LostTail(holds: own.committed.lastSeq, committed: seq, evidence: evidence)
    }

    /// The end of this replica's own log.
    public var tip: LogTip { LogTip(lastSeq: active.lastSeq, lastHLC: active.lastHLC, lastHash: active.lastHash) }

    /// Opens the store for writing: takes the lock, recovers every origin's log, catches up the event-id index.
    /// - Throws: `LogError` when another process holds the lock, or a log is damaged beyond a torn tail.
    public convenience init(store: Store, wallClock: any WallClock = SystemWallClock(), options: AppendOptions = AppendOptions()) throws {
        try self.init(store: store, wallClock: wallClock, options: options, peer: false)
    }

    /// Opens a peer's store, reached by path (a shared folder, a mounted disk), to receive frames
    /// into its logs and nothing else: it takes the store's lock and recovers its logs like any
    /// writer (a torn tail is cut off before anything is appended after it), but opens no SQLite
    /// file of it (its event-id index is caught up from the log by its owner's next open) and
    /// refuses appends of its own (`begin` throws). Frames are verified as from any peer. See
    /// docs/SECURITY.md, "Stores on a shared path".
    public static func receivingForPeer(_ store: Store, wallClock: any WallClock = SystemWallClock(), options: AppendOptions = AppendOptions()) throws -> LogAppender {
        try LogAppender(store: store, wallClock: wallClock, options: options, peer: true)
    }

    private init(store: Store, wallClock: any WallClock, options: AppendOptions, peer: Bool) throws {
        // A frame holds 1 to 65,536 events (its header's count): any other bound would trap the
        // first append that reached it.
        guard (1...FrameHeader.eventsMax).contains(options.frameEventsMax) else {
            throw LogError(.invalidInput, "open", "AppendOptions.frameEventsMax is \(options.frameEventsMax); a frame holds 1 to \(FrameHeader.eventsMax) events",
                           file: store.path, hint: "nothing was opened; set frameEventsMax within that range (the default is 1000)")
        }
        self.store = store
        self.options = options
        lock = try StoreLock(storePath: store.path)
        var report = RecoveryReport()
        var maxHLC = HLC.zero
        do {
            // Synced even when found: a `log/` a crash left between its mkdir and the sync of
            // the store's folder would hold every origin's folder on an entry not yet on disk.
            try FileIO.makeDirectoryDurably(store.layout.log, op: "open")
            var tips: [ReplicaID: Seq] = [:]
            var ownRecovered: RecoveredOrigin?
            for origin in try store.origins() {
                let r = try Recovery.recover(store.directory(origin), report: &report)
                maxHLC = max(maxHLC, r.tip.lastHLC)
                tips[origin] = r.tip.lastSeq
                if origin == store.replicaID { ownRecovered = r } else { recoveredOthers[origin] = r }
            }
            recovery = report
            clock = HybridClock(wall: wallClock, last: maxHLC)
            own = try SegmentWriter(dir: store.directory(store.replicaID), recovered: ownRecovered, fillingAhead: !peer)
            idMark = Seq(0)
            signer = nil
            index = peer ? nil : try EventIDIndex(path: store.layout.eventIDs)
            // Evidence that this store once committed more of its own log than it now holds.
            if let mark = own.markAhead { lostOwnTail = LostTail(holds: own.committed.lastSeq, committed: mark, evidence: "its durable mark (DURABLE)") }
            if let index {
                let indexed = try index.marks(store.replicaID).mark
                if indexed > own.committed.lastSeq, indexed > (lostOwnTail?.committed ?? Seq(0)) {
                    lostOwnTail = LostTail(holds: own.committed.lastSeq, committed: indexed, evidence: "its event-id index")
                }
                try catchUpIDs(tips)
                // Share logs declined by earlier sessions (advisory; see `ShareDeclines`).
                declinedShareLogs = ShareDeclines.read(store)
                sealedDeclines = Set(declinedShareLogs.keys)
                // Membership logs pushed into this store by path while it was closed: its keys
                // are brought in step now (a failure is tried again at the next open).
                if store.replicaID.isKeyDerived, FileIO.exists(store.layout.shares + "/" + ShareDirectory.refreshMarker),
                   let key = try? store.signingKey(op: "open") {
                    try? ShareDirectory.refreshIfAsked(store, key: key)
                }
            }
        } catch {
            // Nothing of a failed open is recorded: `deinit` (which Swift runs when every stored
            // property was set before the throw) must not close, which would write the indexes
            // and claim this store's log indexed in an event-id index that never caught up.
            closed = true
            lock.release()
            throw error
        }
    }

    deinit {
        if !closed { try? close() }
    }

    /// Writes the active segment's index, records the event-id high-water mark, and releases the lock.
    public func close() throws {
        guard !closed else { return }
        closed = true
        if txn != nil { try? rollback() }
        defer {
            own.close()
            for w in received.values { w.close() }
            index?.close()
            lock.release()
        }
        // A cut of a failed write that failed: tried again, and a failure reported (the index
        // written after would describe a file that still holds those bytes).
        try own.cutWhatFailed(op: "close")
        for w in received.values { try w.cutWhatFailed(op: "close") }
        try own.writeIndex()
        for w in received.values { try w.writeIndex() }
        for o in parkedStale {
            guard let active = recoveredOthers[o]?.active else { continue }
            let dir = store.directory(o)
            try FileIO.writeAtomically(active.encode(), to: dir.indexPath(active.firstSeq), op: "write index", durable: false)
        }
        guard let index else { return }
        try index.begin()
        if !payOwedIDs(index) {
            // A write the index refused mid-transaction (SQLite may have rolled it back itself):
            // the mark goes in a transaction of its own, before everything owed.
            rollbackIDs(index)
            try index.begin()
        }
        // The ids are indexed through the own log's last committed frame, stopped before those
        // the index still lacks (the next open reads them from the log). The mark is the
        // evidence of what the log committed: through its last committed frame whatever ids are
        // owed (a log restored alone from a backup is then seen as having lost its tail), and
        // further, through an append of the own log received from a peer and still open
        // (dropped at the next open; the mark then says the log lost it, `lostOwnTail`, so
        // appends wait until a peer gives it back rather than take its seqs; its ids are indexed
        // when it comes back whole), and through a lost tail not yet given back.
        var evidence = pending[origin] != nil ? active.lastSeq : own.committed.lastSeq
        if let lost = lostOwnTail { evidence = max(evidence, lost.committed) }
        try index.setIndexedThrough(origin, markWithin(origin, own.committed.lastSeq), evidence: evidence)
        try index.commit()
    }

    /// This replica's signing key (read once), for a store whose id derives from one; nil for a
    /// peer's store reached by path (whose key is never read) and an unsigned store.
    func replicaKey(op: String) throws -> ReplicaKey? {
        guard index != nil, store.replicaID.isKeyDerived else { return nil }
        if signer == nil { signer = try store.signingKey(op: op) }
        return signer
    }

    // MARK: Appending

    /// Appends `mutations` as one atomic append (one frame, or several for large batches).
    /// Mutations whose event id the log already holds (or that repeat one earlier in the batch) are skipped.
    /// - Returns: the seqs assigned and the duplicates skipped.
    /// - Throws: `LogError` on I/O failure; the log is then unchanged.
    public func append(_ mutations: [Mutation]) throws -> AppendResult {
        try begin()
        do {
            if options.frameEventsMax >= Self.parallelEncodeEventsMin && Self.cores > 1
                && (mutations.count >= Self.parallelEncodeEventsMin || mutations.count > 1 && Self.recordsReach(Self.parallelEncodeBytesMin, mutations)) {
                try addEncodingInParallel(mutations)
            } else {
                var wall: UInt64 = 0
                for (i, m) in mutations.enumerated() {
                    wall = wallReading(at: i, last: wall)
                    try add(m, wall: wall)
                }
            }
            return try commit()
        } catch {
            try? rollback()
            throw error
        }
    }

    /// Starts an append whose events arrive one by one (`add`) and land together at `commit`.
    public func begin() throws {
        try begin(listingAllDuplicates: false)
    }

    func begin(listingAllDuplicates: Bool) throws {
        precondition(!closed, "appender is closed")
        precondition(txn == nil, "an append is already in progress")
        guard index != nil else {
            throw LogError(.invalidInput, "append", "this is a peer's store reached by path: frames are received into it, and only its own replica appends to it",
                           file: store.path, hint: "nothing was appended")
        }
        if let lost = lostOwnTail {
            throw LogError(.ownLogDamaged, "append",
                           "this store's own log ends at seq \(lost.holds), but seq \(lost.committed) was committed (\(lost.evidence) says so): the frames after \(lost.holds) were lost (to damage, or to a restore of the log alone from a backup), and new events would reuse their seqs",
                           file: store.directory(origin).path,
                           hint: "nothing was appended; get the lost frames back from a peer that holds them (`evctl pull PEER`), then append again")
        }
        // An append of this replica's own log received from a peer (its lost tail given back),
        // whose last frame has not arrived: a local append would link onto it and take its seqs.
        if own.hasOpenAppend {
            throw LogError(.ownLogRestoring, "append",
                           "an append of this store's own log received from a peer is still open (through seq \(own.active.lastSeq)): its last frame has not arrived, and new events would take the seqs of its rest",
                           file: store.directory(origin).path,
                           hint: "nothing was appended; pull from that peer again to complete it (or reopen the store, which drops it), then append again")
        }
        // The key is read here, not at open (a peer's store, which never appends, is never asked
        // for it). The format is raised before the first signed frame (checked on its own: a
        // raise that failed is tried again by the next append).
        if store.replicaID.isKeyDerived {
            if signer == nil { signer = try store.signingKey(op: "append") }
            if store.format < Store.signedFormatVersion { store = try store.upgradeFormat(to: Store.signedFormatVersion, op: "append") }
        }
        try own.rollIfFull(bytesMax: options.segmentBytesMax)
        // An append starts with an empty frame, whatever a failed write before it left.
        encoder.reset()
        txn = Transaction(start: own.mark)
        txn!.listAllDuplicates = listingAllDuplicates
    }

    /// How many events of one batch share a reading of the wall clock (the events added in the
    /// microseconds after a reading take it, and the hybrid clock's counter orders them).
    static let wallReadEvery = 64

    /// The wall reading for a batch's event `i`: read afresh at every `wallReadEvery`th event
    /// (the first included), else `last`.
    private func wallReading(at i: Int, last: UInt64) -> UInt64 {
        i % Self.wallReadEvery == 0 ? clock.wallNow() : last
    }

    /// Adds one mutation to the append in progress; full frames are written as they fill.
    /// - Returns: the seq and clock value the event will have once the append commits; nil when
    ///   the mutation is skipped as a duplicate. (Until `commit` returns, the event may still be
    ///   rolled back: whatever is built from it must wait for that.)
    @discardableResult
    public func add(_ m: Mutation) throws -> (seq: Seq, hlc: HLC)? {
        try add(m, wall: clock.wallNow())
    }

    /// `add` for the `i`th mutation of a batch the caller adds one at a time: the wall clock is
    /// read at every `wallReadEvery`th (as `append` reads it), `wall` carrying the reading from
    /// one call to the next (reading it per event was a hundredth of a bulk append's time). A
    /// `wall` of 0 (no reading yet) is read whatever `i` is.
    @discardableResult
    package func add(_ m: Mutation, batchIndex i: Int, wall: inout UInt64) throws -> (seq: Seq, hlc: HLC)? {
        wall = wall == 0 ? clock.wallNow() : wallReading(at: i, last: wall)
        return try add(m, wall: wall)
    }

    /// `add`, stamping the event from `wall` (a reading of `clock.wallNow()`).
    @discardableResult
    func add(_ m: Mutation, wall: UInt64) throws -> (seq: Seq, hlc: HLC)? {
        if let failed = txn?.failed { throw failed }
        do {
            guard try !skipsDuplicate(m.eventID) else { return nil }
            let seq = Seq(active.lastSeq.rawValue + UInt64(encoder.count) + 1)
            let hlc = try stamp(m.eventID, seq: seq, wall: wall)
            try place(m, seq: seq, hlc: hlc)
            return (seq, hlc)
        } catch {
            // Of the kind of what failed: refused input stays the caller's fault, a failed write not.
            txn?.failed = LogError((error as? LogError)?.kind ?? .io, "append",
                                   "an event of this append was refused or failed (\(error)); the append can only be rolled back",
                                   hint: "nothing of it was committed: call rollback(), then append again without the event")
            throw error
        }
    }

    /// Counts the append's next input, whose event id is `eventID`; true (and recorded as a
    /// duplicate) when the log already holds that id. Takes the id alone, so that a batch's first
    /// pass reads nothing else of its mutations.
    private func skipsDuplicate(_ eventID: UUID?) throws -> Bool {
        precondition(txn != nil, "add without begin")
        let index = txn!.inputIndex
        txn!.inputIndex += 1
        return try isDuplicate(eventID, inputIndex: index)
    }

    /// `skipsDuplicate` for the input at `index`, counted by the caller.
    private func isDuplicate(_ eventID: UUID?, inputIndex index: Int) throws -> Bool {
        guard let id = eventID else { return false }
        if !txn!.hasIDs {
            try ids.begin()
            txn!.hasIDs = true
            // Ids a failed index write left out are looked up too.
            guard payOwedIDs(ids) else {
                throw LogError(.io, "append", "the event-id index refused the ids of earlier events it had missed, so a retry of one could not be recognised",
                               file: store.layout.eventIDs, hint: "nothing was appended; try again (a full disk: free space first)")
            }
        }
        guard let (o, s) = try ids.lookup(id) else { return false }
        txn!.result.duplicateCount += 1
        if txn!.listAllDuplicates { txn!.dupLog.append(.init(inputIndex: index, eventID: id, origin: o, seq: s)) }
        if txn!.result.duplicates.count < AppendResult.duplicatesListedMax {
            txn!.result.duplicates.append(.init(inputIndex: index, eventID: id, origin: o, seq: s))
        }
        return true
    }

    /// Gives the next event its clock value, and its event id (if any) `seq` in the index.
    private func stamp(_ eventID: UUID?, seq: Seq, wall: UInt64) throws -> HLC {
        if let id = eventID { try ids.insert(id, origin: origin, seq: seq) }
        do { return try clock.tick(wall: wall) } catch {
            throw LogError(.invalidInput, "append", error.description, hint: "nothing was appended; `evctl verify` lists far-future clocks")
        }
    }

    /// Bytes of records at which a frame is cut.
    private var frameRecordBytesLimit: Int { min(options.frameRawBytesMax, Self.frameRecordBytesCap) }

    /// Adds the stamped event to the frame being built, writing that frame first when it is full.
    private func place(_ m: Mutation, seq: Seq, hlc: HLC) throws {
        try writeFrameIfFull()
        do { try encoder.add(m, origin: origin, seq: seq, hlc: hlc) } catch { throw error.logError("append") }
    }

    /// Writes the frame being built if it is full: the one place a frame is cut before the next
    /// event. It is cut once it holds frameEventsMax events or frameRawBytesMax bytes of records
    /// (a record is at most 1 MiB, `FrameEncoder.recordBytesMax`, so a frame stays below
    /// payloadBytesMax).
    private func writeFrameIfFull() throws {
        if encoder.count > 0 && frameIsFull {
            try writePending(continues: true)
        }
    }

    /// Whether the frame being built holds `frameEventsMax` events or `frameRawBytesMax` bytes.
    private var frameIsFull: Bool { encoder.count >= options.frameEventsMax || encoder.recordBytes >= frameRecordBytesLimit }

    /// Batches at least this large are encoded on every core, a frame's worth at a time (frames
    /// of fewer events, and a batch's last run of fewer, are encoded one event at a time).
    static let parallelEncodeEventsMin = 256

    /// So are batches (and runs) of fewer events whose records take at least this many bytes.
    static let parallelEncodeBytesMin = 64 << 10

    /// Whether the records of `ms` surely take `limit` bytes or more together.
    static func recordsReach(_ limit: Int, _ ms: [Mutation]) -> Bool {
        eventsReaching(limit, ms, at: ms.indices).bytes >= limit
    }

    /// How many of `ms[picks[start..<end]]`, from `start`, have records sure to take `limit`
    /// bytes or more together (by `recordBytesAtLeast`), and those records' bytes at least: all
    /// of them (`end - start`) when they may stay under it.
    static func eventsReaching(_ limit: Int, _ ms: [Mutation], picks: [Int], _ start: Int, _ end: Int) -> (count: Int, bytes: Int) {
        eventsReaching(limit, ms, at: picks[start..<end])
    }

    /// How many of the mutations of `ms` at `indices`, in order, have records sure to take
    /// `limit` bytes or more together, and their bytes at least (walked in place, no copy).
    private static func eventsReaching(_ limit: Int, _ ms: [Mutation], at indices: some Collection<Int>) -> (count: Int, bytes: Int) {
        ms.withUnsafeBufferPointer { p in
            var bytes = 0, count = 0
            for i in indices {
                bytes += EventCodec.recordBytesAtLeast(p.baseAddress! + i)
                count += 1
                if bytes >= limit { break }
            }
            return (count, bytes)
        }
    }

    /// `append`'s work for a batch of at least `parallelEncodeEventsMin` events (or of
    /// `parallelEncodeBytesMin` bytes of records): they are checked for duplicates and stamped in
    /// order, then cut into runs of a frame's events, and each run's records are encoded on every
    /// core at once, the frame before it written first. Frames are cut exactly where `add` cuts
    /// them: a run that fits stays under both limits, as `add` would have kept it. Once a run's
    /// records reach the frame's byte limit, runs are cut by bytes: each is as many events as
    /// surely reach the limit (by `recordBytesAtLeast`), encoded on every core, then cut after
    /// the record that reaches it; it goes back to runs by count after a frame the limit did
    /// not cut. A run too small to share out (of fewer than `parallelEncodeEventsMin` events and
    /// `parallelEncodeBytesMin` bytes: the last, or a small frame cut by bytes) is laid out one
    /// event at a time.
    private func addEncodingInParallel(_ mutations: [Mutation]) throws {
        precondition(encoder.count == 0, "a batch encoded at once starts a frame")
        precondition(options.frameEventsMax >= Self.parallelEncodeEventsMin, "frames too small to share out are encoded one event at a time")
        let first = active.lastSeq.rawValue + 1
        var picks: [Int] = [], hlcs: [HLC] = []
        picks.reserveCapacity(mutations.count)
        hlcs.reserveCapacity(mutations.count)
        var wall: UInt64 = 0
        // The inputs are counted at once; the append in progress is touched only for an event
        // with an id (a batch without ids stamps its events and nothing more).
        precondition(txn != nil, "add without begin")
        let inputBase = txn!.inputIndex
        txn!.inputIndex += mutations.count
        for i in mutations.indices {
            wall = wallReading(at: i, last: wall)
            let id = mutations[i].eventID
            if id != nil, try isDuplicate(id, inputIndex: inputBase + i) { continue }
            hlcs.append(try stamp(id, seq: Seq(first + UInt64(picks.count)), wall: wall))
            picks.append(i)
        }
        var start = 0
        var byBytes = false
        let limit = frameRecordBytesLimit
        while start < picks.count {
            // The frame before this run (full by count or by bytes) is written, as `place` would.
            try writeFrameIfFull()
            var end = min(picks.count, start + options.frameEventsMax)
            // Shared out from an empty frame: a frame's count of events, or, cut by bytes, the
            // events sure to reach the limit; either if it is many events or many bytes.
            var shared = encoder.count == 0
            if shared && byBytes {
                let (count, bytes) = Self.eventsReaching(limit, mutations, picks: picks, start, end)
                end = start + count
                shared = count >= Self.parallelEncodeEventsMin || bytes >= Self.parallelEncodeBytesMin
            } else if shared {
                shared = end - start >= Self.parallelEncodeEventsMin
                    || Self.eventsReaching(Self.parallelEncodeBytesMin, mutations, picks: picks, start, end).bytes >= Self.parallelEncodeBytesMin
            }
            guard shared else {
                // Too little to share out (a last run, a small frame cut by bytes), or a frame
                // begun and not full: one event at a time, until the frame is full.
                repeat {
                    try place(mutations[picks[start]], seq: Seq(first + UInt64(start)), hlc: hlcs[start])
                    start += 1
                } while start < picks.count && !frameIsFull
                continue
            }
            if byBytes {
                do {
                    start += try encoder.addUpToLimit(mutations, picks: Array(picks[start..<end]), origin: origin, baseSeq: Seq(first + UInt64(start)),
                                                      hlcs: Array(hlcs[start..<end]), workers: Self.cores, bytesLimit: limit)
                } catch { throw error.logError("append") }
                byBytes = encoder.recordBytes >= limit
                continue
            }
            // The calling thread's run is longer by a share of the batch: waking a worker took
            // about a tenth of a millisecond here, a third of encoding a run of 500 (it waited for
            // the worker about as long; 19/32 of the batch for it balances two cores).
            if encoder.add(mutations, picks: Array(picks[start..<end]), origin: origin, baseSeq: Seq(first + UInt64(start)),
                           hlcs: Array(hlcs[start..<end]), workers: Self.cores, callerLead: (end - start) * 3 / 32,
                           bytesLimit: limit) {
                start = end
            } else {
                byBytes = true  // the same run again, cut by bytes (which names an event too large)
            }
        }
    }

    /// Writes the last frame, fsyncs, and makes the append visible.
    public func commit() throws -> AppendResult {
        precondition(txn != nil, "commit without begin")
        if let failed = txn!.failed {
            try? rollback()
            throw failed
        }
        do {
            if encoder.count > 0 {
                // The last frame is written and made durable together with those before it.
                try writePending(continues: false)
            }
        } catch {
            try? rollback()
            throw error
        }
        let t = txn!
        txn = nil
        // The log is durable from here; the derived index follows (and is rebuilt if this is lost).
        // A failure here cannot fail the append: its ids are owed (`owedIDs`), and the mark stays.
        if t.hasIDs {
            if commitIDs(ids, through: active.lastSeq, paying: false) {  // paid as it began
                idMark = active.lastSeq
            } else if let first = t.result.firstSeq {
                owe(origin, first...active.lastSeq)
            }
        } else if owedIDs.isEmpty ? active.lastSeq.rawValue - idMark.rawValue >= options.idCheckpointEvents : owedDue {
            if (try? ids.begin()) != nil, commitIDs(ids, through: active.lastSeq) { idMark = active.lastSeq }
        }
        // The segment index is an accelerator, written again at the next checkpoint or close (and
        // recovery rebuilds it): a failure to write it now must not report a durable append as
        // failed, or a retry would append the same events twice.
        try? own.checkpointIndex(everyBytes: options.indexCheckpointBytes)
        return t.result
    }

    /// Abandons the append in progress: cuts its frames off the segment; nothing of it remains.
    public func rollback() throws {
        guard let t = txn else { return }
        txn = nil
        encoder.reset()  // the frame not yet written
        if t.hasIDs { rollbackIDs(ids) }
        try own.truncate(to: t.start, op: "rollback")
    }

    /// Duplicates found so far in the append in progress (used by group commit to split results).
    var pendingDuplicateCount: Int { txn?.result.duplicateCount ?? 0 }
    func pendingDuplicates(since count: Int) -> [AppendResult.Duplicate] {
        guard let t = txn else { return [] }
        return Array(t.dupLog[count...])
    }

    /// Records per frame at most whatever `frameRawBytesMax` says: a frame is cut once past it,
    /// and the record that crosses it (at most 1 MiB, `FrameEncoder.recordBytesMax`), a signature
    /// block and a share's block and seal still leave the frame under `FrameHeader.payloadBytesMax`.
    static let frameRecordBytesCap = FrameHeader.payloadBytesMax - (2 << 20)

    /// Writes the frame built so far; the one that ends the append (`continues` false) is made
    /// durable with every frame before it (`SegmentWriter.writeAndSync`).
    private func writePending(continues: Bool) throws {
        let eventCount = encoder.count
        let bytes = encoder.finish(continues: continues, previousHash: active.lastHash, signer: signer)
        let header = try bytes.withUnsafeBytes { p throws -> FrameHeader in
            // Invariants just before writing: the frame parses, checks, and continues the chain.
            guard let h = try? FrameHeader.decode(p), h.baseSeq == active.lastSeq.next, h.previousHash == active.lastHash,
                  h.firstHLC > active.lastHLC, h.totalBytes == p.count, (try? FrameDecoder.checkCRC(p, header: h)) != nil else {
                preconditionFailure("frame encoder produced a frame that does not check")
            }
            return h
        }
        if continues {
            try own.write(bytes, header: header, op: "append")
        } else {
            try own.writeAndSync(bytes, header: header, op: "append")
        }
        if txn!.result.firstSeq == nil { txn!.result.firstSeq = header.baseSeq }
        txn!.result.lastSeq = header.lastSeq
        txn!.result.appended += eventCount
    }

    // MARK: Event-id index

    /// Records that the ids of `origin`'s events in `seqs` are not in the index (see `owedIDs`).
    func owe(_ origin: ReplicaID, _ seqs: ClosedRange<Seq>) {
        let o = owedIDs[origin]
        owedIDs[origin] = min(seqs.lowerBound, o?.lowerBound ?? seqs.lowerBound)...max(seqs.upperBound, o?.upperBound ?? seqs.upperBound)
    }

    /// Writes what it can of the owed ids into the index's open transaction, read again from
    /// the log, each origin on its own (one read whole moves to `owedInFlight`). Where an
    /// origin's log is damaged (or reads short), the ids before the damage are written and the
    /// rest given up, as an open's catch-up gives them up (`recovery` says so); an origin that
    /// cannot be read for another reason stays owed, and the reading pauses (`owedDue`). False
    /// when the index refused a write: the transaction is then not to be committed (SQLite may
    /// have rolled it back itself), only rolled back.
    @discardableResult
    func payOwedIDs(_ index: EventIDIndex) -> Bool {
        guard !owedIDs.isEmpty else { return true }
        let reader = LogReader(store: store)
        var unread = false
        defer { if unread { pauseOwedIDs() } }
        for (origin, seqs) in owedIDs.sorted(by: { $0.key < $1.key }) {
            var found: [(UUID, Seq)] = []
            var last = Seq(seqs.lowerBound.rawValue - 1)
            var damaged = false
            do {
                try Self.explicitIDs(reader, origin, seqs, into: &found, reached: &last)
            } catch let e as LogError where e.isCorruption {
                damaged = true
                recovery.actions.append(.eventIDIndexIncomplete(origin: origin, indexedThrough: last.rawValue, reason: e.description))
            } catch {
                unread = true
                continue
            }
            if last < seqs.upperBound, !damaged {
                // Read short of what was committed: the rest is damaged (a reader takes a bad last
                // frame for one still being written).
                recovery.actions.append(.eventIDIndexIncomplete(origin: origin, indexedThrough: last.rawValue,
                                                                reason: "its log reads only through seq \(last), short of seq \(seqs.upperBound), whose id the index was to take"))
            }
            guard (try? index.insert(found, origin: origin)) != nil else {
                unread = true
                return false
            }
            owedIDs[origin] = nil
            let f = owedInFlight[origin]
            owedInFlight[origin] = min(seqs.lowerBound, f?.lowerBound ?? seqs.lowerBound)...max(seqs.upperBound, f?.upperBound ?? seqs.upperBound)
        }
        return true
    }

    /// The explicit ids of `origin`'s events in `seqs`, read from the log (views: nothing else
    /// decoded); `reached` is the last seq read, also when the read fails partway.
    private static func explicitIDs(_ reader: LogReader, _ origin: ReplicaID, _ seqs: ClosedRange<Seq>,
                                    into found: inout [(UUID, Seq)], reached last: inout Seq) throws {
        try reader.forEachEventView(origin: origin, from: seqs.lowerBound) { v in
            guard v.seq <= seqs.upperBound else { return false }
            if let id = v.explicitEventID { found.append((id, v.seq)) }
            last = v.seq
            return true
        }
    }

    /// `through` for `origin`'s mark, stopped before the first seq whose id is still owed.
    func markWithin(_ origin: ReplicaID, _ through: Seq) -> Seq {
        guard let owed = owedIDs[origin] else { return through }
        return min(through, Seq(owed.lowerBound.rawValue - 1))
    }

    /// Whether owed ids are waiting and their next reading is due.
    var owedDue: Bool { !owedIDs.isEmpty && DispatchTime.now().uptimeNanoseconds >= owedRetryAt }

    /// Commits the index's open transaction with the owed ids written into it first (`paying`)
    /// and `origin`'s mark (`through`, stopped before what is still owed); rolls it back on
    /// failure, and pauses the reading of owed ids (`owedDue`). True when committed.
    func commitIDs(_ index: EventIDIndex, through: Seq? = nil, paying: Bool = true) -> Bool {
        do {
            if paying, !payOwedIDs(index) { throw LogError(.io, "write event-id index", "a write of owed ids was refused") }
            if let through { try index.setIndexedThrough(origin, markWithin(origin, through), evidence: max(through, lostOwnTail?.committed ?? Seq(0))) }
            try index.commit()
        } catch {
            rollbackIDs(index)
            pauseOwedIDs()
            return false
        }
        owedInFlight = [:]
        if owedIDs.isEmpty { owedRetryPause = 0 }
        return true
    }

    /// After a failed write of the index: owed ids are read again only after a pause.
    func pauseOwedIDs() {
        owedRetryPause = min(64_000_000_000, max(1_000_000_000, owedRetryPause * 2))
        owedRetryAt = DispatchTime.now().uptimeNanoseconds + owedRetryPause
    }

    /// Rolls the index's transaction back: what it held of the owed ids is owed again.
    func rollbackIDs(_ index: EventIDIndex) {
        index.rollback()
        for (origin, seqs) in owedInFlight { owe(origin, seqs) }
        owedInFlight = [:]
    }

    /// Origins whose log starts after a floor and whose events before it have ids this store's
    /// event-id index does not hold yet, with the floor's seq: the snapshot the store was
    /// bootstrapped from (or compacted to) carries them, and `adoptEventIDs` takes them in.
    /// Until then, retries of those events are not recognised.
    public private(set) var eventIDsMissingBeforeFloor: [ReplicaID: Seq] = [:]

    /// Takes in the writer-supplied ids of `origin`'s events at or below `through` (those before
    /// its floor, which no segment here holds), e.g. from the snapshot at the floor.
    /// - Parameter complete: false when `entries` is not every id there was (the snapshot carries
    ///   none): recorded so it is not looked for again, but still reported by this open.
    public func adoptEventIDs(_ entries: [(UUID, Seq)], origin: ReplicaID, through: Seq, complete: Bool = true) throws {
        precondition(txn == nil, "adopting ids during an append")
        try requireIndex("adopt event ids")
        try ids.adopt(entries, origin: origin, through: through)
        if complete, let missing = eventIDsMissingBeforeFloor[origin], missing <= through {
            eventIDsMissingBeforeFloor[origin] = nil
            recovery.actions.removeAll { if case .eventIDIndexIncomplete(origin, _, _) = $0 { true } else { false } }
        }
    }

    /// Calls `body` with every writer-supplied event id this store knows (origin, seq), in
    /// batches: what a snapshot carries so that retries stay recognised on a replica bootstrapped
    /// from it.
    public func forEachEventID(_ body: ([(UUID, ReplicaID, Seq)]) throws -> Void) throws {
        precondition(txn == nil, "reading ids during an append")
        try requireIndex("read event ids")
        // Ids a failed index write left out are written first (a snapshot carries them), and
        // any still owed are read from the log and given too.
        if !owedIDs.isEmpty, (try? ids.begin()) != nil { _ = commitIDs(ids) }
        try ids.forEach(body)
        let reader = LogReader(store: store)
        for (origin, seqs) in owedIDs.sorted(by: { $0.key < $1.key }) {
            var found: [(UUID, Seq)] = []
            var last = Seq(0)
            try Self.explicitIDs(reader, origin, seqs, into: &found, reached: &last)
            if !found.isEmpty { try body(found.map { ($0.0, origin, $0.1) }) }
        }
    }

    private func catchUpIDs(_ tips: [ReplicaID: Seq]) throws {
        let reader = LogReader(store: store)
        for (origin, recoveredTip) in tips.sorted(by: { $0.key < $1.key }) {
            let marks = try ids.marks(origin)
            var through = marks.ids
            let floor = try store.directory(origin).loadFloor()
            let tip = max(recoveredTip, floor?.lastSeq ?? Seq(0))
            // A mark past this store's own log is the evidence that it lost a committed tail
            // (`lostOwnTail` says so, from it): it stays, so that every later open refuses
            // appends until the tail comes back, not only this one. The own mark reaches the
            // log's end whatever ids are owed (see `close`).
            let own = origin == self.origin
            let lost = own && marks.mark > tip ? marks.mark : Seq(0)
            let evidence = own ? max(lost, tip) : Seq(0)
            // An older build's file: its mark alone, which it kept past the log as evidence even
            // over ids it had not indexed (and the log may have been given the rest of that
            // tail since, under that build or by path). The own log is read again whole, once:
            // the row written after says how far.
            if own, !marks.idsRecorded { through = Seq(0) }
            if let floor {
                // The log starts after a floor: the ids of the events before it are in no segment
                // here; the snapshot at the floor carries them (see `adoptEventIDs`).
                if try ids.adoptedThrough(origin) < floor.lastSeq {
                    eventIDsMissingBeforeFloor[origin] = floor.lastSeq
                    recovery.actions.append(.eventIDIndexIncomplete(origin: origin, indexedThrough: floor.lastSeq.rawValue,
                                                                    reason: "the ids of its events through seq \(floor.lastSeq) (before its floor) are not adopted from the snapshot at the floor yet; retries of those are not recognised"))
                }
                if through < floor.lastSeq {
                    try ids.begin()
                    do {
                        try ids.setIndexedThrough(origin, floor.lastSeq, evidence: evidence)
                        try ids.commit()
                    } catch {
                        ids.rollback()
                        throw error
                    }
                    through = floor.lastSeq
                }
            }
            if through == tip, marks.mark <= tip {
                if origin == self.origin { idMark = tip }
                continue
            }
            try ids.begin()
            do {
                if through > tip || marks.mark > tip {
                    // Frames past the log's end were cut off by recovery (or a restore): their
                    // ids go, at every open while the mark says the tail is lost.
                    try ids.forget(after: tip, origin: origin, keepingMark: lost > Seq(0))
                    through = min(through, tip)
                }
                if through < tip {
                    var last = through
                    do {
                        // Only the ids are needed: read in place, nothing else decoded.
                        try reader.forEachEventView(origin: origin, from: through.next) { v in
                            if let id = v.explicitEventID { try ids.insert(id, origin: origin, seq: v.seq) }
                            last = v.seq
                            return true
                        }
                        try ids.setIndexedThrough(origin, tip, evidence: evidence)
                    } catch let e as LogError where e.isCorruption {
                        // Damage is reported, not fatal: the writer can still append after it.
                        try ids.setIndexedThrough(origin, last, evidence: evidence)
                        recovery.actions.append(.eventIDIndexIncomplete(origin: origin, indexedThrough: last.rawValue, reason: e.description))
                    }
                }
                try ids.commit()
            } catch {
                ids.rollback()
                throw error
            }
            if origin == self.origin { idMark = tip }
        }
    }
}
