import Foundation

/// What `LogAppender.receive` did.
public struct ReceiveResult: Sendable, Equatable {
    /// Frames appended, and the events in them.
    public var frames = 0
    public var events = 0
    /// Frames skipped because this store already holds them (a redelivery changes nothing).
    public var alreadyHeld = 0
    /// Frames written that belong to an append whose last frame has not arrived yet (a page or
    /// batch that ends inside a large append). They are invisible to readers until the rest of
    /// the append arrives in a later call; if it never does, recovery drops them at the next
    /// open and they are fetched again.
    public var incomplete = 0
    /// For each origin that grew, its new last seq.
    public var tips: [ReplicaID: Seq] = [:]
    /// Frames not taken because they belong to a share this replica is not a member of
    /// (docs/SHARING.md, "Partial replication"); `LogAppender.declinedShareLogs` says which.
    public var declined = 0
    public init() {}

    /// Adds the outcome of a later call (receiving in batches).
    public mutating func add(_ other: ReceiveResult) {
        frames += other.frames
        events += other.events
        alreadyHeld += other.alreadyHeld
        incomplete += other.incomplete
        declined += other.declined
        for (o, s) in other.tips { tips[o] = max(tips[o] ?? Seq(0), s) }
    }
}

/// Frames received from elsewhere, checked against the logs they continue: what
/// `LogAppender.receive` verifies before it writes anything, for any keeper of frames (a store
/// here, a hub's database).
package struct ReceivedFrames: Sendable {
    /// A frame that extends its origin's log.
    public struct Accepted: Sendable {
        /// Its position in the batch.
        public var index: Int
        public var header: FrameHeader
        /// Its events' explicit ids.
        public var eventIDs: [(UUID, Seq)]
        public var hash: FrameHash
    }
    /// The frames to write, in batch order.
    public var accepted: [Accepted] = []
    /// Frames the keeper already holds (by their origin's tip).
    public var alreadyHeld = 0
    /// Each origin's tip once `accepted` is written.
    public var tips: [ReplicaID: LogTip] = [:]

    /// Verifies a batch: each frame on its own (header, checksum, events, spread over the
    /// machine's cores), then in order against its origin's tip (`tip`, asked once per origin):
    /// seqs that continue the log without a gap, a link to the hash of the frame before, a clock
    /// that moves forward and is at most `clockDriftMaxMs` ahead of `nowMillis`. A frame at or
    /// below its origin's tip is counted as already held. `refuse` names why an origin may not be
    /// extended here (nil when it may). `own` is the receiver's own origin, if it has one: a
    /// frame of it signed by its key that does not follow its log is named a fork of that log.
    /// - Throws: `LogError` naming the frame (its position, origin, seq range) and what is wrong;
    ///   nothing of the batch is to be written then.
    public static func verify(_ frames: [[UInt8]], nowMillis now: UInt64, clockDriftMaxMs: UInt64, requireSignatures: Bool = false,
                              tip: (ReplicaID) throws -> LogTip, refuse: (ReplicaID) -> String? = { _ in nil },
                              own: ReplicaID? = nil) throws -> ReceivedFrames {
        var out = ReceivedFrames()
        let checked = LogAppender.checkEach(frames)
        for i in frames.indices {
            let (header, eventIDs, hash) = try checked[i].get()
            func where_() -> String { "frame \(i + 1) of \(frames.count)" }
            let origin = header.origin
            let seqs = header.baseSeq.rawValue...header.lastSeq.rawValue
            let tip = try out.tips[origin] ?? tip(origin)
            if header.lastSeq <= tip.lastSeq {
                // A frame of the own origin, signed, ending where this store's log ends but not
                // the frame it holds there (its hash): the two logs claim the same seqs with
                // different events, a fork that asking past the tip never shows (a pull asks for
                // that frame once, `PullSession`'s check).
                if origin == own, header.signed, header.lastSeq == tip.lastSeq, hash != tip.lastHash {
                    try ownFork(frames[i], header: header, where: where_(), tip: tip)
                }
                out.alreadyHeld += 1
                continue
            }
            if let why = refuse(origin) { throw LogError(origin == own ? .ownLogDamaged : .invalidInput, "receive", "\(where_()) \(why)", seqs: seqs) }
            if requireSignatures, !header.signed {
                throw LogError(.invalidInput, "receive", "\(where_()) is unsigned (origin \(origin) predates signed logs), and signatures are required here",
                               seqs: seqs, hint: "nothing was written; this receiver takes signed frames only (LOGBOOK_REQUIRE_SIGNATURES)")
            }
            let fault = ChainState(after: tip).fault(of: header)
            if origin == own, header.signed, let fault {
                switch fault {
                case .hashBroken: try ownFork(frames[i], header: header, where: where_(), tip: tip)
                case .seqGap where header.baseSeq <= tip.lastSeq: try ownFork(frames[i], header: header, where: where_(), tip: tip)
                default: break
                }
            }
            switch fault {
            case nil:
                break
            case .seqGap:
                let what = header.baseSeq > tip.lastSeq.next ? "a gap: this store holds origin \(origin) through seq \(tip.lastSeq)"
                    : "an overlap that does not fall on a frame boundary (this store holds through seq \(tip.lastSeq))"
                throw LogError(.gap, "receive", "\(where_()) starts at seq \(header.baseSeq): \(what)", seqs: seqs, hint: "nothing was written; fetch from seq \(tip.lastSeq.next)")
            case .hashBroken:
                throw LogError(.corrupt, "receive", "\(where_()) does not link to the frame before it (hash chain broken): history was rewritten or the frame is forged",
                               seqs: seqs, hint: "nothing was written")
            case .clockBackwards(let previous, let found):
                throw LogError(.corrupt, "receive", "\(where_()): its clock goes backwards (\(found) after \(previous))", seqs: seqs)
            }
            let (limit, overflow) = now.addingReportingOverflow(clockDriftMaxMs)
            if !overflow, header.lastHLC.wallMillis > limit {
                throw LogError(.clockAhead, "receive",
                               "\(where_()) of origin \(origin) carries a clock \(header.lastHLC.wallMillis - now) ms ahead of this machine's (hlc \(header.lastHLC), at most \(clockDriftMaxMs) ms allowed)",
                               seqs: seqs, hint: "nothing was written; that origin's frames are taken once this clock catches up (or its author fixes its clock). LOGBOOK_CLOCK_DRIFT_MAX_MS sets the bound")
            }
            out.tips[origin] = LogTip(lastSeq: header.lastSeq, lastHLC: header.lastHLC, lastHash: hash)
            out.accepted.append(Accepted(index: i, header: header, eventIDs: eventIDs, hash: hash))
        }
        // Signatures last, once seqs, links and clocks check (a refused batch costs no signature
        // work), every signed frame to be written, over the machine's cores. Every one: a page
        // may end on any frame, so a frame whose own signature failed, taken because a later one
        // vouched for it through the chain, would be refused by the next receiver whose page ends
        // there, and that receiver would be stuck.
        if let (k, failure) = LogAppender.verifySignatures(frames, out.accepted.filter(\.header.signed)) {
            let a = out.accepted.first { $0.index == k }!
            throw LogError(.corrupt, "receive", "frame \(k + 1) of \(frames.count) is damaged: \(failure.message)",
                           seqs: a.header.baseSeq.rawValue...a.header.lastSeq.rawValue, hint: "nothing was written; fetch it again")
        }
        return out
    }

    /// Throws for a frame of the receiver's own origin, signed, that does not follow the log the
    /// receiver holds (`tip`): damage when its signature fails; else a fork of the receiver's own
    /// log, proven by its key (only this replica signs its frames): the store was restored from a
    /// backup or copied, and written to since, so two histories claim the same seqs.
    private static func ownFork(_ frame: [UInt8], header: FrameHeader, where place: String, tip: LogTip) throws -> Never {
        let seqs = header.baseSeq.rawValue...header.lastSeq.rawValue
        if let failure = LogAppender.signatureFailure(of: frame, header: header) {
            throw LogError(.corrupt, "receive", "\(place) is damaged: \(failure.message)", seqs: seqs, hint: "nothing was written; fetch it again")
        }
        throw LogError(.ownLogDamaged, "receive",
                       "\(place) holds seqs \(header.baseSeq)…\(header.lastSeq) of this replica's own log (origin \(header.origin)), signed by its key, "
                       + "which do not follow the log this store holds (through seq \(tip.lastSeq)): this replica's own log has forked. "
                       + "This store was restored from a backup or copied, then written to: what it wrote since and what the peer holds claim the same seqs",
                       seqs: seqs,
                       hint: "nothing was written; both histories are kept (this store's and the peer's), and peers will not take this store's own events past the fork. See docs/PROTOCOL.md, \"A store restored from a backup\"")
    }
}

