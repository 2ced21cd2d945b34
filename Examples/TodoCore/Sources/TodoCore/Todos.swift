import Foundation
import Logbook

/// A to-do list kept in a Logbook store: the core of a small app, meant to be copied.
///
/// Every change is an event in the store's log; the list you read is the projection of that
/// log; another replica (a laptop, a phone, a hub) gets the changes by `sync`, and both end
/// with the same list whatever order things happened in.
public final class Todos: Sendable {
    /// One task as the app shows it.
    public struct Task: Sendable, Equatable, Identifiable {
        public var id: UUID
        public var title: String
        public var done: Bool
        /// Tag names, sorted.
        public var tags: [String]
    }

    /// Reads the store (never locks it); for anything this core does not wrap.
    public let reader: LogbookReader
    /// Writes the store, one burst at a time (nil when opened read-only).
    public let writer: LogbookWriter?

    /// Opens (or creates) the to-do store at `path`; with `readOnly`, only to read and watch it.
    /// Nothing stays locked: each change takes the store's writer lock for a moment, so the app,
    /// a `todo` command and an `evctl serve` can all write the same store.
    public init(path: String, readOnly: Bool = false) throws {
        if readOnly {
            reader = try LogbookReader.open(at: path)
            writer = nil
        } else {
            let w = try LogbookWriter.open(at: path, creating: true)
            writer = w
            reader = w.reader
        }
    }

    private func write() throws -> LogbookWriter {
        guard let writer else { throw LogbookError(.readOnly, "this to-do list was opened read-only") }
        return writer
    }

    /// Adds a task and returns its id.
    @discardableResult
    public func add(_ title: String) async throws -> UUID {
        try await write().create(Item(title: title, status: "inbox", itemType: "task"))
    }

    /// Marks a task done (or not done again).
    public func complete(_ id: UUID, _ done: Bool = true) async throws {
        try await write().update(id, ItemValues(status: .set(done ? "done" : "inbox"), completedAt: done ? .set(Date()) : .clear))
    }

    /// Renames a task.
    public func rename(_ id: UUID, to title: String) async throws {
        try await write().update(id, ItemValues(title: .set(title)))
    }

    /// Removes a task (the log keeps it; `restore` would bring it back).
    public func remove(_ id: UUID) async throws {
        try await write().delete(.item, id)
    }

    /// Tags a task, creating the tag the first time its name is used. The tag's id is derived
    /// from its name, so two replicas that make the same tag offline agree on it.
    public func tag(_ id: UUID, _ name: String) async throws {
        let tag = Todos.tagID(name)
        try await write().append([.create(Tag(id: tag, name: name)), .tag(id, with: tag)])
    }

    /// Every task not removed; with `matching`, only those whose title matches (full-text,
    /// prefix, accents ignored).
    public func tasks(matching search: String? = nil) throws -> [Task] {
        try Self.tasks(in: reader, matching: search)
    }

    static func tasks(in reader: LogbookReader, matching search: String?) throws -> [Task] {
        let items = try reader.items(ItemQuery(search: search)).filter { $0.itemType == "task" }
        let tags = try reader.tags(of: items)
        return items.map { i in
            Task(id: i.id, title: i.title ?? "", done: i.status == "done", tags: (tags[i.id] ?? []).compactMap(\.name).sorted())
        }
    }

    /// The task list now, then again every time it changes — whoever changed it: this app, a
    /// sync, another process. Feed a view from it (or from a `LiveQuery`).
    public func watchTasks() -> AsyncThrowingStream<[Task], any Error> {
        reader.observe { reader in try Self.tasks(in: reader, matching: nil) }
    }

    /// Exchanges changes with another replica: a path to its store, or the URL of an
    /// `evctl serve` (with its token). Returns (events pulled, events pushed).
    @discardableResult
    public func sync(with address: String, token: String? = nil) async throws -> (pulled: Int, pushed: Int) {
        let e = try await write().sync(with: Peer(address, token: token))
        return (e.pulledEvents, e.pushedEvents)
    }

    /// Closes the store.
    public func close() throws { try reader.close() }

    static func tagID(_ name: String) -> UUID {
        UUIDv5.make(namespace: UUID(uuidString: "0f7c63f2-4f0e-4a53-9a49-6b0e2d7a1c55")!, name: Array(name.lowercased().utf8))
    }
}
