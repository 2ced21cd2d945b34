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
    /// The offset is the end of the file (or, read with `zeroFillEnds`, where its zero fill starts).
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
    ///
    /// With `zeroFillEnds` (the newest segment), a frame position from which every byte to the end
    /// of the file is zero is the end of the frames written so far: the zero fill a writer keeps
    /// past its last frame (docs/FORMAT.md, "Zero fill"). Zeros followed by anything else are
    /// judged as a frame that fails its checks. There, a frame that is torn or fails its checks is
    /// read once more from the file before it is judged: a writer may be writing it over the fill
    /// as it is read.
    func frame(at offset: Int, chain: inout ChainState, hashFrom: Seq = Seq(0), linking: Bool = true, zeroFillEnds: Bool = false,
               body: (FrameHeader, UnsafeRawBufferPointer) throws -> Void = { _, _ in }) throws -> FrameStep {
        let step = try frameOnce(at: offset, chain: &chain, hashFrom: hashFrom, linking: linking, zeroFillEnds: zeroFillEnds, body: body)
        switch step {
        case .frame:
            return step
        case .end:
            // The bytes read ahead may be zeros a writer is about to overwrite: not kept.
            dropBuffer()
            return step
        case .torn, .bad:
            dropBuffer()
            guard zeroFillEnds else { return step }
            let again = try frameOnce(at: offset, chain: &chain, hashFrom: hashFrom, linking: linking, zeroFillEnds: zeroFillEnds, body: body)
            if case .frame = again {} else { dropBuffer() }
            return again
        }
    }

    /// Forgets the bytes read ahead: the next read goes to the file.
    private func dropBuffer() { bufferCount = 0 }

    /// A page of zeros to compare with.
    private static let zeroPage = [UInt8](repeating: 0, count: 4096)

    /// True when the `count` buffered bytes at `offset` are all zero.
    private func bufferedBytesAreZero(_ offset: Int, _ count: Int) -> Bool {
        buffer.withUnsafeBytes { p in
            Self.zeroPage.withUnsafeBytes { z in
                var at = offset - bufferStart
                var left = count
                while left > 0 {
                    let n = min(left, z.count)
                    if memcmp(p.baseAddress! + at, z.baseAddress!, n) != 0 { return false }
                    at += n
                    left -= n
                }
                return true
            }
        }
    }

    /// True when every byte from `offset` to the end of the file (as this reader sized it) is zero.
    func isZero(from offset: Int) throws -> Bool {
        var pos = offset
        // What is buffered first (a reader at the end of the frames has most of the fill read).
        if pos >= bufferStart && pos < bufferStart + bufferCount {
            let n = min(bufferStart + bufferCount, size) - pos
            guard bufferedBytesAreZero(pos, n) else { return false }
            pos += n
        }
        while pos < size {
            let n = try ensure(pos, min(SegmentFile.readBytes, size - pos))
            guard n > 0 else { break }
            guard bufferedBytesAreZero(pos, n) else { return false }
            pos += n
        }
        return true
    }

    private func frameOnce(at offset: Int, chain: inout ChainState, hashFrom: Seq, linking: Bool, zeroFillEnds: Bool,
                           body: (FrameHeader, UnsafeRawBufferPointer) throws -> Void) throws -> FrameStep {
        if offset >= size { return .end }
        var avail = try ensure(offset, FrameHeader.size)
        if zeroFillEnds && bufferedBytesAreZero(offset, avail) {
            if try isZero(from: offset) { return .end }
            // Not all zero: judged from a fresh read, as any frame is.
            dropBuffer()
            avail = try ensure(offset, FrameHeader.size)
        }
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
    /// damage followed by good data is corruption inside the log, not a torn tail. Also true when
    /// the candidates (headers of `origin` whose frame would fit) claim more bytes to check than
    /// `candidateBytesMax` allows: a crafted file of overlapping headers, each claiming up to
    /// 16 MiB, would otherwise cost a read and a checksum of each (hours for a file of 1 GiB); it
    /// is taken as damage, which is reported and never cut away.
    func hasValidFrame(after offset: Int, origin: ReplicaID) throws -> Bool {
        let magic = FrameHeader.magic
        var budget = Self.candidateBytesMax(after: offset, size: size)
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
                    budget -= h.totalBytes
                    if budget < 0 { return true }
                    probe.nextSeq = h.baseSeq
                    // Read once (not again on failure, as `frame` does): a file full of such
                    // candidates must not cost a fresh read each.
                    if case .frame = try frameOnce(at: pos, chain: &probe, hashFrom: Seq(0), linking: true, zeroFillEnds: false, body: { _, _ in }) { return true }
                }
            }
            pos += 1
        }
        return false
    }

    /// The bytes `hasValidFrame` checks at most after `offset`: twice what is left of the file,
    /// and 64 MiB more (a damaged tail followed by honest frames, or by nothing, checks each byte
    /// at most about once; only headers laid over each other claim more).
    static func candidateBytesMax(after offset: Int, size: Int) -> Int {
        2 * max(0, size - offset) + (64 << 20)
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