extension LogAppender {
    /// The name of the marker, in `shares/`, of a store that takes every share's logs (a relay).
    public static let relayMarker = "RELAY"

    /// `batches` without the frames of shares this replica is not a member of (docs/SHARING.md,
    /// "Partial replication"), how many were left out of each, and the shares this replica
    /// joins through these frames (a membership record adding it).
    ///
    /// A share's log is taken when this store already holds it (unless it deleted or left the
    /// share), or holds the share's keys, or the batches add it to the share, and then only from
    /// its first frame: one offered from further on (an earlier page's frames were declined) is
    /// declined again, and asked for again from the start. Its membership log is taken when
    /// held or when it adds this replica. Everything else of a share is declined and noted in
    /// `declinedShareLogs`, so a session moves past it. A relay takes everything.
    ///
    /// Only frames that are what they say are declined: a frame whose checksum fails, or whose
    /// origin does not derive from the share and key it names, is left in, for verification to
    /// refuse (a peer cannot have a log declined by flagging its frames). A join counts only from
    /// a membership frame whose signature verifies.
    private func withoutForeignShares(_ batches: [[[UInt8]]]) throws -> ([[[UInt8]]], [Int], Set<ShareID>) {
        let before = persistedDeclines
        let result = try decliningForeignShares(batches)
        // Only a store's own writer keeps them, and only members' sealed logs (`ShareDeclines`).
        if index != nil, !ShareDeclines.same(before, persistedDeclines) { ShareDeclines.write(store, persistedDeclines) }
        return result
    }

