import EventLog
import Foundation
import Projections

/// Opens a store's projection for a reading command. When no other process is writing, it
/// first takes the writer lock briefly to recover the log and catch the projection up; when one
/// is, it reads the projection as it is and says how far behind it is.
func openProjectionForReading(_ options: StoreOptions) throws -> Projection {
    let store = try options.open()
    do {
        let appender = try LogAppender.opening(store)
        Terminal.reportRecovery(appender.recovery)
        let projection = try Projection(store: store)
        try projection.catchUp { done, total in Terminal.progress("projecting: \(done) of \(total) events") }
        Terminal.endProgress()
        try appender.close()
        return projection
    } catch let e as LogError where e.isLocked {
        let projection = try Projection(store: store)
        let lag = try projection.lag().values.reduce(0, +)
        if lag > 0 { Terminal.note("another process is writing; the projection is \(lag) events behind the log") }
        return projection
    }
}

/// Progress for long projection work: events done, rate, time left.
final class ProjectionProgress {
    private let start = Date()
    func report(_ done: Int, _ total: Int) {
        let elapsed = max(0.001, Date().timeIntervalSince(start))
        let rate = Double(done) / elapsed
        let left = rate > 0 ? Double(total - done) / rate : 0
        Terminal.progress(String(format: "projecting: %d of %d events, %.0f events/s, %.0f s left", done, total, rate, left))
    }
}
