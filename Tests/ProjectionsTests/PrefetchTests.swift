import Foundation
import TestSupport
import GRDB
import Testing
@testable import EventLog
@testable import Projections

/// The rebuild's reading thread (`EventPrefetcher`): the same events in the same order as reading
/// in line, a stop or error of the caller ends it, and damage is thrown where in-line reading meets it.
@Suite struct PrefetchTests {
    /// A store of 300 item events in frames of 40.
    func store(_ dir: TempDir) throws -> Store {
        let store = try Store.create(at: dir.path + "/s")
        let appender = try LogAppender(store: store)
        for k in 0..<30 {
            _ = try appender.append((0..<10).map { i in
                Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("t\(k)-\(i)"))])
            })
        }
        try appender.close()
        return store
    }

    func inLine(_ store: Store, _ work: [(ReplicaID, Seq)]) -> ([Event], Error?) {
        var out: [Event] = []
        do {
            for (o, from) in work { try LogReader(store: store).forEachEvent(origin: o, from: from) { out.append($0); return true } }
        } catch {
            return (out, error)
        }
        return (out, nil)
    }

    @Test func eventsComeInTheOrderReadingInLineGives() throws {
        let dir = TempDir()
        let store = try store(dir)
        let o = store.replicaID
        // The same origin twice (from two places) checks that work items are read one after another.
        let work = [(o, Seq(1)), (o, Seq(295)), (o, Seq(301))]
        let (expected, error) = inLine(store, work)
        #expect(error == nil)
        #expect(expected.count == 306)
        for (depth, batch) in [(1, 1), (2, 7), (8, 4096)] {
            var got: [Event] = []
            try EventPrefetcher.run(reader: LogReader(store: store), work: work, depth: depth, batchEvents: batch) { got.append($0) }
            #expect(got == expected, "depth \(depth), batches of \(batch)")
        }
    }

    struct Stop: Error {}

    @Test func anErrorOfTheCallerStopsTheReaderAndIsThrown() throws {
        let dir = TempDir()
        let store = try store(dir)
        var seen = 0
        #expect(throws: Stop.self) {
            try EventPrefetcher.run(reader: LogReader(store: store), work: [(store.replicaID, Seq(1))], depth: 1, batchEvents: 3) { _ in
                seen += 1
                if seen == 10 { throw Stop() }
            }
        }
        #expect(seen == 10)
    }

    @Test func damageIsThrownAfterTheEventsBeforeIt() throws {
        let dir = TempDir()
        let store = try store(dir)
        let o = store.replicaID
        let path = store.directory(o).segmentPath(Seq(1))
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        bytes[bytes.count / 2] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: path))
        let (expected, inLineError) = inLine(store, [(o, Seq(1))])
        let inLineFailure = try #require(inLineError as? LogError)
        var got: [Event] = []
        do {
            try EventPrefetcher.run(reader: LogReader(store: store), work: [(o, Seq(1))], depth: 2, batchEvents: 5) { got.append($0) }
            Issue.record("damage was not reported")
        } catch let e as LogError {
            #expect(e.description == inLineFailure.description)
        }
        #expect(got == expected)
        #expect(!got.isEmpty && got.count < 300)
    }
}

/// The rebuild binds every text of a row from one buffer: each value must come back exactly.
@Suite struct RebuildValueTests {
    /// Closes `w`, rebuilds its store's projection and expects the same tables as `w` held.
    func rebuiltAfter(_ w: ProjectedStore, _ store: Store) throws -> Projection {
        let incremental = try w.projection.canonicalDump()
        try w.close()
        try Projection.rebuild(store: store)
        let p = try Projection(store: store)
        #expect(try p.canonicalDump() == incremental)
        return p
    }

