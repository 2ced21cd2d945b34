import Domain
import EventLog
import Foundation
import GRDB
import GRDBSQLite

/// Applies events to the projection tables under the merge rules of DESIGN.md:
/// field-level last-writer-wins by (hlc, origin, seq); delete and restore as a last-writer-wins
/// lifecycle that later edits of other fields do not change; created_at from the earliest
/// create; orphans kept. Order of arrival and duplicates do not change the result.
///
/// Events accumulate in memory (bounded by `flushRowsMax`) and are written, with the
/// projection cursor, in one transaction by `flush`. Not thread-safe: used inside one write.
///
/// The state every event touches is marked `@exclusivity(unchecked)`: one thread uses a
/// Projector, and no access to it overlaps another (the compiler still checks what it can see);
/// the run-time check of each access was a tenth of merging.
final class Projector {
    let schema: ProjectionSchema
    /// In a fresh rebuild no row exists until the first flush: rows are not looked up before it.
    @exclusivity(unchecked) private(set) var fresh: Bool
    /// Dirty rows kept in memory before a flush is due (a rebuild keeps more: it never reads back).
    static let flushRowsMax = 200_000
    static let rebuildRowsMax = 1_000_000
    /// What a projected append's fill keeps of the batches it has merged, to free them all once
    /// its rows are written (`FreeAside.Retirer`), in bytes held (`PreparedBatch.heldBytes`);
    /// past it, batches are freed as they are merged, whatever the lines hold.
    static let keptBytesMax = 256 << 20
    /// Rows written by a flush are freed on another thread from this many on.
    static let freeAsideRows = 50_000
    /// Set by a bulk fill: the rows a flush writes are kept here, to be freed once the fill has
    /// committed. Freed beside the index build, their millions of small blocks went back to this
    /// thread's malloc arena while SQLite allocated from it: a quarter of the build was malloc's
    /// locks and consolidation.
    var keepWritten: FreeAside.Later<RowTable>?

    struct Key: Hashable {
        var table: Int
        var id: UUID

