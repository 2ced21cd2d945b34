import Foundation
import Observation
import TestSupport
import Domain
import Logbook
import Testing

/// Waits for the first element of `stream` that satisfies `ok`, or fails after `seconds`.
func first<T: Sendable>(_ stream: AsyncThrowingStream<T, any Error>, within seconds: Double, where ok: @escaping @Sendable (T) -> Bool) async throws -> T? {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask {
            for try await v in stream where ok(v) { return v }
            return nil
        }
        group.addTask {
            try await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
            return nil
        }
        let r = try await group.next()!
        group.cancelAll()
        return r
    }
}

@Suite struct LogbookTests {
    @Test func typedChangesAppendQueryAndExplainThemselves() throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/a", creating: true)
        let project = try book.create(ItemValues(title: "Garden", itemType: "project"))
        let seeds = try book.create(ItemValues(parentID: .set(project), title: "Buy seeds", status: "inbox", sortOrder: 2,
                                               dueAt: .set(Date(timeIntervalSince1970: 1_790_000_000))))
        let tag = try book.create(TagValues(name: "errands", color: "#30a46c"))
        let link = try book.create(ItemTagValues(item: seeds, tag: tag))
        #expect(link == FieldRules.itemTagID(item: seeds, tag: tag))
        try book.update(seeds, ItemValues(status: "done", dueAt: .clear))

        let found = try book.items(ItemQuery(search: "seed"))
        #expect(found.map(\.id) == [seeds.lowercasedString])
        #expect(found[0].status == "done" && found[0].dueAt == nil && found[0].sortOrder == 2)
        #expect(found[0].parentID == project.lowercasedString)
        #expect(try book.items(ItemQuery(under: project)).map(\.id) == [project, seeds].map(\.lowercasedString))
        #expect(try book.tags(of: found)[seeds.lowercasedString]?.map(\.name) == ["errands"])

        let history = try book.history(of: .item, id: seeds)
        #expect(history.entries.map(\.event.op) == [.create, .update])
        #expect(history.entries[1].holds == ["due_at", "status"])
        #expect(history.entries[0].holds.contains("title"))

