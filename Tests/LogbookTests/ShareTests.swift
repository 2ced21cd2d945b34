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
}