    /// The declines kept across sessions: members' sealed logs only.
    private var persistedDeclines: [ReplicaID: (share: ShareID, through: Seq)] {
        declinedShareLogs.filter { sealedDeclines.contains($0.key) }
    }

    /// The share logs declined in force now: those of shares this replica holds no key of, in a
    /// store that is no relay (`ShareDeclines.inForce`), each through the last seq declined.
    public func declinedLogsInForce() -> [ReplicaID: Seq] {
        ShareDeclines.inForce(store, declinedShareLogs)
    }

    private func decliningForeignShares(_ batches: [[[UInt8]]]) throws -> ([[[UInt8]]], [Int], Set<ShareID>) {
        let none = [Int](repeating: 0, count: batches.count)
        func block(_ frame: [UInt8]) -> (FrameHeader, ShareBlock)? {
            frame.withUnsafeBytes { p in
                guard let h = try? FrameHeader.decode(p), h.shared, Int(h.totalBytes) == p.count, let b = ShareBlock.of(p, header: h),
                      (try? FrameDecoder.checkCRC(p, header: h)) != nil, (try? FrameSignature.checkForm(p, header: h)) == true else { return nil }
                return (h, b)
            }
        }
        var counts = none
        var batches = batches
        // A purged share's sealed logs are declined by every store, a relay's included (its
        // membership log is still taken: it carries the deletion on).
        let purged = try loadPurged()
        if !purged.isEmpty {
            for n in batches.indices {
                batches[n] = batches[n].filter { frame in
                    guard let (h, b) = block(frame), h.sealed, purged[b.share] != nil else { return true }
                    counts[n] += 1
                    declinedShareLogs[h.origin] = (b.share, max(declinedShareLogs[h.origin]?.through ?? Seq(0), h.lastSeq))
                    sealedDeclines.insert(h.origin)
                    return false
                }
            }
        }
        // A relay takes every share's logs: what it declined before (not a member then) is
        // asked for again. A receive with no share's frame changes nothing here.
        if options.takesEveryShare || ShareDirectory.isRelay(store) {
            declinedShareLogs = declinedShareLogs.filter { purged[$0.value.share] != nil }
            return (batches, counts, [])
        }
        guard batches.contains(where: { $0.contains { block($0) != nil } }) else { return (batches, counts, []) }
        let keys = try? ShareKeyring.of(store)
        // Membership records that add this replica, in what arrives (signatures checked).
        var joining = Set<ShareID>()
        for frames in batches {
            for frame in frames {
                guard let (h, b) = block(frame), !h.sealed, keys?.newest(b.share) == nil,
                      let (_, events) = try? frame.withUnsafeBytes({ try FrameInspector.eventsUnlessSealed(in: $0) }) else { continue }
                for e in events where e.entity == .shareRecord && ShareDirectory.text(e, "record") == "add" {
                    if let card = ShareDirectory.text(e, "member").flatMap(Hex.decode).flatMap(MemberCard.init(bytes:)), card.replicaID == store.replicaID {
                        joining.insert(b.share)
                    }
                }
            }
        }
        var decided: [ReplicaID: Bool] = [:]
        var askAgain = false
        var out: [[[UInt8]]] = []
        for (n, frames) in batches.enumerated() {
            var kept: [[UInt8]] = []
            for frame in frames {
                guard let (h, b) = block(frame) else { kept.append(frame); continue }
                let takes: Bool
                if let d = decided[h.origin] {
                    takes = d
                } else {
                    let gone = keys?.isDeleted(b.share) ?? false
                    let held = try currentTip(h.origin).lastSeq > Seq(0)
                    let member = keys?.newest(b.share) != nil || joining.contains(b.share)
                    // Not held: taken from its first frame only (else the frames after a declined
                    // page would not link: a gap), and asked for again from there.
                    takes = !gone && (held || (member && h.baseSeq == Seq(1)))
                    decided[h.origin] = takes
                    if member, declinedShareLogs.removeValue(forKey: h.origin) != nil { askAgain = true }
                    if takes { declinedShareLogs[h.origin] = nil }
                    if member && !takes && !gone { askAgain = true }  // offered from further on
                }
                if takes {
                    kept.append(frame)
                } else {
                    counts[n] += 1
                    // A member's log offered from further on is not noted: the next request asks for it from its start.
                    if keys?.newest(b.share) == nil && !joining.contains(b.share) {
                        let through = max(declinedShareLogs[h.origin]?.through ?? Seq(0), h.lastSeq)
                        declinedShareLogs[h.origin] = (b.share, through)
                        if h.sealed { sealedDeclines.insert(h.origin) }
                    }
                }
            }
            out.append(kept)
        }
        // Logs of a share this replica now joins, declined by earlier pages: asked for again.
        if !joining.isEmpty, declinedShareLogs.values.contains(where: { joining.contains($0.share) }) {
            declinedShareLogs = declinedShareLogs.filter { !joining.contains($0.value.share) }
            askAgain = true
        }
        if askAgain { sharesJoinedAfterDeclining += 1 }
        return (out, counts, joining)
    }

