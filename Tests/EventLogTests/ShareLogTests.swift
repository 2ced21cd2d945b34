import Crypto
import Domain
import Foundation
import TestSupport
import Testing
@testable import EventLog

/// Shares at the log's level, attacks first: a relay that alters, strips or re-labels a share's
/// frames; a stranger who writes a membership log for someone else's share; a member who seals
/// contents that do not read. See docs/SHARING.md.
@Suite struct ShareLogTests {
    struct Replica {
        let store: Store
        let key: ReplicaKey
        init(_ path: String) throws {
            key = .generate()
            store = try Store.create(at: path, signingKey: key)
        }
        func appender() throws -> LogAppender { try LogAppender(store: store) }
        /// An appender that takes every share's logs, as a hub or relay does.
        func relayAppender() throws -> LogAppender {
            var options = AppendOptions()
            options.takesEveryShare = true
            return try LogAppender(store: store, options: options)
        }
    }

    /// Every frame `from` holds of `origin`.
    static func frames(_ from: Store, _ origin: ReplicaID) throws -> [[UInt8]] {
        var out: [[UInt8]] = []
        try LogReader(store: from).forEachFrame(origin: origin) { _, b in out.append(Array(b)); return true }
        return out
    }

    /// Copies every origin's frames from `a` into `b` (a sync by hand, one batch per origin in
    /// one receive, as a page brings them); what `b` declined, in frames.
    @discardableResult
    static func copy(_ a: Store, into b: LogAppender) throws -> Int {
        let batches = try a.origins().map { try frames(a, $0) }.filter { !$0.isEmpty }
        return try b.receive(batches: batches).reduce(0) { $0 + (try $1.get().declined) }
    }

    /// Alice's share with Bob in it and one sealed event of Alice's.
    static func aliceAndBob(_ dir: TempDir) throws -> (alice: Replica, bob: Replica, share: ShareID) {
        let alice = try Replica(dir.path + "/alice"), bob = try Replica(dir.path + "/bob")
        let a = try alice.appender()
        defer { try? a.close() }
        let share = try a.createShare(name: "home")
        try a.addMember(bob.key.memberCard, to: share)
        _ = try a.appendShared([item("SEALEDTITLE")], to: share)
        return (alice, bob, share)
    }

    static func fixCRC(_ f: inout [UInt8]) { f = CraftedFrames.withChecksumMadeRight(f) }

    /// Receives `frames` into a new store; the refusal, or nil.
    static func refusal(_ frames: [[UInt8]], _ dir: TempDir) throws -> LogError? {
        let r = try Replica(dir.path + "/r\(UUID().uuidString.prefix(8))")
        let a = try r.relayAppender()  // a receiver that takes the frame (a member's declines nothing of its share either)
        defer { try? a.close() }
        do { _ = try a.receive(frames); return nil } catch let e as LogError { return e }
    }

    /// A relay (a hub's store) holds a share's frames as ciphertext and passes them on; a member
    /// reads them; a replica outside the share declines them (partial replication) and holds
    /// nothing of the share, not even its membership log.
    @Test func aMemberReadsTheSealedEventsARelayHoldsOnlyCiphertextAndAStrangerNothing() throws {
        let dir = TempDir()
        let (alice, bob, share) = try Self.aliceAndBob(dir)
        let relay = try Replica(dir.path + "/relay")
        let r = try relay.relayAppender()
        #expect(try Self.copy(alice.store, into: r) == 0)
        try r.close()
        let b = try bob.appender()
        #expect(try Self.copy(relay.store, into: b) == 0)
        try b.close()
        let log = ReplicaID.shareLog(share, signingKey: alice.key.publicKey)
        let members = ReplicaID.shareMembers(share, signingKey: alice.key.publicKey)
        #expect(try LogReader(store: bob.store).events(origin: log).map { $0.fields.first?.value } == [.text("SEALEDTITLE")])
        #expect(try LogReader(store: relay.store).events(origin: log).isEmpty, "a relay read a sealed event")
        let report = try Verifier(store: relay.store).run()
        #expect(report.isClean && report.sealedUnopened == 1, "\(report.problems)")
        let frame = try #require(try Self.frames(relay.store, log).first)
        #expect(frame.firstRange(of: Array("SEALEDTITLE".utf8)) == nil)

        let stranger = try Replica(dir.path + "/stranger")
        let s = try stranger.appender()
        let declined = try Self.copy(relay.store, into: s)
        #expect(declined == 3, "\(declined)")  // create, add, and the sealed frame
        #expect(Set(s.declinedShareLogs.keys) == [log, members])
        try s.close()
        #expect(try Self.frames(stranger.store, log).isEmpty && Self.frames(stranger.store, members).isEmpty)
    }

