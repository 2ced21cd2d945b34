import Domain
import Foundation
import GRDB
import TestSupport
import Testing
@testable import EventLog
@testable import Projections

/// A hub's catch-ups (`catchUp(origins:)`) keep their projector from one group of pushes to the
/// next, and load it again as soon as anything else wrote the projection: another connection
/// (another `Projection` on the file) or this one by another path (`apply`).
@Suite struct KeptProjectorTests {
    /// A replica's store, and the frames of its log from `seq` on.
    struct Replica {
        let store: Store
        let writer: ProjectedStore
        init(_ dir: TempDir, _ name: String, id: ReplicaID = .random()) throws {
            store = try Store.create(at: dir.path + "/" + name, replicaID: id)
            writer = try ProjectedStore(store: store)
        }
        func create(_ title: String) throws -> UUID {
            let id = UUID()
            _ = try writer.append([Mutation(entity: .item, op: .create, entityID: id, fields: [Field("title", .text(title))])])
            return id
        }
        func frames(from seq: UInt64 = 1) throws -> [[UInt8]] {
            var out: [[UInt8]] = []
            try LogReader(store: store).forEachFrame(origin: store.replicaID) { h, bytes in
                if h.lastSeq.rawValue >= seq { out.append(Array(bytes)) }
                return true
            }
            return out
        }
    }

    func title(_ p: Projection, _ id: UUID) throws -> String? {
        try p.database.read { try String.fetchOne($0, sql: "SELECT title FROM items WHERE id = ?", arguments: [id.lowercasedString]) }
    }