    /// A new session: declines of membership logs, which hold for one session only, are
    /// forgotten (the record adding this replica may be in them; a writer open for many
    /// sessions asks for them again at each); those of members' sealed logs stay (`ShareDeclines`).
    public func beginReceivingSession() {
        declinedShareLogs = persistedDeclines
    }

    /// Forgets the share logs declined so far, here and in `shares/DECLINED`: the next session
    /// asks for them again.
    public func forgetDeclinedShareLogs() {
        declinedShareLogs = [:]
        sealedDeclines = []
        if index != nil { ShareDeclines.write(store, [:]) }
    }

    /// Appends frames authored by other replicas, byte-identical to the author's.
    ///
    /// Every frame is verified before anything is written: header, checksum, that its events
    /// decode, that seqs continue the origin's log (a gap is refused), that it links to the hash
    /// of the frame before it (a rewritten history is refused), that its clock moves forward and
    /// is not further ahead of this machine's than `AppendOptions.clockDriftMaxMs`. A frame
    /// already held is skipped. If any frame fails, none is written and the store is unchanged.
    /// Frames of this store's own origin are taken when they extend its log and are signed by
    /// its key (the tail of its own log it lost: restored from a backup, a damaged tail cut off),
    /// or, unsigned, when the store knows it lost them (`lostOwnTail`); else only when already
    /// held. A signed one that does not follow its log is refused as a fork of it.
    ///
    /// An append may arrive over several calls (pages and batches are bounded, appends are not):
    /// its frames are written as they come, and become visible to readers, cursors and the
    /// projection once its last frame arrives (`incomplete` counts those still waiting, and
    /// `openAppends` says how far each such origin has come, for the next request).
    /// - Throws: `LogError` naming the frame (origin, seq range) and what is wrong.
    public func receive(_ frames: [[UInt8]]) throws -> ReceiveResult {
        try receive(frames, allowingUnsigned: false)
    }

    /// `receive`, taking unsigned frames even when `AppendOptions.requireSignatures` is set: for
    /// frames this process built itself (a legacy import's origin), never for a peer's.
    package func receive(_ frames: [[UInt8]], allowingUnsigned: Bool) throws -> ReceiveResult {
        switch try receive(batches: [frames], allowingUnsigned: allowingUnsigned)[0] {
        case .success(let r): return r
        case .failure(let e): throw e
        }
    }

    /// Receives several batches at once, as `receive` receives one, with one write pass and one
    /// sync per origin for all of them (group commit: a server receiving concurrent pushes makes
    /// them durable together). Each batch is verified whole, in order, against what the batches
    /// before it that were accepted leave; a refused batch is left out with its reason and
    /// changes nothing, the others are written.
    /// - Returns: per batch, what was received or why it was refused.
    /// - Throws: `LogError` when writing or syncing fails: nothing of any batch is written then.
    public func receive(batches: [[[UInt8]]]) throws -> [Result<ReceiveResult, LogError>] {
        try receive(batches: batches, allowingUnsigned: false)
    }

