import Replicator
import EventLog
import Foundation
import GRDB

/// Which user owns each origin a served store holds (docs/SECURITY.md, "Per-user scopes"): the
/// user of the first scoped principal that pushed it. Kept in `origin_owners.sqlite` in the
/// store's directory. Origins nobody claimed (the store's own, those pushed by unscoped
/// principals) have none and are read only by unscoped principals. Its readers are safe to use
/// from any thread; what writes the record (`claim`, `confirm`, `release`, `releaseAbandoned`)
/// is called from one queue at a time, holding the store's writer lock (the server's `writes`).
///
/// Owning is made in two steps, each synced. A push first *claims* its new origins, before its
/// frames are written, so two users pushing one new origin cannot both get it; a claim opens
/// nothing: it only keeps other users from claiming the origin. Once the push's frames are
/// durable, its claims are *confirmed*, and only then does the user read the origin (`owner(of:)`,
/// `origins(of:)`, `all`). A claim left unconfirmed (the server stopped between the two steps, or
/// the claim of a refused push could not be taken back) never becomes a right to read: it is
/// taken back once the store holds nothing of its origin (`releaseAbandoned`), and confirmed only
/// by a later push of its claimant that makes the origin's log grow or sends the frame at its
/// held tip byte for byte (either needs the log's chain).
public final class OriginOwners: @unchecked Sendable {
    public static let fileName = StoreLayout.Entry.originOwners.rawValue
    private let path: String
    private let lock = Lock()
    /// Every claim, confirmed or not: what keeps other users from claiming an origin.
    private var owners: [ReplicaID: String] = [:]
    /// The confirmed claims by user, kept beside `owners`: what users read.
    private var byUser: [String: Set<ReplicaID>] = [:]
    /// The claims not confirmed yet (also in `owners`, not in `byUser`).
    private var unconfirmed: Set<ReplicaID> = []
    /// See `scopeVersion`.
    private var version: UInt64 = 0
    private var queue: DatabaseQueue?
    /// Why the file has no `confirmed` column (a file of the first version that could not be
    /// given one: read-only, or a full disk): it is read as before, and claims are refused.
    private var unversioned: (any Error)?

    /// Reads the owners `store` keeps (none when the file does not exist yet).
    /// - Throws: `ServerError` naming the file when it cannot be read or holds what no server wrote.
    public init(store: Store) throws {
        path = store.layout.originOwners
        guard FileManager.default.fileExists(atPath: path) else { return }
        adopt(try Self.readClaims(try open(), path: path))
    }

