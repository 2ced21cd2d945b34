import EventLog
import Foundation

/// Which origins belong to which share, and which replicas are its members, as the store's
/// membership logs say (docs/SHARING.md): a scoped principal reads a share's logs (its membership
/// log and every member's sealed log) when a replica its users own is a member. Membership is
/// taken from the admin-signed records the server verified on receipt, never from content: the
/// server holds no key and reads no sealed byte. Kept in memory; origins are classified once
/// (a log's first frame says whether it is a share's, and which), and a membership log that grows
/// is read from where it was left (`ShareDirectory.Fold`), not again from its start.
final class ShareAccess: @unchecked Sendable {
    private let lock = NSLock()
    /// Per origin seen: the share it is a log of (nil: none) and whether it is the membership log.
    private var classified: [ReplicaID: (share: ShareID, members: Bool)?] = [:]
    private var origins: [ShareID: Set<ReplicaID>] = [:]
    private var members: [ShareID: Set<ReplicaID>] = [:]
    /// Each membership log as read so far: a log that grows is read from where it was left.
    private var folds: [ReplicaID: ShareDirectory.Fold] = [:]
    /// See `scopeVersion`.
    private var version: UInt64 = 0
    /// Member replicas whose log was seen to grow since this started. A member counts once its
    /// log holds frames, so its first growth may open its share to its owner; later ones change
    /// no one's scope, and do not change the version (every watch stream's scope was read again
    /// at each push of any member otherwise).
    private var grownMembers = Set<ReplicaID>()
    private let store: Store

    init(store: Store) throws {
        self.store = store
        note(Set(try store.origins()), grown: false)
    }

    /// Classifies origins not seen before and re-reads the membership logs among `changed`.
    /// An origin that cannot be read now (damage, an empty log) is left unclassified and tried
    /// again when it next grows; the others are noted.
    /// - Parameter grown: whether `changed` grew (false for the first look at every origin, whose
    ///   logs may be empty).
    func note(_ changed: Set<ReplicaID>, grown: Bool = true) {
        var updates: [(ReplicaID, (share: ShareID, members: Bool)?)] = []
        var states: [ShareID: Set<ReplicaID>] = [:]
        var newFolds: [ReplicaID: ShareDirectory.Fold] = [:]
        for o in changed {
            let kind: (share: ShareID, members: Bool)?
            if let known = lock.withLock({ classified[o] }) { kind = known } else {
                guard let read = try? Self.shareOf(store, o) else { continue }
                kind = read.kind
                if read.seen { updates.append((o, kind)) }
            }
            // Only a membership log says who the members are (a sealed log is never opened here).
            guard let kind, kind.members else { continue }
            let known = lock.withLock { folds[o] }
            guard let fold = try? ShareDirectory.state(store, share: kind.share, origin: o, continuing: known) else { continue }
            // A deleted share's members still receive its logs: the deletion must reach them.
            states[kind.share] = Set(fold.state.members.keys)
            newFolds[o] = fold.withoutKeys()
        }
        lock.withLock {
            var moved = updates.contains { $0.1 != nil }
            for (o, k) in updates {
                classified[o] = .some(k)
                if let k { origins[k.share, default: []].insert(o) }
            }
            for (o, f) in newFolds where f.through > (folds[o]?.through ?? Seq(0)) || folds[o] == nil {
                folds[o] = f
                moved = moved || members[f.state.share] != states[f.state.share]
                members[f.state.share] = states[f.state.share]
            }
            // A member replica's log that grew for the first time may be held for the first time:
            // its share opens to its owner.
            if grown, !members.isEmpty {
                let first = changed.filter { o in !grownMembers.contains(o) && members.values.contains { $0.contains(o) } }
                grownMembers.formUnion(first)
                moved = moved || !first.isEmpty
            }
            if moved { version &+= 1 }
        }
    }

    /// Changes whenever what `readers`, `isReadable` and `origins(readableBy:)` answer may have
    /// changed here: a share's log classified, its members changed, a member's log grown for the
    /// first time since this started. Later growths need no change: a member counts once the
    /// store holds its frames, and a log held is held for good (a purge removes only sealed logs,
    /// never a member's own). The owners' confirmations count theirs (`OriginOwners.scopeVersion`).
    var scopeVersion: UInt64 { lock.withLock { version } }

    /// The share `origin` is a log of (from its first frame); nil for any other log.
    /// - Returns: the kind, and whether a frame was there to tell it (an empty log is not classified).
    private static func shareOf(_ store: Store, _ origin: ReplicaID) throws -> (kind: (share: ShareID, members: Bool)?, seen: Bool) {
        guard origin.isKeyDerived else { return (nil, true) }
        var found: (share: ShareID, members: Bool)?
        var seen = false
        try LogReader(store: store).forEachFrame(origin: origin, linking: false) { h, bytes in
            seen = true
            if h.shared, h.payloadEnd + ShareBlock.bytes <= bytes.count {
                found = (ShareID(rawValue: UUID(bytes: UnsafeRawBufferPointer(rebasing: bytes[h.payloadEnd..<h.payloadEnd + 16]))), !h.sealed)
            }
            return false
        }
        return (found, seen)
    }

    /// Origins of the shares a replica owned by `users` is a member of.
    /// - Parameter holds: whether this store holds frames of a replica's own log durably. A
    ///   member counts only then: its frames are signed by its key and were verified on receipt,
    ///   so its owner's claim stands. A claim alone does not (a scoped user's first push claims
    ///   its origins before its frames are checked, and a refused push's claim is taken back: in
    ///   between, or were taking it back to fail, a claim of another user's member replica would
    ///   otherwise open the share's logs to the claimant).
    func origins(readableBy users: Set<String>, owners: OriginOwners, holds: (ReplicaID) -> Bool) -> Set<ReplicaID> {
        let (members, origins) = lock.withLock { (self.members, self.origins) }
        var out = Set<ReplicaID>()
        for (s, m) in members where m.contains(where: { Self.grants($0, to: users, owners: owners, holds: holds) }) {
            out.formUnion(origins[s] ?? [])
        }
        return out
    }

    /// Whether `origin` is a log of a share a replica owned by `users` is a member of (a member
    /// counting as in `origins(readableBy:owners:holds:)`).
    func isReadable(_ origin: ReplicaID, by users: Set<String>, owners: OriginOwners, holds: (ReplicaID) -> Bool) -> Bool {
        let members: Set<ReplicaID>? = lock.withLock {
            guard case .some(.some(let k)) = classified[origin] else { return nil }
            return self.members[k.share]
        }
        return members?.contains { Self.grants($0, to: users, owners: owners, holds: holds) } ?? false
    }

    /// The users a replica of whom opens `origin`'s share to them (`isReadable` is true for a set
    /// of users exactly when it holds one of these): empty when `origin` is no share's log.
    func readers(of origin: ReplicaID, owners: OriginOwners, holds: (ReplicaID) -> Bool) -> Set<String> {
        let members: Set<ReplicaID>? = lock.withLock {
            guard case .some(.some(let k)) = classified[origin] else { return nil }
            return self.members[k.share]
        }
        var out = Set<String>()
        for m in members ?? [] where holds(m) {
            if let u = owners.owner(of: m) { out.insert(u) }
        }
        return out
    }

    /// Whether member replica `member` opens its share to `users`: one of them owns it, and its
    /// frames are held here (not a claim alone).
    private static func grants(_ member: ReplicaID, to users: Set<String>, owners: OriginOwners, holds: (ReplicaID) -> Bool) -> Bool {
        (owners.owner(of: member).map(users.contains) ?? false) && holds(member)
    }
}
