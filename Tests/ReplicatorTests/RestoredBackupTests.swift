import Foundation
import Projections
import Testing
import TestSupport
@testable import EventLog
import LogbookServer
@testable import Replicator

// The time limits in this file catch a follower that never ends, not a slow one: on two cores
// an async test can wait minutes for a thread while synchronous tests hold them (a CI run of
// 2026-12-02 had three such tests, seconds long alone, take 250 s against a limit of one minute).

/// A store restored from a backup holds no trace of the tail of its own log it lost: its
/// durable mark, event-id index and projection are as old as its log. A peer that holds that
/// tail (the hub it synced with) gives it back, signed by the replica's own key; a store written
/// to after the restore has forked its own log, and is told so.
@Suite struct RestoredBackupTests {
    static func item(_ title: String) -> Mutation {
        Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text(title))])
    }

    static func append(_ store: Store, _ titles: [String]) throws {
        let p = try ProjectedStore.open(store: store, waitingUpTo: 5)
        _ = try p.append(titles.map(item))
        try p.close()
    }

    static func titles(_ store: Store) throws -> [String] {
        let p = try Projection(store: store)
        defer { try? p.close() }
        return try p.items(limit: 100).compactMap(\.title).sorted()
    }

    static func frames(_ store: Store, of origin: ReplicaID) throws -> [[UInt8]] {
        var out: [[UInt8]] = []
        try LogReader(store: store).forEachFrame(origin: origin) { _, b in out.append(Array(b)); return true }
        return out
    }

    /// A replica that writes, is backed up, writes and pushes to the hub, and is then restored
    /// from the backup: the hub holds its own log past the restored store's end, and another
    /// replica's event.
    static func restoredReplica(_ dir: TempDir) async throws -> (replica: Store, hub: Store) {
        let (a, hub, _) = try await restoredReplicaAndOther(dir)
        return (a, hub)
    }

    static func restoredReplicaAndOther(_ dir: TempDir) async throws -> (replica: Store, hub: Store, other: Store) {
        let a = try Store.create(at: dir.path + "/a"), hub = try Store.create(at: dir.path + "/hub")
        let other = try Store.create(at: dir.path + "/other")
        try append(a, ["kept"])
        try FileManager.default.copyItem(atPath: a.path, toPath: dir.path + "/backup")
        try append(a, ["lost", "lost too"])
        let pushed = try await Replication.push(from: a, to: StoreTransport(store: hub))
        #expect(pushed.events == 3 && pushed.peerHoldsOwnLogTo == nil)
        try append(other, ["another replica's"])
        _ = try await Replication.push(from: other, to: StoreTransport(store: hub))
        try FileManager.default.removeItem(atPath: a.path)
        try FileManager.default.copyItem(atPath: dir.path + "/backup", toPath: a.path)
        let restored = try Store.open(at: a.path)
        #expect(try restored.cursor()[restored.replicaID] == Seq(1))
        return (restored, hub, other)
    }

    /// Synced before it writes: the pull takes its own tail back (before, the page was refused
    /// whole, so the replica could pull nothing from that hub, and its next append took seqs the
    /// hub held with other events: a fork no push could mend). Appends go on after it, and the
    /// hub and the replica hold the same log, byte for byte.
    @Test func aReplicaRestoredFromABackupTakesItsOwnTailBackFromTheHub() async throws {
        let dir = TempDir()
        let (a, hub) = try await Self.restoredReplica(dir)
        // A push alone says how far the hub holds this store's own log (it sends nothing).
        let told = try await Replication.push(from: a, to: StoreTransport(store: hub))
        #expect(told.events == 0 && told.peerHoldsOwnLogTo == Seq(3))
        let pulled = try await Replication.pull(from: StoreTransport(store: hub), store: a)
        #expect(pulled.events == 3 && pulled.ownLogRefused == nil)
        #expect(try a.cursor()[a.replicaID] == Seq(3))
        #expect(try Self.titles(a) == ["another replica's", "kept", "lost", "lost too"])
        try Self.append(a, ["new"])
        #expect(try a.cursor()[a.replicaID] == Seq(4))
        let pushed = try await Replication.push(from: a, to: StoreTransport(store: hub))
        #expect(pushed.events == 1 && pushed.peerHoldsOwnLogTo == nil)
        #expect(try Self.frames(hub, of: a.replicaID) == Self.frames(a, of: a.replicaID))
        #expect(try Self.titles(a) == ["another replica's", "kept", "lost", "lost too", "new"])
    }

    /// Written to after the restore, before any sync: the replica's own log has forked. The
    /// peer's frames of it are refused naming the fork (not a forgery, not damage), and nothing
    /// of them is written; the pull goes on without them and takes everything else (before, the
    /// page was refused whole, at every pull, for good).
    @Test func aReplicaWrittenToAfterARestoreIsToldItsOwnLogForkedAndPullsTheRest() async throws {
        let dir = TempDir()
        let (a, hub) = try await Self.restoredReplica(dir)
        try Self.append(a, ["written after the restore"])
        let before = try Self.frames(a, of: a.replicaID)
        let pulled = try await Replication.pull(from: StoreTransport(store: hub), store: a)
        let why = try #require(pulled.ownLogRefused)
        #expect(why.contains("this replica's own log has forked") && why.contains("restored from a backup"), "\(why)")
        #expect(pulled.events == 1)
        #expect(try Self.frames(a, of: a.replicaID) == before)
        #expect(try Self.titles(a) == ["another replica's", "kept", "written after the restore"])
        // Again: the same, nothing more.
        let again = try await Replication.pull(from: StoreTransport(store: hub), store: a)
        #expect(again.events == 0 && again.ownLogRefused != nil)
    }

    /// Written to after the restore as far as the hub holds its own log, or less far: no frame
    /// of the hub's follows the store's log, so asking past its tip would show nothing, and both
    /// would call themselves in sync while holding different events under the same seqs. A pull
    /// asks once for the hub's frame at the store's tip and compares it: the fork is named.
    @Test(arguments: [2, 1]) func aForkAtOrBelowThePeersTipIsNamed(written: Int) async throws {
        let dir = TempDir()
        let (a, hub) = try await Self.restoredReplica(dir)
        try Self.append(a, (0..<written).map { "written after the restore \($0)" })
        let before = try Self.frames(a, of: a.replicaID)
        let pulled = try await Replication.pull(from: StoreTransport(store: hub), store: a)
        let why = try #require(pulled.ownLogRefused, "the fork went unseen")
        #expect(why.contains("this replica's own log has forked"), "\(why)")
        #expect(try Self.frames(a, of: a.replicaID) == before)
        #expect(pulled.alreadyHeld == 0)
    }

    /// A store whose own log the peer holds as it is: the frame asked for to compare is not
    /// counted as a frame the peer sent again, and nothing is refused.
    @Test func aPullOfAStoreInStepComparesItsTipSilently() async throws {
        let dir = TempDir()
        let (a, hub) = try await Self.restoredReplica(dir)
        _ = try await Replication.pull(from: StoreTransport(store: hub), store: a)
        let again = try await Replication.pull(from: StoreTransport(store: hub), store: a)
        #expect(again.ownLogRefused == nil && again.events == 0 && again.alreadyHeld == 0)
    }

    /// A live sync of a replica forked exactly as far as the server holds its log: the first
    /// exchange compares the server's frame at the store's tip, and names the fork (before, the
    /// follower called itself in sync).
    @Test(.timeLimit(.minutes(10))) func aLiveSyncOfAReplicaForkedAsFarAsTheServerSaysSo() async throws {
        let dir = TempDir()
        let (a, hub) = try await Self.restoredReplica(dir)
        try Self.append(a, ["written after the restore", "and again"])
        try await withServer(hub) { url in
            let states = AsyncStream.makeStream(of: LiveSync.State.self)
            var live = LiveSync(store: a) { try HTTPTransport(url: url, replica: a.replicaID) }
            live.onState = { states.continuation.yield($0) }
            var told = states.stream.makeAsyncIterator()
            let follower = ServerThreads.task { try await live.run() }
            defer { follower.cancel() }
            let first = try #require(await told.next())
            guard case .partlyInSync(_, let refused) = first else { Issue.record("first state: \(first)"); return }
            #expect(refused[a.replicaID]?.contains("this replica's own log has forked") == true, "\(refused)")
            follower.cancel()
        }
    }

    /// A live sync of that replica does not call itself in sync: its state names the store's own
    /// origin with the fork, and it has pulled everything else (before, its first pull failed
    /// and the follower ended).
    /// It goes on following: its own appends since (past the server's tip, whose push the server
    /// would refuse for a broken link, which would end it) push nothing, and what other replicas
    /// push is pulled.
    @Test(.timeLimit(.minutes(10))) func aLiveSyncOfAForkedReplicaSaysSoAndPullsTheRest() async throws {
        let dir = TempDir()
        let (a, hub, other) = try await Self.restoredReplicaAndOther(dir)
        try Self.append(a, ["written after the restore"])
        try await withServer(hub) { url in
            let states = AsyncStream.makeStream(of: LiveSync.State.self)
            let exchanges = AsyncStream.makeStream(of: LiveSync.Exchange.self)
            var live = LiveSync(store: a) { try HTTPTransport(url: url, replica: a.replicaID) }
            live.onState = { states.continuation.yield($0) }
            live.onExchange = { exchanges.continuation.yield($0) }
            var told = states.stream.makeAsyncIterator()
            var moved = exchanges.stream.makeAsyncIterator()
            let follower = ServerThreads.task { try await live.run() }
            defer { follower.cancel() }
            let first = try #require(await told.next())
            guard case .partlyInSync(_, let refused) = first else { Issue.record("first state: \(first)"); return }
            #expect(Array(refused.keys) == [a.replicaID] && refused[a.replicaID]?.contains("this replica's own log has forked") == true, "\(refused)")
            #expect(try a.cursor().origins.count == 2, "the other replica's event was pulled")
            let firstExchange = try #require(await moved.next())
            #expect(firstExchange.pushed?.events == 0)
            // Past the server's tip (3): not pushed.
            try Self.append(a, ["after it", "and after that"])
            #expect(try a.cursor()[a.replicaID] == Seq(4))
            // Another replica's new event reaches the follower, which is still running.
            try Self.append(other, ["another one"])
            let t = try HTTPTransport(url: url, replica: other.replicaID)
            _ = try await Replication.push(from: other, to: t)
            await t.shutdown()
            while let e = await moved.next() {
                #expect(e.pushed?.events ?? 0 == 0, "the forked own log was pushed")
                if (e.pulled?.events ?? 0) > 0 { break }
            }
            #expect(try LogReader(store: a).tip(origin: other.replicaID).lastSeq == Seq(2))
            #expect(try LogReader(store: hub).tip(origin: a.replicaID).lastSeq == Seq(3))
            follower.cancel()
        }
    }
}
