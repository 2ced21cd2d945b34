import ArgumentParser
import EventLog
import Projections

struct ReplayCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Bring the projection up to date with the log, or rebuild it from the whole log.",
        discussion: "--rebuild writes a new projection beside the old one and swaps it in atomically; a crash mid-rebuild leaves the old one usable."
    )
    @OptionGroup var options: StoreOptions
    @Flag(help: "Rebuild the projection from the whole log.") var rebuild = false

    func execute() throws {
        let store = try options.open()
        let appender = try LogAppender.opening(store)  // one writer: holds the lock throughout
        defer { try? appender.close() }
        Terminal.reportRecovery(appender.recovery)
        let progress = ProjectionProgress()
        let start = Date()
        let n: Int
        if rebuild {
            n = try Projection.rebuild(store: store, progress: progress.report)
        } else {
            n = try Projection(store: store).catchUp(progress: progress.report)
        }
        Terminal.endProgress()
        let seconds = Date().timeIntervalSince(start)
        if options.json {
            print(JSON.object([("events", String(n)), ("rebuilt", rebuild ? "true" : "false"), ("seconds", String(format: "%.3f", seconds))]))
        } else {
            print(rebuild ? "rebuilt the projection from \(n) events in \(String(format: "%.2f", seconds)) s"
                          : (n == 0 ? "projection is up to date" : "applied \(n) events in \(String(format: "%.2f", seconds)) s"))
        }
    }
}

import Foundation
