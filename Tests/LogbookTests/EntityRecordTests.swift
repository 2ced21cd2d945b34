import Foundation
import GRDB
import Logbook
import TestSupport
import Testing

/// One typed struct per entity, made from DomainSchema: read with every column typed as
/// declared (UUID, Date, Int), written back as the difference between two versions.
@Suite struct EntityRecordTests {
    @Test func recordsReadBackTypedAsDeclared() async throws {
        let dir = TempDir()
        let writer = try await LogbookWriter.open(at: dir.path + "/s", creating: true)
        let parent = try await writer.create(Item(title: "Groceries", itemType: "project"))
        let due = Date(timeIntervalSince1970: 1_790_000_000.125)
        let id = try await writer.create(Item(parentID: parent, title: "Buy milk", dueAt: due, priority: 3, latitude: 52.5))
        let item = try #require(try await writer.reader.item(id))
        #expect(item.id == id)
        #expect(item.parentID == parent)
        #expect(item.title == "Buy milk")
        #expect(item.dueAt == due)
        #expect(item.priority == 3)
        #expect(item.latitude == 52.5)
        #expect(item.version > 0 && item.deletedAt == nil && item.modifiedAt != nil)
        #expect(item.undecodable.isEmpty)

        // Every entity kind reads the same way; occurrences are named by their contents.
        try await writer.append([.create(TimeEntry.Values(itemID: .set(id), startedAt: .set(due), durationSeconds: 90, note: "ran"))])
        let entries = try await writer.reader.all(TimeEntry.self)
        #expect(entries.count == 1 && entries[0].itemID == id && entries[0].startedAt == due && entries[0].durationSeconds == 90)
        let done = try await writer.create(Completion(itemID: id, originalOccurrenceDate: "2026-11-26", completedAt: due))
        let completion = try #require(try await writer.reader.record(Completion.self, done))
        #expect(completion.itemID == id && completion.originalOccurrenceDate == "2026-11-26" && completion.completedAt == due)

        let tag = try await writer.create(Tag(name: "errand"))
        try await writer.append([.tag(id, with: tag)])
        let items = try await writer.reader.items()
        let tags = try await writer.reader.tags(of: items)
        #expect(tags[id]?.map(\.name) == ["errand"] && tags[parent] == nil)
        #expect(try await writer.reader.all(ItemTag.self).map(\.tagID) == [tag])
        try writer.close()
    }

    @Test func aChangedRecordWritesOnlyWhatDiffers() async throws {
        let dir = TempDir()
        let writer = try await LogbookWriter.open(at: dir.path + "/s", creating: true)
        let id = try await writer.create(Item(title: "Draft", notes: "keep me", priority: 1))
        let old = try #require(try await writer.reader.item(id))
        var new = old
        new.title = "Final"
        new.priority = nil
        try await writer.update(from: old, to: new)
        let history = try await writer.reader.history(of: .item, id: id)
        #expect(history.entries.count == 2)
        #expect(history.entries.last?.event.fields.map(\.name).sorted() == ["priority", "title"])
        let read = try #require(try await writer.reader.item(id))
        #expect(read.title == "Final" && read.priority == nil && read.notes == "keep me" && read.version > old.version)

        // Nothing differs: nothing is appended.
        try await writer.update(from: read, to: read)
        #expect(try await writer.reader.history(of: .item, id: id).entries.count == 2)
        // Two different entities are not two versions of one.
        let other = try #require(try await writer.reader.item(try await writer.create(Item(title: "Other"))))
        await #expect(throws: LogbookError.self) { try await writer.update(from: read, to: other) }
        try writer.close()
    }

    /// The data's own text is hostile: a value stored before a rule existed (a real in an
    /// integer column, a timestamp that does not parse, an id that is no UUID) is named in
    /// `undecodable`, never trapped on or thrown; such a record is not written back.
    @Test func aValueOfAnotherShapeIsNamedNotTrapped() async throws {
        let row = Row([
            "id": "not-a-uuid", "parent_id": "0f7c63f2-4f0e-4a53-9a49-6b0e2d7a1c55", "title": 42, "priority": 2.5,
            "importance": 7.0, "due_at": "yesterday", "latitude": "north", "version": "three", "modified_at": "2026-11-26T05:00:00Z",
        ])
        let item = Item(row: row)
        #expect(item.undecodable == ["id", "title", "due_at", "priority", "latitude", "version"])
        #expect(item.title == nil && item.priority == nil && item.dueAt == nil && item.latitude == nil && item.version == 0)
        #expect(item.importance == 7 && item.parentID == UUID(uuidString: "0f7c63f2-4f0e-4a53-9a49-6b0e2d7a1c55"))
        #expect(item.modifiedAt == Date(timeIntervalSince1970: 1_795_669_200))

        let pair = ItemTag(row: Row(["id": UUID().uuidString, "item_id": nil, "tag_id": "x", "version": 1]))
        #expect(pair.undecodable == ["item_id", "tag_id"])
        let dir = TempDir()
        let writer = try await LogbookWriter.open(at: dir.path + "/s", creating: true)
        await #expect(throws: LogbookError.self) { _ = try await writer.create(item) }
        await #expect(throws: LogbookError.self) { _ = try await writer.create(pair) }
        #expect(try await writer.reader.status().log.totalEvents == 0)
        try writer.close()
    }

    /// What names an entity cannot change through an update; a change of nothing is no change.
    @Test func whatNamesAnEntityCannotBeEdited() async throws {
        let dir = TempDir()
        let writer = try await LogbookWriter.open(at: dir.path + "/s", creating: true)
        let item = try await writer.create(Item(title: "Water plants", recurrenceRule: "FREQ=WEEKLY"))
        let id = try await writer.create(Completion(itemID: item, originalOccurrenceDate: "2026-11-26"))
        let done = try #require(try await writer.reader.record(Completion.self, id))
        var moved = done
        moved.originalOccurrenceDate = "2026-11-27"
        #expect(throws: LogbookError.self) { _ = try Change.update(from: done, to: moved) }
        var noted = done
        noted.notes = "late"
        let change = try #require(try Change.update(from: done, to: noted))
        #expect(change.mutation.fields.map(\.name).contains("notes"))
        #expect(try Change.update(from: done, to: done) == nil)

        let tag = try await writer.create(Tag(name: "home"))
        try await writer.append([.tag(item, with: tag)])
        let pair = try #require(try await writer.reader.all(ItemTag.self).first)
        var other = pair
        other.tagID = UUID()
        #expect(throws: LogbookError.self) { _ = try Change.update(from: pair, to: other) }
        try writer.close()
    }

    /// Timestamps are written to the nearest millisecond, as they read back.
    @Test func datesAreWrittenToTheNearestMillisecond() {
        #expect(Timestamps.string(Date(timeIntervalSince1970: 1.0009)) == "1970-01-01T00:00:01.001Z")
        #expect(Timestamps.string(Date(timeIntervalSince1970: 1_795_669_200.1234)) == "2026-11-26T05:00:00.123Z")
        #expect(Timestamps.string(Date(timeIntervalSince1970: -1.5)).hasPrefix("1969-12-31T23:59:58"))
    }
}
