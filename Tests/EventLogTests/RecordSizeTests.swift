import Domain
import Foundation
import TestSupport
import Testing
@testable import EventLog

/// An event's record is at most `FrameEncoder.recordBytesMax` as it is written (docs/FORMAT.md,
/// "Event record"), so that every frame a writer makes holds what it must and stays under
/// `FrameHeader.payloadBytesMax`. A larger event was a trap in the frame encoder (a precondition,
/// at the append, the legacy import or a share's append): it is now an error naming the event,
/// and the log is left as it was. Frames of a share's append are cut by bytes, as any append's.
@Suite struct RecordSizeTests {
    /// A mutation of `texts` fields of `bytes` ASCII bytes each.
    func large(_ texts: Int, bytes: Int) -> Mutation {
        Mutation(entity: .item, op: .create, entityID: UUID(),
                 fields: (0..<texts).map { Field("t\($0)", .text(String(repeating: "x", count: bytes))) })
    }

    /// What a refused append must leave: the log at `tip`, nothing more, and a next append taken.
    func expectUnchanged(_ store: Store, _ appender: LogAppender, tip: LogTip, _ comment: Comment) throws {
        #expect(try LogReader(store: store).tip(origin: store.replicaID) == tip, comment)
        let r = try appender.append([item("after")])
        #expect(r.firstSeq == tip.lastSeq.next, comment)
    }

    @Test func anEventTooLargeForItsRecordIsAnErrorAndTheLogUnchanged() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let appender = try LogAppender(store: store, wallClock: ManualClock())
        _ = try appender.append([item("first")])
        let reader = LogReader(store: store)
        // 64 texts of 256 KiB: more than a frame holds (this trapped in the encoder's finish).
        let huge = large(64, bytes: 256 << 10)
        // Five of 256 KiB: a record over the limit that would still fit a frame alone.
        let over = large(5, bytes: 256 << 10)
        // Each batch, and the place in it of the first event too large.
        let cases: [(String, [Mutation], Int)] = [
            ("alone", [huge], 0),
            ("over the limit, fitting a frame", [over], 0),
            ("after small ones", [item("a"), item("b"), over], 2),
            // Over `parallelEncodeEventsMin`: the batch is encoded on every core.
            ("in a batch encoded on every core", (0..<300).map { item("p\($0)") } + [over] + (0..<10).map { item("q\($0)") } + [huge], 300),
            // A frame of records nearly full by bytes, then the large one.
            ("after a frame nearly full", (0..<4).map { _ in large(1, bytes: 250_000) } + [huge], 4),
            // Large enough to be encoded on every core and cut by bytes (`addUpToLimit`), the
            // event too large in the second frame's run.
            ("in a batch cut by bytes", (0..<8).map { _ in large(1, bytes: 250_000) } + [over] + [large(1, bytes: 250_000)], 8),
        ]
        for (name, batch, first) in cases {
            let tip = try reader.tip(origin: store.replicaID)
            do {
                _ = try appender.append(batch)
                Issue.record("\(name): appended")
            } catch let error as LogError {
                #expect(error.message.contains("at most 1 MiB"), "\(name): \(error)")
                let seq = tip.lastSeq.rawValue + UInt64(first) + 1
                #expect(error.seqs == seq...seq, "\(name): the error names the first event too large")
            }
            try expectUnchanged(store, appender, tip: tip, "\(name)")
        }
        // One at a time: the add is refused, and the append can then only be rolled back: every
        // later add and the commit say so (the commit rolls it back), and nothing is written.
        let tip = try reader.tip(origin: store.replicaID)
        try appender.begin()
        for k in 0..<1_500 { try appender.add(item("x\(k)")) }  // a frame written before the refusal
        #expect(throws: LogError.self) { try appender.add(over) }
        #expect(throws: LogError.self) { try appender.add(item("y")) }
        #expect(throws: LogError.self) { _ = try appender.commit() }
        try appender.rollback()
        try expectUnchanged(store, appender, tip: tip, "one at a time")
        // At the limit's edge: a record just under it is taken, and reads back whole.
        let edge = large(4, bytes: 262_000)
        let r = try appender.append([item("before"), edge])
        try appender.close()
        let back = try LogReader(store: store).events(origin: store.replicaID, from: try #require(r.lastSeq))
        #expect(back.first?.fields.array == edge.fields)
        #expect(try Verifier(store: store).run().isClean)
    }

    /// A share's append of large events is cut into frames by bytes, as any append is (it was cut
    /// by events alone, and twenty events of 1 MB made a 20 MB frame: a trap).
    @Test func aSharesAppendOfLargeEventsIsCutByBytes() throws {
        let dir = TempDir()
        let key = ReplicaKey.generate()
        let store = try Store.create(at: dir.path + "/alice", signingKey: key)
        let a = try LogAppender(store: store)
        let share = try a.createShare(name: "home")
        let batch = (0..<20).map { _ in large(4, bytes: 250_000) }
        let r = try a.appendShared(batch, to: share)
        #expect(r.events == 20)
        // An event over the limit is refused, and the share's log keeps what it held.
        #expect(throws: LogError.self) { _ = try a.appendShared([item("small"), large(5, bytes: 256 << 10)], to: share) }
        let r2 = try a.appendShared([item("after")], to: share)
        #expect(r2.events == 1)
        try a.close()
        let origin = ReplicaID.shareLog(share, signingKey: key.publicKey)
        var sizes: [Int] = []
        try LogReader(store: store).forEachFrame(origin: origin) { h, _ in sizes.append(Int(h.rawBytes)); return true }
        #expect(sizes.count > 2 && sizes.allSatisfy { $0 <= FrameHeader.payloadBytesMax })
        #expect(try LogReader(store: store).tip(origin: origin).lastSeq == Seq(21))
        #expect(try Verifier(store: store).run().isClean)
    }

