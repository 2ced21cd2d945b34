import Domain
import EventLog
import Foundation
@testable import LogbookServer
import Projections
@testable import Replicator
import TestSupport
import Testing

/// A store's hub that scales in replicas: what it keeps in memory stays true whoever writes the
/// store, concurrent pushes are received together yet refused one by one, and a hub receiving
/// more origins than it keeps open never runs out of descriptors.
@Suite struct HubScaleTests {
    typealias Dir = TempDir
    let open = AccessPolicy.open.principals[0]

    /// The frames of a new origin: `appends` appends of one event each.
    func origin(_ appends: Int, title: String = "t", id: ReplicaID = .random()) -> (ReplicaID, [[UInt8]]) {
        let b = OriginFrameBuilder(origin: id)
        var frames: [[UInt8]] = []
        for i in 0..<appends {
            let line = #"{"entity":"item","op":"create","id":"\#(UUID().uuidString.lowercased())","fields":{"title":"\#(title) \#(i)"}}"#
            try! b.add(try! MutationParser.parse(line, lineNumber: 1), at: HLC(wallMillis: UInt64(Date().timeIntervalSince1970 * 1000), counter: 0))
            frames = b.finish()
        }
        return (id, frames)
    }

    func body(_ frames: [[UInt8]]) -> [UInt8] { FramePage(frames: frames, next: .empty, more: false).encoded() }

    func attempt(_ endpoint: ReplicaEndpoint, _ frames: [[UInt8]], as principal: AccessPolicy.Principal? = nil) async -> Result<PushAnswer, any Error> {
        do { return .success(try await endpoint.push(principal: principal ?? open, body: body(frames), peer: nil)) } catch { return .failure(error) }
    }

    /// Another process's append (here: a writer opened beside the server's, once the server's
    /// writer is idle) shows in the hub's cursor and pages at once, with inotify or by polling.
    @Test(arguments: [ChangeWatching.inotify, .polling])
    func theIndexSeesWhatOtherWritersAppend(_ watching: ChangeWatching) async throws {
        let dir = Dir()
        let store = try Store.create(at: dir.path + "/hub")
        let index = try OriginIndex(store: store, watching: watching)
        #expect(index.count == 0)
        try Workload.edit(store, 5, seed: 1)
        try index.refresh()
        #expect(index.cursor() == ReplicationCursor([store.replicaID: Seq(5)]))
        // A received origin, written by another appender.
        let (o, frames) = origin(3)
        let a = try LogAppender(store: store)
        _ = try a.receive(frames)
        try a.close()
        try index.refresh()
        #expect(index.cursor() == ReplicationCursor([store.replicaID: Seq(5), o: Seq(3)]))
        #expect(try index.moved(since: ReplicationCursor([store.replicaID: Seq(5)]), among: Set<ReplicaID>?.none).map { $0.0 } == [o])
        #expect(try index.moved(since: index.cursor(), among: Set<ReplicaID>?.none).isEmpty)
        // Purged: the origin's directory goes, and so does its entry.
        try FileManager.default.removeItem(atPath: store.path + "/log/" + o.description)
        try index.refresh()
        #expect(index[o] == nil)
    }

    /// The same through the endpoint: the writer it holds between pushes is released when idle,
    /// a local append lands, and the next cursor and page hold it.
    @Test func aLocalAppendShowsInTheHubsNextAnswer() async throws {
        let dir = Dir()
        let store = try Store.create(at: dir.path + "/hub")
        let endpoint = try ReplicaEndpoint(store: store, policy: .open, idleClose: 0.05)
        let (o, frames) = origin(2)
        _ = try await endpoint.push(principal: open, body: body(frames), peer: nil)
        try await Task.sleep(for: .milliseconds(300))  // the writer is closed once idle
        try Workload.edit(store, 4, seed: 2)
        let c = try await endpoint.cursor(principal: open).cursor
        #expect(c == ReplicationCursor([o: Seq(2), store.replicaID: Seq(4)]))
        let (page, _) = try await endpoint.page(principal: open, since: ReplicationCursor([o: Seq(2)]).token, maxBytes: nil, maxFrames: nil, peer: nil)
        #expect(page.frames == 1 && page.next == c)
    }

