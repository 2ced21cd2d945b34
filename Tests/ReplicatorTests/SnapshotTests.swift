import EventLog
import Foundation
import Projections
import Testing
@testable import Replicator

@Suite struct SnapshotTests {
    @Test func snapshotIsTheProjectionAndTheLogPositionItCovers() throws {
        let dir = ShippingTests.Dir()
        let a = try Store.create(at: dir.path + "/a"), b = try Store.create(at: dir.path + "/b")
        let pa = try ProjectedStore(store: a), pb = try ProjectedStore(store: b)
        _ = try pa.append(ShippingTests().mutations(300, seed: 1))
        _ = try pb.append(ShippingTests().mutations(200, seed: 2))
        _ = try StoreSync.pull(from: b, into: pa.appender)
        try pa.projection.setSetting("theme", "dark")  // device-local: not in a snapshot
        let info = try Snapshot.make(pa, to: dir.path + "/snap.sqlite")
        let live = try pa.projection.canonicalDump()
        try pa.close()
        try pb.close()
        // The anchors are the ends of both logs, with the hash of each last frame.
        let reader = LogReader(store: a)
        for o in [a.replicaID, b.replicaID] {
            #expect(info.anchors[o] == (try reader.tip(origin: o, hashing: true)))
        }
        #expect(ReplicationCursor(info.anchors.mapValues(\.lastSeq)) == (try a.cursor()))
        #expect(try Snapshot.read(dir.path + "/snap.sqlite") == info)
        // Its rows are the projection's rows; app_settings stay behind.
        let copy = try Projection(store: a, path: dir.path + "/snap.sqlite")
        #expect(try copy.canonicalDump() == live)
        #expect(try copy.setting("theme") == nil)
        #expect(try copy.cursor() == (try a.cursor()).entries)
        try copy.close()
        // Something that is not a snapshot is refused by name.
        #expect { try Snapshot.read(Projection.path(for: a)) } throws: { String(describing: $0).contains("is not a snapshot") }
    }
}
