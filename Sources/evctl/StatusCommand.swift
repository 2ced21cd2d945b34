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
            print(try ReportJSON.string(StatusReport(status, store: book.path)))
        } else {
            print("store       \(book.path)")
            print("replica id  \(s.replicaID)")
            print("events      \(s.totalEvents) in \(s.segments) segments, \(s.logBytes) bytes of log, \(s.bytesOnDisk) bytes on disk")
            for o in s.origins {
                let marks = (o.origin == s.replicaID ? ["this replica"] : []) + [o.origin.isKeyDerived ? "signed" : "unsigned"]
                let mine = " (" + marks.joined(separator: ", ") + ")"
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

/// `evctl status --json`.
struct StatusReport: Encodable {
    struct Origin: Encodable {
        var origin: String
        /// Whether its id derives from a signing key: every frame of it is signed, and was
        /// verified when it arrived.
        var signed: Bool
        var lastSeq: UInt64
        var lastTime: String?
        var segments: Int
        var bytes: Int
    }
    struct File: Encodable {
        var name: String
        var bytes: Int
    }
    struct Disk: Encodable {
        var mountPoint: String
        var totalBytes: UInt64
        var availableBytes: UInt64
    }
    struct Peer: Encodable {
        var name: String
        var cursor: String?
        var lastSyncAt: String?
        var lastError: String?
        var pulledEvents: Int
        var pushedEvents: Int
    }
    struct Unread: Encodable {
        var entity: String
        var op: String
        var schemaVersion: UInt8
        var events: Int
    }
    var replicaID: String
    var store: String
    var totalEvents: UInt64
    var segments: Int
    var logBytes: Int
    var bytesOnDisk: Int
    var origins: [Origin]
    var files: [File]
    var disk: Disk?
    var peers: [Peer]
    var unread: [Unread]

    init(_ status: LogbookStatus, store: String) {
        let s = status.log
        replicaID = s.replicaID.description
        self.store = store
        totalEvents = s.totalEvents
        segments = s.segments
        logBytes = s.logBytes
        bytesOnDisk = s.bytesOnDisk
        origins = s.origins.map {
            Origin(origin: $0.origin.description, signed: $0.origin.isKeyDerived, lastSeq: $0.lastSeq.rawValue,
                   lastTime: $0.lastSeq.rawValue == 0 ? nil : ISOTime.string($0.lastHLC), segments: $0.segments, bytes: $0.bytes)
        }
        files = s.files.map { File(name: $0.name, bytes: $0.bytes) }
        disk = s.disk.map { Disk(mountPoint: $0.mountPoint, totalBytes: $0.totalBytes, availableBytes: $0.availableBytes) }
        peers = status.peers.map {
            Peer(name: $0.name, cursor: $0.cursor?.token, lastSyncAt: $0.lastSyncAt, lastError: $0.lastError,
                 pulledEvents: $0.pulledEvents, pushedEvents: $0.pushedEvents)
        }
        unread = status.unread.map { Unread(entity: $0.entity.name, op: $0.op.name, schemaVersion: $0.schemaVersion, events: $0.events) }
    }
}
