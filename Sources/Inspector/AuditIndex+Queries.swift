import EventLog
import Foundation
import GRDB

/// An event as the index knows it: where it is in the log and what it is about.
public struct IndexedEvent: Sendable {
    public var origin: ReplicaID
    public var seq: Seq
    public var hlc: HLC
    public var entity: Entity
    public var entityID: UUID
    public var op: Op
    public var actor: String?
    public var eventID: UUID
    /// The fields it set, values as the pages show them (long text cut).
    public var fields: [(name: String, value: String)]
}

/// A place in merge order (hlc, origin, seq): where a page of the timeline starts.
public struct MergeKey: Sendable, Equatable, CustomStringConvertible {
    public var hlc: HLC
    public var origin: ReplicaID
    public var seq: Seq

    /// `HLC-ORIGIN-SEQ`, as it appears in a page's links.
    public var description: String { "\(hlc.rawValue)-\(origin)-\(seq.rawValue)" }

    public init(hlc: HLC, origin: ReplicaID, seq: Seq) {
        self.hlc = hlc
        self.origin = origin
        self.seq = seq
    }

    /// Parses `description`; nil for anything else.
    public init?(_ text: String) {
        guard text.utf8.count <= 80 else { return nil }
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        // The origin is a UUID (five dash-separated groups) between the clock and the seq.
        guard parts.count == 7, let h = UInt64(parts[0]), let s = UInt64(parts[6]), s >= 1,
              let o = ReplicaID(parts[1...5].joined(separator: "-")) else { return nil }
        self.init(hlc: HLC(rawValue: h), origin: o, seq: Seq(s))
    }

    init(_ e: IndexedEvent) { self.init(hlc: e.hlc, origin: e.origin, seq: e.seq) }
}

/// What the timeline shows: each filter matches exactly.
public struct TimelineFilter: Sendable, Equatable {
    public var origin: ReplicaID?
    public var entity: Entity?
    public var id: UUID?
    /// Events at or after, and before, these wall-clock milliseconds.
    public var sinceMillis: UInt64?
    public var untilMillis: UInt64?
    public init(origin: ReplicaID? = nil, entity: Entity? = nil, id: UUID? = nil, sinceMillis: UInt64? = nil, untilMillis: UInt64? = nil) {
        self.origin = origin
        self.entity = entity
        self.id = id
        self.sinceMillis = sinceMillis
        self.untilMillis = untilMillis
    }
}

extension AuditIndex {
    static func blob(_ u: UUID) -> Data { Data(u.bytes) }

    static func uuid(_ d: Data) -> UUID? {
        guard d.count == 16 else { return nil }
        return d.withUnsafeBytes { UUID(bytes: $0) }
    }

    private static func event(_ row: Row) -> IndexedEvent? {
        guard let o = uuid(row["origin"]), let id = uuid(row["entity_id"]) else { return nil }
        let seq = Seq(UInt64(max(1, row["seq"] as Int64)))
        let origin = ReplicaID(rawValue: o)
        let explicit: Data? = row["event_id"]
        return IndexedEvent(origin: origin, seq: seq, hlc: hlc(row["hlc"]),
                            entity: Entity(rawValue: UInt8(clamping: row["entity"] as Int64)), entityID: id,
                            op: Op(rawValue: UInt8(clamping: row["op"] as Int64)), actor: row["actor"],
                            eventID: explicit.flatMap(uuid) ?? Event.derivedEventID(origin: origin, seq: seq),
                            fields: fields(row["fields"]))
    }

