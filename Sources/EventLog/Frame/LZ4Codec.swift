import CLZ4

/// Compresses and decompresses frame payloads as standard LZ4 frames (the LZ4F format of
/// liblz4), so the reference `lz4` tool decodes a payload cut out of a segment.
///
/// One codec holds reusable contexts and buffers: not thread-safe; use one per thread.
final class LZ4Codec {
    private var dctx: OpaquePointer?
    /// Writes frame headers for payloads compressed in independent blocks (made at first use).
    private var cctx: OpaquePointer?
    private var prefs = LZ4F_preferences_t()

    init() {
        var d: OpaquePointer?
        let rd = LZ4F_createDecompressionContext(&d, UInt32(LZ4F_VERSION))
        precondition(LZ4F_isError(rd) == 0, "liblz4 could not allocate a context")
        dctx = d
        prefs.frameInfo.blockSizeID = LZ4F_max256KB
        prefs.frameInfo.blockMode = LZ4F_blockLinked
        prefs.frameInfo.contentChecksumFlag = LZ4F_noContentChecksum
        prefs.compressionLevel = 0
    }

    deinit {
        LZ4F_freeDecompressionContext(dctx)
        if let cctx { LZ4F_freeCompressionContext(cctx) }
    }

    /// Appends the header of an LZ4 frame of independent blocks of at most
    /// `LZ4BlockWriter.blockBytesMax` that holds `contentSize` bytes (content size present, no
    /// content checksum): what goes before blocks `LZ4BlockWriter` made, and the end mark after
    /// them (`appendEndMark`).
    func appendIndependentFrameHeader(contentSize: Int, into output: inout [UInt8]) {
        if cctx == nil {
            var c: OpaquePointer?
            let r = LZ4F_createCompressionContext(&c, UInt32(LZ4F_VERSION))
            precondition(LZ4F_isError(r) == 0, "liblz4 could not allocate a context")
            cctx = c
        }
        var p = prefs
        p.frameInfo.blockMode = LZ4F_blockIndependent
        p.frameInfo.contentSize = UInt64(contentSize)
        var header = [UInt8](repeating: 0, count: Int(LZ4F_HEADER_SIZE_MAX))
        let n = header.withUnsafeMutableBytes { LZ4F_compressBegin(cctx, $0.baseAddress, $0.count, &p) }
        precondition(LZ4F_isError(n) == 0, "LZ4F could not write a frame header: \(String(cString: LZ4F_getErrorName(n)))")
        output.append(contentsOf: header[..<n])
    }

    /// Appends the end mark of an LZ4 frame (a zero block size; no content checksum follows).
    static func appendEndMark(into output: inout [UInt8]) {
        output.append(contentsOf: [0, 0, 0, 0] as [UInt8])
    }

    /// Appends an LZ4 frame holding `input` to `output`; returns the number of bytes appended.
    func compress(_ input: UnsafeRawBufferPointer, into output: inout [UInt8]) -> Int {
        var p = prefs
        p.frameInfo.contentSize = UInt64(input.count)
        let bound = LZ4F_compressFrameBound(input.count, &p)
        let start = output.count
        output.reserveCapacity(start + bound)
        var written = 0
        // Grow with zeroes, compress in place, then trim to the real size.
        output.append(contentsOf: repeatElement(0, count: bound))
        output.withUnsafeMutableBytes { out in
            let dst = out.baseAddress! + start
            let r = LZ4F_compressFrame(dst, bound, input.baseAddress, input.count, &p)
            precondition(LZ4F_isError(r) == 0, "LZ4F compression failed within its own bound: \(String(cString: LZ4F_getErrorName(r)))")
            written = r
        }
        output.removeLast(bound - written)
        return written
    }

