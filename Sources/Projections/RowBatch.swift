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
    /// The row is read in place, through the pointer: a `RowState` passed by value (or as the
    /// pointer's `pointee`) is copied, each of its texts retained and then released.
    mutating func add(_ row: UnsafePointer<RowState>, id: UUID) {
        if !row.pointee.existsInDatabase { addID(id) }
        row.pointee.cells.withUnsafeBufferPointer { cells in
            guard let cell = cells.baseAddress else { return }
            for c in cells.indices {
                switch cell[c].value {
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
        }
        values.append(.integer(Int64(bitPattern: row.pointee.version)))
        addTime(row.pointee.createdHLC)
        addTime(row.pointee.version)
        addTime(row.pointee.deletedHLC)
        let start = arena.count
        row.pointee.encodeClocks(appendingTo: &arena)
        values.append(.blob(start: start, count: arena.count - start))
        if row.pointee.existsInDatabase { addID(id) }
        rows.append(RowInfo(update: row.pointee.existsInDatabase, id: id, end: values.count))
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
    /// `message(id)` (read before the statement is reset). Leaves every statement reset.
    /// - Parameter insertRun: an INSERT of `rows` rows at once (`VALUES (…), (…), …`): runs of that
    ///   many new rows go through it, a step each, which opens the table's cursors once for them
    ///   (a fresh fill's rows are all new). Should a run fail, SQLite has backed out that statement
    ///   alone, and its rows are tried one by one, so the error names the row, as without it; not
    ///   when the failure ended the transaction (an I/O error does): nothing is written after that.
    func write(insert: OpaquePointer, insertRun: (statement: OpaquePointer, rows: Int)? = nil, update: OpaquePointer,
               message: (UUID) -> String) throws {
        try arena.withUnsafeBufferPointer { a in
            let base = UnsafeRawPointer(a.baseAddress!).assumingMemoryBound(to: CChar.self)
            defer {
                for st in [insert, update] + (insertRun.map { [$0.statement] } ?? []) {
                    sqlite3_reset(st)
                    sqlite3_clear_bindings(st)
                }
            }
            /// Binds the values of `rows[r]` to `s` from parameter `param` on; returns the next.
            func bind(_ r: Int, to s: OpaquePointer, from param: Int32) -> Int32 {
                var param = param
                for v in values[(r == 0 ? 0 : rows[r - 1].end)..<rows[r].end] {
                    switch v {
                    case .null: sqlite3_bind_null(s, param)
                    case .integer(let n): sqlite3_bind_int64(s, param, n)
                    case .real(let d): sqlite3_bind_double(s, param, d)
                    case .text(let start, let count): sqlite3_bind_text(s, param, base + start, Int32(count), Self.sqliteStatic)
                    case .blob(let start, let count): sqlite3_bind_blob(s, param, base + start, Int32(count), Self.sqliteStatic)
                    }
                    param += 1
                }
                return param
            }
            func writeOne(_ r: Int) throws {
                let s = rows[r].update ? update : insert
                sqlite3_reset(s)
                _ = bind(r, to: s, from: 1)
                guard sqlite3_step(s) == SQLITE_DONE else { throw ProjectionError.database(message(rows[r].id)) }
            }
            var r = 0
            while r < rows.count {
                if let run = insertRun, r + run.rows <= rows.count, !rows[r..<r + run.rows].contains(where: \.update) {
                    sqlite3_reset(run.statement)
                    var param: Int32 = 1
                    for k in r..<r + run.rows { param = bind(k, to: run.statement, from: param) }
                    // Every row lays out as many values as the statement has columns: otherwise the
                    // rows after a short one would take their neighbours' values.
                    guard param - 1 == sqlite3_bind_parameter_count(run.statement) else {
                        throw ProjectionError.database("\(message(rows[r].id)) (\(param - 1) values laid out for the \(sqlite3_bind_parameter_count(run.statement)) of \(run.rows) rows)")
                    }
                    if sqlite3_step(run.statement) != SQLITE_DONE {
                        // A failure that rolled the transaction back (SQLite does on an I/O error)
                        // leaves nothing to write into.
                        if sqlite3_get_autocommit(sqlite3_db_handle(run.statement)) != 0 {
                            throw ProjectionError.database("\(message(rows[r].id)) (in the \(run.rows) rows from it, written together)")
                        }
                        // Backed out alone: written again one by one, the failing row is named. (Should
                        // all of them go in then, the run's failure was passing, a statement journal
                        // that could not be written, and the rows are in.)
                        sqlite3_reset(run.statement)
                        for k in r..<r + run.rows { try writeOne(k) }
                    }
                    r += run.rows
                } else {
                    try writeOne(r)
                    r += 1
                }
            }
        }
    }
}
