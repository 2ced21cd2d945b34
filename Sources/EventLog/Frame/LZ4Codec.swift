import CLZ4

/// Compresses and decompresses frame payloads as standard LZ4 frames (the LZ4F format of
/// liblz4), so the reference `lz4` tool decodes a payload cut out of a segment.
///
/// One codec holds reusable contexts and buffers: not thread-safe; use one per thread.
final class LZ4Codec {
    private var dctx: OpaquePointer?
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
        output.removeAll(keepingCapacity: true)
        output.reserveCapacity(expected)
        // Zeros copied in blocks (a copy per block, in any build), overwritten below.
        while output.count < expected { output.append(contentsOf: Self.zeros.prefix(expected - output.count)) }
        LZ4F_resetDecompressionContext(dctx)
        var produced = 0
        var consumed = 0
        var opts = LZ4F_decompressOptions_t()
        opts.stableDst = 1
        let failure: LZ4DecodeError? = output.withUnsafeMutableBytes { out -> LZ4DecodeError? in
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
        if let failure { throw failure }
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
