import Foundation

/// What a store holds: per-origin tips, segment counts and sizes.
public struct StoreStatus: Sendable {
    public struct Origin: Sendable {
        public var origin: ReplicaID
        public var lastSeq: Seq
        public var lastHLC: HLC
        public var segments: Int
        public var bytes: Int
    }
    public var replicaID: ReplicaID
    public var origins: [Origin]
    /// Events held across all origins.
    public var totalEvents: UInt64 { origins.reduce(0) { $0 + $1.lastSeq.rawValue } }
    public var segments: Int { origins.reduce(0) { $0 + $1.segments } }
    /// Bytes of segment files.
    public var logBytes: Int { origins.reduce(0) { $0 + $1.bytes } }
    /// Bytes of every file in the store directory (log, indexes, databases).
    public var bytesOnDisk: Int
}

extension Store {
    /// Reads the status without reading every frame: each origin's newest index and the frames past it.
    public func status() throws -> StoreStatus {
        let reader = LogReader(store: self)
        var origins: [StoreStatus.Origin] = []
        for o in try self.origins() {
            let dir = directory(o)
            let segs = try dir.segments(op: "status")
            let bytes = segs.reduce(0) { $0 + (FileIO.size(of: dir.segmentPath($1)) ?? 0) }
            let tip = try reader.tip(origin: o)
            origins.append(.init(origin: o, lastSeq: tip.lastSeq, lastHLC: tip.lastHLC, segments: segs.count, bytes: bytes))
        }
        return StoreStatus(replicaID: replicaID, origins: origins, bytesOnDisk: Self.directoryBytes(path))
    }

    static func directoryBytes(_ path: String) -> Int {
        guard let names = try? FileIO.listDirectory(path, op: "status") else { return 0 }
        var total = 0
        for n in names {
            let full = path + "/" + n
            var st = stat()
            guard lstat(full, &st) == 0 else { continue }
            if (st.st_mode & S_IFMT) == S_IFDIR { total += directoryBytes(full) } else { total += Int(st.st_size) }
        }
        return total
    }
}
