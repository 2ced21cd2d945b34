import Crypto
import Domain
import EventLog
import Foundation
import Projections

/// What `Logbook.importLegacy(from:)` did: per table the rows read and imported, the rows kept
/// aside and why, orphans, values kept under another name, and where the backup is.
public struct LegacyImportReport: Sendable, Codable, Equatable {
    public struct Table: Sendable, Codable, Equatable {
        /// Rows read, deleted ones included.
        public var read = 0
        /// Rows read that were deleted (deleted_at set): imported, and deleted.
        public var deleted = 0
        /// Rows that became entities.
        public var imported = 0
        /// Rows not imported (each listed in `keptAside`, up to `listedMax`).
        public var keptAside = 0
        /// Rows imported whose reference names a row the file does not hold.
        public var orphans = 0

        public init(read: Int = 0, deleted: Int = 0, imported: Int = 0, keptAside: Int = 0, orphans: Int = 0) {
            self.read = read
            self.deleted = deleted
            self.imported = imported
            self.keptAside = keptAside
            self.orphans = orphans
        }
    }
    /// A row not imported, and why.
    public struct Aside: Sendable, Codable, Equatable {
        public var table: String
        public var row: Int
        public var id: String?
        public var reason: String
    }
    /// A reference to a row the file does not hold (kept: the merge keeps orphans).
    public struct Orphan: Sendable, Codable, Equatable {
        public var table: String
        public var id: String
        public var field: String
        public var missing: String
    }
    /// A value imported under another field name, or at another time, and why.
    public struct Adjusted: Sendable, Codable, Equatable {
        public var table: String
        public var row: Int
        public var column: String
        public var to: String
        public var reason: String
    }

    public var file: String
    public var format: String
    public var sha256: String
    public var bytes: Int
    /// The byte-identical copy kept in the store.
    public var backup: String
    /// The origin the import's events belong to (one per file and importer version).
    public var origin: String
    /// Events appended now; 0 when the store already held this import.
    public var events: Int
    /// Events of this import the store already held (an earlier run).
    public var alreadyHeld: Int
    public var tables: [String: Table]
    public var keptAside: [Aside]
    public var orphans: [Orphan]
    public var adjusted: [Adjusted]
    /// Adjusted values in all (`adjusted` lists the first `listedMax`).
    public var adjustedCount: Int
    /// Device-local settings (app_settings) set here, and those left as this store had them.
    public var settingsImported: Int
    public var settingsKept: Int
    /// Tables (or JSON keys) the import does not carry, such as sync_metadata.
    public var leftBehind: [String]

    /// Lists are cut at this many entries (the counts are whole).
    public static let listedMax = 100

    package init(file: String, format: String, sha256: String, bytes: Int, backup: String, origin: String, events: Int,
                 alreadyHeld: Int, tables: [String: Table], keptAside: [Aside], orphans: [Orphan], adjusted: [Adjusted],
                 adjustedCount: Int, settingsImported: Int, settingsKept: Int, leftBehind: [String]) {
        self.file = file
        self.format = format
        self.sha256 = sha256
        self.bytes = bytes
        self.backup = backup
        self.origin = origin
        self.events = events
        self.alreadyHeld = alreadyHeld
        self.tables = tables
        self.keptAside = keptAside
        self.orphans = orphans
        self.adjusted = adjusted
        self.adjustedCount = adjustedCount
        self.settingsImported = settingsImported
        self.settingsKept = settingsKept
        self.leftBehind = leftBehind
    }
}

