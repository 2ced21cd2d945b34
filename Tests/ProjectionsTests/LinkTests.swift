import Domain
import Foundation
import TestSupport
import Testing
@testable import EventLog
@testable import Projections

/// Links between items (issue 11 §2): merged like every entity, traversed breadth first.
@Suite struct LinkTests {
    static func id(_ n: Int) -> UUID { UUID(uuidString: String(format: "00000000-0000-4000-8000-%012d", n))! }
    static func linkID(_ n: Int) -> UUID { UUID(uuidString: String(format: "11110000-0000-4000-8000-%012d", n))! }

    func item(_ n: Int, _ title: String) -> Mutation {
        Mutation(entity: .item, op: .create, entityID: Self.id(n), fields: [Field("title", .text(title))])
    }

    func link(_ n: Int, _ from: Int, _ to: Int, kind: String? = nil) -> Mutation {
        var fields = [Field("from_id", .text(Self.id(from).lowercasedString)), Field("to_id", .text(Self.id(to).lowercasedString))]
        if let kind { fields.append(Field("kind", .text(kind))) }
        return Mutation(entity: .link, op: .create, entityID: Self.linkID(n), fields: fields)
    }

    /// 1 → 2 → 3 → 1 (a cycle), 1 → 4 (SEQUENCE), 4 → 5, 3 → 6 (deleted item), 6 → 7,
    /// 2 → 9 (no such item), 5 → 8 (link deleted).
    func graph(_ dir: TempDir) throws -> ProjectedStore {
        let store = try Store.create(at: dir.path + "/s")
        let w = try ProjectedStore(store: store)
        _ = try w.append((1...8).map { item($0, "item \($0)") } + [
            link(1, 1, 2, kind: "LINK"), link(2, 2, 3, kind: "LINK"), link(3, 3, 1, kind: "LINK"), link(4, 1, 4, kind: "SEQUENCE"),
            link(5, 4, 5), link(6, 3, 6, kind: "LINK"), link(7, 6, 7, kind: "LINK"), link(8, 2, 9, kind: "LINK"), link(9, 5, 8),
        ])
        _ = try w.append([
            Mutation(entity: .item, op: .delete, entityID: Self.id(6)),
            Mutation(entity: .link, op: .delete, entityID: Self.linkID(9)),
        ])
        return w
    }

    func ids(_ l: [LinkedItem]) -> [String] { l.map { "\(Int($0.id.suffix(12))!)@\($0.depth)" } }

    @Test func reachableItemsComeOnceWithTheirLeastDepth() throws {
        let dir = TempDir()
        let w = try graph(dir)
        defer { try? w.close() }
        let p = w.projection
        let start = Self.id(1).lowercasedString
        #expect(ids(try p.linked(from: start, depth: 1)) == ["2@1", "4@1"])
        // Cycle-safe: 1 is never returned; 6 is deleted (neither returned nor followed, so 7 is
        // not reached); 9 is an orphan (returned as missing, not followed); 8's link is deleted.
        let all = try p.linked(from: start, depth: 10)
        #expect(ids(all) == ["2@1", "4@1", "3@2", "5@2", "9@2"])
        let orphan = try #require(all.first { $0.id.hasSuffix("000000000009") })
        #expect(!orphan.exists && orphan.title == nil && orphan.via == Self.id(2).lowercasedString)
        #expect(all.first { $0.id.hasSuffix("000000000003") }?.title == "item 3")
        // Kinds filter which links are followed.
        #expect(ids(try p.linked(from: start, depth: 10, kinds: ["LINK"])) == ["2@1", "3@2", "9@2"])
        #expect(ids(try p.linked(from: start, depth: 10, kinds: ["SEQUENCE"])) == ["4@1"])
        // Incoming: what links to 1, then to those.
        #expect(ids(try p.linked(from: start, depth: 2, direction: .incoming)) == ["3@1", "2@2"])
        #expect(ids(try p.linked(from: Self.id(5).lowercasedString, depth: 1, direction: .both)) == ["4@1"])
        #expect(try p.linked(from: start, depth: 10, limit: 3).count == 3)
        #expect(throws: ProjectionError.self) { try p.linked(from: start, depth: 0) }
        // Uppercase ids (Swift's spelling) name the same items.
        #expect(ids(try p.linked(from: Self.id(1).uuidString, depth: 1)) == ["2@1", "4@1"])
    }

    /// A start of any text (typed by a user: quotes, backslashes, control characters, other
    /// scripts) is read as itself: nothing is reached from an id no item has.
    @Test func startsOfAnyTextAreReadAsThemselves() throws {
        let dir = TempDir()
        let w = try graph(dir)
        defer { try? w.close() }
        let one = Self.id(1).lowercasedString
        for start in ["a\"b", "\\", "x\ny\t\u{01}", "'); DROP TABLE links; --", "été 東京 🙂", "", one + " ", one + "%"] {
            #expect(try w.projection.linked(from: start, depth: 3, direction: .both).isEmpty, "\(start.debugDescription)")
        }
        #expect(ids(try w.projection.linked(from: one, depth: 10)) == ["2@1", "4@1", "3@2", "5@2", "9@2"])
    }

