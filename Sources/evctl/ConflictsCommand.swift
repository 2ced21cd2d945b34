import Domain
import ArgumentParser
import EventLog
import Foundation
import Projections

struct ConflictsCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "conflicts",
        abstract: "Concurrent edits the merge settled: both values, both events, the winner.",
        discussion: "--json prints one object per line: id, entity, entity_id, field, winner_value, loser_value (JSON values), winner_event_id, loser_event_id, winner_origin, loser_origin, detected_at, resolved_by."
    )
    @OptionGroup var options: StoreOptions
    @Flag(help: "Include conflicts already resolved.") var all = false

    func execute() throws {
        let projection = try openProjectionForReading(options)
        let rows = try projection.conflicts(includeResolved: all)
        for c in rows {
            if options.json {
                print(JSON.object([
                    ("id", String(c.id)), ("entity", JSON.string(c.entity)), ("entity_id", JSON.string(c.entityID)), ("field", JSON.string(c.field)),
                    ("winner_value", c.winnerValue), ("loser_value", c.loserValue),
                    ("winner_event_id", JSON.string(c.winnerEventID)), ("loser_event_id", JSON.string(c.loserEventID)),
                    ("winner_origin", JSON.string(c.winnerOrigin)), ("loser_origin", JSON.string(c.loserOrigin)),
                    ("detected_at", JSON.string(c.detectedAt)), ("resolved_by", c.resolvedBy.map(JSON.string) ?? "null"),
                ]))
            } else {
                print(printable("#\(c.id) \(c.entity) \(c.entityID) \(c.field): kept \(c.winnerValue) (origin \(c.winnerOrigin.prefix(8))) over \(c.loserValue) (origin \(c.loserOrigin.prefix(8)))" + (c.resolvedBy.map { " — resolved by \($0)" } ?? "")))
            }
        }
        if rows.isEmpty && !options.json { print(all ? "no conflicts" : "no open conflicts") }
    }
}

struct AnomaliesCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "anomalies",
        abstract: "Writes a domain rule set aside (a skip or reschedule of a completed occurrence).",
        discussion: "--json prints one object per line: id, kind, entity, entity_id, item_id, original_occurrence_date, attempted_op, event_id, winner_id, correlation_id, detected_at, details."
    )
    @OptionGroup var options: StoreOptions

    func execute() throws {
        let projection = try openProjectionForReading(options)
        let rows = try projection.anomalies()
        for a in rows {
            if options.json {
                print(JSON.object([
                    ("id", String(a.id)), ("kind", JSON.string(a.kind)), ("entity", JSON.string(a.entity)), ("entity_id", JSON.string(a.entityID)),
                    ("item_id", a.itemID.map(JSON.string) ?? "null"), ("original_occurrence_date", a.originalOccurrenceDate.map(JSON.string) ?? "null"),
                    ("attempted_op", JSON.string(a.attemptedOp)), ("event_id", JSON.string(a.eventID)), ("winner_id", a.otherID.map(JSON.string) ?? "null"),
                    ("correlation_id", JSON.string(a.correlationID)), ("detected_at", JSON.string(a.detectedAt)), ("details", a.details.map(JSON.string) ?? "null"),
                ]))
            } else {
                print(printable("#\(a.id) \(a.kind): \(a.details ?? a.attemptedOp)"))
            }
        }
        if rows.isEmpty && !options.json { print("no anomalies") }
    }
}

struct ResolveCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "resolve",
        abstract: "Settle a conflict by appending an event that re-asserts the chosen value.",
        discussion: """
            --keep local keeps the value written by this replica (or, when neither side is this replica's, the value shown now);
            --keep remote keeps the other one. The new event has seen both, so the conflict is marked resolved by it.
            """
    )
    @OptionGroup var options: StoreOptions
    @Argument(help: "The conflict's id (see `evctl conflicts`).") var conflictID: Int64
    @Option(help: "local or remote.") var keep: String

    func execute() throws {
        guard keep == "local" || keep == "remote" else { throw ValidationError("--keep must be local or remote") }
        let store = try options.open()
        let projected = try ProjectedStore.open(store: store, waitingUpTo: lockWait)
        defer { try? projected.close() }
        guard let c = try projected.projection.conflict(conflictID) else {
            throw ValidationError("no conflict #\(conflictID) (see `evctl conflicts --all`)")
        }
        if let by = c.resolvedBy { throw ValidationError("conflict #\(conflictID) is already resolved by event \(by)") }
        let me = store.replicaID.description
        let localIsWinner = c.winnerOrigin == me || c.loserOrigin != me
        let keepWinner = (keep == "local") == localIsWinner
        let valueJSON = keepWinner ? c.winnerValue : c.loserValue
        guard let entity = Entity(name: c.entity), let id = UUID(uuidString: c.entityID) else {
            throw ValidationError("conflict #\(conflictID) names an unknown entity")
        }
        let line = "{\"entity\":\"\(entity.name)\",\"op\":\"update\",\"id\":\"\(id.lowercasedString)\",\"fields\":{\(JSON.string(c.field)):\(valueJSON)}}"
        let m = try MutationParser.parse(line)
        let r = try projected.append([m])
        if options.json {
            print(JSON.object([("conflict", String(conflictID)), ("kept", valueJSON), ("seq", r.firstSeq.map { String($0.rawValue) } ?? "null")]))
        } else {
            print("conflict #\(conflictID): kept \(valueJSON) for \(c.field) (appended seq \(r.firstSeq.map { String($0.rawValue) } ?? "-"))")
        }
    }
}
