import ArgumentParser
import Foundation
import EventLog
import Logbook

struct AppendCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "append",
        abstract: "Append NDJSON mutations, one per line; all lines land or none do.",
        discussion: """
            Each line: {"entity":"item","op":"create","id":"<uuid>","fields":{"title":"Buy milk","parent_id":null}}
            entity: item, tag, item_tag, time_entry, saved_search, completion, recurrence_exception
            op: create, update, delete, restore. Optional: event_id (idempotent writes), base, actor.
            item_tag events name their pair in fields item_id and tag_id (their id defaults to one derived from the pair).
            A bad line fails the whole call with its line number, and nothing is appended.
            """
    )
    @OptionGroup var options: StoreOptions

    @Argument(help: "NDJSON file to read, or - for standard input (the default).")
    var file: String = "-"

    @Flag(name: .customLong("no-project"), help: "Append only; bring the projection up to date later with `evctl replay`.")
    var noProject = false

    @Option(help: "The actor of every line that names none (default: $EVCTL_ACTOR). A hub's scoped principal takes only events whose actor is its user.")
    var actor: String?

    func execute() throws {
        let fd: Int32
        if file == "-" {
            fd = 0
        } else {
            fd = open(file, O_RDONLY | O_CLOEXEC)
            if fd < 0 { throw ValidationError("cannot open \(file): \(String(cString: strerror(errno)))") }
        }
        defer { if fd != 0 { close(fd) } }
        let book = try options.book(.readWrite, project: !noProject)
        defer { try? book.close() }
        let (r, projectionError): (AppendResult, (any Error)?)
        do {
            let actor = self.actor ?? ProcessInfo.processInfo.environment["EVCTL_ACTOR"].flatMap { $0.isEmpty ? nil : $0 }
            (r, projectionError) = try book.appendNDJSON(from: fd, name: file == "-" ? "standard input" : file, actor: actor,
                                                          claimingProjection: true) { lines, bytes in
                Terminal.progress("appending: \(lines) lines, \(bytes >> 20) MiB read")
            }
        } catch {
            Terminal.endProgress()
            throw error
        }
        Terminal.endProgress()
        defer {
            if let projectionError {
                let why = DiskSpace.isFull(projectionError, near: options.path)
                    ? "no space left on \(DiskSpace.describe(near: options.path)): \(projectionError)" : "\(projectionError)"
                Terminal.error("the events were appended (durably) but not projected: \(why)\nhint: do not append them again; `evctl replay` (or the next writer to open the store) completes the projection")
            }
        }
        if options.json {
            Reports.print(AppendReport(appended: r.appended, firstSeq: r.firstSeq?.rawValue, lastSeq: r.lastSeq?.rawValue,
                                       duplicates: r.duplicateCount, origin: book.replicaID.description,
                                       projected: projectionError == nil && !noProject))
        } else {
            if let f = r.firstSeq, let l = r.lastSeq {
                print("appended \(r.appended) events (seq \(f)…\(l))")
            } else {
                print("appended 0 events")
            }
            if r.duplicateCount > 0 {
                print("skipped \(r.duplicateCount) already in the log (by event_id)")
                for d in r.duplicates.prefix(10) {
                    print("  record \(d.inputIndex + 1): event \(d.eventID.lowercasedString) is seq \(d.seq) of \(d.origin)")
                }
            }
        }
        if projectionError != nil { throw ExitCode(Evctl.appendedNotProjected) }
    }
}