    /// A string bound through GRDB ends at its first NUL, so an id with one would be read as the
    /// id before it: every query taking text refuses a NUL by name and position instead, and a
    /// setting is neither read nor written under a cut key.
    @Test func queryArgumentsWithANULAreRefused() throws {
        let dir = TempDir()
        let w = try graph(dir)
        defer { try? w.close() }
        let p = w.projection
        let cut = Self.id(1).lowercasedString + "\u{0}x"
        func refused(_ what: String, _ body: () throws -> Void) {
            do { try body(); Issue.record("\(what): accepted a NUL") } catch {
                #expect("\(error)".contains("NUL character (U+0000) at byte 36"), "\(what): \(error)")
            }
        }
        refused("linked") { _ = try p.linked(from: cut, depth: 2) }
        refused("links(of:)") { _ = try p.links(of: cut) }
        refused("links(of:limit:)") { _ = try p.links(of: cut, limit: 10) }
        refused("subtree") { _ = try p.subtree(of: cut, limit: 10) }
        refused("items(under:)") { _ = try p.items(under: cut) }
        refused("pathToRoot") { _ = try p.pathToRoot(cut) }
        let t36 = String(repeating: "t", count: 36)
        refused("items(search:)") { _ = try p.items(search: t36 + "\u{0}item") }
        try p.setSetting("theme", "dark")
        refused("setting") { _ = try p.setting(t36 + "\u{0}") }
        refused("setSetting key") { try p.setSetting(t36 + "\u{0}theme", "light") }
        refused("setSetting value") { try p.setSetting("theme", t36 + "\u{0}") }
        #expect(try p.setting("theme") == "dark")
        #expect(try p.setting(t36) == nil)
    }

    @Test func restoringALinkOrAnItemBringsItBackIntoTraversals() throws {
        let dir = TempDir()
        let w = try graph(dir)
        defer { try? w.close() }
        _ = try w.append([
            Mutation(entity: .item, op: .restore, entityID: Self.id(6)),
            Mutation(entity: .link, op: .restore, entityID: Self.linkID(9)),
        ])
        let found = ids(try w.projection.linked(from: Self.id(1).lowercasedString, depth: 10))
        #expect(found == ["2@1", "4@1", "3@2", "5@2", "9@2", "6@3", "8@3", "7@4"])
        #expect(try w.projection.links(of: Self.id(3).uuidString).count == 3)
    }

    @Test func aLinkCreateMustNameBothEnds() throws {
        let bad = Mutation(entity: .link, op: .create, entityID: Self.linkID(1), fields: [Field("from_id", .text(Self.id(1).lowercasedString))])
        #expect(throws: InputError.self) { try FieldRules.validate(bad, position: 1) }
        #expect(throws: InputError.self) {
            try MutationParser.parse(#"{"entity":"link","op":"create","id":"\#(Self.linkID(1))","fields":{"to_id":"\#(Self.id(2))"}}"#, lineNumber: 1)
        }
        let update = Mutation(entity: .link, op: .update, entityID: Self.linkID(1), fields: [Field("weight", .real(2))])
        try FieldRules.validate(update, position: 1)
        let notAUUID = Mutation(entity: .link, op: .create, entityID: Self.linkID(1),
                                fields: [Field("from_id", .text("x")), Field("to_id", .text(Self.id(2).lowercasedString))])
        #expect(throws: InputError.self) { try FieldRules.validate(notAUUID, position: 1) }
    }

