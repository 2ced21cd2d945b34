import ArgumentParser
import EventLog
import Foundation
import Logbook
import Domain

struct ShareCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Share part of the data with chosen replicas, end-to-end encrypted (docs/SHARING.md).",
        discussion: """
            A share has its own logs: a membership log its admin (the replica that created it) signs, and one log
            per member of the share's events, sealed with the share's content key. Hubs and peers that are not
            members store and pass on ciphertext they cannot read. A member is added by its member card
            (`evctl share card` on that replica), which the share's keys are sealed to; removing a member
            rotates the key, so it reads nothing written after. A store takes only the logs of the shares its
            replica belongs to; `evctl share relay` makes it take every share's (as ciphertext), for a folder
            replicas meet at. A server (`evctl serve --store`) always does.
            """,
        subcommands: [ShareCreate.self, ShareCard.self, ShareAdd.self, ShareRemove.self, ShareList.self, ShareAppend.self,
                      ShareLeave.self, ShareDelete.self, ShareRelay.self, ShareMove.self])
}

private func parseShare(_ text: String) throws -> ShareID {
    guard let s = ShareID(text) else { throw ValidationError("not a share id: \(printable(text, limit: 60))") }
    return s
}

struct ShareCreate: StoreCommand {
    static let configuration = CommandConfiguration(commandName: "create", abstract: "Create a share, with this replica as its admin and first member.")
    @OptionGroup var options: StoreOptions
    @Argument(help: "The share's name (seen by its members; hubs see only the id).") var name: String

    func execute() throws {
        let book = try options.book(.readWrite)
        defer { try? book.close() }
        let id = try book.createShare(name: name)
        if options.json { Reports.print(["share": id.description]) } else { print("created share \(id) (\(printable(name, limit: 80)))") }
    }
}

struct ShareCard: StoreCommand {
    static let configuration = CommandConfiguration(commandName: "card", abstract: "Print this replica's member card, which a share's admin adds it by.")
    @OptionGroup var options: StoreOptions

    func execute() throws {
        let store = try Store.open(at: options.path)
        guard let card = try store.signingKey(op: "share card")?.memberCard else {
            throw ValidationError("this store was made before signed logs: it has no key, and cannot join shares")
        }
        if options.json { Reports.print(["replica_id": card.replicaID.description, "card": card.printable]) } else { print(card.printable) }
    }
}

struct ShareAdd: StoreCommand {
    static let configuration = CommandConfiguration(commandName: "add", abstract: "Add a replica to a share by its member card (admin only).")
    @OptionGroup var options: StoreOptions
    @Argument(help: "The share's id.") var share: String
    @Argument(help: "The replica's member card (LBM1-…), as `evctl share card` prints it.") var card: String

    func execute() throws {
        let id = try parseShare(share)
        guard let c = MemberCard(printable: card) else { throw ValidationError("not a valid member card (LBM1-…, signed by the key it names)") }
        let book = try options.book(.readWrite)
        defer { try? book.close() }
        try book.addMember(c, to: id)
        if options.json { Reports.print(["share": id.description, "added": c.replicaID.description]) } else { print("added replica \(c.replicaID) to share \(id)") }
    }
}

struct ShareRemove: StoreCommand {
    static let configuration = CommandConfiguration(commandName: "remove", abstract: "Remove a replica from a share and rotate its key (admin only).")
    @OptionGroup var options: StoreOptions
    @Argument(help: "The share's id.") var share: String
    @Argument(help: "The replica id to remove.") var replica: String

    func execute() throws {
        let id = try parseShare(share)
        guard let r = ReplicaID(replica) else { throw ValidationError("not a replica id: \(printable(replica, limit: 60))") }
        let book = try options.book(.readWrite)
        defer { try? book.close() }
        try book.removeMember(r, from: id)
        if options.json { Reports.print(["share": id.description, "removed": r.description]) } else { print("removed replica \(r) from share \(id); its key is rotated") }
    }
}

struct ShareList: StoreCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the shares this store knows, their members and whether this replica holds their key.")
    @OptionGroup var options: StoreOptions

    func execute() throws {
        let book = try options.book(.inspect)
        defer { try? book.close() }
        let shares = try book.shares()
        if options.json {
            Reports.print(shares.map { s in
                ShareReport(id: s.id.description, name: s.name, admin: s.admin.description, members: s.members.map(\.description),
                            epoch: Int(s.epoch), holdsKey: s.holdsKey, deleted: s.deleted, problems: s.problems,
                            problemsNotListed: s.problemsNotListed)
            })
            return
        }
        if shares.isEmpty { print("no shares"); return }
        for s in shares {
            let state = s.deleted ? "deleted" : s.holdsKey ? "member" : "no key"
            print("\(s.id)  \(printable(s.name, limit: 60))  [\(state)]  epoch \(s.epoch)")
            print("  admin    \(s.admin)")
            for m in s.members { print("  member   \(m)") }
            for p in s.problems.prefix(10) { print("  skipped  \(printable(p, limit: 200))") }
            let unshown = s.problems.count - min(10, s.problems.count) + s.problemsNotListed
            if unshown > 0 { print("  skipped  … and \(unshown) more records") }
        }
    }
}

