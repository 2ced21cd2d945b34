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
    /// Events held across all origins (each origin's last seq, counting what a floor stands for;
    /// held at `UInt64.max`).
    public var totalEvents: UInt64 { Seq.total(origins.lazy.map { $0.lastSeq.rawValue }) }
    public var segments: Int { origins.reduce(0) { $0 + $1.segments } }
    /// Bytes of segment files up to their last committed frame: the same whether a writer has
    /// the store open or not (the zero fill a writer keeps past its last frame while it is open,
    /// docs/FORMAT.md "Zero fill", is counted in `bytesOnDisk` only).
    public var logBytes: Int { origins.reduce(0) { $0 + $1.bytes } }
    /// Bytes of every file in the store directory (log, indexes, databases).
    public var bytesOnDisk: Int
    /// Each entry of the store directory with its bytes (a folder: everything under it), by name.
    public var files: [(name: String, bytes: Int)] = []
    /// The filesystem the store is on: where it is mounted, its size and what is free.
    public var disk: DiskSpace.Usage?
}

extension Store {
    /// Reads the status without reading every frame: each origin's newest index and the frames past it.
    public func status() throws -> StoreStatus {
        let reader = LogReader(store: self)
        var origins: [StoreStatus.Origin] = []
        for o in try self.origins() {
            let dir = directory(o)
            let segs = try dir.segments(op: "status")
            // Sealed segments end with their last frame; the newest is counted to its last
            // committed frame (capped by its size: if a writer seals it meanwhile, the walk may
            // go on into the next, which this listing does not count).
            var bytes = segs.dropLast().reduce(0) { $0 + (FileIO.size(of: dir.segmentPath($1)) ?? 0) }
            let (tip, framesEnd) = try reader.tipAndFramesEnd(origin: o, hashing: false, segments: segs)
            if let newest = segs.last { bytes += min(framesEnd, FileIO.size(of: dir.segmentPath(newest)) ?? 0) }
            origins.append(.init(origin: o, lastSeq: tip.lastSeq, lastHLC: tip.lastHLC, segments: segs.count, bytes: bytes))
        }
        var status = StoreStatus(replicaID: replicaID, origins: origins, bytesOnDisk: Self.directoryBytes(path))
        status.files = ((try? FileIO.listDirectory(path, op: "status")) ?? []).sorted().map { n in
            let full = path + "/" + n
            var st = stat()
            guard lstat(full, &st) == 0 else { return (n, 0) }
            return (n, (st.st_mode & S_IFMT) == S_IFDIR ? Self.directoryBytes(full) : Int(st.st_size))
        }
        status.disk = DiskSpace.usage(of: path)
        return status
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
