import Foundation

/// A share as its membership log states it (docs/SHARING.md, "Membership log").
public struct ShareState: Sendable, Equatable {
    public let share: ShareID
    /// The share's name, sealed with its first key: empty until this replica holds that key.
    public internal(set) var name: String = ""
    /// The name as the membership log holds it (sealed).
    let sealedName: [UInt8]
    /// The creator's (the admin's) public signing key: the membership log's only writer.
    public let admin: [UInt8]
    /// The membership log's origin.
    public let membersOrigin: ReplicaID
    /// Current members by replica id (the admin among them), with their cards.
    public internal(set) var members: [ReplicaID: MemberCard] = [:]
    /// Replicas removed from the share, with the clock of the record that removed them.
    public internal(set) var removed: [ReplicaID: HLC] = [:]
    /// The newest content key epoch: what members write with.
    public internal(set) var epoch: UInt32 = 1
    /// Whether the share was deleted: its keys are destroyed on every member that syncs it.
    public internal(set) var deleted = false
    /// Records that were skipped, each naming its seq and why (a record is never taken on
    /// trust, and one bad record does not stop the ones after it): the first `problemsMax`.
    public internal(set) var problems: [String] = []
    /// Skipped records past the first `problemsMax` (counted, not described: a log of a million
    /// junk records would otherwise hold a million messages).
    public internal(set) var problemsNotListed = 0
    public static let problemsMax = 100
    /// Content keys sealed to each member, by epoch.
    var wrapped: [ReplicaID: [UInt32: [UInt8]]] = [:]

    public var adminID: ReplicaID { ReplicaID.derived(fromSigningKey: admin) }
}

/// Reads shares' membership logs and keeps this replica's share keys in step with them.
///
/// A membership log is the log of origin `ReplicaID.shareMembers(share, admin key)`: every frame
/// of it is signed by the admin's key (receivers check that the origin id derives from the
/// signing key and the share), carries a share block of epoch 0 and is not sealed. Its events are
/// `Entity.shareRecord` records with a `record` field: `create` (first, the share's name, nonce
/// and admin key, from which the share id must derive), `add` (a member's card and the content
/// keys of every epoch so far sealed to it), `remove` (a member, the new epoch, and the new key
/// sealed to every remaining member) and `delete`.
public enum ShareDirectory {
    /// The membership logs in `store`, by share (only logs whose first record proves the share's
    /// id: another log claiming the same id is not its creator's and is left out).
    public static func shares(_ store: Store) throws -> [ShareID: ShareState] {
        var out: [ShareID: ShareState] = [:]
        let ring = try? ShareKeyring.of(store)
        for origin in try store.origins() {
            guard let share = try membershipShare(store, origin: origin), var state = try state(store, share: share, origin: origin) else { continue }
            state.name = openedName(state, ring: ring)
            out[share] = state
        }
        return out
    }

    /// `share`'s membership log read whole, as `shares` reads it, without reading any other
    /// share's: its origin and its fold, the name opened when this store holds the share's key.
    /// nil when the store holds no log that proves the share.
    public static func fold(_ store: Store, share: ShareID) throws -> (origin: ReplicaID, fold: Fold)? {
        for origin in try store.origins() {
            guard try membershipShare(store, origin: origin) == share, var f = try state(store, share: share, origin: origin, continuing: nil) else { continue }
            f.state.name = openedName(f.state, ring: try? ShareKeyring.of(store))
            return (origin, f)
        }
        return nil
    }

    /// The share's name opened with its first key from `ring`; empty when the ring lacks it.
    private static func openedName(_ s: ShareState, ring: ShareKeyring?) -> String {
        guard let key = ring?.key(s.share, epoch: 1) else { return "" }
        return ShareCrypto.openName(s.sealedName, key: key, share: s.share) ?? ""
    }

    /// Whether `origin` is a share's log (its membership log or a member's sealed log).
    public static func isShareLog(_ store: Store, origin: ReplicaID) throws -> Bool {
        guard origin.isKeyDerived else { return false }
        var shared = false
        try LogReader(store: store).forEachFrame(origin: origin, linking: false) { h, _ in
            shared = h.shared
            return false
        }
        return shared
    }