    func receive(batches: [[[UInt8]]], allowingUnsigned: Bool) throws -> [Result<ReceiveResult, LogError>] {
        precondition(txn == nil, "receive during an append")
        let (taken, declined, _) = try withoutForeignShares(batches)
        var results = try receiveTaken(taken, allowingUnsigned: allowingUnsigned)
        for b in results.indices where declined[b] > 0 {
            if case .success(var r) = results[b] {
                r.declined = declined[b]
                results[b] = .success(r)
            }
        }
        return results
    }

    /// From how many origins written a receive syncs the filesystem before each origin's log
    /// (below it, the fdatasyncs alone cost less: measured on ext4).
    static let filesystemSyncOrigins = 3

    /// `receive(batches:)` of what `withoutForeignShares` kept.
    private func receiveTaken(_ batches: [[[UInt8]]], allowingUnsigned: Bool) throws -> [Result<ReceiveResult, LogError>] {
        var results = [Result<ReceiveResult, LogError>](repeating: .success(ReceiveResult()), count: batches.count)
        // 1. Verify each batch against each origin's tip, simulating the chain over the batches
        // accepted before it.
        var groupTips: [ReplicaID: LogTip] = [:]
        var accepted: [(batch: Int, origin: ReplicaID, bytes: [UInt8], header: FrameHeader, ids: [(UUID, Seq)], hash: FrameHash)] = []
        let now = clock.wallNow()
        for (b, frames) in batches.enumerated() {
            let checked: ReceivedFrames
            do {
                checked = try ReceivedFrames.verify(frames, nowMillis: now, clockDriftMaxMs: options.clockDriftMaxMs, requireSignatures: options.requireSignatures && !allowingUnsigned,
                                                    tip: { try groupTips[$0] ?? currentTip($0) },
                                                    refuse: { origin in
                                                        // This replica's own frames come back when its log lost them (a
                                                        // damaged tail cut off, the store restored from a backup). A
                                                        // key-derived origin's are signed by its key, checked before anything
                                                        // is written: only this replica wrote them. An unsigned origin's prove
                                                        // no author: taken only on this store's own evidence of a loss.
                                                        guard origin == self.origin, !origin.isKeyDerived, self.lostOwnTail == nil else { return nil }
                                                        return "extends this replica's own log (origin \(origin)), which only this replica writes"
                                                    }, own: self.origin)
            } catch let e as LogError {
                results[b] = .failure(e)
                continue
            }
            var r = ReceiveResult()
            r.alreadyHeld = checked.alreadyHeld
            results[b] = .success(r)
            for (o, t) in checked.tips { groupTips[o] = t }
            accepted += checked.accepted.map { (b, $0.header.origin, frames[$0.index], $0.header, $0.eventIDs, $0.hash) }
        }
        guard !accepted.isEmpty else { return results }
        // A build before signed logs would take a signed frame for damage and cut it off: the
        // store's format says it holds them before the first is written.
        if store.format < Store.sharedFormatVersion, accepted.contains(where: { $0.header.shared }) {
            store = try store.upgradeFormat(to: Store.sharedFormatVersion, op: "receive")
        } else if store.format < Store.signedFormatVersion, accepted.contains(where: { $0.header.signed }) {
            store = try store.upgradeFormat(to: Store.signedFormatVersion, op: "receive")
        }
        // 2. Write, origin by origin; on failure cut every origin back to where it was.
        var starts: [ReplicaID: SegmentWriter.Mark] = [:]
        // The origins in the order their first frame was written: the order they are synced in.
        var written: [ReplicaID] = []
        do {
            try openNewLogsTogether(Set(accepted.map(\.origin)))
            for a in accepted {
                let w = try writer(for: a.origin)
                if starts[a.origin] == nil {
                    try w.rollIfFull(bytesMax: options.segmentBytesMax)
                    starts[a.origin] = w.mark
                    written.append(a.origin)
                }
                try w.write(a.bytes, header: a.header, hash: a.hash, op: "receive")
            }
            // Several origins: one write-back of the filesystem (one device flush) first, so
            // each origin's fdatasync, which stays the answer on durability, finds little left
            // to do. Twenty origins took 6-7 ms one fdatasync after another, 2.5-3 ms this way
            // (docs/SCALING.md).
            if written.count >= Self.filesystemSyncOrigins, let any = written.first { try writer(for: any).syncFilesystem() }
            // In the order written, the same on every run for the same frames (a test fails the
            // second one's on purpose), with no sort. Every origin's frames first, then every
            // mark: a failed fdatasync then leaves no mark raised over frames about to be cut (a
            // page or a watch that looked in between showed them, and the cursor went back).
            for origin in written { try writer(for: origin).syncFrames(op: "receive") }
            for origin in written { try writer(for: origin).raiseDurableMark(op: "receive") }
        } catch {
            for (origin, start) in starts { try? writer(for: origin).truncate(to: start, op: "receive") }
            throw error
        }
        // 3. Derived state: event ids (of committed appends only: an open append's ids wait in
        // memory until it commits, so a dropped open tail leaves nothing behind), clock, index
        // checkpoints.
        // A peer's store reached by path has no index open here: its owner indexes these ids
        // from the log at its next open.
        // The index's transaction may not begin (another connection holds the file's lock, on a
        // shared path): the frames are durable all the same, and their ids are owed (`owedIDs`).
        // An id that could not be indexed must not be claimed indexed: then nothing of this
        // receive is committed to the index, and the next index transaction reads its ids from
        // the log.
        // While an earlier failure's pause lasts, the index is left alone (a connection holding
        // its lock would cost every receive the wait for it).
        var indexFailed = index == nil || !owedIDs.isEmpty && !owedDue
        if !indexFailed, (try? index!.begin()) == nil {
            indexFailed = true
            pauseOwedIDs()
        }
        if let index, !indexFailed, !payOwedIDs(index) { indexFailed = true }
        var completed: [(ReplicaID, ClosedRange<Seq>)] = []
        var tips: [ReplicaID: Seq] = [:]
        var originsOf: [Int: Set<ReplicaID>] = [:]
        for a in accepted {
            clock.observe(a.header.lastHLC)
            originsOf[a.batch, default: []].insert(a.origin)
            var p = pending[a.origin] ?? PendingAppend(first: a.header.baseSeq)
            p.ids += a.ids
            p.frames += 1
            p.events += Int(a.header.count)
            if a.header.continues {
                pending[a.origin] = p
                continue
            }
            pending[a.origin] = nil
            completed.append((a.origin, p.first...a.header.lastSeq))
            if let index, !indexFailed, (try? index.insert(p.ids, origin: a.origin)) == nil { indexFailed = true }
            if case .success(var r) = results[a.batch] {
                r.frames += p.frames
                r.events += p.events
                r.tips[a.origin] = a.header.lastSeq
                results[a.batch] = .success(r)
            }
            tips[a.origin] = a.header.lastSeq
        }
        for (b, origins) in originsOf {
            if case .success(var r) = results[b] {
                r.incomplete = origins.reduce(0) { $0 + (pending[$1]?.frames ?? 0) }
                results[b] = .success(r)
            }
        }
        if let index {
            for (origin, seq) in tips where !indexFailed {
                // Never past ids still owed; the own origin's mark reaches what its log committed
                // (the evidence), and stays past a lost tail given back in part, without claiming
                // their ids. (Not past the tail once this receive gives it back whole.)
                let evidence = origin == self.origin ? max(seq, lostOwnTail.flatMap { seq >= $0.committed ? nil : $0.committed } ?? Seq(0)) : Seq(0)
                if (try? index.setIndexedThrough(origin, markWithin(origin, seq), evidence: evidence)) == nil { indexFailed = true }
            }
            if indexFailed || !commitIDs(index, paying: false) {
                if index.isInTransaction {
                    rollbackIDs(index)
                    pauseOwedIDs()
                }
                for (origin, seqs) in completed { owe(origin, seqs) }
            }
        }
        // The frames are durable: an index checkpoint that fails now is written again later
        // (it only saves readers a scan), and must not fail the receive.
        for origin in starts.keys { try? writer(for: origin).checkpointIndex(everyBytes: options.indexCheckpointBytes) }
        if let lost = lostOwnTail, own.committed.lastSeq >= lost.committed { lostOwnTail = nil }  // restored from a peer
        parkIdleWriters()
        // A share's membership log grew: this replica may have been given keys, or a share was
        // deleted. The frames are durable whatever happens here; a failure is tried again at the
        // next receive or `ShareDirectory.refresh`.
        let memberships = Set(accepted.filter { $0.header.shared && !$0.header.sealed }.map(\.origin))
        if !memberships.isEmpty {
            // A peer's store reached by path is never asked for its key: its owner reads the
            // membership logs it was given at its next open (`ShareDirectory.refreshIfAsked`).
            if index != nil, let key = try? replicaKey(op: "receive"), (try? ShareDirectory.refresh(store, key: key, membershipOrigins: memberships)) != nil {
            } else {
                ShareDirectory.askForRefresh(store)
            }
        }
        return results
    }

