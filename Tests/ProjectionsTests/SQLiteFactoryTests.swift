import EventLog
import Foundation
import TestSupport
import GRDB
import Testing
@testable import Projections

/// Every SQLite connection comes from `SQLiteFactory`: ATTACH denied but for its named uses,
/// lengths bounded, foreign files read-only and read through `plainTable`; and no source file
/// opens SQLite another way or puts an identifier into SQL unquoted.
@Suite struct SQLiteFactoryTests {
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources").path

    @Test func attachIsDeniedButForItsNamedUses() throws {
        let dir = TempDir()
        let other = dir.path + "/other.sqlite"
        try SQLiteFactory.queue(other, .ours).write { try $0.execute(sql: "CREATE TABLE t (x); INSERT INTO t VALUES (42)") }
        let q = try SQLiteFactory.queue(dir.path + "/main.sqlite", .ours)
        try q.writeWithoutTransaction { (db: Database) throws -> Void in
            #expect(throws: DatabaseError.self) { try db.execute(sql: "ATTACH DATABASE ? AS x", arguments: [other]) }
            let x = try SQLiteFactory.attaching(db, other, for: .snapshotRows) { s in try Int.fetchOne(db, sql: "SELECT x FROM \(s).t") }
            #expect(x == 42)
            // Detached again, and denied again.
            #expect(throws: DatabaseError.self) { try Int.fetchOne(db, sql: "SELECT x FROM snap.t") }
            #expect(throws: DatabaseError.self) { try db.execute(sql: "ATTACH DATABASE ? AS x", arguments: [other]) }
            try SQLiteFactory.vacuum(db, into: dir.path + "/copy.sqlite")
            #expect(throws: DatabaseError.self) { try db.execute(sql: "ATTACH DATABASE ? AS x", arguments: [other]) }
            #expect(throws: DatabaseError.self) { try db.execute(sql: "SELECT load_extension('x')") }
        }
    }

    @Test func lengthsAreBounded() throws {
        let q = try SQLiteFactory.queue(nil, .ours)
        try q.write { (db: Database) throws -> Void in
            #expect(throws: DatabaseError.self) { try Data.fetchOne(db, sql: "SELECT zeroblob(?)", arguments: [SQLiteFactory.lengthMax + 1]) }
            #expect(try Data.fetchOne(db, sql: "SELECT zeroblob(1000)")?.count == 1000)
            let long = "SELECT 1" + String(repeating: " ", count: SQLiteFactory.sqlLengthMax)
            #expect(throws: DatabaseError.self) { try db.execute(sql: long) }
        }
    }

    @Test func foreignFilesAreReadOnlyAndReadOnlyFromPlainTables() throws {
        let dir = TempDir()
        let path = dir.path + "/foreign.sqlite"
        let author = try DatabaseQueue(path: path)
        try author.write { db in
            try db.execute(sql: """
                CREATE TABLE plain (id INTEGER, title TEXT);
                CREATE TABLE gen (id INTEGER, big BLOB GENERATED ALWAYS AS (zeroblob(1000000)) VIRTUAL);
                CREATE TABLE stored (id INTEGER, twice INTEGER GENERATED ALWAYS AS (id * 2) STORED);
                CREATE VIEW v AS SELECT * FROM plain;
                CREATE VIRTUAL TABLE f USING fts5(body);
                CREATE TRIGGER t AFTER INSERT ON plain BEGIN DELETE FROM plain; END;
                INSERT INTO plain VALUES (1, 'a');
                """)
        }
        try author.close()
        let q = try SQLiteFactory.queue(path, .foreign)
        try q.read { (db: Database) throws -> Void in
            #expect(try SQLiteFactory.plainTable(db, "plain", file: path))
            #expect(try SQLiteFactory.plainTable(db, "missing", file: path) == false)
            for (table, says) in [("gen", "generated column"), ("stored", "generated column"), ("v", "is a view"), ("f", "virtual table")] {
                do { try SQLiteFactory.plainTable(db, table, file: path); Issue.record("\(table) accepted") } catch {
                    #expect("\(error)".contains(says), "\(table): \(error)")
                }
            }
            #expect(throws: DatabaseError.self) { try Row.fetchAll(db, sql: "SELECT * FROM v") }  // views are off
        }
        #expect(throws: DatabaseError.self) { try q.write { try $0.execute(sql: "INSERT INTO plain VALUES (2, 'b')") } }
    }

