import ArgumentParser
import EventLog

struct VerifyCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check every frame: checksums, hash chain, seq contiguity, decodability.",
        discussion: "Each problem names the file and byte offset. Exits 1 when any problem is found."
    )
    @OptionGroup var options: StoreOptions

    func execute() throws {
        let store = try options.open()
        let report = try Verifier(store: store).run { done, total in
            Terminal.progress("verifying: \(done >> 20) of \(total >> 20) MiB")
        }
        Terminal.endProgress()
        if options.json {
            let problems = report.problems.map {
                JSON.object([("file", JSON.string($0.file)), ("offset", String($0.offset)), ("message", JSON.string($0.message))])
            }
            print(JSON.object([
                ("ok", report.isClean ? "true" : "false"), ("origins", String(report.origins)), ("segments", String(report.segments)),
                ("frames", String(report.frames)), ("events", String(report.events)), ("bytes", String(report.bytes)),
                ("problems", "[" + problems.joined(separator: ",") + "]"),
                ("notes", "[" + report.notes.map(JSON.string).joined(separator: ",") + "]"),
            ]))
        } else {
            for p in report.problems { print("problem: \(p)") }
            for n in report.notes { print("note: \(n)") }
            print("\(report.isClean ? "ok" : "FAILED"): \(report.origins) origins, \(report.segments) segments, \(report.frames) frames, \(report.events) events, \(report.bytes) bytes checked; \(report.problems.count) problems")
        }
        if !report.isClean { throw ExitCode(1) }
    }
}