    func originsAreDense(_ p: Projection) throws -> [String] {
        try p.database.read { db in
            let rows = try Row.fetchAll(db, sql: "SELECT idx, origin FROM projection_origins ORDER BY idx")
            for (i, r) in rows.enumerated() { #expect(r["idx"] as Int == i) }
            return rows.map { $0["origin"] as String }
        }
    }

    @Test func aKeptProjectorIsLoadedAgainOnceAnythingElseWroteTheFile() throws {
        let dir = TempDir()
        let r1 = try Replica(dir, "r1"), r2 = try Replica(dir, "r2"), r3 = try Replica(dir, "r3"), r4 = try Replica(dir, "r4")
        defer { for r in [r1, r2, r3, r4] { try? r.writer.close() } }
        let hubStore = try Store.create(at: dir.path + "/hub")
        let hub = try ProjectedStore(store: hubStore)
        defer { try? hub.close() }
        let p = hub.projection

        // First group: the empty projection is filled the rebuild's way.
        let a = try r1.create("a"), b = try r2.create("b")
        _ = try hub.appender.receive(batches: [try r1.frames(), try r2.frames()])
        #expect(try hub.catchUp(origins: [r1.store.replicaID, r2.store.replicaID]) == 2)
        // Then one projector is loaded, and kept while only these catch-ups write.
        let loaded = p.projectorsLoaded
        for i in 0..<3 {
            let id = try r1.create("a\(i)")
            _ = try hub.appender.receive(batches: [try r1.frames(from: UInt64(2 + i))])
            #expect(try hub.catchUp(origins: [r1.store.replicaID]) == 1)
            #expect(try title(p, id) == "a\(i)")
        }
        #expect(p.projectorsLoaded == loaded + 1, "one load for three catch-ups")

        // Another connection applies events of an origin the kept projector never met: it
        // takes the next origin number in projection_origins.
        let other = try Projection(store: hubStore)
        var f = EventFactory()
        let c = UUID()
        try other.apply([f.make(originC, hlc: hlc(1), .item, .create, c, [Field("title", text("from another connection"))])])
        try other.close()
        let d = try r3.create("d")
        _ = try hub.appender.receive(batches: [try r3.frames()])
        #expect(try hub.catchUp(origins: [r3.store.replicaID]) == 1)
        #expect(p.projectorsLoaded == loaded + 2, "loaded again after another connection's commit")
        #expect(try title(p, d) == "d" && (try title(p, c)) == "from another connection")
        #expect(Set(try originsAreDense(p)) == Set([r1, r2, r3].map { $0.store.replicaID.description } + [originC.description]))

        // This connection writes by another path: loaded again too.
        let later = HLC(wallMillis: UInt64(Date().timeIntervalSince1970 * 1000) + 60_000, counter: 0).rawValue
        try p.apply([f.make(originB, hlc: later, .item, .update, a, [Field("title", text("applied directly"))])])
        let e = try r4.create("e")
        _ = try hub.appender.receive(batches: [try r4.frames()])
        #expect(try hub.catchUp(origins: [r4.store.replicaID]) == 1)
        #expect(p.projectorsLoaded == loaded + 3, "loaded again after a write by apply")
        #expect(try title(p, e) == "e")
        #expect(try title(p, a) == "applied directly")
        #expect(try title(p, b) == "b")
        #expect(try originsAreDense(p).count == 6)
        let cursor = try p.cursor()
        #expect(cursor[r1.store.replicaID] == Seq(4) && cursor[r3.store.replicaID] == Seq(1) && cursor[r4.store.replicaID] == Seq(1))
        #expect(cursor[originC] == Seq(1) && cursor[originB] == Seq(1))
    }

    /// A rebuild in place copies a new file over the open one through the writer connection:
    /// neither data_version nor total_changes() moves, and the new file numbers origins in its
    /// own order. The kept projector must not be used after it.
    @Test func aRebuildInPlaceDropsTheKeptProjector() throws {
        let dir = TempDir()
        let r1 = try Replica(dir, "r1", id: ReplicaID("cccccccc-0000-4000-8000-000000000001")!)
        let r2 = try Replica(dir, "r2", id: ReplicaID("dddddddd-0000-4000-8000-000000000002")!)
        let r3 = try Replica(dir, "r3", id: ReplicaID("aaaaaaaa-0000-4000-8000-000000000003")!)
        defer { for r in [r1, r2, r3] { try? r.writer.close() } }
        let hubStore = try Store.create(at: dir.path + "/hub")
        let hub = try ProjectedStore(store: hubStore)
        defer { try? hub.close() }
        let p = hub.projection
        let shared = try r1.create("first")
        _ = try r2.create("b")
        _ = try hub.appender.receive(batches: [try r1.frames(), try r2.frames()])
        _ = try hub.catchUp(origins: [r1.store.replicaID, r2.store.replicaID])
        // r2 and r3 write the same field of the same item (a conflict, settled by origin order
        // on equal clocks only through the numbering the projector holds).
        _ = try r2.writer.append([Mutation(entity: .item, op: .update, entityID: shared, fields: [Field("notes", .text("from r2"))])])
        _ = try hub.appender.receive(batches: [try r2.frames(from: 3)])
        _ = try hub.catchUp(origins: [r2.store.replicaID])
        _ = try r3.writer.append([Mutation(entity: .item, op: .update, entityID: shared, fields: [Field("notes", .text("from r3"))])])
        _ = try hub.appender.receive(batches: [try r3.frames()])
        _ = try hub.catchUp(origins: [r3.store.replicaID])  // kept: r3 is origin number 2 here
        let loaded = p.projectorsLoaded

        try p.rebuildInPlace()  // the new file numbers origins in its own order
        _ = try r1.writer.append([Mutation(entity: .item, op: .update, entityID: shared, fields: [Field("title", .text("after the rebuild"))])])
        _ = try hub.appender.receive(batches: [try r1.frames(from: 2)])
        #expect(try hub.catchUp(origins: [r1.store.replicaID]) == 1)
        #expect(p.projectorsLoaded == loaded + 1, "loaded again after the rebuild in place")
        #expect(try title(p, shared) == "after the rebuild")
        #expect(try originsAreDense(p).count == 3)
        #expect(try p.verifyDeep() == nil, "the same as a rebuild of the log")
    }
}
