import ArgumentParser
import Foundation
import EventLog
import Hub
import Logbook
import Logging

struct PurgeCommand: AsyncStoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "purge",
        abstract: "Purge tombstones from the projection (the log keeps everything), or a deleted share's ciphertext.",
        discussion: """
            --share SHARE drops a deleted share's sealed logs (its ciphertext) from the store, or with --hub from a
            hub kept in PostgreSQL, and declines their frames from then on: only a share whose admin's signed
            deletion the store or hub holds is purged. Its membership log stays, to carry the deletion to members
            that have not synced it (docs/SHARING.md, "Purge"). Stop a server of the store first.

            Tombstones: off unless asked. Each purged row keeps its merge state, so a late update never brings it back; a later
            restore does, in full, from the log. The cutoff is remembered: a rebuild purges the same rows.
            --retain-days N keeps deleted rows N days and purges older ones now and at every open for writing;
            --no-retention turns that off. --json prints {"purged":{table:rows},"deleted_before":…,"retain_days":…}.
            """
    )
    @OptionGroup var options: StoreOptions
    @Option(name: .customLong("deleted-before"), help: "Purge rows deleted before this date (YYYY-MM-DD, or an ISO 8601 time).") var deletedBefore: String?
    @Option(name: .customLong("retain-days"), help: "Keep deleted rows this many days; purge older ones now and at every open for writing.") var retainDays: Int?
    @Flag(name: .customLong("no-retention"), help: "Turn the retention off.") var noRetention = false
    @Option(help: "Drop this deleted share's sealed logs (its ciphertext).") var share: String?
    @Option(help: "With --share: purge it from the hub kept in this PostgreSQL database (postgres://USER@HOST[:PORT]/DATABASE) instead of a store.") var hub: String?

    func validate() throws {
        let chosen = [deletedBefore != nil, retainDays != nil, noRetention, share != nil].filter { $0 }.count
        guard chosen == 1 else { throw ValidationError("give one of --deleted-before DATE, --retain-days N, --no-retention, --share SHARE") }
        if hub != nil && share == nil { throw ValidationError("--hub goes with --share") }
        if hub != nil && options.store != nil { throw ValidationError("--hub and --store name two different places to purge: give one") }
        if let s = share, ShareID(s) == nil { throw ValidationError("--share \(printable(s, limit: 60)) is not a share id") }
        if let d = retainDays, d < 1 { throw ValidationError("--retain-days must be at least 1 (--no-retention turns it off)") }
        if let s = deletedBefore, Self.date(s) == nil {
            throw ValidationError("--deleted-before \(printable(s, limit: 60)) is not a date (YYYY-MM-DD) or an ISO 8601 time")
        }
    }

    static func date(_ s: String) -> Date? { TimeArgument.parse(s) }

    func execute() async throws {
        if let text = share, let id = ShareID(text) {
            try await purgeShare(id)
            return
        }
        try purgeTombstones()
    }

    /// Synchronous: the Logbook's blocking calls, not their async twins.
    private func purgeTombstones() throws {
        let book = try options.book(.readWrite)
        var purged: [String: Int]
        var cutoff: Date?
        if let s = deletedBefore, let d = Self.date(s) {
            cutoff = d
            purged = try book.purge(deletedBefore: d)
        } else if let days = retainDays {
            purged = try book.setRetention(days: days)
            cutoff = Date(timeIntervalSinceNow: -Double(days) * 86_400)
        } else {
            purged = try book.setRetention(days: nil)
        }
        let total = purged.values.reduce(0, +)
        if options.json {
            Reports.print(PurgeReport(purged: .init(purged.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }),
                                      deletedBefore: cutoff.map(Timestamps.string), retainDays: retainDays))
        } else if noRetention {
            print("retention off: deleted rows stay in the projection from now on")
        } else {
            print("purged \(total) rows deleted before \(cutoff.map { Timestamps.string($0) } ?? "?")" +
                  (purged.isEmpty ? "" : " (" + purged.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + ")") +
                  (retainDays.map { "; deleted rows are now kept \($0) days" } ?? ""))
        }
    }

    private func purgeShare(_ share: ShareID) async throws {
        if let hub {
            let database = try HubDatabase(url: hub)
            var logger = Logger(label: "evctl.purge")
            logger.logLevel = .warning
            let r = try await PostgresHub.purgeShare(share, in: database, logger: logger)
            report(share: share, logs: r.logs, bytes: r.bytes, frames: r.frames, already: r.alreadyPurged, place: "hub \(database)")
            return
        }
        let book = try options.book(.readWrite)
        defer { try? book.close() }
        let r = try book.purgeShare(share)
        report(share: share, logs: r.logs.count, bytes: r.bytes, frames: nil, already: r.logs.isEmpty && r.purgedBefore, place: "this store")
    }

    private func report(share: ShareID, logs: Int, bytes: Int, frames: Int?, already: Bool, place: String) {
        if options.json {
            Reports.print(SharePurgeReport(share: share.description, logs: logs, frames: frames, bytes: bytes))
        } else if already {
            print("share \(share): no sealed log left to drop from \(place) (purged already); its frames are declined")
        } else if logs == 0 {
            print("share \(share): \(place) holds no sealed log of it; its frames are declined from now on")
        } else {
            print("share \(share): dropped \(logs) sealed log\(logs == 1 ? "" : "s")\(frames.map { ", \($0) frames" } ?? ""), \(bytes) bytes of ciphertext, from \(place); its frames are declined from now on")
        }
    }
}

/// `purge --share --json`.
struct SharePurgeReport: Encodable {
    var share: String
    var logs: Int
    var frames: Int?
    var bytes: Int
}