    /// A replica joins a share in a receive that brings the middle of the share's log, whose
    /// start an earlier page brought (declined then): the middle is declined too, no gap is
    /// refused, and the log is asked for again from its start and taken. A frame flagged as a
    /// share's whose origin does not derive from it is not declined but refused.
    /// A share append whose clock cannot advance (poisoned by a far-future value) fails with an
    /// error and leaves nothing half-built behind: the appends after it fail the same way, a
    /// batch that would be encoded on every core included, and never trap on a stale frame.
    @Test func aShareAppendThatFailsPartWayLeavesTheNextAppendsErrorsNotTraps() throws {
        let dir = TempDir()
        let alice = try Replica(dir.path + "/alice")
        let a = try alice.appender()
        defer { try? a.close() }
        let share = try a.createShare(name: "home")
        a.clock.observe(HLC(rawValue: UInt64.max - 1))
        #expect(throws: LogError.self) { _ = try a.appendShared([item("one"), item("two")], to: share) }
        #expect(throws: LogError.self) { _ = try a.append((0..<300).map { item("p\($0)") }) }
        #expect(throws: LogError.self) { _ = try a.append([item("q")]) }
        #expect(throws: LogError.self) { _ = try a.appendShared([item("three")], to: share) }
    }

    /// A share's log whose tip is ahead of this replica's clock (a floor a snapshot set) is
    /// continued after that tip, each event's clock after the one before: the first events were
    /// moved past the tip, and the clock could then tick onto the clock already given to one of
    /// them, which trapped in the frame encoder.
    @Test func aSharesLogAheadOfTheClockIsContinuedInOrder() throws {
        let dir = TempDir()
        let alice = try Replica(dir.path + "/alice")
        // A wall clock that stands still: each tick is the one before plus one.
        let a = try LogAppender(store: alice.store, wallClock: ManualClock())
        defer { try? a.close() }
        let share = try a.createShare(name: "home")
        let origin = ReplicaID.shareLog(share, signingKey: alice.key.publicKey)
        // The clock's next tick lands on the floor's clock, the one after on the floor's plus one.
        let floor = LogTip(lastSeq: Seq(5), lastHLC: HLC(rawValue: a.clock.last.rawValue + 1), lastHash: FrameHash(bytes: [UInt8](repeating: 7, count: 32)))
        try alice.store.writeFloor(floor, origin: origin)
        let r = try a.appendShared([item("one"), item("two"), item("three")], to: share)
        #expect(r.events == 3)
        var hlcs: [HLC] = []
        try LogReader(store: alice.store).forEachFrame(origin: origin) { h, _ in hlcs += [h.firstHLC, h.lastHLC]; return true }
        #expect(hlcs.first.map { $0 > floor.lastHLC } == true)
        #expect(try LogReader(store: alice.store).tip(origin: origin).lastSeq == Seq(8))
    }

