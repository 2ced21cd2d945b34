import Foundation

/// What `Store.compact(origin:through:)` removed.
public struct CompactionResult: Sendable, Equatable {
    public var segments = 0
    public var bytes = 0
    /// Where the origin's log now starts (nil when nothing was removed).
    public var floor: LogTip?
    public init() {}
}

extension Store {
    /// Removes `origin`'s oldest sealed segments whose frames all lie at or below `through`, and
    /// records the floor the log now starts after (its last seq, hlc and the hash the next
    /// frame links to). The newest segment is never removed. Call with the writer lock held, and
    /// only once a snapshot covering `through` is kept (`Snapshot.keep` in Projections), or the events
    /// removed are lost to rebuilds.
    ///
    /// The floor is written before any segment is removed; a compaction cut short leaves
    /// segments below the floor, which `verify` notes and the next compaction removes.
    public func compact(origin: ReplicaID, through: Seq) throws -> CompactionResult {
        let op = "compact"
        let dir = directory(origin)
        let segs = try dir.segments(op: op)
        var result = CompactionResult()
        // Segment k ends where k + 1 starts; the newest has no successor and stays.
        var last = -1
        for k in 0..<max(0, segs.count - 1) where Seq(segs[k + 1].rawValue - 1) <= through { last = k }
        guard last >= 0 else { return result }
        let next = segs[last + 1]
        let nextFile = try SegmentFile(path: dir.segmentPath(next), op: op)
        guard case .success(let nextHeader) = try nextFile.header() else {
            throw LogError(.corrupt, op, "segment header is damaged; nothing was removed", file: dir.segmentPath(next), offset: 0)
        }
        let endSeq = Seq(next.rawValue - 1)
        let size = FileIO.size(of: dir.segmentPath(segs[last])) ?? 0
        var hlc = HLC.zero
        if let idx = dir.loadIndex(segs[last], segmentSize: size), idx.coveredBytes == size { hlc = idx.lastHLC }
        let floor = LogTip(lastSeq: endSeq, lastHLC: hlc, lastHash: nextHeader.previousHash)
        if let existing = try dir.loadFloor(), existing.lastSeq >= floor.lastSeq {
            // An earlier compaction got this far; only leftovers below it remain.
        } else {
            try dir.writeFloor(floor)
        }
        for k in 0...last {
            let path = dir.segmentPath(segs[k])
            result.bytes += FileIO.size(of: path) ?? 0
            try? FileManager.default.removeItem(atPath: dir.indexPath(segs[k]))
            do { try FileManager.default.removeItem(atPath: path) } catch {
                throw LogError(.io, op, "cannot remove a compacted segment: \(error)", file: path)
            }
            result.segments += 1
        }
        try FileIO.fsyncDirectory(dir.path, op: op)
        result.floor = floor
        return result
    }
}
