import Foundation
import TestSupport
import Logbook
import Testing

/// The door's two types: what a burst may do, what a reader gives, and the one error type.
@Suite struct DoorTests {
    /// A burst's reader sees every change the burst appended so far, before the burst ends.
    @Test func aBurstReadsWhatItAppended() throws {
        let dir = TempDir()
        let writer = try LogbookWriter.open(at: dir.path + "/s", creating: true)
        defer { try? writer.close() }
        let (seen, created) = try writer.write { burst -> ([String], Int64) in
            let milk = try burst.create(Item(title: "milk"))
            let created = try #require(try burst.reader.item(milk))
            var item = created
            item.title = "oat milk"
            try burst.update(from: created, to: item)
            return (try burst.reader.items().compactMap(\.title), created.version)
        }
        #expect(seen == ["oat milk"])
        #expect(try writer.reader.items().map(\.version).allSatisfy { $0 > created })
    }

    /// A burst kept past its body holds no lock: every write through it is refused as closed,
    /// and nothing is appended.
    @Test func aBurstKeptPastItsBodyIsClosed() throws {
        let dir = TempDir()
        let writer = try LogbookWriter.open(at: dir.path + "/s", creating: true)
        defer { try? writer.close() }
        let kept = try writer.write { $0 }
        #expect(throws: LogbookError.self) { try kept.create(Item(title: "late")) }
        do {
            try kept.create(Item(title: "late"))
        } catch let e as LogbookError {
            #expect(e.code == .closed)
        }
        #expect(try writer.reader.status().log.totalEvents == 0)
        // The writer itself goes on.
        try writer.create(Item(title: "on time"))
        #expect(try writer.reader.items().compactMap(\.title) == ["on time"])
    }

    /// `tree(under:)` gives each item of a subtree with its depth, root first.
    @Test func aTreeCarriesDepths() throws {
        let dir = TempDir()
        let writer = try LogbookWriter.open(at: dir.path + "/s", creating: true)
        defer { try? writer.close() }
        let root = try writer.create(Item(title: "project"))
        let child = try writer.create(Item(parentID: root, title: "phase"))
        let grandchild = try writer.create(Item(parentID: child, title: "step"))
        _ = try writer.create(Item(title: "elsewhere"))
        let tree = try writer.reader.tree(under: root)
        #expect(tree.map(\.item.id) == [root, child, grandchild])
        #expect(tree.map(\.depth) == [0, 1, 2])
        #expect(try writer.reader.tree(under: child).map(\.depth) == [0, 1])
        #expect(try writer.reader.tree(under: UUID()).isEmpty)
    }

    /// What stops an observed query reaches the caller as a `LogbookError`, the query's own error
    /// kept as `underlying`.
    @Test func anObservedQueryEndsWithALogbookError() async throws {
        struct Refused: Error {}
        let dir = TempDir()
        let writer = try await LogbookWriter.open(at: dir.path + "/s", creating: true)
        defer { try? writer.close() }
        let stream = writer.reader.observe { reader -> Int in
            if try reader.items().isEmpty { return 0 }
            throw Refused()
        }
        var iterator = stream.makeAsyncIterator()
        #expect(try await iterator.next() == 0)
        try await writer.create(Item(title: "trigger"))
        do {
            _ = try await iterator.next()
            Issue.record("the stream went on after the query threw")
        } catch let e as LogbookError {
            #expect(e.code == .other)
            #expect(e.underlying is Refused)
        }
    }
}
