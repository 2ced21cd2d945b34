import EventLog
import LogbookServer
import Foundation
import GRDB
import Logging
import Replicator

/// An index of a store's log for the inspector's pages (`<store>/audit.sqlite`): one row per
/// event (origin, seq, clock, entity, id, op, actor) with indexes for the timeline newest first,
/// filtered by origin, entity or id, and hourly counts per origin for the activity chart. The
/// events themselves are read from the log when a page shows them.
///
/// Derived data only: it is caught up from the log (`catchUp`), and a file that is damaged, of
/// another format or of another store is set aside and built again (see docs/INSPECT.md).
public final class AuditIndex: @unchecked Sendable {
    public let store: Store
    let db: any DatabaseWriter
    /// Where the index lives; nil when it is kept in memory (a store directory we may not write).
    public let path: String?
    private let catchUpLock = Lock()
    let logger: Logger

    /// The format of the file; another number is rebuilt.
    /// 3: an event's fields are kept bounded (`fieldsText`); an index of an older version is
    /// built again, so no unbounded field list of an earlier build is shown.
    static let formatVersion = 3
    /// Events written per transaction while catching up.
    static let batchEventsMax = 5_000

    public struct Progress: Sendable, Equatable {
        /// Events indexed and events in the log.
        public var indexed: UInt64
        public var total: UInt64
        public var isComplete: Bool { indexed >= total }
    }

    public init(store: Store, inMemory: Bool = false, logger: Logger = Logger(label: "evctl.inspect")) throws {
        self.store = store
        self.logger = logger
        let file = store.layout.audit
        var config = SQLiteFactory.configuration(.ours)
        config.busyMode = .timeout(5)
        var opened: (db: any DatabaseWriter, path: String?)
        if inMemory || !FileManager.default.isWritableFile(atPath: store.path) {
            opened = (try SQLiteFactory.queue(nil, .ours, config), nil)
        } else {
            do {
                do {
                    opened = (try Self.openChecked(file, store: store, config: config), file)
                } catch where !DiskSpace.cannotWrite(error, near: store.path) {
                    // Derived data: a file that cannot be used is set aside (never read as data) and built again.
                    let aside = file + ".damaged-\(Int(Date().timeIntervalSince1970))"
                    logger.warning("the audit index \(file) cannot be used (\(error)); moved to \(aside) and built again")
                    for suffix in [""] + StoreLayout.sqliteSidecarSuffixes where FileManager.default.fileExists(atPath: file + suffix) {
                        try FileManager.default.moveItem(atPath: file + suffix, toPath: aside + suffix)
                    }
                    opened = (try Self.openChecked(file, store: store, config: config), file)
                }
                try Self.migrate(opened.db, store: store)
            } catch where DiskSpace.cannotWrite(error, near: store.path) {
                // A full disk or a read-only mount: the pages still work, indexing in memory
                // (the file is left as it is, not set aside: nothing is wrong with it).
                logger.warning("the audit index \(file) cannot be written now (\(error)); indexing in memory")
                opened = (try SQLiteFactory.queue(nil, .ours, config), nil)
            }
        }
        db = opened.db
        path = opened.path
        if path == nil { try Self.migrate(db, store: store) }
        try dropIfAhead()
    }

    /// An index that holds events past the end of an origin's log (the store was put back to an
    /// older copy) describes events that are not there: it is emptied and built again.
    private func dropIfAhead() throws {
        let reader = LogReader(store: store)
        var ahead: [String] = []
        try db.read { db in
            for row in try Row.fetchAll(db, sql: "SELECT origin, next_seq FROM origins") {
                guard let u = Self.uuid(row[0]) else { continue }
                let origin = ReplicaID(rawValue: u)
                let last = try reader.tip(origin: origin, hashing: false).lastSeq.rawValue
                if UInt64(max(1, row[1] as Int64)) - 1 > last { ahead.append("\(origin) (indexed through \((row[1] as Int64) - 1), the log ends at \(last))") }
            }
        }
        guard !ahead.isEmpty else { return }
        logger.warning("the audit index of \(store.path) is ahead of the log for \(ahead.joined(separator: ", ")); building it again")
        try db.write { db in
            for t in ["origins", "events", "buckets"] { try db.execute(sql: "DELETE FROM \(t)") }
        }
    }

    private static func openChecked(_ file: String, store: Store, config: Configuration) throws -> DatabasePool {
        let pool = try SQLiteFactory.pool(file, config)
        try pool.read { db in
            if try db.tableExists("meta") {
                let ok = try String.fetchOne(db, sql: "PRAGMA quick_check") ?? "?"
                guard ok == "ok" else { throw InspectorError("quick_check says \(ok)") }
            }
        }
        return pool
    }

