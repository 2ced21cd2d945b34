import EventLog
import Foundation
import Replicator

/// How to open a store.
public struct LogbookOptions: Sendable {
    /// Seconds to wait while another process holds the writer lock (a server between pushes,
    /// a command line tool) before giving up with `LogbookError` `.locked`.
    public var lockWait: Double = 2
    /// Whether appends and received frames are projected at once. False leaves the
    /// projection behind until `replay()` (for bulk loads).
    public var project = true
    /// Told how projecting goes while opening and after large appends: (events done, events to do).
    public var progress: (@Sendable (Int, Int) -> Void)?
    /// Told what recovery repaired each time the store is opened for writing (at open, and
    /// by a pull or push that takes the lock for a moment).
    public var recovered: (@Sendable (RecoveryReport) -> Void)?
    /// Options with the defaults.
    public init(lockWait: Double = 2, project: Bool = true, progress: (@Sendable (Int, Int) -> Void)? = nil,
                recovered: (@Sendable (RecoveryReport) -> Void)? = nil) {
        self.lockWait = lockWait
        self.project = project
        self.progress = progress
        self.recovered = recovered
    }
}

/// Which side of a conflict to keep.
public enum ConflictSide: String, Sendable {
    /// The value written by this replica (or, when neither side is this replica's, the value shown now).
    case local
    /// The other value.
    case remote
}

/// What resolving a conflict appended.
public struct ConflictResolution: Sendable {
    /// The value kept, as JSON text.
    public var keptValue: String
    /// The field set again.
    public var field: String
    /// The event appended: it has seen both sides, so the conflict is marked resolved by it.
    public var append: AppendResult
}

/// What to list of the items.
public struct ItemQuery: Sendable, Equatable {
    /// Full-text search over titles and notes (prefix match, accents ignored).
    public var search: String?
    /// Only the subtree under this item (the item included), in depth order.
    public var under: UUID?
    /// Include soft-deleted items.
    public var includeDeleted = false
    /// At most this many items.
    public var limit = 1000
    /// A query; every item by default.
    public init(search: String? = nil, under: UUID? = nil, includeDeleted: Bool = false, limit: Int = 1000) {
        self.search = search
        self.under = under
        self.includeDeleted = includeDeleted
        self.limit = limit
    }
}

/// Every event of one entity in merge order, with the fields whose current value each set.
public struct EntityHistory: Sendable {
    /// One event, and the fields whose value now comes from it.
    public struct Entry: Sendable {
        /// The event.
        public var event: Event
        /// The fields whose current value this event set.
        public var holds: [String]
    }
    /// The entity kind.
    public var entity: Entity
    /// The entity's id.
    public var id: UUID
    /// Its events in merge order (hlc, origin, seq).
    public var entries: [Entry]
}

/// What to list of the log.
public struct EventFilter: Sendable {
    /// Only this origin.
    public var origin: ReplicaID?
    /// Only events of this entity kind.
    public var entity: Entity?
    /// Only events of this entity id.
    public var id: UUID?
    /// Only events at or after this time.
    public var since: Date?
    /// Only events before this time.
    public var until: Date?
    /// Start at this seq in each origin.
    public var fromSeq: UInt64 = 1
    /// A filter; every event by default.
    public init(origin: ReplicaID? = nil, entity: Entity? = nil, id: UUID? = nil, since: Date? = nil, until: Date? = nil, fromSeq: UInt64 = 1) {
        self.origin = origin
        self.entity = entity
        self.id = id
        self.since = since
        self.until = until
        self.fromSeq = fromSeq
    }
}