    /// What a log is to the projection's scope rule (docs/PROJECTION.md, "Shares").
    public enum LogScope: Sendable, Equatable {
        /// A log of no share: private data.
        case privateData
        /// A member's sealed log of the share's events.
        case sealed(ShareID)
        /// The share's membership log: membership records only.
        case membership(ShareID)
    }

    /// What `origin`'s log is: a share's sealed log, its membership log, or private data; nil
    /// for a log this store holds no frame of yet.
    ///
    /// An origin's kind never changes: a share log's id derives from the share and its writer's
    /// key, which every receiver checks (`FrameSignature.checkForm`), so the answer is kept for
    /// the process once a frame was read (a log with no frame yet is asked again).
    public static func scope(ofLog store: Store, origin: ReplicaID) throws -> LogScope? {
        guard origin.isKeyDerived else { return .privateData }
        if let known = sealedLogSharesLock.withLock({ sealedLogShares[origin] }) { return known }
        var found: LogScope?
        try LogReader(store: store).forEachFrame(origin: origin, linking: false) { h, bytes in
            if h.shared, let share = ShareBlock.of(bytes, header: h)?.share {
                found = h.sealed ? .sealed(share) : .membership(share)
            } else {
                found = .privateData
            }
            return false
        }
        guard let found else { return nil }
        noteLog(origin, found)
        return found
    }

    /// Notes what `origin`'s log is without reading it (tests of the projection's scope rule,
    /// whose events are made in memory).
    static func noteLog(_ origin: ReplicaID, _ scope: LogScope) {
        sealedLogSharesLock.withLock {
            if sealedLogShares.count >= sealedLogSharesMax { sealedLogShares.removeAll(keepingCapacity: true) }
            sealedLogShares[origin] = scope
        }
    }

    private static let sealedLogSharesLock = NSLock()
    nonisolated(unsafe) private static var sealedLogShares: [ReplicaID: LogScope] = [:]
    /// Origins whose share is kept at once (a hub's thousands of replicas fit; past this the
    /// cache starts again: each answer costs one frame header read).
    static let sealedLogSharesMax = 1 << 16

    /// The share `origin` is the membership log of; nil for any other log.
    static func membershipShare(_ store: Store, origin: ReplicaID) throws -> ShareID? {
        guard origin.isKeyDerived else { return nil }
        var found: ShareID?
        try LogReader(store: store).forEachFrame(origin: origin) { h, bytes in
            if h.shared, !h.sealed { found = ShareBlock.of(bytes, header: h)?.share }
            return false
        }
        return found
    }

    /// The share's state from the membership log `origin`; nil when its first record does not
    /// prove the share (not a create record, or an id that does not derive from its key and nonce).
    public static func state(_ store: Store, share: ShareID, origin: ReplicaID) throws -> ShareState? {
        var state: ShareState?
        try LogReader(store: store).forEachEvent(origin: origin) { e in
            guard var s = state else {
                state = genesis(e, share: share, origin: origin)
                return state != nil
            }
            apply(e, to: &s)
            state = s
            return true
        }
        return state
    }

    /// A membership log as read so far: the share's state, and the last seq folded into it. A
    /// log only grows, and its state is a fold of its records in seq order, so the state after
    /// more records is this one with them applied: a reader that keeps it reads only what came
    /// since, where reading the whole log at each growth made a log's life quadratic.
    public struct Fold: Sendable, Equatable {
        public var state: ShareState
        public var through: Seq
        public init(state: ShareState, through: Seq) {
            self.state = state
            self.through = through
        }

        /// This fold without the content keys sealed to each member (`ShareState.wrapped`), for
        /// a keeper that reads only who the members are: a share's wraps grow as its members
        /// times its key epochs, and a server keeps a fold of every share for good. Continuing
        /// it is as exact as continuing the whole (the records after it are applied the same;
        /// only the wraps of epochs before it stay missing).
        public func withoutKeys() -> Fold {
            var f = self
            f.state.wrapped = [:]
            return f
        }
    }

    /// `state(_:share:origin:)`, continuing `fold` (the same log read through its `through`)
    /// with the records past it; from the log's start when nil.
    /// - Returns: the state and the last seq read; nil as `state(_:share:origin:)` says.
    public static func state(_ store: Store, share: ShareID, origin: ReplicaID, continuing fold: Fold?) throws -> Fold? {
        var state = fold?.state, through = fold?.through ?? Seq(0)
        try LogReader(store: store).forEachEvent(origin: origin, from: through.next) { e in
            guard var s = state else {
                state = genesis(e, share: share, origin: origin)
                through = e.seq
                return state != nil
            }
            apply(e, to: &s)
            state = s
            through = e.seq
            return true
        }
        return state.map { Fold(state: $0, through: through) }
    }

