import EventLog
@testable import LogbookServer
import Foundation
import GRDB
import Projections
import Testing
@testable import Replicator

/// A store reached by path is a peer, not ours: pushing to it and pulling from it read and
/// append its frames and touch no other file of it. Before the fix, a push opened the peer's
/// projection for writing and caught it up (running what its `sqlite_master` said), and opened
/// its event-id index; a bootstrap opened its projection to make a snapshot.
@Suite(.serialized) struct PathPeerTests {
    typealias Dir = ShippingTests.Dir

    /// Every file of `store` but its logs, by name: its bytes, or what it is instead.
    func filesBesideTheLog(_ store: Store) throws -> [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: store.path) where name != "log" {
            out[name] = FileManager.default.contents(atPath: store.path + "/" + name).map { Array($0) } ?? Array("(not readable)".utf8)
        }
        return out
    }

    /// A new store at `dir/name` holding `mutations`, appended and projected, closed again.
    func store(_ dir: Dir, _ name: String, _ mutations: [Mutation]) throws -> Store {
        let s = try Store.create(at: dir.path + "/" + name)
        let p = try ProjectedStore(store: s)
        _ = try p.append(mutations)
        try p.close()
        return s
    }

    /// A projection file an attacker wrote: SQL in an index's name, a trigger, no migrations.
    func craftProjection(_ projection: String) throws {
        for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: projection + s) }
        let q = try DatabaseQueue(path: projection)
        try q.write { db in
            try db.execute(sql: "CREATE TABLE items (id TEXT, title TEXT)")
            try db.execute(sql: #"CREATE INDEX "x ON items(id); ATTACH DATABASE 'x' AS y; --" ON items(title)"#)
            try db.execute(sql: "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
            try db.execute(sql: "CREATE TRIGGER t AFTER INSERT ON items BEGIN DELETE FROM items; END")
        }
        try q.close()
    }

    @Test func pushAndPullByPathTouchNothingButThePeersLog() async throws {
        let dir = Dir()
        let mine = try store(dir, "mine", ShippingTests().mutations(120, seed: 31))
        let peer = try store(dir, "peer", ShippingTests().mutations(80, seed: 32))

        // The peer's SQLite files are replaced by what an attacker on the shared folder chose:
        // a projection whose schema holds SQL in an index's name and a trigger, and an event-id
        // index that is not a database at all. None of it may run or even be opened here.
        let projection = Projection.path(for: peer)
        try craftProjection(projection)
        try Data("not an SQLite database".utf8).write(to: URL(fileURLWithPath: peer.path + "/eventids.sqlite"))
        let untouched = try filesBesideTheLog(peer)

        let mineBefore = try Projection(store: mine).canonicalDump()
        let pushed = try StoreSync.ship(from: mine, toPeer: peer)
        #expect(pushed.events == 120)
        let pushedAgain = try await Replication.push(from: mine, to: StoreTransport(store: peer))
        #expect(pushedAgain.events == 0)
        let pulled = try await Replication.pull(from: StoreTransport(store: peer), store: mine)
        #expect(pulled.events == 80)
        #expect(try mine.cursor() == (try peer.cursor()))
        #expect(try filesBesideTheLog(peer) == untouched, "the peer's files beside its log are byte for byte as they were")
        #expect(try Verifier(store: peer).run().isClean)

        // Our own projection holds both logs and nothing the peer's files said.
        let p = try Projection(store: mine)
        #expect(try p.verifyDeep() == nil)
        #expect(try p.canonicalDump() != mineBefore)
        try p.close()

        // Its owner, opening it, rebuilds what it derives from the log: the event-id index from
        // scratch (the damaged one set aside by hand, as its hint says), and its projection.
        try FileManager.default.removeItem(atPath: peer.path + "/eventids.sqlite")
        for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: projection + s) }
        let owner = try ProjectedStore(store: peer)
        try owner.projection.catchUp()
        #expect(try owner.projection.canonicalDump() == (try Projection(store: mine).canonicalDump()))
        try owner.close()
    }

    /// A page is built without hashing its frames again (the receiver checks every link): a
    /// peer whose history was rewritten on the shared folder (a frame's link changed, its
    /// checksum made right again) is refused at that link, and nothing of the page is written.
    /// Where each frame of a segment file starts (past its 72-byte header), by the sizes in the
    /// frame headers.
    static func frameStarts(_ bytes: [UInt8]) -> [Int] {
        var offsets: [Int] = []
        var o = 72
        while o + 96 <= bytes.count {
            offsets.append(o)
            o += 96 + Int(bytes[o + 56]) | Int(bytes[o + 57]) << 8 | Int(bytes[o + 58]) << 16 | Int(bytes[o + 59]) << 24
        }
        return offsets
    }

    /// Recomputes the CRC of the frame at `frame` in a segment's bytes, as a forger would.
    static func fixCRC(_ bytes: inout [UInt8], frame: Range<Int>) {
        var crc = CRC32C()
        bytes.withUnsafeBytes { b in
            crc.update(UnsafeRawBufferPointer(rebasing: b[frame.lowerBound..<frame.lowerBound + 92]))
            crc.update(UnsafeRawBufferPointer(rebasing: b[frame.lowerBound + 96..<frame.upperBound]))
        }
        for i in 0..<4 { bytes[frame.lowerBound + 92 + i] = UInt8(truncatingIfNeeded: crc.final >> (8 * i)) }
    }

    @Test func aPeerWhoseHistoryWasRewrittenIsRefusedAtTheLink() async throws {
        let dir = Dir()
        let mine = try Store.create(at: dir.path + "/mine")
        let peer = try Store.create(at: dir.path + "/peer")
        let p = try ProjectedStore(store: peer)
        for k in 0..<3 { _ = try p.append(ShippingTests().mutations(5, seed: UInt64(40 + k))) }
        try p.close()
        let segment = peer.path + "/log/\(peer.replicaID)/00000000000000000001.seg"
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: segment)))
        let offsets = Self.frameStarts(bytes)
        #expect(offsets.count == 3)
        let f = offsets[1]
        bytes[f + 70] ^= 0x5A  // inside the second frame's link to the first
        Self.fixCRC(&bytes, frame: f..<offsets[2])
        try Data(bytes).write(to: URL(fileURLWithPath: segment))

        await #expect(throws: (any Error).self) {
            _ = try await Replication.pull(from: StoreTransport(store: peer), store: mine, retry: RetryPolicy(attempts: 1))
        }
        #expect(try mine.cursor()[peer.replicaID] == Seq(0), "nothing of the page was written")
        // The peer's own reader sees the broken link.
        #expect(throws: LogError.self) { _ = try LogReader(store: peer).events(origin: peer.replicaID) }
    }

    /// A peer's store whose frame was rewritten with every check recomputed (its CRC, the next
    /// frame's link and CRC): its own reader finds a consistent chain, but the signature of the
    /// author's key no longer verifies, so a pull by path refuses it and writes nothing.
    @Test func aPeerFrameRewrittenAndRelinkedIsRefusedBySignature() async throws {
        let dir = Dir()
        let mine = try Store.create(at: dir.path + "/mine")
        let peer = try Store.create(at: dir.path + "/peer")
        let p = try ProjectedStore(store: peer)
        for k in 0..<3 { _ = try p.append(ShippingTests().mutations(5, seed: UInt64(50 + k))) }
        try p.close()
        let segment = peer.path + "/log/\(peer.replicaID)/00000000000000000001.seg"
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: segment)))
        let offsets = Self.frameStarts(bytes) + [bytes.count]
        #expect(offsets.count == 4)
        func fixCRC(_ k: Int) { Self.fixCRC(&bytes, frame: offsets[k]..<offsets[k + 1]) }
        let frame2 = offsets[1]
        bytes[frame2 + 6] ^= 0x01  // `continues`: frames 2 and 3 made one append, which still decodes
        fixCRC(1)
        let hash = bytes.withUnsafeBytes { FrameHash.of(UnsafeRawBufferPointer(rebasing: $0[offsets[1]..<offsets[2]])) }
        bytes.replaceSubrange(offsets[2] + 60..<offsets[2] + 92, with: hash.bytes)
        fixCRC(2)
        try Data(bytes).write(to: URL(fileURLWithPath: segment))

        await #expect(throws: (any Error).self) {
            _ = try await Replication.pull(from: StoreTransport(store: peer), store: mine, retry: RetryPolicy(attempts: 1))
        }
        #expect(try mine.cursor()[peer.replicaID] == nil || mine.cursor()[peer.replicaID] == Seq(0), "nothing of the page was written")
        // Its own reader (links and CRCs) reads the rewritten log as consistent; the receiver does not.
        var frames: [[UInt8]] = []
        try LogReader(store: peer).forEachFrame(origin: peer.replicaID) { _, f in
            frames.append(Array(f))
            return true
        }
        #expect(frames.count == 3)
        do {
            _ = try LogAppender(store: mine).receive(frames)
            Issue.record("a rewritten frame was received")
        } catch let e as LogError {
            #expect(e.description.contains("frame 2 of 3") && e.description.contains("signature"), "\(e)")
        }
    }

    @Test func aPeersOwnIndexCatchesUpWhatWasReceivedByPath() throws {
        let dir = Dir()
        let mine = try Store.create(at: dir.path + "/mine")
        let peer = try Store.create(at: dir.path + "/peer")
        // An append with a writer-supplied id, received by the peer through a path push.
        let id = UUID()
        let pm = try ProjectedStore(store: mine)
        var m = ShippingTests().mutations(1, seed: 5)[0]
        m.eventID = id
        _ = try pm.append([m])
        try pm.close()
        let pp = try ProjectedStore(store: peer)
        _ = try pp.append(ShippingTests().mutations(3, seed: 6))
        try pp.close()
        _ = try StoreSync.ship(from: mine, toPeer: peer)
        // The peer's owner opens its store: its index learns the id from the log, so a retry of
        // that write there is recognised.
        let owner = try LogAppender.opening(peer)
        var retry = ShippingTests().mutations(1, seed: 7)[0]
        retry.eventID = id
        let r = try owner.append([retry])
        #expect(r.appended == 0 && r.duplicateCount == 1 && r.duplicates.first?.origin == mine.replicaID)
        try owner.close()
    }

    @Test func aPeerReceiverAppendsNothingOfItsOwn() throws {
        let dir = Dir()
        let peer = try Store.create(at: dir.path + "/peer")
        let a = try LogAppender.receivingForPeer(peer)
        #expect(throws: LogError.self) { try a.append(ShippingTests().mutations(1, seed: 1)) }
        try a.close()
        #expect(!FileManager.default.fileExists(atPath: peer.path + "/eventids.sqlite"))
        #expect(try peer.cursor()[peer.replicaID].rawValue == 0)
    }

    /// A bundle, a peer's store.json and its kept snapshot are read only when regular files: a
    /// FIFO given as one is refused at once instead of blocking (holding the writer lock).
    @Test func foreignFilesThatAreNotRegularAreRefusedWithoutBlocking() async throws {
        let dir = Dir()
        let store = try Store.create(at: dir.path + "/s")
        let fifo = dir.path + "/in.bundle"
        #expect(mkfifo(fifo, 0o644) == 0)
        do { _ = try StoreSync.importBundle(fifo, to: store); Issue.record("accepted") } catch {
            #expect("\(error)".contains("not a regular file (a FIFO)"), "\(error)")
        }
        let peer = try Store.create(at: dir.path + "/peer")
        try FileManager.default.removeItem(atPath: peer.path + "/store.json")
        #expect(mkfifo(peer.path + "/store.json", 0o644) == 0)
        #expect { _ = try Store.open(at: peer.path) } throws: { "\($0)".contains("not a regular file") }
        #expect(mkfifo(dir.path + "/snapshot.sqlite", 0o644) == 0)
        #expect { try ForeignFile.copy(dir.path + "/snapshot.sqlite", to: dir.path + "/copy", bytesMax: 1 << 20, op: "test") } throws: { "\($0)".contains("a FIFO") }
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/copy"))
        // Over the bound: refused, naming the size.
        try Data(count: 4096).write(to: URL(fileURLWithPath: dir.path + "/big"))
        #expect { _ = try ForeignFile.read(dir.path + "/big", bytesMax: 1024, op: "test") } throws: { "\($0)".contains("4096 bytes, more than the 1024") }
    }

    /// A peer's files are hostile too: its LOCK as a symbolic link to a file of ours (a push
    /// wrote the holder's pid over that file's first bytes), a FIFO in place of a segment (a pull
    /// hung, holding this store's writer lock). Each is refused; nothing of ours changes.
    @Test func aPeersLinksAndFIFOsAreRefused() async throws {
        let dir = Dir()
        let mine = try store(dir, "mine", ShippingTests().mutations(20, seed: 41))
        let victim = dir.path + "/victim.txt"
        try Data("precious".utf8).write(to: URL(fileURLWithPath: victim))
        let peer = try Store.create(at: dir.path + "/peer")
        try? FileManager.default.removeItem(atPath: peer.path + "/LOCK")
        try FileManager.default.createSymbolicLink(atPath: peer.path + "/LOCK", withDestinationPath: victim)
        #expect { _ = try StoreSync.ship(from: mine, toPeer: peer) } throws: { "\($0)".contains("symbolic link") }
        #expect(try Data(contentsOf: URL(fileURLWithPath: victim)) == Data("precious".utf8))
        #expect(try peer.cursor()[mine.replicaID].rawValue == 0)

        let other = try store(dir, "other", ShippingTests().mutations(5, seed: 42))
        let logDir = other.path + "/log/" + other.replicaID.description
        let seg = try #require(try FileManager.default.contentsOfDirectory(atPath: logDir).first { $0.hasSuffix(".seg") })
        let segPath = logDir + "/" + seg
        try FileManager.default.removeItem(atPath: segPath)
        #expect(mkfifo(segPath, 0o644) == 0)
        let before = try mine.cursor()
        await #expect(throws: (any Error).self) { _ = try await Replication.pull(from: StoreTransport(store: other), store: mine) }
        #expect(try mine.cursor() == before)
    }
}

