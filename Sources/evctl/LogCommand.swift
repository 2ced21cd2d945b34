import ArgumentParser
import Foundation
import EventLog
import Logbook

struct LogCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "List events, per origin in seq order.",
        discussion: """
            --json prints one object per line: event_id, origin, seq, hlc (integer), time (ISO 8601),
            entity, id, op, fields, and base and actor when set. Readers should ignore unknown keys.
            """
    )
    @OptionGroup var options: StoreOptions
    @Option(help: "Only this origin (replica id).") var origin: String?
    @Option(help: "Only this entity kind (item, tag, item_tag, time_entry, saved_search, …).") var entity: String?
    @Option(help: "Only events of this entity id.") var id: String?
    @Option(help: "Only events at or after this time (ISO 8601 date or timestamp).") var since: String?
    @Option(help: "Only events before this time (ISO 8601 date or timestamp).") var until: String?
    @Option(name: .customLong("from-seq"), help: "Start at this seq (in each origin).") var fromSeq: UInt64 = 1
    @Option(help: "Print at most this many events.") var limit: Int?

    func execute() throws {
        var filter = EventFilter(fromSeq: fromSeq)
        if let origin {
            guard let o = ReplicaID(origin) else { throw ValidationError("--origin \(origin) is not a replica id (a UUID)") }
            filter.origin = o
        }
        if let entity {
            guard let e = Entity(name: entity) else {
                throw ValidationError("--entity \(entity) is not one of \(Entity.allCases.map(\.name).joined(separator: ", "))")
            }
            filter.entity = e
        }
        if let id {
            guard let u = UUID(uuidString: id) else { throw ValidationError("--id \(id) is not a UUID") }
            filter.id = u
        }
        func time(_ s: String?, _ name: String) throws -> Date? {
            guard let s else { return nil }
            guard let d = TimeArgument.parse(s) else { throw ValidationError("--\(name) \(s) is not an ISO 8601 date or timestamp") }
            return d
        }
        filter.since = try time(since, "since")
        filter.until = try time(until, "until")
        if let limit, limit < 0 { throw ValidationError("--limit must be at least 0") }
        let book = try options.book(.inspect)
        let out = Output()
        var printed = 0
        var json = JSONBytes()
        let max = limit ?? .max
        guard max > 0 else { return }
        try book.forEachEvent(filter) { e in
                if options.json {
                    json.bytes.removeAll(keepingCapacity: true)
                    Self.json(e, into: &json)
                    out.line(json.bytes)
                } else {
                    out.line(Self.text(e))
                }
                printed += 1
                return printed < max
        }
        out.flush()
    }

    /// One event as a JSON object; keys in a fixed order (readers must ignore unknown keys).
    /// One event as a JSON object, written straight into `j` (listings stream millions of
    /// these); `cursor`, when given, comes first (`evctl watch`).
    static func json(_ e: Event, into j: inout JSONBytes, cursor: String? = nil) {
        if let cursor { j.raw("{\"cursor\":"); j.string(cursor); j.raw(",\"event_id\":") } else { j.raw("{\"event_id\":") }
        j.string(e.eventID.lowercasedString)
        j.raw(",\"origin\":"); j.string(e.origin.description)
        j.raw(",\"seq\":"); j.int(e.seq.rawValue)
        j.raw(",\"hlc\":"); j.int(e.hlc.rawValue)
        j.raw(",\"time\":"); j.string(ISOTime.string(e.hlc))
        j.raw(",\"entity\":"); j.string(e.entity.name)
        j.raw(",\"id\":"); j.string(e.entityID.lowercasedString)
        j.raw(",\"op\":"); j.string(e.op.name)
        j.raw(",\"fields\":{")
        for (i, f) in e.fields.enumerated() {
            if i > 0 { j.raw(",") }
            j.string(f.name)
            j.raw(":")
            j.value(f.value)
        }
        j.raw("}")
        if let b = e.base { j.raw(",\"base\":"); j.int(b.rawValue) }
        if let a = e.actor { j.raw(",\"actor\":"); j.string(a) }
        j.raw("}")
    }

    static func text(_ e: Event) -> String {
        let fields = e.fields.map { "\(printable($0.name))=\(JSON.value($0.value))" }.joined(separator: " ")
        let origin = String(e.origin.description.prefix(8))
        return "\(origin) \(e.seq) \(ISOTime.string(e.hlc)) \(e.entity.name) \(e.entityID.lowercasedString) \(e.op.name)" + (fields.isEmpty ? "" : " " + fields)
    }
}
