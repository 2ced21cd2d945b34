import EventLog
import Foundation

extension Projection {
    /// Fills `base` of each mutation that has none with its entity's current version here (0 when
    /// this replica has not seen the entity), so the projection can tell a concurrent edit from a
    /// later one (DESIGN rule 5). Thread-safe (reads only).
    public func fillBases(_ mutations: inout [Mutation]) throws {
        let keys = mutations.filter { $0.base == nil }.map { ($0.entity, $0.entityID) }
        guard !keys.isEmpty else { return }
        let versions = try versions(keys)
        for i in mutations.indices where mutations[i].base == nil {
            mutations[i].base = versions[mutations[i].entityID] ?? HLC.zero
        }
    }
}

/// A store opened for writing with its projection: appends fill in `base`, and the projection
/// catches up after every append (in the same process, DESIGN "Projection").
///
/// Thread-safe: `append`, `receive` and `catchUp` take one lock; code that uses `appender` or
/// `projection` for writing directly runs inside `exclusive`.
public final class ProjectedStore: @unchecked Sendable {
    public let store: Store
    public let appender: LogAppender
    public let projection: Projection
    /// Whether appends and receives are projected at once (false: the projection is brought up
    /// to date later, e.g. by `evctl replay`).
    public let projects: Bool
    private let lock = Lock(recursive: true)

    /// Opens for writing (takes the lock, recovers the log) and brings the projection up to date,
    /// repairing the window between a log fsync and a projection commit that a crash may leave.
    /// With `project` false the projection is left as it is, now and after appends.
    public init(store: Store, wallClock: any WallClock = SystemWallClock(), options: AppendOptions = AppendOptions(),
                project: Bool = true, progress: ((Int, Int) -> Void)? = nil) throws {
        self.store = store
        projects = project
        appender = try LogAppender.opening(store, wallClock: wallClock, options: options)
        var p = try Projection(store: store)
        // Events a newer build wrote that this build now understands (it was upgraded) were
        // applied in part, or skipped, by the build before: the projection is made again from the log.
        // So were the rows of a projection filled before a column was added (a new field).
        if project, try p.unreadEvents().contains(where: \.understoodNow) || !p.owedRebuild().isEmpty {
            try p.close()
            try Projection.rebuild(store: store, progress: progress)
            p = try Projection(store: store)
        }
        projection = p
        // The projection applies only committed events: if it has applied more of this
        // store's own log than the log now holds, committed frames were lost.
        if let applied = try projection.cursor()[store.replicaID] {
            appender.noteCommitted(ownThrough: applied, evidence: "the projection has applied it")
        }
        if project {
            try projection.catchUp(progress: progress)
            try projection.purgeByRetention()  // only with a retention set (off by default)
        }
    }


    /// Opens for writing like `init`, waiting up to `seconds` while another process holds the
    /// writer lock (a server between pushes, another `evctl` command).
    /// - Throws: the `LogError` that says the store is locked, once the wait is over.
    public static func open(store: Store, waitingUpTo seconds: Double, project: Bool = true,
                            progress: ((Int, Int) -> Void)? = nil) throws -> ProjectedStore {
        try retryingWhileLocked(upTo: seconds) { try ProjectedStore(store: store, project: project, progress: progress) }
    }

    /// Runs `body` while no other thread writes through this store.
    public func exclusive<T>(_ body: () throws -> T) rethrows -> T {
        try lock.withLock(body)
    }

    /// Appends atomically, then projects the new events.
    public func append(_ mutations: [Mutation]) throws -> AppendResult {
        try exclusive {
            var ms = mutations
            try projection.fillBases(&ms)
            let r = try appender.append(ms)
            if projects { try projection.catchUp() }
            return r
        }
    }

    /// Appends frames received from another replica (`LogAppender.receive`); projected later by `catchUp`.
    public func receive(_ frames: [[UInt8]]) throws -> ReceiveResult {
        try exclusive { try appender.receive(frames) }
    }

    /// `receive` of frames this process built (a legacy import's origin): unsigned frames are
    /// taken even from a receiver that requires signatures of its peers.
    package func receive(_ frames: [[UInt8]], allowingUnsigned: Bool) throws -> ReceiveResult {
        try exclusive { try appender.receive(frames, allowingUnsigned: allowingUnsigned) }
    }

    /// Applies what the log holds past the projection's cursor.
    @discardableResult
    public func catchUp(progress: ((Int, Int) -> Void)? = nil) throws -> Int {
        try exclusive { try projection.catchUp(progress: progress) }
    }

    /// `Projection.catchUp(origins:)` under this store's lock.
    public func catchUp(origins: Set<ReplicaID>) throws -> Int {
        try exclusive { try projection.catchUp(origins: origins) }
    }

    public func close() throws {
        try exclusive {
            // The projection first, while the lock is held: its last connection's checkpoint
            // must not meet the next writer's open.
            var failure: (any Error)?
            do { try projection.close() } catch { failure = error }
            try appender.close()
            if let failure { throw failure }
        }
    }
}
