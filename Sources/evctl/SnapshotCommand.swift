import ArgumentParser
import Foundation
import EventLog
import Logbook

struct SnapshotCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "snapshot",
        abstract: "Write a consistent copy of the projection and the log position it covers (per origin: last seq and frame hash).",
        discussion: "Made with SQLite's VACUUM INTO while the writer lock is held; device-local app_settings are left out."
    )
    @OptionGroup var options: StoreOptions
    @Option(help: "The snapshot file to write.") var out: String

    func execute() throws {
        let book = try options.book(.readWrite)
        defer { try? book.close() }
        let info = try book.snapshot(to: out)
        let cursor = ReplicationCursor(info.anchors.mapValues(\.lastSeq))
        if options.json {
            print(try ReportJSON.string(SnapshotReport(file: out, bytes: info.bytes, cursor: cursor.token,
                                                       events: Seq.total(cursor.entries.values.lazy.map(\.rawValue)))))
        } else {
            print("snapshot of \(Seq.total(cursor.entries.values.lazy.map(\.rawValue))) events (\(info.bytes) bytes) at \(cursor.token) written to \(out)")
        }
    }
}

/// `evctl snapshot --json`.
struct SnapshotReport: Encodable {
    var file: String
    var bytes: Int
    var cursor: String
    var events: UInt64
}