    /// `state(share:origin:events:)`, continuing `fold` with `events`, the records past its
    /// `through` in seq order (from the log's start when `fold` is nil).
    public static func state(share: ShareID, origin: ReplicaID, continuing fold: Fold?, events: [Event]) -> Fold? {
        var rest = events[...]
        var s: ShareState
        if let fold { s = fold.state } else {
            guard let first = rest.popFirst(), let g = genesis(first, share: share, origin: origin) else { return nil }
            s = g
        }
        for e in rest { apply(e, to: &s) }
        return Fold(state: s, through: events.last?.seq ?? fold?.through ?? Seq(0))
    }

    /// The share's state from the events of its membership log `origin`, in seq order (a hub
    /// that keeps frames elsewhere than in a store); nil as `state(_:share:origin:)` says.
    public static func state(share: ShareID, origin: ReplicaID, events: [Event]) -> ShareState? {
        guard let first = events.first, var s = genesis(first, share: share, origin: origin) else { return nil }
        for e in events.dropFirst() { apply(e, to: &s) }
        return s
    }

    static func text(_ e: Event, _ name: String) -> String? {
        guard case .text(let t)? = e.field(name) else { return nil }
        return t
    }

    static func integer(_ e: Event, _ name: String) -> Int64? {
        guard case .integer(let v)? = e.field(name) else { return nil }
        return v
    }

    private static func genesis(_ e: Event, share: ShareID, origin: ReplicaID) -> ShareState? {
        guard e.entity == .shareRecord, e.op == .create, e.entityID == share.rawValue, text(e, "record") == "create",
              let nonce = text(e, "nonce").flatMap(Hex.decode), nonce.count == 16,
              let admin = text(e, "admin").flatMap(Hex.decode), admin.count == 32,
              ShareID.derived(creator: admin, nonce: nonce) == share,
              ReplicaID.shareMembers(share, signingKey: admin) == origin else { return nil }
        return ShareState(share: share, sealedName: text(e, "name").flatMap(Hex.decode) ?? [], admin: admin, membersOrigin: origin)
    }

    private static func apply(_ e: Event, to s: inout ShareState) {
        func skip(_ why: String) {
            if s.problems.count < ShareState.problemsMax { s.problems.append("seq \(e.seq): \(why)") } else { s.problemsNotListed += 1 }
        }
        // The wraps, found by name once: an addition names every epoch so far and a removal every
        // member, up to 65,536 each, and a search of the fields for each was quadratic.
        // As `text(e, name)` reads them: the first field of the name, if it is a text.
        func texts() -> [String: String] {
            var first: [String: FieldValue] = [:]
            for f in e.fields where first[f.name] == nil { first[f.name] = f.value }
            return first.compactMapValues { if case .text(let t) = $0 { t } else { nil } }
        }
        guard e.entity == .shareRecord, e.entityID == s.share.rawValue else { return skip("not a record of this share") }
        guard !s.deleted else { return skip("a record after the share's deletion") }
        switch text(e, "record") {
        case "add":
            guard let card = text(e, "member").flatMap(Hex.decode).flatMap(MemberCard.init(bytes:)) else { return skip("add: no valid member card") }
            var keys: [UInt32: [UInt8]] = [:]
            let wraps = texts()
            for epoch in 1...s.epoch {
                guard let w = wraps["wrap.\(epoch)"].flatMap(Hex.decode) else { return skip("add: no key of epoch \(epoch) for \(card.replicaID)") }
                keys[epoch] = w
            }
            s.members[card.replicaID] = card
            s.removed[card.replicaID] = nil
            s.wrapped[card.replicaID, default: [:]].merge(keys) { _, new in new }
        case "remove":
            guard let id = text(e, "member").flatMap(ReplicaID.init), s.members[id] != nil else { return skip("remove: not a member") }
            guard id != s.adminID else { return skip("remove: the admin cannot be removed") }
            guard let next = integer(e, "epoch"), next == Int64(s.epoch) + 1 else { return skip("remove: the new epoch is not \(s.epoch + 1)") }
            var keys: [ReplicaID: [UInt8]] = [:]
            let wraps = texts()
            for m in s.members.keys where m != id {
                guard let w = wraps["wrap.\(m)"].flatMap(Hex.decode) else { return skip("remove: no new key for member \(m)") }
                keys[m] = w
            }
            s.members[id] = nil
            s.removed[id] = e.hlc
            s.wrapped[id] = nil
            s.epoch += 1
            for (m, w) in keys { s.wrapped[m, default: [:]][s.epoch] = w }
        case "delete":
            // The members stay: they are who must receive this record.
            s.deleted = true
            s.wrapped = [:]
        default:
            skip("unknown record \(printable(text(e, "record") ?? "(none)", limit: 40))")
        }
    }

