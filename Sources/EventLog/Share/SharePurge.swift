import Foundation

/// What `LogAppender.purgeShare(_:)` dropped.
public struct SharePurgeResult: Sendable, Equatable {
    public var share: ShareID
    /// The sealed logs dropped, with the last seq each held.
    public var logs: [ReplicaID: Seq] = [:]
    /// Bytes of ciphertext (segment and index files) removed.
    public var bytes = 0
    /// The membership log kept (it carries the deletion to the members that have not synced it).
    public var membershipLog: ReplicaID
    /// The share was purged here before this call (what it dropped, if anything, was left by a
    /// purge cut short).
    public var purgedBefore = false
    /// Every log the share's purge record names (this call's and earlier ones'): what the
    /// projection forgets.
    public var recorded: Set<ReplicaID> = []
}

/// A deleted share's ciphertext, dropped (docs/SHARING.md, "Purge"). `shares/<share>.purged`
/// records that the share's sealed logs were dropped here, and how far each went:
///
/// ```text
/// purged
/// <origin uuid> <last seq>
/// …
/// ```
///
/// From then on this store declines every frame of the share's sealed logs (a relay's included),
/// and counts those logs as held through those seqs when it asks a peer for frames.
public enum SharePurge {
    static let suffix = ".purged"
    static let firstLine = "purged"
    /// A purge record lists at most this many logs (a share's members, each one log).
    static let logsMax = 1 << 16
    /// Purge records read from one store at most, in bytes over all of them (a store on a
    /// shared path is hostile: a folder of many large records is refused, not read whole).
    static let recordsBytesMax = 16 << 20
    /// A log folder being removed by a purge: renamed first (atomic), so a purge cut short
    /// leaves no half-removed log under its origin's name; removed by the next purge.
    static let removingPrefix = ".purging-"

    static func path(_ store: Store, _ share: ShareID) -> String {
        store.layout.shares + "/" + share.description + suffix
    }

    /// The shares purged in `store`, with the logs dropped and how far each went. A damaged
    /// record is reported, never read as a shorter list.
    public static func purged(_ store: Store) throws -> [ShareID: [ReplicaID: Seq]] {
        let dir = store.layout.shares
        guard FileIO.exists(dir) else { return [:] }
        var out: [ShareID: [ReplicaID: Seq]] = [:]
        var bytes = 0
        for name in try FileIO.listDirectory(dir, op: "read purged shares") where name.hasSuffix(suffix) {
            guard let share = ShareID(String(name.dropLast(suffix.count))) else { continue }
            let room = recordsBytesMax - bytes
            guard room > 0, let (logs, read) = try record(store, share, bytesMax: min(room, recordBytesMax)) else {
                throw LogError(.corrupt, "read purged shares", "the purge records hold more than \(recordsBytesMax) bytes in all", file: dir,
                               hint: "a store holds one small record per purged share; this folder was not written by Logbook")
            }
            bytes += read
            out[share] = logs
        }
        return out
    }

    /// The logs dropped of `share` and how far each went; nil when it was not purged here.
    /// One record's largest size.
    static let recordBytesMax = 16 + logsMax * 60

    static func record(_ store: Store, _ share: ShareID) throws -> [ReplicaID: Seq]? {
        try record(store, share, bytesMax: recordBytesMax)?.logs
    }

    /// The record and its size in bytes; nil when there is none.
    static func record(_ store: Store, _ share: ShareID, bytesMax: Int) throws -> (logs: [ReplicaID: Seq], bytes: Int)? {
        let file = path(store, share)
        guard FileIO.exists(file) else { return nil }
        let bytes = try ForeignFile.read(file, bytesMax: bytesMax, op: "read purged share")
        return (try parse(bytes, file: file), bytes.count)
    }

    static func parse(_ bytes: [UInt8], file: String) throws -> [ReplicaID: Seq] {
        guard let text = String(bytes: bytes, encoding: .utf8) else {
            throw LogError(.corrupt, "read purged share", "the purge record is not UTF-8", file: file)
        }
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.last == "" else { throw LogError(.corrupt, "read purged share", "the purge record does not end with a newline (cut short)", file: file) }
        lines.removeLast()
        guard lines.first == Substring(firstLine) else {
            throw LogError(.corrupt, "read purged share", "the purge record does not start with \"\(firstLine)\"", file: file, offset: 0)
        }
        var logs: [ReplicaID: Seq] = [:]
        for (n, line) in lines.enumerated().dropFirst() {
            let parts = line.split(separator: " ", omittingEmptySubsequences: false)
            guard parts.count == 2, let origin = ReplicaID(String(parts[0])), origin.description == parts[0],
                  let seq = UInt64(parts[1]), String(seq) == parts[1] else {
                throw LogError(.corrupt, "read purged share", "line \(n + 1) of the purge record is not \"<origin> <last seq>\": \(printable(String(line), limit: 80))", file: file)
            }
            logs[origin] = max(logs[origin] ?? Seq(0), Seq(seq))
        }
        return logs
    }

