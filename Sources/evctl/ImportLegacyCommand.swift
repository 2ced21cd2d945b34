import ArgumentParser
import Foundation
import EventLog
import Logbook

struct ImportLegacyCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "import-legacy",
        abstract: "Import an existing app's data (SQLite or a JSON export) as events, losing nothing.",
        discussion: """
            The format is told from the file: seed 000's synced SQLite shape, seed 003's v1 SQLite shape, or a JSON export
            (docs/IMPORT.md). The file is only read; a byte-identical copy and its SHA-256 are kept in the store's imports/.
            Importing the same file again appends nothing.
            --json prints the report: file, format, sha256, bytes, backup, origin, events, already_held, tables (per table:
            read, deleted, imported, kept_aside, orphans), kept_aside, orphans, adjusted, adjusted_count, settings_imported,
            settings_kept, left_behind.
            """
    )
    @OptionGroup var options: StoreOptions
    @Argument(help: "The legacy database or JSON export.") var file: String

    func execute() throws {
        let book = try options.book(.readWrite)
        let started = Date()
        let report = try book.importLegacy(from: file) { phase, done, total in
            Terminal.progress("\(phase): \(done) of \(total)")
        }
        Terminal.endProgress()
        if options.json {
            let e = JSONEncoder()
            e.outputFormatting = [.sortedKeys]
            e.keyEncodingStrategy = .convertToSnakeCase
            print(String(decoding: try e.encode(report), as: UTF8.self))
            return
        }
        print("imported \(printable(file, limit: 200)) (\(report.format), \(report.bytes) bytes, sha256 \(report.sha256)) in \(String(format: "%.2f", Date().timeIntervalSince(started))) s")
        print("backup    \(report.backup)")
        print("origin    \(report.origin): \(report.events) events appended" + (report.alreadyHeld > 0 ? ", \(report.alreadyHeld) already held (imported before)" : ""))
        for (name, t) in report.tables.sorted(by: { $0.key < $1.key }) {
            print("table     \(name): \(t.read) read (\(t.deleted) deleted), \(t.imported) imported, \(t.keptAside) kept aside, \(t.orphans) orphans")
        }
        for a in report.keptAside { print("aside     \(a.table) row \(a.row)\(a.id.map { " (id \(printable($0, limit: 60)))" } ?? ""): \(printable(a.reason, limit: 300))") }
        for o in report.orphans { print("orphan    \(o.table) \(o.id): \(o.field) names \(printable(o.missing, limit: 60)), not in the file (kept)") }
        for a in report.adjusted { print("adjusted  \(a.table) row \(a.row) \(printable(a.column, limit: 60)) -> \(printable(a.to, limit: 60)): \(printable(a.reason, limit: 300))") }
        if report.adjustedCount > report.adjusted.count { print("adjusted  … \(report.adjustedCount - report.adjusted.count) more (--json has the first \(report.adjusted.count))") }
        if report.settingsImported + report.settingsKept > 0 {
            print("settings  \(report.settingsImported) imported, \(report.settingsKept) kept as this store had them")
        }
        if !report.leftBehind.isEmpty { print("left      \(report.leftBehind.map { printable($0, limit: 60) }.joined(separator: ", ")) (not carried: docs/IMPORT.md)") }
    }
}
