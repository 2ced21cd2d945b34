import Foundation
import TestSupport
import Testing
@testable import EventLog

/// `StoreLayout` is the one owner of a store directory's names; docs/FORMAT.md describes the same.
@Suite struct StoreLayoutTests {
    /// The names in the fenced block under "## Store layout" of docs/FORMAT.md: top level (two
    /// spaces in) and inside an origin's folder (four spaces in).
    static func documentedNames() throws -> (top: Set<String>, origin: Set<String>) {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/FORMAT.md"), encoding: .utf8)
        guard let section = text.range(of: "## Store layout") else { throw LayoutDocError("docs/FORMAT.md has no \"## Store layout\"") }
        let after = text[section.upperBound...]
        guard let open = after.range(of: "```\n"), let close = after[open.upperBound...].range(of: "```") else {
            throw LayoutDocError("the store layout in docs/FORMAT.md has no fenced block")
        }
        var top = Set<String>(), origin = Set<String>()
        for line in after[open.upperBound..<close.lowerBound].split(separator: "\n") {
            let indent = line.prefix(while: { $0 == " " }).count
            guard let name = line.dropFirst(indent).split(separator: " ").first else { continue }
            var n = String(name)
            if n.hasSuffix("/") { n.removeLast() }
            if indent == 2 { top.insert(n.split(separator: "/").first.map(String.init) ?? n) }
            if indent == 4 { origin.insert(n) }
        }
        return (top, origin)
    }

    @Test func formatDocumentNamesEveryEntryAndNoOther() throws {
        let doc = try Self.documentedNames()
        let code = Set(StoreLayout.Entry.allCases.map(\.rawValue))
        #expect(doc.top.subtracting(code).isEmpty, "in docs/FORMAT.md but not in StoreLayout: \(doc.top.subtracting(code).sorted())")
        #expect(code.subtracting(doc.top).isEmpty, "in StoreLayout but not in docs/FORMAT.md: \(code.subtracting(doc.top).sorted())")
        #expect(doc.origin.isSuperset(of: [StoreLayout.floorName, StoreLayout.durableName, "*" + StoreLayout.temporarySuffix]))
    }

    @Test func sidecarsAndInterruptedWritesBelongToTheirFile() {
        #expect(StoreLayout.entry(named: "projection.sqlite-wal") == .projection)
        #expect(StoreLayout.entry(named: "store.json.tmp") == .storeFile)
        #expect(StoreLayout.entry(named: "audit.sqlite-shm") == .audit)
        #expect(StoreLayout.entry(named: "projection.sqlite.rebuild-wal") == .projectionRebuild)
        #expect(StoreLayout.entry(named: "notes.txt") == nil)
        #expect(StoreLayout.entry(named: "store.json-wal") == .storeFile)  // harmless: no build writes it
    }

    /// The parent of a path, computed without Foundation (whose `deletingLastPathComponent`
    /// traps on a path of one relative component).
    @Test(arguments: [("a", "."), ("a/", "."), ("a/b", "a"), ("a//b", "a"), ("a/b/", "a"), ("/a", "/"), ("/", "/"), ("//a", "/"),
                      ("./a", "."), ("../a/b", "../a"), ("/tmp/x/store", "/tmp/x"), ("", ".")])
    func theParentOfAPath(_ path: String, _ parent: String) {
        #expect(FileIO.parent(path) == parent, "\(path)")
    }

    @Test func aStoreLaysItsLogOutByTheLayout() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        let appender = try LogAppender(store: store, wallClock: ManualClock())
        try appender.append(sampleMutations(10))
        try appender.close()
        let names = try FileManager.default.contentsOfDirectory(atPath: store.path)
        #expect(names.allSatisfy { StoreLayout.entry(named: $0) != nil }, "\(names)")
        let originDir = store.layout.originDirectory(store.replicaID)
        #expect(FileManager.default.fileExists(atPath: originDir + "/" + StoreLayout.durableName))
    }
}

struct LayoutDocError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}
