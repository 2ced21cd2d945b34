import Foundation

/// Appends little-endian integers, LEB128 varints and raw bytes to a growable buffer.
/// Reused across frames to avoid reallocating.
struct ByteWriter {
    var bytes: [UInt8] = []

    init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }

    var count: Int { bytes.count }

    mutating func removeAll() { bytes.removeAll(keepingCapacity: true) }

    @inline(__always) mutating func u8(_ v: UInt8) { bytes.append(v) }


    @inline(__always) mutating func u32(_ v: UInt32) {
        withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) }
    }

    @inline(__always) mutating func u64(_ v: UInt64) {
        withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) }
    }

    @inline(__always) mutating func varint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    @inline(__always) mutating func uuid(_ u: UUID) {
        withUnsafeBytes(of: u.uuid) { bytes.append(contentsOf: $0) }
    }

    @inline(__always) mutating func raw<C: Collection>(_ c: C) where C.Element == UInt8 {
        bytes.append(contentsOf: c)
    }

    /// Room before a record's body for its length (a varint of at most 10 bytes).
    static let lengthRoom = 10
    /// Where `writeRecord` builds a record: grown, never shrunk, so it is zeroed only as it grows.
    private var scratch: [UInt8] = []

    /// Appends one length-prefixed record: `body` writes at most `bound` bytes through a cursor
    /// into scratch room, and the record lands as the varint length of what it wrote followed by
    /// those bytes, in one copy: nothing is zeroed per record, trimmed after, or moved to fit a
    /// longer length. Traps if `body` writes past `bound` (a wrong bound is a bug, never input).
    @inline(__always) mutating func writeRecord(bound: Int, _ body: (inout RawCursor) -> Void) {
        let need = Self.lengthRoom + bound
        if scratch.count < need { scratch = [UInt8](repeating: 0, count: max(need, 4096)) }
        let (start, count) = scratch.withUnsafeMutableBufferPointer { room -> (Int, Int) in
            let bodyStart = room.baseAddress! + Self.lengthRoom
            var c = RawCursor(p: bodyStart, end: bodyStart + bound)
            body(&c)
            let length = c.p - bodyStart
            var digits = 1
            var v = UInt64(length)
            while v >= 0x80 {
                v >>= 7
                digits += 1
            }
            let start = bodyStart - digits
            v = UInt64(length)
            for i in 0..<digits {
                start[i] = i == digits - 1 ? UInt8(v) : UInt8(truncatingIfNeeded: v) | 0x80
                v >>= 7
            }
            return (Self.lengthRoom - digits, digits + length)
        }
        scratch.withUnsafeBufferPointer { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: $0[start..<start + count])) }
    }

    mutating func patchU32(at offset: Int, _ v: UInt32) {
        var le = v.littleEndian
        withUnsafeBytes(of: &le) { src in
            for i in 0..<4 { bytes[offset + i] = src[i] }
        }
    }
}

/// Why a byte reader stopped: the input ended early, or a value was out of range.
struct ByteReaderError: Error, Equatable {
    var offset: Int
    var message: String
}

/// Reads what `ByteWriter` writes, with bounds checks that throw instead of trapping.
struct ByteReader {
    let base: UnsafeRawBufferPointer
    var offset: Int
    let end: Int

    init(_ base: UnsafeRawBufferPointer, offset: Int = 0, end: Int? = nil) {
        self.base = base
        self.offset = offset
        self.end = end ?? base.count
    }

    var remaining: Int { end - offset }

    @inline(__always) func need(_ n: Int) throws {
        if n > end - offset { throw ByteReaderError(offset: offset, message: "truncated: need \(n) bytes, \(end - offset) left") }
    }

    @inline(__always) mutating func u8() throws -> UInt8 {
        try need(1)
        defer { offset += 1 }
        return base[offset]
    }


