import EventLog
@testable import LogbookServer
import Foundation
import TestSupport
import GRDB
@testable import Projections
import Testing
@testable import Replicator

@Suite struct SnapshotTests {
    @Test func snapshotIsTheProjectionAndTheLogPositionItCovers() throws {
        let dir = ShippingTests.Dir()
        let a = try Store.create(at: dir.path + "/a"), b = try Store.create(at: dir.path + "/b")
        let pa = try ProjectedStore(store: a), pb = try ProjectedStore(store: b)
        _ = try pa.append(ShippingTests().mutations(300, seed: 1))
        _ = try pb.append(ShippingTests().mutations(200, seed: 2))
        _ = try StoreSync.pull(from: b, into: pa.appender)
        try pa.projection.setSetting("theme", "dark")  // device-local: not in a snapshot
        let info = try Snapshot.make(pa, to: dir.path + "/snap.sqlite")
        let live = try pa.projection.canonicalDump()
        try pa.close()
        try pb.close()
        // The anchors are the ends of both logs, with the hash of each last frame.
        let reader = LogReader(store: a)
        for o in [a.replicaID, b.replicaID] {
            #expect(info.anchors[o] == (try reader.tip(origin: o, hashing: true)))
        }
        #expect(ReplicationCursor(info.anchors.mapValues(\.lastSeq)) == (try a.cursor()))
        #expect(try Snapshot.read(dir.path + "/snap.sqlite") == info)
        // Its rows are the projection's rows; app_settings stay behind.
        let copy = try Projection(store: a, path: dir.path + "/snap.sqlite")
        #expect(try copy.canonicalDump() == live)
        #expect(try copy.setting("theme") == nil)
        #expect(try copy.cursor() == (try a.cursor()).entries)
        try copy.close()
        // Something that is not a snapshot is refused by name.
        #expect { try Snapshot.read(Projection.path(for: a)) } throws: { String(describing: $0).contains("is not a snapshot") }
    }

    /// Retries of events older than a bootstrapped replica's logs are still recognised: the
    /// snapshot carries the writer-supplied event ids, and the replica's index adopts them, also
    /// when the index is deleted and rebuilt later.
    @Test func eventIDsTravelWithTheSnapshot() throws {
        let dir = ShippingTests.Dir()
        let a = try Store.create(at: dir.path + "/a"), c = try Store.create(at: dir.path + "/c"), d = try Store.create(at: dir.path + "/d")
        let ids = (0..<20).map { _ in UUID() }
        func withID(_ id: UUID, _ title: String) -> Mutation {
            Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text(title))], eventID: id)
        }
        let pa = try ProjectedStore(store: a)
        _ = try pa.append(ids.enumerated().map { withID($1, "item \($0)") })
        _ = try pa.append(ShippingTests().mutations(30, seed: 5))
        try Snapshot.make(pa, to: dir.path + "/snap.sqlite")
        try pa.close()

        try Snapshot.install(dir.path + "/snap.sqlite", into: c)
        func retry(_ store: Store, _ id: UUID) throws -> AppendResult {
            let p = try ProjectedStore(store: store)
            defer { try? p.close() }
            return try p.append([withID(id, "a retry")])
        }
        #expect(try retry(c, ids[4]).duplicateCount == 1)
        #expect(try retry(c, UUID()).appended == 1)
        // The index is derived: deleted, it is rebuilt from the kept snapshot and the log after it.
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: c.path + "/eventids.sqlite" + suffix) }
        #expect(try retry(c, ids[17]).duplicateCount == 1)
        #expect(try LogReader(store: c).events(origin: a.replicaID).isEmpty)  // none of A's log is held here

        // A snapshot without the ids (an older one) still bootstraps, and says what is missing.
        try FileManager.default.copyItem(atPath: dir.path + "/snap.sqlite", toPath: dir.path + "/old.sqlite")
        let old = try DatabaseQueue(path: dir.path + "/old.sqlite")
        try old.write { try $0.execute(sql: "DROP TABLE \("snapshot_event_ids")") }
        try old.close()
        try Snapshot.install(dir.path + "/old.sqlite", into: d)
        let appender = try LogAppender.opening(d)
        #expect(appender.recovery.actions.contains { "\($0)".contains("retries of those are not recognised") })
        try appender.close()
        #expect(try LogAppender.opening(d).recovery.actions.isEmpty)  // reported once
    }
}

