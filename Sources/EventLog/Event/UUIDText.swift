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
    @inline(__always)
    public static func parse(_ b: UnsafeRawBufferPointer, lowercaseOnly: Bool = false) -> UUID? {
        guard b.count == 36, b[8] == 0x2D, b[13] == 0x2D, b[18] == 0x2D, b[23] == 0x2D else { return nil }
        var tuple: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let ok = hexValues.withUnsafeBufferPointer { table in
            withUnsafeMutableBytes(of: &tuple) { out -> Bool in
                var i = 0
                var bad: UInt8 = 0
                var upper: UInt8 = 0
                for o in 0..<16 {
                    if i == 8 || i == 13 || i == 18 || i == 23 { i += 1 }
                    let h = b[i], l = b[i + 1]
                    let hi = table[Int(h)], lo = table[Int(l)]
                    bad |= hi | lo
                    // Bit 0x20 clear on a letter means uppercase.
                    upper |= (h >= 0x41 && h <= 0x46 ? 1 : 0) | (l >= 0x41 && l <= 0x46 ? 1 : 0)
                    out[o] = hi << 4 | (lo & 0x0F)
                    i += 2
                }
                return bad & 0xF0 == 0 && !(lowercaseOnly && upper != 0)
            }
        }
        return ok ? UUID(uuid: tuple) : nil
    }

    @inline(__always) static func lowerHex(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x61...0x66: c - 0x61 + 10
        default: nil
        }
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

    /// The lowercase hex digit of a nibble, by arithmetic (no table: a global table costs a
    /// lazy-initialisation check and a bounds check per digit, 32 per UUID).
    @inline(__always) static func hexDigit(_ n: UInt8) -> UInt8 {
        n < 10 ? 0x30 &+ n : 0x57 &+ n
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

    /// Writes the 36 bytes of text of the 16 bytes at `src` into `out`; returns 36.
    @inline(__always)
    static func write(bytes src: UnsafeRawBufferPointer, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
        precondition(src.count == 16 && out.count >= 36)
        var o = 0
        for i in 0..<16 {
            if i == 4 || i == 6 || i == 8 || i == 10 {
                out[o] = 0x2D
                o += 1
            }
            out[o] = hexDigit(src[i] >> 4)
            out[o + 1] = hexDigit(src[i] & 0x0F)
            o += 2
        }
        return 36
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
