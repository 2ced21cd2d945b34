import AsyncHTTPClient
import Domain
import EventLog
@testable import LogbookServer
import Foundation
import GRDB
import TestSupport
import NIOCore
import NIOHTTP1
import Projections
import Testing
@testable import Replicator

// The time limits in this file catch a follower that never ends, not a slow one: on two cores
// an async test can wait minutes for a thread while synchronous tests hold them (a CI run of
// 2026-12-02 had three such tests, seconds long alone, take 250 s against a limit of one minute).

/// Per-user scopes on one hub (docs/SECURITY.md, "Per-user scopes"): who owns an origin, what a
/// scoped principal may read and push, and the tokens file reloaded while the server runs.
@Suite(.serialized) struct ScopeTests {
    typealias Dir = TempDir

    func mutations(_ n: Int, seed: UInt64, actor: String?) -> [Mutation] { Workload.mutations(n, seed: seed, actor: actor) }

    func edit(_ store: Store, _ n: Int, seed: UInt64, actor: String?) throws { try Workload.edit(store, n, seed: seed, actor: actor) }

    func origins(_ store: Store) throws -> [ReplicaID] { try store.cursor().origins }

    func fetch(_ url: String, token: String) async throws -> (Int, [UInt8], String?) { try await RawHTTP.fetch(url, token: token) }

    func push(_ page: FramePage, to url: String, token: String) async throws -> (Int, String) { try await RawHTTP.push(page, to: url, token: token) }