        // Every bit goes into the (seeded) hasher: ids come from peers, and folding them first (the
        // two halves XORed) let crafted ids share one hash whatever the seed, a quadratic
        // dictionary (RuleTests.rowKeysCraftedToCollideDoNotShareAHash). Two words and the table.
        func hash(into h: inout Hasher) {
            let words = withUnsafeBytes(of: id.uuid) { ($0.loadUnaligned(fromByteOffset: 0, as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
            h.combine(words.0)
            h.combine(words.1)
            h.combine(table)
        }

        static func == (a: Key, b: Key) -> Bool {
            a.table == b.table && withUnsafeBytes(of: a.id.uuid) { x in withUnsafeBytes(of: b.id.uuid) { y in
                x.loadUnaligned(fromByteOffset: 0, as: UInt64.self) == y.loadUnaligned(fromByteOffset: 0, as: UInt64.self)
                    && x.loadUnaligned(fromByteOffset: 8, as: UInt64.self) == y.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
            } }
        }
    }

    /// Where each field of an event goes (constants, shared with a rebuild's reading thread).
    let layout: FieldLayout
    /// Fields of the event being applied (`apply(_:db:)`), reused from one event to the next.
    private var scratch: [PreparedField] = []
    @exclusivity(unchecked) private var lastOrigin: (ReplicaID, Int)?
    private(set) var origins: [ReplicaID] = []
    private var originIndex: [ReplicaID: Int] = [:]
    private var originKeys: [(UInt64, UInt64)] = []
    private var newOrigins: [Int] = []
    @exclusivity(unchecked) private(set) var rows = RowTable()
    /// The projection cursor as last written (origins never applied here are absent).
    private var cursor: [ReplicaID: Seq] = [:]
    /// Per origin index: the last seq applied, and whether it moved since the last flush (kept in
    /// arrays so an event costs no hashing of its origin).
    @exclusivity(unchecked) private var appliedSeq: [UInt64] = []
    @exclusivity(unchecked) private var cursorMoved: [Bool] = []
    @exclusivity(unchecked) private var conflicts: [ConflictRecord] = []
    @exclusivity(unchecked) private var resolutions: [(Key, Int, UInt64, String)] = []
    private var occurrenceChecks = Set<Key>()
    @exclusivity(unchecked) private(set) var openConflicts = 0
    /// Events this build did not understand entirely, since the last flush.
    struct UnreadKey: Hashable { var entity: UInt8, op: UInt8, version: UInt8 }
    /// Which event holds a writer-supplied event id: the first in merge order of those carrying it.
    struct IDHolder {
        var origin: ReplicaID
        var seq: UInt64
        var hlc: UInt64
        var digest: UInt64
        var entity: Entity
        var entityID: UUID
        var op: Op
    }
    /// Every event carrying a writer-supplied id touched since the last flush (with those the
    /// file already held), and whether it was loaded from the file.
    private var carriers: [UUID: (list: [IDHolder], stored: Int)] = [:]
    private var unread: [UnreadKey: Int] = [:]
    @exclusivity(unchecked) private(set) var eventsApplied = 0
    /// Runs of consecutive new seqs of one origin, in the order applied: the commit journal's rows.
    @exclusivity(unchecked) private var runs: [(origin: Int, first: UInt64, last: UInt64)] = []
    /// Rows the commit journal keeps (older ones are pruned now and then).
    static let journalRowsMax: Int64 = 100_000

    // MARK: Scopes (docs/PROJECTION.md, "Shares")

    /// What an origin's log is (a share's sealed log, its membership log, private data; nil for
    /// a log with no frame yet, taken as private); nil when the caller has no store (every
    /// origin private). Asked once per origin per projector.
    var scopeOf: ((ReplicaID) throws -> ShareDirectory.LogScope?)?
    /// A row no event has made yet.
    static let noScope: Int32 = .min
    /// A row made of private events (of logs that are no share's).
    static let privateScope: Int32 = -1
    /// An origin whose scope was not looked up yet.
    private static let unknownScope: Int32 = -2
    /// A share's membership log: only its membership records are read (by `ShareDirectory`),
    /// and any other event in it is applied to nothing.
    private static let membershipScope: Int32 = -3
    /// Per origin index, its scope.
    @exclusivity(unchecked) private var originScope: [Int32] = []
    /// The shares met, by scope index, with their sort keys (scopes are ordered by share id).
    private var scopeShares: [ShareID] = []
    private var scopeKeys: [(UInt64, UInt64)] = []
    private var scopeIndex: [ShareID: Int32] = [:]
    /// Whether any row may be a share's: some origin is a share's log, or the file holds scopes.
    /// Until then rows are private and no scope is looked at (a store without shares pays nothing).
    @exclusivity(unchecked) private var scopesActive = false
    /// Whether `projection_scopes` may hold rows (loads read it only then).
    private var scopesHeld = false
    /// Rows whose scope changed since the last flush.
    private var scopeWrites: [Key: Int32] = [:]
    /// Events not applied because their entity belongs to another scope, since the last flush.
    private var outside: [(key: Key, event: String, op: Op, hlc: UInt64, details: String)] = []

    init(schema: ProjectionSchema, db: Database, fresh: Bool) throws {
        self.schema = schema
        self.fresh = fresh
        layout = FieldLayout(schema: schema)
        for row in try Row.fetchAll(db, sql: "SELECT origin, last_seq FROM projection_cursor") {
            let text: String = try row.decode(atIndex: 0)
            let seq: Int64 = try row.decode(atIndex: 1)
            guard seq >= 0 else { throw ProjectionError.database("projection_cursor holds seq \(seq); run `evctl replay --rebuild`") }
            if let o = ReplicaID(text) { cursor[o] = Seq(UInt64(seq)) }
        }
        for row in try Row.fetchAll(db, sql: "SELECT idx, origin FROM projection_origins ORDER BY idx") {
            let idx: Int = try row.decode(atIndex: 0)
            let text: String = try row.decode(atIndex: 1)
            guard idx == origins.count, let o = ReplicaID(text) else { throw ProjectionError.database("projection_origins is not dense") }
            addOrigin(o)
        }
        openConflicts = try Int.fetchOne(db, sql: "SELECT count(*) FROM conflicts WHERE resolved_by IS NULL") ?? 0
        newOrigins = []
        if !fresh, try db.tableExists("projection_scopes") {
            scopesHeld = try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM projection_scopes)") ?? false
            scopesActive = scopesHeld
        }
    }

    @discardableResult
    private func addOrigin(_ o: ReplicaID) -> Int {
        if let i = originIndex[o] { return i }
        let i = origins.count
        origins.append(o)
        originIndex[o] = i
        originKeys.append(Self.sortKey(o))
        appliedSeq.append(cursor[o]?.rawValue ?? 0)
        cursorMoved.append(false)
        originScope.append(Self.unknownScope)
        newOrigins.append(i)
        return i
    }

    /// Byte order of a UUID, which is also the order of its lowercase text.
    @inline(__always)
    static func sortKey(_ u: UUID) -> (UInt64, UInt64) {
        withUnsafeBytes(of: u.uuid) { p in
            (UInt64(bigEndian: p.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
             UInt64(bigEndian: p.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
        }
    }

    static func sortKey(_ o: ReplicaID) -> (UInt64, UInt64) { sortKey(o.rawValue) }

    /// True when `a` comes after `b` in the conflict order.
    @inline(__always)
    func after(_ a: Stamp, _ b: Stamp) -> Bool {
        if a.hlc != b.hlc { return a.hlc > b.hlc }
        if a.origin != b.origin {
            let ka = originKeys[a.origin], kb = originKeys[b.origin]
            return ka.0 != kb.0 ? ka.0 > kb.0 : ka.1 > kb.1
        }
        return a.seq > b.seq
    }

    func eventID(_ s: Stamp) -> UUID {
        s.explicitID ?? Event.derivedEventID(origin: origins[s.origin], seq: Seq(s.seq))
    }

    func origin(_ s: Stamp) -> ReplicaID { origins[s.origin] }

    var pendingRows: Int { rows.count }

    /// The last seq applied for `origin`.
    /// Makes room for about `n` rows (a rebuild knows how many events it will apply), at most
    /// `reservedRowsMax`: the table's slots are written when made, so a log of many events on
    /// few entities would otherwise hold memory for rows it never has; past it, the table grows.
    func reserve(rows n: Int) { rows.reserveCapacity(min(n, Self.reservedRowsMax)) }
    static let reservedRowsMax = 1 << 18

    // MARK: Applying

    /// Applies one event. Merging is idempotent and commutative, so a duplicate or an event that
    /// arrives out of order changes nothing it should not; the cursor keeps the highest seq applied.
    func apply(_ e: Event, db: Database) throws {
        try withPrepared(e) { try apply($0, $1, fields: $2, db: db) }
    }

    /// Places `e`'s fields in `scratch` and lends the event, its place and its fields to `body`
    /// (an event applied on its own: a rebuild places fields on its reading thread instead).
    private func withPrepared<R>(_ e: Event, _ body: (UnsafePointer<Event>, PreparedEvent, UnsafeMutableBufferPointer<PreparedField>) throws -> R) rethrows -> R {
        scratch.removeAll(keepingCapacity: true)
        var prepared = layout.prepare(e, into: &scratch, pairEagerly: false)
        if prepared.table >= 0 { prepared.keyHash = RowTable.hash(Key(table: prepared.table, id: e.entityID)) }
        return try withUnsafePointer(to: e) { event in
            try scratch.withUnsafeMutableBufferPointer { try body(event, prepared, $0) }
        }
    }

    /// How many events ahead a batch's merge starts fetching a row's slot, and the row itself.
    static let slotsAhead = 8
    static let rowsAhead = 4

    /// Applies a batch's events in order (each read in place, its fields taken from the batch's
    /// buffer), flushing whenever `rowsMax` rows are pending; `each` is called after each event
    /// (a rebuild counts them for its progress reports).
    @inline(__always)
    func apply(_ batch: PreparedBatch, db: Database, flushingAt rowsMax: Int, each: () throws -> Void = {}) throws {
        try batch.events.withUnsafeBufferPointer { events in
            try batch.fields.withUnsafeMutableBufferPointer { fields in
                let prepared = batch.prepared, n = events.count
                // Each event's row hash, worked out `slotsAhead` events before it is merged (on
                // this thread: the reading one has the less time to spare), kept in a ring.
                try withUnsafeTemporaryAllocation(of: Int.self, capacity: Self.slotsAhead) { ring in
                    @inline(__always) func hashAhead(_ a: Int) {
                        guard a < n, prepared[a].table >= 0 else { return }
                        let h = RowTable.hash(Key(table: prepared[a].table, id: events[a].entityID))
                        ring[a % Self.slotsAhead] = h
                        rows.prefetch(hash: h)
                    }
                    for a in 0..<min(n, Self.slotsAhead) { hashAhead(a) }
                    for i in 0..<n {
                        // The rows of the events a little ahead are fetched from memory while
                        // these are merged (`RowTable`): first their slots, then, once those are
                        // in, the rows.
                        let r = i + Self.rowsAhead
                        if r < n, prepared[r].table >= 0 {
                            rows.prefetchRow(Key(table: prepared[r].table, id: events[r].entityID), hash: ring[r % Self.slotsAhead])
                        }
                        var p = prepared[i]
                        if p.table >= 0 { p.keyHash = ring[i % Self.slotsAhead] }
                        // Its slot in the ring is free now: the hash `slotsAhead` on goes there.
                        hashAhead(i + Self.slotsAhead)
                        try apply(events.baseAddress! + i, p, fields: fields, db: db)
                        try each()
                        if pendingRows >= rowsMax { try flush(db: db) }
                    }
                }
            }
        }
    }

    /// Applies the event at `event`, whose fields `prepared` places in `fields` (values are taken
    /// from there into rows: what is left is what was not applied, or what a value replaced).
    /// The event is read in place: only what merging needs of it is loaded, and nothing is copied.
    func apply(_ event: UnsafePointer<Event>, _ prepared: PreparedEvent, fields: UnsafeMutableBufferPointer<PreparedField>, db: Database) throws {
        let origin = event.pointee.origin, seq = event.pointee.seq, entity = event.pointee.entity
        let originIdx: Int
        if let (o, i) = lastOrigin, o == origin {
            originIdx = i
        } else {
            originIdx = addOrigin(origin)
            lastOrigin = (origin, originIdx)
        }
        let isNew = seq.rawValue > appliedSeq[originIdx]
        if isNew {
            appliedSeq[originIdx] = seq.rawValue
            cursorMoved[originIdx] = true
            if let r = runs.last, r.origin == originIdx, r.last &+ 1 == seq.rawValue {
                runs[runs.count - 1].last = seq.rawValue
            } else {
                runs.append((originIdx, seq.rawValue, seq.rawValue))
            }
        }
        eventsApplied += 1
        // A share's membership record: read by `ShareDirectory`, not projected, not unread.
        if entity == .shareRecord { return }
        let op = event.pointee.op, version = event.pointee.schemaVersion
        // `Event.isUnderstood`, from the loaded fields (calling it would copy the event).
        if !(entity.isKnown && op.isKnown && version <= Event.currentSchemaVersion) {
            // A newer build's event: kept in the log, projected as far as this build understands
            // (the fields it knows of a known entity and op), and counted (once: a redelivery is
            // not past the cursor) so an upgraded build knows to rebuild (docs/FORMAT.md, "Evolution").
            if isNew {
                unread[UnreadKey(entity: entity.rawValue, op: op.rawValue, version: version), default: 0] += 1
            }
            guard entity.isKnown && op.isKnown else { return }
        }
        let explicitID = event.pointee.explicitEventID
        if isNew, let id = explicitID { try noteEventID(id, event.pointee, db: db) }
        let t = prepared.table
        guard t >= 0 else { return }
        let key = Key(table: t, id: event.pointee.entityID)
        let scope = originScope[originIdx] == Self.unknownScope ? try lookUpScope(originIdx) : originScope[originIdx]
        if scope == Self.membershipScope {
            // Only the admin writes a membership log, and only membership records belong in it.
            outside.append((key, eventID(Stamp(hlc: event.pointee.hlc.rawValue, origin: originIdx, seq: seq.rawValue, base: nil, explicitID: explicitID)).lowercasedString,
                            event.pointee.op, event.pointee.hlc.rawValue,
                            "an event of a share's membership log names \(schema.tables[t].entity.name) \(key.id.lowercasedString): a membership log holds membership records only; not applied"))
            return
        }
        let hash = prepared.keyHash
        assert(hash == RowTable.hash(key), "an event applied without its row key's hash")
        let slot: Int
        if !fresh, rows.slot(of: key, hash: hash) == nil {
            slot = rows.insertNew(key, hash: hash, value: try load(key, db: db))
        } else {
            slot = rows.slot(inserting: key, hash: hash, columns: schema.tables[t].columns.count)
        }
        let stamp = Stamp(hlc: event.pointee.hlc.rawValue, origin: originIdx, seq: seq.rawValue, base: event.pointee.base?.rawValue,
                          explicitID: explicitID)
        if scopesActive {
            guard admit(&rows.values[slot], key: key, scope: scope, event: event, stamp: stamp) else { return }
        }
        // In place: one lookup, no copy.
        merge(&rows.values[slot], key: key, event: event, prepared: prepared, fields: fields, stamp: stamp)
        if entity == .completion || entity == .recurrenceException { occurrenceChecks.insert(key) }
    }

    /// The scope of origin `i`, looked up once (a share's sealed log, or private).
    private func lookUpScope(_ i: Int) throws -> Int32 {
        switch try scopeOf?(origins[i]) {
        case .sealed(let share)?:
            scopesActive = true
            originScope[i] = scopeNumber(share)
        case .membership?:
            originScope[i] = Self.membershipScope
        case .privateData?, nil:
            originScope[i] = Self.privateScope
        }
        return originScope[i]
    }

    private func scopeNumber(_ share: ShareID) -> Int32 {
        if let n = scopeIndex[share] { return n }
        let n = Int32(scopeShares.count)
        scopeShares.append(share)
        scopeKeys.append(Self.sortKey(share.rawValue))
        scopeIndex[share] = n
        return n
    }

    /// Whether scope `a` comes before `b`: private first, then shares by id.
    @inline(__always)
    private func scopeBefore(_ a: Int32, _ b: Int32) -> Bool {
        if b == Self.noScope { return a != Self.noScope }
        if a == Self.noScope { return false }
        if a == Self.privateScope || b == Self.privateScope { return a == Self.privateScope && b != Self.privateScope }
        let ka = scopeKeys[Int(a)], kb = scopeKeys[Int(b)]
        return ka.0 != kb.0 ? ka.0 < kb.0 : ka.1 < kb.1
    }

    private func scopeName(_ s: Int32) -> String {
        s == Self.privateScope ? "private data (a log of no share)" : "share \(scopeShares[Int(s)])"
    }

    /// The scope rule (docs/PROJECTION.md, "Shares"): a row is made of the events of one scope,
    /// the first of those whose events name it (private data first, then shares by id). An
    /// event of a later scope is not applied; one of an earlier scope drops what the row held
    /// and makes it anew. So a member of a share cannot change a row of another replica's
    /// private data, or of another share, by naming its id; and since the winning scope is a
    /// minimum over events and a row holds only that scope's events, any arrival order gives
    /// the same rows (a row is never made again from events it skipped: they were of a later scope).
    private func admit(_ row: inout RowState, key: Key, scope: Int32, event: UnsafePointer<Event>, stamp: Stamp) -> Bool {
        let held = row.scope
        if held == scope { return true }
        if held == Self.noScope {
            // A row's first event: only a share's row is noted (a private row is one not named).
            row.scope = scope
            if scope != Self.privateScope { scopeWrites[key] = scope }
            return true
        }
        let id = eventID(stamp).lowercasedString
        let table = schema.tables[key.table].entity.name
        if scopeBefore(held, scope) {
            outside.append((key, id, event.pointee.op, stamp.hlc,
                            "an event of \(scopeName(scope)) names \(table) \(key.id.lowercasedString), which belongs to \(scopeName(held)): not applied"))
            return false
        }
        // What the row held was of a later scope: it is made anew from this scope's events.
        outside.append((key, id, event.pointee.op, stamp.hlc,
                        "\(table) \(key.id.lowercasedString) belongs to \(scopeName(scope)), named by this event: events of \(scopeName(held)) for it are no longer applied"))
        var fresh = RowState(columns: row.cells.count)
        fresh.existsInDatabase = row.existsInDatabase
        fresh.purged = row.purged
        row = fresh
        row.scope = scope
        scopeWrites[key] = scope  // a share's, or private where a share's was (its entry goes)
        return true
    }

    /// Seed 004's rule for ids: an event id seen again on another event, with another payload
    /// (entity, id, op, fields, actor; not `base`, which each replica fills in), is a sync anomaly,
    /// recorded (never merged as one event): both events stay in the log and are applied as the
    /// events they are. The same payload under two positions (one mutation appended through two
    /// replicas) is not. Whatever the order events arrive in, the first in merge order holds the
    /// id and every other is recorded once.
    private func noteEventID(_ id: UUID, _ e: Event, db: Database) throws {
        let mine = IDHolder(origin: e.origin, seq: e.seq.rawValue, hlc: e.hlc.rawValue, digest: Self.digest(e), entity: e.entity,
                            entityID: e.entityID, op: e.op)
        if carriers[id] == nil {
            var list: [IDHolder] = []
            if !fresh {
                for r in try Row.fetchAll(db.cachedStatement(sql: "SELECT origin, seq, hlc, digest, entity, entity_id, op FROM projection_event_ids WHERE event_id = ?"),
                                          arguments: [id.lowercasedString]) {
                    guard let o = ReplicaID(r[0] as String), let eid = UUID(uuidString: r[5] as String) else { continue }
                    list.append(IDHolder(origin: o, seq: UInt64(bitPattern: r[1]), hlc: UInt64(bitPattern: r[2]), digest: UInt64(bitPattern: r[3]),
                                         entity: Entity(rawValue: UInt8(clamping: r[4] as Int64)), entityID: eid, op: Op(rawValue: UInt8(clamping: r[6] as Int64))))
                }
            }
            carriers[id] = (list, list.count)
        }
        guard !carriers[id]!.list.contains(where: { $0.origin == mine.origin && $0.seq == mine.seq }) else { return }
        carriers[id]!.list.append(mine)
    }

    /// Writes the carriers of each id touched, and its anomalies: every carrier whose payload
    /// differs from the first carrier's in merge order (so any arrival order gives the same rows).
    private func flushEventIDs(db: Database) throws {
        for (id, entry) in carriers where entry.list.count > entry.stored {
            for h in entry.list[entry.stored...] {
                try db.cachedStatement(sql: """
                    INSERT OR IGNORE INTO projection_event_ids (event_id, origin, seq, hlc, digest, entity, entity_id, op) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """).execute(arguments: [id.lowercasedString, h.origin.description, Int64(bitPattern: h.seq), Int64(bitPattern: h.hlc),
                                             Int64(bitPattern: h.digest), Int(h.entity.rawValue), h.entityID.lowercasedString, Int(h.op.rawValue)])
            }
            guard entry.list.count > 1 else { continue }
            func key(_ h: IDHolder) -> (UInt64, UInt64, UInt64, UInt64) {
                let o = Self.sortKey(h.origin)
                return (h.hlc, o.0, o.1, h.seq)
            }
            let first = entry.list.min { key($0) < key($1) }!
            try db.execute(sql: "DELETE FROM sync_anomalies WHERE kind = 'event_id_reused' AND event_id = ?", arguments: [id.lowercasedString])
            for other in entry.list where other.digest != first.digest {
                try db.cachedStatement(sql: """
                    INSERT INTO sync_anomalies (kind, entity, entity_id, item_id, original_occurrence_date, attempted_op, event_id,
                      other_event_id, correlation_id, detected_at, details)
                    VALUES ('event_id_reused', ?, ?, NULL, NULL, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT(kind, entity_id, other_event_id) DO NOTHING
                    """).execute(arguments: [
                        other.entity.name, other.entityID.lowercasedString, other.op.name, id.lowercasedString, "\(other.origin):\(other.seq)",
                        id.lowercasedString, ISOTime.string(millis: other.hlc >> 16),
                        "origin \(other.origin) seq \(other.seq) carries \(other.entity.name) \(other.entityID.lowercasedString) \(other.op.name) under event id \(id.lowercasedString), which the first event carrying it in merge order (origin \(first.origin) seq \(first.seq), \(first.entity.name) \(first.entityID.lowercasedString) \(first.op.name)) carries with another payload: both are kept and applied as the events they are, never merged as one",
                    ])
            }
        }
        carriers.removeAll()
    }

    /// FNV-1a over an event's payload: entity, entity id, op, actor and fields (stable across runs).
    static func digest(_ e: Event) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        @inline(__always) func byte(_ b: UInt8) { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01b3 }
        func bytes<S: Sequence>(_ s: S) where S.Element == UInt8 { for b in s { byte(b) } }
        func word(_ v: UInt64) { for i in 0..<8 { byte(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))) } }
        byte(e.entity.rawValue); byte(e.op.rawValue)
        withUnsafeBytes(of: e.entityID.uuid) { bytes($0) }
        if let a = e.actor { byte(1); word(UInt64(a.utf8.count)); bytes(a.utf8) } else { byte(0) }
        word(UInt64(e.fields.count))
        for f in e.fields {
            word(UInt64(f.name.utf8.count)); bytes(f.name.utf8)
            switch f.value {
            case .null: byte(0)
            case .boolean(let b): byte(b ? 2 : 1)
            case .integer(let i): byte(3); word(UInt64(bitPattern: i))
            case .real(let d): byte(4); word(d.bitPattern)
            case .text(let t): byte(5); word(UInt64(t.utf8.count)); bytes(t.utf8)
            }
        }
        return h
    }

    private func load(_ key: Key, db: Database) throws -> RowState {
        let table = schema.tables[key.table]
        var row = RowState(columns: table.columns.count)
        if fresh { return row }
        let cols = table.columns.joined(separator: ", ")
        let sql = "SELECT \(cols), version, _clocks FROM \(table.name) WHERE id = ?"
        guard let r = try Row.fetchOne(db.cachedStatement(sql: sql), arguments: [key.id.lowercasedString]) else {
            // A purged row: its merge state without its values (the log keeps them).
            if let p = try Row.fetchOne(db.cachedStatement(sql: "SELECT version, _clocks FROM projection_purged WHERE tbl = ? AND id = ?"),
                                        arguments: [table.name, key.id.lowercasedString]) {
                let blob: Data = try p.decode(atIndex: 1)
                let version: Int64 = try p.decode(atIndex: 0)
                row = try RowState.decodeClocks(Array(blob), columns: table.columns.count, version: UInt64(bitPattern: version), origins: origins.count)
                row.purged = true
                row.scope = try storedScope(key, db: db)
            }
            return row
        }
        let blob: Data = try r.decode(atIndex: table.columns.count + 1)
        let version: Int64 = try r.decode(atIndex: table.columns.count)
        row = try RowState.decodeClocks(Array(blob), columns: table.columns.count, version: UInt64(bitPattern: version), origins: origins.count)
        for c in 0..<table.columns.count { row.cells[c].value = Self.fieldValue(r[c] as DatabaseValue) }
        row.existsInDatabase = true
        row.scope = try storedScope(key, db: db)
        return row
    }

    /// The scope of a row the file holds: a share's when `projection_scopes` names one, else private.
    private func storedScope(_ key: Key, db: Database) throws -> Int32 {
        guard scopesHeld else { return Self.privateScope }
        guard let text = try String.fetchOne(db.cachedStatement(sql: "SELECT share FROM projection_scopes WHERE tbl = ? AND id = ?"),
                                             arguments: [schema.tables[key.table].name, key.id.lowercasedString]) else { return Self.privateScope }
        guard let share = ShareID(text) else { throw ProjectionError.database("projection_scopes holds \(text.debugDescription) for \(schema.tables[key.table].name) \(key.id.lowercasedString): run `evctl replay --rebuild`") }
        return scopeNumber(share)
    }

    static func fieldValue(_ v: DatabaseValue) -> FieldValue? {
        switch v.storage {
        case .null: nil
        case .int64(let i): .integer(i)
        case .double(let d): .real(d)
        case .string(let s): .text(s)
        case .blob(let b): .text(b.base64EncodedString())
        }
    }

    private func merge(_ row: inout RowState, key: Key, event: UnsafePointer<Event>, prepared: PreparedEvent,
                       fields: UnsafeMutableBufferPointer<PreparedField>, stamp: Stamp) {
        row.version = max(row.version, stamp.hlc)
        // Applied before any share's log was met (`admit` not asked): a private event.
        if row.scope == Self.noScope { row.scope = Self.privateScope }
        // Whether a stamp lost what it held (a column or the lifecycle): only then may one be left
        // unused, for `compact` to drop (most events of a rebuild replace nothing).
        var replaced = false
        let op = event.pointee.op
        switch op {
        case .create, .delete, .restore:
            // A create asserts existence: like a restore, it takes part in the delete/restore
            // lifecycle, so tagging again after untagging (the same pair id), or re-inserting a
            // deleted id, brings the entity back when it is the later event (docs/PROJECTION.md).
            if op == .create { row.createdHLC = min(row.createdHLC ?? .max, stamp.hlc) }
            if row.lifecycle == nil || after(stamp, row.stamps[row.lifecycle!.stamp]) {
                replaced = replaced || row.lifecycle != nil
                row.lifecycle = (row.intern(stamp), op == .delete)
            }
        default:
            break  // .update; an unknown op never gets here (`apply`)
        }
        let range = prepared.fieldStart..<prepared.fieldEnd
        // An item_tag is the pair it was created with: pair fields that name another pair (a
        // peer's bad event) are not applied; they stay in the log.
        // Pair fields equal to the row's own cannot change the pair: only others are hashed.
        let foreignPair = prepared.pairFields && !holdsPair(row, table: key.table, fields, range)
            && !(prepared.pairIsEntity ?? (FieldRules.pairID(event.pointee) == event.pointee.entityID))
        for i in range {
            // A value of another type than its column holds (a peer's event; input is checked on
            // the way in) is not applied: it stays in the log, and the column stays readable.
            guard fields[i].applies, !(foreignPair && fields[i].pair) else { continue }
            let c = Int(fields[i].column)
            if let current = row.cells[c].stamp {
                let w = row.stamps[current]
                if w.hlc == stamp.hlc && w.origin == stamp.origin && w.seq == stamp.seq { continue }
                if after(stamp, w) {
                    if mayConflict(winner: stamp, loser: w) {
                        noteConflict(key: key, column: c, winner: stamp, winnerValue: fields[i].value ?? .null, loser: w, loserValue: row.cells[c].value ?? .null)
                    }
                    take(&fields[i], into: &row, column: c, stamp: stamp)
                    replaced = true
                } else if mayConflict(winner: w, loser: stamp) {
                    noteConflict(key: key, column: c, winner: w, winnerValue: row.cells[c].value ?? .null, loser: stamp, loserValue: fields[i].value ?? .null)
                }
            } else {
                take(&fields[i], into: &row, column: c, stamp: stamp)
            }
            // A write that has seen both sides of an open conflict resolves it; conflicts found
            // since the last flush count too (a rebuild flushes once, at the end).
            if openConflicts > 0 || !conflicts.isEmpty, let base = stamp.base {
                resolutions.append((key, c, base, eventID(stamp).lowercasedString))
            }
        }
        if replaced { row.compact() }
    }

    /// Moves the field's value into the row's column (the value it replaces goes back to the
    /// field, freed with the batch): no copy, and the value's memory is not touched.
    @inline(__always)
    private func take(_ field: inout PreparedField, into row: inout RowState, column c: Int, stamp: Stamp) {
        let s = row.intern(stamp)
        swap(&row.cells[c].value, &field.value)
        row.cells[c].stamp = s
    }

    /// True when every pair field (item_id, tag_id) among `fields[range]` equals the value `row`
    /// holds in that column: applying them cannot change which pair the row is.
    private func holdsPair(_ row: borrowing RowState, table: Int, _ fields: UnsafeMutableBufferPointer<PreparedField>, _ range: Range<Int>) -> Bool {
        guard layout.pairColumns[table] != nil else { return false }
        for i in range where fields[i].pair {
            guard let held = row.cells[Int(fields[i].column)].value, held == fields[i].value else { return false }
        }
        return true
    }

    /// DESIGN rule 5: a value overwritten by an event whose author had not seen it (its base is
    /// older than that value), from another origin, is a conflict. Equal values are not. The
    /// stamps are tested first, before any value is looked at (`noteConflict` then compares them).
    @inline(__always)
    private func mayConflict(winner: Stamp, loser: Stamp) -> Bool {
        // The later writer (the winner) decides: had it seen the value it overwrote?
        guard winner.origin != loser.origin, let base = winner.base else { return false }
        return base < loser.hlc
    }

    /// Records a conflict between stamps `mayConflict` let through, unless the values are equal.
    private func noteConflict(key: Key, column: Int, winner: Stamp, winnerValue: FieldValue, loser: Stamp, loserValue: FieldValue) {
        guard winnerValue != loserValue else { return }
        conflicts.append(ConflictRecord(entity: schema.tables[key.table].entity, id: key.id, field: schema.tables[key.table].columns[column],
                                        winner: winner, winnerValue: winnerValue, loser: loser, loserValue: loserValue))
    }

    struct ConflictRecord {
        var entity: Entity
        var id: UUID
        var field: String
        var winner: Stamp
        var winnerValue: FieldValue
        var loser: Stamp
        var loserValue: FieldValue
    }

    // MARK: Flushing

    /// Writes dirty rows, conflicts, anomalies and the cursor. Call inside a write transaction.
    func flush(db: Database) throws {
        if !fresh { try settlePurged(db: db) }  // may meet origins: before they are written
        for i in newOrigins {
            try db.cachedStatement(sql: "INSERT INTO projection_origins (idx, origin) VALUES (?, ?)").execute(arguments: [i, origins[i].description])
        }
        newOrigins.removeAll()
        // Rows are reached by their slot in the table (no hashing, nothing moved) and
        // freed all at once afterwards.
        var byTable: [[(UInt64, UInt64, Int)]] = Array(repeating: [], count: schema.tables.count)
        for i in rows.slots {
            let k = rows.key(at: i)
            let sk = Self.sortKey(k.id)
            byTable[k.table].append((sk.0, sk.1, i))
        }
        for (t, var keys) in byTable.enumerated() where !keys.isEmpty {
            // In key order: B-tree inserts then append to pages instead of splitting them at random.
            keys.sort { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }
            try writeRows(table: schema.tables[t], keys.map(\.2), db: db)
        }
        if rows.count >= Self.freeAsideRows {
            // Freeing a rebuild's rows (arrays and strings of each) took a tenth of it: another
            // thread does it while this one goes on; a bulk fill's once it has committed
            // (`keepWritten`), not beside its indexes.
            var written = RowTable()
            swap(&written, &rows)
            if let keepWritten { keepWritten.keep(consume written) } else { FreeAside.release(consume written) }
        } else {
            rows.removeAll(keepingCapacity: true)
        }
        try flushScopes(db: db)
        for c in conflicts { try insertConflict(c, db: db) }
        conflicts.removeAll()
        for (key, c, base, by) in resolutions {
            let table = schema.tables[key.table]
            try db.cachedStatement(sql: """
                UPDATE conflicts SET resolved_by = ? WHERE entity = ? AND entity_id = ? AND field = ? AND resolved_by IS NULL
                AND winner_hlc <= ? AND loser_hlc <= ? AND winner_event_id <> ? AND loser_event_id <> ?
                """).execute(arguments: [by, table.entity.name, key.id.lowercasedString, table.columns[c], Int64(clamping: base), Int64(clamping: base), by, by])
        }
        resolutions.removeAll()
        if !occurrenceChecks.isEmpty { try checkOccurrences(db: db) }
        for (k, n) in unread {
            try db.cachedStatement(sql: """
                INSERT INTO projection_unread (entity, op, schema_version, events) VALUES (?, ?, ?, ?)
                ON CONFLICT(entity, op, schema_version) DO UPDATE SET events = events + excluded.events
                """).execute(arguments: [Int(k.entity), Int(k.op), Int(k.version), n])
        }
        unread.removeAll()
        try flushEventIDs(db: db)
        for i in cursorMoved.indices where cursorMoved[i] {
            cursor[origins[i]] = Seq(appliedSeq[i])
            try db.cachedStatement(sql: "INSERT INTO projection_cursor (origin, last_seq) VALUES (?, ?) ON CONFLICT(origin) DO UPDATE SET last_seq = excluded.last_seq")
                .execute(arguments: [origins[i].description, Int64(appliedSeq[i])])
            cursorMoved[i] = false
        }
        if !runs.isEmpty {
            let insert = try db.cachedStatement(sql: "INSERT INTO projection_commits (origin, first_seq, last_seq) VALUES (?, ?, ?)")
            for r in runs {
                try insert.execute(arguments: [origins[r.origin].description, Int64(clamping: r.first), Int64(clamping: r.last)])
            }
            let last = db.lastInsertedRowID, n = Int64(runs.count)
            runs.removeAll()
            // Pruned whenever the ids pass a multiple of 1024: a delete per thousand commits.
            if last / 1024 != (last - n) / 1024 {
                try db.execute(sql: "DELETE FROM projection_commits WHERE id <= ?", arguments: [last - Self.journalRowsMax])
            }
        }
        openConflicts = try Int.fetchOne(db, sql: "SELECT count(*) FROM conflicts WHERE resolved_by IS NULL") ?? 0
        fresh = false
    }

    /// Writes the scopes rows took since the last flush (`projection_scopes` names a share's
    /// rows only) and the events not applied for their scope (`sync_anomalies`, kind `outside_share`).
    private func flushScopes(db: Database) throws {
        if !scopeWrites.isEmpty {
            let upsert = try db.cachedStatement(sql: "INSERT INTO projection_scopes (tbl, id, share) VALUES (?, ?, ?) ON CONFLICT(tbl, id) DO UPDATE SET share = excluded.share")
            let remove = try db.cachedStatement(sql: "DELETE FROM projection_scopes WHERE tbl = ? AND id = ?")
            for (key, scope) in scopeWrites {
                let table = schema.tables[key.table].name, id = key.id.lowercasedString
                if scope >= 0 {
                    try upsert.execute(arguments: [table, id, scopeShares[Int(scope)].description])
                    scopesHeld = true
                } else if scopesHeld {
                    try remove.execute(arguments: [table, id])
                }
            }
            scopeWrites.removeAll()
        }
        guard !outside.isEmpty else { return }
        let insert = try db.cachedStatement(sql: """
            INSERT INTO sync_anomalies (kind, entity, entity_id, attempted_op, event_id, other_event_id, correlation_id, detected_at, details)
            VALUES ('outside_share', ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(kind, entity_id, other_event_id) DO UPDATE SET details = excluded.details
            """)
        for o in outside {
            try insert.execute(arguments: [schema.tables[o.key.table].entity.name, o.key.id.lowercasedString, o.op.name, o.event, o.event, o.event,
                                           ISOTime.string(millis: o.hlc >> 16), o.details])
        }
        outside.removeAll()
    }

    /// Every event of each entity asked for, from the log, for bringing purged rows back (set by
    /// the caller that has the store; nil in a fresh rebuild, which never loads a row).
    var replayEntities: ((Set<EntityRef>) throws -> [EntityRef: [Event]])?

    /// Purged rows touched since the last flush: a row still deleted keeps only its merge state
    /// (a late update never brings it back); a row a later restore or create brought back is made
    /// again from all its events in the log (one pass for all of them), and written like a new row.
    private func settlePurged(db: Database) throws {
        var back: [Key] = []
        // The keys first: rows are removed from the table on the way.
        for key in rows.slots.filter({ rows.values[$0].purged }).map(rows.key(at:)) {
            let row = rows[key]!
            let table = schema.tables[key.table]
            if let d = row.deletedHLC {
                let clocks = row.encodeClocks()
                try db.cachedStatement(sql: "UPDATE projection_purged SET version = ?, deleted_at = ?, _clocks = ? WHERE tbl = ? AND id = ?")
                    .execute(arguments: [Int64(bitPattern: row.version), ISOTime.string(millis: d >> 16), Data(clocks), table.name, key.id.lowercasedString])
                rows.removeValue(forKey: key)
                continue
            }
            try db.cachedStatement(sql: "DELETE FROM projection_purged WHERE tbl = ? AND id = ?").execute(arguments: [table.name, key.id.lowercasedString])
            back.append(key)
        }
        guard !back.isEmpty else { return }
        let events = try replayEntities?(Set(back.map { EntityRef(entity: schema.tables[$0.table].entity, id: $0.id) })) ?? [:]
        for key in back {
            let table = schema.tables[key.table]
            var whole = RowState(columns: table.columns.count)
            let history = events[EntityRef(entity: table.entity, id: key.id)] ?? []
            // Only the events of the row's scope make it: the first of its events' scopes.
            var scopes: [Int32] = []
            for e in history {
                let i = addOrigin(e.origin)
                scopes.append(originScope[i] == Self.unknownScope ? try lookUpScope(i) : originScope[i])
            }
            // A membership log's events make no row (`apply`).
            let scope = scopes.reduce(Self.noScope) { $1 != Self.membershipScope && scopeBefore($1, $0) ? $1 : $0 }
            for (n, e) in history.enumerated() where scopes[n] == scope {
                let originIdx = addOrigin(e.origin)
                let stamp = Stamp(hlc: e.hlc.rawValue, origin: originIdx, seq: e.seq.rawValue, base: e.base?.rawValue, explicitID: e.explicitEventID)
                withPrepared(e) { merge(&whole, key: key, event: $0, prepared: $1, fields: $2, stamp: stamp) }
            }
            whole.scope = scope
            if scopesActive { scopeWrites[key] = scope }
            rows[key] = whole
        }
    }

    /// Writes the rows at `places` in `rows` (read in place, not copied), in that order.
    ///
    /// Values are bound with SQLite's C API: building GRDB argument arrays per row cost a tenth
    /// of a rebuild. Rows are laid out first (`RowBatch`: every text of a batch in one buffer,
    /// bound in place with SQLITE_STATIC, so a row costs no String and no copy inside SQLite), then
    /// bound and stepped. From `pipelinedRows` rows on, a second thread lays out the next batches
    /// while this one writes (reading rows scattered in memory was half of writing them); nothing
    /// changes `rows` until that thread is joined. Bindings are cleared before a batch goes (also
    /// on an error: `RowBatch.write`), so none outlives its buffer.
    private func writeRows(table: ProjectedTable, _ places: [Int], db: Database) throws {
        let all = ["id"] + table.columns + ["version", "created_at", "modified_at", "deleted_at", "_clocks"]
        // The schema's own column names (constants of this build), and one row's placeholders.
        let insertColumns = all.joined(separator: ", ")
        let rowPlaceholders = "(" + all.map { _ in "?" }.joined(separator: ", ") + ")"
        let insert = try db.cachedStatement(sql: "INSERT INTO \(table.name) (\(insertColumns)) VALUES \(rowPlaceholders)")
        let update = try db.cachedStatement(sql: "UPDATE \(table.name) SET \((all.dropFirst()).map { "\($0) = ?" }.joined(separator: ", ")) WHERE id = ?")
        // A fill's rows (all new; indexes and triggers set aside) go in INSERTs of `insertRunRows`
        // rows (within SQLite's bound on a statement's parameters): a step per row opened and
        // closed the table's cursors each time. Other flushes, a few rows each, mostly updates,
        // with the FTS triggers live, write a row per statement.
        let runRows = min(Self.insertRunRows, Int(sqlite3_limit(db.sqliteConnection, SQLITE_LIMIT_VARIABLE_NUMBER, -1)) / all.count)
        let insertRun = fresh && places.count >= runRows && runRows > 1
            ? try db.cachedStatement(sql: "INSERT INTO \(table.name) (\(insertColumns)) VALUES \(Array(repeating: rowPlaceholders, count: runRows).joined(separator: ", "))")
            : nil
        func write(_ batch: RowBatch) throws {
            try batch.write(insert: insert.sqliteStatement, insertRun: insertRun.map { ($0.sqliteStatement, runRows) }, update: update.sqliteStatement) { id in
                "writing \(table.name) row \(id.lowercasedString): \(String(cString: sqlite3_errmsg(db.sqliteConnection)))"
            }
        }
        guard places.count >= Self.pipelinedRows else {
            var batch = RowBatch(rows: places.count)
            Self.layOut(rows, places, places.indices, into: &batch)
            try write(batch)
            return
        }
        // The laying-out thread reads the rows through this box; emptied once it is joined, so the
        // dictionary is again held once and later changes to `rows` copy nothing.
        let shared = RowsBox(rows)
        defer { shared.rows = RowTable() }
        let per = Self.rowsPerBatch
        try Handoff<RowBatch>.run(name: "logbook.rows", depth: 4, produce: { hand, _ in
            let table = shared.rows
            var start = 0
            while start < places.count {
                var batch = RowBatch(rows: per)
                Self.layOut(table, places, start..<min(places.count, start + per), into: &batch)
                guard hand(batch) else { return }
                start += per
            }
        }, consume: write)
    }

    /// Lays out the rows of `table` at `places[range]` into `batch`, in that order, each read in
    /// place, through a pointer (`RowBatch.add`). Rows in key order lie anywhere in the table,
    /// and reading each one waited on memory (most of laying them out): the rows ahead are
    /// fetched meanwhile, a row first, then (once it is in) its cells and stamps.
    private static func layOut(_ table: RowTable, _ places: [Int], _ range: Range<Int>, into batch: inout RowBatch) {
        table.values.withUnsafeBufferPointer { values in
            guard let rows = values.baseAddress else { return precondition(range.isEmpty, "rows to write in an empty table") }
            for k in range {
                if k + layoutRowsAhead < places.count { table.prefetch(slot: places[k + layoutRowsAhead]) }
                if k + layoutStorageAhead < places.count { table.prefetchStorage(slot: places[k + layoutStorageAhead]) }
                // `key(at:)` checks the place is in the table before the row is read.
                let id = table.key(at: places[k]).id
                batch.add(rows + places[k], id: id)
            }
        }
    }

    /// From this many rows of a table, a flush lays rows out on a second thread.
    static let pipelinedRows = 4_096
    static let rowsPerBatch = 512
    /// How far ahead of the row being laid out its successors are fetched: the row itself, then its cells.
    static let layoutRowsAhead = 16
    static let layoutStorageAhead = 8
    /// New rows per INSERT statement when a fill writes runs of them (fewer when SQLite's bound
    /// on parameters is lower; a batch's rows past its last whole run go one by one). Measured
    /// with SQLite 3.40 on item_tags-shaped rows: 1.5-1.9 µs a row one by one, 1.1 by 32, 1.0 by 64.
    static let insertRunRows = 64

    final class RowsBox: @unchecked Sendable {
        var rows: RowTable
        init(_ rows: RowTable) { self.rows = rows }
    }

    static func databaseValue(_ v: FieldValue?) -> DatabaseValue {
        switch v {
        case nil, .null?: .null
        case .integer(let i)?: i.databaseValue
        case .real(let d)?: d.databaseValue
        case .text(let s)?: s.databaseValue
        case .boolean(let b)?: (b ? 1 : 0).databaseValue
        }
    }

    static func json(_ v: FieldValue) -> String {
        switch v {
        case .null: "null"
        case .boolean(let b): b ? "true" : "false"
        case .integer(let i): String(i)
        case .real(let d): "\(d)"
        case .text(let s):
            (try? String(data: JSONSerialization.data(withJSONObject: [s], options: [.fragmentsAllowed]), encoding: .utf8))
                .map { String($0.dropFirst().dropLast()) } ?? "\"\""
        }
    }

    private func insertConflict(_ c: ConflictRecord, db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT OR IGNORE INTO conflicts (entity, entity_id, field, winner_value, loser_value, winner_event_id, loser_event_id,
              winner_origin, loser_origin, winner_hlc, loser_hlc, detected_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [
                c.entity.name, c.id.lowercasedString, c.field, Self.json(c.winnerValue), Self.json(c.loserValue),
                eventID(c.winner).lowercasedString, eventID(c.loser).lowercasedString,
                origin(c.winner).description, origin(c.loser).description, Int64(clamping: c.winner.hlc), Int64(clamping: c.loser.hlc),
                ISOTime.string(millis: max(c.winner.hlc, c.loser.hlc) >> 16),
            ])
    }

    /// DESIGN rule 6 (seeds/004 "completion wins"): an active exception (skip or reschedule) of an
    /// occurrence that has an active completion loses; each such pair is recorded in sync_anomalies.
    private func checkOccurrences(db: Database) throws {
        var keys = Set<[String]>()
        for key in occurrenceChecks {
            let table = schema.tables[key.table]
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT item_id, original_occurrence_date FROM \(table.name) WHERE id = ?"),
                                             arguments: [key.id.lowercasedString]),
                  let item = try row.decode(String?.self, atIndex: 0), let date = try row.decode(String?.self, atIndex: 1) else { continue }
            keys.insert([item, date])
        }
        occurrenceChecks.removeAll()
        for k in keys {
            let pairs = try Row.fetchAll(db.cachedStatement(sql: """
                SELECT e.id, e.kind, e._clocks, c.id, c._clocks, e.version, c.version FROM recurrence_exceptions e
                JOIN completion_history c ON c.item_id = e.item_id AND c.original_occurrence_date = e.original_occurrence_date
                WHERE e.item_id = ? AND e.original_occurrence_date = ? AND e.deleted_at IS NULL AND c.deleted_at IS NULL
                """), arguments: [k[0], k[1]])
            for p in pairs {
                let exceptionID: String = p[0]
                let kind: String? = p[1]
                let eClocks: Data = p[2]
                let completionID: String = p[3]
                let cClocks: Data = p[4]
                // Versions are clocks kept as their bits (a peer's may be past Int64.max): compared
                // as clocks here, not as SQLite's signed integers.
                let eVersion = UInt64(bitPattern: p[5] as Int64)
                let cVersion = UInt64(bitPattern: p[6] as Int64)
                let loser = Self.latestEventID(eClocks, eVersion, self)
                let winner = Self.latestEventID(cClocks, cVersion, self)
                try db.cachedStatement(sql: """
                    INSERT INTO sync_anomalies (kind, entity, entity_id, item_id, original_occurrence_date, attempted_op, event_id,
                      other_event_id, correlation_id, detected_at, details)
                    VALUES ('completion_wins', 'recurrence_exception', ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT(kind, entity_id, other_event_id) DO UPDATE SET event_id = excluded.event_id, attempted_op = excluded.attempted_op
                    """).execute(arguments: [
                        exceptionID, k[0], k[1], kind ?? "exception", loser, completionID, loser,
                        ISOTime.string(millis: max(eVersion, cVersion) >> 16),
                        "completion \(completionID) (event \(winner)) wins over \(kind ?? "exception") \(exceptionID) of occurrence \(k[1])",
                    ])
            }
        }
    }

    /// The id of the newest event among a row's clocks.
    static func latestEventID(_ clocks: Data, _ version: UInt64, _ p: Projector) -> String {
        guard let r = try? RowState.decodeClocks(Array(clocks), columns: 64, version: version, origins: p.origins.count), let s = r.stamps.max(by: { p.after($1, $0) }) else { return "" }
        return p.eventID(s).lowercasedString
    }
}
