/// ISO 8601 UTC text for wall-clock milliseconds (`2026-01-31T09:05:00.123Z`), without Foundation's
/// formatter (which costs microseconds per call). Stateless; safe from any thread.
public enum ISOTime {
    /// Formats milliseconds since the Unix epoch; without `fraction`, to whole seconds (`…:00Z`).
    public static func string(millis: UInt64, fraction: Bool = true) -> String {
        return String(unsafeUninitializedCapacity: 24) { write(millis: millis, fraction: fraction, into: $0) }
    }

    /// Appends the text `string(millis:fraction:)` returns, as UTF-8, to `out` (no String made).
    public static func append(millis: UInt64, fraction: Bool = true, to out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: 24))
        let n = out.withUnsafeMutableBufferPointer { write(millis: millis, fraction: fraction, into: UnsafeMutableBufferPointer(rebasing: $0[start...])) }
        out.removeLast(24 - n)
    }

    /// Writes the text into `b` (at least 24 bytes); returns the bytes written.
    static func write(millis: UInt64, fraction: Bool, into b: UnsafeMutableBufferPointer<UInt8>) -> Int {
        let days = Int64(millis / 86_400_000)
        let msOfDay = Int(millis % 86_400_000)
        // Civil date from days since 1970-01-01 (H. Hinnant's days_from_civil, inverted).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = Int(doy - (153 * mp + 2) / 5 + 1)
        let m = Int(mp < 10 ? mp + 3 : mp - 9)
        let y = Int(yoe + era * 400 + (m <= 2 ? 1 : 0))
        let h = msOfDay / 3_600_000, mi = msOfDay / 60_000 % 60, s = msOfDay / 1000 % 60, ms = msOfDay % 1000
        func put(_ v: Int, _ width: Int, _ at: Int) {
            var v = v
            for k in stride(from: at + width - 1, through: at, by: -1) {
                b[k] = UInt8(0x30 + v % 10)
                v /= 10
            }
        }
        put(y, 4, 0); b[4] = 0x2D; put(m, 2, 5); b[7] = 0x2D; put(d, 2, 8); b[10] = 0x54
        put(h, 2, 11); b[13] = 0x3A; put(mi, 2, 14); b[16] = 0x3A; put(s, 2, 17)
        if !fraction {
            b[19] = 0x5A
            return 20
        }
        b[19] = 0x2E
        put(ms, 3, 20); b[23] = 0x5A
        return 24
    }

    public static func string(_ hlc: HLC) -> String { string(millis: hlc.wallMillis) }
}
