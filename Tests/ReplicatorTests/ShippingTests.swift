import Domain
import EventLog
@testable import LogbookServer
import Foundation
import TestSupport
import Projections
import Testing
@testable import Replicator

@Suite struct ShippingTests {
    typealias Dir = TempDir

    func mutations(_ n: Int, seed: UInt64) -> [Mutation] { Workload.mutations(n, seed: seed) }

    func frames(_ store: Store, _ origin: ReplicaID) throws -> [[UInt8]] { try Workload.frames(store, origin) }

    @Test func bundleCarriesFramesVerbatimAndImportingTwiceChangesNothing() throws {
        let dir = Dir()
        let a = try Store.create(at: dir.path + "/a"), b = try Store.create(at: dir.path + "/b")
        let pa = try ProjectedStore(store: a)
        for k in 0..<5 { _ = try pa.append(mutations(200 + k, seed: UInt64(k))) }
        let exported = try FrameBundle.export(store: a, to: dir.path + "/a.bundle")
        let expectedCursor = try a.cursor()
        #expect(exported.frames == 5 && exported.cursor == expectedCursor)
        let pb = try ProjectedStore(store: b)
        let r = try StoreSync.importBundle(dir.path + "/a.bundle", into: pb.appender)
        #expect(r.frames == 5 && r.events == 1010 && r.alreadyHeld == 0)
        try pb.projection.catchUp()
        #expect(try frames(b, a.replicaID) == (try frames(a, a.replicaID)))  // byte-identical to the author's
        #expect(try pb.projection.canonicalDump() == (try pa.projection.canonicalDump()))
        let again = try StoreSync.importBundle(dir.path + "/a.bundle", into: pb.appender)
        #expect(again.frames == 0 && again.alreadyHeld == 5)
        #expect(try b.cursor() == (try a.cursor().merged(with: b.cursor())))
        // An incremental bundle holds only what lies past the given cursor.
        _ = try pa.append(mutations(7, seed: 99))
        let delta = try FrameBundle.export(store: a, since: try b.cursor(), to: dir.path + "/delta.bundle")
        #expect(delta.frames == 1 && delta.events == 7)
        #expect(try StoreSync.importBundle(dir.path + "/delta.bundle", into: pb.appender).events == 7)
        try pa.close()
        try pb.close()
        #expect(try Verifier(store: b).run().isClean)
    }

    /// Two replicas edit concurrently and exchange logs both ways: identical projections.
    @Test func twoReplicasConvergeThroughPullAndPush() throws {
        let dir = Dir()
        let a = try Store.create(at: dir.path + "/a"), b = try Store.create(at: dir.path + "/b")
        let pa = try ProjectedStore(store: a), pb = try ProjectedStore(store: b)
        // The same seed makes both edit the same items (same ids), each with its own clock order.
        _ = try pa.append(mutations(300, seed: 4))
        _ = try pb.append(mutations(300, seed: 4))
        _ = try pb.append(mutations(120, seed: 5))
        _ = try StoreSync.pull(from: b, into: pa.appender)
        try pa.projection.catchUp()
        _ = try StoreSync.pull(from: a, into: pb.appender)
        try pb.projection.catchUp()
        #expect(try a.cursor() == (try b.cursor()))
        #expect(try pa.projection.canonicalDump() == (try pb.projection.canonicalDump()))
        // More edits after the exchange, then another round.
        _ = try pa.append(mutations(50, seed: 6))
        _ = try StoreSync.pull(from: a, into: pb.appender)
        try pb.projection.catchUp()
        #expect(try pa.projection.canonicalDump() == (try pb.projection.canonicalDump()))
        try pa.close()
        try pb.close()
        #expect(try Verifier(store: a).run().isClean)
        #expect(try Verifier(store: b).run().isClean)
    }

    @Test func damagedOrForgedFramesAreRefusedAndNothingIsWritten() throws {
        let dir = Dir()
        let a = try Store.create(at: dir.path + "/a"), b = try Store.create(at: dir.path + "/b")
        let wa = try LogAppender(store: a)
        for k in 0..<3 { _ = try wa.append(mutations(20, seed: UInt64(k))) }
        try wa.close()
        let good = try frames(a, a.replicaID)
        let wb = try LogAppender(store: b)
        func unchanged() throws { #expect(try b.cursor()[a.replicaID] == Seq(0)) }

        // One flipped bit anywhere in a frame.
        var flipped = good
        flipped[1][FrameHeader.size + 10] ^= 0x08
        #expect(throws: LogError.self) { try wb.receive(flipped) }
        try unchanged()

        // A rewritten payload with a recomputed checksum but a broken chain.
        var forged = good
        forged[1][60] ^= 0x01  // the previous-frame hash
        var crc = CRC32C()
        forged[1].withUnsafeBytes { p in
            crc.update(UnsafeRawBufferPointer(rebasing: p[0..<92]))
            crc.update(UnsafeRawBufferPointer(rebasing: p[96...]))
        }
        withUnsafeBytes(of: crc.final.littleEndian) { for i in 0..<4 { forged[1][92 + i] = $0[i] } }
        do {
            _ = try wb.receive(forged)
            Issue.record("a forged frame was accepted")
        } catch let e as LogError {
            // A signed origin's frame: its signature covers the link, and is checked first.
            #expect(e.description.contains("hash chain") || e.description.contains("signature does not verify"), "\(e)")
        }
        try unchanged()

        // A gap: the second frame without the first.
        do {
            _ = try wb.receive([good[1]])
            Issue.record("a gap was accepted")
        } catch let e as LogError {
            #expect(e.description.contains("gap"))
        }
        try unchanged()

        // A damaged bundle is refused before anything is written.
        _ = try FrameBundle.export(store: a, to: dir.path + "/a.bundle")
        var bytes = try Data(contentsOf: URL(fileURLWithPath: dir.path + "/a.bundle"))
        bytes[200] ^= 0x20
        try bytes.write(to: URL(fileURLWithPath: dir.path + "/bad.bundle"))
        #expect(throws: BundleError.self) { try StoreSync.importBundle(dir.path + "/bad.bundle", into: wb) }
        try unchanged()

        // The good frames, redelivered with duplicates, land once.
        let r = try wb.receive(good + good)
        #expect(r.frames == 3 && r.alreadyHeld == 3)
        #expect(try b.cursor()[a.replicaID] == Seq(60))
        try wb.close()
    }

    @Test func aStoresOwnLogCannotBeExtendedByOthers() throws {
        let dir = Dir()
        let a = try Store.create(at: dir.path + "/a")
        let w = try LogAppender(store: a)
        _ = try w.append(mutations(5, seed: 1))
        let held = try frames(a, a.replicaID)
        #expect(try w.receive(held).alreadyHeld == 1)  // what it already holds changes nothing
        try w.close()
    }
}
