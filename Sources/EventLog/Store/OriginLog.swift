import Foundation

/// The files of one origin's log: `log/<origin>/<first seq>.seg` and their `.idx` files.
struct OriginDirectory {
    let origin: ReplicaID
    let path: String

    init(storePath: String, origin: ReplicaID) {
        self.origin = origin
        self.path = StoreLayout(root: storePath).originDirectory(origin)
    }

    func segmentPath(_ first: Seq) -> String { path + "/" + SegmentName.segment(first) }
    func indexPath(_ first: Seq) -> String { path + "/" + SegmentName.index(first) }

    /// First seqs of the segments present, ascending.
    func segments(op: String) throws -> [Seq] {
        guard FileIO.exists(path) else { return [] }
        return try FileIO.listDirectory(path, op: op).compactMap(SegmentName.parseSegment).sorted()
    }

    var floorPath: String { path + "/" + StoreLayout.floorName }

    /// `DURABLE`: the last seq of this origin's log known to be on disk (written by the writer
    /// after each fsync, itself not fsynced: it only tells running readers what they may ship).
    /// 16 bytes: the seq, then the seq xor `durableCheck`, little-endian. See docs/FORMAT.md.
    var durablePath: String { path + "/" + StoreLayout.durableName }
    static let durableCheck: UInt64 = 0x4C42_4455_5241_424C  // "LBDURABL"

    /// The seq `DURABLE` records, or nil when it is missing or unreadable (a store written by an
    /// older build: then every committed frame counts as durable).
    func loadDurable() -> Seq? {
        guard let b = try? FileIO.readFile(durablePath, op: "read durable mark"), b.count == 16 else { return nil }
        let seq = b[0..<8].withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
        let check = b[8..<16].withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
        guard seq ^ OriginDirectory.durableCheck == check, seq <= Seq.max.rawValue else { return nil }
        return Seq(seq)
    }

    static func durableBytes(_ seq: Seq) -> [UInt8] {
        var w = ByteWriter(capacity: 16)
        w.u64(seq.rawValue)
        w.u64(seq.rawValue ^ durableCheck)
        return w.bytes
    }

    /// Where this origin's log starts when it does not start at seq 1: the end of the log a
    /// snapshot covered (last seq, hlc and frame hash), written when a replica is bootstrapped
    /// from a snapshot. nil when the log starts at seq 1. See docs/FORMAT.md, "Floor".
    /// - Throws: `LogError` when the file is damaged (never read as data).
    func loadFloor() throws -> LogTip? {
        guard FileIO.exists(floorPath) else { return nil }
        let b = try FileIO.readFile(floorPath, op: "read floor")
        guard b.count == Self.floorSize, Array(b[0..<4]) == Self.floorMagic, b[4] == 1,
              CRC32C.checksum(Array(b[0..<(Self.floorSize - 4)])) == b[(Self.floorSize - 4)...].withUnsafeBytes({ UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) }) else {
            throw LogError(.corrupt, "read floor", "the floor file is damaged", file: floorPath, offset: 0)
        }
        let seq = b[8..<16].withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
        let hlc = b[16..<24].withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
        guard Seq.isValid(seq) else {
            throw LogError(.corrupt, "read floor", "the floor's seq \(seq) is out of range", file: floorPath, offset: 8)
        }
        return LogTip(lastSeq: Seq(seq), lastHLC: HLC(rawValue: hlc), lastHash: FrameHash(bytes: Array(b[24..<56])))
    }

    static let floorMagic: [UInt8] = Array("LBFL".utf8)
    static let floorSize = 60

    /// Writes the floor file (atomically, fsynced): for an origin with no segments yet, or one
    /// compacted to it. The origin's folder is made if missing, and its entry synced either way.
    func writeFloor(_ tip: LogTip) throws {
        var w = ByteWriter()
        w.raw(Self.floorMagic)
        w.raw([1, 0, 0, 0])
        w.u64(tip.lastSeq.rawValue)
        w.u64(tip.lastHLC.rawValue)
        w.raw(tip.lastHash.bytes)
        var bytes = w.bytes
        let crc = CRC32C.checksum(bytes)
        withUnsafeBytes(of: crc.littleEndian) { bytes += $0 }
        try FileIO.makeDirectoryDurably(path, op: "write floor")
        try FileIO.writeAtomically(bytes, to: floorPath, op: "write floor")
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
