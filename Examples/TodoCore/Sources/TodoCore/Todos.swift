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

    /// The store underneath, for anything this core does not wrap.
    public let book: Logbook

    /// Opens (or creates) the to-do store at `path` for reading and writing; with `readOnly`,
    /// only to read and watch it while another process (the app, a sync) writes.
    public init(path: String, readOnly: Bool = false) throws {
        book = try Logbook.open(at: path, access: readOnly ? .readOnly : .readWrite, creating: true)
    }

    /// Adds a task and returns its id.
    @discardableResult
    public func add(_ title: String) throws -> UUID {
        try book.create(ItemValues(title: .set(title), status: "inbox", itemType: "task"))
    }

    /// Marks a task done (or not done again).
    public func complete(_ id: UUID, _ done: Bool = true) throws {
        try book.update(id, ItemValues(status: .set(done ? "done" : "inbox"), completedAt: done ? .set(Date()) : .clear))
    }

    /// Renames a task.
    public func rename(_ id: UUID, to title: String) throws {
        try book.update(id, ItemValues(title: .set(title)))
    }

    /// Removes a task (the log keeps it; `restore` would bring it back).
    public func remove(_ id: UUID) throws {
        try book.delete(.item, id)
    }

    /// Tags a task, creating the tag the first time its name is used. The tag's id is derived
    /// from its name, so two replicas that make the same tag offline agree on it.
    public func tag(_ id: UUID, _ name: String) throws {
        let tag = Todos.tagID(name)
        try book.append([.create(TagValues(name: .set(name)), id: tag), .tag(id, with: tag)])
    }

    /// Every task not removed; with `matching`, only those whose title matches (full-text,
    /// prefix, accents ignored).
    public func tasks(matching search: String? = nil) throws -> [Task] {
        let items = try book.items(Logbook.ItemQuery(search: search)).filter { $0.itemType == "task" }
        let tags = try book.tags(of: items)
        return items.compactMap { i in
            guard let id = UUID(uuidString: i.id) else { return nil }
            return Task(id: id, title: i.title ?? "", done: i.status == "done", tags: (tags[i.id] ?? []).compactMap(\.name).sorted())
        }
    }

    /// The task list now, then again every time it changes — whoever changed it: this app, a
    /// sync, another process. Feed a view from it.
    public func watchTasks() -> AsyncThrowingStream<[Task], any Error> {
        book.observe { [self] _ in try self.tasks() }
    }

    /// Exchanges changes with another replica: a path to its store, or the URL of an
    /// `evctl serve` (with its token). Returns (events pulled, events pushed).
    @discardableResult
    public func sync(with address: String, token: String? = nil) async throws -> (pulled: Int, pushed: Int) {
        let e = try await book.sync(with: Peer(address, token: token))
        return (e.pulledEvents, e.pushedEvents)
    }

    /// Closes the store (lets its writer lock go).
    public func close() throws { try book.close() }

    static func tagID(_ name: String) -> UUID {
        UUIDv5.make(namespace: UUID(uuidString: "0f7c63f2-4f0e-4a53-9a49-6b0e2d7a1c55")!, name: Array(name.lowercased().utf8))
    }
}