/// A replica outside a share is offered its logs once: later sessions start from what it
/// declined (`shares/DECLINED`), so the peer sends none of them again; once added to the share,
/// it is sent them from their start.
@Suite struct DeclinedShareLogsTests {
    /// Counts the frames a peer's pages carry.
    final class Counting: ReplicaTransport, @unchecked Sendable {
        let inner: StoreTransport
        private let lock = NSLock()
        private var counted = 0, countedSealed = 0
        init(_ store: Store) { inner = StoreTransport(store: store) }
        var frames: Int { lock.withLock { counted } }
        var sealedFrames: Int { lock.withLock { countedSealed } }
        func cursor() async throws -> ReplicationCursor { try await inner.cursor() }
        func page(since: ReplicationCursor, limits: PageLimits) async throws -> (FramePage.Decoded, Int) {
            let p = try await inner.page(since: since, limits: limits)
            lock.withLock {
                counted += p.0.frames.count
                countedSealed += p.0.frames.filter { FrameHeader(parsing: $0)?.sealed == true }.count
            }
            return p
        }
        func push(_ page: FramePage) async throws -> (ReceiveResult, ReplicationCursor) { try await inner.push(page) }
        func snapshot(to path: String) async throws { try await inner.snapshot(to: path) }
    }

    @Test func aReplicaOutsideAShareIsSentItsLogsOnce() async throws {
        let dir = ShippingTests.Dir()
        let aliceKey = ReplicaKey.generate(), carolKey = ReplicaKey.generate()
        let alice = try Store.create(at: dir.path + "/alice", signingKey: aliceKey)
        let carol = try Store.create(at: dir.path + "/carol", signingKey: carolKey)
        let a = try LogAppender(store: alice)
        let share = try a.createShare(name: "not carol's")
        _ = try a.appendShared((0..<5).map { _ in Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("sealed"))]) }, to: share)
        _ = try a.append([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("alice's own"))])])
        try a.close()

        let first = Counting(alice)
        _ = try await Replication.pull(from: first, store: carol, lockWait: 5)
        #expect(first.frames >= 3)
        #expect(try carol.origins().filter { $0 != carol.replicaID } == [alice.replicaID])
        let declined = try String(contentsOfFile: carol.layout.shares + "/DECLINED", encoding: .utf8)
        #expect(declined.hasPrefix("declined\n") && declined.contains(share.description))

        let second = Counting(alice)
        _ = try await Replication.pull(from: second, store: carol, lockWait: 5)
        #expect(second.sealedFrames == 0, "the declined sealed log was sent again")
        #expect(second.frames <= 2, "only the membership log, which carries joins, is offered again")

        // Added to the share: the record adding carol arrives (the membership log was declined
        // only as far as it went), and the share's logs are sent from their start.
        let again = try LogAppender(store: alice)
        try again.addMember(carolKey.memberCard, to: share)
        try again.close()
        let third = Counting(alice)
        _ = try await Replication.pull(from: third, store: carol, lockWait: 5)
        #expect(try LogReader(store: carol).events(origin: ReplicaID.shareLog(share, signingKey: aliceKey.publicKey)).count == 5)
        let after = (try? String(contentsOfFile: carol.layout.shares + "/DECLINED", encoding: .utf8)) ?? ""
        #expect(!after.contains(share.description), "\(after)")

        // A replica that learns its keys from frames pushed into it by path (its owner reads
        // them at its next open) takes the share's logs at its next pull, declined before or not.
        let erin = try Store.create(at: dir.path + "/erin", signingKey: .generate())
        let erinKey = try #require(try erin.signingKey(op: "test"))
        _ = try await Replication.pull(from: StoreTransport(store: alice), store: erin, lockWait: 5)
        #expect(try String(contentsOfFile: erin.layout.shares + "/DECLINED", encoding: .utf8).contains(share.description))
        let third2 = try LogAppender(store: alice)
        try third2.addMember(erinKey.memberCard, to: share)
        try third2.close()
        _ = try await Replication.push(from: alice, to: StoreTransport(store: erin))
        _ = try await Replication.pull(from: StoreTransport(store: alice), store: erin, lockWait: 5)
        try LogAppender(store: erin).close()  // its owner's next open reads what was pushed into it
        #expect(try LogReader(store: erin).events(origin: ReplicaID.shareLog(share, signingKey: aliceKey.publicKey)).count == 5)
        #expect(try ShareDirectory.declinedOrPurgedLogs(erin).isEmpty, "a decline of a share erin holds keys of is still in force")

        // Keys learnt from a membership log that arrived alone (a path push of it, without the
        // sealed logs): the remembered decline of the sealed log no longer counts, and the next
        // pull brings it from its start.
        let frank = try Store.create(at: dir.path + "/frank", signingKey: .generate())
        let frankKey = try #require(try frank.signingKey(op: "test"))
        _ = try await Replication.pull(from: StoreTransport(store: alice), store: frank, lockWait: 5)
        let sealedLog = ReplicaID.shareLog(share, signingKey: aliceKey.publicKey)
        #expect(try String(contentsOfFile: frank.layout.shares + "/DECLINED", encoding: .utf8).contains(sealedLog.description))
        let adding = try LogAppender(store: alice)
        try adding.addMember(frankKey.memberCard, to: share)
        try adding.close()
        let membersLog = ReplicaID.shareMembers(share, signingKey: aliceKey.publicKey)
        var allButMembers = try alice.cursor()
        allButMembers = ReplicationCursor(Dictionary(uniqueKeysWithValues: allButMembers.origins.filter { $0 != membersLog }.map { ($0, allButMembers[$0]) }))
        let onlyMembers = try FramePage.collect(from: alice, since: allButMembers, limits: PageLimits())
        #expect(!onlyMembers.frames.isEmpty && onlyMembers.frames.allSatisfy { FrameHeader(parsing: $0)?.origin == membersLog })
        _ = try await StoreTransport(store: frank).push(onlyMembers)
        _ = try await Replication.pull(from: StoreTransport(store: alice), store: frank, lockWait: 5)
        #expect(try LogReader(store: frank).events(origin: sealedLog).count == 5, "a decline stranded a member's share log")

        // A writer open for many sessions forgets its declines of membership logs at each new
        // session (a forged frame can hold back a join for one session at most); sealed logs' stay.
        let gina = try Store.create(at: dir.path + "/gina", signingKey: .generate())
        let g = try LogAppender(store: gina)
        _ = try g.receive(FramePage.collect(from: alice, since: .empty, limits: PageLimits()).frames)
        #expect(g.declinedShareLogs[membersLog] != nil && g.declinedShareLogs[sealedLog] != nil)
        g.beginReceivingSession()
        #expect(g.declinedShareLogs[membersLog] == nil && g.declinedShareLogs[sealedLog] != nil)
        try g.close()

        // Made a relay, a store asks again for everything it declined.
        let dana = try Store.create(at: dir.path + "/dana", signingKey: .generate())
        _ = try await Replication.pull(from: StoreTransport(store: alice), store: dana, lockWait: 5)
        #expect(FileManager.default.fileExists(atPath: dana.layout.shares + "/DECLINED"))
        try ShareDirectory.setRelay(dana, true)
        #expect(!FileManager.default.fileExists(atPath: dana.layout.shares + "/DECLINED"))
        _ = try await Replication.pull(from: StoreTransport(store: alice), store: dana, lockWait: 5)
        #expect(try dana.origins().contains(ReplicaID.shareLog(share, signingKey: aliceKey.publicKey)))  // as ciphertext
    }

    /// A push of a purged share's sealed logs into a store that purged it is answered with a
    /// cursor past them: the pusher moves on page after page (before, each page of them came back
    /// "taken nothing", and the third ended the push before any later log was sent).
    @Test func aPushIntoAPurgedStoreMovesPastThePurgedLogs() async throws {
        let dir = ShippingTests.Dir()
        let aliceKey = ReplicaKey.generate()
        let alice = try Store.create(at: dir.path + "/alice", signingKey: aliceKey)
        let relay = try Store.create(at: dir.path + "/relay", signingKey: .generate())
        try ShareDirectory.setRelay(relay, true)
        let a = try LogAppender(store: alice)
        let share = try a.createShare(name: "gone")
        for _ in 0..<6 { _ = try a.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("x"))])], to: share) }
        try a.deleteShare(share)
        try a.close()
        _ = try await Replication.pull(from: StoreTransport(store: alice), store: relay, lockWait: 5)
        let sealed = ReplicaID.shareLog(share, signingKey: aliceKey.publicKey)
        #expect(try relay.origins().contains(sealed))
        let r = try LogAppender(store: relay)
        let purged = try r.purgeShare(share)
        try r.close()
        #expect(purged.logs == [sealed: Seq(6)])
        #expect(!(try relay.origins().contains(sealed)))

        // Alice's private log sorts after the sealed one or not: either way it arrives.
        let b = try LogAppender(store: alice)
        _ = try b.append([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("private"))])])
        try b.close()
        let pushed = try await Replication.push(from: alice, to: StoreTransport(store: relay), limits: PageLimits(maxBytes: 1 << 20, maxFrames: 1))
        #expect(pushed.events >= 1)
        #expect(!(try relay.origins().contains(sealed)))
        #expect(try relay.cursor()[alice.replicaID] == Seq(1))
    }
}
