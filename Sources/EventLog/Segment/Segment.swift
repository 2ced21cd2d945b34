import Foundation

/// A segment file's fixed 72-byte header. See docs/FORMAT.md, "Segment header".
struct SegmentHeader: Equatable {
    static let size = 72
    static let magic: [UInt8] = Array("LBKS".utf8)
    static let formatVersion: UInt8 = 1

    var origin: ReplicaID
    var firstSeq: Seq
    /// Hash of the last frame of the previous segment (zero for an origin's first segment).
    var previousHash: FrameHash

    func encode() -> [UInt8] {
        var w = ByteWriter(capacity: SegmentHeader.size)
        w.raw(SegmentHeader.magic)
        w.u8(SegmentHeader.formatVersion)
        w.raw([0, 0, 0])
        w.uuid(origin.rawValue)
        w.u64(firstSeq.rawValue)
        w.raw(previousHash.bytes)
        w.u32(0)
        let crc = w.bytes.withUnsafeBytes { CRC32C.checksum($0) }
        w.u32(crc)
        return w.bytes
    }

    static func decode(_ p: UnsafeRawBufferPointer) throws(FrameDecodeError) -> SegmentHeader {
        guard p.count >= size else { throw .truncated("segment header needs \(size) bytes, \(p.count) present") }
        guard Array(p[0..<4]) == magic else { throw .invalid("bad segment magic") }
        guard p[4] == formatVersion else { throw .invalid("unknown segment format version \(p[4])") }
        let stored = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 68, as: UInt32.self))
        let computed = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: p[0..<68]))
        guard stored == computed else { throw .invalid(String(format: "segment header checksum mismatch (stored %08x, computed %08x)", stored, computed)) }
        var r = ByteReader(p, offset: 8, end: size)
        do {
            let origin = ReplicaID(rawValue: try r.uuid())
            let first = try r.u64()
            let prev = FrameHash(bytes: Array(try r.bytes(32)))
            guard Seq.isValid(first) else { throw FrameDecodeError.invalid("segment first seq \(first) is out of range") }
            return SegmentHeader(origin: origin, firstSeq: Seq(first), previousHash: prev)
        } catch let e as FrameDecodeError {
            throw e
        } catch {
            throw .truncated("segment header")
        }
    }
}

/// Names of the files in an origin's log directory.
enum SegmentName {
    static let segmentSuffix = ".seg"
    static let indexSuffix = ".idx"
    static let tempSuffix = ".tmp"

    /// Twenty zero-padded digits of the first seq, so `ls` sorts segments in log order.
    static func stem(_ firstSeq: Seq) -> String {
        let digits = String(firstSeq.rawValue)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits
    }
    static func segment(_ firstSeq: Seq) -> String { stem(firstSeq) + segmentSuffix }
    static func index(_ firstSeq: Seq) -> String { stem(firstSeq) + indexSuffix }

    /// The first seq named by a segment file name, or nil when the name is not one of ours.
    static func parseSegment(_ name: String) -> Seq? {
        guard name.hasSuffix(segmentSuffix) else { return nil }
        let stem = name.dropLast(segmentSuffix.count)
        guard stem.count == 20, stem.allSatisfy({ $0.isASCII && $0.isNumber }), let v = UInt64(stem), Seq.isValid(v) else { return nil }
        return Seq(v)
    }
}

/// One entry of a segment's sparse index: a frame's first seq, first hlc and byte offset.
struct IndexEntry: Hashable {
    var seq: Seq
    var hlc: HLC
    var offset: Int
}

/// The sparse index of one segment, and the chain tip at the end of the range it covers.
/// Rebuildable from the segment at any time; written atomically, not fsynced. See docs/FORMAT.md.
struct SegmentIndex: Equatable {
    static let headerSize = 72
    static let magic: [UInt8] = Array("LBKI".utf8)
    static let formatVersion: UInt8 = 1
    /// A new entry once this many bytes have passed since the last one.
    static let strideBytes = 64 << 10

    var origin: ReplicaID
    var firstSeq: Seq
    /// Frames in [header end, coveredBytes) are indexed and were verified when indexed.
    var coveredBytes: Int
    /// Seq and hlc of the last event, and hash of the last frame, in the covered range.
    var lastSeq: Seq
    var lastHLC: HLC
    var lastHash: FrameHash
    /// Offset of the last frame in the covered range (0 when there is none): recovery re-checks it.
    var lastFrameOffset: Int = 0
    var entries: [IndexEntry]

