import Domain
import EventLog
@testable import LogbookServer
import Foundation
import TestSupport
import Logging
import Projections
import Testing
@testable import Replicator

/// Any append ships, whatever its size: by path, by bundle and over HTTP, in both directions,
/// with pages and batches far smaller than the append (each transfer carries it over many).
@Suite(.serialized) struct LargeAppendTests {
    typealias Dir = ShippingTests.Dir

    /// A store whose log is one append of `frames` frames (one event each) or, with
    /// `payloadBytes`, of events carrying that many incompressible bytes each.
    func source(_ dir: Dir, events: Int, eventsPerFrame: Int, payloadBytes: Int = 0) throws -> Store {
        let s = try Store.create(at: dir.path + "/source")
        var o = AppendOptions()
        o.frameEventsMax = eventsPerFrame
        let w = try LogAppender(store: s, options: o)
        var rng = SplitMix(42)
        let mutations = (0..<events).map { i -> Mutation in
            var fields = [Field("title", .text("event \(i)"))]
            if payloadBytes > 0 {
                var raw = [UInt64](repeating: 0, count: payloadBytes * 3 / 32)
                for k in raw.indices { raw[k] = rng.next() }
                fields.append(Field("payload", .text(raw.withUnsafeBytes { Data($0) }.base64EncodedString())))
            }
            return Mutation(entity: .item, op: .create, entityID: UUID(), fields: fields)
        }
        let r = try w.append(mutations)
        #expect(r.appended == events)
        try w.close()
        return s
    }

    func frameCount(_ s: Store) throws -> (frames: Int, bytes: Int) {
        var n = 0, bytes = 0
        try LogReader(store: s).forEachFrame(origin: s.replicaID) { _, b in n += 1; bytes += b.count; return true }
        return (n, bytes)
    }

    func same(_ a: Store, _ b: Store) throws {
        #expect(try b.cursor() == (try a.cursor()))
        var fa: [[UInt8]] = [], fb: [[UInt8]] = []
        try LogReader(store: a).forEachFrame(origin: a.replicaID) { _, x in fa.append(Array(x)); return true }
        try LogReader(store: b).forEachFrame(origin: a.replicaID) { _, x in fb.append(Array(x)); return true }
        #expect(fa == fb)  // byte-identical to the author's
        #expect(try Verifier(store: b).run().isClean)
    }

    func ship(_ src: Store, _ dir: Dir, pageBytes: Int, items: Int) async throws {
        // By path: pull (a pull session over the store as a transport) and push (batches).
        let byPull = try Store.create(at: dir.path + "/by-pull")
        _ = try await Replication.pull(from: StoreTransport(store: src), store: byPull, limits: PageLimits(maxBytes: pageBytes))
        try same(src, byPull)
        let byPush = try Store.create(at: dir.path + "/by-push")
        _ = try StoreSync.ship(from: src, toPeer: byPush)
        try same(src, byPush)
        // By bundle.
        let bundle = dir.path + "/all.bundle"
        _ = try FrameBundle.export(store: src, to: bundle)
        let byBundle = try Store.create(at: dir.path + "/by-bundle")
        _ = try StoreSync.importBundle(bundle, to: byBundle)
        try same(src, byBundle)
        // Over HTTP: a pull from a server, and a push to one.
        let byHTTP = try Store.create(at: dir.path + "/by-http")
        try await withServer(src) { url in
            let t = try HTTPTransport(url: url)
            _ = try await Replication.pull(from: t, store: byHTTP, limits: PageLimits(maxBytes: pageBytes))
            await t.shutdown()
        }
        try same(src, byHTTP)
        let pushedTo = try Store.create(at: dir.path + "/pushed-to")
        try await withServer(pushedTo) { url in
            let t = try HTTPTransport(url: url)
            _ = try await Replication.push(from: src, to: t, limits: PageLimits(maxBytes: pageBytes))
            await t.shutdown()
        }
        try same(src, pushedTo)
        let p = try Projection(store: pushedTo)
        try p.catchUp()
        #expect(try p.items(limit: 5000).count == items)
        try p.close()
    }

    @Test func anAppendOfMoreThan1024FramesShipsEveryWay() async throws {
        let dir = Dir()
        let src = try source(dir, events: 1100, eventsPerFrame: 1)
        #expect(try frameCount(src).frames == 1100)
        try await ship(src, dir, pageBytes: 16 << 10, items: 1100)
    }

    @Test func anAppendOfMoreThan64MiBShipsEveryWay() async throws {
        let dir = Dir()
        let src = try source(dir, events: 280, eventsPerFrame: 1000, payloadBytes: FieldRules.textBytesMax - 1024)
        let (frames, bytes) = try frameCount(src)
        #expect(bytes > 64 << 20 && frames > 1)
        try await ship(src, dir, pageBytes: 8 << 20, items: 280)
    }
}