    static func encode(_ logs: [ReplicaID: Seq]) -> [UInt8] {
        var text = firstLine + "\n"
        for (origin, seq) in logs.sorted(by: { $0.key < $1.key }) { text += "\(origin) \(seq.rawValue)\n" }
        return Array(text.utf8)
    }
}

extension LogAppender {
    /// Drops the ciphertext of deleted `share` from this store (`evctl purge --share`): every
    /// member's sealed log of it is removed from disk, and the store declines their frames from
    /// then on. The share's membership log stays: it is what tells members that have not synced
    /// the deletion to destroy their keys, and holds no content (the share's name is sealed).
    ///
    /// Only a share whose deletion this store holds, signed by its admin in its membership log,
    /// is purged: a live share's logs are never dropped by this call. The record of the purge is
    /// written (durably) before any file is removed, so a purge cut short declines the share's
    /// frames already, and a second run removes what is left. A purge of a share purged already
    /// removes what arrived since (nothing, as its frames are declined) and says so.
    public func purgeShare(_ share: ShareID) throws -> SharePurgeResult {
        let op = "purge --share"
        guard let state = try ShareDirectory.shares(store)[share] else {
            throw LogError(.invalidInput, op, "this store holds no membership log of share \(share)", file: store.path,
                           hint: "nothing was removed; pull the share's membership log (with its deletion) first")
        }
        guard state.deleted else {
            throw LogError(.invalidInput, op, "share \(share) is not deleted: only a share its admin deleted is purged", file: store.path,
                           hint: "nothing was removed; its admin deletes it with `evctl share delete`, and the deletion reaches this store by sync")
        }
        let before = try SharePurge.record(store, share)
        var logs = before ?? [:]
        var doomed: [ReplicaID] = []
        for origin in try store.origins() where origin != store.replicaID {
            // A log named by an earlier purge of the share (cut short) goes whatever its first
            // frame says now; any other is judged by its first frame (a log that cannot be read
            // is not this purge's to judge, and stays).
            let named = logs[origin] != nil
            guard named || (try? ShareDirectory.scope(ofLog: store, origin: origin)) == .sealed(share) else { continue }
            if let w = received[origin], w.hasOpenAppend {
                throw LogError(.invalidInput, op, "an append of origin \(origin) is still arriving", file: store.path, hint: "nothing was removed; purge once the sync ends")
            }
            logs[origin] = max(logs[origin] ?? Seq(0), (try? currentTip(origin).lastSeq) ?? Seq(0))
            doomed.append(origin)
        }
        try FileIO.makeDirectoryDurably(store.layout.shares, op: op)
        try FileIO.writeAtomically(SharePurge.encode(logs), to: SharePurge.path(store, share), op: op)
        try FileIO.fsyncDirectory(store.layout.shares, op: op)
        var known = try loadPurged()
        known[share] = logs
        purgedShares = known
        var result = SharePurgeResult(share: share, membershipLog: state.membersOrigin, purgedBefore: before != nil, recorded: Set(logs.keys))
        let logDir = store.layout.log
        for origin in doomed {
            received.removeValue(forKey: origin)?.close()
            recoveredOthers[origin] = nil
            parkedStale.remove(origin)
            pending[origin] = nil
            owedIDs[origin] = nil  // its ids go with it
            declinedShareLogs[origin] = nil
            let dir = store.directory(origin).path
            for name in (try? FileIO.listDirectory(dir, op: op)) ?? [] { result.bytes += FileIO.size(of: dir + "/" + name) ?? 0 }
            // Out of the log's names at once (a rename), then removed.
            let removing = logDir + "/" + SharePurge.removingPrefix + origin.description
            if FileIO.exists(removing) { try? FileManager.default.removeItem(atPath: removing) }
            do { try FileManager.default.moveItem(atPath: dir, toPath: removing) } catch {
                throw LogError(.io, op, "cannot move the sealed log of origin \(origin) out of the log: \(error)", file: dir,
                               hint: "the purge is recorded: its frames are declined; run the purge again to remove what is left")
            }
            result.logs[origin] = logs[origin]
        }
        try FileIO.fsyncDirectory(logDir, op: op)
        for name in try FileIO.listDirectory(logDir, op: op) where name.hasPrefix(SharePurge.removingPrefix) {
            do { try FileManager.default.removeItem(atPath: logDir + "/" + name) } catch {
                throw LogError(.io, op, "cannot remove a purged log: \(error)", file: logDir + "/" + name,
                               hint: "it is out of the log already (nothing reads it); run the purge again to remove it")
            }
        }
        // The audit pages' index names frames of the dropped logs: it is derived, and made again.
        for suffix in [""] + StoreLayout.sqliteSidecarSuffixes where FileIO.exists(store.layout.audit + suffix) {
            try FileIO.remove(store.layout.audit + suffix, op: op)
        }
        return result
    }

    /// The logs of purged shares, as held through the seqs they reached (a receiver's position:
    /// a session moves past them instead of being offered them again).
    public func purgedLogs() throws -> [ReplicaID: Seq] {
        var out: [ReplicaID: Seq] = [:]
        for logs in try loadPurged().values { out.merge(logs) { max($0, $1) } }
        return out
    }

