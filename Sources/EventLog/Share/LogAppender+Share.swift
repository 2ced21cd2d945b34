import Crypto
import Foundation

/// Writing shares (docs/SHARING.md): the membership log, as the share's admin, and a member's
/// sealed log of the share's events. Both are origins of their own, signed with this replica's
/// key; their frames are built here and taken in through `receive`, which checks them as any
/// peer's (chain, signature, form) and makes them durable.
extension LogAppender {
    private func shareSigner(_ op: String) throws -> ReplicaKey {
        guard let key = try replicaKey(op: op) else {
            throw LogError(.invalidInput, op, "this store has no signing key (made before signed logs, with a fixed id, or a peer's store reached by path): it cannot take part in shares",
                           file: store.path, hint: "make a new replica with `evctl init` and sync it")
        }
        return key
    }

    /// Builds frames of `origin` holding `mutations`, continuing its log, and receives them.
    /// - Parameter membership: the records of a share's membership log, bounded by a frame alone
    ///   (`membershipRecordBytesMax`): a record that wraps the share's key to every member, or
    ///   every key so far to a new one, grows with the members and epochs (up to 65,536 of each,
    ///   about 13.5 MB), and the 1 MiB an event may take elsewhere would one day refuse an admin
    ///   every removal or addition. A frame is finished before a record that might not fit it.
    func writeShareFrames(_ mutations: [Mutation], origin: ReplicaID, share: ShareID, key: ContentKey?, signer: ReplicaKey, op: String,
                          membership: Bool = false) throws -> ReceiveResult {
        precondition(!mutations.isEmpty, "a share append holds at least one mutation")
        let tip = try currentTip(origin)
        var seq = tip.lastSeq.rawValue
        var previous = tip.lastHash
        var frames: [[UInt8]] = []
        let perFrame = max(1, options.frameEventsMax)
        let recordBytesMax = membership ? Self.membershipRecordBytesMax : FrameEncoder.recordBytesMax
        // Frames are cut as an append cuts them: by events, and by bytes of records (a share's
        // events may be large: cut by events alone, twenty of 1 MB made a frame of 20 MB).
        let bytesLimit = min(options.frameRawBytesMax, Self.frameRecordBytesCap)
        // Each event's clock comes after the one before, the log's tip first: a tip ahead of
        // this replica's clock (a floor a snapshot set) moves the first events past it, and the
        // clock may then tick onto a value one of them took.
        var lastHLC = tip.lastHLC
        func finishFrame(continues: Bool) {
            let nonce = key == nil ? [UInt8](repeating: 0, count: 12) : ChaChaPoly.Nonce().withUnsafeBytes { Array($0) }
            let block = ShareBlock(share: share, epoch: key?.epoch ?? 0, nonce: nonce)
            let frame = encoder.finish(continues: continues, previousHash: previous, signer: signer, share: (block, key))
            previous = frame.withUnsafeBytes { FrameHash.of($0) }
            frames.append(frame)
        }
        // A clock that cannot move: nothing of this frame is kept.
        func clockStuck(_ message: String) -> LogError {
            encoder.reset()
            return LogError(.invalidInput, op, message, hint: "nothing was appended; `evctl verify` lists far-future clocks")
        }
        for (i, m) in mutations.enumerated() {
            seq += 1
            var hlc: HLC
            do { hlc = try clock.tick() } catch { throw clockStuck(error.description) }
            if hlc <= lastHLC {
                guard lastHLC.rawValue < UInt64.max else { throw clockStuck("share log \(origin) ends at the largest clock value: no event can follow it") }
                hlc = HLC(rawValue: lastHLC.rawValue + 1)
            }
            lastHLC = hlc
            if membership && encoder.count > 0 && encoder.recordBytes + EventCodec.recordBytesAtMost(m) > recordBytesMax {
                finishFrame(continues: true)
            }
            do { try encoder.add(m, origin: origin, seq: Seq(seq), hlc: hlc, recordBytesMax: recordBytesMax) } catch {
                encoder.reset()  // nothing of this frame is kept, nor of those before it (not yet received)
                throw error.logError(op)
            }
            let isLast = i == mutations.count - 1
            guard isLast || encoder.count >= perFrame || encoder.recordBytes >= bytesLimit else { continue }
            finishFrame(continues: !isLast)
        }
        return try receive(frames)
    }

