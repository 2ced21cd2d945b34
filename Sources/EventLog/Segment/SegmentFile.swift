#if canImport(Glibc)
import Glibc
#endif

/// What the chain expects of the next frame of an origin.
struct ChainState: Equatable {
    var nextSeq: Seq
    /// nil when reading starts mid-segment from an index entry: the first frame's link is taken as given.
    var previousHash: FrameHash?
    var lastHLC: HLC
}

/// The outcome of reading the frame at an offset.
enum FrameStep {
    case frame(FrameHeader, hash: FrameHash)
    /// The offset is the end of the file.
    case end
    /// The file ends inside the frame (a torn write, or a write still in progress); the header
    /// is given when it was whole.
    case torn(String, FrameHeader?)
    /// The frame's bytes are present but wrong; the header is given when it parsed.
    case bad(String, FrameHeader?)
}

/// Reads one segment file through a buffer, checking every frame against the chain.
/// Not thread-safe; one per reader.
final class SegmentFile {
    let path: String
    let fd: Int32
    private(set) var size: Int
    private var buffer: [UInt8] = []
    private var bufferStart = 0
    private var bufferCount = 0
    /// Bytes read per refill: large enough that frames of 1,000 events need one read each.
    static let readBytes = 1 << 20

    init(path: String, op: String) throws {
        self.path = path
        fd = try FileIO.open(path, O_RDONLY, op: op)
        do {
            size = try FileIO.fileSize(fd, path: path, op: op)
        } catch {
            FileIO.close(fd)
            throw error
        }
    }

    deinit { FileIO.close(fd) }

    func refreshSize() throws { size = try FileIO.fileSize(fd, path: path, op: "read") }

