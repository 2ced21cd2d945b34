import EventLog
import Logbook
import Foundation

/// Progress for long projection work: events done, rate, time left.
final class ProjectionProgress: @unchecked Sendable {
    private let start = Date()
    func report(_ done: Int, _ total: Int) {
        let elapsed = max(0.001, Date().timeIntervalSince(start))
        let rate = Double(done) / elapsed
        let left = rate > 0 ? Double(total - done) / rate : 0
        Terminal.progress(String(format: "projecting: %d of %d events, %.0f events/s, %.0f s left", done, total, rate, left))
    }
}