    private static func migrate(_ writer: any DatabaseWriter, store: Store) throws {
        try writer.write { db in
            if try db.tableExists("meta") {
                let version = try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'format'")
                let replica = try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'replica'")
                if version == String(formatVersion) && replica == store.replicaID.description { return }
                // Another format or another store's index: start again.
                for t in ["meta", "origins", "events", "buckets"] { try db.execute(sql: "DROP TABLE IF EXISTS \(t)") }
            }
            try db.execute(sql: """
                CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
                CREATE TABLE origins (origin BLOB PRIMARY KEY NOT NULL, next_seq INTEGER NOT NULL, events INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TABLE events (
                    origin BLOB NOT NULL, seq INTEGER NOT NULL, hlc INTEGER NOT NULL, entity INTEGER NOT NULL,
                    entity_id BLOB NOT NULL, op INTEGER NOT NULL, actor TEXT, event_id BLOB, fields TEXT NOT NULL,
                    PRIMARY KEY (origin, seq)) WITHOUT ROWID;
                CREATE INDEX events_time ON events(hlc, origin, seq);
                CREATE INDEX events_origin_time ON events(origin, hlc, seq);
                CREATE INDEX events_entity_time ON events(entity, hlc, origin, seq);
                CREATE INDEX events_id_time ON events(entity_id, hlc, origin, seq);
                CREATE TABLE buckets (origin BLOB NOT NULL, hour INTEGER NOT NULL, events INTEGER NOT NULL, PRIMARY KEY (origin, hour)) WITHOUT ROWID;
                """)
            try db.execute(sql: "INSERT INTO meta(key, value) VALUES ('format', ?), ('replica', ?)",
                           arguments: [String(formatVersion), store.replicaID.description])
        }
    }

    /// Clocks are stored so that SQLite's signed order is the clocks' order.
    static func key(_ h: HLC) -> Int64 { Int64(bitPattern: h.rawValue ^ (1 << 63)) }
    static func hlc(_ key: Int64) -> HLC { HLC(rawValue: UInt64(bitPattern: key) ^ (1 << 63)) }

    /// Indexes what the log holds past the index, at most `limit` events (all by default).
    /// - Returns: the events indexed by this call.
    /// With `wait` false, a call made while another is catching up returns 0 at once.
    @discardableResult
    public func catchUp(limit: Int = .max, wait: Bool = true) throws -> Int {
        if wait { return try catchUpLock.withLock { try catchingUp(limit: limit) } }
        return try catchUpLock.withLockIfAvailable { try catchingUp(limit: limit) } ?? 0
    }

    private func catchingUp(limit: Int) throws -> Int {
        let reader = LogReader(store: store)
        var next: [ReplicaID: UInt64] = [:]
        try db.read { db in
            for row in try Row.fetchAll(db, sql: "SELECT origin, next_seq FROM origins") {
                let blob: Data = row[0]
                guard blob.count == 16 else { continue }
                let id = ReplicaID(rawValue: blob.withUnsafeBytes { UUID(bytes: $0) })
                next[id] = UInt64(max(1, row[1] as Int64))
            }
        }
        var done = 0
        for origin in try store.origins() {
            guard done < limit else { break }
            var from = next[origin] ?? 1
            while done < limit {
                var batch: [Event] = []
                let room = min(Self.batchEventsMax, limit - done)
                try reader.forEachEvent(origin: origin, from: Seq(from)) { e in
                    batch.append(e)
                    return batch.count < room
                }
                guard let last = batch.last else { break }
                try write(batch, origin: origin, through: last.seq.rawValue)
                done += batch.count
                from = last.seq.rawValue + 1
                if batch.count < room { break }
            }
        }
        caughtUp.withLock { $0 = done < limit }
        return done
    }

    private let caughtUp = Locked(false)

    /// Whether the last catch-up reached the end of the log (false until one has).
    public var isCaughtUp: Bool { caughtUp.withLock { $0 } }

    /// Events the index holds.
    public func indexedEvents() throws -> UInt64 {
        try db.read { db in UInt64(max(0, try Int64.fetchOne(db, sql: "SELECT coalesce(sum(events), 0) FROM origins") ?? 0)) }
    }

