import Foundation
import GRDB
import TestSupport
import Testing
@testable import EventLog

/// The event-id index is derived from the log, and written after the log's frames are durable:
/// a write of it that fails then (its commit, or its transaction never begun because another
/// connection holds the file's lock: a store on a shared path) must neither fail nor trap the
/// append or receive, and must not let a mark claim ids the index lacks. Those ids stay
/// recognised for the rest of the session (a retry of one is a duplicate), and after a reopen.
@Suite struct EventIDIndexFaultTests {
    let peerReplica = ReplicaID("0b7e5c2a-4d1f-4e8a-9c3b-6a2d8f1e7c40")!

    /// A peer's store holding one append of `titles`, each with the id given, and its frames.
    func peerFrames(_ dir: TempDir, _ entries: [(String, UUID)]) throws -> [[UInt8]] {
        let peer = try Store.create(at: dir.path + "/peer", replicaID: peerReplica)
        let p = try LogAppender(store: peer, wallClock: ManualClock())
        _ = try p.append(entries.map { item($0.0, eventID: $0.1) })
        try p.close()
        var frames: [[UInt8]] = []
        try LogReader(store: peer).forEachFrame(origin: peerReplica) { _, b in frames.append(Array(b)); return true }
        return frames
    }

    @Test func anAppendWhoseIndexCommitFailsKeepsItsIdsRecognised() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let first = UUID(), second = UUID()
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            _ = try a.append([item("before")])
            a.index!.commitsToFail = 1
            // The log took it: the append succeeds (a retry would append it twice otherwise).
            let r = try a.append([item("one", eventID: first), item("two", eventID: second)])
            #expect(r.appended == 2 && r.firstSeq == Seq(2))
            // A retry in the same session is still recognised.
            let again = try a.append([item("one", eventID: first)])
            #expect(again.appended == 0 && again.duplicateCount == 1)
            #expect(again.duplicates.first?.seq == Seq(2))
            try a.close()
        }
        // And after a reopen (the marks written since never claimed what the index lacked).
        let b = try LogAppender(store: store, wallClock: ManualClock())
        let r = try b.append([item("two", eventID: second), item("three")])
        #expect(r.appended == 1 && r.duplicateCount == 1 && r.duplicates.first?.seq == Seq(3))
        try b.close()
        #expect(try Verifier(store: store).run().isClean)
    }

    @Test func anIndexCommitFailingUntilCloseLeavesTheMarkBehindItsIds() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let id = UUID()
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            // The append's commit fails; the next append, with no ids, does not try again so
            // soon (a lasting failure would cost every append a read of what is owed).
            a.index!.commitsToFail = 1
            _ = try a.append([item("one", eventID: id)])
            _ = try a.append((0..<3).map { item("plain \($0)") })
            #expect(a.owedIDs[a.origin] == Seq(1)...Seq(1))
            // The close's commit works: the ids are written with its mark.
            try a.close()
        }
        let b = try LogAppender(store: store, wallClock: ManualClock())
        let r = try b.append([item("one", eventID: id)])
        #expect(r.appended == 0 && r.duplicateCount == 1 && r.duplicates.first?.seq == Seq(1))
        try b.close()
    }

    @Test func aReceiveWhoseIndexCommitFailsKeepsTheIdsRecognised() throws {
        let dir = TempDir()
        let id = UUID()
        let frames = try peerFrames(dir, [("from the peer", id), ("another", UUID())])
        let store = try makeStore(dir)
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            a.index!.commitsToFail = 1
            #expect(try a.receive(frames).events == 2)
            // The id is the peer's event's: a retry of it here is a duplicate, not a new event.
            let r = try a.append([item("from the peer", eventID: id)])
            #expect(r.appended == 0 && r.duplicates.first?.origin == peerReplica)
            try a.close()
        }
        let b = try LogAppender(store: store, wallClock: ManualClock())
        let r = try b.append([item("from the peer", eventID: id)])
        #expect(r.appended == 0 && r.duplicates.first?.origin == peerReplica && r.duplicates.first?.seq == Seq(1))
        try b.close()
    }

    /// Owed ids of one origin whose log turns out damaged do not hold back another's: each
    /// origin is read on its own, and the damaged range is given up (reported), as an open's
    /// catch-up gives it up.
    @Test func aDamagedOwedRangeDoesNotHoldBackTheOthers() throws {
        let dir = TempDir()
        let frames = try peerFrames(dir, [("from the peer", UUID())])
        let store = try makeStore(dir)
        #expect(peerReplica < store.replicaID, "the damaged origin is read first")
        let a = try LogAppender(store: store, wallClock: ManualClock())
        a.index!.commitsToFail = 1
        #expect(try a.receive(frames).events == 1)
        let seg = segmentFiles(store, peerReplica)[0]
        var bytes = readBytes(seg)
        bytes[frameOffsets(seg)[0] + FrameHeader.size + 8] ^= 0xFF
        writeBytes(seg, bytes)
        let id = UUID()
        a.index!.commitsToFail = 1
        #expect(try a.append([item("mine", eventID: id)]).appended == 1)
        let r = try a.append([item("mine", eventID: id)])
        #expect(r.appended == 0 && r.duplicateCount == 1)
        #expect(a.owedIDs.isEmpty)
        #expect(a.recovery.actions.contains { if case .eventIDIndexIncomplete(let o, _, _) = $0 { o == peerReplica } else { false } })
        try a.close()
    }

    /// The ids a snapshot carries (`forEachEventID`) include those still owed, read from the log,
    /// when the index refuses them again: a replica bootstrapped from it recognises their retries.
    @Test func theIdsASnapshotCarriesIncludeThoseStillOwed() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock())
        let id = UUID()
        a.index!.commitsToFail = 2  // the append's, then the one writing the owed ids first
        _ = try a.append([item("one", eventID: id)])
        var given: [(UUID, ReplicaID, Seq)] = []
        try a.forEachEventID { given += $0 }
        #expect(given.map(\.0) == [id] && given.first?.2 == Seq(1))
        #expect(a.owedIDs[a.origin] == Seq(1)...Seq(1))
        try a.close()
    }

    /// Another connection (another process, on a shared path) holds the index's write lock: the
    /// receive's index transaction cannot begin. The frames are durable and the receive succeeds,
    /// without trapping; the ids are written once the lock is free.
    @Test func aReceiveWhileAnotherConnectionLocksTheIndexNeitherTrapsNorLosesIds() throws {
        let dir = TempDir()
        let id = UUID()
        let frames = try peerFrames(dir, [("from the peer", id)])
        let store = try makeStore(dir)
        let a = try LogAppender(store: store, wallClock: ManualClock())
        var config = Configuration()
        config.allowsUnsafeTransactions = true
        config.busyMode = .immediateError
        let other = try DatabaseQueue(path: store.layout.eventIDs, configuration: config)
        try other.writeWithoutTransaction { try $0.execute(sql: "BEGIN IMMEDIATE") }
        #expect(try a.receive(frames).events == 1)
        try other.writeWithoutTransaction { try $0.execute(sql: "ROLLBACK") }
        try other.close()
        let r = try a.append([item("from the peer", eventID: id)])
        #expect(r.appended == 0 && r.duplicates.first?.origin == peerReplica)
        try a.close()
        let b = try LogAppender(store: store, wallClock: ManualClock())
        #expect(try b.append([item("from the peer", eventID: id)]).duplicateCount == 1)
        try b.close()
    }

    /// A store whose own log lost its committed tail after its first `kept` frames (torn there;
    /// `DURABLE` says what was committed), the frames lost (from a peer that holds them), and
    /// the ids of the events with ids: one append each of `count` such events after one without.
    func storeWithLostOwnTail(_ dir: TempDir, count: Int, keeping kept: Int = 1) throws -> (Store, [[UInt8]], [UUID]) {
        let store = try makeStore(dir)
        let lostIDs = (0..<count).map { _ in UUID() }
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            _ = try a.append([item("keep")])
            for (k, id) in lostIDs.enumerated() { _ = try a.append([item("lost \(k)", eventID: id)]) }
            try a.close()
        }
        copyTree(store.path, dir.path + "/peer")
        var lost: [[UInt8]] = []
        try LogReader(store: try Store.open(at: dir.path + "/peer")).forEachFrame(origin: store.replicaID, from: Seq(UInt64(kept + 1))) { _, b in
            lost.append(Array(b))
            return true
        }
        let seg = segmentFiles(store)[0]
        writeBytes(seg, Array(readBytes(seg)[..<(frameOffsets(seg)[kept] + 10)]))
        try? FileManager.default.removeItem(atPath: seg.replacingOccurrences(of: ".seg", with: ".idx"))
        return (store, lost, lostIDs)
    }

    /// While the own log's lost tail is given back in part, the mark stays past it as evidence;
    /// ids of the part given back that the index did not take (a failed write) are not claimed
    /// with it: the next open reads them from the log, and their retries are recognised.
    @Test func theEvidenceOfALostTailDoesNotClaimOwedIds() throws {
        let dir = TempDir()
        let (store, lost, ids) = try storeWithLostOwnTail(dir, count: 3)
        do {
            let b = try LogAppender(store: store, wallClock: ManualClock())
            #expect(b.lostOwnTail?.committed == Seq(4))
            b.index!.commitsToFail = 1
            #expect(try b.receive([lost[0]]).events == 1)  // seq 2 back; its id is owed
            #expect(b.owedIDs[b.origin] == Seq(2)...Seq(2) && b.lostOwnTail?.committed == Seq(4))
            b.index!.insertsToFail = 1  // and the close cannot write it either
            try b.close()
        }
        // Its durable mark gone too: the index's mark alone says the tail is still lost.
        try FileManager.default.removeItem(atPath: store.directory(store.replicaID).durablePath)
        do {
            // Still lost (the mark says so), and the owed id is read from the log.
            let c = try LogAppender(store: store, wallClock: ManualClock())
            #expect(c.lostOwnTail == LogAppender.LostTail(holds: Seq(2), committed: Seq(4), evidence: "its event-id index"))
            #expect(try c.receive(Array(lost[1...])).events == 2)
            #expect(c.lostOwnTail == nil)
            let r = try c.append(ids.map { item("retried", eventID: $0) } + [item("new")])
            #expect(r.appended == 1 && r.duplicates.map(\.seq) == [Seq(2), Seq(3), Seq(4)] && r.firstSeq == Seq(5))
            try c.close()
        }
        #expect(try Verifier(store: store).run().isClean)
    }

    /// A crash right after the lost tail came back whole, its ids owed (the index's write
    /// failed): the mark, which covered the tail as evidence, never claimed its ids, so the
    /// next open reads them from the log.
    @Test func aCrashAfterALostTailCameBackWithOwedIdsLosesNoIds() throws {
        let dir = TempDir()
        let (store, lost, ids) = try storeWithLostOwnTail(dir, count: 2)
        do {
            let b = try LogAppender(store: store, wallClock: ManualClock())
            #expect(b.lostOwnTail?.committed == Seq(3))
            b.index!.commitsToFail = 1
            #expect(try b.receive(lost).events == 2)
            #expect(b.lostOwnTail == nil && b.owedIDs[b.origin] == Seq(2)...Seq(3))
            copyTree(store.path, dir.path + "/crashed")  // its files as a crash leaves them
            try b.close()
        }
        let crashed = try Store.open(at: dir.path + "/crashed")
        let c = try LogAppender(store: crashed, wallClock: ManualClock())
        #expect(c.lostOwnTail == nil && c.tip.lastSeq == Seq(3))
        let r = try c.append(ids.map { item("retried", eventID: $0) })
        #expect(r.appended == 0 && r.duplicates.map(\.seq) == [Seq(2), Seq(3)])
        try c.close()
    }

    /// An index written by a build before `ids_through` holds one mark, which says both how far
    /// ids are indexed and, past the own log, that a tail was lost. It is read as such: the
    /// evidence stays, and ids are caught up from it.
    @Test func anIndexOfAnOlderBuildKeepsItsEvidenceAndIsCaughtUp() throws {
        let dir = TempDir()
        let (store, lost, ids) = try storeWithLostOwnTail(dir, count: 2)
        try? FileManager.default.removeItem(atPath: store.directory(store.replicaID).durablePath)
        func asOlderBuild() throws {
            let db = try DatabaseQueue(path: store.layout.eventIDs)
            try db.write { try $0.execute(sql: "DROP TABLE ids_through") }
            try db.close()
        }
        try asOlderBuild()
        do {
            // The older build's mark (3, past the log's end) is the only evidence left.
            let b = try LogAppender(store: store, wallClock: ManualClock())
            #expect(b.lostOwnTail == LogAppender.LostTail(holds: Seq(1), committed: Seq(3), evidence: "its event-id index"))
            try b.close()
        }
        try asOlderBuild()
        let c = try LogAppender(store: store, wallClock: ManualClock())
        #expect(c.lostOwnTail?.committed == Seq(3))
        #expect(try c.receive(lost).events == 2)
        let r = try c.append([item("retried", eventID: ids[1]), item("new")])
        #expect(r.appended == 1 && r.duplicates.map(\.seq) == [Seq(3)])
        try c.close()
    }

    /// Ids owed when the log alone is restored from a backup (its durable mark with it): the
    /// index's mark still says how far the log had committed, past the ids it lacks, so the
    /// open refuses appends that would take the lost seqs.
    @Test func aLogRestoredAloneIsSeenToHaveLostItsTailWhateverIdsAreOwed() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let id = UUID()
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            _ = try a.append([item("kept")])
            try a.close()
        }
        copyTree(store.path + "/log", dir.path + "/backup")
        do {
            let a = try LogAppender(store: store, wallClock: ManualClock())
            a.index!.commitsToFail = 1
            _ = try a.append([item("lost", eventID: id)])
            _ = try a.append([item("lost too")])
            #expect(a.owedIDs[a.origin] == Seq(2)...Seq(2))
            a.index!.insertsToFail = 1  // the close cannot write it either
            try a.close()
        }
        copyTree(dir.path + "/backup", store.path + "/log")
        let b = try LogAppender(store: store, wallClock: ManualClock())
        #expect(b.lostOwnTail == LogAppender.LostTail(holds: Seq(1), committed: Seq(3), evidence: "its event-id index"))
        #expect { try b.append([item("would take seq 2")]) } throws: { e in (e as? LogError)?.isOwnLogDamaged == true }
        try b.close()
    }

    /// An older build kept its mark past a lost tail even over ids it had not indexed (at or
    /// below the log's end): this build reads the own log again whole, once, and their retries
    /// are recognised.
    @Test func anOlderBuildsEvidenceOverOwedIdsIsReadAgain() throws {
        let dir = TempDir()
        let (store, lost, ids) = try storeWithLostOwnTail(dir, count: 2, keeping: 2)
        let db = try DatabaseQueue(path: store.layout.eventIDs)
        try db.write { db in
            try db.execute(sql: "DROP TABLE ids_through")
            try db.execute(sql: "DELETE FROM event_ids WHERE seq = 2")  // never indexed by that build
        }
        try db.close()
        let b = try LogAppender(store: store, wallClock: ManualClock())
        #expect(b.lostOwnTail?.holds == Seq(2) && b.lostOwnTail?.committed == Seq(3))
        #expect(try b.receive(lost).events == 1)
        let r = try b.append(ids.map { item("retried", eventID: $0) } + [item("new")])
        #expect(r.appended == 1 && r.duplicates.map(\.seq) == [Seq(2), Seq(3)])
        try b.close()
    }

    /// A store of three appends of one event each, with ids (seqs 1-3), closed.
    func storeWithThreeIDs(_ dir: TempDir) throws -> (Store, [UUID]) {
        let store = try makeStore(dir)
        let ids = (0..<3).map { _ in UUID() }
        let a = try LogAppender(store: store, wallClock: ManualClock())
        for (k, id) in ids.enumerated() { _ = try a.append([item("one \(k)", eventID: id)]) }
        try a.close()
        return (store, ids)
    }

    /// Marks as builds before and after `ids_through` may leave them between them: the ids are
    /// caught up from the lower of the two (a mark alone, from the mark).
    @Test(arguments: [(Int64?.some(3), Int64(1)), (Int64?.some(1), Int64(3)), (Int64?.none, Int64(1))])
    func idsAreCaughtUpFromTheLowerMark(idsThrough: Int64?, mark: Int64) throws {
        let dir = TempDir()
        let (store, ids) = try storeWithThreeIDs(dir)
        let db = try DatabaseQueue(path: store.layout.eventIDs)
        try db.write { db in
            try db.execute(sql: "DELETE FROM event_ids WHERE seq > ?", arguments: [min(idsThrough ?? mark, mark)])
            try db.execute(sql: "UPDATE indexed_through SET seq = ?", arguments: [mark])
            if let idsThrough { try db.execute(sql: "UPDATE ids_through SET seq = ?", arguments: [idsThrough]) } else { try db.execute(sql: "DROP TABLE ids_through") }
        }
        try db.close()
        let b = try LogAppender(store: store, wallClock: ManualClock())
        #expect(b.lostOwnTail == nil)
        let r = try b.append(ids.map { item("retried", eventID: $0) })
        #expect(r.appended == 0 && r.duplicates.map(\.seq) == [Seq(1), Seq(2), Seq(3)])
        try b.close()
    }

    /// An older build's file whose mark reaches the log's end over an id it never indexed (the
    /// rest of a lost tail came back under that build): the first open by this build reads the
    /// own log's ids again whole, and records how far, so later opens do not.
    @Test func anOlderBuildsFileIsReadAgainWholeOnce() throws {
        let dir = TempDir()
        let (store, ids) = try storeWithThreeIDs(dir)
        let db = try DatabaseQueue(path: store.layout.eventIDs)
        try db.write { db in
            try db.execute(sql: "DROP TABLE ids_through")
            try db.execute(sql: "DELETE FROM event_ids WHERE seq = 2")
        }
        let b = try LogAppender(store: store, wallClock: ManualClock())
        #expect(try db.read { try Int64.fetchOne($0, sql: "SELECT seq FROM ids_through") } == 3)
        let r = try b.append(ids.map { item("retried", eventID: $0) })
        #expect(r.appended == 0 && r.duplicates.map(\.seq) == [Seq(1), Seq(2), Seq(3)])
        try b.close()
        try db.close()
    }
}