    /// The share's state, or an error naming why it cannot be written to.
    private func writableShare(_ share: ShareID, op: String) throws -> ShareState {
        var found: ShareState?
        if let c = shareCache[share] {
            let tip = try currentTip(c.origin).lastSeq
            // The records past the kept fold, read on from it; its name was opened once (only
            // the share's first record names it).
            var fold = tip == c.seq ? c.fold : try ShareDirectory.state(store, share: share, origin: c.origin, continuing: c.fold)
            fold?.state.name = c.fold.state.name
            found = fold?.state
            if let fold { shareCache[share] = (c.origin, tip, fold) }
        } else if let (origin, fold) = try ShareDirectory.fold(store, share: share) {
            found = fold.state
            shareCache[share] = (origin, try currentTip(origin).lastSeq, fold)
        }
        guard let s = found else {
            throw LogError(.invalidInput, op, "no share \(share) in this store", file: store.path, hint: "list shares with `evctl share list`; sync first if it was made elsewhere")
        }
        guard !s.deleted else { throw LogError(.invalidInput, op, "share \(share) (\(printable(s.name, limit: 60))) was deleted", file: store.path) }
        return s
    }

    /// Creates a share named `name`, with this replica as its admin and first member.
    /// - Returns: the new share's id.
    public func createShare(name: String) throws -> ShareID {
        let op = "share create"
        let signer = try shareSigner(op)
        let nonce = SymmetricKey(size: .bits128).withUnsafeBytes { Array($0) }
        let share = ShareID.derived(creator: signer.publicKey, nonce: nonce)
        let origin = ReplicaID.shareMembers(share, signingKey: signer.publicKey)
        let key = ContentKey.generate(epoch: 1)
        let card = signer.memberCard
        let create = Mutation(entity: .shareRecord, op: .create, entityID: share.rawValue, fields: [
            Field("record", .text("create")), Field("name", .text(Hex.encode(ShareCrypto.sealName(name, key: key, share: share)))), Field("nonce", .text(Hex.encode(nonce))), Field("admin", .text(Hex.encode(signer.publicKey))),
        ])
        let add = Mutation(entity: .shareRecord, op: .update, entityID: share.rawValue, fields: [
            Field("record", .text("add")), Field("member", .text(Hex.encode(card.encoded))),
            Field("wrap.1", .text(Hex.encode(try ShareCrypto.wrap(key, share: share, to: card)))),
        ])
        _ = try writeShareFrames([create, add], origin: origin, share: share, key: nil, signer: signer, op: op, membership: true)
        try ShareDirectory.refresh(store, key: signer, membershipOrigins: [origin])
        return share
    }

    /// The most bytes a record of a share's membership log, and the records of its frame
    /// together, may take: a frame's payload, less room for the signature and share blocks.
    static let membershipRecordBytesMax = FrameHeader.payloadBytesMax - (64 << 10)

    /// The admin's key, or an error when this replica is not `s`'s admin.
    private func adminSigner(_ s: ShareState, op: String) throws -> ReplicaKey {
        let signer = try shareSigner(op)
        guard signer.publicKey == s.admin else {
            throw LogError(.invalidInput, op, "only share \(s.share)'s admin (replica \(s.adminID)) changes its members; this is replica \(signer.replicaID)", file: store.path)
        }
        return signer
    }

