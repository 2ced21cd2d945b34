import Domain
import EventLog
@testable import LogbookServer
import Foundation
import TestSupport
import Hub
import Logging
import PostgresNIO
import Projections
import Testing
@testable import Replicator

/// A PostgreSQL cluster of its own for a test, in a temporary folder, on loopback
/// (scripts/pg-cluster.sh: as the `postgres` system user when the tests run as root).
final class TestCluster {
    let dir = TempDir()
    let url: String
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/pg-cluster.sh").path

    init() throws {
        url = try Self.run("start", dir.path).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    deinit { _ = try? Self.run("stop", dir.path) }

    /// Runs the script with its output in files: the server it starts inherits whatever
    /// descriptors it is given, so a pipe would never reach its end.
    static func run(_ command: String, _ dir: String) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/bash")
        p.arguments = [script, command, dir]
        let outPath = NSTemporaryDirectory() + "/pg-cluster-\(UUID().uuidString.prefix(8))"
        FileManager.default.createFile(atPath: outPath + ".out", contents: nil)
        FileManager.default.createFile(atPath: outPath + ".err", contents: nil)
        defer {
            try? FileManager.default.removeItem(atPath: outPath + ".out")
            try? FileManager.default.removeItem(atPath: outPath + ".err")
        }
        p.standardOutput = FileHandle(forWritingAtPath: outPath + ".out")
        p.standardError = FileHandle(forWritingAtPath: outPath + ".err")
        p.standardInput = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        let text = (try? String(contentsOfFile: outPath + ".out", encoding: .utf8)) ?? ""
        let problem = (try? String(contentsOfFile: outPath + ".err", encoding: .utf8)) ?? ""
        guard p.terminationStatus == 0 else { throw ServerError("pg-cluster.sh \(command) failed: \(problem)") }
        return text.split(separator: "\n").last.map(String.init) ?? ""
    }

    var database: HubDatabase { get throws { try HubDatabase(url: url) } }

    /// The hub's own role, straight to the database, with no scope set (what a bug would do).
    func rawClient() throws -> (PostgresClient, Task<Void, Never>) {
        let d = try database
        let c = PostgresClient(configuration: .init(host: d.host, port: d.port, username: d.user, password: d.password, database: d.database, tls: .disable))
        return (c, Task { await c.run() })
    }
}

/// `evctl serve --hub`: frames kept in PostgreSQL by interchangeable nodes, reads enforced by
/// row-level security (docs/HUB.md).
@Suite(.serialized) struct HubTests {
    typealias Dir = TempDir
    /// The suite runs beside the whole test run on two cores: a database that answers slowly is not
    /// what these tests look at (the default, 20 s, is for a node an operator starts).
    static let connectTimeout = 120

    static let logger: Logger = {
        var l = Logger(label: "test.hub")
        l.logLevel = .error
        return l
    }()

    func edit(_ store: Store, _ n: Int, seed: UInt64, actor: String?) throws {
        try Workload.edit(store, n, seed: seed, actor: actor)
    }

    func node(_ cluster: TestCluster, _ policy: AccessPolicy) async throws -> PostgresHub {
        try await PostgresHub.open(try cluster.database, policies: PolicySource(policy), connectTimeoutSeconds: Self.connectTimeout, logger: Self.logger)
    }

