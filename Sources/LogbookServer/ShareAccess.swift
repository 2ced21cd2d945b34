import EventLog
import Foundation

/// Which origins belong to which share, and which replicas are its members, as the store's
/// membership logs say (docs/SHARING.md): a scoped principal reads a share's logs (its membership
/// log and every member's sealed log) when a replica its users own is a member. Membership is
/// taken from the admin-signed records the server verified on receipt, never from content: the
/// server holds no key and reads no sealed byte. Kept in memory; origins are classified once
/// (a log's first frame says whether it is a share's, and which), membership logs re-read when
/// they grow.
final class ShareAccess: @unchecked Sendable {
    private let lock = NSLock()
    private var classified: [ReplicaID: ShareID?] = [:]
    private var origins: [ShareID: Set<ReplicaID>] = [:]
    private var members: [ShareID: Set<ReplicaID>] = [:]
    private let store: Store

    init(store: Store) throws {
        self.store = store
        try note(Set(store.origins()))
    }

    /// Classifies origins not seen before and re-reads the membership logs among `changed`.
    func note(_ changed: Set<ReplicaID>) throws {
        var updates: [(ReplicaID, ShareID?)] = []
        var states: [ShareID: Set<ReplicaID>] = [:]
        for o in changed {
            let known = lock.withLock { classified[o] }
            let share: ShareID?
            if let known { share = known } else {
                share = try Self.shareOf(store, o)
                updates.append((o, share))
            }
            guard let share, let state = try ShareDirectory.state(store, share: share, origin: o) else { continue }
            states[share] = state.deleted ? [] : Set(state.members.keys)
        }
        lock.withLock {
            for (o, s) in updates {
                classified[o] = .some(s)
                if let s { origins[s, default: []].insert(o) }
            }
            for (s, m) in states { members[s] = m }
        }
    }

    /// The share `origin` is a log of (from its first frame); nil for any other log.
    private static func shareOf(_ store: Store, _ origin: ReplicaID) throws -> ShareID? {
        guard origin.isKeyDerived else { return nil }
        var found: ShareID?
        try LogReader(store: store).forEachFrame(origin: origin, linking: false) { h, bytes in
            if h.shared, h.payloadEnd + ShareBlock.bytes <= bytes.count {
                found = ShareID(rawValue: UUID(bytes: UnsafeRawBufferPointer(rebasing: bytes[h.payloadEnd..<h.payloadEnd + 16])))
            }
            return false
        }
        return found
    }

    /// Origins of the shares a replica owned by `users` is a member of.
    func origins(readableBy users: Set<String>, owners: OriginOwners) -> Set<ReplicaID> {
        lock.withLock {
            var out = Set<ReplicaID>()
            for (s, m) in members where m.contains(where: { owners.owner(of: $0).map(users.contains) ?? false }) {
                out.formUnion(origins[s] ?? [])
            }
            return out
        }
    }

    /// Whether `origin` is a log of a share a replica owned by `users` is a member of.
    func isReadable(_ origin: ReplicaID, by users: Set<String>, owners: OriginOwners) -> Bool {
        lock.withLock {
            guard case .some(.some(let s)) = classified[origin], let m = members[s] else { return false }
            return m.contains { owners.owner(of: $0).map(users.contains) ?? false }
        }
    }
}
