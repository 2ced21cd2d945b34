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
}