    /// Pushes sent at once are received in groups; one that does not link to its origin's log
    /// (forged) or leaves a gap is refused on its own, names why, and writes nothing, while the
    /// others are received, durable and projected.
    @Test func concurrentPushesAreReceivedTogetherAndRefusedAlone() async throws {
        let dir = Dir()
        let store = try Store.create(at: dir.path + "/hub")
        let endpoint = try ReplicaEndpoint(store: store, policy: .open)
        let good = (0..<40).map { _ in origin(3) }
        // A forged second frame: the right origin and seqs, but written after another first
        // frame (another history), so it does not link to the frame this store holds.
        let (victim, victimFrames) = origin(1)
        _ = try await endpoint.push(principal: open, body: body(victimFrames), peer: nil)
        let forged = origin(2, title: "rewritten", id: victim).1[1]
        let (gappy, gappyFrames) = origin(3)
        let outcomes = await withTaskGroup(of: (String, Result<PushAnswer, any Error>).self) { group in
            for (i, (_, frames)) in good.enumerated() {
                group.addTask { ("good \(i)", await self.attempt(endpoint, frames)) }
            }
            group.addTask { ("forged", await self.attempt(endpoint, [forged])) }
            group.addTask { ("gap", await self.attempt(endpoint, [gappyFrames[2]])) }
            var out: [String: Result<PushAnswer, any Error>] = [:]
            for await (k, r) in group { out[k] = r }
            return out
        }
        for i in good.indices {
            let answer = try #require(try? outcomes["good \(i)"]?.get())
            #expect(answer.result.events == 3 && answer.cursor[good[i].0] == Seq(3))
        }
        for bad in ["forged", "gap"] {
            guard case .failure(let e as EndpointError)? = outcomes[bad] else {
                Issue.record("\(bad) was not refused")
                continue
            }
            #expect(e.status == 422 && e.message.contains("nothing was written"), "\(e)")
        }
        var expected = ReplicationCursor([victim: Seq(1)])
        for (o, _) in good { expected[o] = Seq(3) }
        #expect(try store.cursor() == expected)
        #expect(try store.cursor()[gappy] == Seq(0))
        // Durable and projected: a fresh projection and the hub's agree.
        let projection = try Projection(store: store)
        defer { try? projection.close() }
        #expect(try projection.cursor().count == good.count + 1)
    }

    /// Two pushes of one new origin sent at once by a scoped user, the first refused (a gap):
    /// the other still leaves the origin owned by its user. Before pushes of a shared origin
    /// waited for the next group, the refused push took back a claim the accepted one relied on,
    /// leaving durable frames owned by nobody.
    @Test func aRefusedPushDoesNotTakeBackAClaimAnotherReliesOn() async throws {
        let dir = Dir()
        let store = try Store.create(at: dir.path + "/hub")
        let policy = try AccessPolicy(json: Data("""
            {"principals":[{"name":"alice","token":"alice-token-0123456789a","user":"alice","push":"*","pull":true}]}
            """.utf8))
        let alice = policy.principals[0]
        let endpoint = try ReplicaEndpoint(store: store, policy: policy)
        for _ in 0..<10 {
            let (o, frames) = origin(3)
            async let refused = attempt(endpoint, [frames[2]], as: alice)
            async let accepted = attempt(endpoint, frames, as: alice)
            let (r, a) = await (refused, accepted)
            switch r {
            case .failure(let e as EndpointError):
                #expect(e.status == 422, "\(e)")  // it came first: a gap
            case .success(let answer):
                #expect(answer.result.alreadyHeld == 1)  // the whole log came first: held already
            case .failure(let e):
                Issue.record("\(e)")
            }
            #expect(try a.get().result.events == 3)
            #expect(endpoint.owners.owner(of: o) == "alice")
        }
    }

