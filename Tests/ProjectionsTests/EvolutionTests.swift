import Domain
import Foundation
import TestSupport
import GRDB
import Testing
@testable import EventLog
@testable import Projections

/// Event schema evolution (docs/FORMAT.md, "Evolution"): older events are upcast when read,
/// newer ones are kept, shipped and projected as far as understood, and the golden logs always
/// replay to the same tables.
@Suite struct EvolutionTests {
    static let peer = ReplicaID("5eed0000-0000-4000-8000-000000000001")!
    static let item1 = UUID(uuidString: "1a000000-0000-4000-8000-000000000001")!
    static let item2 = UUID(uuidString: "1a000000-0000-4000-8000-000000000002")!

    /// A peer's frames, one event each, chained as a peer's log would be, with clocks near now.
    static func peerFrames(_ events: [(Entity, Op, UUID, [Field], UInt8)]) -> [[UInt8]] {
        let now = UInt64(Date().timeIntervalSince1970 * 1000) - 60_000
        var previous = FrameHash.zero
        var out: [[UInt8]] = []
        for (i, (entity, op, id, fields, version)) in events.enumerated() {
            let m = Mutation(entity: entity, op: op, entityID: id, fields: fields)
            let e = Event(origin: peer, seq: Seq(UInt64(i + 1)), hlc: HLC(wallMillis: now, counter: UInt16(i)), mutation: m, schemaVersion: version)
            let frame = FrameEncoder().encode([e][...], continues: false, previousHash: previous)
            previous = frame.withUnsafeBytes { FrameHash.of($0) }
            out.append(frame)
        }
        return out
    }

    func received(_ frames: [[UInt8]], in dir: TempDir) throws -> (Store, Projection) {
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender.opening(store)
        _ = try appender.receive(frames)
        try appender.close()
        let p = try Projection(store: store)
        try p.catchUp()
        return (store, p)
    }

    func item(_ p: Projection, _ id: UUID) throws -> Row? {
        try p.database.read { try Row.fetchOne($0, sql: "SELECT * FROM items WHERE id = ?", arguments: [id.lowercasedString]) }
    }

    /// Version 1 let an app write seed 001's item fields as any scalar; version 2 types them.
    /// A version-1 value converts when nothing is lost, and moves to NAME_v1 otherwise.
    @Test func version1ItemFieldsAreUpcastWhenRead() throws {
        let dir = TempDir()
        let frames = Self.peerFrames([
            (.item, .create, Self.item1, [Field("importance", .text(" 7 ")), Field("latitude", .text("48.85")), Field("location_name", .integer(12)),
                                          Field("priority", .text("High")), Field("title", .text("old app"))], 1),
            (.item, .create, Self.item2, [Field("longitude", .boolean(true)), Field("priority", .text("someday-ish")), Field("title", .text("odd"))], 1),
            (.item, .update, Self.item1, [Field("priority", .real(2))], 1),
        ])
        let (store, p) = try received(frames, in: dir)
        let one = try #require(try item(p, Self.item1))
        #expect(one["priority"] as Int64? == 2)  // the later update, a real with no fraction
        #expect(one["importance"] as Int64? == 7)
        #expect(one["latitude"] as Double? == 48.85)
        #expect(one["location_name"] as String? == "12")
        let two = try #require(try item(p, Self.item2))
        #expect(two["priority"] as Int64? == nil)
        #expect(two["longitude"] as Double? == nil)
        #expect(two["title"] as String? == "odd")

        // History (and every reader) sees the current shape; what did not convert is kept.
        let history = try p.history(entity: .item, id: Self.item2)
        let fields = try #require(history.first).fields
        #expect(fields.contains(Field("priority_v1", .text("someday-ish"))))
        #expect(fields.contains(Field("longitude_v1", .boolean(true))))
        #expect(!fields.contains { $0.name == "priority" })
        #expect(history.allSatisfy { $0.schemaVersion == Event.currentSchemaVersion })
        let first = try #require(try p.history(entity: .item, id: Self.item1).first)
        #expect(first.field("priority") == .integer(3))

        // The log is never rewritten: the frames read back are the bytes received.
        var back: [[UInt8]] = []
        try LogReader(store: store).forEachFrame(origin: Self.peer) { _, b in back.append(Array(b)); return true }
        #expect(back == frames)
        #expect(try p.unreadEvents().isEmpty)
    }