    /// The input rules' bound on an event (`FieldRules.eventBytesMax`) keeps it within the log's:
    /// the largest event they take, every byte of it at its widest (names written out, numbers
    /// of ten bytes, both ids, a base, the longest actor), is appended and reads back whole.
    @Test func theLargestEventTheInputRulesTakeIsAppended() throws {
        let m = Self.largestValidEvent()
        try FieldRules.validate(m, position: 1)
        #expect(FieldRules.eventBytes(m) == FieldRules.eventBytesMax)
        let dir = TempDir()
        let store = try makeStore(dir)
        let appender = try LogAppender(store: store, wallClock: ManualClock())
        #expect(try appender.append([m]).appended == 1)
        try appender.close()
        #expect(try LogReader(store: store).events(origin: store.replicaID).first?.fields.array == m.fields)
    }

    /// A mutation of exactly `FieldRules.eventBytesMax` bytes of names, texts and actor, and the
    /// most fields: 60 numbers at their widest, then texts as large as a text may be, the last
    /// taking what is left.
    static func largestValidEvent() -> Mutation {
        let actor = String(repeating: "u", count: FieldRules.actorBytesMax)
        var fields = (0..<60).map { Field("i\($0)" + String(repeating: "y", count: 59 - "\($0)".count), .integer(.min)) }
        var left = FieldRules.eventBytesMax - actor.utf8.count - fields.reduce(0) { $0 + $1.name.utf8.count }
        for k in 0..<4 {
            let name = "t\(k)" + String(repeating: "x", count: 59)
            let text = min(FieldRules.textBytesMax, left - name.utf8.count)
            fields.append(Field(name, .text(String(repeating: "a", count: text))))
            left -= name.utf8.count + text
        }
        return Mutation(entity: .item, op: .create, entityID: UUID(), fields: fields, eventID: UUID(), base: HLC(rawValue: .max), actor: actor)
    }

    /// Appends that go out together (group commit) fail alone: an event too large fails its own
    /// caller's append, and every other caller's events are appended.
    @Test func aRefusedAppendInAGroupFailsOnlyItsCaller() async throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let writer = try LogWriter(store: store)
        let over = large(5, bytes: 256 << 10)
        let outcomes = await withTaskGroup(of: (Int, Bool).self) { group in
            for k in 0..<12 {
                group.addTask {
                    let batch = k == 5 ? [item("before"), over] : [item("w\(k)"), item("w\(k)b")]
                    return (k, (try? await writer.append(batch)) != nil)
                }
            }
            var out: [Int: Bool] = [:]
            for await (k, ok) in group { out[k] = ok }
            return out
        }
        try await writer.close()
        #expect(outcomes.filter { !$0.value }.map(\.key) == [5])
        #expect(try LogReader(store: store).tip(origin: store.replicaID).lastSeq == Seq(22))
        #expect(try Verifier(store: store).run().isClean)
    }

    /// A share's membership record may be as large as a frame alone: it names every member (a
    /// removal wraps the new key to each), or every epoch so far (an addition), and the 1 MiB of
    /// other events would one day refuse an admin every change. Its frames hold one record each.
    @Test func aMembershipRecordMayTakeAFrameOfItsOwn() throws {
        let m = large(12, bytes: 250_000)
        let key = ReplicaKey.generate()
        let e = FrameEncoder()
        #expect(throws: RecordTooLarge.self) { try e.add(m, origin: key.replicaID, seq: Seq(1), hlc: HLC(rawValue: 1 << 16)) }
        try e.add(m, origin: key.replicaID, seq: Seq(1), hlc: HLC(rawValue: 1 << 16), recordBytesMax: LogAppender.membershipRecordBytesMax)
        let frame = e.finish(continues: false, previousHash: .zero, signer: key)
        #expect(frame.count - FrameHeader.size <= FrameHeader.payloadBytesMax)
        #expect(LogAppender.membershipRecordBytesMax + FrameSignature.blockBytes + ShareBlock.bytes + 64 <= FrameHeader.payloadBytesMax)
    }

    /// The builder of another origin's log (a legacy import's) refuses such an event too.
    @Test func anOriginFrameBuilderRefusesAnEventTooLarge() throws {
        let builder = OriginFrameBuilder(origin: fixedReplica)
        try builder.add(item("one"), at: HLC(rawValue: 1 << 16))
        #expect(throws: LogError.self) { try builder.add(large(5, bytes: 256 << 10), at: HLC(rawValue: 2 << 16)) }
        // What it held is whole: the frames end with the first event.
        let frames = builder.finish()
        #expect(frames.count == 1)
        #expect(frames.first.flatMap { FrameHeader(parsing: $0) }?.count == 1)
    }
}
