import Foundation

/// ISO 8601 UTC text for wall-clock milliseconds (`2026-01-31T09:05:00.123Z`), without Foundation's
/// formatter (which costs microseconds per call). Stateless; safe from any thread.
public enum ISOTime {
    /// Milliseconds since the Unix epoch of `date`, held to 0 before it and to `millisMax`
    /// (the last of year 9999, the last `string(millis:)` writes as it is) after it: a date from
    /// outside, such as a file's modification time or a caller's bound, may be any `Double`, and
    /// converting it as it is trapped past `UInt64.max`, or on NaN.
    public static func millis(_ date: Date) -> UInt64 {
        let ms = date.timeIntervalSince1970 * 1000
        guard !ms.isNaN, ms > 0 else { return 0 }
        return ms < Double(millisMax) ? UInt64(ms) : millisMax
    }

    /// 9999-12-31T23:59:59.999Z.
    public static let millisMax: UInt64 = 253_402_300_799_999

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

    // MARK: Parsing

    /// The one ISO 8601 reader of the project (timestamp fields, command-line times, the pages'
    /// filters): `YYYY-MM-DD` (midnight UTC), or that followed by `T` (or `t`, or a space),
    /// `HH:MM[:SS[.fraction]]` and `Z` or `±HH:MM`. Returns milliseconds since the Unix epoch
    /// (negative before 1970; fractions past milliseconds are cut), nil for anything else.
    /// Total: no input traps, however long or odd.
    ///
    /// `lenient` also takes what other apps' files hold (a legacy import): a time with no zone
    /// (UTC), and offsets written `±HHMM` or `±HH`.
    public static func parse(_ text: String, dateOnly: Bool = false, lenient: Bool = false) -> Int64? {
        var text = text
        return text.withUTF8 { parse($0, dateOnly: dateOnly, lenient: lenient) }
    }

    /// `parse(_:dateOnly:lenient:)` on UTF-8 bytes.
    public static func parse(_ b: UnsafeBufferPointer<UInt8>, dateOnly: Bool = false, lenient: Bool = false) -> Int64? {
        func digits(_ at: Int, _ n: Int) -> Int? {
            guard at >= 0, at + n <= b.count else { return nil }
            var v = 0
            for i in at..<at + n {
                guard b[i] >= 0x30 && b[i] <= 0x39 else { return nil }
                v = v * 10 + Int(b[i] - 0x30)
            }
            return v
        }
        guard let y = digits(0, 4), b.count >= 10, b[4] == 0x2D, let mo = digits(5, 2), b[7] == 0x2D, let d = digits(8, 2),
              (1...12).contains(mo), (1...31).contains(d) else { return nil }
        let day = daysFromCivil(y, mo, d)
        if b.count == 10 { return day * 86_400_000 }
        if dateOnly { return nil }
        guard b[10] == 0x54 || b[10] == 0x74 || b[10] == 0x20, let h = digits(11, 2), b.count > 13, b[13] == 0x3A, let mi = digits(14, 2),
              h < 24, mi < 60 else { return nil }
        var ms = Int64(h * 3_600_000 + mi * 60_000)
        var i = 16
        if i < b.count, b[i] == 0x3A {
            guard let sec = digits(i + 1, 2), sec <= 60 else { return nil }
            ms += Int64(sec * 1000)
            i += 3
            if i < b.count, b[i] == 0x2E {
                i += 1
                let start = i
                var scale = 100
                while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                    ms += Int64(Int(b[i] - 0x30) * scale)
                    scale /= 10
                    i += 1
                }
                guard i > start else { return nil }
            }
        }
        guard i < b.count else { return lenient ? day * 86_400_000 + ms : nil }
        if b[i] == 0x5A || b[i] == 0x7A { return i + 1 == b.count ? day * 86_400_000 + ms : nil }
        guard b[i] == 0x2B || b[i] == 0x2D, let oh = digits(i + 1, 2), oh < 24 else { return nil }
        let om: Int
        if i + 3 < b.count, b[i + 3] == 0x3A, let m = digits(i + 4, 2), i + 6 == b.count {
            om = m
        } else if lenient, let m = digits(i + 3, 2), i + 5 == b.count {
            om = m
        } else if lenient, i + 3 == b.count {
            om = 0
        } else {
            return nil
        }
        guard om < 60 else { return nil }
        let offset = Int64(oh * 3_600_000 + om * 60_000)
        return day * 86_400_000 + ms + (b[i] == 0x2B ? -offset : offset)
    }

    /// Days since 1970-01-01 of a civil date (H. Hinnant's days_from_civil).
    static func daysFromCivil(_ y: Int, _ m: Int, _ d: Int) -> Int64 {
        let y = Int64(m <= 2 ? y - 1 : y)
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = Int64(m > 2 ? m - 3 : m + 9)
        let doy = (153 * mp + 2) / 5 + Int64(d) - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}