    @Test func textsOfEveryShapeComeBackExactlyAfterARebuild() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let w = try ProjectedStore(store: store)
        let long = String(repeating: "long é 🙂 ", count: 20_000)
        let texts = ["", "a", "nul\u{0}inside", "ünïcödé 🙂 ✓", long, "'); DROP TABLE items; --"]
        let ids = texts.map { _ in UUID() }
        _ = try w.append(zip(ids, texts).map { id, t in
            Mutation(entity: .item, op: .create, entityID: id, fields: [
                Field("title", .text(t)), Field("notes", .text(t + t)), Field("sort_order", .integer(-7)), Field("priority", .integer(3)),
            ])
        })
        _ = try w.append([Mutation(entity: .item, op: .delete, entityID: ids[1])])
        let p = try rebuiltAfter(w, store)
        defer { try? p.close() }
        for (id, t) in zip(ids, texts) {
            // Compared as bytes: GRDB reads text as a C string, which ends at a NUL.
            let row = try #require(try p.database.read { try Row.fetchOne($0, sql: "SELECT hex(title), hex(notes), sort_order, deleted_at, created_at, modified_at FROM items WHERE id = ?", arguments: [id.lowercasedString]) })
            func hex(_ s: String) -> String { s.utf8.map { String(format: "%02X", $0) }.joined() }
            #expect(row[0] as String? == hex(t))
            #expect(row[1] as String? == hex(t + t))
            #expect(row["sort_order"] as Int? == -7)
            #expect((row["created_at"] as String?)?.count == 24 && (row["modified_at"] as String?)?.count == 24)
            #expect((row["deleted_at"] as String? != nil) == (id == ids[1]))
        }
    }

    /// A rebuild writes a table of more than `Projector.pipelinedRows` rows through the second
    /// thread (`RowBatch`es laid out ahead): the same rows, byte for byte, as written in line by
    /// small incremental flushes, across batch boundaries, with texts of every shape, NULLs,
    /// deletes and rows made of several events.
    @Test func aTableWrittenThroughTheSecondThreadIsTheSameAsWrittenInLine() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let w = try ProjectedStore(store: store)
        let texts = ["", "a", "nul\u{0}inside", "ünïcödé 🙂 ✓", String(repeating: "long é ", count: 200), "'); DROP TABLE items; --"]
        let n = Projector.pipelinedRows * 2 + Projector.rowsPerBatch / 2 + 1
        let ids = (0..<n).map { _ in UUID() }
        var batch: [Mutation] = []
        for (i, id) in ids.enumerated() {
            var fields = [Field("title", .text(texts[i % texts.count]))]
            if i % 3 == 0 { fields.append(Field("notes", .text(texts[(i / 3) % texts.count] + "\(i)"))) }
            if i % 5 == 0 { fields.append(Field("priority", .integer(Int64(i % 4)))) }
            batch.append(Mutation(entity: .item, op: .create, entityID: id, fields: fields))
            if i % 7 == 0 { batch.append(Mutation(entity: .item, op: .update, entityID: id, fields: [Field("sort_order", .integer(Int64(-i)))])) }
            if i % 11 == 0 { batch.append(Mutation(entity: .item, op: .delete, entityID: id)) }
            // Small appends: each flush writes few rows, in line.
            if batch.count >= 500 { _ = try w.append(batch); batch.removeAll() }
        }
        if !batch.isEmpty { _ = try w.append(batch) }
        let p = try rebuiltAfter(w, store)
        defer { try? p.close() }
        let stored = try p.database.read { db in
            try Row.fetchAll(db, sql: "SELECT id, hex(title) FROM items").map { ($0[0] as String, $0[1] as String) }
        }
        #expect(stored.count == n)
        let titles = Dictionary(uniqueKeysWithValues: stored)
        for (i, id) in ids.enumerated() where i % 97 == 0 || i == n - 1 {
            #expect(titles[id.lowercasedString] == texts[i % texts.count].utf8.map { String(format: "%02X", $0) }.joined())
        }
    }

    /// `Handoff`, which both second threads use: items in order; an error of the consumer stops
    /// the producer, which is joined; the producer's error comes after the items before it.
    @Test func theHandoffStopsItsProducerAndPassesItsErrorOn() throws {
        var got: [Int] = []
        try Handoff<Int>.run(name: "test", depth: 2, produce: { hand, _ in
            for i in 0..<1_000 { guard hand(i) else { return } }
        }, consume: { got.append($0) })
        #expect(got == Array(0..<1_000))

        final class Count: @unchecked Sendable {
            let lock = NSLock()
            var made = 0
            var stopped = false
        }
        let count = Count()
        got = []
        #expect(throws: PrefetchTests.Stop.self) {
            try Handoff<Int>.run(name: "test", depth: 1, produce: { hand, _ in
                for i in 0..<1_000_000 {
                    count.lock.withLock { count.made += 1 }
                    guard hand(i) else { count.lock.withLock { count.stopped = true }; return }
                }
            }, consume: { i in
                got.append(i)
                if i == 5 { throw PrefetchTests.Stop() }
            })
        }
        // Joined before `run` returned: what it saw is final, and it stopped well short.
        #expect(got == Array(0...5))
        #expect(count.lock.withLock { count.stopped && count.made < 10 })

        got = []
        #expect(throws: PrefetchTests.Stop.self) {
            try Handoff<Int>.run(name: "test", depth: 3, produce: { hand, _ in
                for i in 0..<4 { _ = hand(i) }
                throw PrefetchTests.Stop()
            }, consume: { got.append($0) })
        }
        #expect(got == [0, 1, 2, 3])
    }
}