extension SnapshotTests {
    /// A snapshot made by an older build (fewer projection migrations: no commit journal, no
    /// priority or place columns) is accepted and installed, its tables copied as far as they go;
    /// one naming a migration this build does not have is refused.
    @Test func aSnapshotOfAnOlderSchemaIsInstalledAndANewerOneRefused() throws {
        let dir = ShippingTests.Dir()
        let a = try Store.create(at: dir.path + "/a"), c = try Store.create(at: dir.path + "/c")
        let pa = try ProjectedStore(store: a)
        // No links: a build before migration v4 refused link events, so its snapshots never cover one.
        _ = try pa.append(ShippingTests().mutations(40, seed: 6).filter { $0.entity != .link })
        try Snapshot.make(pa, to: dir.path + "/new.sqlite")
        let expected = try pa.projection.canonicalDump()
        try pa.close()

        // The same snapshot as a build with only the v1 migrations made it.
        let v1 = ProjectionSchema.current.migrations.filter { $0.name.hasPrefix("v1 ") }.count
        let old = try DatabaseQueue(path: dir.path + "/old.sqlite")
        try ProjectionSchema.current.migrator(upTo: v1).migrate(old)
        try old.writeWithoutTransaction { db in
            for sql in SnapshotSchema.snapshotTablesSQL + [SnapshotSchema.eventIDsTableSQL] { try db.execute(sql: sql) }
            try db.execute(sql: "ATTACH DATABASE ? AS new", arguments: [dir.path + "/new.sqlite"])
            let tables = try String.fetchAll(db, sql: "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'items_fts%' AND name NOT IN ('grdb_migrations', 'sqlite_sequence')")
            for t in tables {
                let cols = try String.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?)", arguments: [t]).joined(separator: ", ")
                try db.execute(sql: "INSERT INTO main.\(t) (\(cols)) SELECT \(cols) FROM new.\(t)")
            }
            try db.execute(sql: "DETACH DATABASE new")
        }
        try old.close()
        let info = try Snapshot.install(dir.path + "/old.sqlite", into: c)
        let held = try LogReader(store: a).tip(origin: a.replicaID).lastSeq
        #expect(info.anchors[a.replicaID]?.lastSeq == held)
        let pc = try ProjectedStore(store: c)
        #expect(try pc.projection.canonicalDump() == expected)
        try pc.close()

        // A newer build's snapshot (a migration this build never had) is refused, by name.
        let newer = try DatabaseQueue(path: dir.path + "/new.sqlite")
        try newer.write { try $0.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v9 from the future')") }
        try newer.close()
        #expect {
            try Snapshot.read(dir.path + "/new.sqlite")
        } throws: { String(describing: $0).contains("v9 from the future") }
    }

    /// Only `Snapshot` reads the kept snapshot: the log's writer never opens it, and the ids it
    /// hands over are read on a hardened connection, a malformed row being an error that names it.
    @Test func theKeptSnapshotIsReadOnlyBySnapshotAndMalformedIDsAreErrors() throws {
        let dir = ShippingTests.Dir()
        let a = try Store.create(at: dir.path + "/a"), c = try Store.create(at: dir.path + "/c")
        let pa = try ProjectedStore(store: a)
        _ = try pa.append([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("x"))], eventID: UUID())])
        try Snapshot.make(pa, to: dir.path + "/snap.sqlite")
        try pa.close()
        try Snapshot.install(dir.path + "/snap.sqlite", into: c)
        // The ids are lost (a derived file), and the kept snapshot now holds a malformed id.
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: c.path + "/eventids.sqlite" + suffix) }
        let kept = try DatabaseQueue(path: Snapshot.keptPath(of: c))
        try kept.write { try $0.execute(sql: "UPDATE snapshot_event_ids SET id = x'0102'") }
        try kept.close()
        let plain = try LogAppender(store: c)  // EventLog alone: reports, never opens the file
        #expect(plain.eventIDsMissingBeforeFloor[a.replicaID] == Seq(1))
        try plain.close()
        #expect { try LogAppender.opening(c) } throws: { "\($0)".contains("snapshot_event_ids row 1 of origin \(a.replicaID) is malformed") }
    }
}

