import Domain
import Foundation
import TestSupport
import GRDB
import Testing
@testable import EventLog
@testable import Projections

/// The scope rule (docs/PROJECTION.md, "Shares"): a row is made of the events of one scope, the
/// first of those whose events name it (private data, then shares by id). Events of the same
/// entities from a private log and two shares' logs, in any arrival order with redeliveries,
/// project to the same tables, and those are the tables made from each entity's winning scope
/// alone.
@Suite struct ScopeRuleTests {
    static let first = ShareID("00000000-0000-8000-8000-000000000001")!
    static let second = ShareID("ffffffff-ffff-8fff-bfff-ffffffffffff")!
    /// Sealed logs of the two shares (key-derived ids, as a share log's always are).
    static let firstLog = ReplicaID.derived(fromSigningKey: Array(repeating: 1, count: 32))
    static let secondLog = ReplicaID.derived(fromSigningKey: Array(repeating: 2, count: 32))
    /// The first share's membership log.
    static let membersLog = ReplicaID.derived(fromSigningKey: Array(repeating: 3, count: 32))

    init() {
        ShareDirectory.noteLog(Self.firstLog, .sealed(Self.first))
        ShareDirectory.noteLog(Self.secondLog, .sealed(Self.second))
        ShareDirectory.noteLog(Self.membersLog, .membership(Self.first))
    }

    /// `MergePropertyTests`' events with origin A private, B the first share's log and C the second's.
    static func events(seed: UInt64) -> [Event] {
        MergePropertyTests.randomEvents(seed: seed).map { e in
            var e = e
            if e.origin == originB { e.origin = firstLog } else if e.origin == originC { e.origin = secondLog }
            return e
        }
    }

    /// Each entity's events of its winning scope only: what its row must be made of.
    static func winningScopeOnly(_ events: [Event]) -> [Event] {
        func rank(_ o: ReplicaID) -> Int { o == firstLog ? 1 : o == secondLog ? 2 : 0 }
        var best: [String: Int] = [:]
        // Only events the projector applies to a table take part (a newer build's entity or op does not).
        let applied = events.filter { ProjectionSchema.current.table(for: $0.entity) != nil && $0.op.isKnown }
        for e in applied { best["\(e.entity.rawValue)/\(e.entityID)"] = min(best["\(e.entity.rawValue)/\(e.entityID)"] ?? 3, rank(e.origin)) }
        return events.filter { e in best["\(e.entity.rawValue)/\(e.entityID)"].map { $0 == rank(e.origin) } ?? true }
    }

    @Test(arguments: 0..<20)
    func anyArrivalOrderGivesTheRowsOfEachEntitysWinningScope(seed: Int) throws {
        let events = Self.events(seed: UInt64(seed) &* 7919 &+ 17)
        let dir = TempDir()
        let (_, reference) = try makeProjection(dir, name: "ref")
        try reference.applyFresh(events)
        let expected = try reference.canonicalDump()
        // Entities named from several scopes exist (the rule is exercised), and what was skipped is named.
        let skipped = try reference.anomalies().filter { $0.kind == "outside_share" }
        #expect(!skipped.isEmpty)

        let (_, oracle) = try makeProjection(dir, name: "oracle")
        try oracle.applyFresh(Self.winningScopeOnly(events))
        #expect(try oracle.canonicalDump() == expected, "seed \(seed): the rows are not those of each entity's winning scope")

        var rng = SplitMix64(seed: UInt64(seed) + 500)
        for trial in 0..<4 {
            var arrival = events.shuffled(using: &rng)
            for _ in 0..<(events.count / 4) { arrival.insert(events[Int(rng.next() % UInt64(events.count))], at: Int(rng.next() % UInt64(arrival.count + 1))) }
            let (_, p) = try makeProjection(dir, name: "t\(trial)")
            var i = 0
            while i < arrival.count {
                let n = 1 + Int(rng.next() % 9)
                try p.apply(Array(arrival[i..<min(i + n, arrival.count)]))
                i += n
            }
            let got = try p.canonicalDump()
            if got != expected {
                Issue.record("seed \(seed) trial \(trial): first difference \(String(describing: zip(got, expected).first { $0 != $1 }))")
            }
        }
    }

    /// A share's event naming a private row does not change it, whichever arrives first; the
    /// row's scope is kept in `projection_scopes` only for a share's rows.
    @Test func aSharesEventNeverChangesAPrivateRow() throws {
        let dir = TempDir()
        var f = EventFactory()
        let item = UUID()
        let mine = f.make(originA, hlc: hlc(20), .item, .create, item, [Field("title", text("my diary"))])
        let theirs = f.make(Self.firstLog, hlc: hlc(10), .item, .create, item, [Field("title", text("taken")), Field("notes", text("x"))])
        let later = f.make(Self.firstLog, hlc: hlc(30), .item, .update, item, [Field("title", text("taken again"))])
        for (n, order) in [[mine, theirs, later], [theirs, later, mine], [theirs, mine, later]].enumerated() {
            let (_, p) = try makeProjection(dir, name: "o\(n)")
            for e in order { try p.apply([e]) }
            let row = try #require(try p.items().first { $0.id == item.lowercasedString })
            #expect(row.title == "my diary" && row.notes == nil, "order \(n)")
            let scoped = try p.database.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM projection_scopes") }
            #expect(scoped == 0, "order \(n)")
            // Named as this replica met them: each event skipped, or the row made anew (once).
            #expect(try p.anomalies().filter { $0.kind == "outside_share" }.count == (n == 1 ? 1 : 2), "order \(n)")
        }
        // A membership log's events other than membership records are applied to nothing, even
        // to a row no other event named yet: its admin writes it, and it is no private data.
        let (_, m) = try makeProjection(dir, name: "members")
        try m.apply([f.make(Self.membersLog, hlc: hlc(25), .item, .update, item, [Field("title", text("the admin's"))]), mine])
        #expect(try m.items().first { $0.id == item.lowercasedString }?.title == "my diary")
        #expect(try m.anomalies().contains { $0.kind == "outside_share" && ($0.details ?? "").contains("membership log") })
        // A share's own row is named in projection_scopes.
        let other = UUID()
        let (_, p) = try makeProjection(dir, name: "shared")
        try p.apply([f.make(Self.secondLog, hlc: hlc(40), .item, .create, other, [Field("title", text("milk"))])])
        let share = try p.database.read { try String.fetchOne($0, sql: "SELECT share FROM projection_scopes WHERE id = ?", arguments: [other.lowercasedString]) }
        #expect(share == Self.second.description)
    }
}
