import Replicator
import EventLog
import Foundation

/// Counters and gauges of a running server, rendered in the Prometheus text format by `/metrics`.
/// Safe to use from any thread.
public final class ServerMetrics: @unchecked Sendable {
    private let lock = Lock()
    private var framesServed = 0
    private var bytesServed = 0
    private var framesReceived = 0
    private var eventsReceived = 0
    private var bytesReceived = 0
    private var requests: [Int: Int] = [:]
    private var snapshotsMade = 0
    private var snapshotsServed = 0
    private var connectionsRefused = 0
    private var cursor = ReplicationCursor.empty
    private var peers: [String: (lag: UInt64?, seen: Date, user: String?)] = [:]
    /// Peers remembered at most (oldest forgotten first), so `Logbook-Replica` headers cannot grow memory.
    public static let peersMax = 1000

    public init() {}

    /// - Parameter cursor: the keeper's cursor now, when it has it at hand (else the one `render`
    ///   is given, or the last one known, is shown).
    public func served(frames: Int, bytes: Int, cursor: ReplicationCursor? = nil) {
        lock.withLock {
            framesServed += frames
            bytesServed += bytes
            if let cursor { self.cursor = cursor }
        }
    }

    public func received(frames: Int, events: Int, bytes: Int, cursor: ReplicationCursor? = nil) {
        lock.withLock {
            framesReceived += frames
            eventsReceived += events
            bytesReceived += bytes
            if let cursor { self.cursor = cursor }
        }
    }

    /// - Parameter user: the user of the principal the peer connected as (a scoped principal's
    ///   `/metrics` lists only its own user's peers).
    public func peer(_ name: String, user: String?, lag: UInt64?) {
        lock.withLock {
            let old = peers[name]?.lag
            peers[name] = (lag ?? old, Date(), user)
            if peers.count > Self.peersMax, let oldest = peers.min(by: { $0.value.seen < $1.value.seen })?.key {
                peers.removeValue(forKey: oldest)
            }
        }
    }

    func snapshotMade() { lock.withLock { snapshotsMade += 1 } }
    func snapshotServed() { lock.withLock { snapshotsServed += 1 } }
    func connectionRefused() { lock.withLock { connectionsRefused += 1 } }

    public func request(status: Int) {
        lock.withLock { requests[status, default: 0] += 1 }
    }


    /// What a scoped principal may see in `/metrics`: the origins it may read, its own user's peers.
    public struct Scope {
        public var origins: (ReplicaID) -> Bool
        public var user: String
        public init(origins: @escaping (ReplicaID) -> Bool, user: String) {
            self.origins = origins
            self.user = user
        }
    }

    /// The Prometheus text exposition of every metric; `current` is the store's cursor now.
    /// With `scope`, no origin, replica id or principal of another user is named (the totals,
    /// which name nothing, stay whole).
    public func render(current: ReplicationCursor?, memory: MemoryBudget? = nil, scope: Scope? = nil) -> String {
        let mem = memory.map { ($0.usage, $0.waiting, $0.bytesMax) }
        return lock.withLock {
            if let current { cursor = current }
            var out = ""
            func metric(_ name: String, _ type: String, _ help: String, _ samples: [(String, String)]) {
                out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
                for (labels, value) in samples { out += "\(name)\(labels) \(value)\n" }
            }
            metric("logbook_frames_served_total", "counter", "Frames sent to pulling replicas.", [("", "\(framesServed)")])
            metric("logbook_bytes_served_total", "counter", "Frame bytes sent to pulling replicas.", [("", "\(bytesServed)")])
            metric("logbook_frames_received_total", "counter", "Frames appended from pushing replicas.", [("", "\(framesReceived)")])
            metric("logbook_events_received_total", "counter", "Events appended from pushing replicas.", [("", "\(eventsReceived)")])
            metric("logbook_bytes_received_total", "counter", "Bytes of pages pushed by replicas.", [("", "\(bytesReceived)")])
            metric("logbook_snapshots_made_total", "counter", "Snapshots made for bootstrapping replicas.", [("", "\(snapshotsMade)")])
            metric("logbook_snapshots_served_total", "counter", "Snapshots sent (a kept one is sent again while the store has not moved).",
                   [("", "\(snapshotsServed)")])
            metric("logbook_connections_refused_total", "counter",
                   "Connections closed as they arrived: their client address held the most it may (--max-connections-per-address).",
                   [("", "\(connectionsRefused)")])
            metric("logbook_http_requests_total", "counter", "Requests answered, by HTTP status.",
                   requests.keys.sorted().map { ("{status=\"\($0)\"}", "\(requests[$0]!)") })
            let shown = scope.map { cursor.filtered($0.origins) } ?? cursor
            metric("logbook_cursor_seq", "gauge", "The last seq this store holds, per origin.",
                   shown.origins.map { ("{origin=\"\($0)\"}", "\(shown[$0].rawValue)") })
            let names = peers.keys.sorted().filter { n in scope.map { peers[n]!.user == $0.user } ?? true }
            metric("logbook_peer_lag_events", "gauge", "Events a peer lacked after its last pull (principal/replica).",
                   names.compactMap { n in peers[n]!.lag.map { ("{peer=\"\(Self.escape(n))\"}", "\($0)") } })
            metric("logbook_peer_last_seen_seconds", "gauge", "Unix time of a peer's last request (principal/replica).",
                   names.map { ("{peer=\"\(Self.escape($0))\"}", String(format: "%.3f", peers[$0]!.seen.timeIntervalSince1970)) })
            if let ((reserved, peak), waiting, max) = mem {
                metric("logbook_memory_reserved_bytes", "gauge", "Bytes reserved now by pages being sent and pushes being read.", [("", "\(reserved)")])
                metric("logbook_memory_reserved_peak_bytes", "gauge", "The most bytes reserved at once since the start.", [("", "\(peak)")])
                metric("logbook_memory_budget_bytes", "gauge", "The memory budget (--max-memory).", [("", "\(max)")])
                metric("logbook_memory_waiting_requests", "gauge", "Requests waiting for memory.", [("", "\(waiting)")])
            }
            return out
        }
    }

    static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
    }
}
