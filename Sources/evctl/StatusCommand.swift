import ArgumentParser
import EventLog
import Logbook

struct StatusCommand: StoreCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "What the store holds: origins, events, segments, bytes.")
    @OptionGroup var options: StoreOptions

    func execute() throws {
        let book = try options.book(.inspect)
        let status = try book.status()
        let (s, peers) = (status.log, status.peers)
        if options.json {
            let origins = s.origins.map {
                JSON.object([("origin", JSON.string($0.origin.description)), ("last_seq", String($0.lastSeq.rawValue)),
                             ("last_time", $0.lastSeq.rawValue == 0 ? "null" : JSON.string(ISOTime.string($0.lastHLC))),
                             ("segments", String($0.segments)), ("bytes", String($0.bytes))])
            }
            print(JSON.object([
                ("replica_id", JSON.string(s.replicaID.description)), ("store", JSON.string(book.path)),
                ("total_events", String(s.totalEvents)), ("segments", String(s.segments)),
                ("log_bytes", String(s.logBytes)), ("bytes_on_disk", String(s.bytesOnDisk)),
                ("origins", "[" + origins.joined(separator: ",") + "]"),
                ("files", "[" + s.files.map { JSON.object([("name", JSON.string($0.name)), ("bytes", String($0.bytes))]) }.joined(separator: ",") + "]"),
                ("disk", s.disk.map { JSON.object([("mount_point", JSON.string($0.mountPoint)), ("total_bytes", String($0.totalBytes)),
                                                   ("available_bytes", String($0.availableBytes))]) } ?? "null"),
                ("peers", "[" + peers.map { p in
                    JSON.object([("name", JSON.string(p.name)), ("cursor", p.cursor.map { JSON.string($0.token) } ?? "null"),
                                 ("last_sync_at", p.lastSyncAt.map(JSON.string) ?? "null"), ("last_error", p.lastError.map(JSON.string) ?? "null"),
                                 ("pulled_events", String(p.pulledEvents)), ("pushed_events", String(p.pushedEvents))])
                }.joined(separator: ",") + "]"),
                ("unread", "[" + status.unread.map { u in
                    JSON.object([("entity", JSON.string(u.entity.name)), ("op", JSON.string(u.op.name)),
                                 ("schema_version", String(u.schemaVersion)), ("events", String(u.events))])
                }.joined(separator: ",") + "]"),
            ]))
        } else {
            print("store       \(book.path)")
            print("replica id  \(s.replicaID)")
            print("events      \(s.totalEvents) in \(s.segments) segments, \(s.logBytes) bytes of log, \(s.bytesOnDisk) bytes on disk")
            for o in s.origins {
                let mine = o.origin == s.replicaID ? " (this replica)" : ""
                let last = o.lastSeq.rawValue == 0 ? "empty" : "last seq \(o.lastSeq) at \(ISOTime.string(o.lastHLC))"
                print("origin      \(o.origin)\(mine): \(last), \(o.segments) segments, \(o.bytes) bytes")
            }
            for f in s.files { print("file        \(printable(f.name)): \(f.bytes) bytes") }
            if let d = s.disk { print("disk        mounted at \(printable(d.mountPoint)): \(d.availableBytes) of \(d.totalBytes) bytes free") }
            for p in peers {
                let when = p.lastSyncAt.map { "last synced \($0)" } ?? "never synced"
                print("peer        \(printable(p.name)): \(when), \(p.pulledEvents) events pulled, \(p.pushedEvents) pushed" + (p.lastError.map { "; last error: \(printable($0, limit: 300))" } ?? ""))
            }
            for u in status.unread {
                let what = u.understoodNow ? "understood by this build: rebuilt when the store is next opened for writing"
                    : "written by a newer build: kept and shipped, projected as far as this build understands"
                print("unread      \(u.events) \(u.entity.name) \(u.op.name) events of schema version \(u.schemaVersion) (\(what))")
            }
        }
    }
}

import Foundation
