import Domain
import EventLog
import Foundation
import Logbook
import TestSupport
import Testing

/// Shares through the door: members read and write a share's items; a relay (a replica outside
/// the share, which is what a hub is to it) stores and passes on ciphertext it cannot read; a
/// removed member reads nothing written after its removal; a deletion destroys the keys.
@Suite struct ShareTests {
    /// Files under `dir` whose bytes contain `needle`.
    static func filesContaining(_ needle: String, under dir: String) -> [String] {
        let bytes = Data(needle.utf8)
        var out: [String] = []
        let e = FileManager.default.enumerator(atPath: dir)
        while let name = e?.nextObject() as? String {
            let path = dir + "/" + name
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir), !isDir.boolValue,
                  let d = FileManager.default.contents(atPath: path) else { continue }
            if d.range(of: bytes) != nil { out.append(name) }
        }
        return out
    }

    struct Three {
        let dir = TempDir()
        var alice: String { dir.path + "/alice" }
        var bob: String { dir.path + "/bob" }
        var relay: String { dir.path + "/relay" }
    }

    static func titles(_ w: LogbookWriter) throws -> Set<String> { Set(try w.reader.items().compactMap(\.title)) }

    @Test func membersShareThroughARelayThatHoldsOnlyCiphertext() async throws {
        let t = Three()
        let alice = try await LogbookWriter.open(at: t.alice, creating: true)
        let bob = try await LogbookWriter.open(at: t.bob, creating: true)
        let relay = try await LogbookWriter.open(at: t.relay, creating: true)
        defer { try? alice.close(); try? bob.close(); try? relay.close() }

        let share = try await alice.write { try $0.createShare(name: "Groceries NAMESECRET") }
        let card = try #require(try bob.reader.memberCard())
        #expect(MemberCard(printable: card.printable) == card)
        try await alice.write { try $0.addMember(card, to: share) }
        let milk = UUID()
        try await alice.write {
            try $0.append([Change.create(ItemValues(title: "TITLESECRET milk", notes: "NOTESECRET"), id: milk)], toShare: share)
        }
        #expect(try Self.titles(alice) == ["TITLESECRET milk"])

        // A store takes only its own shares' logs, unless it is made a relay (a folder the
        // members meet at): this one, before, declines them.
        _ = try await relay.sync(with: Peer(t.alice))
        let relayHolds = try Store.open(at: t.relay).origins().filter { $0 != relay.replicaID }
        #expect(relayHolds.isEmpty, "\(relayHolds)")  // alice holds only the share's logs
        try await relay.write { try $0.takeEveryShare() }
        _ = try await relay.sync(with: Peer(t.alice))
        _ = try await bob.sync(with: Peer(t.relay))
        #expect(try Self.titles(bob) == ["TITLESECRET milk"])
        #expect(try Self.titles(relay).isEmpty)
        for needle in ["TITLESECRET", "NOTESECRET", "NAMESECRET"] {
            #expect(Self.filesContaining(needle, under: t.relay) == [], "the relay holds \(needle) in the clear")
        }
        let seenByBob = try #require(try bob.reader.shares().first)
        #expect(seenByBob.id == share && seenByBob.name == "Groceries NAMESECRET" && seenByBob.holdsKey)
        #expect(Set(seenByBob.members) == [alice.replicaID, bob.replicaID])
        let seenByRelay = try #require(try relay.reader.shares().first)
        #expect(seenByRelay.name == "" && !seenByRelay.holdsKey, "the relay learnt the share's name or key")

        // Bob writes; Alice reads it through the relay.
        try await bob.write { try $0.append([Change.update(milk, ItemValues(status: "done"))], toShare: share) }
        _ = try await relay.sync(with: Peer(t.bob))
        _ = try await alice.sync(with: Peer(t.relay))
        let statuses = try await alice.reader.items().map(\.status)
        #expect(statuses == ["done"])
        #expect(Self.filesContaining("done", under: t.relay + "/log") == [])
        // The relay compacts (a snapshot leaves the shares' logs whole); a new replica outside
        // the share that starts from it bootstraps from that snapshot and gets no log of the share.
        try await relay.write { b in _ = try b.create(ItemValues(title: "relay's own")) }
        _ = try await relay.compact(withoutPeers: true)
        let late = try await LogbookWriter.open(at: t.dir.path + "/late", creating: true)
        defer { try? late.close() }
        _ = try await late.sync(with: Peer(t.relay))
        let lateShares = try late.reader.shares()
        #expect(lateShares.isEmpty)
        #expect(try Set(Store.open(at: t.dir.path + "/late").origins()) == [relay.replicaID, late.replicaID])
        #expect(try Self.titles(late) == ["relay's own"])
        // The relay cannot write to the share, and nobody but the admin changes members.
        #expect(throws: LogbookError.self) { try relay.write { try $0.append([Change.create(ItemValues(title: "x"))], toShare: share) } }
        let relayCard = try #require(try relay.reader.memberCard())
        #expect(throws: LogbookError.self) { try bob.write { try $0.addMember(relayCard, to: share) } }
    }

    @Test func aRemovedMemberReadsNothingWrittenAfter() async throws {
        let t = Three()
        let alice = try await LogbookWriter.open(at: t.alice, creating: true)
        let bob = try await LogbookWriter.open(at: t.bob, creating: true)
        let carol = try await LogbookWriter.open(at: t.relay, creating: true)
        defer { try? alice.close(); try? bob.close(); try? carol.close() }
        let share = try await alice.write { try $0.createShare(name: "team") }
        let bobCard = try #require(try bob.reader.memberCard())
        try await alice.write { try $0.addMember(bobCard, to: share) }
        let carolCard = try #require(try carol.reader.memberCard())
        try await alice.write { try $0.addMember(carolCard, to: share) }
        try await alice.write { try $0.append([Change.create(ItemValues(title: "before"))], toShare: share) }
        _ = try await bob.sync(with: Peer(t.alice))
        _ = try await carol.sync(with: Peer(t.alice))
        #expect(try Self.titles(bob) == ["before"])

        try await alice.write { try $0.removeMember(bob.replicaID, from: share) }
        try await alice.write { try $0.append([Change.create(ItemValues(title: "AFTERREMOVAL"))], toShare: share) }
        _ = try await carol.sync(with: Peer(t.alice))
        _ = try await bob.sync(with: Peer(t.alice))
        #expect(try Self.titles(carol) == ["before", "AFTERREMOVAL"], "a remaining member lost the rotated key")
        #expect(try Self.titles(bob) == ["before"])
        #expect(Self.filesContaining("AFTERREMOVAL", under: t.bob) == [])
        let info = try #require(try bob.reader.shares().first)
        #expect(info.epoch == 2 && !info.holdsKey && !info.members.contains(bob.replicaID))
        // Bob can no longer write into the share; Carol can, with the new key.
        #expect(throws: LogbookError.self) { try bob.write { try $0.append([Change.create(ItemValues(title: "late"))], toShare: share) } }
        try await carol.write { try $0.append([Change.create(ItemValues(title: "carol's"))], toShare: share) }
        _ = try await alice.sync(with: Peer(t.relay))
        #expect(try Self.titles(alice) == ["before", "AFTERREMOVAL", "carol's"])
    }

    /// Three users, five replicas, two shares with overlapping members; random offline edits
    /// into the shares and random syncs between any two replicas (by path: every replica, member
    /// or not, relays every log). Afterwards every member of a share holds the same rows of it,
    /// and no other replica holds a byte of them in the clear.
    @Test(arguments: [UInt64(1), 2, 3])
    func sharesConvergeOnTheirMembersAndNowhereElse(seed: UInt64) async throws {
        var rng = SplitMix64(seed: seed)
        let dir = TempDir()
        let names = ["alice1", "alice2", "bob1", "bob2", "carol1"]
        var w: [LogbookWriter] = []
        for n in names { w.append(try await LogbookWriter.open(at: dir.path + "/" + n, creating: true)) }
        defer { for x in w { try? x.close() } }
        func card(_ i: Int) throws -> MemberCard { try #require(try w[i].reader.memberCard()) }
        // S1: alice1's, with alice2 and bob1. S2: bob1's, with bob2, carol1 and alice2.
        let cards = try (0..<5).map(card)
        let s1 = try await w[0].write { b in
            let s = try b.createShare(name: "S1")
            for i in [1, 2] { try b.addMember(cards[i], to: s) }
            return s
        }
        let s2 = try await w[2].write { b in
            let s = try b.createShare(name: "S2")
            for i in [3, 4, 1] { try b.addMember(cards[i], to: s) }
            return s
        }
        let members: [ShareID: Set<Int>] = [s1: [0, 1, 2], s2: [2, 3, 4, 1]]
        let prefix: [ShareID: String] = [s1: "ONE", s2: "TWO"]
        var ids: [ShareID: [UUID]] = [s1: [], s2: []]
        for _ in 0..<50 {
            let i = Int(rng.next() % 5)
            if rng.next() % 2 == 0 {
                let j = (i + 1 + Int(rng.next() % 4)) % 5
                _ = try await w[i].sync(with: Peer(dir.path + "/" + names[j]))
                continue
            }
            let mine = members.filter { $0.value.contains(i) }.map(\.key).sorted()
            guard !mine.isEmpty else { continue }
            let share = mine[Int(rng.next() % UInt64(mine.count))]
            let change: Change
            var created: UUID?
            if let known = ids[share], !known.isEmpty, rng.next() % 3 == 0 {
                change = Change.update(known[Int(rng.next() % UInt64(known.count))], ItemValues(status: .set("s\(rng.next() % 100)")))
            } else {
                let id = UUID()
                created = id
                change = Change.create(ItemValues(title: .set("\(prefix[share]!)-\(rng.next() % 1_000_000)")), id: id)
            }
            // A member that has not yet received the membership log cannot write yet: skipped.
            do {
                try await w[i].write { b in _ = try b.append([change], toShare: share) }
                if let created { ids[share, default: []].append(created) }
            } catch {}
        }
        // Everyone syncs with everyone, twice: all logs everywhere.
        for _ in 0..<2 { for i in 0..<5 { for j in 0..<5 where i != j { _ = try await w[i].sync(with: Peer(dir.path + "/" + names[j])) } } }
        // Frames pushed into a store by path are projected by its owner at its next write.
        for x in w { _ = try await x.write { try $0.replay() } }
        for (share, m) in members {
            let p = prefix[share]!
            var seen: [Int: [String]] = [:]
            for i in 0..<5 {
                let rows = try await w[i].reader.items().filter { ($0.title ?? "").hasPrefix(p + "-") }
                seen[i] = rows.map { "\($0.id) \($0.title ?? "") \($0.status ?? "")" }.sorted()
            }
            let reference = seen[m.sorted()[0]]!
            for i in m { #expect(seen[i] == reference, "member \(names[i]) of \(p) differs") }
            for i in Set(0..<5).subtracting(m) {
                #expect(seen[i] == [], "\(names[i]) reads \(p)")
                #expect(Self.filesContaining(p + "-", under: dir.path + "/" + names[i]) == [], "\(names[i]) holds \(p) in the clear")
                // Partial replication: not a frame of the share's logs, not even as ciphertext.
                let store = try Store.open(at: dir.path + "/" + names[i])
                for o in try store.origins() {
                    let kind = try ShareDirectory.scope(ofLog: store, origin: o)
                    #expect(kind != .sealed(share) && kind != .membership(share), "\(names[i]) holds log \(o) of \(p)")
                }
            }
        }
    }

    @Test func aDeletedShareLeavesNoKeyOnAMemberThatSyncedIt() async throws {
        let t = Three()
        let alice = try await LogbookWriter.open(at: t.alice, creating: true)
        let bob = try await LogbookWriter.open(at: t.bob, creating: true)
        defer { try? alice.close(); try? bob.close() }
        let share = try await alice.write { try $0.createShare(name: "gone") }
        let bobCard = try #require(try bob.reader.memberCard())
        try await alice.write { try $0.addMember(bobCard, to: share) }
        try await alice.write { try $0.append([Change.create(ItemValues(title: "DELETEDSECRET"))], toShare: share) }
        _ = try await bob.sync(with: Peer(t.alice))
        #expect(try Self.titles(bob) == ["DELETEDSECRET"])
        #expect(FileManager.default.fileExists(atPath: t.bob + "/shares/\(share).keys"))

        try await alice.write { try $0.deleteShare(share) }
        _ = try await bob.sync(with: Peer(t.alice))
        #expect(!FileManager.default.fileExists(atPath: t.bob + "/shares/\(share).keys"))
        #expect(FileManager.default.fileExists(atPath: t.bob + "/shares/\(share).deleted"))
        let info = try #require(try bob.reader.shares().first)
        #expect(info.deleted && !info.holdsKey)
        #expect(try Self.titles(bob).isEmpty, "the deleted share's rows are still readable")
        #expect(Self.filesContaining("DELETEDSECRET", under: t.bob) == [])
        #expect(throws: LogbookError.self) { try alice.write { try $0.append([Change.create(ItemValues(title: "x"))], toShare: share) } }
    }

    /// `evctl purge --share`: a relay and a member drop a deleted share's sealed logs from disk
    /// (never a live share's), keep its membership log, and decline the share's frames after,
    /// from a member that had not synced the deletion too.
    @Test func aDeletedSharesCiphertextIsPurgedFromARelayAndAMember() async throws {
        let t = Three()
        let alice = try await LogbookWriter.open(at: t.alice, creating: true)
        let bob = try await LogbookWriter.open(at: t.bob, creating: true)
        let relay = try await LogbookWriter.open(at: t.relay, creating: true)
        defer { try? alice.close(); try? bob.close(); try? relay.close() }
        try await relay.write { try $0.takeEveryShare() }
        let share = try await alice.write { try $0.createShare(name: "to purge") }
        let bobCard = try #require(try bob.reader.memberCard())
        try await alice.write { try $0.addMember(bobCard, to: share) }
        try await alice.write { try $0.append([Change.create(ItemValues(title: "PURGE alice"))], toShare: share) }
        _ = try await bob.sync(with: Peer(t.alice))
        try await bob.write { try $0.append([Change.create(ItemValues(title: "PURGE bob"))], toShare: share) }
        _ = try await relay.sync(with: Peer(t.alice))
        _ = try await relay.sync(with: Peer(t.bob))
        func sealedLogs(_ path: String) throws -> [ReplicaID] {
            let store = try Store.open(at: path)
            return try store.origins().filter { try ShareDirectory.scope(ofLog: store, origin: $0) == .sealed(share) }
        }
        #expect(try sealedLogs(t.relay).count == 2)

        // A live share is never purged.
        #expect(throws: LogbookError.self) { try relay.write { try $0.purgeShare(share) } }
        #expect(try sealedLogs(t.relay).count == 2)

        try await alice.write { try $0.deleteShare(share) }
        _ = try await relay.sync(with: Peer(t.alice))
        let r = try await relay.write { try $0.purgeShare(share) }
        #expect(r.logs.count == 2 && r.bytes > 0, "\(r)")
        #expect(try sealedLogs(t.relay).isEmpty)
        let held = try Store.open(at: t.relay).origins()
        #expect(held.contains(r.membershipLog), "the membership log, which carries the deletion, was dropped")
        #expect(FileManager.default.fileExists(atPath: t.relay + "/shares/\(share).purged"))

        // Bob has not synced the deletion, and writes on: the relay declines his sealed frames,
        // and bob learns the deletion from it.
        try await bob.write { try $0.append([Change.create(ItemValues(title: "PURGE late"))], toShare: share) }
        _ = try await relay.sync(with: Peer(t.bob))
        #expect(try sealedLogs(t.relay).isEmpty, "the relay took a purged share's frames again")
        _ = try await bob.sync(with: Peer(t.relay))
        #expect(try #require(try bob.reader.shares().first).deleted)
        // The relay's sync pushed the deletion into bob's store by path: bob's keys go at his
        // next write (a store reached by path is never asked for its key).
        try await bob.write { _ in }
        #expect(!FileManager.default.fileExists(atPath: t.bob + "/shares/\(share).keys"))
        #expect(try Self.titles(bob).isEmpty)
        let again = try await relay.write { try $0.purgeShare(share) }
        #expect(again.logs.isEmpty)

        // Bob drops his copies too; the relay compacts, and a rebuild reads what is left.
        let mine = try await bob.write { try $0.purgeShare(share) }
        #expect(mine.logs.count == 2)
        #expect(try sealedLogs(t.bob).isEmpty)
        _ = try await relay.compact(withoutPeers: true)
        _ = try await bob.sync(with: Peer(t.relay))
        #expect(try sealedLogs(t.bob).isEmpty)
        _ = try await alice.sync(with: Peer(t.relay))
        #expect(try sealedLogs(t.alice).count == 1, "alice never purged: she still holds her own log, as ciphertext")
    }

    /// A member who learns the id of an item outside the share (another member's private item)
    /// and writes to it in its sealed log, with a build that skips the door's check, changes
    /// nothing on replicas that hold the item privately: the event is not applied, and is named.
    /// The door refuses to write a share's entity into the private log, or a private one into a share.
    @Test func aShareEventCannotChangeAnItemOutsideTheShare() async throws {
        let t = Three()
        let alice = try await LogbookWriter.open(at: t.alice, creating: true)
        let bob = try await LogbookWriter.open(at: t.bob, creating: true)
        defer { try? alice.close() }
        let share = try await alice.write { try $0.createShare(name: "chores") }
        try await alice.write { try $0.addMember(try #require(try bob.reader.memberCard()), to: share) }
        let diary = UUID(), dishes = UUID()
        try await alice.write { try $0.append([Change.create(ItemValues(title: "alice's diary"), id: diary)]) }
        try await alice.write { try $0.append([Change.create(ItemValues(title: "dishes"), id: dishes)], toShare: share) }
        _ = try await bob.sync(with: Peer(t.alice))
        #expect(try Self.titles(bob) == ["alice's diary", "dishes"])  // a path peer holds every log (no partial replication yet)

        // The door: a shared item is not edited privately, a private one is not written to a share.
        let privately = try await #require(throws: LogbookError.self) { try await alice.write { try $0.append([Change.update(dishes, ItemValues(title: "x"))]) } }
        #expect(privately.message.contains("belongs to share \(share)"), "\(privately)")
        let intoShare = try await #require(throws: LogbookError.self) { try await bob.write { try $0.append([Change.update(diary, ItemValues(title: "x"))], toShare: share) } }
        #expect(intoShare.message.contains("private data"), "\(intoShare)")

        // Below the door: bob's sealed log names alice's private item.
        try bob.close()
        let appender = try LogAppender(store: try Store.open(at: t.bob))
        _ = try appender.appendShared([Mutation(entity: .item, op: .update, entityID: diary, fields: [Field("title", .text("read by bob"))])], to: share)
        try appender.close()
        _ = try await alice.sync(with: Peer(t.bob))
        #expect(try Self.titles(alice) == ["alice's diary", "dishes"])
        let named = try await alice.reader.anomalies().filter { $0.kind == "outside_share" }
        #expect(named.count == 1 && named[0].entityID == diary.lowercasedString && (named[0].details ?? "").contains("private data"), "\(named)")
        // Bob's own replica holds the private item too: it does not apply its own event either.
        let bobAgain = try await LogbookWriter.open(at: t.bob)
        defer { try? bobAgain.close() }
        try await bobAgain.write { try $0.replay() }
        #expect(try Self.titles(bobAgain) == ["alice's diary", "dishes"])
        // The shared item is still edited through the share, and a rebuild gives the same rows.
        try await alice.write { try $0.append([Change.update(dishes, ItemValues(title: "dishes, done"))], toShare: share) }
        #expect(try Self.titles(alice) == ["alice's diary", "dishes, done"])
        let (_, difference) = try await alice.reader.verify(deep: true)
        #expect(difference == nil, "\(difference ?? "")")
    }

    /// A snapshot (compaction's, or one a server seeds replicas with) leaves a share's rows out:
    /// a member makes them again from the share's logs, which are never cut, and a replica
    /// outside the share never gets them that way.
    @Test func aMembersSnapshotHoldsNoShareRowAndItsRebuildMakesThemAgain() async throws {
        let t = Three()
        let alice = try await LogbookWriter.open(at: t.alice, creating: true)
        defer { try? alice.close() }
        let share = try await alice.write { try $0.createShare(name: "kept out") }
        try await alice.write { try $0.append([Change.create(ItemValues(title: "PRIVATEKEPT"))]) }
        try await alice.write { try $0.append([Change.create(ItemValues(title: "SNAPSECRET"))], toShare: share) }
        _ = try await alice.compact(withoutPeers: true)
        let snapshot = t.alice + "/snapshot.sqlite"
        let bytes = try #require(FileManager.default.contents(atPath: snapshot))
        #expect(bytes.range(of: Data("PRIVATEKEPT".utf8)) != nil)
        #expect(bytes.range(of: Data("SNAPSECRET".utf8)) == nil, "the snapshot holds a share's row")
        #expect(try Self.titles(alice) == ["PRIVATEKEPT", "SNAPSECRET"])
        // A rebuild starts from the snapshot and applies the share's logs from their first frame.
        let (_, difference) = try await alice.reader.verify(deep: true)
        #expect(difference == nil, "\(difference ?? "")")
    }

    /// The move rule: an item and its subtree, with its tags, item tags and time entries, are
    /// written anew in the share and deleted where they were; another member sees them whole,
    /// a retried move changes nothing, and a move to where the item already is is refused.
    @Test func anItemMovesIntoAShareWithItsSubtree() async throws {
        let t = Three()
        let alice = try await LogbookWriter.open(at: t.alice, creating: true)
        let bob = try await LogbookWriter.open(at: t.bob, creating: true)
        defer { try? alice.close(); try? bob.close() }
        let share = try await alice.write { try $0.createShare(name: "trip") }
        try await alice.write { try $0.addMember(try #require(try bob.reader.memberCard()), to: share) }
        let trip = UUID(), tickets = UUID(), travel = UUID()
        try await alice.write {
            try $0.append([
                Change.create(ItemValues(title: "trip"), id: trip),
                Change.create(ItemValues(parentID: .set(trip), title: "tickets"), id: tickets),
                Change.create(TagValues(name: "travel"), id: travel),
                Change.tag(trip, with: travel),
                Change.create(TimeEntryValues(itemID: .set(tickets), durationSeconds: 600)),
            ])
        }
        let renamed = try await alice.write { try $0.moveItem(trip, toShare: share) }
        #expect(renamed.count == 5, "\(renamed)")  // two items, the item tag, the time entry, the tag
        let newTrip = try #require(renamed[trip]), newTickets = try #require(renamed[tickets])
        // Here: the private rows are deleted, the share's hold the same values.
        let items = try await alice.reader.items()
        #expect(Set(items.map(\.id)) == [newTrip, newTickets])
        #expect(items.first { $0.id == newTickets }?.parentID == newTrip)
        #expect(try await alice.reader.tags(of: items)[newTrip]?.map(\.name) == ["travel"])
        // The old item is gone, and the new one is in the share already: both refused.
        #expect(throws: LogbookError.self) { try alice.write { try $0.moveItem(trip, toShare: share) } }
        #expect(throws: LogbookError.self) { try alice.write { try $0.moveItem(newTrip, toShare: share) } }
        // Bob, a member, sees the moved subtree whole.
        _ = try await bob.sync(with: Peer(t.alice))
        let bobs = try await bob.reader.items()
        #expect(Set(bobs.map(\.id)) == [newTrip, newTickets])
        #expect(try await bob.reader.tags(of: bobs)[newTrip]?.map(\.name) == ["travel"])
        // And edits it in the share (the door sends the edit there).
        try await bob.write { try $0.append([Change.update(newTickets, ItemValues(status: "booked"))], toShare: share) }
        _ = try await alice.sync(with: Peer(t.bob))
        #expect(try await alice.reader.items().first { $0.id == newTickets }?.status == "booked")
    }
    /// An item whose texts together pass what one event may hold (each text written in an event
    /// of its own, each within the bound) still moves: its row is written anew as a create and
    /// updates after it, each within the bound, and reads back whole in the share.
    @Test func anItemWhoseTextsPassOneEventsBoundStillMoves() async throws {
        let t = Three()
        let alice = try await LogbookWriter.open(at: t.alice, creating: true)
        defer { try? alice.close() }
        let share = try await alice.write { try $0.createShare(name: "notes") }
        let item = UUID()
        @Sendable func big(_ c: Character) -> String { String(repeating: c, count: 250_000) }
        try await alice.write {
            try $0.append([Change.create(ItemValues(title: .set(big("t"))), id: item)])
            try $0.append([Change.update(item, ItemValues(notes: .set(big("n"))))])
            try $0.append([Change.update(item, ItemValues(status: .set(big("s"))))])
            try $0.append([Change.update(item, ItemValues(itemType: .set(big("i"))))])
            try $0.append([Change.update(item, ItemValues(locationName: .set(big("l"))))])
        }
        let renamed = try await alice.write { try $0.moveItem(item, toShare: share) }
        let moved = try #require(renamed[item])
        let row = try #require(try await alice.reader.items().first { $0.id == moved })
        #expect(row.title == big("t") && row.notes == big("n") && row.status == big("s"))
        #expect(row.itemType == big("i") && row.locationName == big("l"))
    }
}