    /// Brings this replica's keys of the shares whose membership logs are `membershipOrigins`
    /// (all of them when nil) in step with those logs: the keys sealed to it are opened and
    /// written to `shares/<share>.keys`; a deleted share's keys are destroyed.
    /// - Returns: the shares this replica holds keys of afterwards, among those read.
    @discardableResult
    public static func refresh(_ store: Store, key: ReplicaKey, membershipOrigins: Set<ReplicaID>? = nil) throws -> [ShareState] {
        var states: [ShareState] = []
        for origin in try membershipOrigins.map({ Array($0) }) ?? store.origins() {
            guard let share = try membershipShare(store, origin: origin), let s = try state(store, share: share, origin: origin) else { continue }
            states.append(s)
        }
        let dir = store.layout.shares
        var wrote = false
        defer { if wrote { ShareKeyring.invalidate(store) } }
        for s in states {
            let keysPath = dir + "/" + s.share.description + ShareKeyring.keysSuffix
            if s.deleted {
                try FileIO.makeDirectoryDurably(dir, op: "delete share keys")
                try FileIO.writeAtomically(Array("deleted\n".utf8), to: dir + "/" + s.share.description + ShareKeyring.deletedSuffix, op: "delete share keys")
                if FileIO.exists(keysPath) { try FileIO.remove(keysPath, op: "delete share keys") }
                try FileIO.fsyncDirectory(dir, op: "delete share keys")
                wrote = true
                continue
            }
            guard let mine = s.wrapped[key.replicaID], !FileIO.exists(dir + "/" + s.share.description + ShareKeyring.leftSuffix) else { continue }
            var keys: [ContentKey] = []
            for (epoch, w) in mine {
                guard let k = ShareCrypto.unwrap(w, share: s.share, epoch: epoch, with: key) else { continue }
                keys.append(k)
            }
            let ring = try ShareKeyring.of(store)
            let held = (1...max(1, s.epoch)).compactMap { ring.key(s.share, epoch: $0) }
            let all = Dictionary((held + keys).map { ($0.epoch, $0) }, uniquingKeysWith: { _, new in new }).values
            var writers: [ReplicaID: HLC?] = [:]
            for m in s.members.keys { writers[m] = .some(nil) }
            for (m, at) in s.removed { writers[m] = .some(at) }
            let bytes = ShareKeyring.encode(Array(all), writers: writers)
            let old = try? ForeignFile.read(keysPath, bytesMax: 20 + ShareKeyring.epochsMax * 36 + ShareKeyring.writersMax * 24, op: "read share keys")
            if old == bytes { continue }
            try FileIO.makeDirectoryDurably(dir, op: "write share keys")
            // Who counts as removed, and since when, changed: frames this replica read (or
            // skipped) by the old table may be wrong by the new one, so the projection is made
            // again from the log (as for an erasure), and every replica ends with the same rows.
            if let old, let before = try? ShareKeyring.decode(old, path: keysPath),
               before.writers.filter({ $0.value != nil }).mapValues { $0! } != writers.filter({ $0.value != nil }).mapValues { $0! } {
                try FileIO.writeAtomically(Array("rebuild\n".utf8), to: dir + "/" + s.share.description + ShareKeyring.rebuildSuffix, op: "write share keys")
            }
            try FileIO.writeAtomically(bytes, to: keysPath, op: "write share keys", restrictedMode: 0o600)
            wrote = true
        }
        return states
    }
}

