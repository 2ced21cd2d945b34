import ArgumentParser
import Foundation
import EventLog
import Logbook

struct PurgeCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "purge",
        abstract: "Purge tombstones from the projection: rows deleted before a date (the log keeps everything).",
        discussion: """
            Off unless asked. Each purged row keeps its merge state, so a late update never brings it back; a later
            restore does, in full, from the log. The cutoff is remembered: a rebuild purges the same rows.
            --retain-days N keeps deleted rows N days and purges older ones now and at every open for writing;
            --no-retention turns that off. --json prints {"purged":{table:rows},"deleted_before":…,"retain_days":…}.
            """
    )
    @OptionGroup var options: StoreOptions
    @Option(name: .customLong("deleted-before"), help: "Purge rows deleted before this date (YYYY-MM-DD, or an ISO 8601 time).") var deletedBefore: String?
    @Option(name: .customLong("retain-days"), help: "Keep deleted rows this many days; purge older ones now and at every open for writing.") var retainDays: Int?
    @Flag(name: .customLong("no-retention"), help: "Turn the retention off.") var noRetention = false

    func validate() throws {
        let chosen = [deletedBefore != nil, retainDays != nil, noRetention].filter { $0 }.count
        guard chosen == 1 else { throw ValidationError("give one of --deleted-before DATE, --retain-days N, --no-retention") }
        if let d = retainDays, d < 1 { throw ValidationError("--retain-days must be at least 1 (--no-retention turns it off)") }
        if let s = deletedBefore, Self.date(s) == nil {
            throw ValidationError("--deleted-before \(printable(s, limit: 60)) is not a date (YYYY-MM-DD) or an ISO 8601 time")
        }
    }

    static func date(_ s: String) -> Date? { TimeArgument.parse(s) }

    func execute() throws {
        let book = try options.book(.readWrite)
        var purged: [String: Int]
        var cutoff: Date?
        if let s = deletedBefore, let d = Self.date(s) {
            cutoff = d
            purged = try book.purge(deletedBefore: d)
        } else if let days = retainDays {
            purged = try book.setRetention(days: days)
            cutoff = Date(timeIntervalSinceNow: -Double(days) * 86_400)
        } else {
            purged = try book.setRetention(days: nil)
        }
        let total = purged.values.reduce(0, +)
        if options.json {
            Reports.print(PurgeReport(purged: .init(purged.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }),
                                      deletedBefore: cutoff.map(Timestamps.string), retainDays: retainDays))
        } else if noRetention {
            print("retention off: deleted rows stay in the projection from now on")
        } else {
            print("purged \(total) rows deleted before \(cutoff.map { Timestamps.string($0) } ?? "?")" +
                  (purged.isEmpty ? "" : " (" + purged.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + ")") +
                  (retainDays.map { "; deleted rows are now kept \($0) days" } ?? ""))
        }
    }
}