    /// Adds the replica of `card` to `share` and gives it every content key so far (sealed to it).
    /// This replica must be the share's admin.
    public func addMember(_ card: MemberCard, to share: ShareID) throws {
        let op = "share add"
        let s = try writableShare(share, op: op)
        let signer = try adminSigner(s, op: op)
        guard s.members[card.replicaID] == nil else { return }
        guard let ring = try? ShareKeyring.of(store), (1...s.epoch).allSatisfy({ ring.key(share, epoch: $0) != nil }) else {
            throw LogError(.corrupt, op, "this replica does not hold every content key of share \(share)", file: store.layout.shares, hint: "nothing was written")
        }
        var fields = [Field("record", .text("add")), Field("member", .text(Hex.encode(card.encoded)))]
        for epoch in 1...s.epoch {
            fields.append(Field("wrap.\(epoch)", .text(Hex.encode(try ShareCrypto.wrap(ring.key(share, epoch: epoch)!, share: share, to: card)))))
        }
        _ = try writeShareFrames([Mutation(entity: .shareRecord, op: .update, entityID: share.rawValue, fields: fields)],
                                 origin: s.membersOrigin, share: share, key: nil, signer: signer, op: op, membership: true)
    }

    /// Removes `member` from `share` and rotates its content key: what members write from now on
    /// is sealed with a key the removed replica never gets. This replica must be the admin.
    public func removeMember(_ member: ReplicaID, from share: ShareID) throws {
        let op = "share remove"
        let s = try writableShare(share, op: op)
        let signer = try adminSigner(s, op: op)
        guard member != s.adminID else { throw LogError(.invalidInput, op, "the admin cannot remove itself; delete the share instead", file: store.path) }
        guard s.members[member] != nil else { throw LogError(.invalidInput, op, "replica \(member) is not a member of share \(share)", file: store.path) }
        let key = ContentKey.generate(epoch: s.epoch + 1)
        var fields = [Field("record", .text("remove")), Field("member", .text(member.description)), Field("epoch", .integer(Int64(key.epoch)))]
        for (id, card) in s.members where id != member {
            fields.append(Field("wrap.\(id)", .text(Hex.encode(try ShareCrypto.wrap(key, share: share, to: card)))))
        }
        _ = try writeShareFrames([Mutation(entity: .shareRecord, op: .update, entityID: share.rawValue, fields: fields)],
                                 origin: s.membersOrigin, share: share, key: nil, signer: signer, op: op, membership: true)
    }

    /// Deletes `share`: every member that syncs this destroys its keys. This replica must be the admin.
    public func deleteShare(_ share: ShareID) throws {
        let op = "share delete"
        let s = try writableShare(share, op: op)
        let signer = try adminSigner(s, op: op)
        _ = try writeShareFrames([Mutation(entity: .shareRecord, op: .delete, entityID: share.rawValue, fields: [Field("record", .text("delete"))])],
                                 origin: s.membersOrigin, share: share, key: nil, signer: signer, op: op, membership: true)
    }

    /// Appends `mutations` to this replica's log of `share`, sealed with the share's newest key
    /// this replica holds. Only a member holding the current key writes.
    public func appendShared(_ mutations: [Mutation], to share: ShareID) throws -> ReceiveResult {
        let op = "share append"
        guard !mutations.isEmpty else { return ReceiveResult() }
        let signer = try shareSigner(op)
        let s = try writableShare(share, op: op)
        guard s.members[signer.replicaID] != nil else {
            throw LogError(.invalidInput, op, "this replica (\(signer.replicaID)) is not a member of share \(share)", file: store.path, hint: "nothing was appended")
        }
        guard let key = try ShareKeyring.of(store).key(share, epoch: s.epoch) else {
            throw LogError(.invalidInput, op, "this replica does not hold key epoch \(s.epoch) of share \(share)", file: store.layout.shares, hint: "nothing was appended; sync, or ask the admin to add this replica again")
        }
        return try writeShareFrames(mutations, origin: ReplicaID.shareLog(share, signingKey: signer.publicKey), share: share, key: key, signer: signer, op: op)
    }
}
