import EventLog
@testable import LogbookServer
import Foundation
import Testing
@testable import Replicator

/// Pins the bytes of a page and of a floor file (docs/PROTOCOL.md, docs/FORMAT.md). Set
/// LOGBOOK_WRITE_FIXTURES=1 to rewrite them after a deliberate format change.
@Suite struct ProtocolFixtureTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("fixtures").path
    static var writing: Bool { ProcessInfo.processInfo.environment["LOGBOOK_WRITE_FIXTURES"] == "1" }

    func pin(_ bytes: [UInt8], _ name: String) throws {
        let path = Self.root + "/replication/" + name
        if Self.writing {
            try FileManager.default.createDirectory(atPath: Self.root + "/replication", withIntermediateDirectories: true)
            try Data(bytes).write(to: URL(fileURLWithPath: path))
        }
        let committed = try #require(FileManager.default.contents(atPath: path), "missing fixture \(path)")
        #expect([UInt8](committed) == bytes, "\(name) differs from the committed fixture")
    }

    @Test func pageOfTheGoldenLog() throws {
        let golden = try Store.open(at: Self.root + "/log/golden-v1")
        let page = try FramePage.collect(from: golden, since: .empty, limits: PageLimits(maxBytes: 2000, maxFrames: 100))
        #expect(page.more && !page.frames.isEmpty)
        try pin(page.encoded(), "page-golden-first.bin")
        // The committed page decodes to the golden log's own frames.
        let committed = [UInt8](FileManager.default.contents(atPath: Self.root + "/replication/page-golden-first.bin") ?? Data())
        let decoded = try FramePage.decode(committed)
        #expect(decoded.complete && decoded.frames == page.frames && decoded.next == page.next)
        // The same page as a server streams it (version 2).
        try pin(page.encodedStreamed(), "page-golden-first-v2.bin")
        let streamed = try FramePage.decode([UInt8](FileManager.default.contents(atPath: Self.root + "/replication/page-golden-first-v2.bin") ?? Data()))
        #expect(streamed.complete && streamed.frames == page.frames && streamed.next == page.next && streamed.more)
    }

    @Test func floorFile() throws {
        let dir = ShippingTests.Dir()
        let store = try Store.create(at: dir.path + "/s", replicaID: ReplicaID("0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")!)
        let origin = ReplicaID("11111111-2222-4333-8444-555555555555")!
        let tip = LogTip(lastSeq: Seq(1234), lastHLC: HLC(wallMillis: 1_767_225_600_000, counter: 7), lastHash: FrameHash(bytes: Array(0..<32)))
        try store.writeFloor(tip, origin: origin)
        let bytes = [UInt8](FileManager.default.contents(atPath: dir.path + "/s/log/\(origin)/FLOOR") ?? Data())
        #expect(bytes.count == 60)
        try pin(bytes, "FLOOR")
        #expect(try LogReader(store: store).floor(origin: origin) == tip)
        #expect(try store.cursor()[origin] == Seq(1234))
        // A damaged floor is refused, never read as data.
        var bad = bytes
        bad[10] ^= 1
        try Data(bad).write(to: URL(fileURLWithPath: dir.path + "/s/log/\(origin)/FLOOR"))
        #expect { try LogReader(store: store).floor(origin: origin) } throws: { String(describing: $0).contains("floor file is damaged") }
    }
}