    /// Notes a frame appended at `offset`.
    mutating func add(_ h: FrameHeader, at offset: Int, hash: FrameHash) {
        lastFrameOffset = offset
        if entries.isEmpty || offset - entries.last!.offset >= SegmentIndex.strideBytes {
            entries.append(IndexEntry(seq: h.baseSeq, hlc: h.firstHLC, offset: offset))
        }
        coveredBytes = offset + h.totalBytes
        lastSeq = h.lastSeq
        lastHLC = h.lastHLC
        lastHash = hash
    }

    /// The offset of the last indexed frame that starts at or before `seq`.
    func offset(forSeq seq: Seq) -> Int {
        var lo = 0, hi = entries.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if entries[mid].seq <= seq { lo = mid + 1 } else { hi = mid }
        }
        return lo == 0 ? SegmentHeader.size : entries[lo - 1].offset
    }

    /// The offset of the last indexed frame whose first hlc is before `hlc`.
    func offset(forHLC hlc: HLC) -> Int {
        var lo = 0, hi = entries.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if entries[mid].hlc < hlc { lo = mid + 1 } else { hi = mid }
        }
        return lo == 0 ? SegmentHeader.size : entries[lo - 1].offset
    }

    func encode() -> [UInt8] {
        var w = ByteWriter(capacity: SegmentIndex.headerSize + entries.count * 24)
        w.raw(SegmentIndex.magic)
        w.u8(SegmentIndex.formatVersion)
        w.raw([0, 0, 0])
        w.uuid(origin.rawValue)
        w.u64(firstSeq.rawValue)
        w.u64(UInt64(coveredBytes))
        w.u64(lastSeq.rawValue)
        w.u64(lastHLC.rawValue)
        w.u64(UInt64(lastFrameOffset))
        w.u32(UInt32(entries.count))
        w.u32(0)  // CRC placeholder, at offset 68
        for e in entries {
            w.u64(e.seq.rawValue)
            w.u64(e.hlc.rawValue)
            w.u64(UInt64(e.offset))
        }
        w.raw(lastHash.bytes)
        var crc = CRC32C()
        w.bytes.withUnsafeBytes {
            crc.update(UnsafeRawBufferPointer(rebasing: $0[0..<68]))
            crc.update(UnsafeRawBufferPointer(rebasing: $0[72...]))
        }
        w.patchU32(at: 68, crc.final)
        return w.bytes
    }

    /// Parses an index file; nil when it is damaged or not for this segment (then it is rebuilt).
    static func decode(_ bytes: [UInt8], origin: ReplicaID, firstSeq: Seq) -> SegmentIndex? {
        bytes.withUnsafeBytes { p -> SegmentIndex? in
            guard p.count >= headerSize + 32, Array(p[0..<4]) == magic, p[4] == formatVersion else { return nil }
            var r = ByteReader(p, offset: 8)
            guard let o = try? r.uuid(), o == origin.rawValue,
                  let first = try? r.u64(), first == firstSeq.rawValue,
                  let covered = try? r.u64(), let lastSeq = try? r.u64(), let lastHLC = try? r.u64(),
                  let lastFrame = try? r.u64(), lastFrame == 0 || (lastFrame >= UInt64(SegmentHeader.size) && lastFrame < covered),
                  let count = try? r.u32(), let stored = try? r.u32(),
                  covered <= UInt64(Int.max), Seq.isValid(lastSeq) || lastSeq == firstSeq.rawValue - 1 else { return nil }
            guard p.count == headerSize + Int(count) * 24 + 32 else { return nil }
            var crc = CRC32C()
            crc.update(UnsafeRawBufferPointer(rebasing: p[0..<68]))
            crc.update(UnsafeRawBufferPointer(rebasing: p[72...]))
            guard crc.final == stored else { return nil }
            var entries: [IndexEntry] = []
            entries.reserveCapacity(Int(count))
            for _ in 0..<count {
                guard let s = try? r.u64(), let h = try? r.u64(), let off = try? r.u64(), Seq.isValid(s), off < covered else { return nil }
                entries.append(IndexEntry(seq: Seq(s), hlc: HLC(rawValue: h), offset: Int(off)))
            }
            guard let hash = try? r.bytes(32) else { return nil }
            return SegmentIndex(origin: origin, firstSeq: firstSeq, coveredBytes: Int(covered), lastSeq: Seq(lastSeq),
                                lastHLC: HLC(rawValue: lastHLC), lastHash: FrameHash(bytes: Array(hash)),
                                lastFrameOffset: Int(lastFrame), entries: entries)
        }
    }
}