@Suite(.serialized) struct BootstrapTests {
    func mutations(_ n: Int, seed: UInt64) -> [Mutation] { ShippingTests().mutations(n, seed: seed) }

    func dump(_ store: Store) throws -> [String] {
        let p = try Projection(store: store)
        defer { try? p.close() }
        try p.catchUp()
        return try p.canonicalDump()
    }

    /// A replica bootstrapped from a snapshot holds logs that start after it; a client whose
    /// cursor such a replica cannot serve gets "cursor expired", bootstraps from the replica's
    /// snapshot, and from then on syncs by cursor, in both directions.
    @Test func cursorExpiryThenSnapshotBootstrapThenIncrementalSync() async throws {
        let dir = ShippingTests.Dir()
        let s = try Store.create(at: dir.path + "/s"), other = try Store.create(at: dir.path + "/other")
        let m = try Store.create(at: dir.path + "/m"), c = try Store.create(at: dir.path + "/c")
        let ps = try ProjectedStore(store: s)
        _ = try ps.append(mutations(400, seed: 1))
        let po = try ProjectedStore(store: other)
        _ = try po.append(mutations(150, seed: 2))
        try po.close()
        _ = try StoreSync.pull(from: other, into: ps.appender)
        _ = try Snapshot.make(ps, to: dir.path + "/s.snapshot")
        try ps.close()

        // M starts from S's snapshot: its logs of both origins start after the anchors.
        try Snapshot.install(dir.path + "/s.snapshot", into: m)
        #expect(try m.cursor() == (try s.cursor()))
        #expect(try dump(m) == (try dump(s)))
        #expect(try LogReader(store: m).floor(origin: s.replicaID)?.lastSeq == Seq(400))
        #expect(try Verifier(store: m).run().isClean)

        // C has edits of its own and an empty cursor for S's origins.
        let pc = try ProjectedStore(store: c)
        _ = try pc.append(mutations(60, seed: 3))
        try pc.close()
        try await withServer(m) { url in
            let t = try HTTPTransport(url: url, replica: c.replicaID)
            do {
                // Without bootstrapping, the answer is "cursor expired".
                await #expect { _ = try await Replication.pull(from: t, store: c, bootstrap: false) } throws: {
                    guard let f = $0 as? TransferFailure else { return false }
                    return f.code == .cursorExpired && f.status == 410 && f.message.contains("starts after seq")
                }
                let first = try await Replication.pull(from: t, store: c)
                #expect(first.bootstrapped)
                let cursorC = try c.cursor()
                #expect(cursorC[s.replicaID] == Seq(400) && cursorC[other.replicaID] == Seq(150) && cursorC[c.replicaID] == Seq(60))
                // S edits more and ships it to M; C then gets just that, by cursor, linked to the anchors.
                let ps2 = try ProjectedStore(store: s)
                _ = try ps2.append(mutations(70, seed: 4))
                try ps2.close()
                let toM = try await Replication.push(from: s, to: t)
                #expect(toM.events == 70)
                let second = try await Replication.pull(from: t, store: c)
                #expect(!second.bootstrapped && second.events == 70)
                // And C's own edits go to M.
                let up = try await Replication.push(from: c, to: t)
                #expect(up.events == 60)
            } catch {
                await t.shutdown()
                throw error
            }
            await t.shutdown()
        }
        // S takes C's edits through M (the path transport), and all three agree.
        let back = try ProjectedStore(store: s)
        _ = try await Replication.pull(from: StoreTransport(store: m), into: back)
        try back.close()
        #expect(try s.cursor() == (try m.cursor()) && (try m.cursor()) == (try c.cursor()))
        let dumps = try [s, m, c].map { try dump($0) }
        #expect(dumps[0] == dumps[1] && dumps[1] == dumps[2])
        for store in [m, c] {
            #expect(try Verifier(store: store).run().isClean)
            // A rebuild starts from the kept snapshot and equals the live projection.
            let p = try Projection(store: store)
            #expect(try p.verifyDeep() == nil)
            try p.close()
        }
        _ = try Projection.rebuild(store: c)
        #expect(try dump(c) == dumps[0])
    }

    @Test func bootstrapRefusesAStoreHoldingPartOfACoveredLog() throws {
        let dir = ShippingTests.Dir()
        let s = try Store.create(at: dir.path + "/s"), c = try Store.create(at: dir.path + "/c")
        let ps = try ProjectedStore(store: s)
        _ = try ps.append(mutations(10, seed: 1))
        try ps.close()
        let pc = try ProjectedStore(store: c)
        _ = try StoreSync.pull(from: s, into: pc.appender)
        try pc.close()
        let ps2 = try ProjectedStore(store: s)
        _ = try ps2.append(mutations(10, seed: 2))
        _ = try Snapshot.make(ps2, to: dir.path + "/snap")
        try ps2.close()
        let before = try c.cursor()
        #expect { try Snapshot.install(dir.path + "/snap", into: c) } throws: { String(describing: $0).contains("holds origin \(s.replicaID) through seq 10") }
        #expect(try c.cursor() == before)
    }
}

