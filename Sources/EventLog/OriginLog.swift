import Foundation

/// The files of one origin's log: `log/<origin>/<first seq>.seg` and their `.idx` files.
struct OriginDirectory {
    let origin: ReplicaID
    let path: String

    init(storePath: String, origin: ReplicaID) {
        self.origin = origin
        self.path = storePath + "/log/" + origin.description
    }

    func segmentPath(_ first: Seq) -> String { path + "/" + SegmentName.segment(first) }
    func indexPath(_ first: Seq) -> String { path + "/" + SegmentName.index(first) }

    /// First seqs of the segments present, ascending.
    func segments(op: String) throws -> [Seq] {
        guard FileIO.exists(path) else { return [] }
        return try FileIO.listDirectory(path, op: op).compactMap(SegmentName.parseSegment).sorted()
    }

    /// The segment's index if present and valid for a segment of `segmentSize` bytes.
    func loadIndex(_ first: Seq, segmentSize: Int) -> SegmentIndex? {
        guard let bytes = try? FileIO.readFile(indexPath(first), op: "read index"),
              let idx = SegmentIndex.decode(bytes, origin: origin, firstSeq: first),
              idx.coveredBytes >= SegmentHeader.size, idx.coveredBytes <= segmentSize else { return nil }
        return idx
    }
}

/// The position at the end of an origin's log.
public struct LogTip: Sendable, Equatable {
    /// The last seq held (0 when the log is empty).
    public var lastSeq: Seq
    public var lastHLC: HLC
    public var lastHash: FrameHash
    public static let empty = LogTip(lastSeq: Seq(0), lastHLC: .zero, lastHash: .zero)

    public init(lastSeq: Seq, lastHLC: HLC, lastHash: FrameHash) {
        self.lastSeq = lastSeq
        self.lastHLC = lastHLC
        self.lastHash = lastHash
    }
}
