import Domain
import EventLog
import Foundation
import GRDB

/// One field's new value in a typed mutation: a value, or `clear` (null).
///
/// Literals work where the value type allows them: `ItemValues(title: "Buy milk", sortOrder: 2)`.
public enum Edit<Value: Sendable & Equatable>: Sendable, Equatable {
    /// Set the field to this value.
    case set(Value)
    /// Clear the field (it becomes null).
    case clear
}

extension Edit: ExpressibleByUnicodeScalarLiteral where Value == String {
    /// `"text"` sets a text field.
    public init(unicodeScalarLiteral value: String) { self = .set(value) }
}

extension Edit: ExpressibleByExtendedGraphemeClusterLiteral where Value == String {
    /// `"text"` sets a text field.
    public init(extendedGraphemeClusterLiteral value: String) { self = .set(value) }
}

extension Edit: ExpressibleByStringLiteral where Value == String {
    /// `"text"` sets a text field.
    public init(stringLiteral value: String) { self = .set(value) }
}

extension Edit: ExpressibleByIntegerLiteral where Value == Double {
    /// `2` sets a number field.
    public init(integerLiteral value: Int) { self = .set(Double(value)) }
}

extension Edit: ExpressibleByFloatLiteral where Value == Double {
    /// `2.5` sets a number field.
    public init(floatLiteral value: Double) { self = .set(value) }
}

extension Edit: ExpressibleByBooleanLiteral where Value == Bool {
    /// `true` sets a boolean field.
    public init(booleanLiteral value: Bool) { self = .set(value) }
}

/// The typed fields of one entity kind: a Swift value per entity, each field typed as
/// `DomainSchema` declares it. A field left nil is not part of the mutation (an update leaves
/// it as it is); `.clear` sets it to null.
public protocol EntityValues: Sendable {
    /// The entity kind these values belong to.
    static var entity: Entity { get }
    /// The fields set, as the log stores them.
    var fields: [Field] { get }
    /// The id every replica gives this entity when it is named by its contents (an item_tag by
    /// its pair, a completion by its item and occurrence); nil for entities with their own ids.
    var derivedID: UUID? { get }
}

extension EntityValues {
    /// The id the schema derives from these fields for entities named by their contents
    /// (`EntityIdentity`); nil for entities with ids of their own.
    public var derivedID: UUID? { DomainSchema.entities.first { $0.entity == Self.entity }?.derivedID(fields) }
}

/// A day, as the date fields of occurrences hold it: `YYYY-MM-DD`.
public typealias Day = String

/// Turns typed edits into log fields (timestamps as ISO 8601 UTC with milliseconds).
struct FieldList {
    var fields: [Field] = []

    mutating func add(_ name: String, _ edit: Edit<String>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, .text(v)))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func add(_ name: String, _ edit: Edit<UUID>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, .text(v.lowercasedString)))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func add(_ name: String, _ edit: Edit<Double>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, v == v.rounded() && abs(v) < 9e15 ? .integer(Int64(v)) : .real(v)))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func add(_ name: String, _ edit: Edit<Int>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, .integer(Int64(v))))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func add(_ name: String, _ edit: Edit<Bool>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, .boolean(v)))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func add(_ name: String, _ edit: Edit<Date>?) {
        guard let edit else { return }
        switch edit {
        case .set(let v): fields.append(Field(name, .text(Timestamps.string(v))))
        case .clear: fields.append(Field(name, .null))
        }
    }

    mutating func require(_ name: String, _ value: UUID) { fields.append(Field(name, .text(value.lowercasedString))) }
    mutating func require(_ name: String, _ value: Day) { fields.append(Field(name, .text(value))) }
}

/// ISO 8601 text of dates, in UTC with milliseconds, as the log keeps timestamps.
public enum Timestamps {
    /// `2026-11-23T21:20:16.123Z`.
    public static func string(_ date: Date) -> String {
        // To the nearest millisecond (the formatter cuts, so a date read back could come out a
        // millisecond early); dates before 1970 or past year 9999 through the formatter.
        let ms = (date.timeIntervalSince1970 * 1000).rounded()
        if ms >= 0 && ms < 253_402_300_800_000 { return ISOTime.string(millis: UInt64(ms)) }
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: date)
    }
}

// The entity types themselves (`Item` and `Item.Values`, …) are made from DomainSchema:
// Entities.swift. What follows is the sugar written by hand around them.

extension ItemTag.Values {
    /// The pair (item, tag).
    public init(item: UUID, tag: UUID) { self.init(itemID: item, tagID: tag) }
}

extension Link.Values {
    /// A link from one item to another.
    public init(from: UUID, to: UUID, kind: Edit<String>? = nil, weight: Edit<Double>? = nil, label: Edit<String>? = nil) {
        self.init(from: .set(from), to: .set(to), kind: kind, weight: weight, label: label)
    }
}

