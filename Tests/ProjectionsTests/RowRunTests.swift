import Domain
import Foundation
import GRDB
import Testing
import TestSupport
@testable import EventLog
@testable import Projections

/// A flush writes runs of `Projector.insertRunRows` new rows with one INSERT each
/// (`RowBatch.write`): the rows must be those a step per row writes, and a failure inside a run
/// must name its own row, as it did one row at a time.
@Suite struct RowRunTests {
    /// Every column of every row of every projected table, `_clocks` included, as SQL literals.
    static func allRows(_ p: Projection) throws -> [String] {
        try p.database.read { db in
            var lines: [String] = []
            for t in p.schema.tables {
                let columns = try Row.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?) ORDER BY cid", arguments: [t.name]).map { $0[0] as String }
                lines.append("# \(t.name) \(columns.joined(separator: ","))")
                let expr = columns.map { "quote(\($0))" }.joined(separator: " || '|' || ")
                lines += try String.fetchAll(db, sql: "SELECT \(expr) FROM \(t.name) ORDER BY id")
            }
            return lines
        }
    }

    /// Appended a few events at a time (every flush writes a handful of rows, one step each),
    /// then rebuilt (every table written in runs, with a shorter tail): the same rows, byte for
    /// byte, `_clocks` included, with texts of every shape, reals, NULLs, deletes, restores,
    /// rows made of several events and tables of several sizes around a run.
    @Test func rowsWrittenInRunsAreTheRowsWrittenOneByOne() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let w = try ProjectedStore(store: store)
        let run = Projector.insertRunRows
        let texts = ["", "a", "nul\u{0}inside", "ünïcödé 🙂 ✓", String(repeating: "long é ", count: 50), "'); DROP TABLE items; --"]
        // Items: three runs and a tail; tags: exactly one run; saved searches: one short of a run.
        let items = (0..<(3 * run + 17)).map { _ in UUID() }
        let tags = (0..<run).map { _ in UUID() }
        let searches = (0..<(run - 1)).map { _ in UUID() }
        var ms: [Mutation] = []
        for (i, id) in items.enumerated() {
            var fields = [Field("title", .text(texts[i % texts.count] + "\(i)"))]
            if i % 3 == 0 { fields.append(Field("notes", .text(texts[(i / 3) % texts.count]))) }
            if i % 4 == 0 { fields.append(Field("sort_order", .real(Double(i) / 7))) }
            if i % 5 == 0 { fields.append(Field("parent_id", .text(items[(i + 1) % items.count].lowercasedString))) }
            ms.append(Mutation(entity: .item, op: .create, entityID: id, fields: fields))
            if i % 7 == 0 { ms.append(Mutation(entity: .item, op: .update, entityID: id, fields: [Field("title", .null), Field("priority", .integer(Int64(i % 4)))])) }
            if i % 11 == 0 { ms.append(Mutation(entity: .item, op: .delete, entityID: id)) }
            if i % 22 == 0 { ms.append(Mutation(entity: .item, op: .restore, entityID: id)) }
        }
        for (i, id) in tags.enumerated() { ms.append(Mutation(entity: .tag, op: .create, entityID: id, fields: [Field("name", .text("tag \(i)"))])) }
        for (i, id) in searches.enumerated() {
            ms.append(Mutation(entity: .savedSearch, op: .create, entityID: id, fields: [Field("name", .text("s\(i)")), Field("query", .text(texts[i % texts.count]))]))
        }
        for start in stride(from: 0, to: ms.count, by: 5) { _ = try w.append(Array(ms[start..<min(ms.count, start + 5)])) }
        let oneByOne = try Self.allRows(w.projection)
        try w.close()
        try Projection.rebuild(store: store)
        let p = try Projection(store: store)
        defer { try? p.close() }
        let inRuns = try Self.allRows(p)
        #expect(inRuns.count == oneByOne.count)
        #expect(inRuns == oneByOne)
        // The tables were as large as meant (a run and more, a run, one short of a run).
        #expect(inRuns.filter { $0.hasPrefix("'") }.count >= items.count + tags.count + searches.count)
    }

    /// A projection file another process left with rows but no cursor: the fill that follows
    /// meets a row already there in the middle of a run. The error names that row (SQLite backs
    /// out the run's statement, and its rows are written again one by one), and nothing of the
    /// fill is committed.
    @Test func aRowThatFailsInsideARunIsTheOneNamed() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let w = try ProjectedStore(store: store)
        let run = Projector.insertRunRows
        let n = 3 * run
        func id(_ i: Int) -> UUID { UUID(uuidString: String(format: "00000000-0000-4000-8000-%012d", i))! }
        _ = try w.append((0..<n).map { Mutation(entity: .item, op: .create, entityID: id($0), fields: [Field("title", .text("item \($0)"))]) })
        try w.close()
        // Keep one row, inside the second run (key order is id order here), and forget the cursor.
        let kept = run + run / 2
        do {
            let q = try DatabaseQueue(path: Projection.path(for: store))
            try q.write { db in
                try db.execute(sql: "DELETE FROM items WHERE id <> ?", arguments: [id(kept).lowercasedString])
                try db.execute(sql: "DELETE FROM projection_cursor")
            }
            try q.close()
        }
        let p = try Projection(store: store)
        defer { try? p.close() }
        #expect(try p.cursor().isEmpty)
        do {
            try p.catchUp()
            Issue.record("the fill wrote over a row already there")
        } catch {
            let message = "\(error)"
            #expect(message.contains("items row \(id(kept).lowercasedString)"), "\(message)")
            #expect(!message.contains("items row \(id(run).lowercasedString)"), "\(message)")
        }
        // Rolled back: the one row and no cursor, as before the fill.
        #expect(try p.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM items") } == 1)
        #expect(try p.cursor().isEmpty)
    }
}
