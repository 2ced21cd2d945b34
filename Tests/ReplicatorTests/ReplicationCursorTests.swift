import Domain
@testable import EventLog
@testable import LogbookServer
import Foundation
import Testing
@testable import Replicator

@Suite struct ReplicationCursorTests {
    /// Totals over origins hold at `UInt64.max`: a peer's snapshot may set floors at `Seq.max` for
    /// any number of origins, and three such logs made `lag`, a store's `totalEvents` (`evctl
    /// status`, the inspector), `evctl snapshot` and a read-only `Logbook`'s lag overflow.
    @Test func totalsOverOriginsAtTheLargestSeqSaturate() {
        let far = (0..<3).map { _ in ReplicaID.random() }
        let cursor = ReplicationCursor(Dictionary(uniqueKeysWithValues: far.map { ($0, Seq.max) }))
        #expect(ReplicationCursor.empty.lag(behind: cursor) == .max)
        #expect(ReplicationCursor([far[0]: Seq(5)]).lag(behind: ReplicationCursor([far[0]: Seq.max, far[1]: Seq(3)]))
                == Seq.max.rawValue - 5 + 3)
        #expect(Seq.total([Seq.max.rawValue, Seq.max.rawValue, 1]) == .max)
        #expect(Seq.total([Seq.max.rawValue, Seq.max.rawValue]) == 2 * Seq.max.rawValue)
        #expect(Seq.total([]) == 0)
        let status = StoreStatus(replicaID: far[0], origins: far.map { StoreStatus.Origin(origin: $0, lastSeq: .max, lastHLC: .zero, segments: 0, bytes: 0) },
                                 bytesOnDisk: 0)
        #expect(status.totalEvents == .max)
    }

    let a = ReplicaID("aaaaaaaa-0000-4000-8000-000000000001")!
    let b = ReplicaID("bbbbbbbb-0000-4000-8000-000000000002")!
    let c = ReplicaID("cccccccc-0000-4000-8000-000000000003")!

    @Test func compareMergeAndMissing() {
        let x = ReplicationCursor([a: Seq(10), b: Seq(3)])
        let y = ReplicationCursor([a: Seq(7), b: Seq(5), c: Seq(2)])
        #expect(x.compare(x) == .equal)
        #expect(x.compare(y) == .concurrent)
        let m = x.merged(with: y)
        #expect(m == ReplicationCursor([a: Seq(10), b: Seq(5), c: Seq(2)]))
        #expect(m.compare(x) == .ahead && x.compare(m) == .behind)
        #expect(x.missing(from: y) == [b: 4...5, c: 1...2])
        #expect(y.missing(from: x) == [a: 8...10])
        #expect(x.lag(behind: y) == 4)
        #expect(m.missing(from: x).isEmpty)
        // Merging is commutative, associative and idempotent.
        let z = ReplicationCursor([c: Seq(9)])
        #expect(x.merged(with: y) == y.merged(with: x))
        #expect(x.merged(with: y).merged(with: z) == x.merged(with: y.merged(with: z)))
        #expect(m.merged(with: m) == m)
        // Seq 0 is the same as absent.
        #expect(ReplicationCursor([a: Seq(0)]) == .empty)
    }

    @Test func tokensRoundTripAndAreStable() throws {
        var rng = SplitMix64(seed: 5)
        for _ in 0..<200 {
            var entries: [ReplicaID: Seq] = [:]
            for _ in 0..<Int(rng.next() % 6) { entries[.random()] = Seq(rng.next() % 3 == 0 ? rng.next() % Seq.max.rawValue + 1 : rng.next() % 1000 + 1) }
            let cursor = ReplicationCursor(entries)
            let token = cursor.token
            #expect(token.hasPrefix("lbc1.") && !token.contains("/") && !token.contains("+") && !token.contains("="))
            #expect(try ReplicationCursor(token: token) == cursor)
            #expect(ReplicationCursor(Dictionary(uniqueKeysWithValues: entries.shuffled(using: &rng).map { ($0.key, $0.value) })).token == token)
        }
        #expect(try ReplicationCursor(token: ReplicationCursor.empty.token) == .empty)
    }

    @Test(arguments: ["", "lbc2.AAAA", "lbc1.!!!!", "lbc1.AA"])
    func badTokensAreRefused(_ token: String) {
        #expect(throws: CursorTokenError.self) { try ReplicationCursor(token: token) }
    }

    @Test func aDamagedTokenIsRefused() {
        let token = ReplicationCursor([a: Seq(123_456), b: Seq(7)]).token
        var chars = Array(token)
        let i = chars.count - 8
        chars[i] = chars[i] == "A" ? "B" : "A"
        #expect(throws: CursorTokenError.self) { try ReplicationCursor(token: String(chars)) }
    }

    @Test func storeCursorIsEachOriginsLastSeq() throws {
        let dir = NSTemporaryDirectory() + "/cursor-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try Store.create(at: dir)
        #expect(try store.cursor() == .empty)
        let appender = try LogAppender(store: store)
        _ = try appender.append(SampleWorkload(seed: 1, count: 25).enumerated().map { try MutationParser.parse($1, lineNumber: $0 + 1) })
        try appender.close()
        #expect(try store.cursor() == ReplicationCursor([store.replicaID: Seq(25)]))
    }
}
