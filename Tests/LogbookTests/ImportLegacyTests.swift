import Foundation
import TestSupport
import GRDB
@testable import Logbook
@testable import LegacyImport
import Testing

/// `import-legacy` (issue 11 §1) over the fixtures `fixtures/legacy/make-fixtures.py` writes.
@Suite struct ImportLegacyTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("fixtures/legacy").path

    /// A private copy of a fixture (so its bytes and times can be checked after the import).
    func copy(_ name: String, into dir: TempDir) throws -> String {
        let path = dir.path + "/" + name
        try FileManager.default.copyItem(atPath: Self.fixtures + "/" + name, toPath: path)
        return path
    }

    func row(_ book: Logbook, _ table: String, _ id: String) throws -> Row? {
        try book.projection.database.read { try Row.fetchOne($0, sql: "SELECT * FROM \(table) WHERE id = ?", arguments: [id]) }
    }

    static func v5(_ table: String, _ id: Int) -> String {
        UUIDv5.make(namespace: UUID(uuidString: "3c0a5f6e-8d1b-4b7a-9e2c-6f4d8a1b2c3e")!, name: Array("\(table):\(id)".utf8)).lowercasedString
    }

    @Test func theSyncedShapeIsImportedWithNothingLost() throws {
        let dir = TempDir()
        let source = try copy("synced.sqlite", into: dir)
        let before = try Data(contentsOf: URL(fileURLWithPath: source))
        let modified = try FileManager.default.attributesOfItem(atPath: source)[.modificationDate] as? Date
        let book = try Logbook.open(at: dir.path + "/s", creating: true)
        let report = try book.importLegacy(from: source)

        // The source is only read; the backup is byte-identical and named by its SHA-256.
        #expect(try Data(contentsOf: URL(fileURLWithPath: source)) == before)
        #expect(try FileManager.default.attributesOfItem(atPath: source)[.modificationDate] as? Date == modified)
        #expect(try Data(contentsOf: URL(fileURLWithPath: report.backup)) == before)
        #expect(report.backup.hasSuffix("/imports/\(report.sha256).sqlite") && report.bytes == before.count)
        #expect(report.format == "sqlite-synced")

        // The report: per table, rows read (deleted included), imported, kept aside, orphans.
        #expect(report.tables["items"] == .init(read: 5, deleted: 1, imported: 4, keptAside: 1, orphans: 1))
        #expect(report.tables["tags"] == .init(read: 2, deleted: 1, imported: 2, keptAside: 0, orphans: 0))
        #expect(report.tables["item_tags"] == .init(read: 3, deleted: 1, imported: 3, keptAside: 0, orphans: 1))
        #expect(report.tables["time_entries"]?.orphans == 1 && report.tables["saved_searches"]?.imported == 1)
        #expect(report.keptAside.map(\.reason) == ["its id is neither a UUID nor an integer"])
        #expect(report.leftBehind == ["sync_metadata"])
        #expect(report.settingsImported == 2)
        #expect(Set(report.adjusted.map { "\($0.row) \($0.column) \($0.to)" }) == ["3 due_at due_at_legacy", "4 priority priority_legacy"])

        // UUIDs lowercased; times the rows' own; deleted_at ends deleted; CloudKit columns dropped;
        // every other column kept as a field of its entity.
        let garden = try #require(try row(book, "items", "5a3c0e4e-9b7d-4f0a-8c2e-1d6f3b9a7e21"))
        #expect(garden["created_at"] as String? == "2024-03-01T09:00:00.000Z")
        #expect(garden["modified_at"] as String? == "2024-03-01T13:33:20.000Z")
        #expect(garden["priority"] as Int64? == 3)  // "high"
        let seeds = try #require(try row(book, "items", "8f14e45f-ea3c-4b8d-9c1a-0e2d3f4a5b6c"))
        #expect(seeds["parent_id"] as String? == "5a3c0e4e-9b7d-4f0a-8c2e-1d6f3b9a7e21")
        #expect(seeds["due_at"] as String? == "2024-03-10T17:00:00.000Z" && seeds["modified_at"] as String? == "2024-03-02T17:20:00.123Z")
        #expect(try row(book, "items", "c9f0f895-fb98-4b91-8c3e-6d5a4b3c2d1e")?["deleted_at"] as String? != nil)
        let created = try #require(try book.history(of: .item, id: UUID(uuidString: "5a3c0e4e-9b7d-4f0a-8c2e-1d6f3b9a7e21")!).entries.first?.event)
        let names = Set(created.fields.map(\.name))
        #expect(names.isSuperset(of: ["energy_level", "context_name", "title", "notes", "created_at"]))
        #expect(names.isDisjoint(with: ["ck_record_name", "ck_change_tag", "ck_system_fields", "needs_push", "modified_at", "deleted_at"]))
        let old = try #require(try book.history(of: .item, id: UUID(uuidString: "c9f0f895-fb98-4b91-8c3e-6d5a4b3c2d1e")!).entries.first?.event)
        #expect(old.field("due_at_legacy") == .text("next tuesday"))
        // Integer ids become UUIDv5s of (table, id), so references still meet; the tag deleted stays deleted.
        #expect(try row(book, "tags", Self.v5("tags", 1))?["name"] as String? == "errands")
        #expect(try row(book, "tags", Self.v5("tags", 2))?["deleted_at"] as String? != nil)
        let seedTags = try book.tags(of: try book.items(ItemQuery(search: "seeds")))
        #expect(seedTags["8f14e45f-ea3c-4b8d-9c1a-0e2d3f4a5b6c"]?.map(\.name) == ["errands"])
        #expect(try book.projection.setting("theme") == "dark")

        // Again: nothing appended. A later edit on this replica wins over imported state.
        let total = try book.status().log.totalEvents
        let again = try book.importLegacy(from: source)
        #expect(again.events == 0 && again.alreadyHeld == report.events && report.events > 0)
        #expect(try book.status().log.totalEvents == total)
        try book.update(UUID(uuidString: "5a3c0e4e-9b7d-4f0a-8c2e-1d6f3b9a7e21")!, ItemValues(title: "Garden 2024"))
        #expect(try row(book, "items", "5a3c0e4e-9b7d-4f0a-8c2e-1d6f3b9a7e21")?["title"] as String? == "Garden 2024")
        #expect(try book.verify().0.isClean)
    }

    @Test func theV1ShapeTurnsFoldersIntoItemsAndJoinsNotes() throws {
        let dir = TempDir()
        let source = try copy("v1.sqlite", into: dir)
        let book = try Logbook.open(at: dir.path + "/s", creating: true)
        let report = try book.importLegacy(from: source)
        #expect(report.format == "sqlite-v1")
        #expect(report.tables["folders"]?.imported == 2 && report.tables["items"]?.imported == 3)
        #expect(report.tables["notes"] == .init(read: 4, deleted: 0, imported: 3, keptAside: 1, orphans: 0))
        let home = Self.v5("folders", 1), garden = Self.v5("folders", 2)
        #expect(try row(book, "items", home)?["item_type"] as String? == "folder")
        #expect(try row(book, "items", garden)?["parent_id"] as String? == home)
        #expect(try row(book, "items", garden)?["title"] as String? == "Garden")
        let tomatoes = try #require(try row(book, "items", Self.v5("items", 1)))
        #expect(tomatoes["parent_id"] as String? == garden)
        #expect(tomatoes["item_type"] as String? == "task")
        #expect(tomatoes["notes"] as String? == "first note\n\nsecond note")
        #expect(try book.items(ItemQuery(under: UUID(uuidString: home)!)).count == 4)
        #expect(try book.importLegacy(from: source).events == 0)
    }

    @Test func aJSONExportIsImportedLikeTheSyncedShape() throws {
        let dir = TempDir()
        let source = try copy("export.json", into: dir)
        let book = try Logbook.open(at: dir.path + "/s", creating: true)
        let report = try book.importLegacy(from: source)
        #expect(report.format == "json-export" && report.backup.hasSuffix(".json"))
        #expect(report.leftBehind == ["sync_metadata"])
        let first = try #require(try row(book, "items", "aaaaaaaa-0000-4000-8000-000000000001"))
        #expect(first["modified_at"] as String? == "2024-01-01T12:00:00.000Z")  // Unix milliseconds
        let history = try #require(try book.history(of: .item, id: UUID(uuidString: "aaaaaaaa-0000-4000-8000-000000000001")!).entries.first?.event)
        #expect(history.field("flagged") == .boolean(true))
        #expect(history.field("meta") == .text(#"{"n":[1,2],"source":"json"}"#))
        #expect(history.field("needs_push") == nil)
        let child = try #require(try row(book, "items", Self.v5("items", 42)))
        #expect(child["created_at"] as String? == "2024-01-01T00:00:00.000Z" && child["deleted_at"] as String? != nil)
        #expect(try book.projection.setting("theme") == "light")
    }

    /// Every time spelling the import reads, against Foundation's parser and known values.
    /// Rows mapped in shares side by side give exactly what mapping them one by one gives: the
    /// report (counts, the lists cut at `listedMax`), the events in their order, and the ids.
    @Test(arguments: [1, 7, 500, 100_000]) func rowsMappedInSharesAreMappedAsOneByOne(shareRows: Int) throws {
        var rng = SystemRandomNumberGenerator()
        var rows: [LegacyRow] = []
        for n in 1...3_000 {
            let id: LegacyValue = switch n % 9 {
            case 0: .text("not an id \(n)")                       // kept aside
            case 1, 2: .integer(Int64(n))                         // a UUIDv5
            default: .text(UUID().uuidString)                    // uppercase: lowercased
            }
            let created: LegacyValue = n % 11 == 0 ? .text("next week") : .integer(1_700_000_000 + Int64(n))  // adjusted
            let modified: LegacyValue = n % 3 == 0 ? .integer(1_700_000_000_000 + Int64(n) * 1000 + Int64.random(in: 0...9, using: &rng)) : .null
            rows.append(LegacyRow(number: n, columns: [
                ("id", id), ("title", .text("row \(n)")), ("parent_id", n % 5 == 0 ? .integer(Int64(n / 2)) : .null),
                ("sort_order", n % 13 == 0 ? .text("high") : .real(Double(n))), ("created_at", created), ("modified_at", modified),
                ("deleted_at", n % 7 == 0 ? .integer(1_800_000_000) : .null), ("energy", .integer(Int64(n % 5))), ("ck_change_tag", .text("x")),
            ]))
        }
        let report = LegacyImportReport(file: "f", format: "sqlite-synced", sha256: "", bytes: 0, backup: "", origin: "", events: 0, alreadyHeld: 0,
                                        tables: [:], keptAside: [], orphans: [], adjusted: [], adjustedCount: 0, settingsImported: 0,
                                        settingsKept: 0, leftBehind: [])
        var one = LegacyImporter(format: .syncedSQLite, fileTimeMillis: 1_600_000_000_000, nowMillis: 1_900_000_000_000, report: report)
        let oneIDs = rows.compactMap { one.row($0, table: "items", entity: .item) }
        var shared = LegacyImporter(format: .syncedSQLite, fileTimeMillis: 1_600_000_000_000, nowMillis: 1_900_000_000_000, report: report)
        var rounds: [Int] = []
        let sharedIDs = shared.rows(rows, table: "items", entity: .item, shareRows: shareRows) { rounds.append($0) }
        // Compared as booleans: a failure should not print thousands of values.
        let sameIDs = sharedIDs == oneIDs, sameReport = shared.report == one.report
        #expect(sameIDs && sameReport, "ids \(sameIDs), report \(sameReport)")
        #expect(one.report.keptAside.count == LegacyImportReport.listedMax && one.report.adjusted.count == LegacyImportReport.listedMax)
        #expect(one.report.tables["items"]?.keptAside == 333 && one.report.tables["items"]?.read == 3_000)
        let sameEvents = shared.pending.map(\.mutation) == one.pending.map(\.mutation)
        let sameTimes = shared.pending.map(\.millis) == one.pending.map(\.millis), sameOrder = shared.pending.map(\.order) == one.pending.map(\.order)
        #expect(sameEvents && sameTimes && sameOrder, "events \(sameEvents), times \(sameTimes), order \(sameOrder)")
        #expect(rounds.last == rows.count && rounds == rounds.sorted())
    }

    @Test func legacyTimesInEverySpelling() {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for (text, iso) in [("2024-03-10 17:00:00", "2024-03-10T17:00:00.000Z"), ("2024-03-05T10:00:00+01:00", "2024-03-05T09:00:00.000Z"),
                            ("2024-02-29T23:59:59.999Z", "2024-02-29T23:59:59.999Z"), ("2024-03-01", "2024-03-01T00:00:00.000Z"),
                            ("2024-03-01T12:30", "2024-03-01T12:30:00.000Z"), ("1999-12-31T23:00:00-0130", "2000-01-01T00:30:00.000Z"),
                            ("2024-03-01T00:00:00.5z", "2024-03-01T00:00:00.500Z")] {
            let expected = UInt64((f.date(from: iso)!.timeIntervalSince1970 * 1000).rounded())
            #expect(LegacyImporter.millis(.text(text)) == expected, "\(text)")
        }
        #expect(LegacyImporter.millis(.integer(1_709_300_000)) == 1_709_300_000_000)       // seconds
        #expect(LegacyImporter.millis(.integer(1_709_300_000_123)) == 1_709_300_000_123)   // milliseconds
        #expect(LegacyImporter.millis(.real(1_709_250_000.5)) == 1_709_250_000_500)
        #expect(LegacyImporter.millis(.text("1709300000")) == 1_709_300_000_000)
        for bad in ["next tuesday", "2024-13-01", "2024-03-01T25:00:00Z", "2024-03-01T10:00:00Q", "", "1969-12-31T23:59:59Z", "2024-03-01T10:00:00+1"] {
            #expect(LegacyImporter.millis(.text(bad)) == nil, "\(bad)")
        }
        #expect(LegacyImporter.millis(.integer(-5)) == nil && LegacyImporter.millis(.real(.nan)) == nil)
    }

    @Test func whatIsNotALegacyFileIsRefusedAndChangesNothing() throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/s", creating: true)
        let cases: [(String, Data, String)] = [
            ("notes.txt", Data("just text".utf8), "neither an SQLite database nor a JSON export"),
            ("list.json", Data("  [1, 2]".utf8), "neither an SQLite database nor a JSON export"),
            ("bad.json", Data(#"{"items": [1]}"#.utf8), "items[0] (row 1) is not an object"),
            ("broken.json", Data(#"{"items": [{"id": 1}"#.utf8), "not valid JSON"),
        ]
        for (name, bytes, message) in cases {
            try bytes.write(to: URL(fileURLWithPath: dir.path + "/" + name))
            #expect(throws: LogbookError.self) { try book.importLegacy(from: dir.path + "/" + name) }
            do { try book.importLegacy(from: dir.path + "/" + name) } catch { #expect("\(error)".contains(message), "\(name): \(error)") }
        }
        // An SQLite file with no items table (and a view and trigger that must never run).
        let q = try DatabaseQueue(path: dir.path + "/other.sqlite")
        try q.write { db in
            try db.execute(sql: "CREATE TABLE things (id INTEGER); CREATE VIEW items AS SELECT * FROM things")
        }
        try q.close()
        do { try book.importLegacy(from: dir.path + "/other.sqlite"); Issue.record("accepted") } catch {
            #expect("\(error)".contains("without an items table"))
        }
        #expect(throws: LogbookError.self) { try book.importLegacy(from: dir.path + "/missing.sqlite") }
        #expect(try book.status().log.totalEvents == 0)
    }

    /// A legacy file that computes as it is read: a generated column whose expression builds a
    /// huge value (a 12 KiB file made the import hold 2.5 GiB), a hidden column of a virtual
    /// table, a FIFO (the import hung holding the writer lock). Each is refused, naming the file
    /// and what was refused, and nothing is appended.
    @Test func aLegacyFileThatComputesOnReadOrIsNoRegularFileIsRefused() throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/s", creating: true)
        let generated = dir.path + "/generated.sqlite"
        let q = try DatabaseQueue(path: generated)
        try q.write { db in
            try db.execute(sql: "CREATE TABLE items (id TEXT, title TEXT, big BLOB GENERATED ALWAYS AS (zeroblob(100000000)) VIRTUAL)")
            for i in 0..<30 { try db.execute(sql: "INSERT INTO items (id, title) VALUES (?, 'x')", arguments: ["\(i)"]) }
        }
        try q.close()
        do { try book.importLegacy(from: generated); Issue.record("accepted") } catch {
            #expect("\(error)".contains("column big of table items is a generated column"), "\(error)")
            #expect("\(error)".contains("generated.sqlite"))
        }
        let fifo = dir.path + "/pipe.sqlite"
        #expect(mkfifo(fifo, 0o644) == 0)
        do { try book.importLegacy(from: fifo); Issue.record("accepted") } catch {
            #expect("\(error)".contains("not a regular file (a FIFO)"), "\(error)")
        }
        #expect(try book.status().log.totalEvents == 0)
        // The store stays usable: a real import goes through afterwards.
        let ok = try copy("synced.sqlite", into: dir)
        #expect(try book.importLegacy(from: ok).events > 0)
    }

    @Test func valuesBeyondWhatTheFileHoldsStopTheRead() {
        #expect(LegacySource.valueBytesMax(fileBytes: 12 << 10) < 100 << 20)
        #expect(LegacySource.valueBytesMax(fileBytes: Int.max) > 0)
    }
}