    /// The timeline newest first: at most `limit` events before `before` (merge order), and
    /// whether there are more.
    public func timeline(_ f: TimelineFilter, before: MergeKey?, limit: Int) throws -> (events: [IndexedEvent], more: Bool) {
        var conditions: [String] = []
        var args: [any DatabaseValueConvertible] = []
        if let o = f.origin {
            conditions.append("origin = ?")
            args.append(Self.blob(o.rawValue))
        }
        if let e = f.entity {
            conditions.append("entity = ?")
            args.append(Int64(e.rawValue))
        }
        if let id = f.id {
            conditions.append("entity_id = ?")
            args.append(Self.blob(id))
        }
        if let s = f.sinceMillis {
            conditions.append("hlc >= ?")
            args.append(Self.key(HLC(wallMillis: min(s, HLC.wallMillisMax), counter: 0)))
        }
        if let u = f.untilMillis {
            conditions.append("hlc < ?")
            args.append(Self.key(HLC(wallMillis: min(u, HLC.wallMillisMax), counter: 0)))
        }
        if let b = before {
            conditions.append("(hlc, origin, seq) < (?, ?, ?)")
            args += [Self.key(b.hlc), Self.blob(b.origin.rawValue), Int64(clamping: b.seq.rawValue)]
        }
        let whereClause = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        // The index that walks the filter's rows in merge order, named so that the planner never
        // walks the whole log for a page of a rare kind or id.
        let index = f.id != nil ? "events_id_time" : f.entity != nil ? "events_entity_time" : f.origin != nil ? "events_origin_time" : "events_time"
        let sql = "SELECT * FROM events INDEXED BY \(index)\(whereClause) ORDER BY hlc DESC, origin DESC, seq DESC LIMIT ?"
        args.append(Int64(limit + 1))
        let rows = try read { db in try Row.fetchAll(db, sql: sql, arguments: StatementArguments(args)) }
        let events = rows.prefix(limit).compactMap(Self.event)
        return (events, rows.count > limit)
    }

    /// One entity's events in merge order, at most `limit` after `after`, and whether there are more.
    public func entityEvents(_ entity: Entity, _ id: UUID, after: MergeKey?, limit: Int) throws -> (events: [IndexedEvent], more: Bool) {
        var sql = "SELECT * FROM events INDEXED BY events_id_time WHERE entity_id = ? AND entity = ?"
        var args: [any DatabaseValueConvertible] = [Self.blob(id), Int64(entity.rawValue)]
        if let a = after {
            sql += " AND (hlc, origin, seq) > (?, ?, ?)"
            args += [Self.key(a.hlc), Self.blob(a.origin.rawValue), Int64(clamping: a.seq.rawValue)]
        }
        sql += " ORDER BY hlc, origin, seq LIMIT ?"
        args.append(Int64(limit + 1))
        let rows = try read { db in try Row.fetchAll(db, sql: sql, arguments: StatementArguments(args)) }
        return (rows.prefix(limit).compactMap(Self.event), rows.count > limit)
    }

    /// How many events one entity has.
    public func entityEventCount(_ entity: Entity, _ id: UUID) throws -> Int {
        try read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM events WHERE entity_id = ? AND entity = ?",
                             arguments: [Self.blob(id), Int64(entity.rawValue)]) ?? 0
        }
    }

    /// Events indexed per origin.
    public func originEvents() throws -> [ReplicaID: UInt64] {
        try read { db in
            var out: [ReplicaID: UInt64] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT origin, events FROM origins") {
                if let u = Self.uuid(row[0]) { out[ReplicaID(rawValue: u)] = UInt64(max(0, row[1] as Int64)) }
            }
            return out
        }
    }

    /// Events per origin per hour (hours since 1970), for the activity chart.
    public func hourly() throws -> [ReplicaID: [(hour: Int64, events: Int64)]] {
        try read { db in
            var out: [ReplicaID: [(Int64, Int64)]] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT origin, hour, events FROM buckets ORDER BY origin, hour") {
                if let u = Self.uuid(row[0]) { out[ReplicaID(rawValue: u), default: []].append((row[1], row[2])) }
            }
            return out
        }
    }
}

struct MergeKeyID: Hashable {
    var origin: ReplicaID
    var seq: UInt64
}
