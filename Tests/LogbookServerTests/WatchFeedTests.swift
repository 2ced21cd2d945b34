import Domain
import EventLog
@testable import LogbookServer
import Foundation
import Projections
import TestSupport
import Testing
@testable import Replicator

// The time limits in this file catch a watch that never ends, not a slow one (ScopeTests says
// why they are minutes long).

/// The hub's watch streams (`WatchFeed`): what each principal's stream shows, and that a move is
/// looked at once, not once per watcher.
@Suite(.serialized) struct WatchFeedTests {
    typealias Dir = TempDir

    static let policy = try! AccessPolicy(json: Data("""
        {"principals":[
          {"name":"alice","token":"alice-token-0123456789a","user":"alice","push":"*","pull":true},
          {"name":"bob","token":"bob-token-0123456789abc","user":"bob","push":"*","pull":true},
          {"name":"admin","token":"admin-token-0123456789a","push":"*","pull":true}
        ]}
        """.utf8))

    static func principal(_ token: String) throws -> AccessPolicy.Principal {
        try #require(try? policy.authenticate(authorization: "Bearer \(token)").get())
    }

    /// `store`'s frames past what `hub` holds of its origin, pushed to `endpoint` as `principal`.
    static func push(_ store: Store, to endpoint: ReplicaEndpoint, hub: Store, as principal: AccessPolicy.Principal) async throws {
        let held = ReplicationCursor([store.replicaID: try hub.cursor()[store.replicaID]])
        let page = try FramePage.collect(from: store, since: held, limits: PageLimits())
        _ = try await endpoint.push(principal: principal, body: FramePage(frames: page.frames, next: .empty, more: false).encoded(), peer: nil)
    }

    /// A scoped watch shows its user's origins and moves only; another user's pushes send it
    /// nothing, and an unscoped principal's watch shows every origin.
    @Test(.timeLimit(.minutes(10))) func eachWatchShowsWhatItsPrincipalMayReadAndNothingElse() async throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let alice = try Store.create(at: dir.path + "/alice"), bob = try Store.create(at: dir.path + "/bob")
        let endpoint = try ReplicaEndpoint(store: hub, policy: Self.policy)
        defer { endpoint.stopWatching() }
        let (pa, pb, admin) = (try Self.principal("alice-token-0123456789a"), try Self.principal("bob-token-0123456789abc"),
                               try Self.principal("admin-token-0123456789a"))
        var a = try await endpoint.watch(principal: pa).makeAsyncIterator()
        var b = try await endpoint.watch(principal: pb).makeAsyncIterator()
        var all = try await endpoint.watch(principal: admin).makeAsyncIterator()
        #expect(await a.next() == .empty)
        #expect(await b.next() == .empty)
        #expect(await all.next() == .empty)

