import EventLog
@testable import LogbookServer
import Foundation
import GRDB
import Projections
import TestSupport
import Testing
@testable import Replicator

/// A peer that wants to run code in the receiver, crash it or make it lose data: crafted
/// snapshots, cursors and pages. Each drill failed (or trapped) before the fix it names.
@Suite(.serialized) struct HostilePeerTests {
    typealias Dir = ShippingTests.Dir

    /// A legitimate snapshot of a store with a few hundred events of another origin.
    func legitimateSnapshot(_ dir: Dir) throws -> String {
        let a = try Store.create(at: dir.path + "/author")
        let pa = try ProjectedStore(store: a)
        _ = try pa.append(ShippingTests().mutations(300, seed: 11))
        let path = dir.path + "/legit.sqlite"
        try Snapshot.make(pa, to: path)
        try pa.close()
        return path
    }

    /// A copy of `snapshot` changed by `sql`, run on an ordinary connection (as an attacker would).
    func crafted(_ snapshot: String, _ name: String, _ sql: String) throws -> String {
        let path = snapshot + "." + name
        try? FileManager.default.removeItem(atPath: path)
        try FileManager.default.copyItem(atPath: snapshot, toPath: path)
        let q = try DatabaseQueue(path: path)
        try q.writeWithoutTransaction { try $0.execute(sql: sql) }
        try q.close()
        return path
    }

    /// A receiver with its own events and a device-local setting, and a fingerprint of it.
    func receiver(_ dir: Dir) throws -> (Store, () throws -> [String]) {
        let r = try Store.create(at: dir.path + "/receiver")
        let pr = try ProjectedStore(store: r)
        _ = try pr.append(ShippingTests().mutations(50, seed: 12))
        try pr.projection.setSetting("theme", "dark")
        try pr.close()
        return (r, {
            let p = try Projection(store: r)
            defer { try? p.close() }
            let schema = try p.database.read { db in try String.fetchAll(db, sql: "SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_master ORDER BY 1") }
            return try p.canonicalDump() + schema + [try p.setting("theme") ?? "-", "\(try r.cursor())",
                                                     "\(FileManager.default.fileExists(atPath: Snapshot.keptPath(of: r)))"]
        })
    }

