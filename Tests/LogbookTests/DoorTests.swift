import Foundation
import TestSupport
import Logbook
import EventLog
import Replicator
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

    /// A store made through the door signs what it appends: the writer and a reader in another
    /// process's place give the same public key, the one the replica id derives from.
    @Test func aNewStoreHasAPublicKeyItsIDDerivesFrom() async throws {
        let dir = TempDir()
        let writer = try await LogbookWriter.open(at: dir.path + "/s", creating: true)
        defer { try? writer.close() }
        _ = try await writer.create(Item(title: "signed"))
        let key = try #require(try writer.publicKey())
        #expect(key.replicaID == writer.replicaID)
        let reader = try await LogbookReader.open(at: dir.path + "/s")
        defer { try? reader.close() }
        #expect(try reader.publicKey() == key)
        #expect(ReplicaPublicKey(printable: key.printable) == key)
        #expect(try await reader.verify().0.signedFrames == 1)
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

    /// The code a call threw, or nil when it returned.
    static func code(_ body: () throws -> Void) -> LogbookError.Code? {
        do { try body(); return nil } catch let e as LogbookError { return e.code } catch { return .other }
    }

    /// Calls that would wait on the burst running on this thread are refused at once, not hung;
    /// a burst's reader is closed with the burst, never by itself.
    @Test func whatWouldWaitOnItsOwnBurstIsRefused() throws {
        let dir = TempDir()
        let writer = try LogbookWriter.open(at: dir.path + "/s", creating: true)
        defer { try? writer.close() }
        let bundle = dir.path + "/b.bundle"
        try writer.create(Item(title: "one"))
        _ = try writer.reader.exportBundle(to: bundle)
        let codes = try writer.write { burst in
            [Self.code { _ = try writer.importBundle(bundle) }, Self.code { _ = try writer.compact() },
             Self.code { try writer.create(Item(title: "nested")) }, Self.code { try burst.reader.close() }]
        }
        #expect(codes == [.invalid, .invalid, .invalid, .invalid])
        let kept = try writer.write { $0.reader }
        #expect(Self.code { _ = try kept.items() } == .closed)
        #expect(try writer.reader.items().compactMap(\.title) == ["one"])
    }

    /// After `close()`, every call of a writer or a reader is refused as closed: nothing writes.
    @Test func aClosedDoorRefusesEverything() async throws {
        let dir = TempDir()
        let writer = try await LogbookWriter.open(at: dir.path + "/s", creating: true)
        let other = try await LogbookWriter.open(at: dir.path + "/o", creating: true)
        defer { try? other.close() }
        try await other.create(Item(title: "theirs"))
        let bundle = dir.path + "/b.bundle"
        _ = try await other.reader.exportBundle(to: bundle)
        let reader = try await LogbookReader.open(at: dir.path + "/s")
        try writer.close()
        try reader.close()
        #expect(Self.code { _ = try writer.importBundle(bundle) } == .closed)
        #expect(Self.code { _ = try writer.compact(withoutPeers: true) } == .closed)
        #expect(Self.code { try writer.create(Item(title: "late")) } == .closed)
        #expect(Self.code { _ = try reader.cursor() } == .closed)
        #expect(Self.code { _ = try reader.status() } == .closed)
        do {
            _ = try await writer.sync(with: Peer(dir.path + "/o"))
            Issue.record("a closed writer synced")
        } catch let e as LogbookError {
            #expect(e.code == .closed)
        }
        let check = try await LogbookReader.open(at: dir.path + "/s")
        #expect(try await check.status().log.totalEvents == 0)
    }

    /// A bundle that is not one, or is damaged, is named as damaged; the store is unchanged.
    @Test func aDamagedBundleIsDamagedNotOther() throws {
        let dir = TempDir()
        let writer = try LogbookWriter.open(at: dir.path + "/s", creating: true)
        defer { try? writer.close() }
        let junk = dir.path + "/junk.bundle"
        try Data(repeating: 0x41, count: 64).write(to: URL(fileURLWithPath: junk))
        #expect(Self.code { _ = try writer.importBundle(junk) } == .damaged)
        #expect(Self.code { _ = try writer.importBundle(dir.path + "/missing.bundle") } == .io)
        #expect(try writer.reader.status().log.totalEvents == 0)
    }

    /// NDJSON streamed from a file descriptor lands in one append, or not at all.
    @Test func aBurstStreamsNDJSONFromAFile() throws {
        let dir = TempDir()
        let writer = try LogbookWriter.open(at: dir.path + "/s", creating: true)
        defer { try? writer.close() }
        func lines(_ text: String) throws -> Int32 {
            let file = dir.path + "/in-\(UUID().uuidString.prefix(6)).ndjson"
            try Data(text.utf8).write(to: URL(fileURLWithPath: file))
            return open(file, O_RDONLY)
        }
        let good = try lines("""
            {"entity":"item","op":"create","id":"00000000-0000-4000-8000-000000000001","fields":{"title":"a"}}
            {"entity":"item","op":"create","id":"00000000-0000-4000-8000-000000000002","fields":{"title":"b"}}

            """)
        defer { close(good) }
        let (r, failure) = try writer.write { try $0.appendNDJSON(from: good, name: "good.ndjson") }
        #expect(r.appended == 2 && failure == nil)
        let bad = try lines("""
            {"entity":"item","op":"create","id":"00000000-0000-4000-8000-000000000003","fields":{"title":"c"}}
            {"entity":"item","op":"create"}

            """)
        defer { close(bad) }
        #expect(Self.code { _ = try writer.write { try $0.appendNDJSON(from: bad, name: "bad.ndjson") } } == .invalidInput)
        #expect(try writer.reader.items().compactMap(\.title).sorted() == ["a", "b"])
    }

    /// `watch(from:)` hands over what another process's writer commits, as a stream.
    @Test func aReaderWatchesWhatAWriterCommits() async throws {
        let dir = TempDir()
        let writer = try await LogbookWriter.open(at: dir.path + "/s", creating: true)
        defer { try? writer.close() }
        try await writer.create(Item(title: "before"))
        let reader = try await LogbookReader.open(at: dir.path + "/s")
        defer { try? reader.close() }
        var changes = reader.watch(from: .empty).makeAsyncIterator()
        let first = try #require(try await changes.next())
        #expect(first.events.count == 1)
        try await writer.create(Item(title: "after"))
        let second = try #require(try await changes.next())
        #expect(second.events.count == 1)
        #expect(second.cursor.values.map(\.rawValue) == [2])
    }
}