struct ShareReport: Encodable {
    var id: String
    var name: String
    var admin: String
    var members: [String]
    var epoch: Int
    var holdsKey: Bool
    var deleted: Bool
    var problems: [String]
    /// Skipped records past those listed in `problems`.
    var problemsNotListed: Int
}

struct ShareAppend: StoreCommand {
    static let configuration = CommandConfiguration(commandName: "append", abstract: "Append NDJSON mutations to this replica's sealed log of a share; all land or none do.")
    @OptionGroup var options: StoreOptions
    @Argument(help: "The share's id.") var share: String
    @Argument(help: "NDJSON file to read, or - for standard input (the default).") var file: String = "-"

    func execute() throws {
        let id = try parseShare(share)
        let handle = file == "-" ? FileHandle.standardInput : FileHandle(forReadingAtPath: file)
        guard let handle else { throw ValidationError("cannot open \(file)") }
        let data = handle.readDataToEndOfFile()
        guard data.count <= 64 << 20 else { throw ValidationError("\(file): share appends take at most 64 MiB at once") }
        var ms: [Mutation] = []
        var n = 0
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false) {
            n += 1
            if line.allSatisfy(\.isWhitespace) { continue }
            ms.append(try MutationParser.parse(String(line), lineNumber: n))
        }
        let book = try options.book(.readWrite)
        defer { try? book.close() }
        let r = try book.append(mutations: ms, toShare: id)
        if options.json { Reports.print(["share": id.description, "events": String(r.events)]) } else { print("appended \(r.events) events to share \(id) (sealed)") }
    }
}

struct ShareLeave: StoreCommand {
    static let configuration = CommandConfiguration(commandName: "leave", abstract: "Leave a share on this replica: its keys are destroyed here.")
    @OptionGroup var options: StoreOptions
    @Argument(help: "The share's id.") var share: String

    func execute() throws {
        let id = try parseShare(share)
        let book = try options.book(.readWrite)
        defer { try? book.close() }
        try book.leaveShare(id)
        print("left share \(id): its keys are destroyed here; ask its admin to remove this replica, which rotates the key")
    }
}

struct ShareDelete: StoreCommand {
    static let configuration = CommandConfiguration(commandName: "delete", abstract: "Delete a share (admin only): every member that syncs it destroys its keys.")
    @OptionGroup var options: StoreOptions
    @Argument(help: "The share's id.") var share: String

    func execute() throws {
        let id = try parseShare(share)
        let book = try options.book(.readWrite)
        defer { try? book.close() }
        try book.deleteShare(id)
        print("deleted share \(id): members destroy its keys as they sync")
    }
}

struct ShareRelay: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay",
        abstract: "Make this store take every share's logs it is given (a relay), or with --off only its own shares'.",
        discussion: """
            A relay holds shares' frames as ciphertext and passes them on, so members that never meet can sync
            through it (a shared folder, a USB stick's store). What the store already holds stays either way.
            """)
    @OptionGroup var options: StoreOptions
    @Flag(help: "Take only the logs of the shares this replica belongs to again (the default).") var off = false

    func execute() throws {
        let book = try options.book(.readWrite)
        defer { try? book.close() }
        try book.setRelay(!off)
        print(off ? "this store takes only its own shares' logs" : "this store takes every share's logs it is given (as ciphertext)")
    }
}

struct ShareMove: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "move",
        abstract: "Move an item and its subtree into a share (--to SHARE) or out of one (--private).",
        discussion: """
            The move rule (docs/PROJECTION.md): the item, the items under it, their item tags, the tags they name,
            time entries, completions, exceptions and the links between them are written anew in the destination
            under new ids, then deleted where they were. Prints the item's new id.
            """)
    @OptionGroup var options: StoreOptions
    @Argument(help: "The item's id.") var item: String
    @Option(help: "The share to move it into.") var to: String?
    @Flag(name: .customLong("private"), help: "Move it out of its share, into this replica's private data.") var toPrivate = false

    func execute() throws {
        guard let id = UUID(uuidString: item) else { throw ValidationError("not an item id: \(printable(item, limit: 60))") }
        guard (to != nil) != toPrivate else { throw ValidationError("say where: --to SHARE or --private (one of them)") }
        let share = try to.map(parseShare)
        let book = try options.book(.readWrite)
        defer { try? book.close() }
        let renamed = try book.moveItem(id, to: share)
        let root = renamed[id]?.lowercasedString ?? "?"
        if options.json {
            Reports.print(["item": root, "rows": String(renamed.count)])
        } else {
            print("moved \(renamed.count) rows into \(share.map { "share \($0)" } ?? "private data"); the item is now \(root)")
        }
    }
}
