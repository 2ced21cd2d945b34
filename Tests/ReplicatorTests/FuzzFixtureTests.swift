import EventLog
@testable import LogbookServer
import Foundation
import Projections
import Testing
@testable import Replicator

/// Every input a fuzz target (or an adversarial test) found to trap the process is kept in
/// fixtures/fuzz/<target>/ and replayed here, through the same calls the target makes: each
/// must now give a typed error. `make fuzz` also feeds them to the fuzzers as seeds.
@Suite struct FuzzFixtureTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("fixtures/fuzz").path

    func inputs(_ target: String) -> [(String, [UInt8])] {
        let dir = Self.root + "/" + target
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
        return names.map { ($0, Array(FileManager.default.contents(atPath: dir + "/" + $0) ?? Data())) }
    }

    @Test func framesThatTrappedAreRefused() {
        let found = inputs("FuzzFrame")
        #expect(found.count >= 5)
        for (name, bytes) in found {
            bytes.withUnsafeBytes { p in
                #expect(!FrameInspector.crossCheck(p), "\(name) was accepted")
                #expect(throws: LogError.self, "\(name)") { try FrameInspector.events(in: p) }
                // The fuzz target's second pass: checksum made right (some inputs are then valid).
                FrameInspector.crossCheckWithCRCFixed(p)
            }
        }
    }

    @Test func pagesThatTrappedAreRefusedByReceive() throws {
        let dir = ShippingTests.Dir()
        let store = try Store.create(at: dir.path + "/s")
        var options = AppendOptions()
        options.clockDriftMaxMs = .max
        let appender = try LogAppender(store: store, options: options)
        defer { try? appender.close() }
        for (name, bytes) in inputs("FuzzPageReceive") {
            guard let page = try? FramePage.decode(bytes) else { continue }
            #expect(throws: LogError.self, "\(name)") { try appender.receive(page.frames) }
        }
        #expect(try store.cursor() == .empty)
    }

    @Test func cursorTokensThatTrappedAreRefused() {
        for (name, bytes) in inputs("FuzzCursor") {
            #expect(throws: CursorTokenError.self, "\(name)") { try ReplicationCursor(token: String(decoding: bytes, as: UTF8.self)) }
        }
    }

    @Test func bundlesSnapshotsAndSegmentsThatTrappedAreRefused() throws {
        let dir = ShippingTests.Dir()
        for (name, bytes) in inputs("FuzzBundle") {
            let file = dir.path + "/\(name).bundle"
            FileManager.default.createFile(atPath: file, contents: Data(bytes))
            #expect(throws: (any Error).self, "\(name)") { _ = try FrameBundle.check(file) }
        }
        for (name, bytes) in inputs("FuzzSnapshot") {
            let file = dir.path + "/\(name).sqlite"
            FileManager.default.createFile(atPath: file, contents: Data(bytes))
            #expect(throws: (any Error).self, "\(name)") { _ = try Snapshot.read(file) }
        }
        for (name, bytes) in inputs("FuzzStore") {
            let store = try Store.create(at: dir.path + "/store-\(name)")
            let origin = ReplicaID.random()
            try FileManager.default.createDirectory(atPath: store.path + "/log/\(origin)", withIntermediateDirectories: true)
            FileManager.default.createFile(atPath: store.path + "/log/\(origin)/00000000000000000001.seg", contents: Data(bytes))
            _ = try? Verifier(store: store).run()
            _ = try? LogAppender(store: store).close()
        }
    }
}
