import EventLog
import Foundation
import GRDBSQLite

/// Rows laid out for SQLite, in the order of the row statements' parameters (`Projector.writeRows`):
/// each row's values, and every text and `_clocks` blob of the batch in one buffer. Made on one
/// thread and written on another; bound in place (SQLITE_STATIC) while the batch lives.
struct RowBatch: Sendable {
    enum Value: Sendable {
        case null
        case integer(Int64)
        case real(Double)
        case text(start: Int, count: Int)
        case blob(start: Int, count: Int)
    }

    struct RowInfo: Sendable {
        /// The row is in the database already: the UPDATE statement, its id bound last.
        var update: Bool
        var id: UUID
        /// Where its values end in `values`.
        var end: Int
    }

    private var arena: [UInt8] = []
    private var values: [Value] = []
    private var rows: [RowInfo] = []

    /// Room for about `rows` rows (a flush of one row allocates little).
    init(rows n: Int) {
        arena.reserveCapacity(1 + min(n, 4_096) * 160)
        // Never empty, so its address is never NULL (SQLite binds a NULL address as SQL NULL, not
        // as the empty text a value may be); no value starts at 0.
        arena.append(0)
        values.reserveCapacity(min(n, 4_096) * 24)
        rows.reserveCapacity(min(n, 4_096))
    }

    /// Lays out `row`: for an INSERT, id, the columns, version, created_at, modified_at,
    /// deleted_at, _clocks; for an UPDATE, the same without the id, then the id.
    mutating func add(_ row: borrowing RowState, id: UUID) {
        if !row.existsInDatabase { addID(id) }
        for c in row.cells.indices {
            switch row.cells[c].value {
            case nil, .null?: values.append(.null)
            case .integer(let n)?: values.append(.integer(n))
            case .real(let d)?: values.append(.real(d))
            case .boolean(let b)?: values.append(.integer(b ? 1 : 0))
            case .text(let t)?:
                let start = arena.count
                arena.append(contentsOf: t.utf8)
                values.append(.text(start: start, count: arena.count - start))
            }
        }
        values.append(.integer(Int64(bitPattern: row.version)))
        addTime(row.createdHLC)
        addTime(row.version)
        addTime(row.deletedHLC)
        let start = arena.count
        row.encodeClocks(appendingTo: &arena)
        values.append(.blob(start: start, count: arena.count - start))
        if row.existsInDatabase { addID(id) }
        rows.append(RowInfo(update: row.existsInDatabase, id: id, end: values.count))
    }

    private mutating func addID(_ id: UUID) {
        values.append(.text(start: arena.count, count: 36))
        UUIDText.append(id, to: &arena)
    }

    private mutating func addTime(_ hlc: UInt64?) {
        guard let hlc else { values.append(.null); return }
        let start = arena.count
        ISOTime.append(millis: hlc >> 16, to: &arena)
        values.append(.text(start: start, count: arena.count - start))
    }

    /// SQLITE_STATIC: SQLite reads the bytes in place, without copying them.
    private static let sqliteStatic: sqlite3_destructor_type? = nil

    /// Binds and steps each row with `insert` or `update`; the first failure is thrown with
    /// `message(id)` (read before the statement is reset). Leaves both statements reset.
    func write(insert: OpaquePointer, update: OpaquePointer, message: (UUID) -> String) throws {
        try arena.withUnsafeBufferPointer { a in
            let base = UnsafeRawPointer(a.baseAddress!).assumingMemoryBound(to: CChar.self)
            var first = 0
            defer {
                for st in [insert, update] {
                    sqlite3_reset(st)
                    sqlite3_clear_bindings(st)
                }
            }
            for row in rows {
                let s = row.update ? update : insert
                sqlite3_reset(s)
                var param: Int32 = 1
                for v in values[first..<row.end] {
                    switch v {
                    case .null: sqlite3_bind_null(s, param)
                    case .integer(let n): sqlite3_bind_int64(s, param, n)
                    case .real(let d): sqlite3_bind_double(s, param, d)
                    case .text(let start, let count): sqlite3_bind_text(s, param, base + start, Int32(count), Self.sqliteStatic)
                    case .blob(let start, let count): sqlite3_bind_blob(s, param, base + start, Int32(count), Self.sqliteStatic)
                    }
                    param += 1
                }
                first = row.end
                guard sqlite3_step(s) == SQLITE_DONE else { throw ProjectionError.database(message(row.id)) }
            }
        }
    }
}
