import ArgumentParser
import EventLog
import Logbook

struct VerifyCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check every frame: checksums, hash chain, seq contiguity, decodability.",
        discussion: """
            Each problem names the file and byte offset. With --deep, also rebuilds the projection aside and
            compares it with the live one (a canonical dump of every synced table), reporting the first difference.
            Exits 1 when any problem is found.
            """
    )
    @OptionGroup var options: StoreOptions
    @Flag(help: "Also rebuild the projection aside and compare it with the live one.") var deep = false

    func execute() throws {
        let book = try options.book(.inspect)
        let progress = ProjectionProgress()
        let (report, deepProblem) = try book.verify(deep: deep, progress: { done, total in
            Terminal.progress("verifying: \(done >> 20) of \(total >> 20) MiB")
        }, projectionProgress: progress.report)
        Terminal.endProgress()
        // A projection that differs from a rebuild is a problem like any in the log: the summary
        // line, its count and the top-level `ok` all say it.
        let problemCount = report.problems.count + (deepProblem == nil ? 0 : 1)
        let ok = problemCount == 0
        if options.json {
            let problems = report.problems.map {
                JSON.object([("file", JSON.string($0.file)), ("offset", String($0.offset)), ("message", JSON.string($0.message))])
            }
            print(JSON.object([
                ("ok", ok ? "true" : "false"), ("origins", String(report.origins)), ("segments", String(report.segments)),
                ("frames", String(report.frames)), ("events", String(report.events)), ("bytes", String(report.bytes)),
                ("problems", "[" + problems.joined(separator: ",") + "]"),
                ("notes", "[" + report.notes.map(JSON.string).joined(separator: ",") + "]"),
                ("projection", deep ? (deepProblem.map { JSON.object([("ok", "false"), ("difference", JSON.string($0))]) } ?? JSON.object([("ok", "true")])) : "null"),
            ]))
        } else {
            for p in report.problems { print("problem: \(p)") }
            for n in report.notes { print("note: \(n)") }
            if deep {
                if let d = deepProblem { print("problem: projection differs from a rebuild: \(d)") } else if report.isClean { print("projection: identical to a rebuild from the log") }
            }
            print("\(ok ? "ok" : "FAILED"): \(report.origins) origins, \(report.segments) segments, \(report.frames) frames, \(report.events) events, \(report.bytes) bytes checked; \(problemCount) problem\(problemCount == 1 ? "" : "s")")
        }
        if !ok { throw ExitCode(1) }
    }
}