/// What a merging thread is done with is freed on `FreeAside`'s queue, every time: the caller
/// keeps no reference that could be the last (a closure's copy raced the caller's and often lost).
@Suite struct FreeAsideTests {
    /// Records the thread its deinit runs on.
    final class Tracked: @unchecked Sendable {
        let done: @Sendable (pthread_t) -> Void
        init(_ done: @escaping @Sendable (pthread_t) -> Void) { self.done = done }
        deinit { done(pthread_self()) }
    }

    final class Threads: @unchecked Sendable {
        let lock = NSLock()
        var freedOn: [pthread_t] = []
        let freed = DispatchSemaphore(value: 0)
        func note(_ t: pthread_t) {
            lock.withLock { freedOn.append(t) }
            freed.signal()
        }
        var all: [pthread_t] { lock.withLock { freedOn } }
    }

    @Test func aValueReleasedAsideIsFreedOnTheQueueEveryTime() {
        let threads = Threads()
        let me = pthread_self()
        for _ in 0..<300 {
            // A value holding the object (as a flush's rows hold their texts).
            var value = [Tracked { threads.note($0) }]
            value.reserveCapacity(2)
            FreeAside.release(consume value)
        }
        for _ in 0..<300 { threads.freed.wait() }
        #expect(threads.all.count == 300)
        #expect(threads.all.allSatisfy { pthread_equal($0, me) == 0 })
    }

    /// As a Handoff loop does: the caller still holds the item when it retires it, and lets it
    /// go a moment later (by then a queue handed the item would long have dropped its copy).
    @Test func aRetiredObjectIsKeptUntilTheNextAndFreedOnTheQueue() {
        let threads = Threads()
        let me = pthread_self()
        let retired = FreeAside.Retirer<Tracked>()
        for k in 0..<40 {
            let item = Tracked { threads.note($0) }
            retired.retire(item)
            usleep(1_000)
            if k == 0 {
                // The first is held until the next comes: nothing freed yet.
                #expect(threads.freed.wait(timeout: .now() + .milliseconds(20)) == .timedOut)
            }
            withExtendedLifetime(item) {}
        }
        for _ in 0..<39 { threads.freed.wait() }
        #expect(threads.all.count == 39)
        retired.finish()
        threads.freed.wait()
        #expect(threads.all.count == 40)
        #expect(threads.all.allSatisfy { pthread_equal($0, me) == 0 })
    }

    /// A fill's merged batches: kept, up to a total weight, until merging is done; those past
    /// the bound are freed one step late as usual; all on the queue.
    @Test func retiredObjectsAreKeptUpToTheirWeightThenFreedOnRelease() {
        let threads = Threads()
        let me = pthread_self()
        let kept = FreeAside.Later<Tracked>()
        let retired = FreeAside.Retirer<Tracked>(keeping: kept, keepMax: 10)
        // Weights 3, 3, 3, 3, 1, 1: the first three fit (9), the fourth does not (12 > 10) and
        // is freed, the fifth fits (10); the sixth is the one still held.
        for weight in [3, 3, 3, 3, 1, 1] {
            let item = Tracked { threads.note($0) }
            retired.retire(item, weight: weight)
            withExtendedLifetime(item) {}
        }
        threads.freed.wait()
        #expect(threads.freed.wait(timeout: .now() + .milliseconds(50)) == .timedOut)
        #expect(threads.all.count == 1)
        retired.finish()
        threads.freed.wait()
        #expect(threads.all.count == 2)
        kept.release()
        for _ in 0..<4 { threads.freed.wait() }
        #expect(threads.all.count == 6)
        #expect(threads.all.allSatisfy { pthread_equal($0, me) == 0 })
    }

    /// A bulk fill's rows: kept while the indexes are built and the fill commits, then all
    /// freed on the queue; what is still kept when the holder ends is freed there too.
    @Test func keptValuesAreFreedOnlyOnReleaseAndOnTheQueue() {
        let threads = Threads()
        let me = pthread_self()
        let later = FreeAside.Later<[Tracked]>()
        for _ in 0..<10 { later.keep([Tracked { threads.note($0) }, Tracked { threads.note($0) }]) }
        #expect(threads.freed.wait(timeout: .now() + .milliseconds(50)) == .timedOut)
        #expect(threads.all.isEmpty)
        later.release()
        for _ in 0..<20 { threads.freed.wait() }
        later.release()  // nothing left: frees nothing twice
        #expect(threads.freed.wait(timeout: .now() + .milliseconds(20)) == .timedOut)
        do {
            let ending = FreeAside.Later<[Tracked]>()
            ending.keep([Tracked { threads.note($0) }])
        }
        threads.freed.wait()
        #expect(threads.all.count == 21)
        #expect(threads.all.allSatisfy { pthread_equal($0, me) == 0 })
    }
}
