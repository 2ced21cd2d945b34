import Replicator
import EventLog
import Foundation
import GRDB

/// Which user owns each origin a served store holds (docs/SECURITY.md, "Per-user scopes"): the
/// user of the first scoped principal that pushed it. Kept in `origin_owners.sqlite` in the
/// store's directory, written and synced before the frames that claim an origin are appended, so
/// an acknowledged push never leaves its origin without an owner. Origins nobody claimed (the
/// store's own, those pushed by unscoped principals) have none and are read only by unscoped
/// principals. Safe to use from any thread.
public final class OriginOwners: @unchecked Sendable {
    public static let fileName = StoreLayout.Entry.originOwners.rawValue
    private let path: String
    private let lock = Lock()
    private var owners: [ReplicaID: String] = [:]
    /// `owners` by user, kept beside it.
    private var byUser: [String: Set<ReplicaID>] = [:]
    private var queue: DatabaseQueue?

    /// Reads the owners `store` keeps (none when the file does not exist yet).
    /// - Throws: `ServerError` naming the file when it cannot be read or holds what no server wrote.
    public init(store: Store) throws {
        path = store.layout.originOwners
        guard FileManager.default.fileExists(atPath: path) else { return }
        let q = try open()
        do {
            let path = self.path
            owners = try q.read { db in try Self.rows(db, path: path) }
            for (o, u) in owners { byUser[u, default: []].insert(o) }
        } catch let e as ServerError {
            throw e
        } catch {
            throw ServerError("\(path): cannot read the origins' owners: \(error)")
        }
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
                      origin TEXT PRIMARY KEY NOT NULL, user TEXT NOT NULL, principal TEXT NOT NULL, claimed_at TEXT NOT NULL
                    ) STRICT
                    """)
            }
        } catch {
            throw ServerError("\(path): cannot open the origins' owners: \(error)")
        }
        queue = q
        return q
    }

    /// Every owned origin of `store`, read without writing anything (read-only, nothing created):
    /// what the pages show beside actor-less events, also on a full disk or a read-only mount.
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
            return try q.read { db in try db.tableExists("owners") ? try rows(db, path: path) : [:] }
        } catch let e as ServerError {
            throw e
        } catch {
            throw ServerError("\(path): cannot read the origins' owners: \(error)")
        }
    }

    static func rows(_ db: Database, path: String) throws -> [ReplicaID: String] {
        var out: [ReplicaID: String] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT origin, user FROM owners") {
            guard let text = row[0] as String?, let origin = ReplicaID(text), origin.description == text,
                  let user = row[1] as String?, AccessPolicy.isValidUser(user) else {
                throw ServerError("\(path): a row of owners is not an origin and a user name (\(String(describing: row).prefix(120)))")
            }
            out[origin] = user
        }
        return out
    }

    /// The user who owns `origin`, if any.
    public func owner(of origin: ReplicaID) -> String? { lock.withLock { owners[origin] } }

    /// The origins `users` own (what a scoped principal may read), found without looking at
    /// any other origin.
    public func origins(of users: Set<String>) -> Set<ReplicaID> {
        lock.withLock {
            if users.count == 1, let u = users.first { return byUser[u] ?? [] }
            return users.reduce(into: Set<ReplicaID>()) { $0.formUnion(byUser[$1] ?? []) }
        }
    }

    /// Every owned origin and its user.
    public var all: [ReplicaID: String] { lock.withLock { owners } }

    /// What a claim did: the first origin another user owns (nothing was claimed then), or the
    /// origins this claim made `user`'s (to `release` if the push that claimed them is refused).
    public struct Claim: Sendable, Equatable {
        public var taken: ReplicaID?
        public var new: [ReplicaID]
    }

    /// Makes `user` the owner of every origin in `origins` that has none, durably, and returns
    /// the first origin another user owns (nothing is claimed then), or the origins it claimed.
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
            guard !planned.isEmpty else { return claims }
            let q = try open()
            let now = ISOTime.string(millis: UInt64(max(0, Date().timeIntervalSince1970 * 1000)))
            do {
                try q.write { db in
                    let insert = try db.cachedStatement(sql: "INSERT INTO owners (origin, user, principal, claimed_at) VALUES (?, ?, ?, ?)")
                    for (r, c) in zip(requests, claims) {
                        for o in c.new { try insert.execute(arguments: [o.description, r.user, r.principal, now]) }
                    }
                }
            } catch {
                let first = claims.first { !$0.new.isEmpty }?.new[0]
                throw ServerError("\(path): cannot record who owns origin \(first.map { "\($0)" } ?? "?"): \(error)")
            }
            for (o, u) in planned {
                owners[o] = u
                byUser[u, default: []].insert(o)
            }
            return claims
        }
    }

    /// Takes back what a claim of `user` made (its push was refused: a refusal changes nothing).
    public func release(_ claim: Claim, user: String) throws {
        guard !claim.new.isEmpty else { return }
        try lock.withLock {
            let q = try open()
            do {
                try q.write { db in
                    for o in claim.new {
                        try db.execute(sql: "DELETE FROM owners WHERE origin = ? AND user = ?", arguments: [o.description, user])
                    }
                }
            } catch {
                throw ServerError("\(path): cannot take back the claim of origin \(claim.new[0]): \(error)")
            }
            for o in claim.new where owners[o] == user {
                owners[o] = nil
                byUser[user]?.remove(o)
            }
        }
    }
}