    /// For each origin with an append still open (some of its frames received, its last frame
    /// not yet): the last seq received. A receiver asks for what follows from there.
    public var openAppends: [ReplicaID: Seq] {
        var out: [ReplicaID: Seq] = [:]
        for (o, w) in received where w.hasOpenAppend { out[o] = w.active.lastSeq }
        // This replica's own log, while a peer gives back its lost tail an append at a time (not
        // this store's own append in progress).
        if txn == nil, own.hasOpenAppend { out[origin] = own.active.lastSeq }
        return out
    }

    /// What a received append still open holds so far: counted and indexed once it commits.
    struct PendingAppend {
        /// The first seq of the append.
        var first: Seq
        var ids: [(UUID, Seq)] = []
        var frames = 0
        var events = 0
    }

    /// A frame checked on its own: its header, its explicit event ids, its hash.
    typealias CheckedFrame = Result<(FrameHeader, [(UUID, Seq)], FrameHash), LogError>

    /// Checks every frame on its own, spread over the machine's cores: header, checksum, the form
    /// of its signature (`FrameSignature.checkForm`: signed when its origin signs, by its origin's
    /// key; the signature itself is verified once per origin and batch, by `ReceivedFrames.verify`),
    /// that its events decode (keeping their explicit ids), and its hash. Once a frame fails, the
    /// frames after it are not checked (the batch is refused at the first failure anyway). Results are in input order; a
    /// failure names the frame by its position.
    /// The cores this process may use (read once: asking reads cgroup files each time).
    static let cores = ProcessInfo.processInfo.activeProcessorCount

