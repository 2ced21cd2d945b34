import EventLog
import Foundation
import GRDB

/// A value read from a legacy app's data, before it is mapped to a field.
package enum LegacyValue: Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case boolean(Bool)
    /// Bytes (an SQLite BLOB), kept as base64 text when they become a field.
    case blob(Data)
    /// A JSON array or object found in a JSON export, kept as its JSON text.
    case json(String)

    /// The value as it would print: for reports.
    package var display: String {
        switch self {
        case .null: "null"
        case .integer(let i): String(i)
        case .real(let d): "\(d)"
        case .text(let s): "\"" + printable(s, limit: 60) + "\""
        case .boolean(let b): b ? "true" : "false"
        case .blob(let d): "<\(d.count) bytes>"
        case .json(let s): printable(s, limit: 60)
        }
    }
}

/// One row of a legacy table: its columns in order, with their values.
package struct LegacyRow {
    /// The row's place in its table (1-based), as the report names it.
    package var number: Int
    package var columns: [(name: String, value: LegacyValue)]

    package subscript(_ name: String) -> LegacyValue? {
        columns.first { $0.name == name }?.value
    }
}

package struct LegacyTable {
    package var name: String
    package var rows: [LegacyRow]
}

/// The shapes `import-legacy` reads (docs/IMPORT.md).
public enum LegacyFormat: String, Sendable {
    /// Seed 000's synced SQLite shape: items, tags, item_tags, time_entries, saved_searches,
    /// app_settings, sync_metadata.
    case syncedSQLite = "sqlite-synced"
    /// Seed 003's v1 SQLite shape: folders, items, tags, notes, item_tags.
    case v1SQLite = "sqlite-v1"
    /// A JSON export: an object whose keys are seed 000's table names, each an array of rows.
    case jsonExport = "json-export"
}

/// Reads a legacy file into tables. The file is a kept copy (the backup), never the user's own.
package enum LegacySource {
    package static let syncedTables = ["items", "tags", "item_tags", "time_entries", "saved_searches", "app_settings"]

    /// The largest legacy file `import-legacy` reads (a task manager's data is far smaller).
    package static let fileBytesMax = Bounds.legacyFileBytesMax
    /// What reading a table may yield beyond the bytes its file holds: values are stored in the
    /// file, so more than this means something computes them as they are read (a column's
    /// default written into the schema by hand, say), and the import stops instead of filling
    /// memory.
    package static func valueBytesMax(fileBytes: Int) -> Int { fileBytes.multipliedReportingOverflow(by: 4).partialValue + (64 << 20) }
    package static let v1Tables = ["folders", "items", "tags", "notes", "item_tags"]

    /// Tells the format from the file's first bytes (and, for SQLite, its tables).
    package static func detect(_ path: String, tables sqliteTables: () throws -> [String]) throws -> LegacyFormat {
        guard let h = FileHandle(forReadingAtPath: path) else { throw LegacyError(.invalid, "\(path): cannot be opened for reading") }
        defer { try? h.close() }
        let head = (try? h.read(upToCount: 64)) ?? Data()
        if head.starts(with: Array("SQLite format 3\u{0}".utf8)) {
            let tables = Set(try sqliteTables())
            if tables.contains("folders") && tables.contains("notes") && tables.contains("items") { return .v1SQLite }
            if tables.contains("items") { return .syncedSQLite }
            throw LegacyError(.invalid, "\(path): an SQLite database without an items table is not a shape import-legacy knows (tables: \(tables.sorted().map { printable($0, limit: 40) }.joined(separator: ", ")))",
                               hint: "docs/IMPORT.md lists the shapes")
        }
        if let first = head.first(where: { ![0x20, 0x09, 0x0A, 0x0D, 0xEF, 0xBB, 0xBF].contains($0) }), first == UInt8(ascii: "{") { return .jsonExport }
        throw LegacyError(.invalid, "\(path): neither an SQLite database nor a JSON export (an object of tables): not a shape import-legacy knows",
                           hint: "docs/IMPORT.md lists the shapes")
    }

    /// Opens a private copy of an SQLite file on a hardened connection: nothing the file holds
    /// (triggers, views, functions) runs; only tables are read.
    package static func openSQLite(_ path: String) throws -> DatabaseQueue {
        do { return try SQLiteFactory.queue(path, .foreign) } catch {
            throw LegacyError(.invalid, "\(path): not a readable SQLite database (\(error))")
        }
    }

    package static func sqliteTables(_ q: DatabaseQueue) throws -> [String] {
        try q.read { try String.fetchAll($0, sql: "SELECT name FROM sqlite_master WHERE type = 'table'") }
    }

    /// Every row of `table` (a table, never a view), in rowid order when it has one.
    /// Generated and hidden columns, views and virtual tables are refused (`SQLiteFactory.plainTable`):
    /// their values would be computed as they are read. So is a table whose values add up to
    /// more than `valueBytesMax(fileBytes:)`.
    package static func readSQLite(_ q: DatabaseQueue, table: String, file: String, fileBytes: Int) throws -> LegacyTable? {
        try q.read { db -> LegacyTable? in
            do {
                guard try SQLiteFactory.plainTable(db, table, file: file) else { return nil }
            } catch let e as DatabaseError {
                throw LegacyError(.invalid, e.message ?? "\(file): table \(table) refused", hint: "nothing was imported")
            }
            let valueBytesMax = valueBytesMax(fileBytes: fileBytes)
            var valueBytes = 0
            let quoted = SQLiteFactory.quote(table)
            let withoutRowid = try Bool.fetchOne(db, sql: "SELECT sql LIKE '%WITHOUT ROWID%' FROM sqlite_master WHERE type = 'table' AND name = ?", arguments: [table]) ?? false
            let statement = try db.makeStatement(sql: "SELECT * FROM \(quoted)" + (withoutRowid ? "" : " ORDER BY rowid"))
            // Lowercased once per table, not once per value.
            let names = statement.columnNames.map { $0.lowercased() }
            let cursor = try Row.fetchCursor(statement)
            var rows: [LegacyRow] = []
            while let r = try cursor.next() {
                var columns: [(name: String, value: LegacyValue)] = []
                columns.reserveCapacity(r.count)
                for (k, v) in r.databaseValues.enumerated() {
                    let value: LegacyValue = switch v.storage {
                    case .null: .null
                    case .int64(let i): .integer(i)
                    case .double(let d): .real(d)
                    case .string(let s): .text(s)
                    case .blob(let b): .blob(b)
                    }
                    switch v.storage {
                    case .string(let s): valueBytes += s.utf8.count
                    case .blob(let b): valueBytes += b.count
                    default: valueBytes += 8
                    }
                    columns.append((names[k], value))
                }
                guard valueBytes <= valueBytesMax else {
                    throw LegacyError(.invalid, "\(file): table \(table), row \(rows.count + 1): the values read so far add up to \(valueBytes) bytes, more than the \(valueBytesMax) a file of \(fileBytes) bytes can hold; something computes them as they are read",
                                       hint: "nothing was imported")
                }
                rows.append(LegacyRow(number: rows.count + 1, columns: columns))
            }
            return LegacyTable(name: table, rows: rows)
        }
    }

    /// The tables of a JSON export, and the keys that are not tables import-legacy knows.
    package static func readJSON(_ path: String) throws -> ([LegacyTable], [String]) {
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw LegacyError(.invalid, "\(path): cannot be read (\(error))")
        }
        let object: JSONValue
        do { object = try JSONDecoder().decode(JSONValue.self, from: data) } catch {
            throw LegacyError(.invalid, "\(path): not valid JSON (\(error))")
        }
        guard case .object(let top) = object else {
            throw LegacyError(.invalid, "\(path): a JSON export is one object whose keys are table names; this is not an object")
        }
        var tables: [LegacyTable] = []
        var leftBehind: [String] = []
        for key in top.keys.sorted() {
            guard syncedTables.contains(key) else { leftBehind.append(key); continue }
            guard case .array(let array) = top[key]! else {
                throw LegacyError(.invalid, "\(path): key \"\(printable(key, limit: 40))\" must hold an array of row objects")
            }
            var rows: [LegacyRow] = []
            for (i, element) in array.enumerated() {
                guard case .object(let o) = element else {
                    throw LegacyError(.invalid, "\(path): \(key)[\(i)] (row \(i + 1)) is not an object")
                }
                rows.append(LegacyRow(number: i + 1, columns: o.keys.sorted().map { k in (k.lowercased(), o[k]!.legacy) }))
            }
            tables.append(LegacyTable(name: key, rows: rows))
        }
        return (tables, leftBehind)
    }
}