    /// A group's claims are one transaction: each request sees the ones before it, a request
    /// naming an origin another user owns (or was just given) claims nothing, and what was
    /// claimed is on disk for the next server.
    @Test func claimsOfAGroupAreMadeTogetherInOrder() throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let a = ReplicaID.random(), b = ReplicaID.random(), c = ReplicaID.random(), d = ReplicaID.random()
        let owners = try OriginOwners(store: hub)
        #expect(try owners.claim([b], user: "bob", principal: "bob-phone") == OriginOwners.Claim(taken: nil, new: [b]))
        let claims = try owners.claim([
            .init(origins: [a, c], user: "alice", principal: "alice-laptop"),
            .init(origins: [d, b], user: "alice", principal: "alice-phone"),  // b is bob's: nothing of it
            .init(origins: [c], user: "carol", principal: "carol-laptop"),  // c was just given to alice
            .init(origins: [d, d], user: "carol", principal: "carol-phone"),
            .init(origins: [a], user: "alice", principal: "alice-laptop"),  // hers already: nothing new
        ])
        #expect(claims == [
            .init(taken: nil, new: [a, c]), .init(taken: b, new: []), .init(taken: c, new: []), .init(taken: nil, new: [d]), .init(taken: nil, new: []),
        ])
        #expect(owners.unconfirmedClaims == [a: "alice", b: "bob", c: "alice", d: "carol"])
        #expect(try OriginOwners(store: hub).unconfirmedClaims == owners.unconfirmedClaims, "on disk")
        // A refused push takes back only its own claim.
        try owners.release(claims[3], user: "carol")
        #expect(try OriginOwners(store: hub).unconfirmedClaims == [a: "alice", b: "bob", c: "alice"])
        #expect(try owners.confirm([.init(user: "alice", principal: "alice-laptop", origins: [a, c]), .init(user: "bob", principal: "bob-phone", origins: [b])]).sorted { $0.description < $1.description } == [a, b, c].sorted { $0.description < $1.description })
        #expect(owners.all == [a: "alice", b: "bob", c: "alice"])
        #expect(owners.origins(of: ["alice"]) == [a, c] && owners.origins(of: ["bob"]) == [b])
        #expect(try OriginOwners(store: hub).all == owners.all, "on disk")
    }

    /// A claim is not a right to read. A push claims its new origins before its frames are
    /// written; if the server stopped in between, or the claim of a refused push could not be
    /// taken back, the claim stayed, and its user read whatever frames of that origin came later
    /// by another way (an unscoped principal's push), and kept every other user from ever
    /// claiming the origin. A claim now opens nothing until confirmed (once its frames are
    /// durable), and one whose origin the store holds nothing of is taken back.
    @Test func claimsOpenNothingUntilConfirmedAndAbandonedOnesAreTakenBack() throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let a = ReplicaID.random(), b = ReplicaID.random(), c = ReplicaID.random()
        let owners = try OriginOwners(store: hub)
        _ = try owners.claim([a, b], user: "carol", principal: "carol")
        _ = try owners.claim([c], user: "bob", principal: "bob")
        for o in [try OriginOwners(store: hub), owners] {
            #expect(o.owner(of: a) == nil && o.claimant(of: a) == "carol" && o.isUnconfirmed(a))
            #expect(o.origins(of: ["carol"]).isEmpty && o.all.isEmpty)
        }
        #expect(try OriginOwners.read(store: hub).isEmpty, "the pages attribute nothing to a claim")
        // Confirmed only for its own claimant, only where unconfirmed.
        #expect(try owners.confirm([a], user: "bob").isEmpty)
        #expect(try owners.confirm([c], user: "bob") == [c])
        #expect(try owners.confirm([c], user: "bob").isEmpty)
        #expect(owners.owner(of: c) == "bob" && owners.origins(of: ["bob"]) == [c])
        // Taken back when the store holds nothing of the origin; kept (unconfirmed) when it does;
        // a confirmed claim never (the logs of a share purged here hold nothing and keep their owner).
        #expect(try owners.releaseAbandoned { $0 == b } == [a: "carol"])
        #expect(owners.claimant(of: a) == nil && owners.claimant(of: b) == "carol" && owners.owner(of: b) == nil)
        try owners.release(OriginOwners.Claim(taken: nil, new: [c]), user: "bob")
        let reread = try OriginOwners(store: hub)
        #expect(reread.all == [c: "bob"] && reread.unconfirmedClaims == [b: "carol"])
        #expect(try OriginOwners.read(store: hub) == [c: "bob"])
        // Another user may claim an origin once its abandoned claim is taken back.
        #expect(try reread.claim([a], user: "alice", principal: "alice").new == [a])
    }

    /// Two serving processes on one store keep their own records of the file. A claim of an
    /// origin the other process claimed meanwhile (not known here) was refused with an error at
    /// every try, since its row was in the way; it now takes the file's row in and is planned
    /// again. A confirmation whose claim the other process took back, and another user claimed
    /// since, confirms nothing and takes the winner's row in.
    @Test func aSecondServingProcessesClaimsAreTakenInNotFailedOn() throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let a = ReplicaID.random(), b = ReplicaID.random(), c = ReplicaID.random()
        let one = try OriginOwners(store: hub), two = try OriginOwners(store: hub)
        _ = try one.claim([a], user: "bob", principal: "bob")
        try one.confirm([a], user: "bob")
        #expect(try two.claim([ReplicaID](arrayLiteral: a, b), user: "alice", principal: "alice") == OriginOwners.Claim(taken: a, new: []))
        #expect(two.owner(of: a) == "bob" && two.claimant(of: b) == nil)
        #expect(try two.claim([ReplicaID](arrayLiteral: a), user: "bob", principal: "bob") == OriginOwners.Claim(taken: nil, new: []))
        // two holds bob's unconfirmed claim of c; one takes it back (nothing of c is held) and
        // alice claims c there; two's confirmation of it confirms nothing.
        _ = try two.claim([c], user: "bob", principal: "bob")
        let three = try OriginOwners(store: hub)
        #expect(try three.releaseAbandoned { _ in false } == [c: "bob"])
        #expect(try three.claim([c], user: "alice", principal: "alice").new == [c])
        #expect(try two.confirm([c], user: "bob").isEmpty)
        #expect(two.claimant(of: c) == "alice" && two.owner(of: c) == nil)
        #expect(try OriginOwners(store: hub).unconfirmedClaims == [c: "alice"])
        // A sweep brings a process's unconfirmed claims in step with the file.
        _ = try one.claim([b], user: "carol", principal: "carol")
        #expect(two.claimant(of: b) == nil)
        #expect(try two.releaseAbandoned { _ in true }.isEmpty)
        #expect(two.claimant(of: b) == "carol" && two.claimant(of: c) == "alice")
    }

    /// An origin an unscoped principal is in the middle of pushing (an append over several pages,
    /// not whole yet) is held: a scoped user may not claim it (else the claim stayed over the
    /// relay's frames once the append was whole).
    @Test func anOriginWithAnOpenAppendCannotBeClaimed() async throws {
        let dir = Dir()
        let (hub, _, bob, _, _) = try Self.threeUsers(dir)
        try Self.appendInOne(bob, mutations(12, seed: 9, actor: nil))
        let firstPage = try FramePage.collect(from: bob, since: .empty, limits: PageLimits(maxBytes: 1 << 20, maxFrames: 1))
        try await withServer(hub, configure: { $0.policy = Self.withAdmin }) { url in
            var (code, text) = try await push(firstPage, to: url, token: "admin-token-0123456789a")
            #expect(code == 200, "\(text)")
            (code, text) = try await push(firstPage, to: url, token: "bob-token-0123456789abc")
            #expect(code == 403 && text.contains("owned by no user"), "\(code) \(text)")
        }
        #expect(try OriginOwners(store: hub).unconfirmedClaims.isEmpty)
    }

    /// Expects the server at `url` to show `token`'s principal `origins` and no others: in a page
    /// from the start, and in its cursor.
    static func expectServedOnly(_ origins: Set<ReplicaID>, at url: String, to token: String) async throws {
        let (status, body, _) = try await RawHTTP.fetch(url + "/v1/frames?since=&page_version=2", token: token)
        let shown = try Set(FramePage.decode(body).frames.compactMap { FrameHeader(parsing: $0)?.origin })
        #expect(status == 200 && shown == origins, "served \(shown)")
        let (_, answer, _) = try await RawHTTP.fetch(url + "/v1/cursor", token: token)
        let cursor = try ReplicationCursor(token: JSONDecoder().decode(Wire.CursorAnswer.self, from: Data(answer)).cursor)
        #expect(Set(cursor.origins) == origins, "the cursor shows \(cursor.origins)")
    }

    /// `mutations` appended to `store` as one append, four events a frame (an append over several
    /// frames, which a page may cut).
    static func appendInOne(_ store: Store, _ mutations: [Mutation]) throws {
        var o = AppendOptions()
        o.frameEventsMax = 4
        let w = try LogAppender(store: store, options: o)
        defer { try? w.close() }
        _ = try w.append(mutations)
    }

    /// A share `owner` makes, with `member`'s replica as a member, holding an item per title (each
    /// its own append).
    static func share(of owner: Store, with member: Store, titles: [String]) throws -> ShareID {
        let key = try #require(try member.signingKey())
        let a = try LogAppender(store: owner)
        defer { try? a.close() }
        let share = try a.createShare(name: "team")
        try a.addMember(key.memberCard, to: share)
        for t in titles { _ = try a.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text(t))])], to: share) }
        return share
    }

    /// A new store at `path` with `store`'s replica id and key: it writes frames of the same
    /// origin, of other events.
    static func twin(of store: Store, at path: String) throws -> Store {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: store.path + "/store.json", toPath: path + "/store.json")
        try FileManager.default.copyItem(atPath: store.layout.signingKey, toPath: path + "/replica.key")
        return try Store.open(at: path)
    }

    /// `threeUsers`, with a share of alice's holding one item and bob's replica a member, bob's
    /// own event, and bob's log in the share (not written yet).
    static func bobInAlicesShare(_ dir: Dir) throws -> (hub: Store, alice: Store, bob: Store, share: ShareID, bobLog: ReplicaID, policy: AccessPolicy) {
        let (hub, alice, bob, _, policy) = try threeUsers(dir)
        let share = try Self.share(of: alice, with: bob, titles: ["shared 0"])
        try Workload.edit(bob, 1, seed: 3, actor: "bob")
        let bobLog = ReplicaID.shareLog(share, signingKey: try #require(try bob.signingKey()).publicKey)
        return (hub, alice, bob, share, bobLog, policy)
    }

    /// bob writes an item titled `title` to `share`, then pushes as bob to `url`: nothing refused.
    static func bobWritesAndPushes(_ bob: Store, _ share: ShareID, _ title: String, to url: String) async throws {
        try appendSharedItems(bob, share, [title])
        let pushed = try await TestSupport.pushed(bob, to: url, token: "bob-token-0123456789abc")
        #expect(pushed.refused.isEmpty, "\(title): \(pushed.refused)")
    }

    /// `threeUsers`' hub, alice and bob; a share of alice's with bob's replica a member, holding
    /// one item; bob's own event; and principals alice, which may push any origin, and bob,
    /// which may push only bob's replica's origin.
    static func bobBehindAPushList(_ dir: Dir) throws -> (hub: Store, alice: Store, bob: Store, share: ShareID, policy: AccessPolicy) {
        let (hub, alice, bob, _, _) = try threeUsers(dir)
        let policy = try AccessPolicy(json: Data("""
            {"principals":[
              {"name":"alice","token":"alice-token-0123456789a","user":"alice","push":"*","pull":true},
              {"name":"bob","token":"bob-token-0123456789abc","user":"bob","push":["\(bob.replicaID)"],"pull":true}
            ]}
            """.utf8))
        let share = try Self.share(of: alice, with: bob, titles: ["shared 0"])
        try Workload.edit(bob, 1, seed: 3, actor: "bob")
        return (hub, alice, bob, share, policy)
    }

    /// `threeUsers`' principals and an unscoped one, `admin`.
    static let withAdmin = try! AccessPolicy(json: Data("""
        {"principals":[
          {"name":"alice","token":"alice-token-0123456789a","user":"alice","push":"*","pull":true},
          {"name":"bob","token":"bob-token-0123456789abc","user":"bob","push":"*","pull":true},
          {"name":"carol","token":"carol-token-0123456789a","user":"carol","push":"*","pull":true},
          {"name":"admin","token":"admin-token-0123456789a","push":"*","pull":true}
        ]}
        """.utf8))

    /// A file written before claims were confirmed (no `confirmed` column) holds owners: its
    /// claims were all made by pushes whose frames came after them. Read as such, also
    /// read-only, and given the column when a server opens it.
    @Test func anOwnersFileOfTheFirstVersionHoldsConfirmedOwners() throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let a = ReplicaID.random()
        let q = try SQLiteFactory.queue(hub.layout.originOwners, .ours, SQLiteFactory.configuration(.ours))
        try q.write { db in
            try db.execute(sql: """
                CREATE TABLE owners (
                  origin TEXT PRIMARY KEY NOT NULL, user TEXT NOT NULL, principal TEXT NOT NULL, claimed_at TEXT NOT NULL
                ) STRICT
                """)
            try db.execute(sql: "INSERT INTO owners VALUES (?, 'alice', 'alice-laptop', '2026-11-01T00:00:00.000Z')", arguments: [a.description])
        }
        try q.close()
        #expect(try OriginOwners.read(store: hub) == [a: "alice"])
        let owners = try OriginOwners(store: hub)
        #expect(owners.owner(of: a) == "alice" && owners.origins(of: ["alice"]) == [a])
        #expect(try owners.releaseAbandoned { _ in false }.isEmpty)
        #expect(try OriginOwners(store: hub).all == [a: "alice"])
        // A row the file may not hold is reported, naming the file.
        let q2 = try SQLiteFactory.queue(hub.layout.originOwners, .ours, SQLiteFactory.configuration(.ours))
        try q2.write { db in try db.execute(sql: "PRAGMA ignore_check_constraints = ON; UPDATE owners SET confirmed = 7; PRAGMA ignore_check_constraints = OFF") }
        try q2.close()
        #expect(throws: ServerError.self) { try OriginOwners(store: hub) }
        do { _ = try OriginOwners.read(store: hub) } catch { #expect("\(error)".contains(OriginOwners.fileName) && "\(error)".contains("confirmed")) }
        // A file on a shared path may hold anything: values of another type (a typed read of
        // them trapped) and an origin on two rows are reported, naming the file.
        for rows in ["('\(a)', 'alice', 'p', 't', 'yes')", "('\(a)', 7, 'p', 't', 1)", "(X'00', 'alice', 'p', 't', 1)", "('\(a)', 'alice', 'p', 't', 1), ('\(a)', 'bob', 'p', 't', 1)"] {
            try FileManager.default.removeItem(atPath: hub.layout.originOwners)
            for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: hub.layout.originOwners + suffix) }
            let q3 = try SQLiteFactory.queue(hub.layout.originOwners, .ours, SQLiteFactory.configuration(.ours))
            try q3.write { db in
                try db.execute(sql: "CREATE TABLE owners (origin, user, principal, claimed_at, confirmed)")
                try db.execute(sql: "INSERT INTO owners VALUES \(rows)")
            }
            try q3.close()
            #expect(throws: ServerError.self, "\(rows)") { try OriginOwners(store: hub) }
            #expect(throws: ServerError.self, "\(rows)") { try OriginOwners.read(store: hub) }
        }
    }

    /// The same, end to end: claims left unconfirmed on disk (as a server stopped between a claim
    /// and its frames leaves them) open nothing to their users, and one whose frames never came
    /// keeps nobody from pushing the origin; a user's push confirms its claims, and one whose
    /// frames are held but whose confirmation was lost is confirmed when its replica pushes its
    /// log again and sends the frame at the held tip.
    @Test func claimsLeftUnconfirmedOpenNothing() async throws {
        let dir = Dir()
        let (hub, alice, bob, carol, _) = try Self.threeUsers(dir)
        let policy = Self.withAdmin
        try edit(alice, 3, seed: 1, actor: nil)  // no actor: a page of it passes the actor check
        try edit(bob, 3, seed: 2, actor: "bob")
        try edit(bob, 2, seed: 4, actor: "bob")  // two frames: pushed again a frame a page, the held tip is on the second
        try edit(carol, 3, seed: 3, actor: "carol")
        // The hub holds alice's frames (an unscoped principal pushed them), and carol holds an
        // unconfirmed claim of them; carol also holds one of bob's replica, of which the hub holds nothing.
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try await Self.sync(url, "admin-token-0123456789a", alice)
        }
        let left = try OriginOwners(store: hub)
        _ = try left.claim([alice.replicaID, bob.replicaID], user: "carol", principal: "carol")
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            // bob's push is not refused: carol's claim of his replica was abandoned.
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            try await Self.sync(url, "carol-token-0123456789a", carol)
            #expect(Set(try origins(carol)) == [carol.replicaID])
            try await Self.expectServedOnly([carol.replicaID], at: url, to: "carol-token-0123456789a")
        }
        let owners = try OriginOwners(store: hub)
        #expect(owners.all == [bob.replicaID: "bob", carol.replicaID: "carol"])
        #expect(owners.unconfirmedClaims == [alice.replicaID: "carol"], "held frames keep the claim, unconfirmed")
        // bob's claim as a lost confirmation leaves it: his frames held, the claim not confirmed.
        let q = try SQLiteFactory.queue(hub.layout.originOwners, .ours, SQLiteFactory.configuration(.ours))
        try await q.write { db in try db.execute(sql: "UPDATE owners SET confirmed = 0 WHERE origin = ?", arguments: [bob.replicaID.description]) }
        try q.close()
        let bob2 = try Store.create(at: dir.path + "/bob2")
        try edit(bob2, 1, seed: 5, actor: "bob")
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try await Self.sync(url, "bob-token-0123456789abc", bob2)
            #expect(Set(try origins(bob2)) == [bob2.replicaID], "bob's claim opens nothing while unconfirmed")
            // Another user's unconfirmed claim whose frames are held refuses a page of them, held
            // frames included (answered from the index, a page of made-up headers would learn how
            // far the origin goes).
            let (code, text) = try await push(try FramePage.collect(from: alice, since: .empty, limits: PageLimits()), to: url, token: "bob-token-0123456789abc")
            #expect(code == 403 && text.contains("belongs to another user"), "\(code) \(text)")
            // bob's replica pushes its log again, one frame a page: its frames are held, and the
            // one at the held tip, sent byte for byte, confirms the claim (the sender holds the chain).
            try await Self.push(url, "bob-token-0123456789abc", bob, limits: PageLimits(maxBytes: 1 << 20, maxFrames: 1))
            #expect(try OriginOwners(store: hub).owner(of: bob.replicaID) == "bob")
            try await Self.sync(url, "bob-token-0123456789abc", bob2)
            #expect(Set(try origins(bob2)) == [bob.replicaID, bob2.replicaID])
        }
        #expect(try OriginOwners(store: hub).all == [bob.replicaID: "bob", bob2.replicaID: "bob", carol.replicaID: "carol"])
    }

    /// The first append of a new origin may take several pages; its claim is confirmed only when
    /// the append is whole. Meanwhile each answer shows the pusher how far its own frames got
    /// (else it sent its first page again and again, and gave up), and the claim keeps other
    /// users off the origin, an append still open counting as held.
    @Test func aFirstAppendOverSeveralPagesClaimsItsOriginWhenWhole() async throws {
        let dir = Dir()
        let (hub, alice, bob, _, policy) = try Self.threeUsers(dir)
        try Self.appendInOne(bob, mutations(20, seed: 7, actor: nil))  // five frames; no actor, as a history written before joining
        let bob2 = try Store.create(at: dir.path + "/bob2")
        try edit(bob2, 1, seed: 8, actor: "bob")
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            // The first two frames alone: the append is open, the claim unconfirmed.
            let firstPage = try FramePage.collect(from: bob, since: .empty, limits: PageLimits(maxBytes: 1 << 20, maxFrames: 2))
            var (code, text) = try await push(firstPage, to: url, token: "bob-token-0123456789abc")
            #expect(code == 200, "\(text)")
            let answer = try JSONDecoder().decode(Wire.PushAnswer.self, from: Data(text.utf8))
            #expect(try ReplicationCursor(token: answer.cursor)[bob.replicaID] == Seq(8), "the answer shows how far bob's own frames got: \(text)")
            let owners = try OriginOwners(store: hub)
            #expect(owners.claimant(of: bob.replicaID) == "bob" && owners.owner(of: bob.replicaID) == nil)
            // alice's push of the same frames meets bob's claim: not taken back (its append is open).
            (code, text) = try await push(firstPage, to: url, token: "alice-token-0123456789a")
            #expect(code == 403 && text.contains("belongs to another user"), "\(code) \(text)")
            // The whole push, two frames a page, goes on from where each answer says.
            try await Self.push(url, "bob-token-0123456789abc", bob, limits: PageLimits(maxBytes: 1 << 20, maxFrames: 2))
            #expect(try OriginOwners(store: hub).owner(of: bob.replicaID) == "bob")
            try await Self.sync(url, "bob-token-0123456789abc", bob2)
            #expect(Set(try origins(bob2)) == [bob.replicaID, bob2.replicaID])
            #expect(try Workload.dump(bob2).count > 20)
            try await Self.sync(url, "alice-token-0123456789a", alice)
            #expect(try origins(alice).isEmpty)
        }
    }

    /// An append still open (its first pages received, its last not yet) is shown in the answers
    /// to the pushes that carried it, as far as each one's own last frame of it, so that they go
    /// on after it, and in no other push's answer: its writer may go quiet and have it dropped,
    /// and a client told of it would take frames never made durable here as held.
    @Test func anOpenAppendIsShownOnlyToPushesOfItsOrigin() async throws {
        let dir = Dir()
        let (hub, alice, bob, _, _) = try Self.threeUsers(dir)
        try Self.appendInOne(bob, mutations(20, seed: 7, actor: nil))  // five frames
        try edit(alice, 1, seed: 8, actor: nil)
        try await withServer(hub, configure: { $0.policy = Self.withAdmin }) { url in
            let firstPage = try FramePage.collect(from: bob, since: .empty, limits: PageLimits(maxBytes: 1 << 20, maxFrames: 2))
            var (code, text) = try await push(firstPage, to: url, token: "admin-token-0123456789a")
            #expect(code == 200, "\(text)")
            var answer = try JSONDecoder().decode(Wire.PushAnswer.self, from: Data(text.utf8))
            #expect(try ReplicationCursor(token: answer.cursor)[bob.replicaID] == Seq(8), "the pusher goes on after its open append: \(text)")
            let other = try FramePage.collect(from: alice, since: .empty, limits: PageLimits())
            (code, text) = try await push(other, to: url, token: "admin-token-0123456789a")
            #expect(code == 200, "\(text)")
            answer = try JSONDecoder().decode(Wire.PushAnswer.self, from: Data(text.utf8))
            let c = try ReplicationCursor(token: answer.cursor)
            #expect(c[alice.replicaID].rawValue > 0 && c[bob.replicaID] == Seq(0), "another push is shown only what is durable: \(text)")
            // A push of the open append's first frame alone (another relay of the same log) is
            // shown it as far as its own frame, not the rest of the open append.
            (code, text) = try await push(FramePage(frames: [firstPage.frames[0]], next: ReplicationCursor(), more: false), to: url, token: "admin-token-0123456789a")
            #expect(code == 200, "\(text)")
            answer = try JSONDecoder().decode(Wire.PushAnswer.self, from: Data(text.utf8))
            #expect(try ReplicationCursor(token: answer.cursor)[bob.replicaID] == Seq(4), "shown up to its own last frame: \(text)")
        }
    }

    /// A frame at an origin's held tip proves its sender holds the chain only when it is the
    /// held frame byte for byte: a frame of the same seq written by another store (same origin,
    /// other events) proves nothing.
    @Test func onlyTheHeldTipFrameByteForByteProvesTheChain() throws {
        let dir = Dir()
        let held = try Store.create(at: dir.path + "/held")
        try edit(held, 3, seed: 1, actor: nil)
        let twinStore = try Self.twin(of: held, at: dir.path + "/twin")
        try edit(twinStore, 3, seed: 2, actor: nil)
        let reader = LogReader(store: held)
        let mine = try FramePage.collect(from: held, since: .empty, limits: PageLimits()).frames
        let theirs = try FramePage.collect(from: twinStore, since: .empty, limits: PageLimits()).frames
        #expect(try FrameHeader(parsing: #require(theirs.last))?.lastSeq == reader.tip(origin: held.replicaID).lastSeq)
        #expect(ReplicaEndpoint.sends(mine, heldTipOf: held.replicaID, reader))
        #expect(!ReplicaEndpoint.sends(Array(mine.dropLast()), heldTipOf: held.replicaID, reader))
        #expect(!ReplicaEndpoint.sends(theirs, heldTipOf: held.replicaID, reader))
        #expect(!ReplicaEndpoint.sends(mine, heldTipOf: ReplicaID.random(), reader))
    }

    /// The pages read the owners' file while pushes claim origins in it: a claim that opens the
    /// file while a reader holds it (here a new file, still in rollback mode, which the claim's
    /// connection turns to WAL) waits for the reader instead of failing "database is locked".
    @Test func aClaimWaitsForAReaderOfTheOwnersFile() throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let path = hub.layout.originOwners
        var c = SQLiteFactory.configuration(.ours)
        c.allowsUnsafeTransactions = true  // its read transaction outlives one access
        let reader = try SQLiteFactory.queue(path, .ours, c)
        try reader.write { db in
            try db.execute(sql: """
                CREATE TABLE owners (
                  origin TEXT PRIMARY KEY NOT NULL, user TEXT NOT NULL, principal TEXT NOT NULL, claimed_at TEXT NOT NULL
                ) STRICT
                """)
        }
        // A read transaction open on the file, ended from another thread a moment later.
        try reader.inDatabase { db in
            try db.execute(sql: "BEGIN")
            _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM owners")
        }
        let ended = DispatchSemaphore(value: 0)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(300)) {
            try? reader.inDatabase { db in try db.execute(sql: "COMMIT") }
            ended.signal()
        }
        defer { ended.wait() }
        let owners = try OriginOwners(store: hub)
        let a = ReplicaID.random()
        #expect(try owners.claim([a], user: "alice", principal: "alice-laptop") == OriginOwners.Claim(taken: nil, new: [a]))
        #expect(try owners.confirm([a], user: "alice") == [a])
        #expect(try OriginOwners.read(store: hub) == [a: "alice"])
    }

    @Test func scopedPrincipalsReadOnlyTheirUsersOriginsAndPushOnlyTheirOwn() async throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let alice1 = try Store.create(at: dir.path + "/alice1")
        let alice2 = try Store.create(at: dir.path + "/alice2")
        let alice3 = try Store.create(at: dir.path + "/alice3")
        let bob1 = try Store.create(at: dir.path + "/bob1")
        let carol1 = try Store.create(at: dir.path + "/carol1")
        try edit(hub, 10, seed: 1, actor: nil)  // the hub's own origin: nobody's
        try edit(alice1, 30, seed: 2, actor: "alice")
        try edit(alice2, 20, seed: 3, actor: "alice")
        try edit(alice3, 5, seed: 4, actor: nil)
        try edit(bob1, 25, seed: 5, actor: "bob")
        try edit(carol1, 15, seed: 6, actor: "carol")
        let policy = try AccessPolicy(json: Data("""
            {"principals":[
              {"name":"alice-laptop","token":"alice-laptop-token-0123","user":"alice","push":["\(alice1.replicaID)","\(alice3.replicaID)"],"pull":true},
              {"name":"alice-phone","token":"alice-phone-token-01234","user":"alice","push":["\(alice2.replicaID)"],"pull":true},
              {"name":"bob","token":"bob-token-0123456789abc","user":"bob","push":"*","pull":true},
              {"name":"carol","token":"carol-token-0123456789a","user":"carol","read_users":["alice"],"push":["\(carol1.replicaID)"],"pull":true},
              {"name":"admin","token":"admin-token-0123456789a","push":"*","pull":true}
            ]}
            """.utf8))
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            func transport(_ token: String, _ store: Store) throws -> HTTPTransport {
                try HTTPTransport(url: url, token: token, replica: store.replicaID)
            }
            func sync(_ token: String, _ store: Store) async throws {
                let t = try transport(token, store)
                _ = try await Replication.push(from: store, to: t)
                _ = try await Replication.pull(from: t, store: store, lockWait: 5)
                await t.shutdown()
            }
            try await sync("alice-laptop-token-0123", alice1)
            try await sync("bob-token-0123456789abc", bob1)
            try await sync("alice-phone-token-01234", alice2)
            try await sync("carol-token-0123456789a", carol1)
            try await sync("alice-laptop-token-0123", alice1)
            // Each origin belongs to the user of the principal that first pushed it.
            #expect(try OriginOwners(store: hub).all == [alice1.replicaID: "alice", alice2.replicaID: "alice", bob1.replicaID: "bob", carol1.replicaID: "carol"])
            // A replica holds its users' origins and nothing else: not the hub's own, not another user's.
            #expect(Set(try origins(alice1)) == Set([alice1.replicaID, alice2.replicaID]))
            #expect(Set(try origins(alice2)) == Set([alice1.replicaID, alice2.replicaID]))
            #expect(Set(try origins(bob1)) == Set([bob1.replicaID]))
            #expect(Set(try origins(carol1)) == Set([carol1.replicaID, alice1.replicaID, alice2.replicaID]))  // read_users: alice
            #expect(try Workload.dump(alice1) == Workload.dump(alice2))
            // A principal without a user reads every origin, as before scopes.
            let admin = try Store.create(at: dir.path + "/admin")
            let t = try transport("admin-token-0123456789a", admin)
            _ = try await Replication.pull(from: t, store: admin, lockWait: 5)
            await t.shutdown()
            #expect(Set(try origins(admin)) == Set([hub.replicaID, alice1.replicaID, alice2.replicaID, bob1.replicaID, carol1.replicaID]))

            // Cursors, pages of both versions, metrics: nothing of another user.
            let bobOnly = [bob1.replicaID.description, carol1.replicaID.description]
            for (token, user) in [("alice-laptop-token-0123", "alice"), ("bob-token-0123456789abc", "bob")] {
                let c = try transport(token, alice1)
                let cursor = try await c.cursor()
                await c.shutdown()
                let expected: Set<ReplicaID> = user == "alice" ? [alice1.replicaID, alice2.replicaID] : [bob1.replicaID]
                #expect(Set(cursor.origins) == expected, "\(user)")
                for version in ["", "&page_version=2"] {
                    let (status, body, holder) = try await fetch(url + "/v1/frames?since=" + version, token: token)
                    #expect(status == 200)
                    let page = try FramePage.decode(body)
                    #expect(!page.frames.isEmpty)
                    let held = Set(page.frames.compactMap { FrameHeader(parsing: $0)?.origin })
                    #expect(held.isSubset(of: expected), "\(user) \(version)")
                    #expect(Set((page.next ?? .empty).origins).isSubset(of: expected))
                    #expect(Set(try ReplicationCursor(token: try #require(holder)).origins) == expected)
                }
            }
            // A since cursor naming other users' origins reads nothing of them either.
            let foreign = ReplicationCursor([bob1.replicaID: Seq(1), hub.replicaID: Seq(1)]).token
            let (status, body, _) = try await fetch(url + "/v1/frames?since=\(foreign)&page_version=2", token: "alice-laptop-token-0123")
            #expect(status == 200)
            #expect(try FramePage.decode(body).frames.allSatisfy { FrameHeader(parsing: $0).map { $0.origin == alice1.replicaID || $0.origin == alice2.replicaID } == true })
            var r = try await RawHTTP.request(url + "/metrics", token: "alice-laptop-token-0123")
            #expect(r.status == 200)
            #expect(r.body.contains("logbook_cursor_seq{origin=\"\(alice1.replicaID)\"}"))
            #expect(r.body.contains("alice-phone/\(alice2.replicaID)"))
            for hidden in bobOnly + [hub.replicaID.description, "bob/", "carol/", "admin/"] { #expect(!r.body.contains(hidden), "\(hidden)") }
            r = try await RawHTTP.request(url + "/metrics", token: "admin-token-0123456789a")
            #expect(r.body.contains("logbook_cursor_seq{origin=\"\(bob1.replicaID)\"}") && r.body.contains("bob/\(bob1.replicaID)"))
            // A snapshot holds every user's rows: refused to a scoped principal.
            r = try await RawHTTP.request(url + "/v1/snapshot", token: "bob-token-0123456789abc")
            #expect(r.status == 403 && r.body.contains("snapshot"))

            // Pushing another user's origin: 403, even with the right to push any origin; nothing written.
            try edit(alice1, 5, seed: 7, actor: "alice")
            let before = try hub.cursor()
            let newAlice = try FramePage.collect(from: alice1, since: before, limits: PageLimits())
            var (code, text) = try await push(newAlice, to: url, token: "bob-token-0123456789abc")
            #expect(code == 403 && text.contains("belongs to another user") && text.contains("\"code\":\"forbidden\""))
            #expect(!text.contains("alice\""))  // the owner is not named
            #expect(try hub.cursor() == before)
            // Frames of another user's origin the server holds already: refused as well, not left
            // out as held (only a share's log is), so the answer's cursor tells nothing of how
            // far that origin goes here.
            let heldAlice = try FramePage.collect(from: alice1, since: .empty, limits: PageLimits(maxBytes: 1 << 20, maxFrames: 1))
            (code, text) = try await push(heldAlice, to: url, token: "bob-token-0123456789abc")
            #expect(code == 403 && text.contains("belongs to another user"), "\(code) \(text)")
            #expect(try hub.cursor() == before)
            // Events whose actor is not the principal's user, or that have none: 403, nothing written, nothing claimed.
            let imposter = try Store.create(at: dir.path + "/imposter")
            try edit(imposter, 3, seed: 8, actor: "bob")
            let forged = try FramePage.collect(from: imposter, since: .empty, limits: PageLimits())
            (code, text) = try await push(forged, to: url, token: "admin-token-0123456789a")  // unscoped: trusted, as before
            #expect(code == 200)
            // Events that name no actor (written before the replica joined a scoped server) are
            // accepted in an origin the user owns or claims, attributed to that user by ownership.
            (code, text) = try await push(try FramePage.collect(from: alice3, since: .empty, limits: PageLimits()), to: url, token: "alice-laptop-token-0123")
            #expect(code == 200, "\(text)")
            #expect(try hub.cursor()[alice3.replicaID] == Seq(5))
            #expect(try OriginOwners(store: hub).owner(of: alice3.replicaID) == "alice")
            // An actor-less event in an origin another user owns is still that user's to push: refused.
            try edit(alice3, 2, seed: 9, actor: nil)
            (code, text) = try await push(try FramePage.collect(from: alice3, since: try hub.cursor(), limits: PageLimits()), to: url, token: "bob-token-0123456789abc")
            #expect(code == 403 && text.contains("belongs to another user"))
            // An origin pushed by an unscoped principal has no owner: no scoped principal reads it.
            #expect(try OriginOwners(store: hub).owner(of: imposter.replicaID) == nil)
            let c = try transport("bob-token-0123456789abc", bob1)
            #expect(try await c.cursor()[imposter.replicaID] == Seq(0))
            await c.shutdown()
            // alice's own push goes through; the answer's cursor names only her users' origins.
            (code, text) = try await push(newAlice, to: url, token: "alice-laptop-token-0123")
            #expect(code == 200 && text.contains("\"events\":5"))
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
            let answered = try ReplicationCursor(token: try #require(answer["cursor"] as? String))
            #expect(Set(answered.origins) == [alice1.replicaID, alice2.replicaID, alice3.replicaID])
        }
        // The watch stream (SSE) of a scoped principal: its users' origins only.
        let endpoint = try ReplicaEndpoint(store: hub, policy: policy)
        let carol = try #require(try? policy.authenticate(authorization: "Bearer carol-token-0123456789a").get())
        var it = try await endpoint.watch(principal: carol).makeAsyncIterator()
        let first = try #require(await it.next())
        #expect(Set(first.origins) == [alice1.replicaID, alice2.replicaID, alice3.replicaID, carol1.replicaID])
        endpoint.stopWatching()
    }

    /// A hub, and the stores of alice, bob and carol, each a user with a principal of the same
    /// name that may push anything and pull.
    static func threeUsers(_ dir: Dir) throws -> (hub: Store, alice: Store, bob: Store, carol: Store, policy: AccessPolicy) {
        let stores = try ["hub", "alice", "bob", "carol"].map { try Store.create(at: dir.path + "/" + $0) }
        let policy = try AccessPolicy(json: Data("""
            {"principals":[
              {"name":"alice","token":"alice-token-0123456789a","user":"alice","push":"*","pull":true},
              {"name":"bob","token":"bob-token-0123456789abc","user":"bob","push":"*","pull":true},
              {"name":"carol","token":"carol-token-0123456789a","user":"carol","push":"*","pull":true}
            ]}
            """.utf8))
        return (stores[0], stores[1], stores[2], stores[3], policy)
    }

    /// Pushes `store` to the server at `url` as `token`'s principal, then pulls from it.
    static func sync(_ url: String, _ token: String, _ store: Store) async throws {
        let t = try HTTPTransport(url: url, token: token, replica: store.replicaID)
        do {
            _ = try await Replication.push(from: store, to: t)
            _ = try await Replication.pull(from: t, store: store, lockWait: 5)
        } catch {
            await t.shutdown()
            Issue.record("sync of \(token.prefix(5)): \(error)")
            throw error
        }
        await t.shutdown()
    }

    /// Pushes `store` to the server at `url` as `token`'s principal, in pages within `limits`.
    static func push(_ url: String, _ token: String, _ store: Store, limits: PageLimits) async throws {
        let t = try HTTPTransport(url: url, token: token, replica: store.replicaID)
        do { _ = try await Replication.push(from: store, to: t, limits: limits) } catch {
            await t.shutdown()
            throw error
        }
        await t.shutdown()
    }

    /// A replica removed from a share whose logs a relay (an unscoped principal) pushed, which
    /// nobody claimed, keeps pushing what it holds of them: frames the hub holds byte for byte
    /// are left out of its pages, not refused, and the answer places them at the pusher's own
    /// last frame. A made-up frame of such a log is refused, and learns nothing of how far it goes.
    @Test func aRemovedMemberKeepsPushingARelaysShareLogs() async throws {
        let dir = Dir()
        let (hub, alice, bob, _, _) = try Self.threeUsers(dir)
        let share = try Self.share(of: alice, with: bob, titles: ["shared 0", "shared 1", "shared 2"])
        try edit(bob, 2, seed: 3, actor: "bob")
        let aliceKey = try #require(try alice.signingKey())
        let aliceLog = ReplicaID.shareLog(share, signingKey: aliceKey.publicKey)
        try await withServer(hub, configure: { $0.policy = Self.withAdmin }) { url in
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            try await Self.sync(url, "admin-token-0123456789a", alice)  // the relay: alice's logs, claimed by nobody
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            #expect(try LogReader(store: bob).tip(origin: aliceLog).lastSeq.rawValue > 0, "bob, a member, received the share's logs")
            let a = try LogAppender(store: alice)
            try a.removeMember(bob.replicaID, from: share)
            try a.close()
            try await Self.sync(url, "admin-token-0123456789a", alice)
            // bob's user no longer reads the share's logs, so his replica pushes them: left out.
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            let page = try FramePage.collect(from: bob, since: .empty, limits: PageLimits())
            let (code, text) = try await push(page, to: url, token: "bob-token-0123456789abc")
            #expect(code == 200, "\(code) \(text)")
            // Only a run of frames that follow each other is left out (a page naming far seqs
            // would have the server read the log between them): alice's log's first and third
            // frames, both held byte for byte, leave the third in the page, and it is refused.
            let aliceFrames = try FramePage.collect(from: alice, since: .empty, limits: PageLimits()).frames.filter { FrameHeader(parsing: $0)?.origin == aliceLog }
            #expect(aliceFrames.count >= 3)
            let (gapCode, gapText) = try await push(FramePage(frames: [aliceFrames[0], aliceFrames[2]], next: ReplicationCursor(), more: false), to: url, token: "bob-token-0123456789abc")
            #expect(gapCode == 403 && gapText.contains("owned by no user"), "\(gapCode) \(gapText)")
            // A frame of alice's share log made up (the first frame, one byte changed): refused.
            var forged = try #require(FramePage.collect(from: alice, since: .empty, limits: PageLimits()).frames.first { FrameHeader(parsing: $0)?.origin == aliceLog })
            forged[forged.count - 1] ^= 1
            let (forgedCode, forgedText) = try await push(FramePage(frames: [forged], next: ReplicationCursor(), more: false), to: url, token: "bob-token-0123456789abc")
            #expect(forgedCode != 200 && !forgedText.contains("cursor"), "\(forgedCode) \(forgedText)")
        }
        #expect(try OriginOwners(store: hub).claimant(of: aliceLog) == nil)
    }

    /// A removed member's live sync sends the share's logs once: the server's watch no longer
    /// shows them to its user, so the follower keeps the positions the push answers gave it, and
    /// each local change after that sends only its own new frames.
    @Test(.timeLimit(.minutes(10))) func aRemovedMembersLiveSyncSendsTheShareLogsOnce() async throws {
        try await Self.withBobRemoved { _, _, bob, url in
            // The first exchange: the share's logs go out once, left out there.
            try await Self.followBob(bob, url: url, first: { _ in }) { round, p, mine in
                #expect(p.bytes == mine.frameBytes && p.frames == mine.frames.count,
                        "round \(round): sent \(p.bytes) bytes in \(p.pages) pages for a change of \(mine.frameBytes) bytes")
            }
        }
    }

    /// A scoped hub where bob, a member of alice's share, pushed its logs and was then removed
    /// from it, and both synced after; runs `body` while it serves at `url`.
    static func withBobRemoved(_ body: (_ hub: Store, _ alice: Store, _ bob: Store, _ url: String) async throws -> Void) async throws {
        let dir = Dir()
        let (hub, alice, bob, _, _) = try threeUsers(dir)
        let shared = try share(of: alice, with: bob, titles: ["shared 0", "shared 1"])
        try Workload.edit(bob, 1, seed: 3, actor: "bob")
        try await withServer(hub, configure: { $0.policy = withAdmin }) { url in
            try await sync(url, "bob-token-0123456789abc", bob)
            try await sync(url, "admin-token-0123456789a", alice)
            try await sync(url, "bob-token-0123456789abc", bob)
            let a = try LogAppender(store: alice)
            try a.removeMember(bob.replicaID, from: shared)
            try a.close()
            try await sync(url, "admin-token-0123456789a", alice)
            try await sync(url, "bob-token-0123456789abc", bob)
            try await body(hub, alice, bob, url)
        }
    }

    /// A push of many pages by a removed member sends the share's logs once: the server places
    /// them only in the answer to the page that held them, and the pages after it are collected
    /// past that place, not from the logs' start again (every other page did before).
    @Test(.timeLimit(.minutes(10))) func aRemovedMembersPushOfManyPagesSendsTheShareLogsOnce() async throws {
        try await Self.withBobRemoved { hub, _, bob, url in
            for i in 0..<4 { try edit(bob, 1, seed: 20 + UInt64(i), actor: "bob") }
            let t = try HTTPTransport(url: url, token: "bob-token-0123456789abc", replica: bob.replicaID)
            let shown = try await t.cursor()
            await t.shutdown()
            let owed = try FramePage.collect(from: bob, since: shown, limits: PageLimits(maxBytes: 1 << 30, maxFrames: 1 << 20))
            #expect(owed.frames.contains { FrameHeader(parsing: $0)?.shared == true }, "the share's logs are among what bob's push sends")
            let p = try await TestSupport.pushed(bob, to: url, token: "bob-token-0123456789abc", limits: PageLimits(maxBytes: 1 << 20, maxFrames: 1))
            #expect(p.bytes == owed.frameBytes && p.pages == owed.frames.count, "sent \(p.bytes) bytes in \(p.pages) pages for \(owed.frameBytes) bytes in \(owed.frames.count) frames")
            #expect(try LogReader(store: hub).tip(origin: bob.replicaID).lastSeq == LogReader(store: bob).tip(origin: bob.replicaID).lastSeq)
        }
    }

    /// Runs a live sync of `bob` as bob against `url`: `first` is given its first push, then
    /// three rounds each change bob once and give `each` the push that follows and the frames of
    /// that change.
    static func followBob(_ bob: Store, url: String, first: (TransferSummary) -> Void,
                          each: (Int, TransferSummary, FramePage) -> Void) async throws {
        let pushes = AsyncStream.makeStream(of: TransferSummary.self)
        var live = LiveSync(store: bob) { try HTTPTransport(url: url, token: "bob-token-0123456789abc", replica: bob.replicaID) }
        live.onExchange = { e in if let p = e.pushed { pushes.continuation.yield(p) } }
        live.onState = { s in if case .retrying(_, let why) = s { Issue.record("the follower retries: \(why)") } }
        let follower = ServerThreads.task { try await live.run() }
        defer { follower.cancel() }
        var sent = pushes.stream.makeAsyncIterator()
        first(try #require(await sent.next()))
        for round in 0..<3 {
            // Let the server's watch tell the follower of bob's last push, then change bob.
            try await Task.sleep(nanoseconds: 300_000_000)
            let before = try bob.cursor()
            try Workload.edit(bob, 1, seed: 10 + UInt64(round), actor: "bob")
            let mine = try FramePage.collect(from: bob, since: before, limits: PageLimits())
            each(round, try #require(await sent.next()), mine)
        }
    }

    /// A scoped hub served with alice's and bob's stores, one event each, alice's synced (and
    /// bob's, when `bobSyncedFirst`); then alice writes two more and bob takes her store's frames
    /// from a shared folder before she pushes them. Runs `body` while the hub serves at `url`.
    static func withAlicesFramesInBob(_ dir: Dir, bobSyncedFirst: Bool,
                                      _ body: (_ hub: Store, _ alice: Store, _ bob: Store, _ url: String) async throws -> Void) async throws {
        let (hub, alice, bob, _, policy) = try threeUsers(dir)
        try Workload.edit(alice, 1, seed: 1, actor: "alice")
        try Workload.edit(bob, 1, seed: 2, actor: "bob")
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try await sync(url, "alice-token-0123456789a", alice)
            if bobSyncedFirst { try await sync(url, "bob-token-0123456789abc", bob) }
            try Workload.edit(alice, 2, seed: 3, actor: "alice")
            _ = try await Replication.pull(from: StoreTransport(store: alice), store: bob)
            try await body(hub, alice, bob, url)
        }
    }

    /// A replica that holds another user's frames (it took them from that user's folder) and
    /// pushes before that user does is refused that origin, and only that: its own frames go to
    /// the hub, the refusal is in the summary, and the other user's push is not affected.
    @Test func anotherUsersFramesHeldHereStopNothingButThemselves() async throws {
        let dir = Dir()
        try await Self.withAlicesFramesInBob(dir, bobSyncedFirst: true) { hub, alice, bob, url in
            try edit(bob, 2, seed: 4, actor: "bob")
            let pushed = try await TestSupport.pushed(bob, to: url, token: "bob-token-0123456789abc", limits: PageLimits(maxBytes: 1 << 20, maxFrames: 1))
            #expect(Array(pushed.refused.keys) == [alice.replicaID] && pushed.refused[alice.replicaID]?.contains("belongs to another user") == true, "\(pushed.refused)")
            #expect(try LogReader(store: hub).tip(origin: bob.replicaID).lastSeq == LogReader(store: bob).tip(origin: bob.replicaID).lastSeq, "bob's own frames reached the hub")
            #expect(try LogReader(store: hub).tip(origin: alice.replicaID).lastSeq.rawValue == 1, "nothing of alice's was taken from bob")
            try await Self.sync(url, "alice-token-0123456789a", alice)
            #expect(try LogReader(store: hub).tip(origin: alice.replicaID).lastSeq == LogReader(store: alice).tip(origin: alice.replicaID).lastSeq)
            #expect(try OriginOwners(store: hub).all == [alice.replicaID: "alice", bob.replicaID: "bob"])
        }
    }

    /// A live sync whose server refuses an origin (another user's frames, taken from a folder)
    /// leaves it out of every later push of the connection: each local change sends its own
    /// frames only, and each exchange still says what is refused.
    @Test(.timeLimit(.minutes(10))) func aLiveSyncSendsARefusedOriginOncePerConnection() async throws {
        let dir = Dir()
        try await Self.withAlicesFramesInBob(dir, bobSyncedFirst: false) { hub, alice, bob, url in
            try await Self.followBob(bob, url: url, first: { first in
                #expect(Array(first.refused.keys) == [alice.replicaID], "\(first.refused)")
            }) { round, p, mine in
                #expect(p.bytes == mine.frameBytes && p.pages == 1 && Array(p.refused.keys) == [alice.replicaID],
                        "round \(round): sent \(p.bytes) bytes in \(p.pages) pages for a change of \(mine.frameBytes) bytes")
            }
            #expect(try LogReader(store: hub).tip(origin: bob.replicaID).lastSeq == LogReader(store: bob).tip(origin: bob.replicaID).lastSeq)
        }
    }

    /// A live sync whose server refuses an origin does not call itself in sync: its state names
    /// the refused origin, from the first exchange when the store already holds it, and from the
    /// push that first leaves it out when the store takes it later on the connection.
    @Test(.timeLimit(.minutes(10))) func aLiveSyncsStateNamesTheOriginsTheServerRefuses() async throws {
        let dir = Dir()
        let (hub, alice, bob, _, policy) = try Self.threeUsers(dir)
        try edit(alice, 1, seed: 1, actor: "alice")
        try edit(bob, 1, seed: 2, actor: "bob")
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try await Self.sync(url, "alice-token-0123456789a", alice)
            try edit(alice, 2, seed: 3, actor: "alice")
            let states = AsyncStream.makeStream(of: LiveSync.State.self)
            var live = LiveSync(store: bob) { try HTTPTransport(url: url, token: "bob-token-0123456789abc", replica: bob.replicaID) }
            live.onState = { states.continuation.yield($0) }
            var told = states.stream.makeAsyncIterator()
            // Nothing of alice's in bob's store yet: in sync.
            let follower = ServerThreads.task { try await live.run() }
            defer { follower.cancel() }
            let first = try #require(await told.next())
            guard case .inSync = first else { Issue.record("first state: \(first)"); return }
            // bob takes alice's new frames from her store (a shared folder): his next push leaves
            // them out, and the follower says so.
            _ = try await Replication.pull(from: StoreTransport(store: alice), store: bob)
            let next = try #require(await told.next())
            guard case .partlyInSync(let at, let refused) = next else { Issue.record("after the refusal: \(next)"); return }
            #expect(Array(refused.keys) == [alice.replicaID] && refused[alice.replicaID]?.contains("belongs to another user") == true, "\(refused)")
            #expect(at.includes(try bob.cursor()))
            follower.cancel()
            // A new connection with alice's frames already in bob's store: named at once.
            let again = ServerThreads.task { try await live.run() }
            defer { again.cancel() }
            let renewed = try #require(await told.next())
            guard case .partlyInSync(_, let still) = renewed else { Issue.record("on a new connection: \(renewed)"); return }
            #expect(Array(still.keys) == [alice.replicaID])
        }
    }

    /// A principal that may push only its replica's origin may push the share logs that
    /// replica's key signs (its sealed logs, the membership log of a share it administers), and
    /// no other share's log.
    @Test func aPushListCoversTheShareLogsItsReplicasKeySigns() async throws {
        let dir = Dir()
        let (hub, alice, bob, _, _) = try Self.threeUsers(dir)
        let policy = try AccessPolicy(json: Data("""
            {"principals":[
              {"name":"alice","token":"alice-token-0123456789a","user":"alice","push":["\(alice.replicaID)"],"pull":true},
              {"name":"bob","token":"bob-token-0123456789abc","user":"bob","push":["\(bob.replicaID)"],"pull":true}
            ]}
            """.utf8))
        let share = try Self.share(of: alice, with: bob, titles: ["shared 0"])
        try edit(bob, 1, seed: 3, actor: "bob")  // bob's replica, owned once pushed, is the member
        let aliceKey = try #require(try alice.signingKey()), bobKey = try #require(try bob.signingKey())
        let members = ReplicaID.shareMembers(share, signingKey: aliceKey.publicKey)
        let aliceLog = ReplicaID.shareLog(share, signingKey: aliceKey.publicKey), bobLog = ReplicaID.shareLog(share, signingKey: bobKey.publicKey)
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try await Self.sync(url, "alice-token-0123456789a", alice)
            for o in [members, aliceLog] {
                #expect(try LogReader(store: hub).tip(origin: o).lastSeq == LogReader(store: alice).tip(origin: o).lastSeq, "alice pushed \(o)")
            }
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            let b = try LogAppender(store: bob)
            _ = try b.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("bob's shared"))])], to: share)
            try b.close()
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            #expect(try LogReader(store: hub).tip(origin: bobLog).lastSeq.rawValue == 1, "bob pushed his sealed log")
            // A frame of alice's sealed log the hub does not hold, with bob's token: not his
            // key's, refused. (One it holds byte for byte is left out: it changes nothing.)
            let held = try LogReader(store: hub).tip(origin: aliceLog).lastSeq
            let a = try LogAppender(store: alice)
            _ = try a.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("alice's next"))])], to: share)
            try a.close()
            let aliceFrames = try FramePage.collect(from: alice, since: .empty, limits: PageLimits()).frames.filter { FrameHeader(parsing: $0)?.origin == aliceLog }
            let next = try #require(aliceFrames.first { FrameHeader(parsing: $0)!.baseSeq > held })
            var (code, text) = try await push(FramePage(frames: [next], next: ReplicationCursor(), more: false), to: url, token: "bob-token-0123456789abc")
            #expect(code == 403 && text.contains("may not push frames of origin \(aliceLog)"), "\(code) \(text)")
            (code, text) = try await push(FramePage(frames: [aliceFrames[0]], next: ReplicationCursor(), more: false), to: url, token: "bob-token-0123456789abc")
            #expect(code == 200, "\(code) \(text)")
        }
    }

    /// A member's share log that another member pushed first (taken from the writer's store, say
    /// from a shared folder) stays its writer's to push: the key that signs it, of a replica the
    /// writer's user owns, decides, not the first push. No other user may push new frames of it,
    /// and a frame of it whose signature does not verify is refused, nothing written.
    @Test func aShareLogIsItsWritersToPushWhoeverPushedItFirst() async throws {
        let dir = Dir()
        let (hub, alice, bob, _, policy) = try Self.threeUsers(dir)
        let share = try Self.share(of: alice, with: bob, titles: ["shared 0"])
        try edit(bob, 1, seed: 3, actor: "bob")
        let bobKey = try #require(try bob.signingKey())
        let bobLog = ReplicaID.shareLog(share, signingKey: bobKey.publicKey)
        func writeShared(_ title: String) throws { try appendSharedItems(bob, share, [title]) }
        /// bob's frames of his share log past what the hub holds.
        func bobsNewFrames() throws -> [[UInt8]] {
            let held = try LogReader(store: hub).tip(origin: bobLog).lastSeq
            return try FramePage.collect(from: bob, since: .empty, limits: PageLimits()).frames.filter {
                FrameHeader(parsing: $0).map { $0.origin == bobLog && $0.baseSeq > held } ?? false
            }
        }
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try await Self.sync(url, "alice-token-0123456789a", alice)
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            try writeShared("bob's 1")
            _ = try await Replication.pull(from: StoreTransport(store: bob), store: alice)
            try await Self.sync(url, "alice-token-0123456789a", alice)
            #expect(try OriginOwners(store: hub).claimant(of: bobLog) == "alice", "alice's push came first")
            try await Self.bobWritesAndPushes(bob, share, "bob's 2", to: url)
            #expect(try LogReader(store: hub).tip(origin: bobLog).lastSeq == LogReader(store: bob).tip(origin: bobLog).lastSeq, "bob's share writes reached the hub")
            // Another user may not push new frames of it (carol's token, bob's next frame).
            try writeShared("bob's 3")
            let next = try bobsNewFrames()
            #expect(next.count == 1)
            let (code, text) = try await push(FramePage(frames: next, next: ReplicationCursor(), more: false), to: url, token: "carol-token-0123456789a")
            #expect(code == 403 && text.contains("belongs to another user"), "\(code) \(text)")
            // The frame with one byte of its signature changed and its checksum made right: its
            // form names bob's replica, its signature is not his. Refused, nothing written.
            let forged = CraftedFrames.withSignatureAltered(try #require(next.first))
            let (forgedCode, forgedText) = try await push(FramePage(frames: [forged], next: ReplicationCursor(), more: false), to: url, token: "bob-token-0123456789abc")
            #expect(forgedCode == 422 && forgedText.contains("signature"), "\(forgedCode) \(forgedText)")
            #expect(try LogReader(store: hub).tip(origin: bobLog).lastSeq.rawValue == 2)
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            #expect(try LogReader(store: hub).tip(origin: bobLog).lastSeq.rawValue == 3)
        }
    }

    /// A writer's push of its share log that another user's claim held when the push came, the
    /// claim abandoned (no frame of the log ever came) and taken back before the push is
    /// received: the push claims the log for the writer's user, as any first push of an origin
    /// does. (Left out of the claim, the log was written owned by nobody, and every later push of
    /// it refused as such.)
    @Test func aShareLogWhoseOtherClaimIsAbandonedIsClaimedByItsWriter() async throws {
        let dir = Dir()
        let (hub, alice, bob, share, bobLog, policy) = try Self.bobInAlicesShare(dir)
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try await Self.sync(url, "alice-token-0123456789a", alice)
            try await Self.sync(url, "bob-token-0123456789abc", bob)
        }
        // alice's claim of bob's log, its frames never sent (a push cut off, say).
        _ = try OriginOwners(store: hub).claim([bobLog], user: "alice", principal: "alice")
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            for title in ["bob's 1", "bob's 2"] { try await Self.bobWritesAndPushes(bob, share, title, to: url) }
            #expect(try LogReader(store: hub).tip(origin: bobLog).lastSeq.rawValue == 2)
        }
        #expect(try OriginOwners(store: hub).all[bobLog] == "bob")
    }

    /// A removed member whose principal may push only its replica's origin pushes the share logs
    /// it holds of others (its user no longer reads them, so its replica sends them): the hub
    /// holds them byte for byte, and they are left out, as for a principal that may push any
    /// origin, not refused for the push right.
    @Test func aPushListLeavesOutHeldShareLogsItDoesNotCover() async throws {
        let dir = Dir()
        let (hub, alice, bob, share, policy) = try Self.bobBehindAPushList(dir)
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try await Self.sync(url, "alice-token-0123456789a", alice)
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            let a = try LogAppender(store: alice)
            try a.removeMember(bob.replicaID, from: share)
            try a.close()
            try await Self.sync(url, "alice-token-0123456789a", alice)
            try edit(bob, 1, seed: 4, actor: "bob")
            let pushed = try await TestSupport.pushed(bob, to: url, token: "bob-token-0123456789abc")
            #expect(pushed.refused.isEmpty, "\(pushed.refused)")
            #expect(try LogReader(store: hub).tip(origin: bob.replicaID).lastSeq == LogReader(store: bob).tip(origin: bob.replicaID).lastSeq)
            // A log it holds that the hub does not (made up here: alice's first frame with a byte
            // of its payload changed) is still refused for the right.
            let aliceLog = ReplicaID.shareLog(share, signingKey: try #require(try alice.signingKey()).publicKey)
            let first = try #require(try FramePage.collect(from: alice, since: .empty, limits: PageLimits()).frames.first { FrameHeader(parsing: $0)?.origin == aliceLog })
            let (code, text) = try await push(FramePage(frames: [CraftedFrames.withPayloadAltered(first)], next: ReplicationCursor(), more: false), to: url, token: "bob-token-0123456789abc")
            #expect(code == 403 && text.contains("may not push frames of origin \(aliceLog)"), "\(code) \(text)")
        }
    }

    /// A member behind a push list that has not synced a share's deletion pushes the share's
    /// sealed logs it holds of others, which the hub purged: they are left out as held (the hub
    /// declines them), not refused for the right on every run.
    @Test func aPushListLeavesOutAPurgedSharesSealedLogs() async throws {
        let dir = Dir()
        let (hub, alice, bob, share, policy) = try Self.bobBehindAPushList(dir)
        let aliceLog = ReplicaID.shareLog(share, signingKey: try #require(try alice.signingKey()).publicKey)
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try await Self.sync(url, "alice-token-0123456789a", alice)
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            try appendSharedItems(alice, share, ["shared 1"])
            try await Self.sync(url, "alice-token-0123456789a", alice)
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            #expect(try LogReader(store: bob).tip(origin: aliceLog).lastSeq.rawValue == 2)
            let a = try LogAppender(store: alice)
            try a.deleteShare(share)
            try a.close()
            try await Self.sync(url, "alice-token-0123456789a", alice)
        }
        let h = try LogAppender(store: hub)
        #expect(try h.purgeShare(share).logs[aliceLog] != nil)
        try h.close()
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try edit(bob, 1, seed: 4, actor: "bob")
            let pushed = try await TestSupport.pushed(bob, to: url, token: "bob-token-0123456789abc")
            #expect(pushed.refused.isEmpty, "\(pushed.refused)")
            #expect(try LogReader(store: hub).tip(origin: bob.replicaID).lastSeq == LogReader(store: bob).tip(origin: bob.replicaID).lastSeq)
            #expect(try LogReader(store: hub).tip(origin: aliceLog).lastSeq.rawValue == 0, "the purged log came back")
            // The answer places the purged log at the pusher's own last frame of it, not where
            // the log stood when purged (which a page of its first frame alone would learn).
            let first = try #require(try FramePage.collect(from: bob, since: .empty, limits: PageLimits()).frames.first { FrameHeader(parsing: $0)?.origin == aliceLog })
            let (code, text) = try await push(FramePage(frames: [first], next: ReplicationCursor(), more: false), to: url, token: "bob-token-0123456789abc")
            let token = try #require((try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])?["cursor"] as? String, "\(code) \(text)")
            let answered = try ReplicationCursor(token: token)
            #expect(code == 200 && answered[aliceLog] == Seq(1), "\(code) \(text)")
        }
    }

    /// A writer's share log that a relay (a principal without a user, claiming nothing) pushed
    /// first is held here and owned by nobody: the writer's user claims it with its next frames
    /// (the key that signs them is of a replica that user owns), instead of being refused it as
    /// "owned by no user" for good.
    @Test func aShareLogARelayPushedFirstIsClaimedByItsWriter() async throws {
        let dir = Dir()
        let (hub, alice, bob, share, bobLog, _) = try Self.bobInAlicesShare(dir)
        try await withServer(hub, configure: { $0.policy = Self.withAdmin }) { url in
            try await Self.sync(url, "alice-token-0123456789a", alice)
            try await Self.sync(url, "bob-token-0123456789abc", bob)
            try appendSharedItems(bob, share, ["bob's 1"])
            try await Self.sync(url, "admin-token-0123456789a", bob)  // the relay: bob's log, claimed by nobody
            #expect(try OriginOwners(store: hub).claimant(of: bobLog) == nil && LogReader(store: hub).tip(origin: bobLog).lastSeq.rawValue == 1)
            try await Self.bobWritesAndPushes(bob, share, "bob's 2", to: url)
            #expect(try LogReader(store: hub).tip(origin: bobLog).lastSeq.rawValue == 2)
        }
        #expect(try OriginOwners(store: hub).all[bobLog] == "bob")
    }

    /// Two serving processes on one store: an origin the other one claimed (its row written,
    /// its frames received) is not refused here as claimed by nobody; the file's row decides.
    @Test func anOriginAnotherServerClaimedIsNotRefusedAsUnowned() async throws {
        let dir = Dir()
        let (hub, _, bob, _, policy) = try Self.threeUsers(dir)
        try edit(bob, 2, seed: 1, actor: "bob")
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            // The other process: it takes the writer while this one is idle, receives bob's
            // frames, and records bob's claim, confirmed.
            try await Task.sleep(nanoseconds: 500_000_000)
            let other = try OriginOwners(store: hub)
            _ = try other.claim([bob.replicaID], user: "bob", principal: "bob")
            let w = try LogAppender(store: hub)
            _ = try w.receive(FramePage.collect(from: bob, since: .empty, limits: PageLimits()).frames)
            try w.close()
            try other.confirm([bob.replicaID], user: "bob")
            try edit(bob, 1, seed: 2, actor: "bob")
            try await Self.sync(url, "bob-token-0123456789abc", bob)
        }
        #expect(try OriginOwners(store: hub).all == [bob.replicaID: "bob"])
        #expect(try LogReader(store: hub).tip(origin: bob.replicaID).lastSeq == LogReader(store: bob).tip(origin: bob.replicaID).lastSeq)
    }

    /// A share's logs reach the users whose replicas are its members, from a scoped hub that
    /// holds no key: a user outside the share never receives a frame of it, and a member's user
    /// removed from it stops receiving its logs (docs/SHARING.md).
    @Test func aScopedHubServesAShareOnlyToItsMembersUsers() async throws {
        let dir = Dir()
        let (hub, alice, bob, carol, policy) = try Self.threeUsers(dir)
        func write<T>(_ store: Store, _ body: (LogAppender) throws -> T) throws -> T {
            let a = try LogAppender(store: store)
            defer { try? a.close() }
            return try body(a)
        }
        let bobKey = try #require(try bob.signingKey())
        let share = try write(alice) { a in
            _ = try a.append([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("alice's own"))])])
            let s = try a.createShare(name: "team")
            try a.addMember(bobKey.memberCard, to: s)
            _ = try a.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("SHAREDTITLE"))])], to: s)
            return s
        }
        try write(bob) { _ = try $0.append([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("bob's own"))])]) }
        try write(carol) { _ = try $0.append([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("carol's own"))])]) }
        let aliceKey = try #require(try alice.signingKey())
        let members = ReplicaID.shareMembers(share, signingKey: aliceKey.publicKey)
        let aliceLog = ReplicaID.shareLog(share, signingKey: aliceKey.publicKey)
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            func sync(_ token: String, _ store: Store) async throws { try await Self.sync(url, token, store) }
            try await sync("bob-token-0123456789abc", bob)
            try await sync("carol-token-0123456789a", carol)
            try await sync("alice-token-0123456789a", alice)
            try await sync("bob-token-0123456789abc", bob)
            try await sync("carol-token-0123456789a", carol)
            #expect(Set(try origins(bob)) == [bob.replicaID, members, aliceLog], "bob gets the share's logs, not alice's own")
            #expect(Set(try origins(carol)) == [carol.replicaID], "carol received a share she is not in")
            #expect(try LogReader(store: bob).events(origin: aliceLog).first?.fields.first?.value == .text("SHAREDTITLE"))
            // Bob writes to the share; Alice receives it through the hub.
            try write(bob) { _ = try $0.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("bob's shared"))])], to: share) }
            let bobLog = ReplicaID.shareLog(share, signingKey: bobKey.publicKey)
            try await sync("bob-token-0123456789abc", bob)
            try await sync("alice-token-0123456789a", alice)
            #expect(try LogReader(store: alice).events(origin: bobLog).count == 1)
            // Removed, Bob's user no longer receives the share's logs.
            try write(alice) { a in
                try a.removeMember(bob.replicaID, from: share)
                _ = try a.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("after"))])], to: share)
            }
            try await sync("alice-token-0123456789a", alice)
            let before = try LogReader(store: bob).tip(origin: aliceLog).lastSeq
            try await sync("bob-token-0123456789abc", bob)
            #expect(try LogReader(store: bob).tip(origin: aliceLog).lastSeq == before)
            #expect(Set(try origins(carol)) == [carol.replicaID])
        }
    }

    /// A claim alone does not make a user a share's member. A scoped user's first push claims
    /// its origins before its frames are checked, and a refused push's claim is taken back: in
    /// between (or for good, were taking it back to fail), a claim of another user's member
    /// replica the server holds nothing of opened the share's logs to the claimant. The state of
    /// that window is made here directly: carol's user owns bob's member replica, whose frames
    /// the hub has never received (and which carol, without bob's key, cannot sign).
    @Test func aClaimOfAMemberReplicaWithoutItsFramesOpensNoShare() async throws {
        let dir = Dir()
        let (hub, alice, bob, carol, policy) = try Self.threeUsers(dir)
        let share = try Self.share(of: alice, with: bob, titles: ["SHAREDTITLE"])
        try edit(bob, 2, seed: 5, actor: "bob")
        try edit(carol, 2, seed: 6, actor: "carol")
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try await Self.sync(url, "alice-token-0123456789a", alice)
            try await Self.sync(url, "carol-token-0123456789a", carol)
        }
        #expect(Set(try origins(carol)) == [carol.replicaID])
        // Carol's user holds a claim of bob's replica, and the hub no frame of it.
        #expect(try OriginOwners(store: hub).claim([bob.replicaID], user: "carol", principal: "carol").new == [bob.replicaID])
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            try await Self.expectServedOnly([carol.replicaID], at: url, to: "carol-token-0123456789a")
        }
    }

    /// A push that is refused claims nothing: before, a scoped user's push of frames the store
    /// then refused (422) still made their origins that user's, so a scoped user took the
    /// server's own origin (and then pulled it).
    @Test func aRefusedPushClaimsNothing() async throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        try edit(hub, 4, seed: 1, actor: nil)
        // A store with the hub's replica id, whose events carry bob's name: frames of the hub's own origin.
        let twinStore = try Self.twin(of: hub, at: dir.path + "/twin")
        try edit(twinStore, 8, seed: 2, actor: "bob")  // past what the hub holds of its own log
        let shortTwin = try Self.twin(of: hub, at: dir.path + "/short-twin")
        try edit(shortTwin, 3, seed: 3, actor: "bob")  // within it
        // A new origin whose second append is sent without its first: a gap, refused on receipt.
        let gappy = try Store.create(at: dir.path + "/gappy")
        try edit(gappy, 2, seed: 3, actor: "bob")
        let afterFirst = try gappy.cursor()
        try edit(gappy, 2, seed: 4, actor: "bob")
        let policy = try AccessPolicy(json: Data("""
            {"principals":[{"name":"bob","token":"bob-token-0123456789abc","user":"bob","push":"*","pull":true},
                           {"name":"carol","token":"carol-token-0123456789a","user":"carol","push":"*","pull":true}]}
            """.utf8))
        try await withServer(hub, configure: { $0.policy = policy }) { url in
            let before = try hub.cursor()
            var (code, text) = try await push(try FramePage.collect(from: twinStore, since: .empty, limits: PageLimits()), to: url, token: "bob-token-0123456789abc")
            #expect(code == 403 && text.contains("owned by no user"), "\(code) \(text)")
            // The same for frames no further than the hub holds of its own log: answered from the
            // index (200, nothing new), a page of them told bob how far that log goes.
            (code, text) = try await push(try FramePage.collect(from: shortTwin, since: .empty, limits: PageLimits()), to: url, token: "bob-token-0123456789abc")
            #expect(code == 403 && text.contains("owned by no user"), "\(code) \(text)")
            (code, text) = try await push(try FramePage.collect(from: gappy, since: afterFirst, limits: PageLimits()), to: url, token: "bob-token-0123456789abc")
            #expect(code == 422, "\(code) \(text)")
            #expect(try hub.cursor() == before)
            #expect(try OriginOwners(store: hub).all.isEmpty, "nothing claimed")
            // bob reads nothing of the hub's origin; the origin of his refused push is claimed when its log arrives whole.
            let (status, body, _) = try await fetch(url + "/v1/frames?since=&page_version=2", token: "bob-token-0123456789abc")
            #expect(try status == 200 && FramePage.decode(body).frames.isEmpty)
            (code, text) = try await push(try FramePage.collect(from: gappy, since: .empty, limits: PageLimits()), to: url, token: "bob-token-0123456789abc")
            #expect(code == 200, "\(code) \(text)")
            #expect(try OriginOwners(store: hub).all == [gappy.replicaID: "bob"])
        }
    }

    @Test func tokensFilesNameWhatIsWrong() throws {
        func refusal(_ principal: String) -> String {
            do {
                _ = try AccessPolicy(json: Data(#"{"principals":[{"name":"ok","token":"0123456789abcdef0"},\#(principal)]}"#.utf8), source: "t.json")
                return ""
            } catch { return "\(error)" }
        }
        #expect(refusal(#"{"name":"p","token":"0123456789abcdef1","user":""}"#).contains("t.json: principals[1].user"))
        #expect(refusal(#"{"name":"p","token":"0123456789abcdef1","user":"a\"><script>"}"#).contains("principals[1].user"))
        #expect(refusal(#"{"name":"p","token":"0123456789abcdef1","read_users":["a"]}"#).contains("principals[1].read_users: needs \"user\""))
        #expect(refusal(#"{"name":"p","token":"0123456789abcdef1","user":"a","read_users":["b c"]}"#).contains("principals[1].read_users[0]"))
        #expect(refusal(#"{"name":"p","token":"0123456789abcdef1","user":"a","read_user":["b"]}"#).contains("unknown field \"read_user\""))
        let p = try AccessPolicy(json: Data(#"{"principals":[{"name":"p","token":"0123456789abcdef1","user":"a@b.example","read_users":["c"],"pull":true}]}"#.utf8))
        #expect(p.principals[0].readableUsers == ["a@b.example", "c"])
        #expect(p.isScoped)
    }

    /// A watch stream lasts only as long as its token stands for the principal that opened it:
    /// once the tokens file revokes the token, or changes what its principal may read, the
    /// stream ends (the client's next request learns why). A reload that leaves the principal as
    /// it was leaves its stream open. Before, a stream went on telling its client of every move of
    /// the origins it could read when it opened, for as long as the connection lasted.
    @Test(.timeLimit(.minutes(10))) func aWatchStreamEndsWhenItsTokenIsRevoked() async throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let writer = try Store.create(at: dir.path + "/writer")
        let file = dir.path + "/tokens.json"
        let r = "token-r-0123456789abcdef", w = "token-w-0123456789abcdef", x = "token-x-0123456789abcdef"
        func tokens(_ reader: String?, extra: Bool = false) -> String {
            var list = [#"{"name":"writer","token":"\#(w)","push":"*","pull":true}"#]
            if let reader { list.append(#"{"name":"reader","token":"\#(r)","pull":true\#(reader)}"#) }
            if extra { list.append(#"{"name":"extra","token":"\#(x)","pull":true}"#) }
            return "{\"principals\":[" + list.joined(separator: ",") + "]}"
        }
        func writeInPlace(_ text: String) throws {
            let h = try #require(FileHandle(forWritingAtPath: file))
            try h.truncate(atOffset: 0)
            try h.write(contentsOf: Data(text.utf8))
            try h.close()
        }
        try Data(tokens("").utf8).write(to: URL(fileURLWithPath: file))
        /// What a watch stream gave: a cursor, or its end (and why); or a waiter's time ran out.
        enum Seen { case cursor(ReplicationCursor), ended(String), timeout(Int) }
        /// A watch opened as a token: what it gives, as it comes, and the waits' time-outs.
        struct Watch {
            let client: HTTPTransport
            let task: Task<Void, any Error>
            let out: AsyncStream<Seen>.Continuation
            var it: AsyncStream<Seen>.Iterator
            var waits = 0

            init(_ url: String, _ token: String) throws {
                let client = try HTTPTransport(url: url, token: token)
                let (seen, out) = AsyncStream.makeStream(of: Seen.self)
                self.client = client
                self.out = out
                it = seen.makeAsyncIterator()
                task = ServerThreads.task {
                    do {
                        for try await c in client.watch() { out.yield(.cursor(c)) }
                        out.yield(.ended("finished"))
                    } catch { out.yield(.ended("\(error)")) }
                }
            }

            /// The next cursor or end within `seconds`, or nil.
            mutating func next(within seconds: Double) async -> Seen? {
                waits += 1
                let id = waits, out = out
                _ = ServerThreads.task { try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9)); out.yield(.timeout(id)) }
                while let s = await it.next() {
                    if case .timeout(let t) = s { if t == id { return nil } else { continue } }
                    return s
                }
                return nil
            }

            func close() async {
                task.cancel()
                await client.shutdown()
            }
        }
        /// Waits until `token`'s `/v1/cursor` is answered `want` (the tokens file reloaded).
        func until(_ url: String, _ token: String, _ want: Int) async throws {
            if try await !TestTokens.until(url, token, answers: want) { Issue.record("\(token.prefix(7)) never got \(want)") }
        }
        var seed: UInt64 = 1
        /// Pushes new events of the writer's; its seq now.
        func pushMore(_ url: String) async throws -> Seq {
            seed += 1
            try edit(writer, 3, seed: seed, actor: nil)
            try await Self.push(url, w, writer, limits: PageLimits())
            return try writer.cursor()[writer.replicaID]
        }
        /// Reads `watch` until a cursor shows the writer at `seq` (true) or the stream ends (false).
        func sees(_ watch: inout Watch, _ seq: Seq) async -> Bool {
            while let s = await watch.next(within: 20) {
                switch s {
                case .cursor(let c): if c[writer.replicaID] >= seq { return true }
                case .ended: return false
                case .timeout: continue
                }
            }
            return false
        }
        try await withServer(hub, tokensFile: file) { url in
            var watch = try Watch(url, r)
            guard case .cursor = await watch.next(within: 30) else { Issue.record("no first cursor"); await watch.close(); return }
            #expect(await sees(&watch, try await pushMore(url)), "the stream follows pushes")
            // Another principal added: the reader's stream stays open and goes on.
            try writeInPlace(tokens("", extra: true))
            try await until(url, x, 200)
            #expect(await sees(&watch, try await pushMore(url)), "a reload that leaves the principal as it was ends nothing")
            // The reader's token revoked: its stream ends, and tells nothing of what moved after.
            try writeInPlace(tokens(nil, extra: true))
            try await until(url, r, 401)
            let after = try await pushMore(url)
            var ended = false
            while let s = await watch.next(within: 20) {
                if case .cursor(let c) = s { #expect(c[writer.replicaID] < after, "a revoked stream was told of a push after it: \(c)") }
                if case .ended(let why) = s { ended = true; #expect(why.contains("ended the stream"), "\(why)"); break }
            }
            #expect(ended, "the revoked token's watch stream is still open")
            await watch.close()
            // The same token, now scoped to a user: a stream of the old scope ends.
            try writeInPlace(tokens(""))
            try await until(url, r, 200)
            var scoped = try Watch(url, r)
            guard case .cursor = await scoped.next(within: 30) else { Issue.record("no first cursor"); await scoped.close(); return }
            // Nothing moves: the reload alone ends the stream, well before its first ping (15 s).
            try writeInPlace(tokens(#","user":"alice""#))
            var ended2 = false
            while let s = await scoped.next(within: 5) {
                if case .ended(let why) = s { ended2 = true; #expect(why.contains("ended the stream"), "\(why)"); break }
            }
            #expect(ended2, "a stream whose principal's scope changed is still open 5 s after")
            await scoped.close()
        }
    }

    /// The tokens file is re-read when it changes in place, when it is replaced by a rename, and
    /// on SIGHUP; a file that does not parse leaves the last good one in force.
    @Test func theTokensFileIsReloadedWithoutARestart() async throws {
        let dir = Dir()
        let hub = try Store.create(at: dir.path + "/hub")
        let file = dir.path + "/tokens.json"
        func principals(_ tokens: [String]) -> String {
            "{\"principals\":[" + tokens.enumerated().map { "{\"name\":\"p\($0)\",\"token\":\"\($1)\",\"pull\":true}" }.joined(separator: ",") + "]}"
        }
        func writeInPlace(_ text: String) throws {
            let h = try #require(FileHandle(forWritingAtPath: file))
            try h.truncate(atOffset: 0)
            try h.write(contentsOf: Data(text.utf8))
            try h.close()
        }
        let a = "token-a-0123456789abcdef", b = "token-b-0123456789abcdef", c = "token-c-0123456789abcdef"
        try Data(principals([a]).utf8).write(to: URL(fileURLWithPath: file))
        func status(_ url: String, _ token: String) async throws -> Int { try await RawHTTP.request(url + "/v1/cursor", token: token).status }
        /// Waits up to 5 s for `token` to get `want`.
        func eventually(_ url: String, _ token: String, _ want: Int) async throws -> Bool {
            for _ in 0..<100 {
                if try await status(url, token) == want { return true }
                try await Task.sleep(nanoseconds: 50_000_000)
            }
            return false
        }
        try await withServer(hub, tokensFile: file) { url in
            #expect(try await status(url, a) == 200)
            #expect(try await status(url, b) == 401)
            try writeInPlace(principals([b]))  // a revoked, b added, in place
            #expect(try await eventually(url, a, 401))
            #expect(try await status(url, b) == 200)
            try writeInPlace("{\"principals\":[{\"name\":")  // half a file: the last good one stays
            try await Task.sleep(nanoseconds: 400_000_000)
            #expect(try await status(url, b) == 200)
            #expect(try await status(url, a) == 401)
            try Data(principals([c]).utf8).write(to: URL(fileURLWithPath: file), options: .atomic)  // replaced by a rename
            #expect(try await eventually(url, c, 200))
            #expect(try await status(url, b) == 401)
        }
        // SIGHUP: re-read at once, whatever the file's times say.
        try Data(principals([a]).utf8).write(to: URL(fileURLWithPath: file))
        TokensFileWatcher.handleHangups()
        try await withServer(hub, configure: {
            $0.policy = try! AccessPolicy.load(path: file)
            $0.tokensFile = file
            $0.tokensCheckInterval = 3600
        }) { url in
            try await Task.sleep(nanoseconds: 300_000_000)  // the watcher has started
            try writeInPlace(principals([b]))
            try await Task.sleep(nanoseconds: 300_000_000)
            #expect(try await status(url, a) == 200)  // not looked at yet
            kill(getpid(), SIGHUP)
            #expect(try await eventually(url, b, 200))
            #expect(try await status(url, a) == 401)
        }
    }
}