    /// A tokens file of one principal that may pull and push any origin.
    func onePrincipal(_ name: String, token: String, user: String) throws -> AccessPolicy {
        try AccessPolicy(json: Data(#"{"principals":[{"name":"\#(name)","token":"\#(token)","user":"\#(user)","push":"*","pull":true}]}"#.utf8))
    }

    func withNode<T>(_ hub: PostgresHub, _ body: (String) async throws -> T) async throws -> T {
        var config = ServerConfiguration()
        config.port = 0
        config.policy = hub.policy
        return try await ServerThreads.run {
            try await ReplicaServer.withRunningServer(backend: hub, configuration: config, logger: Self.logger, body)
        }
    }

    /// One exchange of `store` with the node at `url`: push, then pull.
    func pushThenPull(_ url: String, _ token: String, _ store: Store) async throws {
        let p = try HTTPTransport(url: url, token: token, replica: store.replicaID)
        _ = try await Replication.push(from: store, to: p)
        _ = try await Replication.pull(from: p, store: store, lockWait: 5)
        await p.shutdown()
    }

    func principal(_ policy: AccessPolicy, _ token: String) throws -> AccessPolicy.Principal {
        try #require(try? policy.authenticate(authorization: "Bearer \(token)").get())
    }

    /// Two users with a replica of ten events each, and a tokens file of one principal each.
    func erinAndFrank(_ dir: Dir) throws -> (Store, Store, AccessPolicy) {
        let erin = try Store.create(at: dir.path + "/erin")
        let frank = try Store.create(at: dir.path + "/frank")
        try edit(erin, 10, seed: 7, actor: "erin")
        try edit(frank, 10, seed: 8, actor: "frank")
        let policy = try AccessPolicy(json: Data("""
            {"principals":[
              {"name":"erin","token":"erin-token-0123456789ab","user":"erin","push":"*","pull":true},
              {"name":"frank","token":"frank-token-0123456789a","user":"frank","push":"*","pull":true}
            ]}
            """.utf8))
        return (erin, frank, policy)
    }

    /// Pushes each replica's whole log through `hub` as its own principal.
    func pushBoth(_ erin: Store, _ frank: Store, to hub: PostgresHub, _ policy: AccessPolicy) async throws {
        for (token, store) in [("erin-token-0123456789ab", erin), ("frank-token-0123456789a", frank)] {
            let page = try FramePage.collect(from: store, since: .empty, limits: PageLimits()).encoded()
            _ = try await hub.push(principal: principal(policy, token), body: page, peer: nil)
        }
    }

    @Test func twoNodesServeOneHubToThreeUsers() async throws {
        let cluster = try TestCluster()
        let dir = Dir()
        let alice1 = try Store.create(at: dir.path + "/alice1")
        let alice2 = try Store.create(at: dir.path + "/alice2")
        let bob1 = try Store.create(at: dir.path + "/bob1")
        let carol1 = try Store.create(at: dir.path + "/carol1")
        try edit(alice1, 40, seed: 1, actor: "alice")
        try edit(alice2, 20, seed: 2, actor: "alice")
        try edit(bob1, 30, seed: 3, actor: "bob")
        try edit(carol1, 10, seed: 4, actor: "carol")
        let policy = try AccessPolicy(json: Data("""
            {"principals":[
              {"name":"alice-laptop","token":"alice-laptop-token-0123","user":"alice","push":["\(alice1.replicaID)"],"pull":true},
              {"name":"alice-phone","token":"alice-phone-token-01234","user":"alice","push":["\(alice2.replicaID)"],"pull":true},
              {"name":"bob","token":"bob-token-0123456789abc","user":"bob","push":"*","pull":true},
              {"name":"carol","token":"carol-token-0123456789a","user":"carol","read_users":["alice"],"push":["\(carol1.replicaID)"],"pull":true}
            ]}
            """.utf8))
        // Two nodes starting together on an empty database: one creates the schema, both serve.
        let database = try cluster.database
        async let a = PostgresHub.open(database, policies: PolicySource(policy), connectTimeoutSeconds: Self.connectTimeout, logger: Self.logger)
        async let b = PostgresHub.open(database, policies: PolicySource(policy), connectTimeoutSeconds: Self.connectTimeout, logger: Self.logger)
        let (nodeA, nodeB) = try await (a, b)
        defer {
            nodeA.close()
            nodeB.close()
        }
        #expect(nodeA.hubID == nodeB.hubID)
        try await withNode(nodeA) { urlA in
            try await withNode(nodeB) { urlB in
                func sync(_ token: String, _ store: Store, push: String, pull: String) async throws {
                    let p = try HTTPTransport(url: push, token: token, replica: store.replicaID)
                    _ = try await Replication.push(from: store, to: p)
                    await p.shutdown()
                    let q = try HTTPTransport(url: pull, token: token, replica: store.replicaID)
                    _ = try await Replication.pull(from: q, store: store, lockWait: 5)
                    await q.shutdown()
                }
                // Pushed through one node, pulled through the other.
                try await sync("alice-laptop-token-0123", alice1, push: urlA, pull: urlB)
                try await sync("bob-token-0123456789abc", bob1, push: urlB, pull: urlA)
                try await sync("alice-phone-token-01234", alice2, push: urlB, pull: urlA)
                try await sync("carol-token-0123456789a", carol1, push: urlA, pull: urlB)
                try await sync("alice-laptop-token-0123", alice1, push: urlB, pull: urlA)
                #expect(Set(try alice1.cursor().origins) == [alice1.replicaID, alice2.replicaID])
                #expect(try alice1.cursor() == alice2.cursor())
                #expect(try Workload.dump(alice1) == Workload.dump(alice2))
                #expect(Set(try bob1.cursor().origins) == [bob1.replicaID])
                #expect(Set(try carol1.cursor().origins) == [carol1.replicaID, alice1.replicaID, alice2.replicaID])
                // Frames are stored unchanged: the hub's page is the author's bytes.
                let (status, body, _) = try await RawHTTP.fetch(urlB + "/v1/frames?max_frames=100000", token: "bob-token-0123456789abc")
                #expect(status == 200)
                let page = try FramePage.decode(body)
                #expect(try page.frames == Workload.frames(bob1, bob1.replicaID))
                // Version 2 pages, /metrics and the cursor name only the principal's users' origins.
                let (_, body2, holder) = try await RawHTTP.fetch(urlA + "/v1/frames?page_version=2", token: "bob-token-0123456789abc")
                #expect(try FramePage.decode(body2).frames == page.frames)
                #expect(try ReplicationCursor(token: try #require(holder)).origins == [bob1.replicaID])
                let m = try await RawHTTP.request(urlA + "/metrics", token: "bob-token-0123456789abc")
                #expect(m.status == 200 && m.body.contains("\(bob1.replicaID)"))
                for hidden in [alice1.replicaID, alice2.replicaID, carol1.replicaID] { #expect(!m.body.contains("\(hidden)")) }
                let s = try await RawHTTP.request(urlA + "/v1/snapshot", token: "bob-token-0123456789abc")
                #expect(s.status == 403)

                // Another user's origin: 403 through either node, nothing written.
                try edit(alice1, 3, seed: 5, actor: "alice")
                let alice = try principal(policy, "alice-laptop-token-0123"), bob = try principal(policy, "bob-token-0123456789abc")
                let held = try await nodeA.cursor(principal: alice).cursor
                let fresh = try FramePage.collect(from: alice1, since: held, limits: PageLimits())
                var (code, text) = try await RawHTTP.push(fresh, to: urlB, token: "bob-token-0123456789abc")
                #expect(code == 403 && text.contains("belongs to another user"))
                // An actor that is not the principal's user: 403.
                let imposter = try Store.create(at: dir.path + "/imposter")
                try edit(imposter, 2, seed: 6, actor: "alice")
                (code, text) = try await RawHTTP.push(try FramePage.collect(from: imposter, since: .empty, limits: PageLimits()), to: urlA,
                                                           token: "bob-token-0123456789abc")
                #expect(code == 403 && text.contains("actor"))
                #expect(try await nodeA.cursor(principal: bob).cursor.origins == [bob1.replicaID])
                // History written before the replica joined (no actor): accepted in bob's own origin,
                // which bob's push claims; attributed to him by ownership.
                let past = try Store.create(at: dir.path + "/bobs-past")
                try edit(past, 4, seed: 9, actor: nil)
                (code, text) = try await RawHTTP.push(try FramePage.collect(from: past, since: .empty, limits: PageLimits()), to: urlB,
                                                           token: "bob-token-0123456789abc")
                #expect(code == 200, "\(text)")
                #expect(Set(try await nodeA.cursor(principal: bob).cursor.origins) == [bob1.replicaID, past.replicaID])
                // A forged frame (rewritten history): 422, nothing written.
                var forged = fresh.frames
                forged[0][FrameHeader.size + 2] ^= 0x40
                (code, text) = try await RawHTTP.push(FramePage(frames: forged, next: .empty, more: false), to: urlA, token: "alice-laptop-token-0123")
                #expect(code == 422)
                #expect(try await nodeB.cursor(principal: alice).cursor == held)
                // A frame a relay altered and checksummed again (its `continues` flag set, so it
                // still decodes): the signature of alice's key fails; 422, nothing written.
                var altered = fresh.frames
                let k = altered.count - 1
                altered[k][6] ^= 0x01
                var crc = CRC32C()
                altered[k].withUnsafeBytes { p in
                    crc.update(UnsafeRawBufferPointer(rebasing: p[0..<92]))
                    crc.update(UnsafeRawBufferPointer(rebasing: p[96...]))
                }
                withUnsafeBytes(of: crc.final.littleEndian) { for i in 0..<4 { altered[k][92 + i] = $0[i] } }
                (code, text) = try await RawHTTP.push(FramePage(frames: altered, next: .empty, more: false), to: urlA, token: "alice-laptop-token-0123")
                #expect(code == 422 && text.contains("signature does not verify"), "\(text)")
                #expect(try await nodeB.cursor(principal: alice).cursor == held)
                (code, text) = try await RawHTTP.push(fresh, to: urlA, token: "alice-laptop-token-0123")
                #expect(code == 200 && text.contains("\"events\":3"))
            }
        }
    }

    /// A share's logs are served only to the users of its members (docs/SHARING.md, "Hubs"):
    /// not to another user, even one whose store takes every share it is sent (carol); a
    /// member's user gets them once its replica has pushed; a removed member's user gets no
    /// more of them, and its replica still pushes (what it holds of others' share logs is left
    /// out, not refused).
    @Test func aShareIsServedOnlyToItsMembersUsers() async throws {
        let cluster = try TestCluster()
        let dir = Dir()
        let aliceKey = ReplicaKey.generate(), bobKey = ReplicaKey.generate()
        let alice = try Store.create(at: dir.path + "/alice", signingKey: aliceKey)
        let bob = try Store.create(at: dir.path + "/bob", signingKey: bobKey)
        let carol = try Store.create(at: dir.path + "/carol", signingKey: .generate())
        try edit(alice, 5, seed: 1, actor: "alice")
        try edit(bob, 5, seed: 2, actor: "bob")
        try edit(carol, 5, seed: 3, actor: "carol")
        let a = try LogAppender(store: alice)
        let share = try a.createShare(name: "hub share")
        try a.addMember(bobKey.memberCard, to: share)
        _ = try a.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("HUBSECRET"))])], to: share)
        try a.close()
        try ShareDirectory.setRelay(carol, true)  // takes whatever the hub sends
        let policy = try AccessPolicy(json: Data("""
            {"principals":[
              {"name":"alice","token":"alice-token-0123456789a","user":"alice","push":"*","pull":true},
              {"name":"bob","token":"bob-token-0123456789abc","user":"bob","push":"*","pull":true},
              {"name":"bob-list","token":"bob-list-token-01234567","user":"bob","push":["\(bob.replicaID)"],"pull":true},
              {"name":"carol","token":"carol-token-0123456789a","user":"carol","push":"*","pull":true}
            ]}
            """.utf8))
        let hub = try await node(cluster, policy)
        defer { hub.close() }
        let log = ReplicaID.shareLog(share, signingKey: aliceKey.publicKey), members = ReplicaID.shareMembers(share, signingKey: aliceKey.publicKey)
        try await withNode(hub) { url in
            func sync(_ token: String, _ store: Store) async throws { try await pushThenPull(url, token, store) }
            try await sync("alice-token-0123456789a", alice)
            try await sync("carol-token-0123456789a", carol)
            try await sync("bob-token-0123456789abc", bob)
            #expect(Set(try carol.origins()).isDisjoint(with: [log, members]), "carol was sent the share")
            #expect(try LogReader(store: bob).events(origin: log).count == 1)
            #expect(try bob.origins().contains(members))
            let (_, body, _) = try await RawHTTP.fetch(url + "/v1/frames?max_frames=100000", token: "carol-token-0123456789a")
            #expect(try FramePage.decode(body).frames.allSatisfy { !(FrameHeader(parsing: $0)?.shared ?? true) })
            #expect(!(try await hub.cursor(principal: principal(policy, "carol-token-0123456789a")).cursor.origins.contains(log)))

            // Bob is removed: his user stops getting the share; his replica still pushes.
            let again = try LogAppender(store: alice)
            try again.removeMember(bobKey.replicaID, from: share)
            _ = try again.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("AFTER"))])], to: share)
            try again.close()
            try await sync("alice-token-0123456789a", alice)
            try edit(bob, 2, seed: 4, actor: "bob")
            try await sync("bob-token-0123456789abc", bob)
            #expect(try LogReader(store: bob).events(origin: log).count == 1)
            #expect(!(try await hub.cursor(principal: principal(policy, "bob-token-0123456789abc")).cursor.origins.contains(log)))
            // His replica's frames of alice's log are left out because the hub holds them byte
            // for byte; a made-up one (one byte of its payload changed), at a seq the hub holds,
            // is refused as another user's: left out by its seq, it told how far the log goes.
            let firstOfLog = try #require(FramePage.collect(from: alice, since: .empty, limits: PageLimits()).frames.first { FrameHeader(parsing: $0)?.origin == log })
            var (code, text) = try await RawHTTP.push(FramePage(frames: [CraftedFrames.withPayloadAltered(firstOfLog)], next: .empty, more: false), to: url, token: "bob-token-0123456789abc")
            #expect(code == 403 && text.contains("belongs to another user"), "\(code) \(text)")
            (code, text) = try await RawHTTP.push(FramePage(frames: [firstOfLog], next: .empty, more: false), to: url, token: "bob-token-0123456789abc")
            #expect(code == 200, "\(code) \(text)")
            // The same with a principal that may push only bob's replica's origin: what the hub
            // holds is left out, not refused for the right; a made-up frame is refused for it.
            let whole = try FramePage.collect(from: bob, since: .empty, limits: PageLimits())
            #expect(whole.frames.contains { FrameHeader(parsing: $0)?.origin == log })
            (code, text) = try await RawHTTP.push(whole, to: url, token: "bob-list-token-01234567")
            #expect(code == 200, "\(code) \(text)")
            (code, text) = try await RawHTTP.push(FramePage(frames: [CraftedFrames.withPayloadAltered(firstOfLog)], next: .empty, more: false), to: url, token: "bob-list-token-01234567")
            #expect(code == 403 && text.contains("may not push frames of origin \(log)"), "\(code) \(text)")
        }
    }

    /// alice's and bob's stores (signed, two events each), a share of alice's with bob's replica
    /// a member, bob's log in it, and principals alice, bob and carol that may push any origin.
    func aliceSharingWithBob(_ dir: Dir) throws -> (alice: Store, bob: Store, share: ShareID, bobLog: ReplicaID, policy: AccessPolicy) {
        let bobKey = ReplicaKey.generate()
        let alice = try Store.create(at: dir.path + "/alice", signingKey: .generate())
        let bob = try Store.create(at: dir.path + "/bob", signingKey: bobKey)
        try edit(alice, 2, seed: 1, actor: "alice")
        try edit(bob, 2, seed: 2, actor: "bob")
        let a = try LogAppender(store: alice)
        let share = try a.createShare(name: "hub share")
        try a.addMember(bobKey.memberCard, to: share)
        try a.close()
        let policy = try AccessPolicy(json: Data("""
            {"principals":[
              {"name":"alice","token":"alice-token-0123456789a","user":"alice","push":"*","pull":true},
              {"name":"bob","token":"bob-token-0123456789abc","user":"bob","push":"*","pull":true},
              {"name":"carol","token":"carol-token-0123456789a","user":"carol","push":"*","pull":true}
            ]}
            """.utf8))
        return (alice, bob, share, ReplicaID.shareLog(share, signingKey: bobKey.publicKey), policy)
    }

    /// A member's share log that another member pushed first (taken from the writer's store)
    /// stays its writer's: the writer's push hands its row and frames to the writer's user, as
    /// `serve --store` lets the writer push it (`ScopeTests.aShareLogIsItsWritersToPushWhoeverPushedItFirst`).
    /// No other user may push new frames of it, and a frame whose signature does not verify hands
    /// nothing over. The claim is made on a database put back to version 3's shape, which the
    /// next node migrates with its frames in place.
    @Test func aShareLogIsItsWritersWhoeverPushedItFirst() async throws {
        let cluster = try TestCluster()
        let dir = Dir()
        let (alice, bob, share, bobLog, policy) = try aliceSharingWithBob(dir)
        func writeShared(_ title: String) throws { try appendSharedItems(bob, share, [title]) }
        let first = try await node(cluster, policy)
        try await withNode(first) { url in
            try await pushThenPull(url, "alice-token-0123456789a", alice)
            try await pushThenPull(url, "bob-token-0123456789abc", bob)
            try writeShared("bob's 1")
            _ = try await Replication.pull(from: StoreTransport(store: bob), store: alice)
            try await pushThenPull(url, "alice-token-0123456789a", alice)
        }
        first.close()
        let (raw, task) = try cluster.rawClient()
        try await raw.withConnection { conn in
            for statement in ["DROP POLICY origins_read_taking ON logbook_origins", "DROP POLICY origins_take ON logbook_origins",
                              "ALTER TABLE logbook_frames DROP CONSTRAINT logbook_frames_origin_owner_fkey",
                              "ALTER TABLE logbook_frames ADD CONSTRAINT logbook_frames_origin_owner_fkey FOREIGN KEY (origin, owner) REFERENCES logbook_origins (origin, owner)",
                              "UPDATE logbook_hub SET value = '3' WHERE key = 'schema_version'"] {
                try await conn.query(PostgresQuery(unsafeSQL: statement), logger: Self.logger)
            }
        }
        task.cancel()
        let hub = try await node(cluster, policy)
        defer { hub.close() }
        try await withNode(hub) { url in
            func held() async throws -> Seq? { try await hub.cursor(principal: principal(policy, "bob-token-0123456789abc")).cursor[bobLog] }
            #expect(try await held()?.rawValue == 1, "alice's push of bob's log came first")
            // A page of what the hub holds alone takes nothing (the receive check does not look
            // at frames at or below the held tip): bob's first frame with its signature altered
            // is judged as another user's, not equal to the frame held, and refused.
            let firstOfLog = try #require(FramePage.collect(from: bob, since: .empty, limits: PageLimits()).frames.first { FrameHeader(parsing: $0)?.origin == bobLog })
            let (heldCode, heldText) = try await RawHTTP.push(FramePage(frames: [CraftedFrames.withSignatureAltered(firstOfLog)], next: .empty, more: false), to: url, token: "bob-token-0123456789abc")
            #expect(heldCode == 403 && heldText.contains("belongs to another user"), "\(heldCode) \(heldText)")
            try writeShared("bob's 2")
            let pushed = try await TestSupport.pushed(bob, to: url, token: "bob-token-0123456789abc")
            #expect(pushed.refused.isEmpty, "\(pushed.refused)")
            #expect(try await held()?.rawValue == 2, "bob's share writes reached the hub")
            // Another user may not push new frames of it; bob's frame with its signature altered
            // is refused, nothing written.
            try writeShared("bob's 3")
            let next = try FramePage.collect(from: bob, since: .empty, limits: PageLimits()).frames.filter {
                FrameHeader(parsing: $0).map { $0.origin == bobLog && $0.baseSeq.rawValue == 3 } ?? false
            }
            #expect(next.count == 1)
            let (code, text) = try await RawHTTP.push(FramePage(frames: next, next: .empty, more: false), to: url, token: "carol-token-0123456789a")
            #expect(code == 403 && text.contains("belongs to another user"), "\(code) \(text)")
            let forged = CraftedFrames.withSignatureAltered(try #require(next.first))
            let (forgedCode, forgedText) = try await RawHTTP.push(FramePage(frames: [forged], next: .empty, more: false), to: url, token: "bob-token-0123456789abc")
            #expect(forgedCode == 422 && forgedText.contains("signature"), "\(forgedCode) \(forgedText)")
            #expect(try await held()?.rawValue == 2)
            try await pushThenPull(url, "bob-token-0123456789abc", bob)
            #expect(try await held()?.rawValue == 3)
            // alice, a member, still reads the whole log (as a member now, not as its holder).
            try await pushThenPull(url, "alice-token-0123456789a", alice)
            #expect(try LogReader(store: alice).tip(origin: bobLog).lastSeq.rawValue == 3)
        }
    }

    /// A writer whose share log another user began relaying (the first frame of an append of
    /// two, the append not whole) pushes that frame alone: left out as held, not refused, and
    /// its whole append then takes the log.
    @Test func aShareLogsWriterIsNotStoppedByAnAppendAnotherUserBeganRelaying() async throws {
        let cluster = try TestCluster()
        let dir = Dir()
        let (alice, bob, share, bobLog, policy) = try aliceSharingWithBob(dir)
        _ = try await Replication.pull(from: StoreTransport(store: alice), store: bob)  // bob joins the share
        var options = AppendOptions()
        options.frameEventsMax = 1
        try appendSharedItems(bob, share, ["bob's 0", "bob's 1"], options: options)
        let logFrames = try FramePage.collect(from: bob, since: .empty, limits: PageLimits()).frames.filter { FrameHeader(parsing: $0)?.origin == bobLog }
        #expect(logFrames.count == 2 && FrameHeader(parsing: logFrames[0])?.continues == true)
        let hub = try await node(cluster, policy)
        defer { hub.close() }
        try await withNode(hub) { url in
            try await pushThenPull(url, "alice-token-0123456789a", alice)
            let own = try FramePage.collect(from: bob, since: .empty, limits: PageLimits()).frames.filter { FrameHeader(parsing: $0)?.origin == bob.replicaID }
            var (code, text) = try await RawHTTP.push(FramePage(frames: own, next: .empty, more: false), to: url, token: "bob-token-0123456789abc")
            #expect(code == 200, "\(code) \(text)")
            (code, text) = try await RawHTTP.push(FramePage(frames: [logFrames[0]], next: .empty, more: false), to: url, token: "alice-token-0123456789a")
            #expect(code == 200, "alice relays the append's first frame: \(code) \(text)")
            (code, text) = try await RawHTTP.push(FramePage(frames: [logFrames[0]], next: .empty, more: false), to: url, token: "bob-token-0123456789abc")
            #expect(code == 200, "bob's frame the hub holds: \(code) \(text)")
            (code, text) = try await RawHTTP.push(FramePage(frames: logFrames, next: .empty, more: false), to: url, token: "bob-token-0123456789abc")
            #expect(code == 200, "\(code) \(text)")
            #expect(try await hub.cursor(principal: principal(policy, "bob-token-0123456789abc")).cursor[bobLog] == Seq(2))
        }
    }

    /// `evctl purge --share --hub`: refused for a live share; once the admin's deletion is
    /// pushed, the share's sealed logs are deleted from the database (the membership log stays,
    /// to carry the deletion on), and a member that has not synced the deletion pushes its sealed
    /// frames again without error: they are left out.
    @Test func aDeletedSharesCiphertextIsPurgedFromTheHubAndStaysOut() async throws {
        let cluster = try TestCluster()
        let dir = Dir()
        let aliceKey = ReplicaKey.generate(), bobKey = ReplicaKey.generate()
        let alice = try Store.create(at: dir.path + "/alice", signingKey: aliceKey)
        let bob = try Store.create(at: dir.path + "/bob", signingKey: bobKey)
        try edit(alice, 2, seed: 1, actor: "alice")
        try edit(bob, 2, seed: 2, actor: "bob")  // its own log makes bob's replica his user's on the hub
        let a = try LogAppender(store: alice)
        let share = try a.createShare(name: "purged share")
        try a.addMember(bobKey.memberCard, to: share)
        _ = try a.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("PURGESECRET"))])], to: share)
        try a.close()
        let policy = try AccessPolicy(json: Data("""
            {"principals":[
              {"name":"alice","token":"alice-token-0123456789a","user":"alice","push":"*","pull":true},
              {"name":"bob","token":"bob-token-0123456789abc","user":"bob","push":"*","pull":true}
            ]}
            """.utf8))
        let hub = try await node(cluster, policy)
        defer { hub.close() }
        let aliceLog = ReplicaID.shareLog(share, signingKey: aliceKey.publicKey), bobLog = ReplicaID.shareLog(share, signingKey: bobKey.publicKey)
        let members = ReplicaID.shareMembers(share, signingKey: aliceKey.publicKey)
        try await withNode(hub) { url in
            func sync(_ token: String, _ store: Store) async throws { try await pushThenPull(url, token, store) }
            try await sync("alice-token-0123456789a", alice)
            try await sync("bob-token-0123456789abc", bob)
            let b = try LogAppender(store: bob)
            _ = try b.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("BOBSECRET"))])], to: share)
            try b.close()
            try await sync("bob-token-0123456789abc", bob)
            let bobSees = try await hub.cursor(principal: principal(policy, "bob-token-0123456789abc")).cursor.origins
            #expect(Set([aliceLog, bobLog, members]).isSubset(of: bobSees))

            // A live share is not purged, and nothing is removed.
            await #expect(throws: HubError.self) { _ = try await PostgresHub.purgeShare(share, in: try cluster.database, logger: Self.logger) }
            #expect(try await hub.cursor(principal: principal(policy, "alice-token-0123456789a")).cursor.origins.contains(aliceLog))

            let again = try LogAppender(store: alice)
            try again.deleteShare(share)
            try again.close()
            try await sync("alice-token-0123456789a", alice)
            let r = try await PostgresHub.purgeShare(share, in: try cluster.database, logger: Self.logger)
            #expect(r.logs == 2 && r.frames == 2 && r.bytes > 0 && !r.alreadyPurged, "\(r)")
            let after = try await hub.cursor(principal: principal(policy, "alice-token-0123456789a")).cursor.origins
            #expect(after.contains(members) && !after.contains(aliceLog) && !after.contains(bobLog))

            // Bob has not synced the deletion, and writes on: his push is taken, his sealed frames left out.
            let c = try LogAppender(store: bob)
            _ = try c.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("LATE"))])], to: share)
            try c.close()
            let p = try HTTPTransport(url: url, token: "bob-token-0123456789abc", replica: bob.replicaID)
            _ = try await Replication.push(from: bob, to: p)
            await p.shutdown()
            #expect(!(try await hub.cursor(principal: principal(policy, "bob-token-0123456789abc")).cursor.origins.contains(bobLog)))
            let second = try await PostgresHub.purgeShare(share, in: try cluster.database, logger: Self.logger)
            #expect(second.frames == 0 && second.alreadyPurged)
        }
        // Nothing of the sealed logs is left in the database, whoever reads it.
        let (raw, task) = try cluster.rawClient()
        defer { task.cancel() }
        try await raw.withConnection { conn in
            try await conn.query("BEGIN", logger: Self.logger)
            try await conn.query("SELECT set_config('logbook.shares', \(share.description), true)", logger: Self.logger)
            var origins: Set<UUID> = []
            for try await o in try await conn.query("SELECT origin FROM logbook_frames WHERE share = \(share.rawValue)", logger: Self.logger).decode(UUID.self) {
                origins.insert(o)
            }
            try await conn.query("ROLLBACK", logger: Self.logger)
            #expect(origins == [members.rawValue])
            // A node (of any build) cannot claim a purged share's sealed log again.
            try await conn.query("BEGIN", logger: Self.logger)
            try await conn.query("SELECT set_config('logbook.writer', 'bob', true)", logger: Self.logger)
            await #expect(throws: (any Error).self) {
                try await conn.query("""
                    INSERT INTO logbook_origins (origin, owner, claimed_by, share) VALUES (\(bobLog.rawValue), 'bob', 'bob', \(share.rawValue))
                    """, logger: Self.logger)
            }
            try await conn.query("ROLLBACK", logger: Self.logger)
        }
    }

    /// Two nodes given the same frames at the same moment: both pushes succeed, the log is
    /// written once (the later push finds the frames held), whichever order the database picks.
    @Test func concurrentPushesOfTheSameFramesNeitherForkNorDuplicate() async throws {
        let cluster = try TestCluster()
        let dir = Dir()
        let laptop = try Store.create(at: dir.path + "/laptop")
        let policy = try onePrincipal("laptop", token: "laptop-token-0123456789", user: "dana")
        let (nodeA, nodeB) = try await (node(cluster, policy), node(cluster, policy))
        defer {
            nodeA.close()
            nodeB.close()
        }
        let who = try principal(policy, "laptop-token-0123456789")
        var since = ReplicationCursor.empty
        for round in 0..<12 {
            try edit(laptop, 15, seed: UInt64(100 + round), actor: "dana")
            let page = try FramePage.collect(from: laptop, since: since, limits: PageLimits()).encoded()
            async let x = nodeA.push(principal: who, body: page, peer: nil)
            async let y = nodeB.push(principal: who, body: page, peer: nil)
            let (ra, rb) = try await (x, y)
            #expect(ra.result.events + rb.result.events == 15, "round \(round)")
            #expect(ra.result.alreadyHeld + rb.result.alreadyHeld == ra.result.frames + rb.result.frames, "round \(round)")
            since = try laptop.cursor()
            #expect(ra.cursor == since && rb.cursor == since)
        }
        // Exactly the author's log, once: same frames, same order, no row twice.
        let pulled = try await nodeB.reservedPage(principal: who, since: nil, maxBytes: nil, maxFrames: "100000", peer: nil)
        pulled.reservation.release()
        let frames = try FramePage.decode(pulled.page.bytes).frames
        #expect(try frames == Workload.frames(laptop, laptop.replicaID))
        let (raw, task) = try cluster.rawClient()
        defer { task.cancel() }
        try await raw.withConnection { conn in
            try await conn.query("BEGIN", logger: Self.logger)
            try await conn.query("SELECT set_config('logbook.readers', 'dana', true)", logger: Self.logger)
            let rows = try await conn.query("SELECT count(*), count(DISTINCT first_seq) FROM logbook_frames", logger: Self.logger)
            for try await (n, distinct) in rows.decode((Int64, Int64).self) {
                #expect(Int(n) == frames.count && n == distinct)
            }
            try await conn.query("COMMIT", logger: Self.logger)
        }
    }

    /// A store of gina's appends, each of `count` sample events from `seed`, in frames of ten.
    func ginasStore(_ dir: Dir, appends: [(seed: UInt64, count: Int)]) throws -> Store {
        let src = try Store.create(at: dir.path + "/src")
        var o = AppendOptions()
        o.frameEventsMax = 10
        let w = try LogAppender(store: src, options: o)
        for (seed, count) in appends {
            _ = try w.append(SampleWorkload(seed: seed, count: count).enumerated().map { i, line in
                var m = try MutationParser.parse(line, lineNumber: i + 1)
                m.actor = "gina"
                return m
            })
        }
        try w.close()
        return src
    }

    /// An append pushed over two requests, through two nodes: held as it comes, visible (in
    /// cursors and pages) only once its last frame is in; the second push may start again from
    /// the committed point.
    @Test func anAppendOverTwoPushesIsVisibleOnlyWhole() async throws {
        let cluster = try TestCluster()
        let dir = Dir()
        let src = try ginasStore(dir, appends: [(0, 25), (1, 25)])
        let policy = try onePrincipal("gina", token: "gina-token-0123456789ab", user: "gina")
        let (nodeA, nodeB) = try await (node(cluster, policy), node(cluster, policy))
        defer {
            nodeA.close()
            nodeB.close()
        }
        let gina = try principal(policy, "gina-token-0123456789ab")
        let frames = try FramePage.collect(from: src, since: .empty, limits: PageLimits()).frames
        #expect(frames.count == 6)
        let first = try await nodeA.push(principal: gina, body: FramePage(frames: Array(frames.prefix(4)), next: .empty, more: false).encoded(), peer: nil)
        #expect(first.result.frames == 3 && first.result.incomplete == 1 && first.result.events == 25, "\(first.result)")
        // The answer shows the open append's frame this push carried (its next page goes on
        // after it); the cursor, what readers see, only the committed append.
        #expect(first.cursor[src.replicaID] == Seq(35))
        #expect(try await nodeB.cursor(principal: gina).cursor[src.replicaID] == Seq(25))
        let page = try await nodeB.reservedPage(principal: gina, since: nil, maxBytes: nil, maxFrames: nil, peer: nil)
        page.reservation.release()
        #expect(try FramePage.decode(page.page.bytes).frames == Array(frames.prefix(3)))
        let rest = try await nodeB.push(principal: gina, body: FramePage(frames: Array(frames.dropFirst(3)), next: .empty, more: false).encoded(), peer: nil)
        #expect(rest.result.frames == 2 && rest.result.alreadyHeld == 1 && rest.result.incomplete == 0, "\(rest.result)")
        #expect(rest.cursor[src.replicaID] == Seq(50))
        let all = try await nodeA.reservedPage(principal: gina, since: nil, maxBytes: nil, maxFrames: nil, peer: nil)
        all.reservation.release()
        #expect(try FramePage.decode(all.page.bytes).frames == frames)
        // A watch stream on one node is woken by a push through the other (PostgreSQL's
        // notifications: its own look at the database is made rare here, so only they can wake it).
        nodeB.watchInterval = .seconds(600)
        let stream = try nodeB.watch(principal: gina)
        let more = try Store.create(at: dir.path + "/more")
        try edit(more, 4, seed: 9, actor: "gina")
        let page2 = try FramePage.collect(from: more, since: .empty, limits: PageLimits()).encoded()
        let woken = try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                var first = true
                for await c in stream {
                    if first {
                        #expect(c[src.replicaID] == Seq(50) && c[more.replicaID] == Seq(0))
                        first = false
                        _ = try await nodeA.push(principal: gina, body: page2, peer: nil)
                    } else if c[more.replicaID] == Seq(4) {
                        return true
                    }
                }
                return false
            }
            group.addTask {
                try await Task.sleep(for: .seconds(30))
                return false
            }
            defer { group.cancelAll() }
            return try await group.next() ?? false
        }
        #expect(woken, "the watch stream was not woken by the push through the other node")
    }

    /// An append longer than a page is pushed whole in pages: the answer to a page that leaves
    /// the append open shows the pusher how far the hub holds it (no further than that page's
    /// own last frame of it), so the next page goes on after it. The hub answered only committed
    /// appends, so every page began again at the append's start and the push ended after three
    /// ("took nothing of three pages"): an `evctl append` of a large file never reached the hub.
    @Test func anAppendLongerThanAPageIsPushedInPages() async throws {
        let cluster = try TestCluster()
        let dir = Dir()
        let src = try ginasStore(dir, appends: [(3, 60)])
        let policy = try onePrincipal("gina", token: "gina-token-0123456789ab", user: "gina")
        let hub = try await node(cluster, policy)
        defer { hub.close() }
        let gina = try principal(policy, "gina-token-0123456789ab")
        let frames = try FramePage.collect(from: src, since: .empty, limits: PageLimits()).frames
        #expect(frames.count == 6)
        // The first two frames: held, not committed, and shown to this push as far as its own.
        let first = try await hub.push(principal: gina, body: FramePage(frames: Array(frames.prefix(2)), next: .empty, more: true).encoded(), peer: nil)
        #expect(first.result.incomplete == 2 && first.cursor[src.replicaID] == Seq(20), "\(first.result) \(first.cursor)")
        #expect(try await hub.cursor(principal: gina).cursor[src.replicaID] == Seq(0), "not committed: not in the cursor")
        // The rest through HTTP, two frames a page.
        let summary = try await withNode(hub) { url in
            let t = try HTTPTransport(url: url, token: "gina-token-0123456789ab", replica: src.replicaID)
            defer { Task { await t.shutdown() } }
            return try await Replication.push(from: src, to: t, limits: PageLimits(maxBytes: 1 << 20, maxFrames: 2))
        }
        #expect(summary.peerCursor[src.replicaID] == Seq(60) && summary.pages <= 3, "\(summary)")
        #expect(try await hub.cursor(principal: gina).cursor[src.replicaID] == Seq(60))
        let all = try await hub.reservedPage(principal: gina, since: nil, maxBytes: nil, maxFrames: nil, peer: nil)
        all.reservation.release()
        #expect(try FramePage.decode(all.page.bytes).frames == frames)
    }

    /// Row-level security binds the hub's own role: a query without a user set sees no frame,
    /// one with a user sees that user's only, and nothing may delete or rewrite a frame.
    @Test func rowLevelSecurityHoldsAgainstTheHubsOwnRole() async throws {
        let cluster = try TestCluster()
        let dir = Dir()
        let (erin, frank, policy) = try erinAndFrank(dir)
        // A wrong password is named at once, not waited out.
        var wrong = try cluster.database
        wrong.password = "not-the-password"
        do {
            _ = try await PostgresHub.open(wrong, policies: PolicySource(policy), logger: Self.logger)
            Issue.record("a wrong password was accepted")
        } catch let e as HubError {
            #expect(e.message.contains("password authentication failed") && !e.message.contains("not-the-password"))
        }
        let hub = try await node(cluster, policy)
        defer { hub.close() }
        try await pushBoth(erin, frank, to: hub, policy)
        let (raw, task) = try cluster.rawClient()
        defer { task.cancel() }
        func count(readers: String?, writer: String? = nil, _ sql: PostgresQuery) async throws -> Int64 {
            try await raw.withConnection { conn in
                try await conn.query("BEGIN", logger: Self.logger)
                if let readers { try await conn.query("SELECT set_config('logbook.readers', \(readers), true)", logger: Self.logger) }
                if let writer { try await conn.query("SELECT set_config('logbook.writer', \(writer), true)", logger: Self.logger) }
                var n: Int64 = -1
                do {
                    for try await c in try await conn.query(sql, logger: Self.logger).decode(Int64.self) { n = c }
                } catch {
                    _ = try? await conn.query("ROLLBACK", logger: Self.logger)
                    throw ServerError(String(reflecting: error))
                }
                try await conn.query("ROLLBACK", logger: Self.logger)
                return n
            }
        }
        #expect(try await count(readers: nil, "SELECT count(*) FROM logbook_frames") == 0)
        #expect(try await count(readers: nil, "SELECT count(*) FROM logbook_origins") == 0)
        #expect(try await count(readers: "erin", "SELECT count(*) FROM logbook_frames WHERE owner <> 'erin'") == 0)
        #expect(try await count(readers: "erin", "SELECT count(*) FROM logbook_frames") > 0)
        #expect(try await count(readers: "erin,frank", "SELECT count(DISTINCT owner) FROM logbook_frames") == 2)
        // No policy lets a frame be deleted or changed, not even by its owner.
        #expect(try await count(readers: "erin", writer: "erin", "WITH d AS (DELETE FROM logbook_frames RETURNING 1) SELECT count(*) FROM d") == 0)
        #expect(try await count(readers: "erin", writer: "erin", "WITH u AS (UPDATE logbook_frames SET frame = '\\x00' RETURNING 1) SELECT count(*) FROM u") == 0)
        // Writing as one user a frame row of another's origin is refused by the database.
        await #expect(throws: (any Error).self) {
            _ = try await count(readers: "erin", writer: "erin", "WITH i AS (INSERT INTO logbook_frames SELECT origin, 999999, 999999, 'frank', '\\x00' FROM logbook_origins LIMIT 1 RETURNING 1) SELECT count(*) FROM i")
        }
        // The role the hub connects as is an ordinary one.
        #expect(try await count(readers: nil, "SELECT count(*) FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole OR rolbypassrls)") == 0)
    }

    /// The cluster's superuser, straight to the hub's database.
    func superClient(_ cluster: TestCluster) throws -> (PostgresClient, Task<Void, Never>) {
        let d = try cluster.database
        let c = PostgresClient(configuration: .init(host: d.host, port: d.port, username: "postgres", password: "logbook-test", database: d.database, tls: .disable))
        return (c, Task { await c.run() })
    }

    /// A node checks the guarantees it relies on instead of trusting them: it refuses to start as
    /// a role row-level security does not bind (before, a superuser's node handed every user
    /// everyone's frames) or on tables whose RLS is not enabled and forced; and its reads filter
    /// by owner themselves, so RLS switched off behind a running node's back leaks nothing.
    @Test func aNodeChecksItsOwnGuaranteesAtStart() async throws {
        let cluster = try TestCluster()
        let dir = Dir()
        let (erin, frank, policy) = try erinAndFrank(dir)
        let (sup, task) = try superClient(cluster)
        defer { task.cancel() }
        func run(_ sql: String) async throws {
            try await sup.withConnection { conn in _ = try await conn.query(PostgresQuery(unsafeSQL: sql), logger: Self.logger) }
        }
        func refusal(_ url: String) async -> String {
            do {
                let h = try await PostgresHub.open(try HubDatabase(url: url), policies: PolicySource(policy), connectTimeoutSeconds: Self.connectTimeout, logger: Self.logger)
                h.close()
                return "started"
            } catch { return "\(error)" }
        }
        // A superuser is refused before it creates anything.
        let superURL = cluster.url.replacingOccurrences(of: "postgres://logbook:", with: "postgres://postgres:")
        #expect(await refusal(superURL).contains("is a superuser"))
        var tables: Int64 = -1
        try await sup.withConnection { conn in
            for try await n in try await conn.query("SELECT count(*) FROM pg_class WHERE relname = 'logbook_frames'", logger: Self.logger).decode(Int64.self) { tables = n }
        }
        #expect(tables == 0)
        // The ordinary role starts (and creates the schema); one with BYPASSRLS is refused.
        #expect(await refusal(cluster.url) == "started")
        try await run("CREATE ROLE bypasser LOGIN PASSWORD 'bypass-password' BYPASSRLS")
        let bypassURL = cluster.url.replacingOccurrences(of: "postgres://logbook:logbook-test@", with: "postgres://bypasser:bypass-password@")
        #expect(await refusal(bypassURL).contains("BYPASSRLS"))
        // Tables whose row-level security is not forced, or not enabled: refused.
        try await run("ALTER TABLE logbook_frames NO FORCE ROW LEVEL SECURITY")
        let notForced = await refusal(cluster.url)
        #expect(notForced.contains("logbook_frames") && notForced.contains("enabled but not forced"), "\(notForced)")
        try await run("ALTER TABLE logbook_frames FORCE ROW LEVEL SECURITY")
        try await run("ALTER TABLE logbook_origins DISABLE ROW LEVEL SECURITY")
        let disabled = await refusal(cluster.url)
        #expect(disabled.contains("table logbook_origins") && disabled.contains("has row-level security disabled"), "\(disabled)")
        try await run("ALTER TABLE logbook_origins ENABLE ROW LEVEL SECURITY")

        // A running node whose tables lose RLS behind its back: its own owner filter still holds.
        let hub = try await node(cluster, policy)
        defer { hub.close() }
        try await pushBoth(erin, frank, to: hub, policy)
        try await run("ALTER TABLE logbook_frames DISABLE ROW LEVEL SECURITY")
        try await run("ALTER TABLE logbook_origins DISABLE ROW LEVEL SECURITY")
        let p = try principal(policy, "erin-token-0123456789ab")
        let (_, cursor) = try await hub.cursor(principal: p)
        #expect(Set(cursor.origins) == [erin.replicaID])
        try await withNode(hub) { url in
            let (status, body, _) = try await RawHTTP.fetch(url + "/v1/frames?since=&page_version=2", token: "erin-token-0123456789ab")
            #expect(status == 200)
            let frames = try FramePage.decode(body).frames
            #expect(!frames.isEmpty && frames.allSatisfy { FrameHeader(parsing: $0)?.origin == erin.replicaID })
        }
    }

    @Test func aHubRefusesPrincipalsWithoutAUserAndBadAddresses() throws {
        let open = try AccessPolicy(json: Data(#"{"principals":[{"name":"relay","token":"relay-token-0123456789","push":"*","pull":true}]}"#.utf8))
        #expect(throws: HubError.self) { try HubPolicy.check(open) }
        #expect(throws: HubError.self) { try HubPolicy.check(.open) }
        for bad in ["mysql://u@h/d", "postgres://h/d", "postgres://u@h/", "postgres://u@h/d?sslmode=sometimes", "postgres://u@h/d?host=relative/dir",
                    "postgres://u@h:70000/d", "postgres://u@h/d?options=-c"] {
            #expect(throws: HubError.self, "\(bad)") { try HubDatabase(url: bad, environment: [:]) }
        }
        let d = try HubDatabase(url: "postgres://hub:secret@db.example:6543/logbook", environment: [:])
        #expect(d.port == 6543 && d.tls && d.password == "secret" && !d.description.contains("secret"))
        let local = try HubDatabase(url: "postgresql://hub@localhost/logbook?host=/run/pg", environment: ["PGPASSWORD": "pw"])
        #expect(local.socketDirectory == "/run/pg" && !local.tls && local.password == "pw")
    }
}
