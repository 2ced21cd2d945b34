import Foundation
import TestSupport
import Testing

/// `evctl serve` as its own process, with `evctl pull|push|sync URL` against it.
@Suite(.serialized) struct ServeCLITests {
    /// Starts `evctl serve` on a free port; returns the process and its URL once it answers.
    func serve(_ args: [String], dir: TempDir) throws -> (Process, String) {
        try startListening(["serve", "--listen", "127.0.0.1:0"] + args, dir: dir)
    }

    struct CLIError: Error { let m: String; init(_ m: String) { self.m = m } }

    @Test func pullPushAndSyncOverHTTPWithTokens() throws {
        let dir = TempDir()
        let a = dir.path + "/a", b = dir.path + "/b"
        try Evctl.run(["init", "--store", a])
        let bID = try Evctl.run(["init", "--store", b]).stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: " ").last.map(String.init) ?? ""
        let status = try Evctl.run(["status", "--store", b, "--json"])
        let bReplica = (json(status.stdout)["replica_id"] as? String) ?? bID
        try Evctl.run(["append", "--store", a], stdin: #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-000000000001","fields":{"title":"served from a"}}"# + "\n")
        try Evctl.run(["append", "--store", b], stdin: #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-000000000002","fields":{"title":"pushed by b"}}"# + "\n")
        let tokens = dir.path + "/tokens.json"
        try #"{"principals":[{"name":"b","token":"b-secret-token-0123456789","push":["\#(bReplica)"],"pull":true}]}"#
            .write(toFile: tokens, atomically: true, encoding: .utf8)
        let (server, url) = try serve(["--store", a, "--tokens", tokens], dir: dir)
        defer { server.terminate(); server.waitUntilExit() }

        let refused = try Evctl.run(["pull", "--store", b, url])
        #expect(refused.status == 1 && refused.stderr.contains("401 unauthorized") && refused.stderr.contains("--token"))
        let wrong = try Evctl.run(["pull", "--store", b, url, "--token", "not-the-right-token-at-all"])
        #expect(wrong.status == 1 && wrong.stderr.contains("not valid"))

        let synced = try Evctl.run(["sync", "--store", b, url, "--json"], env: ["EVCTL_TOKEN": "b-secret-token-0123456789"])
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(json(synced.stdout)["pulled_events"] as? Int == 1 && json(synced.stdout)["pushed_events"] as? Int == 1)
        let itemsA = try Evctl.run(["items", "--store", a]).stdout, itemsB = try Evctl.run(["items", "--store", b]).stdout
        #expect(itemsA == itemsB && itemsA.contains("pushed by b") && itemsA.contains("served from a"))
        // Nothing new: nothing moves; status remembers the peer by its URL.
        let again = try Evctl.run(["sync", "--store", b, url], env: ["EVCTL_TOKEN": "b-secret-token-0123456789"])
        #expect(again.stdout.contains("pulled 0 events, pushed 0 events"))
        let st = try Evctl.run(["status", "--store", b])
        #expect(st.stdout.contains(url))
        // A local append on the served store works while the server runs (the lock is per push).
        let local = try Evctl.run(["append", "--store", a], stdin: #"{"entity":"tag","op":"create","id":"00000000-0000-4000-8000-000000000003","fields":{"name":"late"}}"# + "\n")
        #expect(local.status == 0, "\(local.stderr)")
        let pulled = try Evctl.run(["pull", "--store", b, url, "--token", "b-secret-token-0123456789"])
        #expect(pulled.stdout.contains("pulled 1 events"))
    }

    /// Two users on one hub with the same client commands: each replica gets its user's items
    /// only; an event without the user as actor is refused; a token revoked in the file and
    /// signalled with SIGHUP stops working without a restart.
    @Test func scopedUsersShareOneHub() throws {
        let dir = TempDir()
        let hub = dir.path + "/hub", a1 = dir.path + "/a1", a2 = dir.path + "/a2", b1 = dir.path + "/b1"
        for s in [hub, a1, a2, b1] { try Evctl.run(["init", "--store", s]) }
        func replica(_ s: String) throws -> String { try json(Evctl.run(["status", "--store", s, "--json"]).stdout)["replica_id"] as? String ?? "" }
        func tokens(_ principals: [(String, String, String, String)]) -> String {
            "{\"principals\":[" + principals.map { "{\"name\":\"\($0.0)\",\"token\":\"\($0.1)\",\"user\":\"\($0.2)\",\"push\":[\"\($0.3)\"],\"pull\":true}" }
                .joined(separator: ",") + "]}"
        }
        let file = dir.path + "/tokens.json"
        let all = [("a1", "a1-token-0123456789abcdef", "alice", try replica(a1)), ("a2", "a2-token-0123456789abcdef", "alice", try replica(a2)),
                   ("b1", "b1-token-0123456789abcdef", "bob", try replica(b1))]
        try tokens(all).write(toFile: file, atomically: true, encoding: .utf8)
        let (server, url) = try serve(["--store", hub, "--tokens", file], dir: dir)
        defer { server.terminate(); server.waitUntilExit() }
        func item(_ n: Int, _ title: String) -> String { #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-00000000000\#(n)","fields":{"title":"\#(title)"}}"# + "\n" }
        #expect(try Evctl.run(["append", "--store", a1, "--actor", "alice"], stdin: item(1, "alice on a1")).status == 0)
        #expect(try Evctl.run(["append", "--store", b1], stdin: item(2, "bob on b1"), env: ["EVCTL_ACTOR": "bob"]).status == 0)
        for (s, t) in [(a1, "a1-token-0123456789abcdef"), (b1, "b1-token-0123456789abcdef"), (a2, "a2-token-0123456789abcdef")] {
            let r = try Evctl.run(["sync", "--store", s, url, "--token", t])
            #expect(r.status == 0, "\(r.stderr)")
        }
        let a2Items = try Evctl.run(["items", "--store", a2]).stdout
        #expect(a2Items.contains("alice on a1") && !a2Items.contains("bob on b1"))
        #expect(!(try Evctl.run(["items", "--store", b1]).stdout.contains("alice")))
        // An event without an actor in bob's own origin: his, by ownership (history written before
        // the replica joined the hub can always be pushed).
        try Evctl.run(["append", "--store", b1], stdin: item(3, "no actor"))
        let accepted = try Evctl.run(["push", "--store", b1, url, "--token", "b1-token-0123456789abcdef"])
        #expect(accepted.status == 0, "\(accepted.stderr)")
        #expect(try Evctl.run(["items", "--store", hub]).stdout.contains("no actor"))
        // An event naming another user as its actor: refused, with the reason.
        try Evctl.run(["append", "--store", b1, "--actor", "alice"], stdin: item(4, "alice's name on b1"))
        let refused = try Evctl.run(["push", "--store", b1, url, "--token", "b1-token-0123456789abcdef"])
        #expect(refused.status == 1 && refused.stderr.contains("403") && refused.stderr.contains("actor"), "\(refused.status) \(refused.stderr)")
        #expect(!(try Evctl.run(["items", "--store", hub]).stdout.contains("alice's name")))
        // Frames of alice's that a2 took from a1's folder and a1 has not pushed yet: a2's token
        // may not push a1's origin, which is left out (named, exit status 7, `refused`), and
        // a2's own frames go through.
        #expect(try Evctl.run(["append", "--store", a1, "--actor", "alice"], stdin: item(5, "alice later on a1")).status == 0)
        #expect(try Evctl.run(["pull", "--store", a2, a1]).status == 0)
        #expect(try Evctl.run(["append", "--store", a2, "--actor", "alice"], stdin: item(6, "alice on a2")).status == 0)
        let partly = try Evctl.run(["sync", "--store", a2, url, "--token", "a2-token-0123456789abcdef", "--json"])
        #expect(partly.status == 7 && partly.stderr.contains("origin \(all[0].3) was not pushed") && partly.stderr.contains("may not push frames of origin"),
                "\(partly.status) \(partly.stderr)")
        #expect(((json(partly.stdout)["refused"] as? [String: Any])?[all[0].3] as? String)?.contains("403") == true, "\(partly.stdout)")
        #expect(try Evctl.run(["items", "--store", hub]).stdout.contains("alice on a2"))
        #expect(!(try Evctl.run(["items", "--store", hub]).stdout.contains("alice later on a1")))
        #expect(try Evctl.run(["status", "--store", a2]).stdout.contains("not pushed"), "status shows the refusal as the peer's last error")
        // `sync --follow --json` names it too, in the line of the exchange that first left it out.
        let lines = dir.path + "/follow.ndjson"
        FileManager.default.createFile(atPath: lines, contents: nil)
        let follower = Process()
        follower.executableURL = URL(fileURLWithPath: Evctl.path)
        follower.arguments = ["sync", "--follow", "--json", "--store", a2, url, "--token", "a2-token-0123456789abcdef"]
        follower.standardOutput = FileHandle(forWritingAtPath: lines)
        // Its state on stderr does not call it in sync while an origin is refused.
        let notes = dir.path + "/follow.stderr"
        FileManager.default.createFile(atPath: notes, contents: nil)
        follower.standardError = FileHandle(forWritingAtPath: notes)
        try follower.run()
        var named: String?
        var state = ""
        for _ in 0..<400 where named == nil || !state.contains("in sync at") {
            let text = (try? String(contentsOfFile: lines, encoding: .utf8)) ?? ""
            named = text.split(separator: "\n").compactMap { (json(String($0))["refused"] as? [String: Any])?[all[0].3] as? String }.first
            state = (try? String(contentsOfFile: notes, encoding: .utf8)) ?? ""
            if named == nil || !state.contains("in sync at") { Thread.sleep(forTimeInterval: 0.05) }
        }
        follower.terminate()
        follower.waitUntilExit()
        #expect(named?.contains("may not push frames of origin") == true, "\((try? String(contentsOfFile: lines, encoding: .utf8)) ?? "")")
        #expect(state.contains("but for 1 origin (named above)"), "\(state)")
        // a2's token revoked: the file is replaced, and SIGHUP has it read at once.
        try tokens([all[0], all[2]]).write(toFile: file, atomically: true, encoding: .utf8)
        kill(server.processIdentifier, SIGHUP)
        var revoked = false
        for _ in 0..<100 where !revoked {
            revoked = try Evctl.run(["pull", "--store", a2, url, "--token", "a2-token-0123456789abcdef"]).stderr.contains("401")
            if !revoked { Thread.sleep(forTimeInterval: 0.05) }
        }
        #expect(revoked)
        #expect(server.isRunning)
        #expect(try Evctl.run(["pull", "--store", a1, url, "--token", "a1-token-0123456789abcdef"]).status == 0)
    }

    /// `evctl serve --hub`: two nodes on one PostgreSQL database (a cluster of the test's own,
    /// scripts/pg-cluster.sh), a replica pushing through one and another pulling through the
    /// other; a node killed (SIGKILL) loses nothing it acknowledged.
    @Test func twoHubNodesOnPostgreSQLAndOneKilled() throws {
        let dir = TempDir()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("scripts/pg-cluster.sh").path
        func cluster(_ command: String) throws -> String {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/bin/bash")
            p.arguments = [script, command, dir.path + "/pg"]
            let out = Pipe()
            p.standardOutput = out
            p.standardError = FileHandle.standardError
            try p.run()
            let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            guard p.terminationStatus == 0 else { throw CLIError("pg-cluster.sh \(command) failed") }
            return text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let url = try cluster("start")
        defer { _ = try? cluster("stop") }
        let a1 = dir.path + "/a1", a2 = dir.path + "/a2"
        for s in [a1, a2] { try Evctl.run(["init", "--store", s]) }
        func replica(_ s: String) throws -> String { try json(Evctl.run(["status", "--store", s, "--json"]).stdout)["replica_id"] as? String ?? "" }
        let file = dir.path + "/tokens.json"
        try """
            {"principals":[{"name":"a1","token":"a1-token-0123456789abcdef","user":"alice","push":["\(try replica(a1))"],"pull":true},
                           {"name":"a2","token":"a2-token-0123456789abcdef","user":"alice","push":["\(try replica(a2))"],"pull":true},
                           {"name":"relay","token":"relay-token-0123456789abc","push":"*","pull":true}]}
            """.write(toFile: file, atomically: true, encoding: .utf8)
        // A principal without a user: a hub refuses to start.
        let refused = try Evctl.run(["serve", "--hub", url, "--tokens", file, "--listen", "127.0.0.1:0"])
        #expect(refused.status != 0 && refused.stderr.contains("\"relay\" has no \"user\""))
        let scoped = try String(contentsOfFile: file, encoding: .utf8).replacingOccurrences(of: #""push":"*""#, with: #""user":"relay","push":"*""#)
        try scoped.write(toFile: file, atomically: true, encoding: .utf8)
        let (n1, url1) = try serve(["--hub", url, "--tokens", file], dir: dir)
        let (n2, url2) = try serve(["--hub", url, "--tokens", file], dir: dir)
        defer {
            for n in [n1, n2] where n.isRunning {
                n.terminate()
                n.waitUntilExit()
            }
        }
        var acknowledged = 0
        for round in 0..<6 {
            let r = try Evctl.run(["sample", "--count", "50", "--seed", "\(round + 1)"])
            #expect(try Evctl.run(["append", "--store", a1, "--actor", "alice"], stdin: r.stdout).status == 0)
            let pushed = try Evctl.run(["push", "--store", a1, url1, "--token", "a1-token-0123456789abcdef"])
            #expect(pushed.status == 0, "\(pushed.stderr)")
            acknowledged += 50
            if round == 3 {
                kill(n1.processIdentifier, SIGKILL)
                n1.waitUntilExit()
                break
            }
        }
        let pulled = try Evctl.run(["pull", "--store", a2, url2, "--token", "a2-token-0123456789abcdef"])
        #expect(pulled.status == 0, "\(pulled.stderr)")
        let events = try Evctl.run(["log", "--store", a2, "--json"]).stdout.split(separator: "\n").count
        #expect(events == acknowledged)
        #expect(try Evctl.run(["items", "--store", a1, "--json", "--include-deleted"]).stdout == Evctl.run(["items", "--store", a2, "--json", "--include-deleted"]).stdout)
    }

    @Test func serveRefusesAnOpenNonLoopbackAddressAndAPeerThatIsDown() throws {
        let dir = TempDir()
        let a = dir.path + "/a"
        try Evctl.run(["init", "--store", a])
        let r = try Evctl.run(["serve", "--store", a, "--listen", "0.0.0.0:0"])
        #expect(r.status != 0 && r.stderr.contains("without --tokens"))
        // Nobody listens: transient failures retried, then a clear error.
        let down = try Evctl.run(["pull", "--store", a, "http://127.0.0.1:1", "--attempts", "2"])
        #expect(down.status == 1 && down.stderr.contains("gave up after 2 attempts"))
    }

    /// `--max-connections-per-address` with `--count-loopback`: while one connection from this
    /// machine is held open, a pull (another connection from the same address) is turned away;
    /// once it is closed, the pull goes through. A bound below 1 is refused by name.
    #if os(Linux)  // a raw socket's constants as Glibc names them
    @Test func servesAtMostTheConnectionsOneAddressMayHold() throws {
        let dir = TempDir()
        let a = dir.path + "/a", b = dir.path + "/b"
        try Evctl.run(["init", "--store", a])
        try Evctl.run(["init", "--store", b])
        let zero = try Evctl.run(["serve", "--store", a, "--listen", "127.0.0.1:0", "--max-connections-per-address", "0"])
        #expect(zero.status != 0 && zero.stderr.contains("--max-connections-per-address must be at least 1"), "\(zero.stderr)")
        let (server, url) = try serve(["--store", a, "--max-connections-per-address", "1", "--count-loopback"], dir: dir)
        defer { server.terminate(); server.waitUntilExit() }
        // One connection, held open and answered once (so the server has counted it).
        let port = UInt16(url.split(separator: ":").last!.filter(\.isNumber))!
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        #expect(rc == 0)
        let health = Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        _ = health.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var buffer = [UInt8](repeating: 0, count: 256)
        var tv = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let n = recv(fd, &buffer, buffer.count, 0), why = errno
        let first = String(decoding: buffer.prefix(max(0, n)), as: UTF8.self)
        #expect(first.hasPrefix("HTTP/1.1 200"), "\(n) bytes, errno \(why): \(Array(first.utf8.prefix(40)))")
        let turnedAway = try Evctl.run(["pull", "--store", b, url, "--attempts", "1"])
        // Closed as it arrived: the client tells of a link lost, not of an answer.
        #expect(turnedAway.status != 0 && turnedAway.stderr.contains("[network]") && turnedAway.stderr.contains(url), "\(turnedAway.stderr)")
        close(fd)
        var pulled = false
        for _ in 0..<100 where !pulled {
            pulled = try Evctl.run(["pull", "--store", b, url, "--attempts", "1"]).status == 0
            if !pulled { Thread.sleep(forTimeInterval: 0.1) }
        }
        #expect(pulled)
    }
    #endif

    /// `sync --follow`: an append on either side reaches the other without anyone running sync,
    /// and a follower whose server goes away reconnects once it is back.
    @Test func syncFollowKeepsBothSidesInSync() throws {
        let dir = TempDir()
        let a = dir.path + "/a", b = dir.path + "/b"
        try Evctl.run(["init", "--store", a])
        try Evctl.run(["init", "--store", b])
        let (server, url) = try serve(["--store", a], dir: dir)
        defer { server.terminate(); server.waitUntilExit() }
        let follower = Process()
        follower.executableURL = URL(fileURLWithPath: Evctl.path)
        follower.arguments = ["sync", "--follow", "--store", b, url]
        follower.standardOutput = FileHandle.nullDevice
        follower.standardError = FileHandle.nullDevice
        try follower.run()
        defer { follower.terminate(); follower.waitUntilExit() }

        func events(_ store: String) throws -> [String] {
            try Evctl.run(["log", "--store", store, "--json"]).stdout.split(separator: "\n").compactMap { json(String($0))["id"] as? String }
        }
        func eventually(_ what: String, seconds: Double = 20, _ check: () throws -> Bool) throws {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                if try check() { return }
                Thread.sleep(forTimeInterval: 0.05)
            }
            Issue.record("not within \(seconds) s: \(what)")
        }
        try Evctl.run(["append", "--store", a], stdin: #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-00000000000a","fields":{"title":"from a"}}"# + "\n")
        try eventually("a's append reaches b") { try events(b).contains("00000000-0000-4000-8000-00000000000a") }
        try Evctl.run(["append", "--store", b], stdin: #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-00000000000b","fields":{"title":"from b"}}"# + "\n")
        try eventually("b's append reaches a") { try events(a).contains("00000000-0000-4000-8000-00000000000b") }
        #expect(follower.isRunning)
        // Both projections show both items.
        try eventually("the projections agree") {
            try Evctl.run(["items", "--store", a]).stdout == Evctl.run(["items", "--store", b]).stdout
        }
        // The server goes away and comes back on the same port: the follower reconnects.
        server.terminate()
        server.waitUntilExit()
        try Evctl.run(["append", "--store", a], stdin: #"{"entity":"item","op":"create","id":"00000000-0000-4000-8000-00000000000c","fields":{"title":"while away"}}"# + "\n")
        let port = url.split(separator: ":").last.map(String.init)!
        let again = Process()
        again.executableURL = URL(fileURLWithPath: Evctl.path)
        again.arguments = ["serve", "--store", a, "--listen", "127.0.0.1:\(port)"]
        again.standardOutput = FileHandle.nullDevice
        again.standardError = FileHandle.nullDevice
        try again.run()
        defer { again.terminate(); again.waitUntilExit() }
        try eventually("the follower reconnects and pulls", seconds: 40) { try events(b).contains("00000000-0000-4000-8000-00000000000c") }
        #expect(follower.isRunning)
    }
}