    /// A newer build's events: an unknown entity, an unknown op, a later schema version with an
    /// unknown field code. Kept in the log byte for byte (and so shipped on), never refused;
    /// the fields this build knows are projected; the rest is counted as unread.
    @Test func aNewerBuildsEventsAreKeptAndProjectedAsFarAsUnderstood() throws {
        let dir = TempDir()
        let frames = Self.peerFrames([
            (.item, .create, Self.item1, [Field("title", .text("v2 item"))], 2),
            (.item, .update, Self.item1, [Field("#200", .integer(5)), Field("title", .text("from v3"))], 3),
            (Entity(rawValue: 42), .create, Self.item2, [Field("title", .text("a gadget"))], 3),
            (.item, Op(rawValue: 9), Self.item1, [Field("title", .text("op nine"))], 3),
        ])
        let (store, p) = try received(frames, in: dir)
        #expect(try Verifier(store: store).run().isClean)
        #expect(try p.cursor()[Self.peer] == Seq(4))
        #expect(try p.lag().isEmpty)
        var back: [[UInt8]] = []
        try LogReader(store: store).forEachFrame(origin: Self.peer) { _, b in back.append(Array(b)); return true }
        #expect(back == frames)

        // Projected as far as understood: the later version's title; not the unknown op's.
        #expect(try item(p, Self.item1)?["title"] as String? == "from v3")
        #expect(try item(p, Self.item2) == nil)
        let unread = try p.unreadEvents()
        #expect(unread == [
            UnreadEvents(entity: .item, op: .update, schemaVersion: 3, events: 1),
            UnreadEvents(entity: .item, op: Op(rawValue: 9), schemaVersion: 3, events: 1),
            UnreadEvents(entity: Entity(rawValue: 42), op: .create, schemaVersion: 3, events: 1),
        ])
        #expect(unread.allSatisfy { !$0.understoodNow })
        // The unknown field code is kept under `#200` and written back as the same code.
        let events = try LogReader(store: store).events(origin: Self.peer)
        #expect(events[1].field("#200") == .integer(5))
        #expect(FrameEncoder().encode([events[1]][...], continues: false, previousHash: FrameHash.of(frames[0].withUnsafeBytes { $0 })) == frames[1])
        #expect(events[2].entity.name == "entity#42" && events[3].op.name == "op#9")

        // A rebuild counts them again, once.
        try p.close()
        try Projection.rebuild(store: store)
        #expect(try Projection(store: store).unreadEvents() == unread)
    }

    /// A build that understands events its predecessor could not (recorded in projection_unread)
    /// rebuilds the projection when it opens the store for writing.
    @Test func anUpgradedBuildRebuildsWhatItNowUnderstands() throws {
        let dir = TempDir()
        let frames = Self.peerFrames([(.item, .create, Self.item1, [Field("title", .text("kept"))], 2)])
        let (store, p) = try received(frames, in: dir)
        // As an older build would have left it: the event counted as unread, the row missing.
        try p.database.write { db in
            try db.execute(sql: "INSERT INTO projection_unread VALUES (1, 1, 2, 1)")
            try db.execute(sql: "DELETE FROM items")
        }
        #expect(try p.unreadEvents().first?.understoodNow == true)
        let w = try ProjectedStore(store: store)
        defer { try? w.close() }
        #expect(!p.isCurrentFile)
        #expect(try w.projection.unreadEvents().isEmpty)
        #expect(try item(w.projection, Self.item1)?["title"] as String? == "kept")
    }

    /// A projection filled by a build from before the share scope rule ("v5 share scopes") is
    /// rebuilt by the first writer of this build when its store holds a share's frames (so the
    /// share's rows get their scope), and is left as it is when it cannot (a store below format 3).
    @Test(arguments: [true, false])
    func aProjectionFilledBeforeTheScopeRuleIsRebuiltOnlyWhenItsStoreHoldsShares(shared: Bool) throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s", signingKey: ReplicaKey.generate())
        let appender = try LogAppender.opening(store)
        _ = try appender.append([Mutation(entity: .item, op: .create, entityID: Self.item1, fields: [Field("title", .text("mine"))])])
        if shared {
            let share = try appender.createShare(name: "older")
            _ = try appender.appendShared([Mutation(entity: .item, op: .create, entityID: Self.item2, fields: [Field("title", .text("ours"))])], to: share)
        }
        try appender.close()
        let p = try Projection(store: store)
        try p.catchUp()
        // As the build before would have left it: no scopes, no such migration.
        // A row only this file holds (a rebuild would not make it) tells whether it was rebuilt.
        try p.database.write { db in
            try db.execute(sql: "DROP TABLE projection_scopes")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = ?", arguments: [ProjectionSchema.shareScopesMigration])
            try db.execute(sql: """
                INSERT INTO sync_anomalies (kind, entity, entity_id, attempted_op, event_id, correlation_id, detected_at)
                VALUES ('sentinel', 'item', 'x', 'update', 'x', 'x', 'x')
                """)
        }
        try p.close()
        let w = try ProjectedStore(store: store)
        defer { try? w.close() }
        #expect(try w.projection.owedRebuild().isEmpty)
        let kept = try w.projection.database.read { try Bool.fetchOne($0, sql: "SELECT EXISTS (SELECT 1 FROM sync_anomalies WHERE kind = 'sentinel')") }
        #expect(kept == !shared, "rebuilt: \(shared)")
        let scoped = try w.projection.database.read { try String.fetchAll($0, sql: "SELECT id FROM projection_scopes") }
        #expect(scoped == (shared ? [Self.item2.lowercasedString] : []))
        #expect(try item(w.projection, Self.item1)?["title"] as String? == "mine")
    }

    /// Record heads a reader must refuse, whatever the version: version, entity or op code 0.
    @Test func zeroCodesAreDamageNotEvolution() throws {
        for (i, bad) in [[0, 0, 1, 1], [1, 0, 0, 1], [1, 0, 1, 0]].enumerated() {
            let body: [UInt8] = bad.map(UInt8.init) + [0] + [UInt8](repeating: 7, count: 16) + [0]
            var w = ByteWriter()
            w.varint(UInt64(body.count))
            var r = w.bytes + body
            let message = r.withUnsafeMutableBytes { p -> String? in
                var reader = ByteReader(UnsafeRawBufferPointer(p))
                do { _ = try EventCodec.decode(&reader, origin: Self.peer, seq: Seq(1), firstHLC: HLC(rawValue: 1)); return nil } catch { return "\(error)" }
            }
            #expect(message?.contains("is not valid") == true, "case \(i)")
            r.removeAll()
        }
    }

    /// The golden logs (today's, and the one written before event schema version 2) replay to
    /// the committed tables, byte for byte, forever. LOGBOOK_WRITE_FIXTURES=1 writes them after a
    /// deliberate change to what the golden log holds.
    @Test(arguments: ["golden", "golden-v1"])
    func aGoldenLogReplaysToTheCommittedTables(_ name: String) throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("fixtures/log").path
        let dir = TempDir()
        try FileManager.default.copyItem(atPath: root + "/" + name, toPath: dir.path + "/s")
        let store = try Store.open(at: dir.path + "/s")
        try Projection.rebuild(store: store)
        let dump = try Projection(store: store).canonicalDump().joined(separator: "\n") + "\n"
        let file = root + "/\(name)-tables.txt"
        if ProcessInfo.processInfo.environment["LOGBOOK_WRITE_FIXTURES"] == "1" {
            try dump.write(toFile: file, atomically: true, encoding: .utf8)
        }
        let expected = try String(contentsOfFile: file, encoding: .utf8)
        #expect(dump == expected, "\(name) no longer replays to \(name)-tables.txt")
        if name == "golden" {
            #expect(dump.contains("'LINK'") && dump.contains("'Paris'"))
        }
    }
}
