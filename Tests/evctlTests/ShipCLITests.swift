import Foundation
import TestSupport
import Testing

/// Shipping and output drills run as a user would, through the built binary.
@Suite(.serialized) struct ShipCLITests {
    /// After `evctl pull URL`, the peer is remembered with the cursor the server gave for itself,
    /// not with this store's (which holds events the server never got: `compact` would drop them).
    @Test func pullRecordsThePeersOwnCursor() throws {
        let dir = TempDir()
        let a = dir.path + "/a", b = dir.path + "/b"
        try Evctl.run(["init", "--store", a])
        try Evctl.run(["init", "--store", b])
        try Evctl.run(["append", "--store", a], stdin: #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-000000000001","fields":{"title":"only in a"}}"# + "\n")
        try Evctl.run(["append", "--store", b], stdin: #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-000000000002","fields":{"title":"in b"}}"# + "\n")
        let (server, url) = try ServeCLITests().serve(["--store", b], dir: dir)
        defer { server.terminate(); server.waitUntilExit() }
        let pulled = try Evctl.run(["pull", "--store", a, url])
        #expect(pulled.status == 0, "\(pulled.stderr)")
        let serverCursor = try Evctl.run(["cursor", "--store", b, "--json"]).stdout
        let peers = json(try Evctl.run(["status", "--store", a, "--json"]).stdout)["peers"] as? [[String: Any]] ?? []
        #expect(peers.count == 1)
        let recorded = peers.first?["cursor"] as? String
        #expect(recorded != nil && serverCursor.contains(recorded!), "recorded \(recorded ?? "nil"), server \(serverCursor)")
        let mine = try Evctl.run(["cursor", "--store", a]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(recorded != mine)
    }

    /// A store restored from a backup, against the peer it synced with: a push alone warns that
    /// the peer holds more of its own log; a sync takes that tail back. Written to after the
    /// restore instead, a sync names the fork of its own log and exits 1, having pulled the rest.
    @Test func aStoreRestoredFromABackupIsWarnedThenTakesItsTailBack() throws {
        let dir = TempDir()
        let a = dir.path + "/a", hub = dir.path + "/hub", backup = dir.path + "/backup"
        try Evctl.run(["init", "--store", a])
        try Evctl.run(["init", "--store", hub])
        func append(_ id: Int, _ title: String) throws {
            try Evctl.run(["append", "--store", a], stdin: #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-00000000000\#(id)","fields":{"title":"\#(title)"}}"# + "\n")
        }
        func restore() throws {
            try FileManager.default.removeItem(atPath: a)
            try FileManager.default.copyItem(atPath: backup, toPath: a)
        }
        try append(1, "kept")
        try FileManager.default.copyItem(atPath: a, toPath: backup)
        try append(2, "lost")
        try append(3, "lost too")
        #expect(try Evctl.run(["push", "--store", a, hub]).status == 0)
        try restore()
        let pushed = try Evctl.run(["push", "--store", a, hub])
        #expect(pushed.status == 0 && pushed.stderr.contains("warning: the peer holds this store's own log through seq 3 (by its cursor), past where it ends here"), "\(pushed.stderr)")
        let synced = try Evctl.run(["sync", "--store", a, hub])
        #expect(synced.status == 0 && synced.stdout.contains("pulled 2 events") && !synced.stderr.contains("warning"), "\(synced.stdout) \(synced.stderr)")
        #expect(try Evctl.run(["items", "--store", a]).stdout.contains("lost too"))
        // Written to after the restore: the fork is named, the rest pulled, exit status 1.
        try restore()
        try append(4, "written after the restore")
        let forked = try Evctl.run(["sync", "--store", a, hub, "--json"])
        #expect(forked.status == 1, "\(forked.stderr)")
        #expect(forked.stderr.contains("this replica's own log has forked") && forked.stderr.contains("[own_log]") && !forked.stderr.contains("warning"), "\(forked.stderr)")
        #expect((json(forked.stdout)["own_log_refused"] as? String)?.contains("forked") == true, "\(forked.stdout)")
    }

    @Test func controlCharactersNeverReachTheTerminal() throws {
        let dir = TempDir()
        let a = dir.path + "/a"
        try Evctl.run(["init", "--store", a])
        // ESC [2J clears a screen, U+009B is the one-byte CSI, U+202E reverses what follows.
        let title = #"x\u001b[2J\u009b31m\u202eevil\u0007"#
        let r = try Evctl.run(["append", "--store", a], stdin: #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-000000000001","fields":{"title":"\#(title)","x_\u001bname":1}}"# + "\n")
        #expect(r.status == 0 || r.status == 4, "\(r.stderr)")
        if r.status == 4 {  // an odd field name is refused at input; the title alone then
            try Evctl.run(["append", "--store", a], stdin: #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-000000000001","fields":{"title":"\#(title)"}}"# + "\n")
        }
        for args in [["items"], ["log"], ["items", "--json"], ["log", "--json"], ["history", "item", "00000000-0000-4000-8000-000000000001"]] {
            let out = try Evctl.run(args + ["--store", a])
            #expect(out.status == 0)
            for bad in ["\u{1b}", "\u{9b}", "\u{202e}", "\u{07}"] {
                #expect(!out.stdout.contains(bad) && !out.stderr.contains(bad), "\(args) printed \(bad.unicodeScalars.first!.value)")
            }
            #expect(out.stdout.contains("evil"))
        }
    }

    /// Two syncs of one store at once both finish (peers.sqlite waits for the other instead of
    /// failing with "database is locked").
    @Test func twoSyncsOfOneStoreAtOnceBothFinish() throws {
        let dir = TempDir()
        let a = dir.path + "/a", b = dir.path + "/b", c = dir.path + "/c"
        for s in [a, b, c] { try Evctl.run(["init", "--store", s]) }
        let sample = try Evctl.run(["sample", "--count", "200", "--seed", "4"]).stdout
        try Evctl.run(["append", "--store", a], stdin: sample)
        for round in 0..<6 {
            let results = [b, c].map { peer -> (Process, String) in
                let p = Process()
                p.executableURL = URL(fileURLWithPath: Evctl.path)
                p.arguments = ["sync", "--store", a, peer]
                let errFile = dir.path + "/err-\(round)-\(UUID().uuidString.prefix(4))"
                FileManager.default.createFile(atPath: errFile, contents: nil)
                p.standardOutput = FileHandle.nullDevice
                p.standardError = FileHandle(forWritingAtPath: errFile)
                try! p.run()
                return (p, errFile)
            }
            for (p, _) in results { p.waitUntilExit() }
            let errors = results.map { (try? String(contentsOfFile: $0.1, encoding: .utf8)) ?? "" }
            #expect(results.allSatisfy { $0.0.terminationStatus == 0 }, "round \(round): \(results.map(\.0.terminationStatus)) \(errors)")
            try Evctl.run(["append", "--store", a], stdin: #"{"entity":"tag","op":"create","id":"00000000-0000-4000-8000-00000000000\#(round)","fields":{"name":"r"}}"# + "\n")
        }
    }

    /// An append that is durable but fails to project says so with its own exit status (a retry
    /// would append twice), and `evctl replay` completes it.
    @Test func appendedButNotProjectedHasItsOwnExitStatus() throws {
        let dir = TempDir()
        let a = dir.path + "/a"
        try Evctl.run(["init", "--store", a])
        try Evctl.run(["append", "--store", a], stdin: #"{"entity":"tag","op":"create","id":"00000000-0000-4000-8000-000000000009","fields":{"name":"first"}}"# + "\n")
        // A fault in the projection that only applying a new item meets.
        let inject = Process()
        inject.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        inject.arguments = ["sqlite3", a + "/projection.sqlite", "CREATE TRIGGER boom BEFORE INSERT ON items BEGIN SELECT RAISE(ABORT, 'injected fault'); END;"]
        try inject.run()
        inject.waitUntilExit()
        #expect(inject.terminationStatus == 0)
        let line = #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-000000000001","fields":{"title":"durable"}}"# + "\n"
        let r = try Evctl.run(["append", "--store", a, "--json"], stdin: line)
        #expect(r.status == 5, "\(r.status) \(r.stderr)")
        #expect(json(r.stdout)["appended"] as? Int == 1 && json(r.stdout)["projected"] as? Bool == false)
        #expect(r.stderr.contains("appended (durably) but not projected") && r.stderr.contains("evctl replay"))
        let drop = Process()
        drop.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        drop.arguments = ["sqlite3", a + "/projection.sqlite", "DROP TRIGGER boom;"]
        try drop.run()
        drop.waitUntilExit()
        #expect(try Evctl.run(["replay", "--store", a]).status == 0)
        #expect(try Evctl.run(["items", "--store", a]).stdout.contains("durable"))
        #expect(try Evctl.run(["log", "--store", a, "--json"]).stdout.split(separator: "\n").count == 2)
    }
}
