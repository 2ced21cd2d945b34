import EventLog
import Foundation
import TestSupport
import Testing

@Suite struct CLITests {
    let itemID = "5a3c0e4e-9b7d-4f0a-8c2e-1d6f3b9a7e21"

    @Test func initAppendLogStatusVerify() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        let initR = try Evctl.run(["init", "--store", store])
        #expect(initR.status == 0)
        let replica = initR.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(UUID(uuidString: replica) != nil)
        // A second init refuses, and says why.
        let again = try Evctl.run(["init", "--store", store])
        #expect(again.status == 1 && again.stderr.contains("already exists"))

        let input = """
            {"entity":"item","op":"create","id":"\(itemID)","fields":{"title":"Buy milk","parent_id":null}}

            {"entity":"item","op":"update","id":"\(itemID)","fields":{"notes":"2 litres"},"event_id":"c0ffee00-0000-4000-8000-000000000001"}
            """
        let a = try Evctl.run(["append", "--store", store, "--json", "-"], stdin: input)
        #expect(a.status == 0, "\(a.stderr)")
        let aj = json(a.stdout)
        #expect(aj["appended"] as? Int == 2 && aj["first_seq"] as? Int == 1 && aj["last_seq"] as? Int == 2)

        // EVCTL_STORE is the default store; a retry with the same event_id appends nothing.
        let retry = try Evctl.run(["append", "--json"], stdin: input.split(separator: "\n").last! + "\n", env: ["EVCTL_STORE": store])
        #expect(json(retry.stdout)["appended"] as? Int == 0 && json(retry.stdout)["duplicates"] as? Int == 1)

        let log = try Evctl.run(["log", "--store", store, "--json"])
        let lines = log.stdout.split(separator: "\n").map { json(String($0)) }
        #expect(lines.count == 2)
        #expect(lines[0]["seq"] as? Int == 1 && lines[0]["entity"] as? String == "item" && lines[0]["op"] as? String == "create")
        #expect(lines[0]["origin"] as? String == replica && lines[0]["id"] as? String == itemID)
        #expect((lines[0]["fields"] as? [String: Any])?["title"] as? String == "Buy milk")
        #expect((lines[0]["fields"] as? [String: Any])?["parent_id"] is NSNull)
        #expect(lines[1]["event_id"] as? String == "c0ffee00-0000-4000-8000-000000000001")
        #expect(lines[0]["hlc"] is Int && (lines[0]["time"] as? String)?.hasSuffix("Z") == true)

        let text = try Evctl.run(["log", "--store", store])
        #expect(text.stdout.contains("title=\"Buy milk\""))

        let status = try Evctl.run(["status", "--store", store, "--json"])
        let sj = json(status.stdout)
        #expect(sj["replica_id"] as? String == replica && sj["total_events"] as? Int == 2 && sj["segments"] as? Int == 1)
        #expect((sj["bytes_on_disk"] as? Int ?? 0) > 0)