        try book.delete(.item, seeds)
        #expect(try book.items(ItemQuery(search: "seed")).isEmpty)
        try book.restore(.item, seeds)
        #expect(try book.items(ItemQuery(search: "seed")).count == 1)
        #expect(try book.status().log.totalEvents == 7)
    }

    /// Seed 001's priority, importance and place, typed in and read back (they have no one-byte
    /// code in the format: they travel by name).
    @Test func priorityImportanceAndPlace() throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/a", creating: true)
        let id = try book.create(ItemValues(title: "Dentist", priority: .set(3), importance: .set(1), locationName: "Clinic",
                                            locationAddress: "1 Main St", latitude: 48.8566, longitude: 2.3522))
        let row = try #require(try book.item(id))
        #expect(row.priority == 3 && row.importance == 1 && row.locationName == "Clinic" && row.locationAddress == "1 Main St")
        #expect(row.latitude == 48.8566 && row.longitude == 2.3522)
        #expect(throws: InputError.self) { try book.append(ndjson: #"{"entity":"item","op":"update","id":"\#(id)","fields":{"priority":"high"}}"#) }
    }

    @Test func linksAreWrittenTypedAndFollowed() throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/a", creating: true)
        let a = try book.create(ItemValues(title: "Plan")), b = try book.create(ItemValues(title: "Book")), c = try book.create(ItemValues(title: "Go"))
        let ab = try book.create(LinkValues(from: a, to: b, kind: "SEQUENCE", weight: 1.5))
        _ = try book.create(LinkValues(from: b, to: c, kind: "SEQUENCE", label: "then"))
        _ = try book.create(LinkValues(from: c, to: a, kind: "LINK"))
        let reached = try book.linked(from: a, depth: 3)
        #expect(reached.map(\.id) == [b, c].map(\.lowercasedString) && reached.map(\.depth) == [1, 2])
        #expect(try book.linked(from: a, depth: 3, kinds: ["LINK"]).isEmpty)
        #expect(try book.linked(from: a, direction: .incoming).map(\.title) == ["Go"])
        try book.update(ab, LinkValues(weight: 2))
        #expect(try book.links(of: a).first { $0.id == ab.lowercasedString }?.weight == 2)
        try book.delete(.link, ab)
        #expect(try book.linked(from: a, depth: 3).isEmpty)
        #expect(throws: LogbookError.self) { try book.linked(from: a, depth: 0) }
        #expect(throws: InputError.self) { try book.create(LinkValues(kind: "LINK")) }  // a create names both ends
        #expect(try book.status().unread.isEmpty)
    }

    @Test func aRefusedChangeAppendsNothingAndSaysWhichAndWhere() throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/a", creating: true)
        let before = try book.cursor()
        let tooLong = String(repeating: "x", count: FieldRules.textBytesMax + 1)
        let changes: [Change] = [.create(ItemValues(title: "fine")), .create(ItemValues(title: .set(tooLong)))]
        #expect {
            try book.append(changes)
        } throws: { e in
            guard let e = e as? InputError else { return false }
            return e.line == 2 && e.field == "title" && e.description.hasPrefix("mutation 2")
        }
        // A field the schema types, given the wrong type through `extra`, and a bad name.
        #expect(throws: InputError.self) { try book.append([.create(ItemValues(extra: [Field("parent_id", .integer(3))]))]) }
        #expect(throws: InputError.self) { try book.append([.create(ItemValues(extra: [Field("Bad Name", .integer(3))]))]) }
        #expect(throws: InputError.self) { try book.append([.create(ItemValues(title: "x")).by("")]) }
        #expect(try book.cursor() == before)
        #expect(try book.items().isEmpty)
    }

    @Test func ndjsonAndTypedChangesMeetInOneLog() throws {
        let dir = TempDir()
        let book = try Logbook.open(at: dir.path + "/a", creating: true)
        let id = UUID()
        try book.append(ndjson: #"{"entity":"item","op":"create","id":"\#(id.uuidString)","fields":{"title":"From a script"}}"# + "\n")
        try book.update(id, ItemValues(notes: "and from the app"))
        let item = try #require(try book.item(id))
        #expect(item.title == "From a script" && item.notes == "and from the app")
        #expect(throws: InputError.self) { try book.append(ndjson: "{\"entity\":\"item\"}\n") }
    }

    @Test func readOnlyRefusesWritesAndFollowsAnotherWriter() async throws {
        let dir = TempDir()
        let path = dir.path + "/a"
        let writer = try await Logbook.open(at: path, creating: true)
        try await writer.create(ItemValues(title: "first"))
        let reader = try await Logbook.open(at: path, access: .readOnly)
        #expect(reader.behindAtOpen == 0)
        #expect {
            try reader.create(ItemValues(title: "nope"))
        } throws: { ($0 as? LogbookError)?.kind == .readOnly }
        // A second writer waits for the lock, then gives up with the error that says so.
        #expect {
            _ = try Logbook.open(at: path, options: LogbookOptions(lockWait: 0.1))
        } throws: { ($0 as? LogError)?.isLocked == true }

        let seen = reader.observeItems(search: "second")
        try await Task.sleep(nanoseconds: 50_000_000)
        let wait = Task { try await first(seen, within: 20) { !$0.isEmpty } }
        try await Task.sleep(nanoseconds: 100_000_000)
        try await writer.create(ItemValues(title: "second"))
        let items = try await wait.value
        #expect(items?.map(\.title) == ["second"])
        try await writer.close()
        try await reader.close()
    }

    @Test func observingRunsTheQueryOnlyWhenItCanChange() async throws {
        let dir = TempDir()
        let book = try await Logbook.open(at: dir.path + "/a", creating: true)
        let runs = Counter()
        let stream = book.observe { b -> [String] in
            runs.add()
            return try b.items().compactMap(\.title)
        }
        var it = stream.makeAsyncIterator()
        #expect(try await it.next() == [])
        try await book.create(TagValues(name: "home"))  // another kind: the query does not run
        try await book.create(ItemValues(title: "milk"))
        #expect(try await it.next() == ["milk"])
        #expect(runs.value == 2)
    }

    /// The tables a query reads are recorded as it runs: a query over items and their tags is
    /// woken by a tag renamed (no list of kinds to forget), and one over tags alone is not woken by
    /// items; what it reads through `read { db in }` counts the same.
    @Test func observingTracksTheTablesTheQueryReads() async throws {
        let dir = TempDir()
        let book = try await Logbook.open(at: dir.path + "/a", creating: true)
        let home = try await book.create(TagValues(name: "home"))
        let milk = try await book.create(ItemValues(title: "milk"))
        try await book.append([.tag(milk, with: home)])
        let withTags = book.observe { b -> [String] in
            let items = try b.items()
            let tags = try b.tags(of: items)
            return items.map { ($0.title ?? "") + ":" + (tags[$0.id] ?? []).compactMap(\.name).joined(separator: ",") }
        }
        let tagRuns = Counter()
        let tagNames = book.observe { b -> [String] in
            tagRuns.add()
            return try b.read { db in try String.fetchAll(db, sql: "SELECT name FROM tags ORDER BY name") }
        }
        var items = withTags.makeAsyncIterator(), tags = tagNames.makeAsyncIterator()
        #expect(try await items.next() == ["milk:home"])
        #expect(try await tags.next() == ["home"])

        try await book.update(home, TagValues(name: "house"))  // a tag only: the items query sees it
        #expect(try await items.next() == ["milk:house"])
        #expect(try await tags.next() == ["house"])
        try await book.create(ItemValues(title: "bread"))      // an item only: the tags query does not run
        #expect(Set(try await items.next() ?? []) == ["bread:", "milk:house"])
        try await book.create(TagValues(name: "away"))
        #expect(try await tags.next() == ["away", "house"])
        #expect(tagRuns.value == 3, "the tags query ran for an item")
    }

    /// `LiveQuery` is `@Observable`: observation tracking sees each new result, set on the actor
    /// the caller named; a result equal to the last is not set again.
    @Test func aLiveQueryIsAnObservableModelOnTheCallersActor() async throws {
        let dir = TempDir()
        let book = try await LogbookWriter.open(at: dir.path + "/a", creating: true)
        let screen = Screen()
        let model = LiveQuery(book.reader, initial: ["(loading)"], on: screen) { try $0.items().compactMap(\.title).sorted() }
        #expect(await screen.waitUntil(model) { $0 == [] } == [])
        try await book.create(ItemValues(title: "milk"))
        #expect(await screen.waitUntil(model) { $0 == ["milk"] } == ["milk"])
        try await book.create(TagValues(name: "home"))  // the query does not read tags
        try await book.create(ItemValues(title: "bread"))
        #expect(await screen.waitUntil(model) { $0.count == 2 } == ["bread", "milk"])
        #expect(await screen.updates(of: model) == 3)
        model.cancel()
    }

    /// A writer holds the lock only for a burst: between bursts another writer (here a Logbook
    /// opened for writing that does not wait at all, as `evctl append` or `serve` would) takes it;
    /// two writers' tasks interleave and every write lands; a reader, which never locks, reads
    /// while the lock is held and sees every commit.
    @Test func writersShareAStoreByBurstsAndReadersNeverLock() async throws {
        let dir = TempDir()
        let path = dir.path + "/shared/store"
        let first = try await LogbookWriter.open(at: path, creating: true)
        let second = try await LogbookWriter.open(at: path)
        let reader = try await LogbookReader.open(at: path)
        #expect(second.replicaID == first.replicaID)

        var titles = reader.observe { try $0.items().count }.makeAsyncIterator()
        #expect(try await titles.next() == 0)
        try await first.create(ItemValues(title: "from the first"))
        // Between bursts the lock is free: a writer that will not wait gets it at once.
        let other = try await Logbook.open(at: path, access: .readWrite, options: .init(lockWait: 0))
        try await other.create(ItemValues(title: "from another writer"))
        // While it holds the lock, the reader reads (the writers' next burst would wait).
        #expect(try await reader.items().count == 2)
        try await other.close()

        try await withThrowingTaskGroup(of: Void.self) { group in
            for (w, writer) in [first, second].enumerated() {
                group.addTask { for k in 0..<20 { try await writer.create(ItemValues(title: .set("w\(w)-\(k)"))) } }
            }
            try await group.waitForAll()
        }
        // One burst, several writes; then everything is projected for every reader.
        try await first.write { book in
            let tag = try book.create(TagValues(name: "batch"))
            let first = try #require(try book.reader.items().first?.id)
            try book.append([.tag(first, with: tag)])
        }
        #expect(try await reader.items().count == 42)
        while try await titles.next() != 42 {}
        #expect(try await reader.status().log.totalEvents == 44)
        try first.close(); try second.close(); try reader.close()
    }

    /// The reader and the writer throw one error type: a code to match on, the lower error kept.
    @Test func theDoorThrowsOneErrorWithMatchableCodes() async throws {
        let dir = TempDir()
        func code(_ body: () async throws -> Void) async -> (LogbookError.Code?, (any Error)?) {
            do { try await body(); return (nil, nil) } catch let e as LogbookError { return (e.code, e.underlying) } catch { return (.other, error) }
        }
        let missing = await code { _ = try await LogbookReader.open(at: dir.path + "/nothing") }
        #expect(missing.0 == .notAStore && missing.1 is LogError)

        let writer = try await LogbookWriter.open(at: dir.path + "/s", creating: true, options: .init(lockWait: 0))
        let bad = await code { try await writer.append(ndjson: "{\"entity\":\"item\",\"op\":\"create\"}\n") }
        #expect(bad.0 == .invalidInput && bad.1 is InputError)

        let holder = try await Logbook.open(at: dir.path + "/s", access: .readWrite)
        let locked = await code { try await writer.create(ItemValues(title: "waits")) }
        #expect(locked.0 == .locked && (locked.1 as? LogError)?.isLocked == true)
        try await holder.close()
        let unknown = await code { _ = try await writer.resolve(conflict: 42, keep: .local) }
        #expect(unknown.0 == .notFound)
        #expect(LogbookError.Code.locked.description == "locked")
        try writer.close()
    }

    /// What the review found: a write inside a write is refused (it would wait on itself), a
    /// query that also reads the log runs after every commit, and an empty path is no store.
    @Test func theDoorRefusesWhatWouldHangOrMiss() async throws {
        let dir = TempDir()
        let writer = try await LogbookWriter.open(at: dir.path + "/s", creating: true)
        await #expect(throws: LogbookError.self) {
            try await writer.write { _ in try writer.create(ItemValues(title: "inner")) }
        }
        #expect(try await writer.reader.items().isEmpty)

        // The cursor comes from the log, not the projection: the query is woken by an item.
        var seen = writer.reader.observe { r in [try r.cursor().origins.count, try r.tags().count] }.makeAsyncIterator()
        #expect(try await seen.next() == [0, 0])
        try await writer.create(ItemValues(title: "first"))
        #expect(try await seen.next() == [1, 0])

        await #expect(throws: LogbookError.self) { _ = try await LogbookWriter.open(at: "", creating: true) }
        try writer.close()
        await #expect(throws: LogbookError.self) { try await writer.create(ItemValues(title: "after close")) }
    }

    @Test func concurrentAppendsFromManyTasksAllLand() async throws {
        let dir = TempDir()
        let book = try await Logbook.open(at: dir.path + "/a", creating: true)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for t in 0..<8 {
                group.addTask {
                    for k in 0..<25 { try book.create(ItemValues(title: .set("task \(t)-\(k)"))) }
                }
            }
            try await group.waitForAll()
        }
        await #expect(try book.items().count == 200)
        await #expect(try book.status().log.totalEvents == 200)
    }

    @Test func syncWithAPathPeerConvergesResolvesAndRemembersThePeer() async throws {
        let dir = TempDir()
        let a = try await Logbook.open(at: dir.path + "/a", creating: true)
        let b = try await Logbook.open(at: dir.path + "/b", access: .readOnly, creating: true)
        try await b.close()
        let id = try await a.create(ItemValues(title: "shared"))
        let bPeer = Peer(dir.path + "/b")
        let e = try await a.sync(with: bPeer)
        #expect(e.pushedEvents == 1 && e.pulledEvents == 0)
        let remembered = try #require(try a.peers().first)
        #expect(remembered.name == dir.path + "/b" && remembered.pushedEvents == 1 && remembered.cursor != nil)

        // Both edit the title at once; after syncing both ways, one conflict, resolved from A.
        let bw = try await Logbook.open(at: dir.path + "/b")
        await #expect(try bw.item(id)?.title == "shared")
        try await bw.update(id, ItemValues(title: "from b"))
        try await bw.close()
        try await a.update(id, ItemValues(title: "from a"))
        try await a.sync(with: bPeer)
        let conflict = try await #require(try a.conflicts().first)
        #expect(conflict.field == "title")
        let r = try await a.resolve(conflict: conflict.id, keep: .local)
        #expect(r.keptValue == "\"from a\"")
        await #expect(try a.item(id)?.title == "from a")
        await #expect(try a.conflicts().isEmpty)
        #expect {
            try a.resolve(conflict: conflict.id, keep: .remote)
        } throws: { ($0 as? LogbookError)?.kind == .invalid }
        try await a.sync(with: bPeer)
        let bAgain = try await Logbook.open(at: dir.path + "/b", access: .readOnly)
        await #expect(try bAgain.item(id)?.title == "from a")
    }

    @Test func changesCarryTheEventsAndTheCursor() async throws {
        let dir = TempDir()
        let book = try await Logbook.open(at: dir.path + "/a", creating: true)
        var changes = book.changes().makeAsyncIterator()
        let id = try await book.create(ItemValues(title: "watched"))
        let change = try #require(await changes.next())
        #expect(change.events.map(\.entityID) == [id])
        #expect(change.cursor[book.replicaID] == Seq(1))
        #expect(change.touched[.item] == [id])
    }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func add() { lock.withLock { n += 1 } }
    var value: Int { lock.withLock { n } }
}

/// Stands for a UI's actor: reads a `LiveQuery` where it is set, and waits for a value through
/// observation tracking (registered on the actor, so no change falls between check and wait).
actor Screen {
    func waitUntil<V: Equatable & Sendable>(_ model: LiveQuery<V>, _ ok: @Sendable (V) -> Bool) async -> V {
        while !ok(model.value) {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                withObservationTracking { _ = model.value } onChange: { c.resume() }
            }
        }
        return model.value
    }

    func updates<V: Equatable & Sendable>(of model: LiveQuery<V>) -> Int { model.updates }
}