    private func write(_ batch: [Event], origin: ReplicaID, through last: UInt64) throws {
        let originBlob = Data(origin.rawValue.bytes)
        var hours: [Int64: Int64] = [:]
        try db.write { db in
            let insert = try db.cachedStatement(sql: "INSERT OR IGNORE INTO events(origin, seq, hlc, entity, entity_id, op, actor, event_id, fields) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
            var added: Int64 = 0
            for e in batch {
                try insert.execute(arguments: [originBlob, Int64(clamping: e.seq.rawValue), Self.key(e.hlc), Int64(e.entity.rawValue),
                                               Data(e.entityID.bytes), Int64(e.op.rawValue), e.actor,
                                               e.explicitEventID.map { Data($0.bytes) }, Self.fieldsText(e.fields)])
                if db.changesCount > 0 {
                    added += 1
                    hours[Int64(e.hlc.wallMillis / 3_600_000), default: 0] += 1
                }
            }
            for (hour, n) in hours {
                try db.execute(sql: "INSERT INTO buckets(origin, hour, events) VALUES (?, ?, ?) ON CONFLICT(origin, hour) DO UPDATE SET events = events + excluded.events",
                               arguments: [originBlob, hour, n])
            }
            try db.execute(sql: """
                INSERT INTO origins(origin, next_seq, events) VALUES (?, ?, ?)
                ON CONFLICT(origin) DO UPDATE SET next_seq = max(next_seq, excluded.next_seq), events = events + excluded.events
                """, arguments: [originBlob, Int64(clamping: last + 1), added])
        }
    }

    /// Characters of a text value the index keeps (a page shows no more): the rest is cut, with
    /// the full length noted, so that a note of megabytes costs the index a line.
    static let valueCharactersMax = Bounds.valueCharactersMax

    /// An event's fields as the pages show them: a JSON array of [name, value as text]. At most
    /// `Bounds.fieldsShownMax` fields are kept (then one more entry counts the rest), names cut
    /// at `Bounds.fieldNameCharactersMax` characters: an event of a million fields costs the
    /// index a line, not a megabyte, and its page a table row.
    static func fieldsText<Fields: Collection<Field>>(_ fields: Fields) -> String {
        var out = "["
        for (i, f) in fields.prefix(Bounds.fieldsShownMax).enumerated() {
            if i > 0 { out += "," }
            let name = f.name.count > Bounds.fieldNameCharactersMax ? String(f.name.prefix(Bounds.fieldNameCharactersMax)) + "…" : f.name
            out += "[" + JSON.string(name) + "," + JSON.string(display(f.value)) + "]"
        }
        if fields.count > Bounds.fieldsShownMax {
            out += ",[\"…\"," + JSON.string("\(fields.count - Bounds.fieldsShownMax) more fields (\(fields.count) in all)") + "]"
        }
        return out + "]"
    }

    static func display(_ v: FieldValue) -> String {
        switch v {
        case .null: return "null"
        case .integer(let i): return String(i)
        case .real(let d): return String(d)
        case .boolean(let b): return b ? "true" : "false"
        case .text(let t):
            guard t.count > valueCharactersMax else { return t }
            return String(t.prefix(valueCharactersMax)) + "… (\(t.count) characters in all)"
        }
    }

    /// Reads `fieldsText`; a value that does not parse shows as such (the index is derived
    /// data, checked at open, but never trusted to be well formed).
    static func fields(_ text: String) -> [(name: String, value: String)] {
        guard let parsed = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String]] else {
            return [("(unreadable in the audit index)", "rebuild it: remove audit.sqlite")]
        }
        // At most the bound and the entry counting the rest, whatever the text holds.
        return parsed.prefix(Bounds.fieldsShownMax + 1).map { $0.count == 2 ? ($0[0], $0[1]) : ("(unreadable)", "") }
    }

    /// Events indexed, and events the log holds (from each origin's first held seq).
    public func progress() throws -> Progress {
        let status = try store.status()
        var total: UInt64 = 0
        let reader = LogReader(store: store)
        for o in status.origins {
            let floor = (try? reader.floor(origin: o.origin))??.lastSeq.rawValue ?? 0
            total += o.lastSeq.rawValue &- min(floor, o.lastSeq.rawValue)
        }
        let indexed = try db.read { db in try Int64.fetchOne(db, sql: "SELECT coalesce(sum(events), 0) FROM origins") ?? 0 }
        return Progress(indexed: UInt64(max(0, indexed)), total: total)
    }

    /// Runs `body` with a read-only view of the index.
    func read<T>(_ body: (Database) throws -> T) throws -> T { try db.read(body) }
}

/// What the inspector could not do, said plainly (shown on the page, with its status).
public struct InspectorError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public var status: Int
    public init(_ message: String, status: Int = 500) {
        self.message = message
        self.status = status
    }
    public var description: String { message }
}
