import Domain
import Foundation
import TestSupport
import GRDB
import Testing
@testable import EventLog
@testable import Projections

/// Tombstone purge (issue 11 §5): only when asked; a late update never resurrects a purged row; a
/// later restore brings it back whole, from the log; a rebuild purges the same rows.
@Suite struct PurgeTests {
    let a = UUID(uuidString: "a0000000-0000-4000-8000-000000000001")!
    let b = UUID(uuidString: "b0000000-0000-4000-8000-000000000002")!

    /// Ships every frame of `from` that `to` lacks, and projects them.
    func ship(_ from: Store, to w: ProjectedStore) throws {
        var frames: [[UInt8]] = []
        try LogReader(store: from).forEachFrame(origin: from.replicaID) { _, bytes in frames.append(Array(bytes)); return true }
        _ = try w.receive(frames)
        try w.catchUp()
    }

    func row(_ p: Projection, _ id: UUID) throws -> Row? {
        try p.database.read { try Row.fetchOne($0, sql: "SELECT * FROM items WHERE id = ?", arguments: [id.lowercasedString]) }
    }

    @Test func purgedRowsStayGoneUntilARestoreBringsThemBackWhole() throws {
        let dir = TempDir()
        let sa = try Store.create(at: dir.path + "/a"), sb = try Store.create(at: dir.path + "/b")
        let wa = try ProjectedStore(store: sa), wb = try ProjectedStore(store: sb)
        defer { try? wa.close(); try? wb.close() }
        _ = try wa.append([
            Mutation(entity: .item, op: .create, entityID: a, fields: [Field("notes", .text("keep me")), Field("title", .text("old"))]),
            Mutation(entity: .item, op: .create, entityID: b, fields: [Field("title", .text("live"))]),
        ])
        try ship(sa, to: wb)
        _ = try wa.append([Mutation(entity: .item, op: .delete, entityID: a)])
        let deletedAt = try #require(try row(wa.projection, a)?["deleted_at"] as String?)

        // Nothing is purged unless asked; then only rows deleted before the cutoff.
        #expect(try wa.projection.purge(deletedBefore: "2000-01-01T00:00:00.000Z").isEmpty)
        #expect(try row(wa.projection, a) != nil)
        let purged = try wa.projection.purge(deletedBefore: ISOTime.string(millis: UInt64(Date().timeIntervalSince1970 * 1000) + 1000))
        #expect(purged == ["items": 1])
        #expect(try row(wa.projection, a) == nil && (try row(wa.projection, b)) != nil)
        #expect(try wa.projection.items(includeDeleted: true).map(\.id) == [b.lowercasedString])
        #expect(try wa.projection.verifyDeep() == nil, "a rebuild aside purges the same rows")
        #expect(deletedAt.count > 0)

        // A late update (written on b before it saw the delete, or after) never brings it back.
        _ = try wb.append([Mutation(entity: .item, op: .update, entityID: a, fields: [Field("title", .text("edited on b"))])])
        try ship(sb, to: wa)
        #expect(try row(wa.projection, a) == nil)
        #expect(try wa.projection.verifyDeep() == nil)

        // A restore after the delete brings it back, with every field the log holds.
        try ship(sa, to: wb)
        _ = try wb.append([Mutation(entity: .item, op: .restore, entityID: a)])
        try ship(sb, to: wa)
        let back = try #require(try row(wa.projection, a))
        #expect(back["deleted_at"] as String? == nil && back["notes"] as String? == "keep me")
        #expect(back["title"] as String? == "edited on b")
        #expect(try wa.projection.canonicalDump() == (try wb.projection.canonicalDump()))
        #expect(try wa.projection.verifyDeep() == nil)

        // A rebuild keeps the purge (remembered as a device-local setting) and equals incremental.
        let before = try wa.projection.canonicalDump()
        _ = try wa.append([Mutation(entity: .item, op: .delete, entityID: b)])
        try wa.projection.purge(deletedBefore: ISOTime.string(millis: UInt64(Date().timeIntervalSince1970 * 1000) + 1000))
        let purgedDump = try wa.projection.canonicalDump()
        #expect(purgedDump.count == before.count - 1)
        try wa.close()
        try Projection.rebuild(store: sa)
        #expect(try Projection(store: sa).canonicalDump() == purgedDump)
    }

    @Test func manyPurgedRowsBroughtBackAtOnceComeBackWhole() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let w = try ProjectedStore(store: store)
        defer { try? w.close() }
        let ids = (0..<40).map { _ in UUID() }
        _ = try w.append(ids.enumerated().map { i, id in
            Mutation(entity: .item, op: .create, entityID: id, fields: [Field("title", .text("item \(i)")), Field("notes", .text("n\(i)"))])
        })
        _ = try w.append(ids.map { Mutation(entity: .item, op: .update, entityID: $0, fields: [Field("title", .text("edited"))]) })
        _ = try w.append(ids.map { Mutation(entity: .item, op: .delete, entityID: $0) })
        let purged = try w.projection.purge(deletedBefore: ISOTime.string(millis: UInt64(Date().timeIntervalSince1970 * 1000) + 1000))
        #expect(purged == ["items": 40])
        // Half come back in one commit (one pass over the log for all of them); the rest stay purged.
        _ = try w.append(ids.prefix(20).map { Mutation(entity: .item, op: .restore, entityID: $0) })
        for (i, id) in ids.enumerated() {
            let r = try row(w.projection, id)
            if i < 20 {
                #expect(r?["title"] as String? == "edited" && r?["notes"] as String? == "n\(i)" && r?["deleted_at"] as String? == nil)
            } else {
                #expect(r == nil)
            }
        }
        #expect(try w.projection.verifyDeep() == nil)
    }

    @Test func aRetentionPurgesWhatIsOldEnoughAndIsOffByDefault() throws {
        let dir = TempDir()
        let sa = try Store.create(at: dir.path + "/a")
        let wa = try ProjectedStore(store: sa)
        _ = try wa.append([
            Mutation(entity: .item, op: .create, entityID: a, fields: [Field("title", .text("x"))]),
            Mutation(entity: .item, op: .delete, entityID: a),
        ])
        #expect(try wa.projection.retainDays() == nil)
        #expect(try wa.projection.purgeByRetention(now: Date(timeIntervalSinceNow: 86_400 * 400)).isEmpty)  // off
        try wa.projection.setRetainDays(30)
        #expect(try wa.projection.purgeByRetention().isEmpty)  // deleted just now: kept 30 days
        #expect(try wa.projection.purgeByRetention(now: Date(timeIntervalSinceNow: 86_400 * 31)) == ["items": 1])
        try wa.close()
        // Reopening for writing purges by the retention (nothing more to purge here) without error.
        let again = try ProjectedStore(store: sa)
        #expect(try row(again.projection, a) == nil)
        try again.close()
    }
}
