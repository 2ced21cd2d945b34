import Domain
import Foundation
import GRDB
import Testing
import TestSupport
@testable import EventLog
@testable import Logbook
@testable import Projections

/// An NDJSON append is projected as it lands (`Projection.projecting`): its events are merged
/// beside the append and committed once durable. What that leaves must be exactly what catching
/// up from the log leaves, and a refused input must leave nothing of itself in the projection.
@Suite struct ProjectedAppendTests {
    /// Lines `from..<to` of the seeded sample workload, written to a file in `dir`, with `bad`
    /// (1-based within the file) replaced by a line that does not parse.
    func input(_ dir: TempDir, _ range: Range<Int>, seed: UInt64 = 41, bad: Int? = nil) throws -> Int32 {
        var lines = Array(SampleWorkload(seed: seed, count: range.upperBound))[range]
        if let bad { lines[range.lowerBound + bad - 1] = #"{"entity":"item","op":"create","id":"not-a-uuid"}"# }
        let path = dir.path + "/in-\(UUID().uuidString.prefix(8)).ndjson"
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        return fd
    }

    /// A copy of `store` without its projection; its path.
    func copyWithoutProjection(_ store: String, in dir: TempDir) throws -> String {
        let copy = dir.path + "/copy-\(UUID().uuidString.prefix(8))"
        try FileManager.default.copyItem(atPath: store, toPath: copy)
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: copy + "/projection.sqlite" + suffix) }
        return copy
    }

    /// The projection of `store` made again from its log alone, in a copy without it.
    func caughtUpCopy(of store: String, in dir: TempDir) throws -> [String] {
        try Workload.dump(try Store.open(at: try copyWithoutProjection(store, in: dir)))
    }

    func newBook(_ dir: TempDir) throws -> Logbook { try Logbook.open(at: dir.path + "/s", creating: true) }

    func dump(_ book: Logbook) throws -> [String] { try #require(book.writer).projection.canonicalDump() }

    /// An empty projection filled as the append lands (the rebuild's way), then a second append
    /// whose updates, deletes and restores reach entities of the first (merged into rows): both
    /// equal the projection caught up from the same log, and both took the inline path.
    /// Claiming (as `evctl append` does), the empty projection's file is taken for the fill
    /// (rollback journal) and given back to the WAL: the same tables, nothing left beside it.
    @Test(arguments: [false, true]) func projectedAsItLandsEqualsCaughtUpFromTheLog(claiming: Bool) throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/s", creating: true)
        defer { try? book.close() }
        for range in [0..<6_000, 6_000..<11_000] {
            let fd = try input(dir, range)
            defer { close(fd) }
            let (r, failure) = try book.appendNDJSON(from: fd, name: "in.ndjson", claimingProjection: claiming)
            #expect(failure == nil)
            #expect(r.appended == range.count)
            #expect(try dump(book) == (try caughtUpCopy(of: dir.path + "/s", in: dir)))
            #expect(try journal(dir.path + "/s") == "wal")
        }
        #expect(try #require(book.writer).projection.appendsProjectedAsTheyLanded == 2)
        #expect(try #require(book.writer).projection.fillsWithFileClaimed == (claiming ? 1 : 0))  // the empty one only
        #expect(try book.items().count > 100)
    }

    /// The projection file's journal mode as a new connection finds it, once sure no rollback
    /// journal is left beside it.
    func journal(_ store: String) throws -> String? {
        #expect(!FileManager.default.fileExists(atPath: store + "/projection.sqlite-journal"))
        let q = try DatabaseQueue(path: store + "/projection.sqlite")
        defer { try? q.close() }
        return try q.read { try String.fetchOne($0, sql: "PRAGMA journal_mode") }
    }

    /// A crash in the middle of a fill under the rollback journal leaves the file with pages of
    /// the fill in it and a hot journal beside it. Made here as a crash would leave it (a
    /// transaction that spills its pages, the two files copied while it is open): the next
    /// writer's open plays the journal back, the projection is as before the fill, back on the
    /// WAL, and catching up from the log makes it whole. A rebuild over such a file leaves no
    /// journal beside the new one.
    @Test func aHotJournalLeftByACrashedFillIsPlayedBack() throws {
        let dir = TempDir()
        do {
            let book = try Logbook.open(at: dir.path + "/s", creating: true)
            let fd = try input(dir, 0..<4_000)
            defer { close(fd) }
            _ = try book.appendNDJSON(from: fd, name: "in.ndjson", claimingProjection: true)
            try book.close()
        }
        let whole = try caughtUpCopy(of: dir.path + "/s", in: dir)
        for rebuild in [false, true] {
            let crashed = dir.path + "/crashed-\(rebuild)"
            try FileManager.default.copyItem(atPath: dir.path + "/s", toPath: crashed)
            let file = crashed + "/projection.sqlite"
            let q = try DatabaseQueue(path: file)
            try q.writeWithoutTransaction { db in
                #expect(try String.fetchOne(db, sql: "PRAGMA journal_mode = DELETE") == "delete")
                try db.execute(sql: "PRAGMA cache_size = 8")
                try db.execute(sql: "BEGIN IMMEDIATE")
                try db.execute(sql: "DELETE FROM items")
                try db.execute(sql: "DELETE FROM item_tags")
                try db.execute(sql: "UPDATE projection_cursor SET last_seq = 1")
                // The image a crash leaves: the file with spilled pages, and the hot journal.
                #expect(FileManager.default.fileExists(atPath: file + "-journal"))
                try Data(contentsOf: URL(fileURLWithPath: file)).write(to: URL(fileURLWithPath: file + ".image"))
                try Data(contentsOf: URL(fileURLWithPath: file + "-journal")).write(to: URL(fileURLWithPath: file + ".image-journal"))
                try db.execute(sql: "ROLLBACK")
            }
            try q.close()
            try FileManager.default.removeItem(atPath: file)
            try FileManager.default.moveItem(atPath: file + ".image", toPath: file)
            try FileManager.default.moveItem(atPath: file + ".image-journal", toPath: file + "-journal")
            if rebuild {
                try Projection.rebuild(store: try Store.open(at: crashed))
                #expect(!FileManager.default.fileExists(atPath: file + "-journal"))
            }
            let book = try Logbook.open(at: crashed)
            #expect(try #require(book.writer).projection.canonicalDump() == whole)
            try book.close()
            #expect(try journal(crashed) == "wal")
        }
    }

    /// A fill that may claim the file while another connection (here a reader of the kind an
    /// app or the audit pages hold) has it open: SQLite refuses the switch, the fill goes
    /// through the WAL as always, and the reader keeps reading throughout.
    @Test func aFileHeldOpenElsewhereIsNotClaimed() throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/s", creating: true)
        defer { try? book.close() }
        let other = try DatabaseQueue(path: dir.path + "/s/projection.sqlite")
        defer { try? other.close() }
        #expect(try other.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM items") } == 0)
        let fd = try input(dir, 0..<4_000)
        defer { close(fd) }
        let (r, failure) = try book.appendNDJSON(from: fd, name: "in.ndjson", claimingProjection: true)
        #expect(failure == nil && r.appended == 4_000)
        let w = try #require(book.writer)
        #expect(w.projection.appendsProjectedAsTheyLanded == 1 && w.projection.fillsWithFileClaimed == 0)
        #expect(try dump(book) == (try caughtUpCopy(of: dir.path + "/s", in: dir)))
        #expect(try other.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM items") } ?? 0 > 100)
        #expect(try journal(dir.path + "/s") == "wal")
    }

    /// What a projection holds beyond the canonical dump that the two paths must agree on: the
    /// conflicts detected (without their row ids and times) and the schema (indexes and triggers
    /// set aside by an empty projection's fill are back).
    func bookkeeping(_ path: String) throws -> [String] {
        let q = try DatabaseQueue(path: path + "/projection.sqlite")
        defer { try? q.close() }
        return try q.read { db in
            try String.fetchAll(db, sql: "SELECT entity || ' ' || entity_id || ' ' || field || ' ' || winner_event_id || ' ' || loser_event_id || ' ' || winner_value || ' ' || loser_value FROM conflicts ORDER BY 1")
                + String.fetchAll(db, sql: "SELECT type || ' ' || name || ' ' || ifnull(sql, '') FROM sqlite_master ORDER BY name")
        }
    }

    /// Lines with event ids (repeated within the input and against the log), bases that miss
    /// later edits (conflicts) and actors, projected as they land, fresh then not: the same
    /// rows, conflicts and schema as a catch-up from the log, and duplicates never applied.
    @Test(arguments: [false, true]) func eventIDsDuplicatesBasesAndActorsProjectAsACatchUpDoes(claiming: Bool) throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/s", creating: true)
        defer { try? book.close() }
        let sample = Array(SampleWorkload(seed: 47, count: 4_000))
        let items = sample.prefix(2_000).compactMap { line -> UUID? in
            guard let m = try? MutationParser.parse(line) else { return nil }
            return m.entity == .item && m.op == .create ? m.entityID : nil
        }
        try #require(items.count > 20)
        func tagged(_ n: Int) -> String {
            #"{"entity":"tag","op":"create","id":"00000000-0000-4000-8000-\#(String(format: "%012d", n))","event_id":"00000000-0000-4000-9000-\#(String(format: "%012d", n))","fields":{"name":"t\#(n)"},"actor":"ann"}"#
        }
        func stale(_ id: UUID, _ n: Int) -> String {
            #"{"entity":"item","op":"update","id":"\#(id.uuidString.lowercased())","fields":{"title":"stale \#(n)"},"base":0,"actor":"bob"}"#
        }
        // A peer's edits of twenty items this replica has not seen when it edits them (base 0):
        // concurrent edits from another origin, which the projection records as conflicts.
        let peer = try Store.create(at: dir.path + "/peer")
        let peerItems = (1...20).map { _ in UUID() }
        do {
            let a = try LogAppender(store: peer)
            _ = try a.append(peerItems.map { Mutation(entity: .item, op: .create, entityID: $0, fields: [Field("title", .text("theirs"))]) })
            try a.close()
        }
        let first = Array(sample[..<2_000]) + (1...40).map(tagged) + [tagged(7), tagged(8)]
        let second = Array(sample[2_000...]) + [tagged(3)] + items.prefix(10).enumerated().map { stale($1, $0) }
            + peerItems.enumerated().map { stale($1, $0) } + (41...50).map(tagged)
        for (n, (lines, appended, duplicates)) in [(first, 2_040, 2), (second, 2_040, 1)].enumerated() {
            if n == 1 {
                let w = try #require(book.writer)
                _ = try w.receive(try Workload.frames(peer, peer.replicaID))
                _ = try w.catchUp()
            }
            let path = dir.path + "/in-\(UUID().uuidString.prefix(8)).ndjson"
            try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            let fd = open(path, O_RDONLY)
            defer { close(fd) }
            let (r, failure) = try book.appendNDJSON(from: fd, name: "in.ndjson", claimingProjection: claiming)
            #expect(failure == nil)
            #expect(r.appended == appended && r.duplicateCount == duplicates)
            let copy = try copyWithoutProjection(dir.path + "/s", in: dir)
            #expect(try Workload.dump(try Store.open(at: copy)) == (try dump(book)))
            #expect(try bookkeeping(copy) == (try bookkeeping(dir.path + "/s")))
        }
        #expect(try #require(book.writer).projection.appendsProjectedAsTheyLanded == 2)
        #expect(try #require(book.writer).projection.fillsWithFileClaimed == (claiming ? 1 : 0))
        // The twenty stale edits of the peer's items (base 0, later than the peer's creates) each
        // left a conflict, open: counted, so that one never found and one resolved both show.
        #expect(try #require(book.writer).projection.conflicts().count == 20)
        #expect(try #require(book.writer).projection.conflicts(includeResolved: true).count == 20)
    }

    /// A bad line late in the input, after chunks were already merged: the append is refused,
    /// and the projection, the log and the cursor are exactly as before it, fresh or not.
    /// Claiming, the refused fill of the empty projection is rolled back from its rollback
    /// journal, and the file given back to the WAL.
    @Test(arguments: [false, true]) func aRefusedInputLeavesTheProjectionAsItWas(claiming: Bool) throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/s", creating: true)
        defer { try? book.close() }
        for prior in [false, true] {
            if prior {
                let fd = try input(dir, 0..<3_000)
                defer { close(fd) }
                _ = try book.appendNDJSON(from: fd, name: "in.ndjson", claimingProjection: claiming)
            }
            let before = try dump(book), cursor = try book.cursor()
            let fd = try input(dir, 3_000..<9_000, bad: 5_500)
            defer { close(fd) }
            #expect(throws: InputError.self) { _ = try book.appendNDJSON(from: fd, name: "in.ndjson", claimingProjection: claiming) }
            #expect(try dump(book) == before)
            #expect(try book.cursor() == cursor)
            #expect(try caughtUpCopy(of: dir.path + "/s", in: dir) == before)
            #expect(try journal(dir.path + "/s") == "wal")
        }
        #expect(try #require(book.writer).projection.appendsProjectedAsTheyLanded == 1)
        // The refused fill, then the good one.
        #expect(try #require(book.writer).projection.fillsWithFileClaimed == (claiming ? 2 : 0))
    }

    /// The projection fails while the append lands (a trigger in its file refuses one row): the
    /// append stands, durable, and says so; the projection is rolled back to where it was, and a
    /// later catch-up makes it whole.
    @Test func aProjectionThatFailsLeavesTheAppendStanding() throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/s", creating: true)
        defer { try? book.close() }
        do {
            let fd = try input(dir, 0..<2_000)
            defer { close(fd) }
            _ = try book.appendNDJSON(from: fd, name: "in.ndjson")
        }
        let w = try #require(book.writer)
        let before = try dump(book), cursor = try w.projection.cursor()
        try w.projection.pool.write { db in
            try db.execute(sql: "CREATE TRIGGER refuse_boom BEFORE INSERT ON tags WHEN NEW.name = 'boom' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        }
        let path = dir.path + "/boom.ndjson"
        let lines = Array(SampleWorkload(seed: 41, count: 5_000))[2_000...]
            + [#"{"entity":"tag","op":"create","id":"00000000-0000-4000-8000-0000000000bb","fields":{"name":"boom"}}"#]
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        let (r, failure) = try book.appendNDJSON(from: fd, name: "boom.ndjson")
        #expect(r.appended == 3_001 && r.lastSeq == Seq(5_001))
        #expect("\(try #require(failure))".contains("refused by the test"))
        #expect(try LogReader(store: w.store).events(origin: w.store.replicaID).count == 5_001)
        #expect(try dump(book) == before)
        #expect(try w.projection.cursor() == cursor)
        #expect(w.projection.appendsProjectedAsTheyLanded == 1)  // the first append only
        try w.projection.pool.write { try $0.execute(sql: "DROP TRIGGER refuse_boom") }
        _ = try w.catchUp()
        #expect(try dump(book) == (try caughtUpCopy(of: dir.path + "/s", in: dir)))
        #expect(try w.projection.cursor()[w.store.replicaID] == Seq(5_001))
    }

    /// A projection behind the log (an append made without projecting) is not projected inline:
    /// the append lands first and the catch-up applies everything, in order, as before.
    @Test func aProjectionBehindTheLogIsCaughtUpAfterTheAppend() throws {
        let dir = TempDir()
        var options = Logbook.Options()
        options.project = false
        do {
            let unprojected = try Logbook.open(at: dir.path + "/s", creating: true, options: options)
            let fd = try input(dir, 0..<2_000)
            defer { close(fd) }
            _ = try unprojected.appendNDJSON(from: fd, name: "in.ndjson")
            try unprojected.close()
        }
        // Opening a writer that projects would catch up at once: the log is appended to
        // behind the projection's back through a second store handle instead.
        let book = try Logbook.open(at: dir.path + "/s")
        defer { try? book.close() }
        let w = try #require(book.writer)
        _ = try w.appender.append(Workload.mutations(500, seed: 43))
        let fd = try input(dir, 2_000..<4_000)
        defer { close(fd) }
        let (r, failure) = try book.appendNDJSON(from: fd, name: "in.ndjson")
        #expect(failure == nil && r.appended == 2_000)
        #expect(w.projection.appendsProjectedAsTheyLanded == 0)
        #expect(try dump(book) == (try caughtUpCopy(of: dir.path + "/s", in: dir)))
        #expect(try w.projection.cursor()[w.store.replicaID] == Seq(4_500))
    }

    /// Subscribers hear of an append projected as it lands once, with its events as the log
    /// holds them.
    @Test func subscribersGetTheEventsAsTheLogHoldsThem() async throws {
        let dir = TempDir()
        let book = try newBook(dir)
        defer { try? book.close() }
        let w = try #require(book.writer)
        var changes = w.projection.changes().makeAsyncIterator()
        let fd = try input(dir, 0..<1_500)
        defer { close(fd) }
        _ = try book.appendNDJSON(from: fd, name: "in.ndjson")
        let change = try #require(await changes.next())
        #expect(!change.rebuilt)
        #expect(change.events == (try LogReader(store: w.store).events(origin: w.store.replicaID)))
        #expect(change.cursor[w.store.replicaID] == Seq(1_500))
    }
}
