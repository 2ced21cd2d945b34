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
/// Not thread-safe: use from one thread (the appender is not shareable).
public final class ProjectedStore {
    public let store: Store
    public let appender: LogAppender
    public let projection: Projection

    /// Opens for writing (takes the lock, recovers the log) and brings the projection up to date,
    /// repairing the window between a log fsync and a projection commit that a crash may leave.
    public init(store: Store, wallClock: any WallClock = SystemWallClock(), options: AppendOptions = AppendOptions(),
                progress: ((Int, Int) -> Void)? = nil) throws {
        self.store = store
        appender = try LogAppender.opening(store, wallClock: wallClock, options: options)
        projection = try Projection(store: store)
        // The projection applies only committed events: if it has applied more of this
        // store's own log than the log now holds, committed frames were lost.
        if let applied = try projection.cursor()[store.replicaID] {
            appender.noteCommitted(ownThrough: applied, evidence: "the projection has applied it")
        }
        try projection.catchUp(progress: progress)
    }

    /// Opens for writing like `init`, waiting up to `seconds` while another process holds the
    /// writer lock (a server between pushes, another `evctl` command).
    /// - Throws: the `LogError` that says the store is locked, once the wait is over.
    public static func open(store: Store, waitingUpTo seconds: Double) throws -> ProjectedStore {
        try retryingWhileLocked(upTo: seconds) { try ProjectedStore(store: store) }
    }

    /// Appends atomically, then projects the new events.
    public func append(_ mutations: [Mutation]) throws -> AppendResult {
        var ms = mutations
        try projection.fillBases(&ms)
        let r = try appender.append(ms)
        try projection.catchUp()
        return r
    }

    public func close() throws {
        try appender.close()
        try projection.close()
    }
}
