import Foundation
import TestSupport
import Testing
@testable import EventLog

/// An append whose fdatasync fails is cut off the log, and reported failed. Should that cut fail
/// too (the same failing disk), the frame must still never count as committed: not in the
/// writer's tip, not in a mark, not after a close and reopen. And nothing may be written after
/// it until a cut succeeds.
@Suite struct SyncFaultTests {
    @Test func aFailedSyncWhoseCutFailsTooIsNeverCountedCommitted() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock())
        _ = try a.append([item("kept")])
        a.own.syncsToFail = 1
        a.own.cutsToFail = 2  // the rollback's cut, then the next append's try of it
        #expect(throws: LogError.self) { try a.append([item("failed")]) }
        #expect(a.tip.lastSeq == Seq(1) && a.own.committed.lastSeq == Seq(1))
        // The cut fails again: nothing is written after the failed frame.
        #expect { try a.append([item("next")]) } throws: { e in
            guard let e = e as? LogError else { return false }
            return e.description.contains("failed again") && e.hint?.contains("nothing was written") == true
        }
        #expect(a.tip.lastSeq == Seq(1))
        // The cut succeeds now: appends go on from seq 2, the failed frame's bytes gone.
        let r = try a.append([item("failed"), item("after")])
        #expect(r.firstSeq == Seq(2) && r.appended == 2)
        try a.close()
        #expect(try Verifier(store: store).run().isClean)
        #expect(try LogReader(store: store).events(origin: store.replicaID).map { $0.field("title") } == ["kept", "failed", "after"].map { .text($0) })
    }

    @Test func aStoreClosedAfterAFailedCutReopensWithoutTheFailedAppend() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            _ = try a.append([item("kept")])
            a.own.syncsToFail = 1
            a.own.cutsToFail = 1
            #expect(throws: LogError.self) { try a.append([item("failed")]) }
            try a.close()
        }
        // Reported failed, so never in the log: a retry is the only copy, and no mark claims
        // seq 2 (appends are not refused as after a lost tail).
        let b = try LogAppender(store: store, wallClock: ManualClock())
        #expect(b.tip.lastSeq == Seq(1) && b.lostOwnTail == nil)
        #expect(try b.append([item("failed")]).firstSeq == Seq(2))
        try b.close()
        #expect(try LogReader(store: store).events(origin: store.replicaID).map { $0.field("title") } == ["kept", "failed"].map { .text($0) })
        #expect(try Verifier(store: store).run().isClean)
    }

    /// The same for a peer's frames being received: a received origin's writer keeps no zero
    /// fill, so only the cut tried again (at the next receive, or at close) takes them off.
    @Test func receivedFramesWhoseSyncAndCutFailAreCutAtClose() throws {
        let dir = TempDir()
        let peerReplica = ReplicaID("0b7e5c2a-4d1f-4e8a-9c3b-6a2d8f1e7c40")!
        let peer = try Store.create(at: dir.path + "/peer", replicaID: peerReplica)
        do {
            let p = try LogAppender(store: peer, wallClock: ManualClock())
            _ = try p.append([item("one")])
            _ = try p.append([item("two")])
            try p.close()
        }
        var frames: [[UInt8]] = []
        try LogReader(store: peer).forEachFrame(origin: peerReplica) { _, b in frames.append(Array(b)); return true }
        let store = try makeStore(dir)
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            #expect(try a.receive([frames[0]]).events == 1)
            a.received[peerReplica]!.syncsToFail = 1
            a.received[peerReplica]!.cutsToFail = 1
            #expect(throws: LogError.self) { try a.receive([frames[1]]) }
            #expect(a.received[peerReplica]!.committed.lastSeq == Seq(1) && a.received[peerReplica]!.cutFailure != nil)
            try a.close()
        }
        #expect(try LogReader(store: store).tip(origin: peerReplica).lastSeq == Seq(1))
        let b = try LogAppender(store: store, wallClock: ManualClock())
        #expect(try b.receive([frames[1]]).events == 1)
        try b.close()
        #expect(try Verifier(store: store).run().isClean)
    }

    /// A receive of two origins whose second fdatasync fails raises no origin's `DURABLE`: every
    /// origin's log is fdatasynced before any mark is raised. Raised first, the first origin's
    /// mark had to be lowered again with its cut, and a page or a watch that looked in between
    /// had shown its frames (the cursor then went back).
    @Test func aReceiveWhoseSecondSyncFailsRaisesNoMark() throws {
        let dir = TempDir()
        let (peers, frames) = try twoPeersOfTwoFrames(dir)
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock())
        #expect(try a.receive([frames[0][0], frames[1][0]]).events == 2)
        a.received[peers[1]]!.syncsToFail = 1
        // A lowering of the first origin's mark would fail: none may be needed.
        a.received[peers[0]]!.durableLowersToFail = 1
        #expect(throws: LogError.self) { try a.receive([frames[0][1], frames[1][1]]) }
        let reader = LogReader(store: store)
        for origin in peers {
            #expect(try reader.tip(origin: origin).lastSeq == Seq(1))
            #expect(reader.durable(origin: origin) == Seq(1), "the durable mark of \(origin)")
        }
        #expect(a.received[peers[0]]!.durableLowersToFail == 1, "the first origin's mark was raised, then lowered")
        #expect(a.received[peers[0]]!.owesARetry == false)
        #expect(try a.receive([frames[0][1], frames[1][1]]).events == 2)
        try a.close()
        for origin in peers { #expect(reader.durable(origin: origin) == Seq(2)) }
        #expect(try Verifier(store: store).run().isClean)
    }

    /// A receive of two origins whose second mark cannot be raised (after both fdatasyncs): both
    /// are cut back, and the first origin's `DURABLE`, raised already, must go back with it. A
    /// mark past the log's end would let a reader ship (as durable) whatever frame is written
    /// at those seqs next, before its fdatasync (and, for the store's own origin, a reopen would read
    /// it as committed frames lost).
    @Test func aReceiveWhoseSecondMarkFailsLeavesNoDurableMarkPastTheCut() throws {
        let dir = TempDir()
        let (peers, frames) = try twoPeersOfTwoFrames(dir)
        let store = try makeStore(dir)
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            #expect(try a.receive([frames[0][0], frames[1][0]]).events == 2)
            a.received[peers[1]]!.durableRaisesToFail = 1
            #expect(throws: LogError.self) { try a.receive([frames[0][1], frames[1][1]]) }
            let reader = LogReader(store: store)
            for origin in peers {
                #expect(try reader.tip(origin: origin).lastSeq == Seq(1))
                #expect(reader.durable(origin: origin) == Seq(1), "the durable mark of \(origin)")
            }
            try a.close()
        }
        let b = try LogAppender(store: store, wallClock: ManualClock())
        #expect(try b.receive([frames[0][1], frames[1][1]]).events == 2)
        try b.close()
        for origin in peers { #expect(LogReader(store: store).durable(origin: origin) == Seq(2)) }
        #expect(try Verifier(store: store).run().isClean)
    }

    /// The same, with the write that lowers the first origin's `DURABLE` failing: nothing is
    /// written to that origin until the mark is lowered (tried again before each write).
    @Test func aDurableMarkThatCannotBeLoweredStopsWritesUntilItIs() throws {
        let dir = TempDir()
        let (peers, frames) = try twoPeersOfTwoFrames(dir)
        let (store, a) = try receiveFailingAtTheSecondMark(dir, frames, peers, lowersToFail: 2)
        let reader = LogReader(store: store)
        #expect(reader.durable(origin: peers[0]) == Seq(2), "not lowered: the fault")
        #expect(reader.durable(origin: peers[1]) == Seq(1))
        // Tried again before the frame is written, and failing: the receive fails with nothing
        // written (its cut tries a third time, and lowers it).
        let refused = #expect(throws: LogError.self) { try a.receive([frames[0][1]]) }
        #expect(refused?.message.contains("durable mark could not be lowered") == true, "\(String(describing: refused))")
        #expect(try reader.tip(origin: peers[0]).lastSeq == Seq(1))
        #expect(reader.durable(origin: peers[0]) == Seq(1))
        #expect(try a.receive([frames[0][1], frames[1][1]]).events == 2)
        try a.close()
        for origin in peers { #expect(reader.durable(origin: origin) == Seq(2)) }
        #expect(try Verifier(store: store).run().isClean)
    }

    /// A received origin whose `DURABLE` waits to be lowered is never parked (closed to save
    /// descriptors): its close could not lower it either, and a reopen would take the mark as
    /// evidence of frames lost.
    @Test func aWriterOwingALoweredDurableMarkIsNotParked() throws {
        let dir = TempDir()
        let (peers, frames) = try twoPeersOfTwoFrames(dir, count: 3)
        var options = AppendOptions()
        options.receivedWritersOpenMax = 2
        let (store, a) = try receiveFailingAtTheSecondMark(dir, frames, peers, lowersToFail: 2, options: options)
        // A receive of another origin parks every idle writer but the one owing the retry.
        #expect(try a.receive([frames[2][0]]).events == 1)
        #expect(a.received[peers[0]] != nil && a.received[peers[1]] == nil)
        a.received[peers[0]]?.durableLowersToFail = 0  // the disk is back: the close lowers it
        try a.close()
        let reader = LogReader(store: store)
        #expect(try reader.tip(origin: peers[0]).lastSeq == Seq(1))
        #expect(reader.durable(origin: peers[0]) == Seq(1), "lowered at close")
    }

    /// A close that fails on the own log's cut (failing again) still lowers a received origin's
    /// mark: every writer's close tries its retries.
    @Test func aCloseTriesEveryRetryBeforeItFails() throws {
        let dir = TempDir()
        let (peers, frames) = try twoPeersOfTwoFrames(dir)
        let (store, a) = try receiveFailingAtTheSecondMark(dir, frames, peers, lowersToFail: 1)
        a.own.syncsToFail = 1
        a.own.cutsToFail = 2  // the rollback's cut, then the close's
        #expect(throws: LogError.self) { try a.append([item("failed")]) }
        #expect(throws: LogError.self) { try a.close() }
        #expect(LogReader(store: store).durable(origin: peers[0]) == Seq(1))
    }

    /// A store that received the first frame of two peers, then failed to receive their second:
    /// the second peer's `DURABLE` cannot be raised (after both fdatasyncs, and the first peer's
    /// raised), and the first `lowersToFail` lowerings of the first peer's `DURABLE` fail too.
    private func receiveFailingAtTheSecondMark(_ dir: TempDir, _ frames: [[[UInt8]]], _ peers: [ReplicaID], lowersToFail: Int,
                                               options: AppendOptions = AppendOptions()) throws -> (Store, LogAppender) {
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock(), options: options)
        #expect(try a.receive([frames[0][0], frames[1][0]]).events == 2)
        a.received[peers[1]]!.durableRaisesToFail = 1
        a.received[peers[0]]!.durableLowersToFail = lowersToFail
        #expect(throws: LogError.self) { try a.receive([frames[0][1], frames[1][1]]) }
        return (store, a)
    }

    /// Peers, each holding two one-event frames. A receive syncs origins, then raises their
    /// marks, in the order it first wrote them: here, the order of `peers` (sorted too, so no
    /// order of ids could hide it).
    private func twoPeersOfTwoFrames(_ dir: TempDir, count: Int = 2) throws -> ([ReplicaID], [[[UInt8]]]) {
        let peers = Array([ReplicaID("0b7e5c2a-4d1f-4e8a-9c3b-6a2d8f1e7c40")!, ReplicaID("e1d2c3b4-a596-4877-8899-aabbccddeeff")!,
                           ReplicaID("f3a4b5c6-d7e8-4f90-a1b2-c3d4e5f60718")!].prefix(count))
        #expect(peers == peers.sorted())
        var frames: [[[UInt8]]] = []
        for (k, peerReplica) in peers.enumerated() {
            let peer = try Store.create(at: dir.path + "/peer\(k)", replicaID: peerReplica)
            let p = try LogAppender(store: peer, wallClock: ManualClock())
            for n in 0..<2 { _ = try p.append([item("\(k).\(n)")]) }
            try p.close()
            var f: [[UInt8]] = []
            try LogReader(store: peer).forEachFrame(origin: peerReplica) { _, b in f.append(Array(b)); return true }
            frames.append(f)
        }
        return (peers, frames)
    }
}