    static func checkEach(_ frames: [[UInt8]]) -> [CheckedFrame] {
        var results = [CheckedFrame](repeating: .failure(LogError(.corrupt, "receive", "not checked")), count: frames.count)
        let workers = min(Self.cores, max(1, frames.count / 4))
        let firstFailure = FirstFailure()
        results.withUnsafeMutableBufferPointer { buffer in
            // Each worker writes only its own slots (i ≡ w mod workers).
            nonisolated(unsafe) let out = buffer
            DispatchQueue.concurrentPerform(iterations: workers) { w in
                let decoder = FrameDecoder()
                for i in stride(from: w, to: frames.count, by: workers) {
                    if firstFailure.isBefore(i) { break }
                    out[i] = frames[i].withUnsafeBytes { (p: UnsafeRawBufferPointer) -> CheckedFrame in
                        do throws(FrameDecodeError) {
                            let h = try FrameHeader.decode(p)
                            guard h.totalBytes == p.count else { throw FrameDecodeError.invalid("frame is \(p.count) bytes, its header says \(h.totalBytes)") }
                            try FrameDecoder.checkCRC(p, header: h)
                            try FrameSignature.checkForm(p, header: h)
                            let ids = try decoder.check(p, header: h)
                            return .success((h, ids, FrameHash.of(p)))
                        } catch {
                            firstFailure.note(i)
                            return .failure(LogError(.corrupt, "receive", "frame \(i + 1) of \(frames.count) is damaged: \(error.message)", hint: "nothing was written; fetch it again"))
                        }
                    }
                }
            }
        }
        return results
    }

    /// Why a signed frame's signature does not verify; nil when it does.
    static func signatureFailure(of frame: [UInt8], header: FrameHeader) -> FrameDecodeError? {
        frame.withUnsafeBytes { p in
            do throws(FrameDecodeError) {
                try FrameSignature.verify(p, header: header)
                return nil
            } catch {
                return error
            }
        }
    }

    /// Verifies the signatures of `accepted` frames over the machine's cores.
    /// - Returns: the first failing frame's position in `frames` and why; nil when all verify.
    static func verifySignatures(_ frames: [[UInt8]], _ accepted: [ReceivedFrames.Accepted]) -> (Int, FrameDecodeError)? {
        guard !accepted.isEmpty else { return nil }
        let firstFailure = FirstFailure()
        let errors = ErrorSlots()
        let workers = min(Self.cores, accepted.count)
        DispatchQueue.concurrentPerform(iterations: workers) { w in
            for j in stride(from: w, to: accepted.count, by: workers) {
                let a = accepted[j]
                if firstFailure.isBefore(a.index) { break }
                if let failure = signatureFailure(of: frames[a.index], header: a.header) {
                    firstFailure.note(a.index)
                    errors.set(a.index, failure)
                }
            }
        }
        return errors.first
    }