@Suite struct CompactionTests {
    @Test func compactionDropsWhatPeersHoldAndLaggardsBootstrap() async throws {
        let dir = ShippingTests.Dir()
        let a = try Store.create(at: dir.path + "/a"), b = try Store.create(at: dir.path + "/b"), c = try Store.create(at: dir.path + "/c")
        #expect(throws: (any Error).self) { try Compactor.run(store: a) }  // no peers known
        var small = AppendOptions()
        small.segmentBytesMax = 4096
        let pa = try ProjectedStore(store: a, options: small)
        for k in 0..<12 { _ = try pa.append(ShippingTests().mutations(40, seed: UInt64(k))) }
        try pa.close()
        // B holds everything so far, and A knows it.
        let pb = try ProjectedStore(store: b)
        _ = try StoreSync.pull(from: a, into: pb.appender)
        try pb.close()
        try PeerState(store: a).recordSuccess("b", cursor: try b.cursor(), pulled: 0, pushed: 0)
        let held = try b.cursor()[a.replicaID]
        let pa2 = try ProjectedStore(store: a, options: small)
        for k in 12..<16 { _ = try pa2.append(ShippingTests().mutations(40, seed: UInt64(k))) }
        try pa2.close()
        let before = try a.cursor()
        let liveBefore = try Projection(store: a).canonicalDump()

        let report = try Compactor.run(store: a)
        let floor = try #require(report.origins[a.replicaID]?.floor)
        #expect(report.segments > 3 && floor.lastSeq <= held && floor.lastSeq.rawValue > 0)
        #expect(try a.cursor() == before)
        #expect(try Verifier(store: a).run().isClean)
        let p = try Projection(store: a)
        #expect(try p.canonicalDump() == liveBefore)
        #expect(try p.verifyDeep() == nil)  // rebuilt from the kept snapshot plus the log after it
        try p.close()

        // B, which holds past the floor, syncs by cursor; C, which holds nothing, bootstraps.
        let r = try await Replication.pull(from: StoreTransport(store: a), store: b)
        #expect(!r.bootstrapped && r.events == 160)
        let rc = try await Replication.pull(from: StoreTransport(store: a), store: c)
        #expect(rc.bootstrapped)
        #expect(try c.cursor() == before)
        let dumps = try [a, b, c].map { s -> [String] in
            let q = try Projection(store: s)
            defer { try? q.close() }
            return try q.canonicalDump()
        }
        #expect(dumps[0] == dumps[1] && dumps[1] == dumps[2])
        // A appends on after compaction, and everything still verifies.
        let pa3 = try ProjectedStore(store: a, options: small)
        _ = try pa3.append(ShippingTests().mutations(40, seed: 99))
        try pa3.close()
        #expect(try Verifier(store: a).run().isClean)
        _ = try Projection.rebuild(store: a)
        #expect(try Verifier(store: c).run().isClean)
    }
}