    @Test func aSnapshotThatCarriesSQLOrTriggersIsRefusedAndTheStoreIsUnchanged() throws {
        let dir = Dir()
        let legit = try legitimateSnapshot(dir)
        let (store, fingerprint) = try receiver(dir)
        let before = try fingerprint()
        let attacks: [(String, String, String)] = [
            // SQL hidden in an index name: the old install built statements from these names unquoted.
            ("index", #"CREATE INDEX "x ON items(id); DELETE FROM items; --" ON items(title)"#, "index"),
            ("trigger", "CREATE TRIGGER wipe AFTER INSERT ON items BEGIN DELETE FROM tags; END", "trigger wipe"),
            ("view", "CREATE VIEW v AS SELECT * FROM items", "view v"),
            ("table", "CREATE TABLE extra (x)", "table extra"),
            ("changed-sql", "DROP INDEX items_parent; CREATE INDEX items_parent ON items(title)", "index items_parent"),
            ("dropped", "DROP TABLE tags", "table tags"),
            ("bad-type", "UPDATE items SET version = 'many' WHERE rowid = 1", "column version"),
            ("bad-clock-type", "UPDATE items SET _clocks = 7 WHERE rowid = 2", "column _clocks"),
            ("bad-cursor", "UPDATE projection_cursor SET last_seq = 'x'", "column last_seq"),
            ("bad-anchor", "UPDATE snapshot_anchors SET last_seq = -5", "snapshot_anchors row 1 is malformed"),
            ("bad-event-id", "UPDATE snapshot_meta SET value = 'not a uuid' WHERE key = 'replica_id'", "replica_id"),
            // Rows claiming more of the log than the anchors: the events between would be skipped.
            ("cursor-past-anchor", "UPDATE projection_cursor SET last_seq = last_seq + 50", "its rows cover origin"),
            ("anchor-past-cursor", "UPDATE snapshot_anchors SET last_seq = last_seq + 50", "its rows cover origin"),
        ]
        for (name, sql, expected) in attacks {
            let path = try crafted(legit, name, sql)
            #expect(throws: (any Error).self, "\(name) was installed") { try Snapshot.install(path, into: store) }
            do { try Snapshot.install(path, into: store) } catch {
                #expect(String(describing: error).contains(expected), "\(name): \(error)")
            }
            #expect(try fingerprint() == before, "\(name) changed the store")
        }
    }

    @Test func aLegitimateSnapshotStillBootstrapsWithOnlyThisBuildsSchema() throws {
        let dir = Dir()
        let legit = try legitimateSnapshot(dir)
        let fresh = try Store.create(at: dir.path + "/fresh")
        let reference = try Projection(store: fresh)
        let schema = try reference.database.read { db in try String.fetchAll(db, sql: "SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_master ORDER BY 1") }
        try reference.close()
        let (store, _) = try receiver(dir)
        let info = try Snapshot.install(legit, into: store)
        #expect(info.anchors.values.first?.lastSeq == Seq(300))
        let p = try Projection(store: store)
        defer { try? p.close() }
        #expect(try p.database.read { db in try String.fetchAll(db, sql: "SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_master ORDER BY 1") } == schema)
        #expect(try p.setting("theme") == "dark")
        #expect(try p.items(limit: 1000).count > 0)
        // The search index was rebuilt by this build's triggers from the rows copied in.
        let some = try #require(try p.items(limit: 1).first?.title)
        #expect(try p.items(search: String(some.split(separator: " ").first ?? ""), limit: 10).count > 0)
    }

    @Test func snapshotSizeIsBoundedByWhatItsCursorCanNeed() throws {
        #expect(Snapshot.bytesMax(events: 0) == Snapshot.baseBytesMax)
        #expect(Snapshot.bytesMax(events: 1000) == Snapshot.baseBytesMax + 1000 * Snapshot.bytesPerEventMax)
        #expect(Snapshot.bytesMax(events: .max) == Snapshot.absoluteBytesMax)  // saturates, never traps
        var check = SnapshotCheck(expectedLength: nil, sha256: String(repeating: "0", count: 64), bytesMax: 10)
        #expect(throws: TransferFailure.self) { try [UInt8](repeating: 1, count: 11).withUnsafeBytes { try check.add($0) } }
    }

    @Test func cursorTokensCannotNameSeqsPastTheLargest() async throws {
        let o = ReplicaID.random()
        // Tokens a hostile client could send: seq 2^64 - 1 (made by hand) and Seq.max + 1.
        func token(_ seqVarint: [UInt8]) -> String {
            var body = o.rawValue.bytes + seqVarint
            withUnsafeBytes(of: CRC32C.checksum(body).littleEndian) { body += $0 }
            return ReplicationCursor.tokenPrefix + Data(body).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        for bad in [[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01], [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01], [0x81, 0x00]] as [[UInt8]] {
            #expect(throws: CursorTokenError.self) { try ReplicationCursor(token: token(bad)) }
        }
        let largest = ReplicationCursor([o: Seq.max])
        #expect(try ReplicationCursor(token: largest.token) == largest)
        // The server answers 400 to such a cursor instead of dying on it, and serves Seq.max as "nothing past it".
        let dir = Dir()
        let s = try Store.create(at: dir.path + "/s")
        let endpoint = try ReplicaEndpoint(store: s, policy: .open)
        await #expect(throws: EndpointError.self) {
            _ = try await endpoint.page(principal: AccessPolicy.open.principals[0], since: token([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]), maxBytes: nil, maxFrames: nil, peer: nil)
        }
        let (page, _) = try await endpoint.page(principal: AccessPolicy.open.principals[0], since: largest.token, maxBytes: nil, maxFrames: nil, peer: nil)
        #expect(page.frames == 0)
    }

    @Test func aPeersCursorIsOnlyWhatItAcknowledged() throws {
        let dir = Dir()
        let s = try Store.create(at: dir.path + "/s")
        let state = try PeerState(store: s)
        let theirs = ReplicationCursor([ReplicaID.random(): Seq(5)])
        try state.recordSuccess("peer", cursor: theirs, pulled: 1, pushed: 0)
        try state.recordSuccess("peer", cursor: nil, pulled: 0, pushed: 0)  // said nothing of what it holds
        #expect(try state.peers().first?.cursor == theirs)
    }

    /// Origins a peer refused (the rest went through) stay its last error over exchanges that
    /// push nothing, until a push goes through whole; a failure's error does not.
    @Test func aRefusalNoteOutlivesPullsNotAWholePush() throws {
        let dir = Dir()
        let state = try PeerState(store: try Store.create(at: dir.path + "/s"))
        func last() throws -> String? { try state.peers().first?.lastError }
        let note = PeerState.refusalPrefix + "origin x not pushed: 403"
        try state.recordSuccess("peer", cursor: nil, pulled: 0, pushed: 1, error: note)
        try state.recordSuccess("peer", cursor: nil, pulled: 2, pushed: 0, keepRefusal: true)  // a pull
        #expect(try last() == note)
        try state.recordSuccess("peer", cursor: nil, pulled: 0, pushed: 1)  // a push that went through whole
        #expect(try last() == nil)
        try state.recordFailure("peer", error: "network down")
        try state.recordSuccess("peer", cursor: nil, pulled: 1, pushed: 0, keepRefusal: true)
        #expect(try last() == nil, "a pull that went through clears a failure")
    }

    /// A store whose own log is two appends (seqs 1–3 and 4–7), projected.
    func storeWithTwoAppends(_ dir: Dir) throws -> Store {
        let s = try Store.create(at: dir.path + "/s")
        let p = try ProjectedStore(store: s)
        _ = try p.append(ShippingTests().mutations(3, seed: 1))
        _ = try p.append(ShippingTests().mutations(4, seed: 2))
        try p.close()
        return s
    }

    /// Frames are shipped only once they are on disk: a reader stops at the writer's durable mark.
    @Test func framesShipOnlyOnceDurable() throws {
        let dir = Dir()
        let s = try storeWithTwoAppends(dir)
        #expect(try FramePage.collect(from: s, since: .empty, limits: PageLimits()).frames.count == 2)
        // The mark as a writer leaves it between writing a frame and its fsync: seq 3.
        var mark: [UInt8] = []
        withUnsafeBytes(of: UInt64(3).littleEndian) { mark += $0 }
        withUnsafeBytes(of: (UInt64(3) ^ 0x4C42_4455_5241_424C).littleEndian) { mark += $0 }
        try Data(mark).write(to: URL(fileURLWithPath: s.path + "/log/\(s.replicaID)/DURABLE"))
        let page = try FramePage.collect(from: s, since: .empty, limits: PageLimits())
        #expect(page.frames.count == 1 && page.next[s.replicaID] == Seq(3))
        #expect(try FrameBundle.export(store: s, to: dir.path + "/b").frames == 1)
    }

    /// The projection is evidence too: it applied events the log no longer holds.
    @Test func aProjectionAheadOfTheOwnLogRefusesAppends() throws {
        let dir = Dir()
        let s = try storeWithTwoAppends(dir)
        // The second append's frame is lost, and so are the mark and the event-id index.
        let segDir = s.path + "/log/\(s.replicaID)"
        let seg = segDir + "/" + (try FileManager.default.contentsOfDirectory(atPath: segDir).first { $0.hasSuffix(".seg") }!)
        var frameStarts: [Int] = []
        try LogReader(store: s).forEachFrame(origin: s.replicaID) { h, _ in frameStarts.append(h.totalBytes); return true }
        let bytes = try Data(contentsOf: URL(fileURLWithPath: seg))
        try bytes.prefix(bytes.count - frameStarts[1] + 20).write(to: URL(fileURLWithPath: seg))
        for f in ["DURABLE"] { try? FileManager.default.removeItem(atPath: segDir + "/" + f) }
        for f in try FileManager.default.contentsOfDirectory(atPath: segDir) where f.hasSuffix(".idx") { try FileManager.default.removeItem(atPath: segDir + "/" + f) }
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: s.path + "/eventids.sqlite" + suffix) }
        let again = try ProjectedStore(store: s)
        defer { try? again.close() }
        #expect(again.appender.lostOwnTail?.evidence == "the projection has applied it")
        #expect(throws: LogError.self) { try again.append(ShippingTests().mutations(1, seed: 3)) }
    }

    /// Damaged projection rows (a disk, or a crafted store on a shared path) are errors that
    /// name the problem, never a trap.
    @Test func damagedProjectionRowsAreErrorsNotTraps() throws {
        let dir = Dir()
        let s = try Store.create(at: dir.path + "/s")
        let p = try ProjectedStore(store: s)
        let id = UUID()
        _ = try p.append([Mutation(entity: .item, op: .create, entityID: id, fields: [Field("title", .text("a"))])])
        try p.close()
        let q = try DatabaseQueue(path: Projection.path(for: s))
        try q.write { try $0.execute(sql: "UPDATE items SET _clocks = X'FFFFFFFF'") }
        try q.close()
        let again = try ProjectedStore(store: s)
        #expect(throws: (any Error).self) { try again.append([Mutation(entity: .item, op: .update, entityID: id, fields: [Field("title", .text("b"))])]) }
        try again.close()
        let q2 = try DatabaseQueue(path: Projection.path(for: s))
        try q2.write { try $0.execute(sql: "UPDATE projection_cursor SET last_seq = -4") }
        try q2.close()
        #expect(throws: (any Error).self) { try Projection(store: s).cursor() }
    }

    /// A peer that ignores the limits a page is asked with and sends the whole log at once,
    /// frames of one repeated byte, each holding 15 MB: a page of 1.2 MB that decodes to 300 MB.
    /// The puller takes of each page only what holds at most its bound uncompressed (and always
    /// the first frame), by the frames' headers before anything is decompressed, and asks again
    /// from where it stopped: the whole log arrives, in pages each within the bound.
    @Test func aPageOfFramesThatDecodeFarPastItsSizeIsTakenInParts() async throws {
        let dir = Dir()
        let writer = try Workload.framesThatDecodeFarPastTheirSize(at: dir.path + "/writer")
        /// Every frame past `since`, in one page, whatever was asked.
        final class Greedy: ReplicaTransport, @unchecked Sendable {
            let store: Store
            let lock = NSLock()
            var asked: [PageLimits] = []
            init(_ store: Store) { self.store = store }
            func cursor() async throws -> ReplicationCursor { try store.cursor() }
            func page(since: ReplicationCursor, limits: PageLimits) async throws -> (FramePage.Decoded, Int) {
                lock.withLock { asked.append(limits) }
                let p = try FramePage.collect(from: store, since: since, limits: PageLimits(maxBytes: 1 << 30, maxFrames: 1 << 16, maxRawBytes: .max))
                return (FramePage.Decoded(frames: p.frames, next: p.next, more: p.more, complete: true), p.encoded().count)
            }
            func push(_ page: FramePage) async throws -> (ReceiveResult, ReplicationCursor) { throw TransferFailure.permanent("no pushes") }
        }
        let peer = Greedy(writer)
        let whole = try await peer.page(since: .empty, limits: PageLimits()).0
        let raw = Workload.rawBytes(whole.frames)
        let bound = PageLimits.rawBytesMax + FrameHeader.payloadBytesMax
        #expect(raw > bound, "raw \(raw)")
        let firstTaken = PageLimits.framesWithin(whole.frames, rawBytesMax: bound)
        #expect(firstTaken < whole.frames.count && Workload.rawBytes(Array(whole.frames.prefix(firstTaken))) <= bound)
        let puller = try Store.create(at: dir.path + "/puller")
        let summary = try await Replication.pull(from: peer, store: puller, project: false)
        #expect(try puller.cursor()[writer.replicaID] == Seq(300))
        #expect(summary.pages >= 2 && summary.frames == whole.frames.count, "\(summary)")
        // A page of one frame is always taken, however much it holds.
        #expect(PageLimits.framesWithin(Array(whole.frames.prefix(1)), rawBytesMax: 1) == 1)
    }
}