extension Completion.Values {
    /// The occurrence of `item` scheduled on `originalOccurrenceDate`.
    public init(item: UUID, originalOccurrenceDate: Day, occurrenceDate: Edit<Day>? = nil, completedAt: Edit<Date>? = nil,
                notes: Edit<String>? = nil) {
        self.init(itemID: item, originalOccurrenceDate: originalOccurrenceDate, occurrenceDate: occurrenceDate,
                  completedAt: completedAt, notes: notes)
    }
}

extension RecurrenceException.Values {
    /// The exception for the occurrence of `item` scheduled on `originalOccurrenceDate`.
    public init(item: UUID, originalOccurrenceDate: Day, kind: Edit<String>? = nil, rescheduledTo: Edit<Day>? = nil,
                dueAt: Edit<Date>? = nil, notes: Edit<String>? = nil) {
        self.init(itemID: item, originalOccurrenceDate: originalOccurrenceDate, kind: kind, rescheduledTo: rescheduledTo,
                  dueAt: dueAt, notes: notes)
    }
}

/// One entity as the projection holds it, every column typed as `DomainSchema` declares it
/// (`Item`, `Tag`, …). Read it, change a copy, and write the difference back:
///
/// ```swift
/// var item = try reader.item(id)!
/// let old = item
/// item.title = "Buy oat milk"
/// try writer.update(from: old, to: item)
/// ```
public protocol EntityRecord: Sendable, Equatable, Identifiable, FetchableRecord where ID == UUID {
    /// The record's edit form.
    associatedtype Values: EntityValues
    /// The entity kind the record holds.
    static var entity: Entity { get }
    /// The entity's id.
    var id: UUID { get }
    /// When it was soft-deleted; nil while it is live.
    var deletedAt: Date? { get }
    /// Columns whose stored value is not what the schema declares.
    var undecodable: [String] { get }
    /// Every field the record holds, as values for a create.
    var values: Values { get }
    /// The edits that turn `old` into this record.
    func changes(from old: Self) -> Values
}

extension Edit {
    /// `.set(value)`, or `.clear` for nil.
    public init(_ value: Value?) { self = value.map { .set($0) } ?? .clear }
}

/// Reads one row's columns as the types the schema declares. Total: a missing column is nil; a
/// value of another type or shape is nil and its column is listed in `undecodable`.
struct RecordRow {
    let row: Row
    var undecodable: [String] = []

    init(_ row: Row) { self.row = row }

    private func value(_ c: String) -> DatabaseValue.Storage? {
        guard row.hasColumn(c) else { return nil }
        let v: DatabaseValue = row[c]
        if case .null = v.storage { return nil }
        return v.storage
    }

    private mutating func bad<T>(_ c: String) -> T? {
        if !undecodable.contains(c) { undecodable.append(c) }
        return nil
    }

    mutating func text(_ c: String) -> String? {
        switch value(c) {
        case nil: return nil
        case .string(let s)?: return s
        default: return bad(c)
        }
    }

    mutating func uuid(_ c: String) -> UUID? {
        guard row.hasColumn(c) else { return nil }
        guard case .string(let s)? = value(c) else { return value(c) == nil ? nil : bad(c) }
        return UUIDText.parse(s) ?? bad(c)
    }

    mutating func date(_ c: String) -> Date? {
        guard let v = value(c) else { return nil }
        guard case .string(let s) = v, let ms = ISOTime.parse(s) else { return bad(c) }
        return Date(timeIntervalSince1970: Double(ms) / 1000)
    }

    mutating func day(_ c: String) -> Day? {
        guard let v = value(c) else { return nil }
        guard case .string(let s) = v, ISOTime.parse(s, dateOnly: true) != nil else { return bad(c) }
        return s
    }

    mutating func int(_ c: String) -> Int? {
        switch value(c) {
        case nil: return nil
        case .int64(let i)?: return Int(exactly: i) ?? bad(c)
        case .double(let d)?: return Int(exactly: d) ?? bad(c)
        default: return bad(c)
        }
    }

    mutating func double(_ c: String) -> Double? {
        switch value(c) {
        case nil: return nil
        case .int64(let i)?: return Double(i)
        case .double(let d)?: return d
        default: return bad(c)
        }
    }

    mutating func bool(_ c: String) -> Bool? {
        switch value(c) {
        case nil: return nil
        case .int64(0)?: return false
        case .int64(1)?: return true
        default: return bad(c)
        }
    }

    /// A UUID the record cannot be without: the zero UUID, listed in `undecodable`, when absent.
    mutating func requiredUUID(_ c: String) -> UUID {
        if let u = uuid(c) { return u }
        _ = bad(c) as UUID?
        return UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
    }

    /// A day the record cannot be without: empty, listed in `undecodable`, when absent.
    mutating func requiredDay(_ c: String) -> Day {
        if let d = day(c) { return d }
        _ = bad(c) as Day?
        return ""
    }

    mutating func version() -> Int64 {
        switch value("version") {
        case .int64(let i)?: return i
        case nil: return 0
        default: _ = bad("version") as Int64?; return 0
        }
    }
}