    /// Each Swift file under Sources/, with its text.
    func sourceFiles() throws -> [(String, String)] {
        let e = FileManager.default.enumerator(atPath: Self.sources)!
        var out: [(String, String)] = []
        while let rel = e.nextObject() as? String {
            guard rel.hasSuffix(".swift") else { continue }
            out.append((rel, try String(contentsOfFile: Self.sources + "/" + rel, encoding: .utf8)))
        }
        return out
    }

    @Test func noConnectionIsOpenedOutsideTheFactory() throws {
        var found: [String] = []
        for (file, text) in try sourceFiles() where !file.hasSuffix("SQLiteFactory.swift") {
            for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
            where line.contains("DatabaseQueue(") || line.contains("DatabasePool(") || line.contains("sqlite3_open") {
                found.append("\(file):\(n + 1)")
            }
        }
        #expect(found.isEmpty, "open SQLite through SQLiteFactory: \(found)")
    }

    /// Interpolations into SQL text: each either quotes what it interpolates, or names a value
    /// written literally in Logbook's source (a table or column name from the domain schema, a
    /// named attach schema). A new interpolation fails here until it quotes or joins this list.
    static let literalInterpolations: Set<String> = [
        "table.name", "t.name", "t", "eventIDsTable", "old", "snap", "quoted", "name", "list", "probe", "expr",
        "conditions.joined(separator: \" OR \")", "use.rawValue", "Snapshot.eventIDsTable", "Snapshot.eventIDsColumns",
        "insertColumns", "rowPlaceholders",
        "(all.dropFirst()).map { \"\\($0) = ?\" }.joined(separator: \", \")", "$0", "d.type == \"index\" ? \"INDEX\" : \"TRIGGER\"",
        "Array(repeating: \"?\", count: chunk.count).joined(separator: \",\")", "Bounds.walkDepthMax",
        "includeDeleted ? \"\" : \" AND deleted_at IS NULL\"", "walBytesMax",
        "Array(repeating: rowPlaceholders, count: runRows).joined(separator: \", \")",
    ]

    @Test func noIdentifierReachesSQLUnquoted() throws {
        var found: [String] = []
        for (file, text) in try sourceFiles() {
            // Lines of SQLite's SQL text: those with `sql: "…"`, and every line of a `sql: """`
            // literal. (PostgresNIO's `query("…\(x)")` binds what it interpolates as parameters.)
            var inBlock = false
            for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let opensBlock = line.contains("sql: \"\"\"")
                let isSQL = inBlock || line.contains("sql: \"")
                if inBlock, line.trimmingCharacters(in: .whitespaces).hasPrefix("\"\"\"") { inBlock = false }
                if opensBlock { inBlock = true }
                guard isSQL else { continue }
                let chars = Array(line)
                var i = 0
                while i + 1 < chars.count {
                    guard chars[i] == "\\", chars[i + 1] == "(" else { i += 1; continue }
                    var depth = 1, j = i + 2
                    while j < chars.count && depth > 0 { if chars[j] == "(" { depth += 1 } else if chars[j] == ")" { depth -= 1 }; j += 1 }
                    let expr = String(chars[(i + 2)..<max(i + 2, j - 1)])
                    let quoted = expr.hasPrefix("quote(") || expr.hasPrefix("SQLiteFactory.quote(") || expr.hasPrefix("SnapshotSchema.quote(")
                        || expr.hasPrefix("quote(\\(")
                    if !quoted && !Self.literalInterpolations.contains(expr) { found.append("\(file):\(n + 1): \\(\(expr))") }
                    i = j
                }
            }
        }
        #expect(found.isEmpty, "quote identifiers with SQLiteFactory.quote: \(found)")
    }
}
