import EventLog
import Logbook
import Foundation

enum TimeArgument {
    /// Parses `2026-01-31`, `2026-01-31T10:00:00Z` or with fractional seconds / offset (`ISOTime.parse`).
    static func parse(_ s: String) -> Date? {
        guard s.utf8.count <= 64, let ms = ISOTime.parse(s) else { return nil }
        return Date(timeIntervalSince1970: Double(ms) / 1000)
    }
}