        try Workload.edit(alice, 2, seed: 1, actor: "alice")
        try await Self.push(alice, to: endpoint, hub: hub, as: pa)
        #expect(await a.next() == ReplicationCursor([alice.replicaID: Seq(2)]))
        // bob's own origin moves next; alice's stream hears nothing of it: its next cursor is
        // her own next move.
        try Workload.edit(bob, 3, seed: 2, actor: "bob")
        try await Self.push(bob, to: endpoint, hub: hub, as: pb)
        #expect(await b.next() == ReplicationCursor([bob.replicaID: Seq(3)]))
        try Workload.edit(alice, 1, seed: 3, actor: "alice")
        try await Self.push(alice, to: endpoint, hub: hub, as: pa)
        #expect(await a.next() == ReplicationCursor([alice.replicaID: Seq(3)]))
        // The unscoped watch holds only the newest cursor: it reaches both origins.
        let both = ReplicationCursor([alice.replicaID: Seq(3), bob.replicaID: Seq(3)])
        var seen = try #require(await all.next())
        while seen != both {
            #expect(both.includes(seen))
            seen = try #require(await all.next())
        }
    }

    /// A watch shows the log's end, never a durable mark past it: a store whose own log was
    /// restored alone keeps its mark as evidence of the frames it lost (docs/FORMAT.md, "Durable
    /// mark"), and a client told of those seqs would wait for frames no page can send. The watch
    /// and the cursor agree.
    @Test(.timeLimit(.minutes(10))) func aWatchShowsTheLogsEndNotAMarkPastIt() async throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        try Workload.edit(hub, 3, seed: 1)
        #expect(try hub.cursor()[hub.replicaID] == Seq(3))
        // The mark as a backup of a later state leaves it: seq 7.
        var mark: [UInt8] = []
        withUnsafeBytes(of: UInt64(7).littleEndian) { mark += $0 }
        withUnsafeBytes(of: (UInt64(7) ^ 0x4C42_4455_5241_424C).littleEndian) { mark += $0 }
        try Data(mark).write(to: URL(fileURLWithPath: hub.path + "/log/\(hub.replicaID)/DURABLE"))
        #expect(LogReader(store: hub).durable(origin: hub.replicaID) == Seq(7))

        let endpoint = try ReplicaEndpoint(store: hub, policy: Self.policy)
        defer { endpoint.stopWatching() }
        let admin = try Self.principal("admin-token-0123456789a")
        var it = try await endpoint.watch(principal: admin).makeAsyncIterator()
        let shown = try #require(await it.next())
        #expect(shown == ReplicationCursor([hub.replicaID: Seq(3)]))
        #expect(try await endpoint.cursor(principal: admin).cursor == shown)
    }

    /// Each moved origin is looked at once, whatever the number of watchers: who may read it is
    /// asked once, and only its readers' cursors change. No watcher's cursor is read again from
    /// the index for a move (only when it subscribes, or at the periodic look at scopes).
    @Test(.timeLimit(.minutes(10))) func aMoveIsLookedAtOnceNotOncePerWatcher() async throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let users = (0..<24).map { "u\($0)" }
        let stores = try users.indices.map { try Store.create(at: dir.path + "/s\($0)") }
        for (i, s) in stores.enumerated() { try Workload.edit(s, 1, seed: UInt64(i + 1)) }
        let owner = Dictionary(uniqueKeysWithValues: stores.enumerated().map { ($1.replicaID, users[$0]) })
        func receive(_ s: Store) throws {
            let p = try ProjectedStore.open(store: hub, waitingUpTo: 5)
            let held = ReplicationCursor([s.replicaID: try hub.cursor()[s.replicaID]])
            _ = try p.receive(try FramePage.collect(from: s, since: held, limits: PageLimits()).frames)
            try p.close()
        }
        for s in stores { try receive(s) }

        let index = try OriginIndex(store: hub)
        let asked = Lock(), counts = Counts()
        let feed = try WatchFeed(index: index, readers: { o in
            asked.withLock { counts.readers += 1 }
            return owner[o].map { [$0] } ?? []
        }, scopedCursor: { us in
            asked.withLock { counts.scoped += 1 }
            return index.cursor(of: owner.filter { us.contains($0.value) }.keys)
        }, pollInterval: 600)
        defer { feed.stop() }
        var streams = try users.map { try #require(feed.changes(users: [$0])).makeAsyncIterator() }
        for (i, s) in stores.enumerated() { #expect(await streams[i].next() == ReplicationCursor([s.replicaID: Seq(1)])) }
        #expect(asked.withLock { counts.scoped } == users.count)
        #expect(feed.cursorsSent == users.count)

        // u5's origin moves: asked about once, and only u5's stream changes.
        try Workload.edit(stores[5], 2, seed: 99)
        try receive(stores[5])
        try index.refresh()
        feed.publish()
        #expect(await streams[5].next() == ReplicationCursor([stores[5].replicaID: Seq(3)]))
        #expect(asked.withLock { (counts.readers, counts.scoped) } == (1, users.count))
        #expect(feed.cursorsSent == users.count + 1)
        // Then every origin moves: each stream's next cursor is its own origin's move, not
        // anything of u5's (nothing was sent to them for it).
        for (i, s) in stores.enumerated() where i != 5 {
            try Workload.edit(s, 1, seed: UInt64(100 + i))
            try receive(s)
        }
        try index.refresh()
        feed.publish()
        for (i, s) in stores.enumerated() where i != 5 {
            #expect(await streams[i].next() == ReplicationCursor([s.replicaID: Seq(2)]))
        }
        #expect(asked.withLock { (counts.readers, counts.scoped) } == (users.count, users.count))
        #expect(feed.cursorsSent == 2 * users.count)
    }

    /// A scope that grows without its origins moving (a claim confirmed, a member's first
    /// frames) is shown once the scopes' version says it changed: the feed reads the scoped
    /// cursors again then, and sends those that differ.
    @Test(.timeLimit(.minutes(10))) func aScopeThatGrowsWithoutAMoveIsShownOnceItsVersionChanges() async throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let a = try Store.create(at: dir.path + "/a"), b = try Store.create(at: dir.path + "/b")
        for (i, s) in [a, b].enumerated() {
            try Workload.edit(s, i + 1, seed: UInt64(i + 1))
            let p = try ProjectedStore.open(store: hub, waitingUpTo: 5)
            _ = try p.receive(try FramePage.collect(from: s, since: .empty, limits: PageLimits()).frames)
            try p.close()
        }
        let index = try OriginIndex(store: hub)
        let state = Lock(), scopes = Scopes()
        scopes.owner = [a.replicaID: "u1", b.replicaID: "u2"]
        let feed = try WatchFeed(index: index, readers: { o in state.withLock { scopes.owner[o].map { [$0] } ?? [] } }, scopedCursor: { us in
            index.cursor(of: state.withLock { scopes.owner.filter { us.contains($0.value) }.keys })
        }, scopeVersion: { state.withLock { scopes.version } }, pollInterval: 0.05, resyncInterval: 600)
        defer { feed.stop() }
        var it = try #require(feed.changes(users: ["u1"])).makeAsyncIterator()
        #expect(await it.next() == ReplicationCursor([a.replicaID: Seq(1)]))
        // u1 now owns b's origin too, which does not move.
        state.withLock {
            scopes.owner[b.replicaID] = "u1"
            scopes.version += 1
        }
        #expect(await it.next() == ReplicationCursor([a.replicaID: Seq(1), b.replicaID: Seq(2)]))
    }

    /// A feed left without streams keeps running for a while, so that a client that reconnects
    /// finds it there rather than starting another (a thread, an inotify instance, a watch per
    /// origin); once that while has passed unused, it stops, and a new stream needs a new feed.
    @Test(.timeLimit(.minutes(10))) func aFeedLeftUnusedStopsOnlyAfterItsGrace() async throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let index = try OriginIndex(store: hub)
        let feed = try WatchFeed(index: index, readers: { _ in [] }, scopedCursor: { _ in .empty }, pollInterval: 0.05,
                                 stopsWhenUnusedFor: 5)
        defer { feed.stop() }
        var stream = feed.changes(users: ["u1"])
        #expect(stream != nil)
        stream = nil  // the stream ends: its subscriber is gone
        #expect(!feed.isStopped, "stopped the moment its last stream ended")
        stream = feed.changes(users: ["u1"])
        #expect(stream != nil, "a stream opened again within the grace joins the running feed")
        stream = nil
        let start = Date()
        while !feed.isStopped && Date().timeIntervalSince(start) < 120 { try await Task.sleep(for: .milliseconds(50)) }
        #expect(feed.isStopped, "still running 120 s after its last stream ended")
        #expect(Date().timeIntervalSince(start) >= 4.9, "stopped before its grace had passed")
        #expect(feed.changes(users: ["u1"]) == nil, "a stopped feed takes no stream")
    }

    /// The scopes' version counts what may change a scope. A share's member replica whose log
    /// grows for the first time may be held for the first time (the share opens to its owner);
    /// each push of it after that changes no one's scope, and moved the version before, so every
    /// watch's scope was read again at every push of every member.
    @Test func aMembersLogThatGrowsAgainChangesNoScope() throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let alice = try Store.create(at: dir.path + "/alice"), bob = try Store.create(at: dir.path + "/bob")
        let carol = try Store.create(at: dir.path + "/carol")
        _ = try ScopeTests.share(of: alice, with: bob, titles: ["shared"])
        func receive(_ s: Store) throws {
            var options = AppendOptions()
            options.takesEveryShare = true  // as a hub does
            let p = try ProjectedStore.open(store: hub, waitingUpTo: 5, options: options)
            _ = try p.receive(try FramePage.collect(from: s, since: try hub.cursor(), limits: PageLimits()).frames)
            try p.close()
        }
        try receive(alice)
        let access = try ShareAccess(store: hub)
        let start = access.scopeVersion
        try Workload.edit(bob, 1, seed: 1)
        try receive(bob)
        access.note([bob.replicaID])
        let grown = access.scopeVersion
        #expect(grown != start, "a member's first frames here may open its share to its owner")
        try Workload.edit(bob, 1, seed: 2)
        try receive(bob)
        access.note([bob.replicaID])
        #expect(access.scopeVersion == grown, "a member's log grew again")
        try Workload.edit(carol, 1, seed: 3)
        try receive(carol)
        access.note([carol.replicaID])
        #expect(access.scopeVersion == grown, "a log of no share")
    }

    /// Once the server has stopped its watches (shutting down), a watch that still arrives is
    /// refused: it started a feed, and a thread, that nothing would stop.
    @Test(.timeLimit(.minutes(10))) func aWatchAfterTheWatchesStoppedIsRefused() async throws {
        let dir = Dir()
        let endpoint = try ReplicaEndpoint(store: try Store.create(at: dir.path + "/hub"), policy: Self.policy)
        let admin = try Self.principal("admin-token-0123456789a")
        var it = try await endpoint.watch(principal: admin).makeAsyncIterator()
        #expect(await it.next() == .empty)
        endpoint.stopWatching()
        #expect(await it.next() == nil, "an open stream ends when the watches stop")
        let refused = await #expect(throws: EndpointError.self) { _ = try await endpoint.watch(principal: admin) }
        #expect(refused?.status == 503)
    }

    /// A feed stopped lets go of what it reads before `stop` returns: its thread, woken, has
    /// finished with it. Before, the thread slept out its poll (a second in a server) holding
    /// the feed, and with it the store's index and the owners' and shares' databases.
    @Test func aStoppedFeedLetsGoOfWhatItReadsAtOnce() throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        weak var left: WatchFeed?
        do {
            let feed = try WatchFeed(index: try OriginIndex(store: hub), readers: { _ in [] }, scopedCursor: { _ in .empty }, pollInterval: 60)
            left = feed
            #expect(feed.changes(users: nil) != nil)
            usleep(200_000)  // the thread is in its wait
            let start = Date()
            feed.stop()
            #expect(Date().timeIntervalSince(start) < 10, "stop waited out the poll")
        }
        #expect(left == nil, "the feed's thread still holds it after stop returned")
    }

    /// Once `withRunningServer(store:)` returns, no file of the store is held open by the server,
    /// even with watch streams open to the end: its caller may move, restore or remove the store
    /// at once. Before, the watch feed's thread held the owners' database open for up to a
    /// second more, and its closing then deleted the `-shm` file of whatever database was at
    /// that path by then (a test's removal of its folder failed on it, now and then).
    @Test(.timeLimit(.minutes(10))) func aStoppedServerHoldsNoFileOfItsStore() async throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        /// The files of `hub` this process holds open.
        func held() -> [String] {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            let root = URL(fileURLWithPath: hub.path).standardizedFileURL.path
            return fds.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0) }
                .filter { $0.hasPrefix(root + "/") }
        }
        let alice = try Store.create(at: dir.path + "/alice")
        try Workload.edit(alice, 3, seed: 1, actor: "alice")
        var client: HTTPTransport?
        try await withServer(hub, configure: { $0.policy = Self.policy }) { url in
            // A scoped push: the server records who owns the origin (a database of its own).
            let pusher = try HTTPTransport(url: url, token: "alice-token-0123456789a", replica: alice.replicaID)
            _ = try await Replication.push(from: alice, to: pusher, limits: PageLimits())
            await pusher.shutdown()
            let c = try HTTPTransport(url: url, token: "alice-token-0123456789a")
            client = c
            var it = c.watch().makeAsyncIterator()
            #expect(try await it.next() != nil)
            #expect(!held().isEmpty, "the server holds none of its store's files while it serves")
            // The stream stays open while the server stops (ended by it, not by the client).
        }
        #expect(held() == [], "held after the server stopped")
        await client?.shutdown()
    }

    final class Scopes: @unchecked Sendable {
        var owner: [ReplicaID: String] = [:]
        var version: UInt64 = 0
    }

    final class Counts: @unchecked Sendable {
        var readers = 0, scoped = 0
    }
}