/// One change to append: a typed mutation. Build it with `create`, `update`, `delete` or
/// `restore`; several land together, atomically, through `Logbook.append(_:)`.
public struct Change: Sendable, Equatable {
    /// The mutation as the log takes it.
    public var mutation: Mutation

    /// Wraps a mutation built by hand (its fields are checked when appended).
    public init(_ mutation: Mutation) { self.mutation = mutation }

    /// Creates an entity (or brings back one created before). The id is the values' derived id
    /// when the entity is named by its contents (item_tag, completion, recurrence_exception),
    /// else `id`, a new random one by default.
    public static func create<V: EntityValues>(_ values: V, id: UUID = UUID()) -> Change {
        Change(Mutation(entity: V.entity, op: .create, entityID: values.derivedID ?? id, fields: sorted(values.fields)))
    }

    /// Sets the fields `values` holds on entity `id`, leaving the others as they are.
    public static func update<V: EntityValues>(_ id: UUID, _ values: V) -> Change {
        Change(Mutation(entity: V.entity, op: .update, entityID: id, fields: sorted(values.fields)))
    }

    /// Soft-deletes an entity (the log keeps everything; `restore` brings it back).
    public static func delete(_ entity: Entity, _ id: UUID) -> Change {
        Change(Mutation(entity: entity, op: .delete, entityID: id))
    }

    /// Restores a soft-deleted entity.
    public static func restore(_ entity: Entity, _ id: UUID) -> Change {
        Change(Mutation(entity: entity, op: .restore, entityID: id))
    }

    /// Creates the entity a record made in code describes, with the record's id (or the id its
    /// contents derive).
    /// - Throws: `LogbookError` `.invalid` when the record lost a field that names it (its id, an
    ///   item_tag's pair, an occurrence's item and day: listed in `undecodable`).
    public static func create<R: EntityRecord>(_ record: R) throws -> Change {
        try writable(record)
        return create(record.values, id: record.id)
    }

    /// Sets the fields that differ between `old` and `new`, two versions of one record; nil when
    /// none does.
    /// - Throws: `LogbookError` `.invalid` when they are not one entity (ids differ), when what
    ///   names the entity differs (an item_tag's pair, an occurrence's item and day cannot
    ///   change: make another), or when `new` lost such a field (`undecodable`).
    public static func update<R: EntityRecord>(from old: R, to new: R) throws -> Change? {
        guard old.id == new.id else {
            throw LogbookError(.invalid, "update(from:to:) takes two versions of one \(R.entity.name): ids \(old.id.lowercasedString) and \(new.id.lowercasedString) differ")
        }
        try writable(new)
        let identity = identityFields(R.self)
        let before = old.values.fields.filter { identity.contains($0.name) }
        let after = new.values.fields.filter { identity.contains($0.name) }
        guard before == after else {
            throw LogbookError(.invalid, "\(R.entity.name) \(new.id.lowercasedString) is named by \(identity.sorted().joined(separator: " and ")), which cannot change",
                               hint: "delete it and create the one you mean")
        }
        let values = new.changes(from: old)
        guard values.fields.contains(where: { !identity.contains($0.name) }) else { return nil }
        return update(new.id, values)
    }

    /// The fields that name entities of `R`'s kind (empty for entities with ids of their own).
    static func identityFields<R: EntityRecord>(_: R.Type) -> Set<String> {
        Set(DomainSchema.entities.first { $0.entity == R.entity }?.fields.filter(\.isIdentity).map(\.name) ?? [])
    }

    /// Refuses a record that lost what names it.
    static func writable<R: EntityRecord>(_ record: R) throws {
        let names = identityFields(R.self).union(["id"])
        if let bad = record.undecodable.first(where: names.contains) {
            throw LogbookError(.invalid, "\(R.entity.name) \(record.id.lowercasedString): field \(bad) was not readable as stored, so the record cannot be written back")
        }
    }

    /// Tags an item.
    public static func tag(_ item: UUID, with tag: UUID) -> Change { create(ItemTagValues(item: item, tag: tag)) }

    /// Takes a tag off an item.
    public static func untag(_ item: UUID, from tag: UUID) -> Change {
        var m = Mutation(entity: .itemTag, op: .delete, entityID: FieldRules.itemTagID(item: item, tag: tag))
        m.fields = sorted(ItemTagValues(item: item, tag: tag).fields)
        return Change(m)
    }

    /// With an event id: appending the same change twice (a retry after a crash) appends it once.
    public func withEventID(_ id: UUID) -> Change {
        var c = self
        c.mutation.eventID = id
        return c
    }

    /// With the actor (user or device) the change is made on behalf of.
    public func by(_ actor: String) -> Change {
        var c = self
        c.mutation.actor = actor
        return c
    }

    static func sorted(_ fields: [Field]) -> [Field] { fields.sorted(by: Field.inNameOrder) }
}