    /// Failures by frame position, from several workers.
    final class ErrorSlots: @unchecked Sendable {
        private let lock = NSLock()
        private var found: [Int: FrameDecodeError] = [:]
        func set(_ i: Int, _ e: FrameDecodeError) { lock.withLock { found[i] = e } }
        var first: (Int, FrameDecodeError)? { lock.withLock { found.min { $0.key < $1.key }.map { ($0.key, $0.value) } } }
    }

    /// The lowest position of a frame that failed its checks, shared by the checking workers.
    final class FirstFailure: @unchecked Sendable {
        private let lock = NSLock()
        private var index = Int.max
        func note(_ i: Int) { lock.withLock { index = min(index, i) } }
        /// Whether a frame before `i` failed (then `i` need not be checked).
        func isBefore(_ i: Int) -> Bool { lock.withLock { index < i } }
    }

    /// The tip of any origin's log in this store (empty for an origin never seen).
    func currentTip(_ origin: ReplicaID) throws -> LogTip {
        if origin == self.origin { return tip }
        if let w = received[origin] { return w.tip }
        if let r = recoveredOthers[origin], !r.segments.isEmpty { return r.tip }
        return try store.directory(origin).loadFloor() ?? .empty
    }

    /// The logs of several origins this store holds nothing of are made on as many threads
    /// (up to `newLogsThreadsMax`): each is a folder and a first segment made durable, four
    /// syncs one after the other, and a group of first pushes waited for all of them in turn.
    /// Syncs of different files on different threads overlap on the device.
    private func openNewLogsTogether(_ origins: Set<ReplicaID>) throws {
        let store = self.store
        let new = origins.filter { o in
            o != origin && received[o] == nil && recoveredOthers[o] == nil && !FileIO.exists(store.directory(o).path)
        }.sorted()
        guard new.count >= 2 else { return }
        let made = Locked<[ReplicaID: Result<SegmentWriter, any Error>]>([:])
        let next = Locked(0)
        let finished = DispatchSemaphore(value: 0)
        // Each origin is taken by whichever thread comes first, this one included, and each
        // taken origin signals once made: a thread that never starts (the system refused it)
        // takes none and holds up nothing.
        let work: @Sendable () -> Void = {
            while true {
                let i = next.withLock { n -> Int in defer { n += 1 }; return n }
                guard i < new.count else { return }
                let r = Result { () throws -> SegmentWriter in try SegmentWriter(dir: store.directory(new[i]), recovered: nil) }
                made.withLock { $0[new[i]] = r }
                finished.signal()
            }
        }
        for _ in 1..<min(new.count, Self.newLogsThreadsMax) { Thread(block: work).start() }
        work()
        for _ in new { finished.wait() }
        var failure: (any Error)?
        for o in new {
            switch made.withLock({ $0[o] }) {
            case .success(let w)?:
                receivedUse &+= 1
                w.lastUse = receivedUse
                received[o] = w
            case .failure(let e)?:
                if failure == nil { failure = e }
            case nil:
                break
            }
        }
        if let failure { throw failure }
    }

    /// At most this many threads make new origins' logs at once.
    static let newLogsThreadsMax = 8

    private func writer(for origin: ReplicaID) throws -> SegmentWriter {
        if origin == self.origin { return own }  // only while restoring a lost own tail
        receivedUse &+= 1
        if let w = received[origin] {
            w.lastUse = receivedUse
            return w
        }
        let w = try SegmentWriter(dir: store.directory(origin), recovered: recoveredOthers[origin])
        recoveredOthers[origin] = nil  // the writer holds it now (and gives it back when parked)
        if parkedStale.remove(origin) != nil { w.indexNotWritten() }
        w.lastUse = receivedUse
        received[origin] = w
        return w
    }

    /// Closes the least recently used received writers past `receivedWritersOpenMax` (down to three
    /// quarters of it), keeping what they knew (their segments and in-memory index) as recovery
    /// would have found it. Their index files are not rewritten here (that is a file creation
    /// each): readers read the few frames past the last checkpoint, as after a crash.
    private func parkIdleWriters() {
        let max = Swift.max(1, options.receivedWritersOpenMax)
        guard received.count > max else { return }
        // A writer holding bytes it could not cut, or a durable mark it could not lower, is kept
        // open (its close could not do it either, and a reopen would take the mark as evidence).
        let idle = received.filter { !$0.value.hasOpenAppend && !$0.value.owesARetry }.sorted { $0.value.lastUse < $1.value.lastUse }
        for (origin, w) in idle.prefix(received.count - max * 3 / 4) {
            recoveredOthers[origin] = w.parked
            if w.indexStale { parkedStale.insert(origin) }
            w.close()
            received[origin] = nil
        }
    }
}
