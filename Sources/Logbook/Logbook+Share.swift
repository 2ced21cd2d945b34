import EventLog
import Foundation
import Domain

/// A share as this replica knows it (docs/SHARING.md).
public struct ShareInfo: Sendable, Equatable {
    public let id: ShareID
    public let name: String
    /// The replica that created the share and alone changes its members.
    public let admin: ReplicaID
    /// Current members (the admin among them).
    public let members: [ReplicaID]
    /// The newest content key epoch (one more per removal).
    public let epoch: UInt32
    /// Whether this replica holds the newest key (it can read and write the share).
    public let holdsKey: Bool
    /// Whether the share was deleted (its keys are destroyed here).
    public let deleted: Bool
    /// Membership records that were skipped, and why.
    public let problems: [String]
}

extension Logbook {
    /// Shares whose membership logs this store holds.
    package func shares() throws -> [ShareInfo] {
        let ring = try ShareKeyring.of(store)
        return try ShareDirectory.shares(store).values.sorted { $0.share < $1.share }.map { s in
            ShareInfo(id: s.share, name: s.name, admin: s.adminID, members: s.members.keys.sorted(), epoch: s.epoch,
                      holdsKey: ring.key(s.share, epoch: s.epoch) != nil, deleted: s.deleted || ring.isDeleted(s.share), problems: s.problems)
        }
    }

    /// This replica's member card, which a share's admin adds it by; nil for an unsigned store.
    package func memberCard() throws -> MemberCard? { try store.signingKey(op: "share")?.memberCard }

    private func sharing<T>(_ op: String, _ body: (LogAppender) throws -> T) throws -> T {
        let w = try requireWriter(op)
        return try w.exclusive {
            let r = try body(w.appender)
            if w.projects { _ = try w.catchUp() }
            return r
        }
    }

    package func createShare(name: String) throws -> ShareID {
        guard !name.isEmpty, name.utf8.count <= FieldRules.textBytesMax else { throw LogbookError(.invalid, "a share's name is 1 to \(FieldRules.textBytesMax) bytes") }
        return try sharing("share create") { try $0.createShare(name: name) }
    }
    package func addMember(_ card: MemberCard, to share: ShareID) throws { try sharing("share add") { try $0.addMember(card, to: share) } }
    package func removeMember(_ member: ReplicaID, from share: ShareID) throws { try sharing("share remove") { try $0.removeMember(member, from: share) } }
    package func deleteShare(_ share: ShareID) throws { try sharing("share delete") { try $0.deleteShare(share) } }
    package func setRelay(_ on: Bool) throws { try sharing(on ? "share relay" : "share relay --off") { try ShareDirectory.setRelay($0.store, on) } }
    package var isRelay: Bool { ShareDirectory.isRelay(store) }
    package func leaveShare(_ share: ShareID) throws { try sharing("share leave") { try ShareDirectory.leave($0.store, share: share) } }

    /// Appends `mutations` (checked like any append) to this replica's sealed log of `share`.
    package func append(mutations: [Mutation], toShare share: ShareID) throws -> ReceiveResult {
        var ms = mutations
        for i in ms.indices {
            try FieldRules.validate(ms[i], position: i + 1)
            FieldRules.normalize(&ms[i])
        }
        let w = try requireWriter("share append")
        return try sharing("share append") { appender in
            try w.projection.checkScopes(ms, share: share)
            try w.projection.fillBases(&ms)
            return try appender.appendShared(ms, to: share)
        }
    }
}