    /// Which file this is and how it stands: a change to any part names another file.
    struct Identity: Hashable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var modifiedSeconds: Int64
        var modifiedNanoseconds: Int64
        /// The inode's change time, which no program can set back (mtime can be).
        var changedSeconds: Int64
        var changedNanoseconds: Int64
    }

    /// The file's identity now (nil when it cannot be asked).
    func identity() -> Identity? {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        return Identity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino), size: Int64(st.st_size),
                        modifiedSeconds: Int64(st.st_mtim.tv_sec), modifiedNanoseconds: Int64(st.st_mtim.tv_nsec),
                        changedSeconds: Int64(st.st_ctim.tv_sec), changedNanoseconds: Int64(st.st_ctim.tv_nsec))
    }

    /// Makes [offset, offset+count) available in the buffer (or as much as the file holds).
    /// Returns the number of bytes available from `offset`.
    private func ensure(_ offset: Int, _ count: Int, readAhead: Bool = true) throws -> Int {
        if offset >= bufferStart && offset + count <= bufferStart + bufferCount {
            return count
        }
        let want = readAhead ? max(count, min(SegmentFile.readBytes, max(0, size - offset))) : count
        if buffer.count < want { buffer = [UInt8](repeating: 0, count: want) }
        let n = try buffer.withUnsafeMutableBytes { try FileIO.pread(fd, into: $0, count: want, at: offset, path: path, op: "read") }
        bufferStart = offset
        bufferCount = n
        return min(n, count)
    }

    func header() throws -> Result<SegmentHeader, FrameDecodeError> {
        let n = try ensure(0, SegmentHeader.size, readAhead: false)
        let start = 0 - bufferStart
        return buffer.withUnsafeBytes { p in
            Result { () throws(FrameDecodeError) in
                try SegmentHeader.decode(UnsafeRawBufferPointer(rebasing: p[start..<start + n]))
            }
        }
    }

    /// Reads and checks the frame at `offset` against `chain`; on success advances `chain`.
    /// `body` sees the frame's whole bytes while they are in the buffer.
    /// Frames that end before `hashFrom` are only checksummed, not hashed: a reader seeking to a
    /// later seq checks the chain from the first frame it returns.
    func frame(at offset: Int, chain: inout ChainState, hashFrom: Seq = Seq(0), linking: Bool = true,
               body: (FrameHeader, UnsafeRawBufferPointer) throws -> Void = { _, _ in }) throws -> FrameStep {
        if offset >= size { return .end }
        let avail = try ensure(offset, FrameHeader.size)
        let headerResult: Result<FrameHeader, FrameDecodeError> = buffer.withUnsafeBytes { p in
            let s = offset - bufferStart
            return Result { () throws(FrameDecodeError) in try FrameHeader.decode(UnsafeRawBufferPointer(rebasing: p[s..<s + avail])) }
        }
        let header: FrameHeader
        switch headerResult {
        case .success(let h): header = h
        case .failure(.truncated(let m)): return .torn(m, nil)
        case .failure(let e): return .bad(e.message, nil)
        }
        let total = header.totalBytes
        let have = try ensure(offset, total)
        if have < total { return .torn("frame of \(total) bytes, \(have) present before end of file", header) }
        return try buffer.withUnsafeBytes { p -> FrameStep in
            let s = offset - bufferStart
            let bytes = UnsafeRawBufferPointer(rebasing: p[s..<s + total])
            do {
                try FrameDecoder.checkCRC(bytes, header: header)
            } catch {
                return .bad((error as? FrameDecodeError)?.message ?? String(describing: error), header)
            }
            if let fault = chain.fault(of: header) { return .bad(fault.description, header) }
            if header.lastSeq < hashFrom {
                chain = ChainState(nextSeq: header.lastSeq.next, previousHash: nil, lastHLC: header.lastHLC)
                return .frame(header, hash: FrameHash.zero)
            }
            // Not linking: the next frame's link is taken as given (its receiver checks it).
            let hash = linking ? FrameHash.of(bytes) : nil
            try body(header, bytes)
            chain = ChainState(nextSeq: header.lastSeq.next, previousHash: hash, lastHLC: header.lastHLC)
            return .frame(header, hash: hash ?? FrameHash.zero)
        }
    }

    /// True when some offset after `offset` holds a frame of `origin` with a valid checksum:
    /// damage followed by good data is corruption inside the log, not a torn tail.
    func hasValidFrame(after offset: Int, origin: ReplicaID) throws -> Bool {
        let magic = FrameHeader.magic
        var pos = offset + 1
        while pos + FrameHeader.size <= size {
            let avail = try ensure(pos, FrameHeader.size)
            if avail < FrameHeader.size { return false }
            let s = pos - bufferStart
            let isMagic = buffer.withUnsafeBytes { p in p[s] == magic[0] && p[s + 1] == magic[1] && p[s + 2] == magic[2] && p[s + 3] == magic[3] }
            if isMagic {
                var probe = ChainState(nextSeq: Seq(0), previousHash: nil, lastHLC: .zero)
                let r: Result<FrameHeader, FrameDecodeError> = buffer.withUnsafeBytes { p in
                    Result { () throws(FrameDecodeError) in try FrameHeader.decode(UnsafeRawBufferPointer(rebasing: p[s..<s + FrameHeader.size])) }
                }
                if case .success(let h) = r, h.origin == origin, pos + h.totalBytes <= size {
                    probe.nextSeq = h.baseSeq
                    if case .frame = try frame(at: pos, chain: &probe) { return true }
                }
            }
            pos += 1
        }
        return false
    }
}

extension SegmentFile {
    /// Parses only the header of the frame at `offset` (no checksum): used to look ahead for the
    /// end of a multi-frame append without reading its payloads.
    func peekHeader(at offset: Int) throws -> FrameHeader? {
        let avail = try ensure(offset, FrameHeader.size)
        guard avail == FrameHeader.size else { return nil }
        return buffer.withUnsafeBytes { p in
            let s = offset - bufferStart
            return try? FrameHeader.decode(UnsafeRawBufferPointer(rebasing: p[s..<s + FrameHeader.size]))
        }
    }

    /// The end offset of the committed data starting at `offset`: frames up to and including the
    /// first one without the `continues` flag, or `offset` itself when that frame is not yet whole.
    func commitEnd(from offset: Int) throws -> Int {
        var pos = offset
        while let h = try peekHeader(at: pos), pos + h.totalBytes <= size {
            pos += h.totalBytes
            if !h.continues { return pos }
        }
        return offset
    }
}
