import EventLog
@testable import LogbookServer
import Foundation
import Projections
import Testing
@testable import Replicator

/// Change notifications: every projection commit, whatever made it, reaches subscribers.
@Suite struct ChangeFeedTests {
    typealias Dir = ShippingTests.Dir

    /// The first change on `stream`, or nil after `seconds`.
    func first(_ stream: AsyncStream<ProjectionChange>, seconds: Double = 10) async -> ProjectionChange? {
        await withTaskGroup(of: ProjectionChange?.self) { group in
            group.addTask { for await c in stream { return c }; return nil }
            group.addTask { try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9)); return nil }
            let r = await group.next() ?? nil
            group.cancelAll()
            return r
        }
    }

    /// A cursor watcher (a live sync's own store) shows the log's end, never a durable mark kept
    /// past it as evidence of a lost tail (docs/FORMAT.md, "Durable mark"), and then each append.
    @Test func aCursorWatcherShowsTheLogsEndNotAMarkPastIt() async throws {
        let dir = Dir()
        let a = try Store.create(at: dir.path + "/a")
        let pa = try ProjectedStore(store: a)
        _ = try pa.append(ShippingTests().mutations(3, seed: 1))
        try pa.close()
        var mark: [UInt8] = []
        withUnsafeBytes(of: UInt64(7).littleEndian) { mark += $0 }
        withUnsafeBytes(of: (UInt64(7) ^ 0x4C42_4455_5241_424C).littleEndian) { mark += $0 }
        try Data(mark).write(to: URL(fileURLWithPath: a.path + "/log/\(a.replicaID)/DURABLE"))
        #expect(LogReader(store: a).durable(origin: a.replicaID) == Seq(7))
        let w = try CursorWatcher(store: a, pollInterval: 30)
        defer { w.stop() }
        #expect(w.cursor == ReplicationCursor([a.replicaID: Seq(3)]))
        var it = w.changes().makeAsyncIterator()
        #expect(await it.next() == ReplicationCursor([a.replicaID: Seq(3)]))
    }

    @Test func aLocalAppendAndAReceivedPageAreEachDeliveredWithWhatTheyApplied() async throws {
        let dir = Dir()
        let a = try Store.create(at: dir.path + "/a"), b = try Store.create(at: dir.path + "/b")
        let pb = try ProjectedStore(store: b)
        _ = try pb.append(ShippingTests().mutations(4, seed: 2))
        try pb.close()

        let pa = try ProjectedStore(store: a)
        defer { try? pa.close() }
        let changes = pa.projection.changes()
        let ms = ShippingTests().mutations(3, seed: 1)
        _ = try pa.append(ms)
        let local = try #require(await first(changes))
        #expect(local.events.map(\.seq.rawValue) == [1, 2, 3])
        #expect(local.cursor == [a.replicaID: Seq(3)])
        #expect(local.touched.values.reduce(0) { $0 + $1.count } == Set(ms.map(\.entityID)).count)

        // A page received from a peer (here by path) is a commit like any other.
        let page = try FramePage.collect(from: b, since: .empty, limits: PageLimits())
        _ = try pa.appender.receive(page.frames)
        try pa.projection.catchUp()
        let received = try #require(await first(changes))
        #expect(received.events.map(\.origin) == Array(repeating: b.replicaID, count: 4))
        #expect(received.cursor == [a.replicaID: Seq(3), b.replicaID: Seq(4)])
    }

    /// A watcher in another "process" (its own Projection) sees the commit, and one started from
    /// the cursor it last saw gets exactly what came after.
    @Test func aWatcherResumesFromItsCursorMissingNothing() throws {
        let dir = Dir()
        let a = try Store.create(at: dir.path + "/a")
        let pa = try ProjectedStore(store: a)
        defer { try? pa.close() }
        let watcher = try ProjectionWatcher(store: a)
        #expect(try watcher.poll() == nil)
        _ = try pa.append(ShippingTests().mutations(5, seed: 3))
        let seen = try #require(try watcher.next(until: Date().addingTimeInterval(10)))
        #expect(seen.events.map(\.seq.rawValue) == [1, 2, 3, 4, 5])
        _ = try pa.append(ShippingTests().mutations(2, seed: 4))
        let resumed = try ProjectionWatcher(store: a, from: [a.replicaID: Seq(5)])
        #expect(try resumed.poll()?.events.map(\.seq.rawValue) == [6, 7])
        #expect(try resumed.poll() == nil)
    }

    /// Several commits of several origins between two looks come in the order they were applied
    /// (the commit journal), not grouped by origin; a watcher resumed from an older cursor gets
    /// the same order; a rebuild (a new projection file, a new journal) repeats nothing.
    @Test func aWatcherHandsOverCommitsAcrossOriginsInTheOrderApplied() throws {
        let dir = Dir()
        let a = try Store.create(at: dir.path + "/a"), b = try Store.create(at: dir.path + "/b")
        let pb = try ProjectedStore(store: b)
        _ = try pb.append(ShippingTests().mutations(2, seed: 7))
        try pb.close()
        let pa = try ProjectedStore(store: a)
        let watcher = try ProjectionWatcher(store: a)
        _ = try pa.append(ShippingTests().mutations(1, seed: 8))         // a1
        let page = try FramePage.collect(from: b, since: .empty, limits: PageLimits())
        _ = try pa.receive(page.frames)
        try pa.catchUp()                                                 // b1 b2
        _ = try pa.append(ShippingTests().mutations(1, seed: 9))         // a2
        let expected = [(a.replicaID, 1), (b.replicaID, 1), (b.replicaID, 2), (a.replicaID, 2)].map { "\($0.0) \($0.1)" }
        let seen = try #require(try watcher.poll())
        #expect(seen.events.map { "\($0.origin) \($0.seq.rawValue)" } == expected)
        #expect(try watcher.poll() == nil)
        let resumed = try ProjectionWatcher(store: a, from: [:])
        #expect(try resumed.poll()?.events.map { "\($0.origin) \($0.seq.rawValue)" } == expected)
        try pa.close()

        _ = try Projection.rebuild(store: a)
        #expect(try watcher.poll() == nil)
        let pa2 = try ProjectedStore(store: a)
        _ = try pa2.append(ShippingTests().mutations(1, seed: 10))
        #expect(try watcher.poll()?.events.map(\.seq.rawValue) == [3])
        try pa2.close()
    }

    /// An observed items query is not re-run by a sync that touches only tags (10,000 events),
    /// is re-run by an item event, and delivers only results that differ.
    @Test func anObservedQueryRunsOnlyWhenACommitTouchesWhatItReads() async throws {
        let dir = Dir()
        let a = try Store.create(at: dir.path + "/a"), tags = try Store.create(at: dir.path + "/tags")
        let pt = try ProjectedStore(store: tags)
        _ = try pt.append((0..<10_000).map { Mutation(entity: .tag, op: .create, entityID: UUID(), fields: [Field("name", .text("tag \($0)"))]) })
        try pt.close()

        let pa = try ProjectedStore(store: a)
        defer { try? pa.close() }
        let root = UUID()
        _ = try pa.append([Mutation(entity: .item, op: .create, entityID: root, fields: [Field("title", .text("root"))])])
        let runs = Counter()
        var results = pa.projection.observe { p in
            runs.add()
            return try p.items(under: root.lowercasedString)
        }.makeAsyncIterator()
        #expect(try await results.next()?.count == 1)
        #expect(runs.value == 1)

        // A sync of 10,000 tag events: commits, but nothing the query reads.
        let page = try FramePage.collect(from: tags, since: .empty, limits: PageLimits(maxBytes: 64 << 20, maxFrames: 1 << 16))
        let changes = pa.projection.changes()
        _ = try pa.appender.receive(page.frames)
        try pa.projection.catchUp()
        var seen = 0
        for await c in changes {
            seen += c.events.count
            if seen >= 10_000 { break }
        }
        #expect(runs.value == 1, "the tag sync re-ran the items query")

        // An item outside the subtree: re-run, same result, nothing delivered. One inside: delivered.
        _ = try pa.append([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("elsewhere"))])])
        _ = try pa.append([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("child")), Field("parent_id", .text(root.lowercasedString))])])
        let next = try await results.next()
        #expect(next?.map(\.title) == ["root", "child"])
        #expect(runs.value == 3)
    }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func add() { lock.withLock { n += 1 } }
    var value: Int { lock.withLock { n } }
}
