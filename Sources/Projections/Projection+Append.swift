import EventLog
import Foundation
import GRDB

extension Projection {
    /// Fills `base` of each mutation that has none with its entity's current version here (0 when
    /// this replica has not seen the entity), so the projection can tell a concurrent edit from a
    /// later one (DESIGN rule 5). Thread-safe (reads only).
    public func fillBases(_ mutations: inout [Mutation]) throws {
        let keys = mutations.filter { $0.base == nil }.map { ($0.entity, $0.entityID) }
        guard !keys.isEmpty else { return }
        let versions = try versions(keys)
        for i in mutations.indices where mutations[i].base == nil {
            mutations[i].base = versions[mutations[i].entityID] ?? HLC.zero
        }
    }
}

extension Projection {
    /// The scope of each entity among `keys` that this projection has a row of: nil for
    /// private data, else the share its row is made from (docs/PROJECTION.md, "Shares").
    /// An entity absent from the answer has no row here yet.
    func scopes(_ keys: [(Entity, UUID)]) throws -> [EntityRef: ShareID?] {
        var byTable: [String: (Entity, [String])] = [:]
        for (e, id) in keys {
            guard let t = schema.table(for: e) else { continue }
            byTable[t.name, default: (e, [])].1.append(id.lowercasedString)
        }
        return try reading { db in
            var out: [EntityRef: ShareID?] = [:]
            let held = try db.tableExists("projection_scopes")
            for (table, (entity, ids)) in byTable {
                for chunk in stride(from: 0, to: ids.count, by: 500) {
                    let part = Array(ids[chunk..<min(chunk + 500, ids.count)])
                    let marks = part.map { _ in "?" }.joined(separator: ",")
                    let sql = held
                        ? "SELECT t.id, s.share FROM \(table) t LEFT JOIN projection_scopes s ON s.tbl = ? AND s.id = t.id WHERE t.id IN (\(marks))"
                        : "SELECT id, NULL FROM \(table) WHERE id IN (\(marks))"
                    let arguments = held ? StatementArguments([table] + part) : StatementArguments(part)
                    for row in try Row.fetchAll(db, sql: sql, arguments: arguments) {
                        let id: String = try row.decode(atIndex: 0)
                        let share: String? = try row.decode(atIndex: 1)
                        guard let u = UUID(uuidString: id) else { continue }
                        // `.some`: a private row is an entry of nil (assigning nil would remove the key).
                        out[EntityRef(entity: entity, id: u)] = .some(share.flatMap(ShareID.init))
                    }
                }
            }
            return out
        }
    }

    /// The share whose row entity `id` is; nil when it is private data or has no row here.
    public func share(of entity: Entity, id: UUID) throws -> ShareID? {
        (try scopes([(entity, id)])[EntityRef(entity: entity, id: id)]) ?? nil
    }

    /// Refuses mutations written to a scope they do not belong to (docs/PROJECTION.md, "Shares"),
    /// naming the mutation (1-based), the entity and where it belongs; nothing is appended.
    ///
    /// - To this replica's own log (`share` nil): an entity whose row is a share's; for an
    ///   item tag, completion or recurrence exception (whose id derives from its item), one of an
    ///   item that is a share's. The projection would apply it, and the row would leave the
    ///   share on this user's replicas: a share's rows are written to the share.
    /// - To a share's log: an entity whose row is private data or another share's (the
    ///   projection would not apply it), or one naming (`item_id`, `parent_id`) an item that is.
    ///
    /// Entities with no row here yet may be written to any scope.
    public func checkScopes(_ mutations: [Mutation], share: ShareID?) throws {
        guard !mutations.isEmpty else { return }
        if share == nil {
            let any = try reading { db in
                try db.tableExists("projection_scopes") ? try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM projection_scopes)") ?? false : false
            }
            guard any else { return }
        }
        func item(_ m: Mutation, _ name: String) -> UUID? {
            guard case .text(let t)? = m.fields.first(where: { $0.name == name })?.value else { return nil }
            return UUID(uuidString: t)
        }
        let derived: Set<Entity> = [.itemTag, .completion, .recurrenceException]
        // Per mutation, the rows whose scope decides: its own, and the item it names.
        let checked: [[(Entity, UUID, named: String?)]] = mutations.map { m in
            let parent = item(m, "item_id").map { ($0, "item_id") } ?? (m.entity == .item ? item(m, "parent_id").map { ($0, "parent_id") } : nil)
            if share == nil {
                // A derived row of a private item stays private whatever else names its id
                // (private data comes first); of any other item, its own scope decides too.
                if derived.contains(m.entity), let (p, field) = parent { return [(.item, p, field), (m.entity, m.entityID, nil)] }
                return [(m.entity, m.entityID, nil)]
            }
            return [(m.entity, m.entityID, nil)] + (parent.map { [(.item, $0.0, $0.1)] } ?? [])
        }
        let found = try scopes(checked.flatMap { $0.map { ($0.0, $0.1) } })
        for (i, m) in mutations.enumerated() {
            if share == nil, checked[i].count == 2, case .some(.none) = found[EntityRef(entity: .item, id: checked[i][0].1)] { continue }
            for (entity, id, named) in checked[i] {
                guard let held = found[EntityRef(entity: entity, id: id)], held != share else { continue }
                let what = named.map { "\(m.entity.name) \(m.entityID.lowercasedString) names (\($0)) item \(id.lowercasedString), which" }
                    ?? "\(entity.name) \(id.lowercasedString)"
                switch (held, share) {
                case (let h?, nil):
                    throw ProjectionError.invalid("mutation \(i + 1): \(what) belongs to share \(h): append it to that share (`evctl share append \(h)`, `append(_:toShare:)`); nothing was appended")
                case (nil, let s?):
                    throw ProjectionError.invalid("mutation \(i + 1): \(what) is this replica's private data, not share \(s)'s: a share's rows are its own (to move an item, write it anew in the share and delete it here, docs/PROJECTION.md); nothing was appended")
                case (let h?, let s?):
                    throw ProjectionError.invalid("mutation \(i + 1): \(what) belongs to share \(h), not share \(s); nothing was appended")
                case (nil, nil):
                    continue
                }
            }
        }
    }
}

