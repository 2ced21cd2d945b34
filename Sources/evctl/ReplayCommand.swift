import ArgumentParser
import EventLog
import Logbook

struct ReplayCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Bring the projection up to date with the log, or rebuild it from the whole log.",
        discussion: "--rebuild writes a new projection beside the old one and swaps it in atomically; a crash mid-rebuild leaves the old one usable."
    )
    @OptionGroup var options: StoreOptions
    @Flag(help: "Rebuild the projection from the whole log.") var rebuild = false

    func execute() throws {
        let progress = ProjectionProgress()
        let start = Date()
        let n: Int
        if rebuild {
            Terminal.storePath = options.path
            n = try Logbook.rebuildProjection(at: options.path, lockWait: 0, recovered: Terminal.reportRecovery, progress: progress.report)
        } else {
            let book = try options.book(.readWrite, project: false, lockWait: 0)
            defer { try? book.close() }
            n = try book.replay(progress: progress.report)
        }
        Terminal.endProgress()
        let seconds = Date().timeIntervalSince(start)
        if options.json {
            Reports.print(ReplayReport(events: n, rebuilt: rebuild, seconds: ReportJSON.Fixed(seconds, decimals: 3)))
        } else {
            print(rebuild ? "rebuilt the projection from \(n) events in \(String(format: "%.2f", seconds)) s"
                          : (n == 0 ? "projection is up to date" : "applied \(n) events in \(String(format: "%.2f", seconds)) s"))
        }
    }
}

import Foundation
