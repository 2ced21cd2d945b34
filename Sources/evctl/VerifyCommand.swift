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
            print(try ReportJSON.string(VerifyReportJSON(ok: ok, report: report, projection: deep ? .init(ok: deepProblem == nil, difference: deepProblem) : nil)))
        } else {
            for p in report.problems { print("problem: \(Terminal.safe(p.description))") }
            for n in report.notes { print("note: \(Terminal.safe(n))") }
            if deep {
                // The difference quotes rows' values (a peer's text): shown safe, as every text is.
                if let d = deepProblem { print("problem: projection differs from a rebuild: \(Terminal.safe(d))") } else if report.isClean { print("projection: identical to a rebuild from the log") }
            }
            print("\(ok ? "ok" : "FAILED"): \(report.origins) origins, \(report.segments) segments, \(report.frames) frames (\(report.signedFrames) signed\(report.sealedUnopened > 0 ? ", \(report.sealedUnopened) sealed for shares this replica is not in" : "")), \(report.events) events, \(report.bytes) bytes checked; \(problemCount) problem\(problemCount == 1 ? "" : "s")")
        }
        if !ok { throw ExitCode(1) }
    }
}

/// `evctl verify --json`.
struct VerifyReportJSON: Encodable {
    struct Problem: Encodable {
        var file: String
        var offset: Int
        var message: String
    }
    /// Present with `--deep`: whether the projection equals a rebuild, and how it differs.
    struct Projection: Encodable {
        var ok: Bool
        var difference: String?

        enum CodingKeys: CodingKey { case ok, difference }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(ok, forKey: .ok)
            if let difference { try c.encode(difference, forKey: .difference) }  // only when it differs
        }
    }
    var ok: Bool
    var origins: Int
    var segments: Int
    var frames: Int
    /// Frames whose signature verified against their origin's key.
    var signedFrames: Int
    /// Frames sealed for a share this replica holds no key of (events not checked).
    var sealedUnopened: Int
    var events: Int
    var bytes: Int
    var problems: [Problem]
    var notes: [String]
    var projection: Projection?

    init(ok: Bool, report: VerifyReport, projection: Projection?) {
        self.ok = ok
        origins = report.origins
        segments = report.segments
        frames = report.frames
        signedFrames = report.signedFrames
        sealedUnopened = report.sealedUnopened
        events = report.events
        bytes = report.bytes
        problems = report.problems.map { Problem(file: $0.file, offset: $0.offset, message: $0.message) }
        notes = report.notes
        self.projection = projection
    }
}
