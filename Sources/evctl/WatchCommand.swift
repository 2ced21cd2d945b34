import ArgumentParser
import Foundation
import EventLog
import Logbook

/// `evctl watch`: one line per event applied to the projection, as it is applied, until stopped.
struct WatchCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Print each event as the projection applies it, until stopped (change data capture).",
        discussion: """
            Whatever applies it: a local append, a sync or a push received by `serve`, a replay, \
            another process. Without --since, only what is applied after watch starts; with --since \
            TOKEN, first every event already applied past that cursor, then live. Each line is written \
            (and flushed) as soon as it is known, even into a pipe; nothing else goes to stdout.
            --json prints one object per line: {"cursor","event_id","origin","seq","hlc","time","entity",\
            "id","op","fields",…}. "cursor" is an lbc1. token covering that line and every line before it: \
            pass the last one you processed to --since to resume, missing nothing and repeating nothing.
            Another process's commit is seen within milliseconds (inotify on the store directory), and \
            within --poll seconds on a filesystem that gives no inotify events.
            """
    )
    @OptionGroup var options: StoreOptions
    @Option(name: .long, help: "Start after this cursor (an lbc1. token, e.g. the last line's \"cursor\").") var since: String?
    @Option(name: .long, help: "Only events of this entity kind.") var entity: String?
    @Option(name: .long, help: "Only events of this entity id (a UUID).") var id: String?
    @Option(name: .long, help: "Seconds between looks when no filesystem event arrives.") var poll = 1.0
    /// For tests: stop after this many lines.
    @Option(name: .long, help: .hidden) var stopAfter: Int?

    /// Bad usage exits 64 before anything is opened.
    func validate() throws {
        if let entity, Entity(name: entity) == nil {
            throw ValidationError("--entity: \(printable(entity, limit: 40)) is not one of \(Entity.allCases.map(\.name).joined(separator: ", "))")
        }
        if let id, UUID(uuidString: id) == nil { throw ValidationError("--id: \(printable(id, limit: 60)) is not an id (a UUID)") }
        guard poll > 0, poll <= 3600 else { throw ValidationError("--poll must be more than 0 and at most 3600 seconds") }
        if let since {
            do { _ = try ReplicationCursor(token: since) } catch { throw ValidationError("--since: \(error)") }
        }
    }

    func execute() throws {
        let kind = entity.flatMap { Entity(name: $0) }
        let entityID = id.flatMap { UUID(uuidString: $0) }
        let start = try since.map { try ReplicationCursor(token: $0) }
        let watcher = try options.book(.inspect).watch(from: start)
        watcher.pollInterval = poll
        // The cursor each line carries: where the consumer stands once it has processed that line.
        var cursor = ReplicationCursor(watcher.cursor)
        var printed = 0
        var json = JSONBytes()
        while true {
            guard let change = try watcher.next() else { continue }
            var out: [UInt8] = []
            for e in change.events {
                cursor[e.origin] = max(cursor[e.origin], e.seq)
                if let kind, e.entity != kind { continue }
                if let entityID, e.entityID != entityID { continue }
                if options.json {
                    json.bytes.removeAll(keepingCapacity: true)
                    LogCommand.json(e, into: &json, cursor: cursor.token)
                    out += json.bytes
                } else {
                    out += Array(LogCommand.text(e).utf8)
                }
                out.append(0x0A)
                printed += 1
                if let stopAfter, printed >= stopAfter { break }
            }
            cursor = cursor.merged(with: ReplicationCursor(change.cursor))
            Output.write(out)
            if let stopAfter, printed >= stopAfter { return }
        }
    }
}
