import Foundation

/// Fast parsing of UUID text (36 characters, hex digits in either case).
package enum UUIDText {
    public static func parse(_ b: ArraySlice<UInt8>) -> UUID? {
        b.withUnsafeBytes { parse($0) }
    }

    /// Parses text in place (no copy of its bytes), hex digits in either case.
    public static func parse(_ s: String) -> UUID? {
        var s = s
        return s.withUTF8 { parse(UnsafeRawBufferPointer($0)) }
    }

    /// Parses 36 bytes of UUID text; with `lowercaseOnly`, only the canonical lowercase form.
    /// Eight digits at a time, in a word (`hexValue`): the loop over the 32 digits, a table
    /// lookup and a case test for each, was about 1.5% of an NDJSON append (2026-11-29).
    @inline(__always)
    public static func parse(_ b: UnsafeRawBufferPointer, lowercaseOnly: Bool = false) -> UUID? {
        guard b.count == 36, b[8] == 0x2D, b[13] == 0x2D, b[18] == 0x2D, b[23] == 0x2D else { return nil }
        func word(_ at: Int) -> UInt64 { UInt64(littleEndian: b.loadUnaligned(fromByteOffset: at, as: UInt64.self)) }
        func half(_ at: Int) -> UInt64 { UInt64(UInt32(littleEndian: b.loadUnaligned(fromByteOffset: at, as: UInt32.self))) }
        // The digits of bytes 0-3, 4-7 (two groups of four), 8-11 (two groups) and 12-15.
        guard let a = hexValue(word(0), lowercaseOnly: lowercaseOnly),
              let c = hexValue(half(9) | half(14) << 32, lowercaseOnly: lowercaseOnly),
              let d = hexValue(half(19) | half(24) << 32, lowercaseOnly: lowercaseOnly),
              let e = hexValue(word(28), lowercaseOnly: lowercaseOnly) else { return nil }
        var bytes: (UInt32, UInt32, UInt32, UInt32) = (a.littleEndian, c.littleEndian, d.littleEndian, e.littleEndian)
        return withUnsafeBytes(of: &bytes) { UUID.load(from: $0, at: 0) }
    }

    /// The values of the eight hex digits in `x` (the first in its low byte), two a byte, as four
    /// bytes (the first in the low byte); nil when a byte is not a hex digit, or is an uppercase
    /// one with `lowercaseOnly`.
    @inline(__always)
    static func hexValue(_ x: UInt64, lowercaseOnly: Bool) -> UInt32? {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let high = ones &* 0x80
        guard x & high == 0 else { return nil }
        // For a byte c below 0x80, c + (0x80 - lo) has its high bit set when c >= lo, and
        // c + (0x7F - hi) when c > hi; neither carries into the next byte.
        func within(_ lo: UInt64, _ hi: UInt64) -> UInt64 {
            (x &+ ones &* (0x80 - lo)) & ~(x &+ ones &* (0x7F - hi)) & high
        }
        var ok = within(0x30, 0x39) | within(0x61, 0x66)
        if !lowercaseOnly { ok |= within(0x41, 0x46) }
        guard ok == high else { return nil }
        // A digit's value is its low nibble; a letter's (bit 0x40 set) is its low nibble + 9.
        var v = (x & 0x0F0F_0F0F_0F0F_0F0F) &+ (x >> 6 & ones) &* 9
        // Two digits to a byte, the first in the high nibble (one byte in each 16 bits), then the
        // four bytes together.
        v = (v & 0x000F_000F_000F_000F) << 4 | (v >> 8 & 0x000F_000F_000F_000F)
        v = (v | v >> 8) & 0x0000_FFFF_0000_FFFF
        v = (v | v >> 16) & 0x0000_0000_FFFF_FFFF
        return UInt32(truncatingIfNeeded: v)
    }

    /// Canonical lowercase text of a UUID, without Foundation's formatting.
    public static func format(_ u: UUID) -> String {
        String(unsafeUninitializedCapacity: 36) { write(u, into: $0) }
    }

    /// Appends the canonical lowercase text of `u`, as UTF-8, to `out` (no String made).
    public static func append(_ u: UUID, to out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: 36))
        _ = out.withUnsafeMutableBufferPointer { write(u, into: UnsafeMutableBufferPointer(rebasing: $0[start...])) }
    }

    /// Canonical lowercase text of the UUID whose 16 bytes `src` holds (read in place: a record's
    /// bytes need not be made a `UUID` first).
    static func format(bytes src: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: 36) { write(bytes: src, into: $0) }
    }

    /// Writes the 36 bytes of text into `out`; returns 36.
    static func write(_ u: UUID, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
        withUnsafeBytes(of: u.uuid) { write(bytes: $0, into: out) }
    }

    /// Writes the 36 bytes of text of the 16 bytes at `src` into `out`; returns 36. Eight digits
    /// at a time, in a word (`hexDigits`): the loop over the sixteen bytes, a test for a dash at
    /// each, was about 2.5% of reading events back (item ids held as text, 2026-11-29).
    @inline(__always)
    static func write(bytes src: UnsafeRawBufferPointer, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
        precondition(src.count == 16 && out.count >= 36)
        func digits(_ at: Int) -> UInt64 { hexDigits(UInt32(littleEndian: src.loadUnaligned(fromByteOffset: at, as: UInt32.self))) }
        let o = UnsafeMutableRawPointer(out.baseAddress!)
        func put(_ v: UInt64, _ at: Int) { o.storeBytes(of: v.littleEndian, toByteOffset: at, as: UInt64.self) }
        func put(_ v: UInt32, _ at: Int) { o.storeBytes(of: v.littleEndian, toByteOffset: at, as: UInt32.self) }
        // 8-4-4-4-12 digits: bytes 0-3, 4-5, 6-7, 8-9, 10-15.
        let a = digits(0), b = digits(4), c = digits(8), d = digits(12)
        put(a, 0)
        put(UInt32(truncatingIfNeeded: b), 9)
        put(UInt32(truncatingIfNeeded: b >> 32), 14)
        put(UInt32(truncatingIfNeeded: c), 19)
        put(UInt32(truncatingIfNeeded: c >> 32), 24)
        put(d, 28)
        out[8] = 0x2D
        out[13] = 0x2D
        out[18] = 0x2D
        out[23] = 0x2D
        return 36
    }

    /// The eight lowercase hex digits of the four bytes of `v` (the first in its low byte), as
    /// eight bytes of text (the first digit in the low byte).
    @inline(__always)
    static func hexDigits(_ v: UInt32) -> UInt64 {
        var x = UInt64(v)
        x = (x | x << 16) & 0x0000_FFFF_0000_FFFF
        x = (x | x << 8) & 0x00FF_00FF_00FF_00FF  // byte i now in bits 16i ..< 16i + 8
        x = (x >> 4 & 0x000F_000F_000F_000F) | (x & 0x000F_000F_000F_000F) << 8  // the high nibble first
        // 1 in each byte whose nibble is 10 or more (nibble + 6 reaches 16).
        let letters = (x &+ 0x0606_0606_0606_0606) >> 4 & 0x0101_0101_0101_0101
        return x &+ 0x3030_3030_3030_3030 &+ letters &* 0x27  // '0' + n, or 'a' + n - 10
    }

    /// Hex digit values; 0xFF for bytes that are not hex digits.
    public static let hexValues: [UInt8] = (0..<256).map { c -> UInt8 in
        switch c {
        case 0x30...0x39: UInt8(c - 0x30)
        case 0x61...0x66: UInt8(c - 0x61 + 10)
        case 0x41...0x46: UInt8(c - 0x41 + 10)
        default: 0xFF
        }
    }

    @inline(__always) public static func hex(_ c: UInt8) -> UInt8? {
        let v = hexValues.withUnsafeBufferPointer { $0[Int(c)] }
        return v == 0xFF ? nil : v
    }
}