/// Any JSON value, decoded strictly: `true` is a boolean, `1` an integer, `1.5` a real.
package enum JSONValue: Decodable {
    case null, boolean(Bool), integer(Int64), real(Double), text(String), array([JSONValue]), object([String: JSONValue])

    package init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .boolean(b) }
        else if let i = try? c.decode(Int64.self) { self = .integer(i) }
        else if let d = try? c.decode(Double.self) { self = .real(d) }
        else if let s = try? c.decode(String.self) { self = .text(s) }
        else if let a = try? c.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JSONValue].self)) }
    }

    package var legacy: LegacyValue {
        switch self {
        case .null: .null
        case .boolean(let b): .boolean(b)
        case .integer(let i): .integer(i)
        case .real(let d): .real(d)
        case .text(let s): .text(s)
        case .array, .object: .json(jsonText)
        }
    }

    /// Compact JSON text, keys sorted.
    package var jsonText: String {
        switch self {
        case .null: "null"
        case .boolean(let b): b ? "true" : "false"
        case .integer(let i): String(i)
        case .real(let d): "\(d)"
        case .text(let s): String(decoding: (try? JSONEncoder().encode(s)) ?? Data("\"\"".utf8), as: UTF8.self)
        case .array(let a): "[" + a.map(\.jsonText).joined(separator: ",") + "]"
        case .object(let o): "{" + o.keys.sorted().map { JSONValue.text($0).jsonText + ":" + o[$0]!.jsonText }.joined(separator: ",") + "}"
        }
    }
}

/// A legacy file this import refuses, and why (the file, the table, the row); `Logbook` hands it
/// on as a `LogbookError` of kind `.invalid` with the same message and hint.
package struct LegacyError: Error, CustomStringConvertible, Sendable {
    package enum Kind: Sendable { case invalid }
    package var message: String
    package var hint: String?

    package init(_ kind: Kind, _ message: String, hint: String? = nil) {
        self.message = message
        self.hint = hint
    }

    package var description: String { message + (hint.map { "\nhint: \($0)" } ?? "") }
}