    /// Traversal against a plain breadth-first search in memory, on random graphs with cycles,
    /// parallel links, links of no kind, deleted links and items, and links to items that do not
    /// exist: the same items at the same depths, reached from the same item by the same link
    /// (the first from in id order, outgoing before incoming, then the least link id).
    @Test(arguments: 0..<12) func traversalEqualsABreadthFirstSearchInMemory(seed: Int) throws {
        struct Edge { var id: String; var from: String; var to: String; var kind: String?; var deleted: Bool }
        var rng = SplitMix64(seed: UInt64(seed) &* 7919 &+ 3)
        func pick(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let w = try ProjectedStore(store: store)
        defer { try? w.close() }
        let itemCount = 30 + pick(20)
        // Ids 1...itemCount are items; ids up to itemCount + 5 are orphans (no item).
        var deletedItems: Set<String> = []
        var batch = (1...itemCount).map { item($0, "item \($0)") }
        for n in 1...itemCount where pick(8) == 0 {
            batch.append(Mutation(entity: .item, op: .delete, entityID: Self.id(n)))
            deletedItems.insert(Self.id(n).lowercasedString)
        }
        var edges: [Edge] = []
        let kinds: [String?] = ["LINK", "SEQUENCE", "AFFINITY", nil]
        for n in 1...(itemCount * 3 + pick(itemCount)) {
            let from = 1 + pick(itemCount + 5), to = pick(4) == 0 && !edges.isEmpty ? Int(edges[pick(edges.count)].to.suffix(12))! : 1 + pick(itemCount + 5)
            let kind = kinds[pick(kinds.count)]
            batch.append(link(n, from, to, kind: kind))
            let deleted = pick(10) == 0
            if deleted { batch.append(Mutation(entity: .link, op: .delete, entityID: Self.linkID(n))) }
            edges.append(Edge(id: Self.linkID(n).lowercasedString, from: Self.id(from).lowercasedString, to: Self.id(to).lowercasedString,
                              kind: kind, deleted: deleted))
        }
        _ = try w.append(batch)

        func reference(_ root: String, depth: Int, kinds: Set<String>?, direction: LinkDirection, limit: Int) -> [LinkedItem] {
            var seen: Set<String> = [root], out: [LinkedItem] = [], frontier = [root]
            var level = 0
            while level < depth, !frontier.isEmpty, out.count < limit {
                level += 1
                var next: [LinkedItem] = []
                for near in frontier {
                    let ways: [Bool] = switch direction { case .outgoing: [true]; case .incoming: [false]; case .both: [true, false] }
                    for outgoing in ways {
                        let found = edges.filter { !$0.deleted && (outgoing ? $0.from : $0.to) == near }
                            .map { (far: outgoing ? $0.to : $0.from, edge: $0) }
                            .sorted { ($0.far, $0.edge.id) < ($1.far, $1.edge.id) }
                        for (far, edge) in found {
                            if let kinds, !kinds.contains(edge.kind ?? "") { continue }
                            if seen.contains(far) || deletedItems.contains(far) { continue }
                            seen.insert(far)
                            let n = Int(far.suffix(12))!
                            let exists = n <= itemCount
                            next.append(LinkedItem(id: far, depth: level, via: near, linkID: edge.id, kind: edge.kind,
                                                   title: exists ? "item \(n)" : nil, exists: exists))
                        }
                    }
                }
                next.sort { $0.id < $1.id }
                if out.count + next.count > limit { next = Array(next.prefix(limit - out.count)) }
                out += next
                frontier = next.filter(\.exists).map(\.id)
            }
            return out
        }

        for _ in 0..<40 {
            let root = Self.id(1 + pick(itemCount + 5)).lowercasedString
            let depth = 1 + pick(5)
            let kindSet: Set<String>? = pick(3) == 0 ? Set([["LINK"], ["SEQUENCE", ""], [""]][pick(3)]) : nil
            let direction = LinkDirection.allCases[pick(3)]
            let limit = pick(4) == 0 ? 1 + pick(10) : 100_000
            let got = try w.projection.linked(from: root, depth: depth, kinds: kindSet, direction: direction, limit: limit)
            let want = reference(root, depth: depth, kinds: kindSet, direction: direction, limit: limit)
            #expect(got == want, "seed \(seed): from \(root) depth \(depth) kinds \(String(describing: kindSet)) \(direction) limit \(limit)")
        }
    }

    /// Every recursive walk stops at `Bounds.walkDepthMax` levels: an item 1,500 parents deep
    /// (before: a page 20,000 deep took 38 s, the path string growing with every level).
    @Test func recursiveWalksAreBoundedInDepth() throws {
        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let w = try ProjectedStore(store: store)
        let depth = Bounds.walkDepthMax + 500
        var chain = [item(0, "root")]
        for n in 1...depth {
            chain.append(Mutation(entity: .item, op: .create, entityID: Self.id(n),
                                  fields: [Field("title", .text("level \(n)")), Field("parent_id", .text(Self.id(n - 1).lowercasedString))]))
        }
        chain += (1...depth).map { link(100_000 + $0, $0 - 1, $0) }
        _ = try w.append(chain)
        let p = w.projection
        let up = try p.pathToRoot(Self.id(depth).lowercasedString)
        #expect(up.count == Bounds.walkDepthMax + 1 && up.last?.parentID != nil)
        #expect(try p.pathToRoot(Self.id(10).lowercasedString).count == 11)
        let under = try p.items(under: Self.id(0).lowercasedString, limit: 1_000_000)
        #expect(under.count == Bounds.walkDepthMax + 1)
        #expect(try p.linked(from: Self.id(0).lowercasedString, depth: Bounds.walkDepthMax).count == Bounds.walkDepthMax)
        #expect(throws: ProjectionError.self) { try p.linked(from: Self.id(0).lowercasedString, depth: Bounds.walkDepthMax + 1) }
        try w.close()
    }
}