extension ShareDirectory {
    /// The marker a receiver leaves when a membership log grew and this store's keys could
    /// not be brought in step at once (frames pushed into it by path; a failed refresh).
    static let refreshMarker = "REFRESH"

    static func askForRefresh(_ store: Store) {
        let dir = store.layout.shares
        try? FileIO.makeDirectory(dir, op: "share refresh")
        try? FileIO.writeAtomically(Array("refresh\n".utf8), to: dir + "/" + refreshMarker, op: "share refresh", durable: false)
    }

    /// Runs `refresh` over every membership log when a receiver asked for it; called by the
    /// store's own writer when it opens.
    public static func refreshIfAsked(_ store: Store, key: ReplicaKey) throws {
        let marker = store.layout.shares + "/" + refreshMarker
        guard FileIO.exists(marker) else { return }
        try refresh(store, key: key)
        try FileIO.remove(marker, op: "share refresh")
    }

    /// Records that the projection no longer holds rows of `shares` (deleted or left).
    public static func markErased(_ store: Store, shares: Set<ShareID>) throws {
        let op = "erase share"
        let dir = store.layout.shares
        for share in shares {
            let rebuild = dir + "/" + share.description + ShareKeyring.rebuildSuffix
            if FileIO.exists(rebuild) { try FileIO.remove(rebuild, op: op) }
            for (suffix, first) in [(ShareKeyring.deletedSuffix, "deleted\n"), (ShareKeyring.leftSuffix, "left\n")] {
                let path = dir + "/" + share.description + suffix
                guard FileIO.exists(path) else { continue }
                try FileIO.writeAtomically(Array((first + ShareKeyring.erasedLine).utf8), to: path, op: op)
            }
        }
        ShareKeyring.invalidate(store)
    }

    /// Leaves `share` on this replica: its keys are destroyed here and not learnt again from
    /// the membership log (the admin removes this replica to rotate the key for the others).
    public static func leave(_ store: Store, share: ShareID) throws {
        let op = "share leave"
        let dir = store.layout.shares
        try FileIO.makeDirectoryDurably(dir, op: op)
        try FileIO.writeAtomically(Array("left\n".utf8), to: dir + "/" + share.description + ShareKeyring.leftSuffix, op: op)
        let keys = dir + "/" + share.description + ShareKeyring.keysSuffix
        if FileIO.exists(keys) { try FileIO.remove(keys, op: op) }
        try FileIO.fsyncDirectory(dir, op: op)
        ShareKeyring.invalidate(store)
    }
}

extension ShareDirectory {
    /// Whether `store` takes every share's logs it is given (`shares/RELAY`): a relay's store,
    /// such as a folder replicas meet at, which holds shares' frames as ciphertext.
    public static func isRelay(_ store: Store) -> Bool {
        FileIO.exists(store.layout.shares + "/" + LogAppender.relayMarker)
    }

    /// Marks `store` as a relay (`on`) or not: from then on it takes every share's logs, or only
    /// those of the shares it belongs to (what it already holds stays; docs/SHARING.md).
    public static func setRelay(_ store: Store, _ on: Bool) throws {
        let op = on ? "share relay" : "share relay --off"
        let dir = store.layout.shares
        let marker = dir + "/" + LogAppender.relayMarker
        if on {
            try FileIO.makeDirectoryDurably(dir, op: op)
            try FileIO.writeAtomically(Array("takes every share's logs\n".utf8), to: marker, op: op)
            ShareDeclines.write(store, [:])  // what it declined before is asked for again
        } else if FileIO.exists(marker) {
            try FileIO.remove(marker, op: op)
        }
        try FileIO.fsyncDirectory(dir, op: op)
    }
}

enum Hex {
    static func encode(_ b: [UInt8]) -> String { b.map { String(format: "%02x", $0) }.joined() }

    static func decode(_ s: String) -> [UInt8]? {
        let u = Array(s.utf8)
        guard u.count % 2 == 0, u.count <= 1 << 20 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(u.count / 2)
        func v(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: c - 48
            case 97...102: c - 87
            default: nil
            }
        }
        var i = 0
        while i < u.count {
            guard let h = v(u[i]), let l = v(u[i + 1]) else { return nil }
            out.append(h << 4 | l)
            i += 2
        }
        return out
    }
}
