import EventLog
import Foundation
import Projections

/// `evctl compact`: drops old sealed segments that every known peer already holds, after
/// keeping a snapshot that covers them (rebuilds start from it). Peers whose cursor falls below
/// what was dropped get "cursor expired" and bootstrap from a snapshot.
public enum Compactor {
    public struct Report: Sendable {
        /// Per origin: what was removed.
        public var origins: [ReplicaID: CompactionResult] = [:]
        public var snapshot: Snapshot.Info?
        public var segments: Int { origins.values.reduce(0) { $0 + $1.segments } }
        public var bytes: Int { origins.values.reduce(0) { $0 + $1.bytes } }
    }

    /// Compacts every origin of `store` up to what all known peers hold (per-peer state in
    /// peers.sqlite) and the snapshot taken first.
    /// - Parameter withoutPeers: compact even when no peer is known (up to the snapshot only).
    /// - Throws: when no peer is known and `withoutPeers` is false, or a peer's cursor is unknown.
    public static func run(store: Store, withoutPeers: Bool = false, lockWait: Double = 2) throws -> Report {
        let peers = try PeerState(store: store).peers()
        if peers.isEmpty && !withoutPeers {
            throw ProjectionError.invalid("no peers are known (see `evctl status`): compacting could drop frames no other replica holds; pass --without-peers to compact anyway")
        }
        if let unknown = peers.first(where: { $0.cursor == nil }) {
            throw ProjectionError.invalid("peer \(unknown.name) has never synced successfully, so what it holds is unknown; nothing was compacted")
        }
        let projected = try ProjectedStore.open(store: store, waitingUpTo: lockWait)
        defer { try? projected.close() }
        var report = Report()
        let info = try Snapshot.keep(projected)
        report.snapshot = info
        for (origin, anchor) in info.anchors.sorted(by: { $0.key < $1.key }) {
            var limit = anchor.lastSeq
            for p in peers { limit = min(limit, p.cursor![origin]) }
            guard limit.rawValue > 0 else { continue }
            let r = try store.compact(origin: origin, through: limit)
            if r.segments > 0 { report.origins[origin] = r }
        }
        return report
    }
}