        let verify = try Evctl.run(["verify", "--store", store])
        #expect(verify.status == 0 && verify.stdout.contains("ok"))
    }

    /// `evctl share`: create, card, add, append, list, pull through a store that is not a
    /// member (which holds ciphertext), remove, and the errors people meet.
    @Test func shareCommands() throws {
        let dir = TempDir()
        let (a, b, relay) = (dir.path + "/a", dir.path + "/b", dir.path + "/relay")
        for s in [a, b, relay] { #expect(try Evctl.run(["init", "--store", s]).status == 0) }
        let created = try Evctl.run(["share", "create", "Groceries", "--store", a, "--json"])
        #expect(created.status == 0, "\(created.stderr)")
        let share = try #require(created.stdout.split(separator: "\"").dropFirst(3).first.map(String.init))
        let card = try Evctl.run(["share", "card", "--store", b]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(card.hasPrefix("LBM1-"))
        #expect(try Evctl.run(["share", "add", share, card, "--store", a]).status == 0)
        let bad = try Evctl.run(["share", "add", share, "LBM1-AAAA", "--store", a])
        #expect(bad.status != 0 && bad.stderr.contains("member card"))
        let line = #"{"entity":"item","op":"create","id":"11111111-1111-4111-8111-111111111111","fields":{"title":"CLISECRET"}}"#
        #expect(try Evctl.run(["share", "append", share, "--store", a], stdin: line + "\n").status == 0)
        // A store outside the share declines its logs; a relay takes them as ciphertext.
        #expect(try Evctl.run(["pull", a, "--store", relay]).status == 0)
        #expect(!(try Evctl.run(["share", "list", "--store", relay]).stdout.contains(share)))
        let relayOn = try Evctl.run(["share", "relay", "--store", relay])
        #expect(relayOn.status == 0 && relayOn.stdout.contains("every share"), "\(relayOn.stderr)")
        #expect(try Evctl.run(["pull", a, "--store", relay]).status == 0)
        #expect(try Evctl.run(["pull", relay, "--store", b]).status == 0)
        #expect(try Evctl.run(["items", "--store", b]).stdout.contains("CLISECRET"))
        #expect(!(try Evctl.run(["items", "--store", relay]).stdout.contains("CLISECRET")))
        let listed = try Evctl.run(["share", "list", "--store", relay])
        #expect(listed.stdout.contains(share) && listed.stdout.contains("no key") && !listed.stdout.contains("Groceries"))
        let verify = try Evctl.run(["verify", "--store", relay])
        #expect(verify.status == 0 && verify.stdout.contains("sealed for shares this replica is not in"), "\(verify.stdout)")
        // A private item moves into the share (and another member sees it), and back out.
        let privateLine = #"{"entity":"item","op":"create","id":"22222222-2222-4222-8222-222222222222","fields":{"title":"MOVED"}}"#
        #expect(try Evctl.run(["append", "--store", a], stdin: privateLine + "\n").status == 0)
        let neither = try Evctl.run(["share", "move", "22222222-2222-4222-8222-222222222222", "--store", a])
        #expect(neither.status != 0 && neither.stderr.contains("--to SHARE or --private"), "\(neither.stderr)")
        let moved = try Evctl.run(["share", "move", "22222222-2222-4222-8222-222222222222", "--to", share, "--store", a, "--json"])
        #expect(moved.status == 0 && moved.stdout.contains("\"rows\""), "\(moved.stderr)")
        let wrongDoor = try Evctl.run(["append", "--store", a], stdin: #"{"entity":"item","op":"update","id":"22222222-2222-4222-8222-222222222222","fields":{"title":"x"}}"# + "\n")
        #expect(wrongDoor.status == 0)  // the old, deleted private row: still private data
        #expect(try Evctl.run(["pull", a, "--store", b]).status == 0)
        #expect(try Evctl.run(["items", "--store", b]).stdout.contains("MOVED"))
        // Only the admin changes members.
        let notAdmin = try Evctl.run(["share", "remove", share, "00000000-0000-4000-8000-000000000000", "--store", b])
        #expect(notAdmin.status != 0 && notAdmin.stderr.contains("admin"))

        // `purge --share`: refused while the share lives; once deleted, the relay drops its ciphertext.
        let live = try Evctl.run(["purge", "--share", share, "--store", relay])
        #expect(live.status != 0 && live.stderr.contains("is not deleted"), "\(live.stderr)")
        let notAShare = try Evctl.run(["purge", "--share", "groceries", "--store", relay])
        #expect(notAShare.status != 0 && notAShare.stderr.contains("not a share id"), "\(notAShare.stderr)")
        #expect(try Evctl.run(["purge", "--hub", "postgres://x@localhost/db", "--deleted-before", "2020-01-01"]).status != 0)
        #expect(try Evctl.run(["share", "delete", share, "--store", a]).status == 0)
        #expect(try Evctl.run(["pull", a, "--store", relay]).status == 0)
        let purged = try Evctl.run(["purge", "--share", share, "--store", relay, "--json"])
        #expect(purged.status == 0 && purged.stdout.contains("\"logs\":1"), "\(purged.stdout) \(purged.stderr)")
        let twice = try Evctl.run(["purge", "--share", share, "--store", relay])
        #expect(twice.status == 0 && twice.stdout.contains("purged already"), "\(twice.stdout)")
        let after = try Evctl.run(["verify", "--store", relay])
        #expect(after.status == 0, "\(after.stdout) \(after.stderr)")
    }

    @Test func logFilters() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        let sample = try Evctl.run(["sample", "--count", "300", "--seed", "5"])
        #expect(try Evctl.run(["append", "--store", store], stdin: sample.stdout).status == 0)
        func count(_ args: [String]) throws -> Int {
            try Evctl.run(["log", "--store", store, "--json"] + args).stdout.split(separator: "\n").count
        }
        #expect(try count([]) == 300)
        #expect(try count(["--limit", "7"]) == 7)
        #expect(try count(["--from-seq", "290"]) == 11)
        let tags = try count(["--entity", "tag"])
        #expect(tags > 0 && tags < 300)
        let firstID = json(String(try Evctl.run(["log", "--store", store, "--json", "--limit", "1"]).stdout.split(separator: "\n")[0]))["id"] as! String
        #expect(try count(["--id", firstID]) >= 1)
        #expect(try count(["--since", "2000-01-01"]) == 300)
        #expect(try count(["--until", "2000-01-01"]) == 0)
        let bad = try Evctl.run(["log", "--store", store, "--entity", "gadget"])
        #expect(bad.status != 0 && bad.stderr.contains("gadget"))
    }

    /// A bad line anywhere fails the call with its line number, and nothing is appended.
    @Test(arguments: [
        ("{\"entity\":\"item\",\"op\":\"create\",\"id\":\"ID\",\"fields\":{\"title\":5}}", "line 3", "title"),
        ("not json at all", "line 3", "expected '{'"),
        ("{\"entity\":\"item\",\"op\":\"create\",\"id\":\"xyz\"}", "line 3", "not a UUID"),
        ("{\"entity\":\"robot\",\"op\":\"create\",\"id\":\"ID\"}", "line 3", "unknown entity"),
    ])
    func badInputAppendsNothing(_ bad: String, _ line: String, _ message: String) throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        try Evctl.run(["append", "--store", store], stdin: "{\"entity\":\"tag\",\"op\":\"create\",\"id\":\"\(UUID().uuidString)\",\"fields\":{\"name\":\"home\"}}\n")
        let good = "{\"entity\":\"item\",\"op\":\"create\",\"id\":\"\(itemID)\",\"fields\":{\"title\":\"ok\"}}"
        let input = [good, good, bad.replacingOccurrences(of: "ID", with: itemID), good].joined(separator: "\n")
        let r = try Evctl.run(["append", "--store", store], stdin: input)
        #expect(r.status == 4)
        #expect(r.stderr.contains(line) && r.stderr.contains(message) && r.stderr.contains("nothing was appended"), "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        let log = try Evctl.run(["log", "--store", store, "--json"])
        #expect(log.stdout.split(separator: "\n").count == 1)
        #expect(try Evctl.run(["verify", "--store", store]).status == 0)
    }

    @Test func largeInputIsStreamedAsBoundedFrames() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        let file = dir.path + "/in.ndjson"
        let sample = try Evctl.run(["sample", "--count", "20000", "--seed", "8"])
        try sample.stdout.write(toFile: file, atomically: true, encoding: .utf8)
        let r = try Evctl.run(["append", "--store", store, "--json", file])
        #expect(json(r.stdout)["appended"] as? Int == 20000)
        let v = try Evctl.run(["verify", "--store", store, "--json"])
        let vj = json(v.stdout)
        #expect(vj["ok"] as? Bool == true && vj["events"] as? Int == 20000 && vj["frames"] as? Int == 20)
    }

    @Test func verifyNamesFileAndOffsetOfDamage() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        for seed in 1...3 {
            let sample = try Evctl.run(["sample", "--count", "50", "--seed", "\(seed)"])
            try Evctl.run(["append", "--store", store], stdin: sample.stdout)
        }
        let logDir = try FileManager.default.contentsOfDirectory(atPath: store + "/log")[0]
        let seg = store + "/log/" + logDir + "/00000000000000000001.seg"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: seg))
        bytes[200] ^= 0x40  // inside the first frame (which starts at byte 72)
        try bytes.write(to: URL(fileURLWithPath: seg))
        let r = try Evctl.run(["verify", "--store", store])
        #expect(r.status == 1)
        #expect(r.stdout.contains(seg) && r.stdout.contains("byte offset 72") && r.stdout.contains("checksum mismatch"), "\(r.stdout)")
        let j = try Evctl.run(["verify", "--store", store, "--json"])
        let problems = json(j.stdout)["problems"] as? [[String: Any]]
        #expect(problems?.first?["offset"] as? Int == 72 && problems?.first?["file"] as? String == seg)
        // Reading stops at the damage with an error rather than skipping it.
        let log = try Evctl.run(["log", "--store", store])
        #expect(log.status == 1 && log.stderr.contains("byte offset 72"))
    }

    @Test func errorsAreClear() throws {
        let dir = TempDir()
        let missing = try Evctl.run(["status", "--store", dir.path + "/nope"])
        #expect(missing.status == 1 && missing.stderr.contains("no store here") && missing.stderr.contains("evctl init"))
        let usage = try Evctl.run(["log", "--bogus"])
        #expect(usage.status == 64)
        let noFile = try Evctl.run(["init", "--store", dir.path + "/s"])
        #expect(noFile.status == 0)
        let r = try Evctl.run(["append", "--store", dir.path + "/s", dir.path + "/absent.ndjson"])
        #expect(r.status != 0 && r.stderr.contains("absent.ndjson"))
    }

    /// `evctl init --store a/b/c` creates the folders that are missing, as `git init a/b` does; a
    /// path through a file is refused, naming the file, and leaves nothing behind.
    @Test func initCreatesTheFoldersAboveTheStore() throws {
        let dir = TempDir()
        let store = dir.path + "/a/b/c"
        let r = try Evctl.run(["init", "--store", store])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(FileManager.default.fileExists(atPath: store + "/store.json"))
        #expect(try Evctl.run(["status", "--store", store]).status == 0)

        FileManager.default.createFile(atPath: dir.path + "/file", contents: Data("x".utf8))
        let through = try Evctl.run(["init", "--store", dir.path + "/file/s/t"])
        #expect(through.status == 1 && through.stderr.contains((dir.path as NSString).lastPathComponent + "/file]"), "\(through.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/file/s"))
    }

    /// `evctl keys` prints the public key a new store signs with (its id derives from it), in
    /// text and JSON, and never the private key; a store made before signed logs says it has none.
    @Test func keysPrintsThePublicKeyAndNeverThePrivateOne() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        #expect(try Evctl.run(["init", "--store", store]).status == 0)
        let text = try Evctl.run(["keys", "--store", store])
        #expect(text.status == 0, "\(text.stderr)")
        let line = try #require(text.stdout.split(separator: "\n").first { $0.hasPrefix("public key") })
        let printable = String(line.split(separator: " ").last!)
        let key = try #require(ReplicaPublicKey(printable: printable))
        let opened = try Store.open(at: store)
        #expect(key.replicaID == opened.replicaID)
        let seed = Array(FileManager.default.contents(atPath: opened.layout.signingKey)![8..<40]).map { String(format: "%02x", $0) }.joined()
        let json = try Evctl.run(["keys", "--store", store, "--json"])
        #expect(json.stdout.contains("\"public_key_hex\":\"\(key.hex)\"") && json.stdout.contains("\"signed\":true"), "\(json.stdout)")
        #expect(!text.stdout.contains(seed) && !json.stdout.contains(seed))
        // The member card, as `evctl share card` prints it, which an admin adds this replica by.
        let cardLine = try #require(text.stdout.split(separator: "\n").first { $0.hasPrefix("member card") })
        let card = try #require(MemberCard(printable: String(cardLine.split(separator: " ").last!)))
        #expect(card.replicaID == opened.replicaID)
        #expect(try Evctl.run(["share", "card", "--store", store]).stdout.contains(card.printable))
        #expect(json.stdout.contains("\"member_card\":\"\(card.printable)\""), "\(json.stdout)")

        let old = dir.path + "/old"
        _ = try Store.create(at: old, replicaID: .random())
        let none = try Evctl.run(["keys", "--store", old])
        #expect(none.status == 0 && none.stdout.contains("unsigned"), "\(none.stdout)")
        let line1 = "{\"entity\":\"tag\",\"op\":\"create\",\"id\":\"\(UUID().uuidString)\",\"fields\":{\"name\":\"x\"}}\n"
        #expect(try Evctl.run(["append", "--store", store, "-"], stdin: line1).status == 0)
        let verify = try Evctl.run(["verify", "--store", store])
        #expect(verify.status == 0 && verify.stdout.contains("1 frames (1 signed)"), "\(verify.stdout)")
        let status = try Evctl.run(["status", "--store", store])
        #expect(status.stdout.contains("(this replica, signed)"), "\(status.stdout)")
        #expect(try Evctl.run(["status", "--store", store, "--json"]).stdout.contains("\"signed\":true"))
    }

    /// A store named by one relative path component (`--store a`, the README's own demo shape)
    /// is made and used like any other: Foundation's `deletingLastPathComponent` trapped on such
    /// a path, so the project computes parents itself (`FileIO.parent`).
    @Test func aStoreNamedByOneRelativeComponentWorks() throws {
        let dir = TempDir()
        let made = try Evctl.run(["init", "--store", "a"], cwd: dir.path)
        #expect(made.status == 0, "\(made.stderr)")
        let appended = try Evctl.run(["append", "--store", "a", "-"], stdin: "{\"entity\":\"tag\",\"op\":\"create\",\"id\":\"\(UUID().uuidString)\",\"fields\":{\"name\":\"x\"}}\n", cwd: dir.path)
        #expect(appended.status == 0, "\(appended.stderr)")
        #expect(try Evctl.run(["status", "--store", "a"], cwd: dir.path).status == 0)
        #expect(try Evctl.run(["init", "--store", "b/"], cwd: dir.path).status == 0)
        #expect(FileManager.default.fileExists(atPath: dir.path + "/b/store.json"))
    }
}
