import ArgumentParser
import EventLog
import Logbook

struct ItemsCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "items",
        abstract: "List items from the projection: full-text search, a subtree, deleted items.",
        discussion: "--json prints one object per line: id, parent_id, title, notes, status, item_type, sort_order, due_at, earliest_start_at, completed_at, recurrence_rule, priority, importance, location_name, location_address, latitude, longitude, version, created_at, modified_at, deleted_at, depth."
    )
    @OptionGroup var options: StoreOptions
    @Option(help: "Full-text search over titles and notes (prefix match, accents ignored).") var search: String?
    @Option(help: "Only the subtree under this item id (the item included), in depth order.") var under: String?
    @Flag(name: .customLong("include-deleted"), help: "Include soft-deleted items.") var includeDeleted = false
    @Option(help: "Print at most this many items.") var limit: Int = 1000

    func execute() throws {
        var root: UUID?
        if let under {
            guard let u = UUID(uuidString: under) else { throw ValidationError("--under \(under) is not an item id (a UUID)") }
            root = u
        }
        let book = try options.book(.readOnly)
        let items = try book.items(ItemQuery(search: search, under: root, includeDeleted: includeDeleted, limit: limit))
        let out = Output()
        for i in items {
            if options.json {
                var j = JSONBytes()
                j.raw("{\"id\":"); j.string(i.id)
                func field(_ name: StaticString, _ v: String?) {
                    j.raw(","); j.raw(name); j.raw(":")
                    if let v { j.string(v) } else { j.raw("null") }
                }
                field("\"parent_id\"", i.parentID); field("\"title\"", i.title); field("\"notes\"", i.notes)
                field("\"status\"", i.status); field("\"item_type\"", i.itemType)
                j.raw(",\"sort_order\":"); j.raw(i.sortOrder.map { $0 == $0.rounded() && abs($0) < 1e15 ? String(Int64($0)) : "\($0)" } ?? "null")
                field("\"due_at\"", i.dueAt); field("\"earliest_start_at\"", i.earliestStartAt); field("\"completed_at\"", i.completedAt)
                field("\"recurrence_rule\"", i.recurrenceRule)
                func number(_ name: StaticString, _ v: Double?) {
                    j.raw(","); j.raw(name); j.raw(":")
                    j.raw(v.map { $0 == $0.rounded() && abs($0) < 1e15 ? String(Int64($0)) : "\($0)" } ?? "null")
                }
                number("\"priority\"", i.priority); number("\"importance\"", i.importance)
                field("\"location_name\"", i.locationName); field("\"location_address\"", i.locationAddress)
                number("\"latitude\"", i.latitude); number("\"longitude\"", i.longitude)
                j.raw(",\"version\":"); j.int(i.version)
                field("\"created_at\"", i.createdAt); field("\"modified_at\"", i.modifiedAt); field("\"deleted_at\"", i.deletedAt)
                j.raw(",\"depth\":"); j.int(i.depth)
                j.raw("}")
                out.line(j.bytes)
            } else {
                let indent = String(repeating: "  ", count: i.depth)
                let flags = [i.status.map { printable($0) }, i.deletedAt.map { _ in "deleted" }].compactMap { $0 }.joined(separator: ", ")
                out.line("\(indent)\(printable(i.id))  \(i.title.map { printable($0) } ?? "(untitled)")" + (flags.isEmpty ? "" : "  [\(flags)]"))
            }
        }
        out.flush()
    }
}

import Foundation