    private func open() throws -> DatabaseQueue {
        if let q = queue { return q }
        var c = SQLiteFactory.configuration(.ours)
        // The pages read this file (`read(store:)`) while pushes claim origins in it: a lock
        // another connection holds is waited for, as `read` waits, not an error.
        c.busyMode = .timeout(5)
        c.prepareDatabase { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        let q: DatabaseQueue
        do {
            q = try SQLiteFactory.queue(path, .ours, c)
            try q.write { db in
                try db.execute(sql: """
                    CREATE TABLE IF NOT EXISTS owners (
                      origin TEXT PRIMARY KEY NOT NULL, user TEXT NOT NULL, principal TEXT NOT NULL, claimed_at TEXT NOT NULL,
                      confirmed INTEGER NOT NULL DEFAULT 1 CHECK (confirmed IN (0, 1))
                    ) STRICT
                    """)
            }
        } catch {
            throw ServerError("\(path): cannot open the origins' owners: \(error)")
        }
        // `confirmed` came with the file's second version; rows written before it are owners
        // (their pushes' frames were written after them, as they are now). A file that cannot be
        // given the column is still read (pages and pulls go on); claims are refused.
        do {
            try q.write { db in
                if try !Self.isVersioned(db) {
                    try db.execute(sql: "ALTER TABLE owners ADD COLUMN confirmed INTEGER NOT NULL DEFAULT 1 CHECK (confirmed IN (0, 1))")
                }
                try db.execute(sql: "CREATE INDEX IF NOT EXISTS owners_unconfirmed ON owners (origin) WHERE confirmed = 0")
            }
        } catch {
            // Another process may have added it meanwhile.
            if (try? q.read(Self.isVersioned)) != true { unversioned = error }
        }
        queue = q
        return q
    }

    /// Every owned origin of `store` (confirmed claims only), read without writing anything
    /// (read-only, nothing created): what the pages show beside actor-less events, also on a full
    /// disk or a read-only mount.
    /// - Throws: `ServerError` naming the file when it cannot be read or holds a bad row.
    public static func read(store: Store) throws -> [ReplicaID: String] {
        let path = store.layout.originOwners
        guard FileManager.default.fileExists(atPath: path) else { return [:] }
        do {
            var c = SQLiteFactory.configuration(.ours)
            c.readonly = true
            c.busyMode = .timeout(5)
            let q = try SQLiteFactory.queue(path, .ours, c)
            defer { try? q.close() }
            return try q.read { db in
                guard try db.tableExists("owners") else { return [:] }
                var out: [ReplicaID: String] = [:]
                for r in try claims(db, path: path) where r.confirmed { out[r.origin] = r.user }
                return out
            }
        } catch let e as ServerError {
            throw e
        } catch {
            throw ServerError("\(path): cannot read the origins' owners: \(error)")
        }
    }

    /// One row of the file: a claim, and whether it is confirmed.
    struct Entry: Equatable {
        var origin: ReplicaID
        var user: String
        var confirmed: Bool
    }

    /// `claims(_:path:unconfirmedOnly:origins:)` read through `q`; any other failure is named as
    /// the file's.
    static func readClaims(_ q: DatabaseQueue, path: String, unconfirmedOnly: Bool = false, origins: [ReplicaID]? = nil) throws -> [Entry] {
        do {
            return try q.read { db in try claims(db, path: path, unconfirmedOnly: unconfirmedOnly, origins: origins) }
        } catch let e as ServerError {
            throw e
        } catch {
            throw ServerError("\(path): cannot read the origins' owners: \(error)")
        }
    }

    /// Whether the file's table has the `confirmed` column.
    static func isVersioned(_ db: Database) throws -> Bool {
        try db.columns(in: "owners").contains { $0.name == "confirmed" }
    }

    /// Every row of the file (or those of `origins`, or those unconfirmed), checked: values of
    /// the wrong type, a bad origin or user name, or an origin on two rows (a file on a shared
    /// path may hold anything) are reported, never read as owners. A file of the first version,
    /// without `confirmed`, holds confirmed claims only.
    static func claims(_ db: Database, path: String, unconfirmedOnly: Bool = false, origins: [ReplicaID]? = nil) throws -> [Entry] {
        let versioned = try isVersioned(db)
        guard versioned || !unconfirmedOnly else { return [] }
        var sql = "SELECT origin, user, \(versioned ? "confirmed" : "1") FROM owners"
        if unconfirmedOnly { sql += " WHERE confirmed = 0" }
        var rows: [Row] = []
        if let origins {
            let statement = try db.makeStatement(sql: sql + (unconfirmedOnly ? " AND" : " WHERE") + " origin = ?")
            for o in origins { rows += try Row.fetchAll(statement, arguments: [o.description]) }
        } else {
            rows = try Row.fetchAll(db, sql: sql)
        }
        var out: [Entry] = [], seen = Set<ReplicaID>()
        for row in rows {
            // Read as database values: a typed read of a value of another type traps.
            let values: [DatabaseValue] = [row[0], row[1], row[2]]
            guard let text = String.fromDatabaseValue(values[0]), let origin = ReplicaID(text), origin.description == text,
                  let user = String.fromDatabaseValue(values[1]), AccessPolicy.isValidUser(user),
                  case .int64(let confirmed) = values[2].storage, confirmed == 0 || confirmed == 1 else {
                throw ServerError("\(path): a row of owners is not an origin, a user name and whether it is confirmed (\(String(describing: row).prefix(120)))")
            }
            guard seen.insert(origin).inserted else {
                throw ServerError("\(path): origin \(origin) is on two rows of owners (no server writes that)")
            }
            out.append(Entry(origin: origin, user: user, confirmed: confirmed == 1))
        }
        return out
    }

    /// The user who owns `origin` (a confirmed claim: what opens the origin to the user), if any.
    public func owner(of origin: ReplicaID) -> String? {
        lock.withLock { unconfirmed.contains(origin) ? nil : owners[origin] }
    }

    /// The user who holds a claim of `origin`, confirmed or not (what keeps other users from
    /// pushing it), if any.
    public func claimant(of origin: ReplicaID) -> String? { lock.withLock { owners[origin] } }

    /// Whether `origin`'s claim is not confirmed yet.
    public func isUnconfirmed(_ origin: ReplicaID) -> Bool { lock.withLock { unconfirmed.contains(origin) } }

    /// The origins `users` own (what a scoped principal may read: confirmed claims), found
    /// without looking at any other origin.
    public func origins(of users: Set<String>) -> Set<ReplicaID> {
        lock.withLock {
            if users.count == 1, let u = users.first { return byUser[u] ?? [] }
            return users.reduce(into: Set<ReplicaID>()) { $0.formUnion(byUser[$1] ?? []) }
        }
    }

    /// Every owned origin and its user (confirmed claims).
    public var all: [ReplicaID: String] { lock.withLock { owners.filter { !unconfirmed.contains($0.key) } } }

    /// Every claim not confirmed yet, and its user.
    public var unconfirmedClaims: [ReplicaID: String] { lock.withLock { owners.filter { unconfirmed.contains($0.key) } } }

    /// What a claim did: the first origin another user owns (nothing was claimed then), or the
    /// origins this claim made `user`'s (to `release` if the push that claimed them is refused).
    public struct Claim: Sendable, Equatable {
        public var taken: ReplicaID?
        public var new: [ReplicaID]
    }

    /// Claims for `user`, durably, every origin in `origins` that nobody has claimed, and returns
    /// the first origin another user holds a claim of (nothing is claimed then), or the origins it
    /// claimed. The claims are unconfirmed: `confirm` them once their frames are durable.
    public func claim(_ origins: some Sequence<ReplicaID>, user: String, principal: String) throws -> Claim {
        try claim([ClaimRequest(origins: Array(origins), user: user, principal: principal)])[0]
    }

    /// One claim of `claim(_:)`'s batch.
    public struct ClaimRequest: Sendable {
        public var origins: [ReplicaID]
        public var user: String
        public var principal: String
        public init(origins: [ReplicaID], user: String, principal: String) {
            self.origins = origins
            self.user = user
            self.principal = principal
        }
    }

    /// Claims as `claim(_:user:principal:)` does for each request in turn (a request sees what
    /// those before it claimed), in one durable transaction for all: a group of pushes claiming
    /// new origins waits for one sync, not one each.
    /// - Returns: per request, what its claim did.
    /// - Throws: `ServerError` when the claims cannot be recorded: then none is.
    public func claim(_ requests: [ClaimRequest]) throws -> [Claim] {
        try lock.withLock {
            // Planned from what this process knows; a row another serving process wrote meanwhile
            // (met as a conflict) is taken in, and the claims planned again without it.
            while true {
                let (claims, planned) = plan(requests)
                guard !planned.isEmpty else { return claims }
                let found = try record(requests, claims)
                guard !found.isEmpty else {
                    for (o, u) in planned {
                        owners[o] = u
                        unconfirmed.insert(o)
                    }
                    return claims
                }
                adopt(found)
            }
        }
    }

    /// Reads the rows of `origins` from the file again and takes them as this process's record
    /// (another serving process on the store may have written them): a writer's check before it
    /// refuses an origin as claimed by nobody.
    public func reload(_ origins: [ReplicaID]) throws {
        guard !origins.isEmpty, FileManager.default.fileExists(atPath: path) else { return }
        try lock.withLock { adopt(try Self.readClaims(try open(), path: path, origins: origins)) }
    }

    /// Changes whenever a confirmed claim may have changed (what `owner(of:)` and `origins(of:)`
    /// answer): users' scopes are read again only then.
    public var scopeVersion: UInt64 { lock.withLock { version } }

    /// Rows of the file taken as this process's own record of them.
    private func adopt(_ rows: [Entry]) {
        if !rows.isEmpty { version &+= 1 }
        for r in rows {
            if let u = owners[r.origin] { byUser[u]?.remove(r.origin) }
            owners[r.origin] = r.user
            if r.confirmed {
                unconfirmed.remove(r.origin)
                byUser[r.user, default: []].insert(r.origin)
            } else {
                unconfirmed.insert(r.origin)
            }
        }
    }

    private struct Conflict: Error {}

    /// Writes the new claims of `claims` (synced), or, when a row of one of their origins is in
    /// the file already, nothing: then returns those rows.
    private func record(_ requests: [ClaimRequest], _ claims: [Claim]) throws -> [Entry] {
        let q = try open()
        if let unversioned {
            throw ServerError("\(path): cannot claim origins: the file is of the first version and cannot be given its `confirmed` column: \(unversioned)")
        }
        let now = ISOTime.string(millis: UInt64(max(0, Date().timeIntervalSince1970 * 1000)))
        let path = self.path
        var found: [Entry] = []
        do {
            try q.write { db in
                found = []
                let insert = try db.cachedStatement(sql: "INSERT INTO owners (origin, user, principal, claimed_at, confirmed) VALUES (?, ?, ?, ?, 0) ON CONFLICT (origin) DO NOTHING")
                for (r, c) in zip(requests, claims) {
                    for o in c.new {
                        try insert.execute(arguments: [o.description, r.user, r.principal, now])
                        if db.changesCount == 0 { found += try Self.claims(db, path: path, origins: [o]) }
                    }
                }
                if !found.isEmpty { throw Conflict() }  // rolled back
            }
        } catch is Conflict {
            return found
        } catch let e as ServerError {
            throw e
        } catch {
            let first = claims.first { !$0.new.isEmpty }?.new[0]
            throw ServerError("\(path): cannot record who owns origin \(first.map { "\($0)" } ?? "?"): \(error)")
        }
        return []
    }

    /// What `claim(_:)` would do by what this process knows: per request, its claim, and every
    /// origin to claim with its user.
    private func plan(_ requests: [ClaimRequest]) -> ([Claim], [ReplicaID: String]) {
            var planned: [ReplicaID: String] = [:]
            var claims: [Claim] = []
            for r in requests {
                var new: [ReplicaID] = [], seen = Set<ReplicaID>()
                var taken: ReplicaID?
                for o in r.origins {
                    switch owners[o] ?? planned[o] {
                    case nil: if seen.insert(o).inserted { new.append(o) }
                    case r.user?: continue
                    default: taken = o
                    }
                    if taken != nil { break }
                }
                if let taken {
                    claims.append(Claim(taken: taken, new: []))
                    continue
                }
                for o in new { planned[o] = r.user }
                claims.append(Claim(taken: nil, new: new))
            }
            return (claims, planned)
    }

    /// Takes back what a claim of `user` made (its push was refused: a refusal changes nothing).
    /// A confirmed claim is never taken back.
    public func release(_ claim: Claim, user: String) throws {
        guard !claim.new.isEmpty else { return }
        try lock.withLock {
            try forget(claim.new.map { ($0, user) }, doing: "take back the claim of origin \(claim.new[0])")
        }
    }

    /// Deletes the unconfirmed claims `claims` (origin and user), in the file and here. Call with
    /// `lock` held.
    private func forget(_ claims: [(ReplicaID, String)], doing what: String) throws {
        let q = try open()
        do {
            try q.write { db in
                let delete = try db.cachedStatement(sql: "DELETE FROM owners WHERE origin = ? AND user = ? AND confirmed = 0")
                for (o, u) in claims { try delete.execute(arguments: [o.description, u]) }
            }
        } catch {
            throw ServerError("\(path): cannot \(what): \(error)")
        }
        for (o, u) in claims where owners[o] == u && unconfirmed.contains(o) {
            owners[o] = nil
            unconfirmed.remove(o)
        }
    }

    /// Confirms `user`'s unconfirmed claims of `origins` (others are left as they are), durably:
    /// call, holding the store's writer lock, once frames of theirs pushed by `user` are durable
    /// and have made their logs grow (or are the logs' held tips).
    /// - Returns: the origins confirmed.
    /// - Throws: `ServerError` naming the file when it cannot be written: then none is confirmed.
    @discardableResult
    public func confirm(_ origins: some Sequence<ReplicaID>, user: String, principal: String = "") throws -> [ReplicaID] {
        try confirm([ConfirmRequest(user: user, principal: principal, origins: Array(origins))])
    }

    /// One confirmation of `confirm(_:)`'s batch.
    public struct ConfirmRequest: Sendable {
        public var user: String
        public var principal: String
        public var origins: [ReplicaID]
        public init(user: String, principal: String, origins: [ReplicaID]) {
            self.user = user
            self.principal = principal
            self.origins = origins
        }
    }

    /// `confirm(_:user:principal:)` for several users at once, in one synced transaction. A claim
    /// whose row is gone from the file (taken back by another serving process while this one
    /// still held it) is written again, confirmed, when no other user's row took its place;
    /// else it is forgotten here and not confirmed.
    @discardableResult
    public func confirm(_ requests: [ConfirmRequest]) throws -> [ReplicaID] {
        try lock.withLock {
            var mine: [(ReplicaID, ConfirmRequest)] = [], seen = Set<ReplicaID>()
            for r in requests {
                for o in r.origins where unconfirmed.contains(o) && owners[o] == r.user && seen.insert(o).inserted { mine.append((o, r)) }
            }
            guard !mine.isEmpty else { return [] }
            let q = try open()
            let now = ISOTime.string(millis: UInt64(max(0, Date().timeIntervalSince1970 * 1000)))
            let path = self.path
            var winners: [ReplicaID: Entry] = [:]
            do {
                try q.write { db in
                    winners = [:]
                    let update = try db.cachedStatement(sql: "UPDATE owners SET confirmed = 1 WHERE origin = ? AND user = ? AND confirmed = 0")
                    let insert = try db.cachedStatement(sql: "INSERT INTO owners (origin, user, principal, claimed_at, confirmed) VALUES (?, ?, ?, ?, 1) ON CONFLICT (origin) DO NOTHING")
                    for (o, r) in mine {
                        try update.execute(arguments: [o.description, r.user])
                        guard db.changesCount == 0 else { continue }
                        try insert.execute(arguments: [o.description, r.user, r.principal, now])
                        guard db.changesCount == 0 else { continue }
                        // The row is there but was not this unconfirmed claim: confirmed already
                        // (by another serving process), or another user's.
                        if let w = try Self.claims(db, path: path, origins: [o]).first, w.user != r.user || !w.confirmed { winners[o] = w }
                    }
                }
            } catch let e as ServerError {
                throw e
            } catch {
                throw ServerError("\(path): cannot record that user \"\(mine[0].1.user)\" owns origin \(mine[0].0): \(error)")
            }
            var done: [ReplicaID] = []
            for (o, r) in mine where winners[o] == nil {
                unconfirmed.remove(o)
                byUser[r.user, default: []].insert(o)
                done.append(o)
            }
            if !done.isEmpty { version &+= 1 }
            adopt(Array(winners.values))
            return done
        }
    }

    /// Takes back every unconfirmed claim whose origin the store holds nothing of (`holds` false):
    /// the claims of pushes that never wrote their frames (the server stopped between the claim
    /// and the frames, or the claim of a refused push could not be taken back). Reads the file,
    /// so claims another serving process left are found too, and brings what this one holds of
    /// unconfirmed claims in step with it. Call holding the store's writer lock, under which
    /// claims are made and their frames written, so that no claim still on its way to its frames
    /// is taken (`holds` must count frames of an append still open as held). An unconfirmed claim
    /// whose origin holds frames is kept unconfirmed. `holds` is asked without the lock that
    /// readers of this record take.
    /// - Returns: the claims taken back.
    /// - Throws: `ServerError` naming the file when it cannot be read or written.
    @discardableResult
    public func releaseAbandoned(holds: (ReplicaID) throws -> Bool) throws -> [ReplicaID: String] {
        guard FileManager.default.fileExists(atPath: path) else { return [:] }
        let q = try lock.withLock { try open() }
        let found = try Self.readClaims(q, path: path, unconfirmedOnly: true)
        let inFile = Set(found.map(\.origin))
        let stale = lock.withLock { unconfirmed.filter { !inFile.contains($0) } }
        let known = stale.isEmpty ? [] : try Self.readClaims(q, path: path, origins: Array(stale))
        lock.withLock {
            // Claims this process holds unconfirmed that the file no longer does: confirmed or
            // taken back by another serving process.
            for o in stale {
                unconfirmed.remove(o)
                owners[o] = nil
            }
            adopt(known)
            // And the file's unconfirmed claims as they stand (another process's among them):
            // they keep other users off too.
            adopt(found.filter { owners[$0.origin] != $0.user || !unconfirmed.contains($0.origin) })
        }
        var abandoned: [(ReplicaID, String)] = []
        for r in found where try !holds(r.origin) { abandoned.append((r.origin, r.user)) }
        guard !abandoned.isEmpty else { return [:] }
        try lock.withLock { try forget(abandoned, doing: "take back the abandoned claim of origin \(abandoned[0].0)") }
        return Dictionary(abandoned, uniquingKeysWith: { a, _ in a })
    }
}
