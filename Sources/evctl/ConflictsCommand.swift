import ArgumentParser
import Foundation
import EventLog
import Logbook

struct ConflictsCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "conflicts",
        abstract: "Concurrent edits the merge settled: both values, both events, the winner.",
        discussion: "--json prints one object per line: id, entity, entity_id, field, winner_value, loser_value (JSON values), winner_event_id, loser_event_id, winner_origin, loser_origin, detected_at, resolved_by."
    )
    @OptionGroup var options: StoreOptions
    @Flag(help: "Include conflicts already resolved.") var all = false

    func execute() throws {
        let book = try options.book(.readOnly)
        let rows = try book.conflicts(includeResolved: all)
        for c in rows {
            if options.json {
                Reports.print(ConflictReport(c))
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
        let book = try options.book(.readOnly)
        let rows = try book.anomalies()
        for a in rows {
            if options.json {
                Reports.print(AnomalyReport(a))
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
        guard let side = ConflictSide(rawValue: keep) else { throw ValidationError("--keep must be local or remote") }
        let book = try options.book(.readWrite)
        defer { try? book.close() }
        let resolution: ConflictResolution
        do {
            resolution = try book.resolve(conflict: conflictID, keep: side)
        } catch let e as LogbookError where e.kind == .notFound || e.kind == .invalid {
            throw ValidationError(e.message + (e.kind == .notFound ? " (see `evctl conflicts --all`)" : ""))
        }
        let (valueJSON, r) = (resolution.keptValue, resolution.append)
        if options.json {
            Reports.print(ResolutionReport(conflict: conflictID, kept: ReportJSON.Raw(valueJSON), seq: r.firstSeq?.rawValue))
        } else {
            print("conflict #\(conflictID): kept \(valueJSON) for \(resolution.field) (appended seq \(r.firstSeq.map { String($0.rawValue) } ?? "-"))")
        }
    }
}