    /// The shares purged here (read once per appender: a purge runs through the appender
    /// holding the store's lock, which notes it).
    func loadPurged() throws -> [ShareID: [ReplicaID: Seq]] {
        if let known = purgedShares { return known }
        let found = try SharePurge.purged(store)
        purgedShares = found
        return found
    }
}

/// The share logs a store declined (docs/SHARING.md, "Partial replication"), kept across
/// sessions in `shares/DECLINED` so that a replica outside a share is not sent its logs again
/// at every session:
///
/// ```text
/// declined
/// <origin uuid> <share uuid> <last seq declined>
/// …
/// ```
///
/// Derived and advisory: written without a sync, and a file that does not parse is dropped
/// (read as nothing declined, so those logs are offered, and declined, once more). Only
/// members' sealed logs are kept: a membership log is what carries the record that adds this
/// replica, so it is offered again at every session (it is small), and a frame no one checked
/// the signature of can never stop a join beyond one session. An entry counts only while this
/// replica holds no key of its share and the store is no relay (checked at each use, so keys
/// learnt any way, a repaired key file included, bring the share's logs at the next pull);
/// written only by the store's own writer.
enum ShareDeclines {
    static let fileName = "DECLINED"
    static let firstLine = "declined"
    /// Entries kept at most (past this, the newest declines stay in memory only).
    static let entriesMax = 1 << 16

    static func path(_ store: Store) -> String { store.layout.shares + "/" + fileName }

    /// The declines in force: those of shares this replica holds no key of, in a store that is
    /// no relay.
    static func inForce(_ store: Store, _ entries: [ReplicaID: (share: ShareID, through: Seq)]) -> [ReplicaID: Seq] {
        // A relay takes everything; a store whose keys are about to be brought in step (a
        // membership log arrived by path) may be about to join a share: nothing is in force.
        guard !entries.isEmpty, !ShareDirectory.isRelay(store),
              !FileIO.exists(store.layout.shares + "/" + ShareDirectory.refreshMarker) else { return [:] }
        let keys = try? ShareKeyring.of(store)
        return entries.filter { keys?.newest($0.value.share) == nil }.mapValues(\.through)
    }

    static func read(_ store: Store) -> [ReplicaID: (share: ShareID, through: Seq)] {
        let file = path(store)
        guard FileIO.exists(file), let bytes = try? ForeignFile.read(file, bytesMax: 16 + entriesMax * 100, op: "read declined share logs"),
              let text = String(bytes: bytes, encoding: .utf8), text.hasSuffix("\n") else { return [:] }
        let lines = text.dropLast().split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.first == Substring(firstLine) else { return [:] }
        var out: [ReplicaID: (share: ShareID, through: Seq)] = [:]
        for line in lines.dropFirst() {
            let p = line.split(separator: " ", omittingEmptySubsequences: false)
            guard p.count == 3, let origin = ReplicaID(String(p[0])), origin.description == p[0], let share = ShareID(String(p[1])),
                  share.description == p[1], let seq = UInt64(p[2]), String(seq) == p[2] else { return [:] }
            out[origin] = (share, Seq(seq))
        }
        return out
    }

    static func write(_ store: Store, _ entries: [ReplicaID: (share: ShareID, through: Seq)]) {
        let file = path(store)
        guard !entries.isEmpty else {
            if FileIO.exists(file) { try? FileIO.remove(file, op: "forget declined share logs") }
            return
        }
        var text = firstLine + "\n"
        for (origin, e) in entries.sorted(by: { $0.key < $1.key }).prefix(entriesMax) { text += "\(origin) \(e.share) \(e.through.rawValue)\n" }
        try? FileIO.makeDirectory(store.layout.shares, op: "note declined share logs")
        try? FileIO.writeAtomically(Array(text.utf8), to: file, op: "note declined share logs", durable: false)
    }

    static func same(_ a: [ReplicaID: (share: ShareID, through: Seq)], _ b: [ReplicaID: (share: ShareID, through: Seq)]) -> Bool {
        a.count == b.count && a.allSatisfy { k, v in b[k].map { $0.share == v.share && $0.through == v.through } ?? false }
    }
}

extension ShareDirectory {
    /// The logs a receiver of `store` counts as held beyond what it holds: share logs it
    /// declined (kept across sessions) and those of purged shares, each through the last seq
    /// declined or dropped. A session asks for what follows them.
    public static func declinedOrPurgedLogs(_ store: Store) throws -> [ReplicaID: Seq] {
        try ShareDeclines.inForce(store, ShareDeclines.read(store)).merging(purgedLogs(store)) { max($0, $1) }
    }

    /// The sealed logs of the shares purged in `store`, each through the last seq it held.
    public static func purgedLogs(_ store: Store) throws -> [ReplicaID: Seq] {
        var out: [ReplicaID: Seq] = [:]
        for logs in try SharePurge.purged(store).values { out.merge(logs) { max($0, $1) } }
        return out
    }
}