/// Turns a legacy app's data into events of an origin of its own (docs/IMPORT.md).
package struct LegacyImporter {
    /// Changing how rows map to events changes this, and with it the origin: an import made by
    /// another mapping never forks the log of an earlier one.
    package static let mappingVersion = "logbook-legacy-import-1"
    package static let idNamespace = UUID(uuidString: "3c0a5f6e-8d1b-4b7a-9e2c-6f4d8a1b2c3e")!
    package static let droppedColumns: Set<String> = ["ck_record_name", "ck_change_tag", "ck_system_fields", "needs_push"]

    package let format: LegacyFormat
    package let fileTimeMillis: UInt64
    package let nowMillis: UInt64
    package var report: LegacyImportReport

    /// An event to be, with the time it carries.
    package struct Pending {
        package var millis: UInt64
        package var order: Int
        package var mutation: Mutation
    }
    package var pending: [Pending] = []
    package var settings: [(String, String)] = []
    private var order = 0
    /// Field names of the columns seen so far (a column's name is worked out once).
    private var fieldNames: [String: String] = [:]

    package init(format: LegacyFormat, fileTimeMillis: UInt64, nowMillis: UInt64, report: LegacyImportReport) {
        self.format = format
        self.fileTimeMillis = fileTimeMillis
        self.nowMillis = nowMillis
        self.report = report
    }

    // MARK: Ids

    /// A row's id as Logbook's: a UUID lowercased; an integer (or its digits) as the UUIDv5 of
    /// (table, id), so references made with it still meet.
    package static func uuid(_ v: LegacyValue, table: String) -> UUID? {
        switch v {
        case .integer(let i): return UUIDv5.make(namespace: idNamespace, name: Array("\(table):\(i)".utf8))
        case .text(let s):
            if s.utf8.count == 36, let u = UUIDText.parse(s) { return u }  // fast: no Foundation parse
            // Foundation's trim cost a twentieth of an import: only text that may need it goes there.
            let edges = (s.utf8.first, s.utf8.last)
            let plain = edges.0.map { $0 > 0x20 && $0 < 0x80 } == true && edges.1.map { $0 > 0x20 && $0 < 0x80 } == true
            let t = plain ? s : s.trimmingCharacters(in: .whitespaces)
            if let u = UUID(uuidString: t) { return u }
            if let i = Int64(t), t.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }) { return uuid(.integer(i), table: table) }
            return nil
        case .real(let d):
            guard let i = Int64(exactly: d) else { return nil }
            return uuid(.integer(i), table: table)
        default: return nil
        }
    }

    // MARK: Times

    /// Milliseconds since the epoch of a legacy time: ISO 8601 text (`T` or a space between date
    /// and time; no zone means UTC), Unix seconds (integer or real), or Unix milliseconds (an
    /// integer above 10^11).
    package static func millis(_ v: LegacyValue) -> UInt64? {
        switch v {
        case .integer(let i):
            guard i >= 0 else { return nil }
            return i > 100_000_000_000 ? UInt64(i) : UInt64(i).multipliedReportingOverflow(by: 1000).overflow ? nil : UInt64(i) * 1000
        case .real(let d):
            guard d.isFinite, d >= 0, d < 1e13 else { return nil }
            return d > 1e11 ? UInt64(d) : UInt64((d * 1000).rounded())
        case .text(let s):
            // Foundation's trim cost a twentieth of an import: only text that may need it goes there.
            let edges = (s.utf8.first, s.utf8.last)
            let plain = edges.0.map { $0 > 0x20 && $0 < 0x80 } == true && edges.1.map { $0 > 0x20 && $0 < 0x80 } == true
            let t = plain ? s : s.trimmingCharacters(in: .whitespaces)
            if !t.isEmpty, t.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E }) {
                if let i = Int64(t) { return millis(.integer(i)) }
                if let d = Double(t) { return millis(.real(d)) }
            }
            return isoMillis(t)
        default: return nil
        }
    }

    /// Milliseconds of ISO 8601 text as other apps write it: `ISOTime.parse`, lenient (a time
    /// with no zone is UTC; offsets `±HH:MM`, `±HHMM` or `±HH`); nil before 1970.
    package static func isoMillis(_ s: String) -> UInt64? {
        ISOTime.parse(s, lenient: true).flatMap { $0 >= 0 ? UInt64($0) : nil }
    }

    // MARK: Values

    /// A field's value as its kind holds it, or nil when it cannot be held without loss.
    package static func convert(_ v: LegacyValue, to kind: FieldKind?) -> FieldValue? {
        switch (kind, v) {
        case (_, .null): return .null
        case (.timestamp?, .text(let s)) where FieldRules.check("due_at", .text(s)) == nil: return .text(s)
        case (.timestamp?, _): return millis(v).map { .text(ISOTime.string(millis: $0)) }
        case (.date?, .text(let s)):
            if FieldRules.check("original_occurrence_date", .text(s)) == nil { return .text(s) }
            return millis(v).map { .text(String(ISOTime.string(millis: $0).prefix(10))) }
        case (.date?, _): return nil
        case (.integer?, .integer): return plain(v)
        case (.integer?, .real(let d)): return Int64(exactly: d).map { .integer($0) }
        case (.integer?, .boolean(let b)): return .integer(b ? 1 : 0)
        case (.integer?, .text(let s)): return Int64(s.trimmingCharacters(in: .whitespaces)).map { .integer($0) }
        case (.number?, .integer), (.number?, .real): return plain(v)
        case (.number?, .text(let s)):
            // Foundation's trim cost a twentieth of an import: only text that may need it goes there.
            let edges = (s.utf8.first, s.utf8.last)
            let plain = edges.0.map { $0 > 0x20 && $0 < 0x80 } == true && edges.1.map { $0 > 0x20 && $0 < 0x80 } == true
            let t = plain ? s : s.trimmingCharacters(in: .whitespaces)
            if let i = Int64(t) { return .integer(i) }
            return Double(t).flatMap { $0.isFinite ? .real($0) : nil }
        case (.boolean?, .boolean(let b)): return .boolean(b)
        case (.boolean?, .integer(let i)) where i == 0 || i == 1: return .boolean(i == 1)
        case (.boolean?, .text(let s)):
            switch s.lowercased() {
            case "true", "1", "yes": return .boolean(true)
            case "false", "0", "no": return .boolean(false)
            default: return nil
            }
        case (.text?, .text), (.text?, .integer), (.text?, .real), (.text?, .boolean), (.text?, .json), (.text?, .blob): return plain(v)
        case (nil, _): return plain(v)
        default: return nil
        }
    }

    /// Any value as a field value: text for bytes (base64) and JSON.
    package static func plain(_ v: LegacyValue) -> FieldValue {
        switch v {
        case .null: .null
        case .integer(let i): .integer(i)
        case .real(let d): d.isFinite ? .real(d) : .text("\(d)")
        case .text(let s): .text(s)
        case .boolean(let b): .boolean(b)
        case .blob(let d): .text(d.base64EncodedString())
        case .json(let s): .text(s)
        }
    }

    /// A column name as a field name: lowercase letters, digits and `_`, starting with a letter.
    package static func fieldName(_ column: String) -> String {
        var out = String(column.lowercased().unicodeScalars.map { s -> Character in
            (s >= "a" && s <= "z") || (s >= "0" && s <= "9") || s == "_" ? Character(s) : "_"
        })
        if out.first.map({ !($0 >= "a" && $0 <= "z") }) ?? true { out = "x" + out }
        return String(out.prefix(FieldRules.nameBytesMax))
    }

    // MARK: Rows

    /// Which table a reference column points into, per source table.
    package static func referenceTable(_ column: String, in table: String) -> String? {
        switch column {
        case "parent_id": table == "folders" ? "folders" : "items"
        case "item_id": "items"
        case "tag_id": "tags"
        case "folder_id": "folders"
        case "from_id", "to_id": "items"
        default: nil
        }
    }

    package mutating func aside(_ table: String, _ row: LegacyRow, id: String?, _ reason: String) {
        report.tables[table, default: .init()].keptAside += 1
        if report.keptAside.count < LegacyImportReport.listedMax {
            report.keptAside.append(.init(table: table, row: row.number, id: id, reason: reason))
        }
    }

    package mutating func adjusted(_ table: String, _ row: LegacyRow, _ column: String, to: String, _ reason: String) {
        report.adjustedCount += 1
        if report.adjusted.count < LegacyImportReport.listedMax {
            report.adjusted.append(.init(table: table, row: row.number, column: column, to: to, reason: reason))
        }
    }

    /// Maps one row of `table` to the entity `entity`: fields, times, and the events that carry them.
    /// - Parameters:
    ///   - renames: source columns read under another field name (seed 003's `type`).
    ///   - extra: fields the caller adds (a folder's item_type, notes gathered from another table).
    package mutating func row(_ row: LegacyRow, table: String, entity: Entity, renames: [String: String] = [:], extra: [Field] = []) -> UUID? {
        report.tables[table, default: .init()].read += 1
        let spec = DomainSchema.spec(for: entity)
        var fields: [String: FieldValue] = [:]
        var created: UInt64?, modified: UInt64?, deleted: UInt64?
        var id: UUID?
        let idColumn = row["id"]
        if entity == .itemTag {
            guard let i = row["item_id"].flatMap({ Self.uuid($0, table: "items") }), let t = row["tag_id"].flatMap({ Self.uuid($0, table: "tags") }) else {
                aside(table, row, id: idColumn.map(\.display), "item_id and tag_id must both name rows (a UUID or an integer id)")
                return nil
            }
            id = FieldRules.itemTagID(item: i, tag: t)
            if let idColumn, idColumn != .null { fields["legacy_id"] = Self.plain(idColumn) }
        } else {
            guard let idColumn, let u = Self.uuid(idColumn, table: table) else {
                aside(table, row, id: row["id"].map(\.display), row["id"] == nil ? "the row has no id column" : "its id is neither a UUID nor an integer")
                return nil
            }
            id = u
        }
        for (column, value) in row.columns where column != "id" && !Self.droppedColumns.contains(column) {
            switch column {
            case "created_at", "modified_at", "deleted_at":
                guard value != .null else { continue }
                guard let ms = Self.millis(value) else {
                    let to = column + "_legacy"
                    fields[to] = Self.plain(value)
                    adjusted(table, row, column, to: to, "\(value.display) is not a time (ISO 8601, Unix seconds or milliseconds)")
                    continue
                }
                switch column {
                case "created_at": created = ms
                case "modified_at": modified = ms
                default: deleted = ms
                }
                continue
            default: break
            }
            var name: String
            if let r = renames[column] {
                name = r
            } else if let n = fieldNames[column] {
                name = n
            } else {
                name = Self.fieldName(column)
                fieldNames[column] = name
            }
            if name == "id" || name == "legacy_id" && entity != .itemTag { name = "legacy_" + name }
            if let refTable = Self.referenceTable(column, in: table), spec.field(name) != nil || renames[column] != nil {
                if value == .null { fields[name] = .null; continue }
                guard let u = Self.uuid(value, table: refTable) else {
                    let to = name + "_legacy"
                    fields[to] = Self.plain(value)
                    adjusted(table, row, column, to: to, "\(value.display) is neither a UUID nor an integer id")
                    continue
                }
                fields[name] = .text(u.lowercasedString)
                continue
            }
            let kind = spec.field(name)?.kind ?? DomainSchema.fieldRules[name]?.kind
            var converted = Self.convert(value, to: kind)
            if converted == nil, entity == .item, name == "priority" || name == "importance" {
                converted = EventUpcasters.integerV2(Self.plain(value))  // "high", "!!": the words event schema version 1 took
            }
            if let v = converted, FieldRules.check(name, v) == nil {
                fields[name] = v
            } else {
                let to = name + "_legacy"
                fields[to] = Self.plain(value)
                adjusted(table, row, column, to: to, "\(value.display) is not what \(name) holds (\(kind.map { "\($0)" } ?? "a scalar"))")
            }
        }
        for f in extra { fields[f.name] = f.value }
        // Times: the row's own. Without any, the file's time (the data is at least that old).
        var modifiedAt = modified ?? created ?? fileTimeMillis
        var createdAt = min(created ?? modifiedAt, modifiedAt)
        if modifiedAt > nowMillis + 60_000 {
            adjusted(table, row, "modified_at", to: ISOTime.string(millis: nowMillis), "\(ISOTime.string(millis: modifiedAt)) is in the future: imported at the import's time")
            modifiedAt = nowMillis
            createdAt = min(createdAt, nowMillis)
        }
        if let c = created { fields["created_at"] = .text(ISOTime.string(millis: c)) }
        var m = Mutation(entity: entity, op: .create, entityID: id!, fields: fields.map { Field($0.key, $0.value) })
        FieldRules.normalize(&m)
        do {
            try FieldRules.validate(m, position: row.number)
        } catch {
            aside(table, row, id: id!.lowercasedString, error.message)
            return nil
        }
        report.tables[table, default: .init()].imported += 1
        append(createdAt, m)
        if modifiedAt > createdAt {
            append(modifiedAt, Mutation(entity: entity, op: .update, entityID: id!))
        }
        if let d = deleted {
            report.tables[table, default: .init()].deleted += 1
            append(max(min(d, nowMillis), modifiedAt), Mutation(entity: entity, op: .delete, entityID: id!))
        }
        return id
    }

    /// Maps `rows` of `table` as `row(_:table:entity:)` does one by one, in shares of
    /// `shareRows` mapped side by side on the machine's cores, each round's results taken back in
    /// row order: the report, the events and their order are those of mapping them one by one.
    /// - Parameter done: called on this thread after each round with the rows mapped so far.
    /// - Returns: the ids of the rows that became entities, in row order.
    package mutating func rows(_ rows: [LegacyRow], table: String, entity: Entity, shareRows: Int = 8_192, done: (Int) -> Void = { _ in }) -> [UUID] {
        let workers = max(1, min(ProcessInfo.processInfo.activeProcessorCount, 8))
        var ids: [UUID] = []
        ids.reserveCapacity(rows.count)
        guard workers > 1, rows.count > shareRows else {
            for (i, r) in rows.enumerated() {
                if let id = row(r, table: table, entity: entity) { ids.append(id) }
                if (i + 1) % shareRows == 0 { done(i + 1) }
            }
            done(rows.count)
            return ids
        }
        var start = 0
        while start < rows.count {
            let bounds = (0..<workers).map { w in
                min(rows.count, start + w * shareRows)..<min(rows.count, start + (w + 1) * shareRows)
            }.filter { !$0.isEmpty }
            var shares = bounds.map { _ in self.share() }
            var shareIDs = [[UUID]](repeating: [], count: bounds.count)
            shares.withUnsafeMutableBufferPointer { sharesBuffer in
                shareIDs.withUnsafeMutableBufferPointer { idsBuffer in
                    // Each worker touches only its own share and its own ids, and works on a
                    // copy of its share and a fresh id list on its own stack, put back once its
                    // rows are mapped: the id lists lie side by side in their array (8 bytes
                    // each), and an id appended per row wrote to the cache line holding its
                    // neighbour's (neighbouring shares can meet at their ends).
                    nonisolated(unsafe) let out = sharesBuffer
                    nonisolated(unsafe) let outIDs = idsBuffer
                    DispatchQueue.concurrentPerform(iterations: bounds.count) { w in
                        var share = out[w]
                        var mapped: [UUID] = []
                        mapped.reserveCapacity(bounds[w].count)
                        for r in rows[bounds[w]] {
                            if let id = share.row(r, table: table, entity: entity) { mapped.append(id) }
                        }
                        out[w] = share
                        outIDs[w] = mapped
                    }
                }
            }
            for (w, s) in shares.enumerated() {
                absorb(s)
                ids += shareIDs[w]
            }
            start = bounds.last!.upperBound
            done(start)
        }
        return ids
    }

    /// An importer for a share of a table's rows: this one's settings, nothing counted yet.
    private func share() -> LegacyImporter {
        var s = self
        s.report.tables = [:]
        s.report.keptAside = []
        s.report.adjusted = []
        s.report.adjustedCount = 0
        s.pending = []
        s.settings = []
        s.order = 0
        return s
    }

    /// Takes back what a share mapped, after what this one holds: counts added, lists cut as
    /// they would have been, its events ordered after this one's.
    private mutating func absorb(_ s: LegacyImporter) {
        for (name, t) in s.report.tables { report.tables[name, default: .init()].add(t) }
        report.keptAside += s.report.keptAside.prefix(max(0, LegacyImportReport.listedMax - report.keptAside.count))
        report.adjusted += s.report.adjusted.prefix(max(0, LegacyImportReport.listedMax - report.adjusted.count))
        report.adjustedCount += s.report.adjustedCount
        pending.reserveCapacity(pending.count + s.pending.count)
        for var p in s.pending {
            p.order += order
            pending.append(p)
        }
        order += s.order
        fieldNames.merge(s.fieldNames) { a, _ in a }
    }

    private mutating func append(_ millis: UInt64, _ m: Mutation) {
        pending.append(Pending(millis: millis, order: order, mutation: m))
        order += 1
    }

    /// Reports references to rows the file does not hold (the rows are imported all the same).
    package mutating func noteOrphans(ids: [String: Set<UUID>]) {
        let checks: [(Entity, String, String, String)] = [
            (.item, "items", "parent_id", "items"), (.itemTag, "item_tags", "item_id", "items"), (.itemTag, "item_tags", "tag_id", "tags"),
            (.timeEntry, "time_entries", "item_id", "items"),
        ]
        var byEntity: [Entity: [Mutation]] = [:]
        for p in pending where p.mutation.op == .create { byEntity[p.mutation.entity, default: []].append(p.mutation) }
        for (entity, table, field, target) in checks {
            for m in byEntity[entity] ?? [] {
                guard case .text(let t)? = m.fields.first(where: { $0.name == field })?.value,
                      let u = UUIDText.parse(t) ?? UUID(uuidString: t) else { continue }
                if ids[target]?.contains(u) == true { continue }
                let source = format == .v1SQLite && table == "items" && field == "parent_id" ? "items" : table
                report.tables[source, default: .init()].orphans += 1
                if report.orphans.count < LegacyImportReport.listedMax {
                    report.orphans.append(.init(table: source, id: m.entityID.lowercasedString, field: field, missing: t))
                }
            }
        }
    }
}

extension InputError {
    /// The error's text without the position (the report names the row itself).
    package var message: String { "\(self)" }
}

extension LegacyImportReport.Table {
    /// Adds another share's counts of the same table.
    package mutating func add(_ o: Self) {
        read += o.read
        deleted += o.deleted
        imported += o.imported
        keptAside += o.keptAside
        orphans += o.orphans
    }
}