    /// A receiver of more origins than it keeps open closes the least recently used and
    /// reopens them when they push again; their logs stay whole and verifiable.
    @Test func aReceiverOfManyOriginsKeepsFewOpen() throws {
        let dir = Dir()
        let store = try Store.create(at: dir.path + "/hub")
        var options = AppendOptions()
        options.receivedWritersOpenMax = 8
        let a = try LogAppender(store: store, options: options)
        let origins = (0..<40).map { _ in origin(4) }
        for round in 0..<4 {
            // Each round, every origin pushes its next frame (all of them more than the 8 kept open).
            let results = try a.receive(batches: origins.map { [$0.1[round]] })
            for r in results { #expect(try r.get().events == 1) }
        }
        // Count only descriptors open on this store's files: tests run in parallel in one
        // process, so the process's whole count says more about them than about this receiver.
        let root = URL(fileURLWithPath: dir.path).resolvingSymlinksInPath().path
        let fds = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").filter {
            let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)
            return target?.hasPrefix(root + "/") ?? false
        }.count
        try a.close()
        // 8 received writers (a segment and its sidecar each) plus the store's own files.
        #expect(fds > 0 && fds < 40, "descriptors open on the store: \(fds)")
        for (o, _) in origins {
            #expect(try LogReader(store: store).events(origin: o).count == 4)
        }
        let reopened = try LogAppender(store: store)
        #expect(reopened.recovery.isClean)
        try reopened.close()
    }

    /// A relay that does not project: pushes and pulls work, the projection stays behind until
    /// a snapshot is made, which brings it up to date first.
    @Test func aHubWithoutProjectionRelaysAndSnapshotsAnyway() async throws {
        let dir = Dir()
        let store = try Store.create(at: dir.path + "/hub")
        let endpoint = try ReplicaEndpoint(store: store, policy: .open, project: false)
        let (o, frames) = origin(3)
        let answer = try await endpoint.push(principal: open, body: body(frames), peer: nil)
        #expect(answer.result.events == 3)
        let (page, _) = try await endpoint.page(principal: open, since: nil, maxBytes: nil, maxFrames: nil, peer: nil)
        #expect(page.frames == 3 && page.next[o] == Seq(3))
        var applied = try { let p = try Projection(store: store); defer { try? p.close() }; return try p.cursor() }()
        #expect(applied[o] == nil, "not projected on receipt")
        let snapshot = try await endpoint.snapshot(principal: open)
        #expect(snapshot.cursor[o] == Seq(3) && snapshot.size > 0)
        applied = try { let p = try Projection(store: store); defer { try? p.close() }; return try p.cursor() }()
        #expect(applied[o] == Seq(3))
    }

    /// Cursor tokens are base64url without padding, read back exactly, and anything else refused.
    @Test func cursorTokensRoundTripAndRefuseWhatIsNotBase64url() throws {
        for n in 0..<40 {
            var entries: [ReplicaID: Seq] = [:]
            for _ in 0..<n { entries[ReplicaID.random()] = Seq(UInt64.random(in: 1...UInt64(Int64.max))) }
            let c = ReplicationCursor(entries)
            let token = c.token
            #expect(try ReplicationCursor(token: token) == c)
            #expect(!token.contains("=") && !token.contains("+") && !token.contains("/"))
        }
        let t = ReplicationCursor([ReplicaID.random(): Seq(7)]).token
        for bad in [t + "=", t.replacingOccurrences(of: "A", with: "+"), t + "A", String(t.dropLast()) + "!"] where bad != t {
            #expect(throws: CursorTokenError.self) { try ReplicationCursor(token: bad) }
        }
    }
}