    /// A share's membership records may each take nearly a frame (a removal wraps the new key to
    /// every member): such a record is written, and a frame is finished before a record that
    /// might not fit beside what it holds, even when frames are cut late by bytes.
    @Test func largeMembershipRecordsEachFitAFrame() throws {
        let dir = TempDir()
        let alice = try Replica(dir.path + "/alice")
        var options = AppendOptions()
        options.frameRawBytesMax = 14 << 20
        let a = try LogAppender(store: alice.store, options: options)
        defer { try? a.close() }
        let share = try a.createShare(name: "many")
        let members = try #require(try ShareDirectory.shares(alice.store)[share]).membersOrigin
        func record(_ bytes: Int) -> Mutation {
            Mutation(entity: .shareRecord, op: .update, entityID: share.rawValue,
                     fields: (0..<(bytes / 200_000)).map { Field("pad.\($0)", .text(String(repeating: "p", count: 200_000))) })
        }
        let before = try LogReader(store: alice.store).tip(origin: members).lastSeq
        _ = try a.writeShareFrames([record(400_000), record(9_000_000), record(9_000_000)], origin: members, share: share, key: nil,
                                   signer: alice.key, op: "test", membership: true)
        var raws: [Int] = []
        try LogReader(store: alice.store).forEachFrame(origin: members, from: before.next) { h, _ in raws.append(Int(h.rawBytes)); return true }
        #expect(raws.count == 2 && raws.allSatisfy { $0 <= LogAppender.membershipRecordBytesMax })
        #expect(try LogReader(store: alice.store).tip(origin: members).lastSeq.rawValue == before.rawValue + 3)
        // Past what a frame holds, even here: refused, nothing written.
        #expect(throws: LogError.self) {
            _ = try a.writeShareFrames([record(17_000_000)], origin: members, share: share, key: nil, signer: alice.key, op: "test", membership: true)
        }
        #expect(try LogReader(store: alice.store).tip(origin: members).lastSeq.rawValue == before.rawValue + 3)
    }

    /// A membership log's skipped records are described up to a bound and counted past it (a
    /// log of many junk records held a message for each).
    @Test func skippedMembershipRecordsAreListedUpToABound() throws {
        let admin = ReplicaKey.generate()
        let nonce = [UInt8](repeating: 9, count: 16)
        let share = ShareID.derived(creator: admin.publicKey, nonce: nonce)
        let origin = ReplicaID.shareMembers(share, signingKey: admin.publicKey)
        func event(_ seq: UInt64, _ fields: [Field], op: Op = .update) -> Event {
            Event(origin: origin, seq: Seq(seq), hlc: HLC(rawValue: seq << 16),
                  mutation: Mutation(entity: .shareRecord, op: op, entityID: share.rawValue, fields: fields))
        }
        var events = [event(1, [Field("record", .text("create")), Field("nonce", .text(Hex.encode(nonce))),
                                Field("admin", .text(Hex.encode(admin.publicKey)))], op: .create)]
        events += (2...1_001).map { event(UInt64($0), [Field("record", .text("junk"))]) }
        let state = try #require(ShareDirectory.state(share: share, origin: origin, events: events))
        #expect(state.problems.count == ShareState.problemsMax)
        #expect(state.problemsNotListed == 1_000 - ShareState.problemsMax)
    }

    /// A membership log read from where a reader left it gives the state read from its start,
    /// wherever it was left: in the store, and from events as a hub reads them. (A server re-read
    /// the whole log at each push that grew it, quadratic over the log's life.)
    @Test func aMembershipLogContinuedFromAnyPointReadsAsReadWhole() throws {
        let dir = TempDir()
        let alice = try Replica(dir.path + "/alice")
        let others = try (0..<3).map { try Replica(dir.path + "/m\($0)") }
        let a = try alice.appender()
        defer { try? a.close() }
        let share = try a.createShare(name: "folded")
        for m in others { try a.addMember(m.key.memberCard, to: share) }
        try a.removeMember(others[1].key.replicaID, from: share)
        try a.addMember(others[1].key.memberCard, to: share)
        try a.removeMember(others[0].key.replicaID, from: share)
        let origin = try #require(try ShareDirectory.shares(alice.store)[share]).membersOrigin
        let whole = try #require(try ShareDirectory.state(alice.store, share: share, origin: origin))
        let events = try LogReader(store: alice.store).events(origin: origin)
        #expect(events.count == 8 && whole.members.count == 3 && whole.epoch == 3, "\(events.count) records, \(whole.members.count) members, epoch \(whole.epoch)")
        let full = try #require(try ShareDirectory.state(alice.store, share: share, origin: origin, continuing: nil))
        #expect(full.state == whole && full.through == events.last?.seq)
        for k in 1...events.count {
            let part = try #require(ShareDirectory.state(share: share, origin: origin, continuing: nil, events: Array(events.prefix(k))))
            #expect(part.through == events[k - 1].seq)
            let rest = try #require(try ShareDirectory.state(alice.store, share: share, origin: origin, continuing: part))
            #expect(rest == full, "continued after \(k) records")
            let restOfEvents = try #require(ShareDirectory.state(share: share, origin: origin, continuing: part, events: Array(events.dropFirst(k))))
            #expect(restOfEvents == full, "continued from events after \(k) records")
            // Without its keys (what a server keeps), the members, removals and epoch are the same.
            let lean = try #require(try ShareDirectory.state(alice.store, share: share, origin: origin, continuing: part.withoutKeys()))
            #expect(lean.state.members == full.state.members && lean.state.removed == full.state.removed
                    && lean.state.epoch == full.state.epoch && lean.through == full.through)
        }
        // A log whose first record proves no share gives nothing, continued or not.
        #expect(ShareDirectory.state(share: share, origin: origin, continuing: nil, events: Array(events.dropFirst())) == nil)
        // The writer's own record of the share, continued at each change it made (and looked
        // at again by its next write), is the same.
        _ = try a.appendShared([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("t"))])], to: share)
        let kept = try #require(a.shareCache[share]).fold
        #expect(kept.state.name == "folded", "the writer opened the share's name")
        var named = full
        named.state.name = "folded"
        #expect(kept == named)
        // Looked up alone, the share's log reads as `shares` reads it, its name opened.
        let alone = try #require(try ShareDirectory.fold(alice.store, share: share))
        #expect(alone.origin == origin && alone.fold == named)
        #expect(try ShareDirectory.shares(alice.store)[share] == named.state)
        #expect(try ShareDirectory.fold(alice.store, share: ShareID(rawValue: UUID())) == nil)
        #expect(try ShareDirectory.fold(others[2].store, share: share) == nil, "a replica that holds nothing of the share")
    }

    @Test func aJoinInTheMiddleOfASharesLogAsksForItAgainFromItsStart() throws {
        let dir = TempDir()
        let alice = try Replica(dir.path + "/alice"), bob = try Replica(dir.path + "/bob")
        let a = try alice.appender()
        let share = try a.createShare(name: "late")
        for n in 0..<3 { _ = try a.appendShared([item("S\(n)")], to: share) }
        try a.addMember(bob.key.memberCard, to: share)
        try a.close()
        let log = ReplicaID.shareLog(share, signingKey: alice.key.publicKey)
        let members = ReplicaID.shareMembers(share, signingKey: alice.key.publicKey)
        let sealed = try Self.frames(alice.store, log), membership = try Self.frames(alice.store, members)
        #expect(sealed.count == 3 && membership.count == 2)
        let b = try bob.appender()
        defer { try? b.close() }
        let first = try b.receive(batches: [Array(sealed[0..<2])])
        #expect(try first[0].get().declined == 2)
        #expect(b.declinedShareLogs[log]?.through == Seq(2))
        let second = try b.receive(batches: [[sealed[2]], membership])
        #expect(try second[0].get().declined == 1 && second[1].get().frames == 2)
        #expect(b.declinedShareLogs[log] == nil && b.sharesJoinedAfterDeclining == 1)
        let third = try b.receive(batches: [sealed])
        #expect(try third[0].get().frames == 3)
        #expect(try LogReader(store: bob.store).events(origin: log).count == 3)

        // A share's frame moved to another origin (checksum fixed): the share and key no longer
        // derive it, so a receiver outside the share refuses it rather than declining it.
        var relabelled = sealed[0]
        let h = try #require(FrameHeader(parsing: relabelled))
        relabelled[8] ^= 0x01
        Self.fixCRC(&relabelled)
        let stranger = try Replica(dir.path + "/stranger")
        let s = try stranger.appender()
        defer { try? s.close() }
        #expect(h.shared)
        #expect(throws: LogError.self) { _ = try s.receive([relabelled]) }
    }

    @Test func aRelayThatAltersStripsOrRelabelsASealedFrameIsRefused() throws {
        let dir = TempDir()
        let (alice, _, share) = try Self.aliceAndBob(dir)
        let log = ReplicaID.shareLog(share, signingKey: alice.key.publicKey)
        let frame = try #require(try Self.frames(alice.store, log).first)
        #expect(try Self.refusal([frame], dir) == nil)
        let h = try #require(FrameHeader(parsing: frame))

        // A ciphertext byte flipped, checksum fixed: the signature fails.
        var altered = frame
        altered[FrameHeader.size + 1] ^= 0x20
        Self.fixCRC(&altered)
        let e1 = try #require(try Self.refusal([altered], dir))
        #expect(e1.description.contains("signature does not verify"), "\(e1)")

        // The share block's share id changed: the origin no longer derives from it.
        var relabelled = frame
        relabelled[h.payloadEnd] ^= 0x01
        Self.fixCRC(&relabelled)
        let e2 = try #require(try Self.refusal([relabelled], dir))
        #expect(e2.description.contains("forged"), "\(e2)")

        // The share flags stripped: a signed frame of an origin the key does not derive alone.
        var stripped = frame
        stripped[6] &= ~UInt8(12)
        Self.fixCRC(&stripped)
        #expect(try Self.refusal([stripped], dir) != nil)

        // Sealed without the share flag, or shared without a signature: refused at the header.
        var sealedOnly = frame
        sealedOnly[6] = (sealedOnly[6] & ~UInt8(4))
        Self.fixCRC(&sealedOnly)
        let e4 = try #require(try Self.refusal([sealedOnly], dir))
        #expect(e4.description.contains("sealed frame that is not a share's"), "\(e4)")
        var unsignedShare = frame
        unsignedShare[6] &= ~UInt8(2)
        Self.fixCRC(&unsignedShare)
        #expect(try Self.refusal([unsignedShare], dir) != nil)

        // A membership frame (not sealed) that claims a key epoch: refused.
        let members = try #require(try Self.frames(alice.store, ReplicaID.shareMembers(share, signingKey: alice.key.publicKey)).first)
        let mh = try #require(FrameHeader(parsing: members))
        var epoch = members
        epoch[mh.payloadEnd + 16] = 1
        Self.fixCRC(&epoch)
        #expect(try Self.refusal([epoch], dir) != nil)
    }

    /// Mallory writes a membership log for Alice's share id with her own key, "adding" Bob with
    /// a key she knows. It is a well-formed log of her own (receivers take it), but its first
    /// record cannot prove the share's id derives from her key: Bob takes no key from it, and
    /// the share stays Alice's.
    @Test func aStrangersMembershipLogForSomeoneElsesShareGivesNoKey() throws {
        let dir = TempDir()
        let (alice, bob, share) = try Self.aliceAndBob(dir)
        let mallory = ReplicaKey.generate()
        let origin = ReplicaID.shareMembers(share, signingKey: mallory.publicKey)
        let planted = ContentKey.generate(epoch: 1)
        let records = [
            Mutation(entity: .shareRecord, op: .create, entityID: share.rawValue, fields: [
                Field("record", .text("create")), Field("name", .text("")), Field("nonce", .text(Hex.encode([UInt8](repeating: 7, count: 16)))),
                Field("admin", .text(Hex.encode(mallory.publicKey))),
            ]),
            Mutation(entity: .shareRecord, op: .update, entityID: share.rawValue, fields: [
                Field("record", .text("add")), Field("member", .text(Hex.encode(bob.key.memberCard.encoded))),
                Field("wrap.1", .text(Hex.encode(try ShareCrypto.wrap(planted, share: share, to: bob.key.memberCard)))),
            ]),
        ]
        let enc = FrameEncoder()
        for (i, m) in records.enumerated() { try enc.add(m, origin: origin, seq: Seq(UInt64(i + 1)), hlc: HLC(wallMillis: UInt64(Date().timeIntervalSince1970 * 1000) + UInt64(i), counter: 0)) }
        let forged = enc.finish(continues: false, previousHash: .zero, signer: mallory,
                                share: (ShareBlock(share: share, epoch: 0, nonce: [UInt8](repeating: 0, count: 12)), nil))
        let b = try bob.appender()
        defer { try? b.close() }
        _ = try b.receive([forged])
        #expect(try ShareDirectory.shares(bob.store).isEmpty, "Mallory's log was taken as the share's")
        #expect(try ShareKeyring.of(bob.store).key(share, epoch: 1) == nil)
        try Self.copy(alice.store, into: b)
        let shares = try ShareDirectory.shares(bob.store)
        #expect(shares[share]?.adminID == alice.key.replicaID)
        #expect(try ShareKeyring.of(bob.store).key(share, epoch: 1) != planted)
        #expect(try ShareKeyring.of(bob.store).key(share, epoch: 1) != nil)
    }

    /// A member can seal anything with the share's key. Contents that do not read are never
    /// taken as data: readers skip the frame (the log reads on past it) and `verify` names it,
    /// its origin, and so its writer.
    @Test func aMembersUnreadableSealedFrameIsSkippedAndNamed() throws {
        let dir = TempDir()
        let (alice, bob, share) = try Self.aliceAndBob(dir)
        let b = try bob.appender()
        try Self.copy(alice.store, into: b)
        try b.close()
        let key = try #require(try ShareKeyring.of(bob.store).key(share, epoch: 1))
        let origin = ReplicaID.shareLog(share, signingKey: bob.key.publicKey)
        let hlc = HLC(wallMillis: UInt64(Date().timeIntervalSince1970 * 1000), counter: 0)
        // Frame 1: garbage records, sealed right and signed by Bob.
        let garbage = [UInt8](repeating: 0xEE, count: 40)
        let block = ShareBlock(share: share, epoch: 1, nonce: [UInt8](repeating: 3, count: 12))
        let sealed = garbage.withUnsafeBytes { ShareCrypto.seal($0, key: key, block: block, origin: origin, baseSeq: Seq(1)) }
        var header = FrameHeader(codec: .raw, continues: false, signed: true, shared: true, sealed: true, origin: origin, baseSeq: Seq(1), count: 1,
                                 rawBytes: UInt32(garbage.count), firstHLC: hlc, lastHLC: hlc,
                                 storedBytes: UInt32(sealed.count + ShareBlock.bytes + FrameSignature.blockBytes), previousHash: .zero, crc: 0)
        var hw = ByteWriter(capacity: FrameHeader.size)
        header.encode(into: &hw)
        var body = ByteWriter(capacity: 256)
        body.raw(sealed)
        block.encode(into: &body)
        let message = hw.bytes.withUnsafeBytes { h in body.bytes.withUnsafeBytes { FrameSignature.message(header: h, payload: $0) } }
        var bad = hw.bytes + body.bytes + bob.key.publicKey + bob.key.sign(message)
        header.crc = 0
        Self.fixCRC(&bad)
        // Frame 2: a good event after it.
        let enc = FrameEncoder()
        try enc.add(item("AFTERGARBAGE"), origin: origin, seq: Seq(2), hlc: HLC(rawValue: hlc.rawValue + 1))
        let good = enc.finish(continues: false, previousHash: bad.withUnsafeBytes { FrameHash.of($0) }, signer: bob.key,
                              share: (ShareBlock(share: share, epoch: 1, nonce: [UInt8](repeating: 4, count: 12)), key))
        let a = try alice.appender()
        _ = try a.receive([bad, good])
        try a.close()
        let events = try LogReader(store: alice.store).events(origin: origin)
        #expect(events.map(\.seq) == [Seq(2)] && events.first?.fields.first?.value == .text("AFTERGARBAGE"))
        let report = try Verifier(store: alice.store).run()
        #expect(report.problems.count == 1)
        #expect(report.problems.first?.message.contains(origin.description) == true && report.problems.first?.message.contains("readers skip it") == true,
                "\(report.problems)")
    }

    /// Only a member writes a share's log; only the admin changes members.
    @Test func strangersAndMembersAreRefusedWhatOnlyTheAdminOrAMemberMayDo() throws {
        let dir = TempDir()
        let (alice, bob, share) = try Self.aliceAndBob(dir)
        let stranger = try Replica(dir.path + "/stranger")
        let s = try stranger.appender()
        defer { try? s.close() }
        try Self.copy(alice.store, into: s)
        #expect(throws: LogError.self) { _ = try s.appendShared([item("x")], to: share) }
        let b = try bob.appender()
        defer { try? b.close() }
        try Self.copy(alice.store, into: b)
        #expect(throws: LogError.self) { try b.addMember(stranger.key.memberCard, to: share) }
        #expect(throws: LogError.self) { try b.removeMember(alice.key.replicaID, from: share) }
        #expect(throws: LogError.self) { try b.deleteShare(share) }
        _ = try b.appendShared([item("bob's")], to: share)
    }

    /// A store is raised to format 3 before it first holds a share's frame (a build before
    /// shares would take one for a damaged tail and cut it off).
    @Test func aStoreTakingAShareFrameRaisesItsFormatTo3() throws {
        let dir = TempDir()
        let (alice, bob, _) = try Self.aliceAndBob(dir)
        #expect(try Store.open(at: alice.store.path).format == 3)
        #expect(try Store.open(at: bob.store.path).format == 2)
        let b = try bob.appender()
        try Self.copy(alice.store, into: b)
        try b.close()
        #expect(try Store.open(at: bob.store.path).format == 3)
    }

    /// A removed member keeps the old epochs' keys; frames it writes with them after its removal
    /// (by the removal record's clock) are not read by anyone. Those written before still are.
    @Test func aRemovedMembersLaterFramesAreNotRead() throws {
        let dir = TempDir()
        let (alice, bob, share) = try Self.aliceAndBob(dir)
        let b = try bob.appender()
        try Self.copy(alice.store, into: b)
        _ = try b.appendShared([item("BEFOREREMOVAL")], to: share)
        try b.close()
        let a = try alice.appender()
        try Self.copy(bob.store, into: a)
        try a.removeMember(bob.key.replicaID, from: share)
        try a.close()
        // Bob, removed, writes with the epoch-1 key he still holds, past the removal's clock.
        let key = try #require(try ShareKeyring.of(bob.store).key(share, epoch: 1))
        let origin = ReplicaID.shareLog(share, signingKey: bob.key.publicKey)
        let tip = try LogReader(store: bob.store).tip(origin: origin)
        let enc = FrameEncoder()
        try enc.add(item("AFTERREMOVAL"), origin: origin, seq: tip.lastSeq.next, hlc: HLC(wallMillis: UInt64(Date().timeIntervalSince1970 * 1000) + 1000, counter: 0))
        let late = enc.finish(continues: false, previousHash: tip.lastHash, signer: bob.key,
                              share: (ShareBlock(share: share, epoch: 1, nonce: [UInt8](repeating: 9, count: 12)), key))
        let a2 = try alice.appender()
        _ = try a2.receive([late])  // well-formed and signed by its origin: held and passed on
        try a2.close()
        let titles = try LogReader(store: alice.store).events(origin: origin).compactMap { $0.fields.first?.value }
        #expect(titles == [.text("BEFOREREMOVAL")])
        let report = try Verifier(store: alice.store).run()
        #expect(report.problems.contains { $0.message.contains("after it was removed from share") }, "\(report.problems)")
    }

    @Test func aMemberCardIsCheckedAgainstTheKeyItNames() throws {
        let key = ReplicaKey.generate()
        let card = key.memberCard
        #expect(MemberCard(printable: card.printable) == card)
        #expect(MemberCard(printable: card.printable.lowercased()) == card)
        var b = card.encoded
        b[40] ^= 1  // another agreement key, same signature
        #expect(MemberCard(bytes: b) == nil)
        #expect(MemberCard(printable: "LBM1-AAAA") == nil)
        #expect(MemberCard(bytes: Array(b.prefix(127))) == nil)
    }

    /// A purge record (`shares/<share>.purged`) reads back what was written, and every damaged
    /// form is refused with its line named, never read as a shorter list.
    @Test func aPurgeRecordReadsBackAndRefusesDamage() throws {
        let a = ReplicaID.random(), b = ReplicaID.random()
        let bytes = SharePurge.encode([a: Seq(7), b: Seq(12)])
        #expect(try SharePurge.parse(bytes, file: "f") == [a: Seq(7), b: Seq(12)])
        #expect(try SharePurge.parse(Array("purged\n".utf8), file: "f") == [:])
        let damaged: [(String, String)] = [
            ("", "does not start"), ("purged", "newline"), ("purge\n", "does not start"),
            ("purged\n\(a) 7", "newline"), ("purged\n\(a) 07\n", "line 2"), ("purged\n\(a) -1\n", "line 2"),
            ("purged\n\(a)  7\n", "line 2"), ("purged\n\(a) 7\nnot-a-uuid 3\n", "line 3"),
            ("purged\n\(a.description.uppercased()) 7\n", "line 2"), ("purged\n\(a) 99999999999999999999999\n", "line 2"),
        ]
        for (text, named) in damaged {
            #expect(throws: LogError.self) { try SharePurge.parse(Array(text.utf8), file: "f") }
            do { _ = try SharePurge.parse(Array(text.utf8), file: "f") } catch { #expect("\(error)".contains(named), "\(text): \(error)") }
        }
        #expect(throws: LogError.self) { try SharePurge.parse([0x70, 0xff, 0x0a], file: "f") }
    }
}
