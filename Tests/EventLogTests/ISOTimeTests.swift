import Foundation
import Testing
@testable import EventLog

/// `ISOTime.parse` is the one ISO 8601 reader: timestamp fields, command-line times and the
/// pages' filters all go through it.
@Suite struct ISOTimeParseTests {
    /// A date from outside (a legacy file's modification time, a caller's bound) is any `Double`:
    /// turned into milliseconds, it is held to 0 and the end of year 9999, the last time written
    /// as it is (a file dated 10^17 s trapped a legacy import; a purge bound of year 10500 was
    /// written as year 0500).
    @Test func millisOfAnyDateAreHeld() {
        #expect(ISOTime.millis(Date(timeIntervalSince1970: 1_767_225_600.25)) == 1_767_225_600_250)
        #expect(ISOTime.millis(Date(timeIntervalSince1970: -5)) == 0)
        #expect(ISOTime.millis(Date(timeIntervalSince1970: 1e17)) == ISOTime.millisMax)
        #expect(ISOTime.millis(Date(timeIntervalSince1970: .infinity)) == ISOTime.millisMax)
        #expect(ISOTime.string(millis: ISOTime.millisMax) == "9999-12-31T23:59:59.999Z")
        #expect(ISOTime.millis(Date(timeIntervalSince1970: 253_402_300_799)) == 253_402_300_799_000)
        #expect(ISOTime.millis(Date(timeIntervalSince1970: -.infinity)) == 0)
        #expect(ISOTime.millis(Date(timeIntervalSince1970: .nan)) == 0)
        #expect(ISOTime.millis(Date.distantFuture) > ISOTime.millis(Date()))
        // What is made of them still reads.
        #expect(!ISOTime.string(millis: ISOTime.millis(Date(timeIntervalSince1970: 1e17))).isEmpty)
    }

    @Test(arguments: [
        ("1970-01-01", Int64(0)),
        ("2026-01-31", Int64(1_769_817_600_000)),
        ("2026-01-31T12:00:00Z", Int64(1_769_860_800_000)),
        ("2026-01-31T12:00Z", Int64(1_769_860_800_000)),
        ("2026-01-31t12:00:00.5z", Int64(1_769_860_800_500)),
        ("2026-01-31 12:00:00.123456Z", Int64(1_769_860_800_123)),
        ("2026-01-31T14:30:00+02:30", Int64(1_769_860_800_000)),
        ("2026-01-31T09:00:00-03:00", Int64(1_769_860_800_000)),
        ("1969-12-31T23:59:59Z", Int64(-1000)),
        ("2024-02-29T00:00:00Z", Int64(1_709_164_800_000)),
    ])
    func readsEveryAcceptedShape(_ text: String, _ millis: Int64) {
        #expect(ISOTime.parse(text) == millis)
    }

    @Test(arguments: ["", "2026", "2026-1-31", "2026-13-01", "2026-01-32", "2026-01-31T", "2026-01-31T24:00Z",
                      "2026-01-31T12:60Z", "2026-01-31T12:00", "2026-01-31T12:00:00", "2026-01-31T12:00:00.Z",
                      "2026-01-31T12:00:00Zjunk", "2026-01-31T12:00:00+2:00", "2026-01-31T12:00:00+02:00x",
                      "２０２６-01-31", "2026-01-31T12:00:61Z"])
    func refusesEverythingElse(_ text: String) {
        #expect(ISOTime.parse(text) == nil)
    }

    @Test func dateOnlyRefusesTimes() {
        #expect(ISOTime.parse("2026-01-31", dateOnly: true) == 1_769_817_600_000)
        #expect(ISOTime.parse("2026-01-31T00:00:00Z", dateOnly: true) == nil)
    }

    /// What ISOTime writes it reads back, to the millisecond, and Foundation agrees.
    @Test func readsBackWhatItWrites() {
        var rng = SystemRandomNumberGenerator()
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for _ in 0..<2000 {
            let ms = UInt64.random(in: 0..<253_402_300_799_000, using: &rng)
            let text = ISOTime.string(millis: ms)
            #expect(ISOTime.parse(text) == Int64(ms), "\(text)")
            #expect(f.date(from: text).map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) } == Int64(ms), "\(text)")
        }
    }

    /// Lenient, for other apps' files (a legacy import): no zone is UTC, offsets may lack the
    /// colon or the minutes. Strict refuses all three; both refuse what is not a time.
    @Test func lenientTakesWhatOtherAppsWrite() {
        let utc = ISOTime.parse("2026-01-31T10:30:00Z")
        for text in ["2026-01-31T10:30:00", "2026-01-31 10:30", "2026-01-31T12:30:00+0200", "2026-01-31T12:30:00+02"] {
            #expect(ISOTime.parse(text, lenient: true) == utc, "\(text)")
            #expect(ISOTime.parse(text) == nil, "\(text)")
        }
        for text in ["2026-01-31T10:30:00+2", "2026-01-31T10:30:00+02:0", "2026-01-31T10:30:00+0260", "2026-01-31T10:30:00Q"] {
            #expect(ISOTime.parse(text, lenient: true) == nil, "\(text)")
        }
    }
}