    /// Decompresses one LZ4 frame that must expand to exactly `expected` bytes.
    func decompress(_ input: UnsafeRawBufferPointer, expected: Int, into output: inout [UInt8]) throws(LZ4DecodeError) {
        // The LZ4 frame's own content size (writers always set it): one that differs from the
        // frame header's raw size is refused before a buffer is sized by either.
        if let declared = Self.contentSize(input), declared != 0, declared != UInt64(expected) {
            throw .malformed("the LZ4 frame holds \(declared) bytes, the frame header says \(expected)")
        }
        // The bytes are written by liblz4, never zeroed first (zeroing a frame's worth cost the
        // reading worker about a tenth of its time, 2026-11-30): a buffer kept from the last frame
        // is cut or grown to this one's size (its old bytes overwritten below), and a new one is
        // made uninitialized. Room is kept only while it is at most twice what this frame needs;
        // one large frame must not size every later buffer. A buffer still shared (a caller that
        // kept it, as `FrameDecoder.views` does) must be let go first (`output = []`): cutting it
        // would copy it.
        let failure: LZ4DecodeError?
        if !output.isEmpty && output.capacity >= expected && output.capacity <= 2 * expected {
            if output.count > expected {
                output.removeLast(output.count - expected)
            } else {
                // Zeros in blocks of at most `zeros.count`: the gap may be larger.
                while output.count < expected { output.append(contentsOf: Self.zeros.prefix(expected - output.count)) }
            }
            failure = output.withUnsafeMutableBytes { out in decompressFrame(input, expected: expected, into: out) }
        } else {
            var made: LZ4DecodeError?
            // Room for frames up to an eighth larger, which then reuse it.
            let room = expected + expected / 8
            output = [UInt8](unsafeUninitializedCapacity: room) { buffer, initialized in
                made = decompressFrame(input, expected: expected, into: UnsafeMutableRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(buffer)[..<expected]))
                // What liblz4 wrote is the whole frame only when it succeeded.
                initialized = made == nil ? expected : 0
            }
            failure = made
        }
        if let failure { throw failure }
    }

    /// Decompresses the LZ4 frame `input` into `out` (exactly `expected` bytes); nil when every
    /// byte of `out` was written by it, else what is wrong.
    private func decompressFrame(_ input: UnsafeRawBufferPointer, expected: Int, into out: UnsafeMutableRawBufferPointer) -> LZ4DecodeError? {
        precondition(out.count == expected, "an LZ4 frame is decompressed into room of its size")
        LZ4F_resetDecompressionContext(dctx)
        var produced = 0
        var consumed = 0
        var opts = LZ4F_decompressOptions_t()
        opts.stableDst = 1
        guard let src = input.baseAddress else { return .malformed("empty payload") }
        while true {
            var dstSize = expected - produced
            var srcSize = input.count - consumed
            let r = LZ4F_decompress(dctx, out.baseAddress.map { $0 + produced }, &dstSize, src + consumed, &srcSize, &opts)
            if LZ4F_isError(r) != 0 { return .malformed(String(cString: LZ4F_getErrorName(r))) }
            produced += dstSize
            consumed += srcSize
            if r == 0 { break }
            if srcSize == 0 && dstSize == 0 { return .malformed("payload ends before the LZ4 frame does") }
            if consumed >= input.count { return .malformed("payload ends before the LZ4 frame does") }
        }
        if consumed != input.count { return .malformed("\(input.count - consumed) bytes follow the LZ4 frame") }
        if produced != expected { return .malformed("decoded \(produced) bytes, header says \(expected)") }
        return nil
    }
}

/// Compresses bytes into the blocks of an LZ4 frame whose blocks are independent: each block is
/// its 4-byte little-endian size (high bit set when the block is stored uncompressed) and its
/// data. Blocks made by several writers at once, each for its own run of the input, joined in
/// order between `LZ4Codec.appendIndependentFrameHeader` and `appendEndMark`, are one standard
/// LZ4 frame (any LZ4 frame decoder reads it). One writer per thread.
final class LZ4BlockWriter {
    /// Bytes of input per block at most: the 256 KiB the frame header declares.
    static let blockBytesMax = 256 << 10
    private let state: UnsafeMutableRawPointer
    /// The blocks made since `reset` are `bytes[..<count]` (the array is grown, never shrunk,
    /// so that its bytes need no zeroing per use).
    private(set) var bytes: [UInt8] = []
    private(set) var count = 0

    init() {
        state = UnsafeMutableRawPointer.allocate(byteCount: Int(LZ4_sizeofState()), alignment: 16)
    }

    deinit { state.deallocate() }

    func reset() { count = 0 }

    /// Appends the blocks holding `input`, in order.
    func append(_ input: UnsafeRawBufferPointer) {
        var at = 0
        while at < input.count {
            let n = min(Self.blockBytesMax, input.count - at)
            let bound = Int(LZ4_compressBound(Int32(n)))
            let room = count + 4 + max(bound, n)
            if bytes.count < room { bytes.append(contentsOf: repeatElement(0, count: room + room / 2 - bytes.count)) }
            let src = input.baseAddress! + at
            let size: UInt32 = bytes.withUnsafeMutableBytes { out in
                let dst = out.baseAddress! + count + 4
                let r = Int(LZ4_compress_fast_extState(state, src, dst, Int32(n), Int32(bound), 1))
                // Stored as is when compression fails to shrink the block (as liblz4 does).
                if r <= 0 || r >= n {
                    dst.copyMemory(from: src, byteCount: n)
                    return UInt32(n) | 0x8000_0000
                }
                return UInt32(r)
            }
            withUnsafeBytes(of: size.littleEndian) { le in
                bytes.withUnsafeMutableBytes { $0.baseAddress!.advanced(by: count).copyMemory(from: le.baseAddress!, byteCount: 4) }
            }
            count += 4 + Int(size & 0x7FFF_FFFF)
            at += n
        }
    }
}

extension LZ4Codec {
    static let zeros = [UInt8](repeating: 0, count: 1 << 20)

    /// The content size an LZ4 frame's descriptor declares (magic, FLG with bit 3 set, BD, then
    /// 8 bytes little-endian); nil when it declares none or is not an LZ4 frame (decompression
    /// then says what is wrong). liblz4 reads a declared 0 as "unknown", and so do callers.
    static func contentSize(_ input: UnsafeRawBufferPointer) -> UInt64? {
        guard input.count >= 14, input[0] == 0x04, input[1] == 0x22, input[2] == 0x4D, input[3] == 0x18, input[4] & 0x08 != 0 else { return nil }
        var size: UInt64 = 0
        for i in 0..<8 { size |= UInt64(input[6 + i]) << (8 * UInt64(i)) }
        return size
    }
}

enum LZ4DecodeError: Error {
    case malformed(String)
    var message: String {
        switch self { case .malformed(let m): m }
    }
}