/// A store opened for writing with its projection: appends fill in `base`, and the projection
/// catches up after every append (in the same process, DESIGN "Projection").
///
/// Thread-safe: `append`, `receive` and `catchUp` take one lock; code that uses `appender` or
/// `projection` for writing directly runs inside `exclusive`.
public final class ProjectedStore: @unchecked Sendable {
    public let store: Store
    public let appender: LogAppender
    public let projection: Projection
    /// Whether appends and receives are projected at once (false: the projection is brought up
    /// to date later, e.g. by `evctl replay`).
    public let projects: Bool
    private let lock = Lock(recursive: true)

    /// Opens for writing (takes the lock, recovers the log) and brings the projection up to date,
    /// repairing the window between a log fsync and a projection commit that a crash may leave.
    /// With `project` false the projection is left as it is, now and after appends.
    public init(store: Store, wallClock: any WallClock = SystemWallClock(), options: AppendOptions = AppendOptions(),
                project: Bool = true, progress: ((Int, Int) -> Void)? = nil) throws {
        self.store = store
        projects = project
        appender = try LogAppender.opening(store, wallClock: wallClock, options: options)
        var p = try Projection(store: store)
        // The share scope rule's migration owes a rebuild of a filled projection: made now by
        // a store holding shares' frames, dropped by one that never held any (`settleOwedScopes`).
        if project { try p.settleOwedScopes() }
        // Events a newer build wrote that this build now understands (it was upgraded) were
        // applied in part, or skipped, by the build before: the projection is made again from the log.
        // So were the rows of a projection filled before a column was added (a new field).
        if project, try p.unreadEvents().contains(where: \.understoodNow) || !p.owedRebuild().isEmpty {
            try p.close()
            try Projection.rebuild(store: store, progress: progress)
            p = try Projection(store: store)
        }
        projection = p
        // The projection applies only committed events: if it has applied more of this
        // store's own log than the log now holds, committed frames were lost.
        if let applied = try projection.cursor()[store.replicaID] {
            appender.noteCommitted(ownThrough: applied, evidence: "the projection has applied it")
        }
        if project {
            try projection.catchUp(progress: progress)
            try projection.purgeByRetention()  // only with a retention set (off by default)
        }
    }


    /// Opens for writing like `init`, waiting up to `seconds` while another process holds the
    /// writer lock (a server between pushes, another `evctl` command).
    /// - Throws: the `LogError` that says the store is locked, once the wait is over.
    public static func open(store: Store, waitingUpTo seconds: Double, options: AppendOptions = AppendOptions(), project: Bool = true,
                            progress: ((Int, Int) -> Void)? = nil) throws -> ProjectedStore {
        try retryingWhileLocked(upTo: seconds) { try ProjectedStore(store: store, options: options, project: project, progress: progress) }
    }

    /// Runs `body` while no other thread writes through this store.
    public func exclusive<T>(_ body: () throws -> T) rethrows -> T {
        try lock.withLock(body)
    }

    /// Appends atomically, then projects the new events.
    public func append(_ mutations: [Mutation]) throws -> AppendResult {
        try exclusive {
            var ms = mutations
            try projection.checkScopes(ms, share: nil)
            try projection.fillBases(&ms)
            let r = try appender.append(ms)
            if projects { try projection.catchUp() }
            return r
        }
    }

    /// Appends frames received from another replica (`LogAppender.receive`); projected later by `catchUp`.
    public func receive(_ frames: [[UInt8]]) throws -> ReceiveResult {
        try exclusive { try appender.receive(frames) }
    }

    /// `receive` of frames this process built (a legacy import's origin): unsigned frames are
    /// taken even from a receiver that requires signatures of its peers.
    package func receive(_ frames: [[UInt8]], allowingUnsigned: Bool) throws -> ReceiveResult {
        try exclusive { try appender.receive(frames, allowingUnsigned: allowingUnsigned) }
    }

    /// Applies what the log holds past the projection's cursor.
    @discardableResult
    public func catchUp(progress: ((Int, Int) -> Void)? = nil) throws -> Int {
        try exclusive { try projection.catchUp(progress: progress) }
    }

    /// `Projection.catchUp(origins:)` under this store's lock.
    public func catchUp(origins: Set<ReplicaID>) throws -> Int {
        try exclusive { try projection.catchUp(origins: origins) }
    }

    public func close() throws {
        try exclusive {
            // The projection first, while the lock is held: its last connection's checkpoint
            // must not meet the next writer's open.
            var failure: (any Error)?
            do { try projection.close() } catch { failure = error }
            try appender.close()
            if let failure { throw failure }
        }
    }
}
