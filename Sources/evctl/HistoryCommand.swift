import ArgumentParser
import Foundation
import EventLog
import Logbook

struct HistoryCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "Every event of one entity in merge order, and which event's value each field holds now.",
        discussion: "--json prints {\"entity\",\"id\",\"events\":[…as `log --json`, plus \"holds\":[fields whose current value it set]]}."
    )
    @OptionGroup var options: StoreOptions
    @Argument(help: "Entity kind: item, tag, item_tag, time_entry, saved_search, completion, recurrence_exception, link.") var entity: String
    @Argument(help: "Entity id (a UUID).") var id: String

    func execute() throws {
        guard let kind = Entity(name: entity) else {
            throw ValidationError("\(entity) is not one of \(Entity.allCases.map(\.name).joined(separator: ", "))")
        }
        guard let uuid = UUID(uuidString: id) else { throw ValidationError("\(id) is not an id (a UUID)") }
        let history = try options.book(.readOnly).history(of: kind, id: uuid)
        let events = history.entries.map(\.event)
        var holds: [UUID: [String]] = [:]
        for e in history.entries where !e.holds.isEmpty { holds[e.event.eventID] = e.holds }
        if events.isEmpty && !options.json {
            print("no events for \(kind.name) \(uuid.lowercasedString)")
            return
        }
        if options.json {
            var j = JSONBytes()
            j.raw("{\"entity\":"); j.string(kind.name)
            j.raw(",\"id\":"); j.string(uuid.lowercasedString)
            j.raw(",\"events\":[")
            for (i, e) in events.enumerated() {
                if i > 0 { j.raw(",") }
                var ej = JSONBytes()
                LogCommand.json(e, into: &ej)
                ej.bytes.removeLast()  // reopen the object to add "holds"
                ej.raw(",\"holds\":[")
                for (k, f) in (holds[e.eventID] ?? []).enumerated() {
                    if k > 0 { ej.raw(",") }
                    ej.string(f)
                }
                ej.raw("]}")
                j.bytes += ej.bytes
            }
            j.raw("]}")
            print(String(decoding: j.bytes, as: UTF8.self))
        } else {
            print("\(kind.name) \(uuid.lowercasedString): \(events.count) events in merge order (hlc, origin, seq)")
            for e in events {
                let h = holds[e.eventID].map { "  <- holds " + $0.joined(separator: ", ") } ?? ""
                print(LogCommand.text(e) + h)
            }
        }
    }
}
