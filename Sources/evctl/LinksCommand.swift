import ArgumentParser
import Foundation
import EventLog
import Logbook

struct LinksCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "links",
        abstract: "The items reachable from an item by links that are not deleted, each once with its least depth.",
        discussion: """
            Breadth first and cycle-safe. Deleted items are skipped; an id no item has (an orphan link, its item not
            arrived yet) is listed as missing and not followed.
            --json prints one object per line: id, depth, via (the item it was reached from), link_id, kind, title, exists.
            """
    )
    @OptionGroup var options: StoreOptions
    @Argument(help: "The item to start from (a UUID).") var id: String
    @Option(help: "Follow at most this many links (1 to 64).") var depth: Int = 1
    @Option(name: .customLong("kind"), help: "Follow only links of this kind (repeat for several).") var kinds: [String] = []
    @Option(help: "outgoing (what the item links to), incoming (what links to it) or both.") var direction: String = "outgoing"
    @Option(help: "Print at most this many items.") var limit: Int = 100_000

    /// Bad usage is refused before the store is opened (exit status 64).
    func validate() throws {
        guard UUID(uuidString: id) != nil else { throw ValidationError("\(printable(id, limit: 60)) is not an item id (a UUID)") }
        guard (1...64).contains(depth) else { throw ValidationError("--depth \(depth) must be from 1 to 64") }
        guard LinkDirection(rawValue: direction) != nil else {
            throw ValidationError("--direction \(printable(direction, limit: 40)) is not one of \(LinkDirection.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard limit >= 0 else { throw ValidationError("--limit must not be negative") }
    }

    func execute() throws {
        guard let start = UUID(uuidString: id), let way = LinkDirection(rawValue: direction) else { return }  // validate() refused them
        let book = try options.book(.readOnly)
        let found = try book.linked(from: start, depth: depth, kinds: kinds.isEmpty ? nil : Set(kinds), direction: way, limit: limit)
        let out = Output()
        for l in found {
            if options.json {
                var j = JSONBytes()
                j.raw("{\"id\":"); j.string(l.id)
                j.raw(",\"depth\":"); j.int(l.depth)
                j.raw(",\"via\":"); j.string(l.via)
                j.raw(",\"link_id\":"); j.string(l.linkID)
                j.raw(",\"kind\":"); if let k = l.kind { j.string(k) } else { j.raw("null") }
                j.raw(",\"title\":"); if let t = l.title { j.string(t) } else { j.raw("null") }
                j.raw(",\"exists\":"); j.raw(l.exists ? "true" : "false")
                j.raw("}")
                out.line(j.bytes)
            } else {
                let indent = String(repeating: "  ", count: l.depth - 1)
                let title = l.exists ? (l.title.map { printable($0) } ?? "(untitled)") : "(missing: no such item here yet)"
                out.line("\(indent)\(printable(l.id, limit: 40))  \(title)" + (l.kind.map { "  [\(printable($0, limit: 40))]" } ?? ""))
            }
        }
        out.flush()
        if found.isEmpty && !options.json { FileHandle.standardError.write(Data("no linked items from \(start.lowercasedString)\n".utf8)) }
    }
}