    @inline(__always) mutating func u32() throws -> UInt32 {
        try need(4)
        defer { offset += 4 }
        return UInt32(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    @inline(__always) mutating func u64() throws -> UInt64 {
        try need(8)
        defer { offset += 8 }
        return UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    /// A LEB128 varint in canonical form: at most 10 bytes, no bits past 64, and no trailing
    /// zero group (0x80 0x00 is not another spelling of 0), so every value has exactly one encoding.
    @inline(__always) mutating func varint() throws -> UInt64 {
        // One byte, the common case (codes, counts, short lengths): canonical by construction.
        // Two, the next most common (a record's length, most clock deltas): canonical when the
        // second is not 0 (a trailing zero group, refused by `varintSlow`).
        if offset < end {
            let b = base[offset]
            if b < 0x80 {
                offset += 1
                return UInt64(b)
            }
            if offset + 1 < end {
                let c = base[offset + 1]
                if c < 0x80 && c != 0 {
                    offset += 2
                    return UInt64(b & 0x7F) | UInt64(c) << 7
                }
            }
        }
        return try varintSlow()
    }

    mutating func varintSlow() throws -> UInt64 {
        let start = offset
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            try need(1)
            let b = base[offset]
            offset += 1
            if shift == 63 && b > 1 { throw ByteReaderError(offset: offset - 1, message: "varint overflows 64 bits") }
            result |= UInt64(b & 0x7F) << shift
            if b < 0x80 {
                if b == 0 && offset - start > 1 { throw ByteReaderError(offset: start, message: "varint is not in canonical form (trailing zero group)") }
                return result
            }
            shift += 7
            if shift > 63 { throw ByteReaderError(offset: offset - 1, message: "varint longer than 10 bytes") }
        }
    }

    /// A varint that counts bytes (or items of at least one byte) still to come in this reader:
    /// refused when it is larger than what remains, so it always fits an `Int` and never makes a
    /// caller allocate or index past the input.
    @inline(__always) mutating func length(_ what: StaticString) throws -> Int {
        let at = offset
        let v = try varint()
        guard v <= UInt64(remaining) else {
            throw ByteReaderError(offset: at, message: "\(what) \(v) exceeds the \(remaining) bytes left")
        }
        return Int(v)
    }

    /// A varint that must be at most `limit` (a code or a small count), as an `Int`.
    @inline(__always) mutating func small(_ what: StaticString, atMost limit: Int) throws -> Int {
        let at = offset
        let v = try varint()
        guard v <= UInt64(limit) else { throw ByteReaderError(offset: at, message: "\(what) \(v) is out of range (at most \(limit))") }
        return Int(v)
    }

    @inline(__always) mutating func uuid() throws -> UUID {
        try need(16)
        defer { offset += 16 }
        return UUID.load(from: base, at: offset)
    }

    @inline(__always) mutating func bytes(_ n: Int) throws -> UnsafeRawBufferPointer {
        try need(n)
        defer { offset += n }
        return UnsafeRawBufferPointer(rebasing: base[offset..<offset + n])
    }
}

@inline(__always) func zigzag(_ v: Int64) -> UInt64 { UInt64(bitPattern: (v << 1) ^ (v >> 63)) }
@inline(__always) func unzigzag(_ v: UInt64) -> Int64 { Int64(bitPattern: v >> 1) ^ -Int64(bitPattern: v & 1) }

/// Whether every byte is ASCII: eight bytes at a time.
@inline(__always)
func isASCII(_ p: UnsafeRawBufferPointer) -> Bool {
    let n = p.count
    var acc: UInt64 = 0
    var i = 0
    while i + 8 <= n {
        acc |= p.loadUnaligned(fromByteOffset: i, as: UInt64.self)
        i += 8
    }
    while i < n {
        acc |= UInt64(p[i])
        i += 1
    }
    return acc & 0x8080_8080_8080_8080 == 0
}

/// Whether bytes are valid UTF-8; ASCII text is checked without allocating.
@inline(__always)
func isValidUTF8(_ p: UnsafeRawBufferPointer) -> Bool {
    isASCII(p) || String(validating: p.assumingMemoryBound(to: UInt8.self), as: UTF8.self) != nil
}

/// Makes a String from bytes that must be valid UTF-8 (nil otherwise). ASCII, the common case,
/// takes a fast path that avoids the standard library's generic validation.
@inline(__always)
public func makeUTF8String(_ p: UnsafeRawBufferPointer) -> String? {
    let u = p.assumingMemoryBound(to: UInt8.self)
    if isASCII(p) { return String(decoding: u, as: UTF8.self) }
    return String(validating: u, as: UTF8.self)
}

/// Writes into room a `ByteWriter` reserved (`writeRecord`): raw stores, bounds checked once per
/// value against the room's end.
struct RawCursor {
    var p: UnsafeMutablePointer<UInt8>
    let end: UnsafeMutablePointer<UInt8>

    @inline(__always) mutating func room(_ n: Int) {
        precondition(end - p >= n, "a record's size bound was too small")
    }

    @inline(__always) mutating func u8(_ v: UInt8) {
        room(1)
        p.pointee = v
        p += 1
    }

    @inline(__always) mutating func u64(_ v: UInt64) {
        room(8)
        withUnsafeBytes(of: v.littleEndian) { UnsafeMutableRawPointer(p).copyMemory(from: $0.baseAddress!, byteCount: 8) }
        p += 8
    }

    @inline(__always) mutating func varint(_ value: UInt64) {
        room(10)
        var v = value
        while v >= 0x80 {
            p.pointee = UInt8(truncatingIfNeeded: v) | 0x80
            p += 1
            v >>= 7
        }
        p.pointee = UInt8(v)
        p += 1
    }

    @inline(__always) mutating func uuid(_ u: UUID) {
        room(16)
        withUnsafeBytes(of: u.uuid) { UnsafeMutableRawPointer(p).copyMemory(from: $0.baseAddress!, byteCount: 16) }
        p += 16
    }

    @inline(__always) mutating func raw(_ b: UnsafeBufferPointer<UInt8>) {
        room(b.count)
        if let src = b.baseAddress, b.count > 0 { UnsafeMutableRawPointer(p).copyMemory(from: src, byteCount: b.count) }
        p += b.count
    }

    /// A string as its UTF-8 byte count (a varint) and bytes.
    @inline(__always) mutating func text(_ s: String) {
        let done: Void? = s.utf8.withContiguousStorageIfAvailable { u in
            varint(UInt64(u.count))
            raw(u)
        }
        if done == nil {
            var s = s
            s.withUTF8 { u in
                varint(UInt64(u.count))
                raw(u)
            }
        }
    }
}

extension UUID {
    /// The UUID of the 16 bytes at `offset` in `p` (the caller has checked they are there).
    /// A UUID holds its 16 bytes and nothing else (size 16, alignment 1, plain data: known when
    /// compiled), so it is loaded whole: `UUID(uuid:)` is not inlined across modules, and its 16
    /// one-byte arguments were loaded and passed one by one, for each id of each event read
    /// (2026-11-29). Another layout takes the initializer.
    @inline(__always)
    static func load(from p: UnsafeRawBufferPointer, at offset: Int) -> UUID {
        if loadsWhole { return p.loadUnaligned(fromByteOffset: offset, as: UUID.self) }
        return UUID(uuid: p.loadUnaligned(fromByteOffset: offset, as: uuid_t.self))
    }

    /// Whether `load` reads a UUID whole: its layout is its 16 bytes alone.
    @inline(__always)
    static var loadsWhole: Bool { MemoryLayout<UUID>.size == 16 && MemoryLayout<UUID>.alignment == 1 && _isPOD(UUID.self) }
}
