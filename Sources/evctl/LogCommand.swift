import ArgumentParser
import EventLog
import Foundation

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
        let store = try options.open()
        let origins: [ReplicaID]
        if let origin {
            guard let o = ReplicaID(origin) else { throw ValidationError("--origin \(origin) is not a replica id (a UUID)") }
            origins = [o]
        } else {
            origins = try store.origins()
        }
        var entityFilter: Entity?
        if let entity {
            guard let e = Entity(name: entity) else {
                throw ValidationError("--entity \(entity) is not one of \(Entity.allCases.map(\.name).joined(separator: ", "))")
            }
            entityFilter = e
        }
        var idFilter: UUID?
        if let id {
            guard let u = UUID(uuidString: id) else { throw ValidationError("--id \(id) is not a UUID") }
            idFilter = u
        }
        func millis(_ s: String?, _ name: String) throws -> UInt64? {
            guard let s else { return nil }
            guard let d = ISOTime.parse(s) else { throw ValidationError("--\(name) \(s) is not an ISO 8601 date or timestamp") }
            return UInt64(Swift.max(0, d.timeIntervalSince1970 * 1000))
        }
        let sinceMs = try millis(since, "since")
        let untilMs = try millis(until, "until")
        if let limit, limit < 0 { throw ValidationError("--limit must be at least 0") }
        let reader = LogReader(store: store)
        let out = Output()
        var printed = 0
        let max = limit ?? .max
        guard max > 0 else { return }
        for o in origins {
            try reader.forEachEvent(origin: o, from: Seq(Swift.max(1, fromSeq))) { e in
                if let untilMs, e.hlc.wallMillis >= untilMs { return false }
                if let sinceMs, e.hlc.wallMillis < sinceMs { return true }
                if let entityFilter, e.entity != entityFilter { return true }
                if let idFilter, e.entityID != idFilter { return true }
                out.line(options.json ? Self.json(e) : Self.text(e))
                printed += 1
                return printed < max
            }
            if printed >= max { break }
        }
        out.flush()
    }

    static func json(_ e: Event) -> String {
        var pairs: [(String, String)] = [
            ("event_id", JSON.string(e.eventID.lowercasedString)),
            ("origin", JSON.string(e.origin.description)),
            ("seq", String(e.seq.rawValue)),
            ("hlc", String(e.hlc.rawValue)),
            ("time", JSON.string(ISOTime.string(e.hlc))),
            ("entity", JSON.string(e.entity.name)),
            ("id", JSON.string(e.entityID.lowercasedString)),
            ("op", JSON.string(e.op.name)),
            ("fields", "{" + e.fields.map { JSON.string($0.name) + ":" + JSON.value($0.value) }.joined(separator: ",") + "}"),
        ]
        if let b = e.base { pairs.append(("base", String(b.rawValue))) }
        if let a = e.actor { pairs.append(("actor", JSON.string(a))) }
        return JSON.object(pairs)
    }

    static func text(_ e: Event) -> String {
        let fields = e.fields.map { "\($0.name)=\(JSON.value($0.value))" }.joined(separator: " ")
        let origin = String(e.origin.description.prefix(8))
        return "\(origin) \(e.seq) \(ISOTime.string(e.hlc)) \(e.entity.name) \(e.entityID.lowercasedString) \(e.op.name)" + (fields.isEmpty ? "" : " " + fields)
    }
}