/// An append refused because the store's own log is behind what it committed is told apart from
/// damage at the door (`.ownLog`): what brings the tail back is a pull, not a repair.
@Suite struct OwnLogDoorTests {
    @Test func anAppendToAStoreThatLostItsOwnTailIsRefusedAsOwnLog() throws {
        let dir = TempDir()
        let path = dir.path + "/s"
        do {
            let writer = try LogbookWriter.open(at: path, creating: true)
            try writer.create(Item(title: "kept"))
            try writer.close()
        }
        let fm = FileManager.default
        try fm.copyItem(atPath: path, toPath: dir.path + "/backup")
        do {
            let writer = try LogbookWriter.open(at: path)
            try writer.create(Item(title: "lost one"))
            try writer.create(Item(title: "lost two"))
            try writer.close()
        }
        // The log and projection restored from the backup; the event-id index, newer, remembers
        // the seqs the log no longer holds.
        let ids = try Data(contentsOf: URL(fileURLWithPath: path + "/eventids.sqlite"))
        try fm.removeItem(atPath: path)
        try fm.copyItem(atPath: dir.path + "/backup", toPath: path)
        for suffix in ["", "-wal", "-shm"] { try? fm.removeItem(atPath: path + "/eventids.sqlite" + suffix) }
        try ids.write(to: URL(fileURLWithPath: path + "/eventids.sqlite"))

        let writer = try LogbookWriter.open(at: path)
        defer { try? writer.close() }
        #expect(DoorTests.code { try writer.create(Item(title: "new")) } == .ownLog)
        do {
            try writer.create(Item(title: "new"))
        } catch let e as LogbookError {
            #expect(e.description.contains("were lost") && e.hint?.contains("pull") == true)
        }
        #expect(try writer.reader.items().compactMap(\.title) == ["kept"])
    }

    /// A sync that ends on the peer's frames of this store's own log (a fork) gets the code a
    /// bundle's frames of it get, not the code of a peer's bad answer.
    @Test func aSyncEndedByAnOwnLogRefusalIsOwnLogAtTheDoor() {
        #expect(LogbookError(wrapping: TransferFailure(.ownLog, "this replica's own log has forked")).code == .ownLog)
        #expect(LogbookError(wrapping: TransferFailure(.corrupt, "damaged")).code == .peer)
    }
}

/// A pull over HTTP (`Logbook.pull`, `evctl pull URL`) compares the server's frame at the
/// store's own tip: a store restored from a backup and written to as far as the server holds
/// its log is told its own log forked (a pull alone over HTTP skipped the compare at first).
@Suite struct OwnLogForkOverHTTPTests {
    @Test func aPullOverHTTPNamesAForkAsFarAsTheServersTip() async throws {
        let dir = TempDir()
        let a = dir.path + "/a"
        do {
            let book = try await Logbook.open(at: a, creating: true)
            _ = try await book.create(ItemValues(title: "kept"))
            try await book.close()
        }
        try FileManager.default.copyItem(atPath: a, toPath: dir.path + "/backup")
        let hub = try Store.create(at: dir.path + "/hub")
        try await withServer(hub) { url in
            do {
                let book = try await Logbook.open(at: a)
                _ = try await book.create(ItemValues(title: "lost"))
                _ = try await book.create(ItemValues(title: "lost too"))
                #expect(try await book.push(to: Peer(url)).pushedEvents == 3)
                try await book.close()
            }
            try FileManager.default.removeItem(atPath: a)
            try FileManager.default.copyItem(atPath: dir.path + "/backup", toPath: a)
            let book = try await Logbook.open(at: a)
            _ = try await book.create(ItemValues(title: "written after the restore"))
            _ = try await book.create(ItemValues(title: "and again"))
            let e = try await book.pull(from: Peer(url))
            let why = try #require(e.pulled?.ownLogRefused, "the fork went unseen")
            #expect(why.contains("this replica's own log has forked"), "\(why)")
            try await book.close()
        }
    }
}
