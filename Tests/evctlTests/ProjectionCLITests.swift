import Domain
import Foundation
import TestSupport
import Testing
@testable import EventLog
import Projections

@Suite struct ProjectionCLITests {
    @Test func appendProjectsAndItemsSearchHistory() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        let parent = "11111111-1111-4111-8111-111111111111", child = "22222222-2222-4222-8222-222222222222"
        let input = """
            {"entity":"item","op":"create","id":"\(parent)","fields":{"title":"Plan trip to Zürich"}}
            {"entity":"item","op":"create","id":"\(child)","fields":{"title":"Book hotel","parent_id":"\(parent)"}}
            {"entity":"item","op":"update","id":"\(child)","fields":{"notes":"near the lake"}}
            """
        #expect(try Evctl.run(["append", "--store", store], stdin: input).status == 0)
        let items = try Evctl.run(["items", "--store", store, "--json"]).stdout.split(separator: "\n").map { json(String($0)) }
        #expect(items.count == 2)
        let search = try Evctl.run(["items", "--store", store, "--search", "zuri", "--json"]).stdout.split(separator: "\n").map { json(String($0)) }
        #expect(search.count == 1 && search[0]["id"] as? String == parent)
        let under = try Evctl.run(["items", "--store", store, "--under", parent, "--json"]).stdout.split(separator: "\n").map { json(String($0)) }
        #expect(under.map { $0["depth"] as? Int } == [0, 1])
        let history = json(try Evctl.run(["history", "--store", store, "item", child, "--json"]).stdout)
        let events = history["events"] as? [[String: Any]] ?? []
        #expect(events.count == 2)
        #expect((events[0]["holds"] as? [String])?.contains("title") == true)
        #expect((events[1]["holds"] as? [String]) == ["notes"])
        // Delete hides, --include-deleted shows.
        try Evctl.run(["append", "--store", store], stdin: "{\"entity\":\"item\",\"op\":\"delete\",\"id\":\"\(child)\"}")
        #expect(try Evctl.run(["items", "--store", store, "--json"]).stdout.split(separator: "\n").count == 1)
        #expect(try Evctl.run(["items", "--store", store, "--include-deleted", "--json"]).stdout.split(separator: "\n").count == 2)
        let deep = try Evctl.run(["verify", "--deep", "--store", store])
        #expect(deep.status == 0 && deep.stdout.contains("identical"))
    }

    @Test func linksFollowsItemsAndStatusNamesANewerBuildsEvents() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        let a = "11111111-1111-4111-8111-111111111111", b = "22222222-2222-4222-8222-222222222222", c = "33333333-3333-4333-8333-333333333333"
        let input = """
            {"entity":"item","op":"create","id":"\(a)","fields":{"title":"A"}}
            {"entity":"item","op":"create","id":"\(b)","fields":{"title":"B \\u001b[2J"}}
            {"entity":"link","op":"create","id":"aaaaaaaa-0000-4000-8000-000000000001","fields":{"from_id":"\(a)","to_id":"\(b)","kind":"LINK"}}
            {"entity":"link","op":"create","id":"aaaaaaaa-0000-4000-8000-000000000002","fields":{"from_id":"\(b)","to_id":"\(c)","kind":"SEQUENCE"}}
            {"entity":"link","op":"create","id":"aaaaaaaa-0000-4000-8000-000000000003","fields":{"from_id":"\(c)","to_id":"\(a)"}}
            """
        #expect(try Evctl.run(["append", "--store", store, "-"], stdin: input).status == 0)
        let json = try Evctl.run(["links", "--store", store, a.uppercased(), "--depth", "3", "--json"])
        #expect(json.status == 0)
        let lines = json.stdout.split(separator: "\n").map { try! JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
        #expect(lines.map { $0["id"] as? String } == [b, c])
        #expect(lines.map { $0["depth"] as? Int } == [1, 2])
        #expect(lines[1]["exists"] as? Bool == false && lines[1]["kind"] as? String == "SEQUENCE")
        let text = try Evctl.run(["links", "--store", store, a, "--depth", "3", "--kind", "LINK"])
        #expect(text.stdout.contains("\\u{1b}[2J") && !text.stdout.contains("\u{1b}"))  // a hostile title reaches no terminal raw
        #expect(!text.stdout.contains(c))
        let bad = try Evctl.run(["links", "--store", store, a, "--depth", "0"])
        #expect(bad.status == 64 && bad.stderr.contains("--depth"))
        #expect(try Evctl.run(["links", "--store", store, "nope"]).stderr.contains("not an item id"))

        // A newer build's event, recorded as unread by the projection, is named by status.
        let projection = try Projection(store: try Store.open(at: store))
        try projection.database.write { try $0.execute(sql: "INSERT INTO projection_unread VALUES (42, 1, 3, 7)") }
        try projection.close()
        let status = try Evctl.run(["status", "--store", store, "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as! [String: Any]
        let unread = try #require(object["unread"] as? [[String: Any]])
        #expect(unread.first?["entity"] as? String == "entity#42" && unread.first?["events"] as? Int == 7)
        #expect(try Evctl.run(["status", "--store", store]).stdout.contains("unread      7 entity#42 create events of schema version 3"))
    }

    @Test func replayRebuildAndDeepVerifyCatchATamperedProjection() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        try Evctl.run(["append", "--store", store, "--no-project"], stdin: try Evctl.run(["sample", "--count", "2000"]).stdout)
        let replay = try Evctl.run(["replay", "--store", store, "--json"])
        #expect(json(replay.stdout)["events"] as? Int == 2000)
        #expect(json(try Evctl.run(["replay", "--store", store, "--json"]).stdout)["events"] as? Int == 0)
        // Damage the projection behind its back: verify --deep names the difference; a rebuild repairs it.
        let p = try Projection(store: try Store.open(at: store))
        try p.database.write { db in try db.execute(sql: "UPDATE items SET title = 'tampered' WHERE rowid = (SELECT min(rowid) FROM items)") }
        try p.close()
        let bad = try Evctl.run(["verify", "--deep", "--store", store])
        #expect(bad.status == 1 && bad.stdout.contains("tampered"))
        // The summary line agrees with the problem it printed, and so does --json's top-level ok.
        #expect(bad.stdout.contains("FAILED:") && bad.stdout.contains("; 1 problem\n") && !bad.stdout.contains("ok:"))
        let badJSON = try Evctl.run(["verify", "--deep", "--store", store, "--json"])
        #expect(badJSON.status == 1 && json(badJSON.stdout)["ok"] as? Bool == false)
        #expect((json(badJSON.stdout)["projection"] as? [String: Any])?["ok"] as? Bool == false)
        #expect(json(try Evctl.run(["replay", "--rebuild", "--store", store, "--json"]).stdout)["events"] as? Int == 2000)
        #expect(try Evctl.run(["verify", "--deep", "--store", store]).status == 0)
    }

    /// Two replicas edit one title concurrently; the conflict is listed and resolved with `evctl resolve`.
    @Test func conflictsAndResolve() throws {
        let dir = TempDir()
        let path = dir.path + "/s"
        try Evctl.run(["init", "--store", path])
        let id = "33333333-3333-4333-8333-333333333333"
        try Evctl.run(["append", "--store", path], stdin: "{\"entity\":\"item\",\"op\":\"create\",\"id\":\"\(id)\",\"fields\":{\"title\":\"mine\"}}")
        let store = try Store.open(at: path)
        let local = try LogReader(store: store).events(origin: store.replicaID)[0]
        // Another replica's edit, made without having seen ours (base 0), later by the clock.
        let remote = ReplicaID("bbbbbbbb-0000-4000-8000-000000000002")!
        let m = Mutation(entity: .item, op: .update, entityID: UUID(uuidString: id)!, fields: [Field("title", .text("theirs"))], base: HLC.zero)
        let e = Event(origin: remote, seq: Seq(1), hlc: HLC(rawValue: local.hlc.rawValue + 5), mutation: m)
        let p = try Projection(store: store)
        try p.apply([e])
        try p.close()
        let conflicts = try Evctl.run(["conflicts", "--store", path, "--json"]).stdout.split(separator: "\n").map { json(String($0)) }
        #expect(conflicts.count == 1)
        let c = conflicts[0]
        #expect(c["winner_value"] as? String == "theirs" && c["loser_value"] as? String == "mine" && c["field"] as? String == "title")
        let r = try Evctl.run(["resolve", "--store", path, "\(c["id"] as! Int)", "--keep", "local"])
        #expect(r.status == 0, "\(r.stderr)")
        let title = json(String(try Evctl.run(["items", "--store", path, "--json"]).stdout.split(separator: "\n")[0]))["title"] as? String
        #expect(title == "mine")
        #expect(try Evctl.run(["conflicts", "--store", path, "--json"]).stdout.isEmpty)
        #expect(try Evctl.run(["conflicts", "--store", path, "--all", "--json"]).stdout.split(separator: "\n").count == 1)
        let again = try Evctl.run(["resolve", "--store", path, "\(c["id"] as! Int)", "--keep", "remote"])
        #expect(again.status != 0 && again.stderr.contains("already resolved"))
    }

    @Test func completionWinsShowsAnAnomaly() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        let item = "44444444-4444-4444-8444-444444444444"
        let input = """
            {"entity":"item","op":"create","id":"\(item)","fields":{"title":"Water plants","recurrence_rule":"FREQ=WEEKLY"}}
            {"entity":"completion","op":"create","fields":{"item_id":"\(item)","original_occurrence_date":"2026-03-01","completed_at":"2026-03-01T09:00:00Z"}}
            {"entity":"recurrence_exception","op":"create","fields":{"item_id":"\(item)","original_occurrence_date":"2026-03-01","kind":"skip"}}
            """
        #expect(try Evctl.run(["append", "--store", store], stdin: input).status == 0)
        let a = try Evctl.run(["anomalies", "--store", store, "--json"]).stdout.split(separator: "\n").map { json(String($0)) }
        #expect(a.count == 1 && a[0]["kind"] as? String == "completion_wins" && a[0]["attempted_op"] as? String == "skip")
    }
}

@Suite struct CursorCLITests {
    @Test func cursorPrintsAStableToken() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        let id = try Evctl.run(["init", "--store", store]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try Evctl.run(["append", "--store", store], stdin: try Evctl.run(["sample", "--count", "12"]).stdout)
        let j = json(try Evctl.run(["cursor", "--store", store, "--json"]).stdout)
        #expect((j["origins"] as? [String: Any])?[id] as? Int == 12)
        let token = try Evctl.run(["cursor", "--store", store]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(token.hasPrefix("lbc1.") && token == j["token"] as? String)
        #expect(try Evctl.run(["cursor", "--store", store]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == token)
    }
}

@Suite struct ShippingCLITests {
    @Test func syncBetweenStorePathsAndBundles() throws {
        let dir = TempDir()
        let a = dir.path + "/a", b = dir.path + "/b", c = dir.path + "/c"
        for s in [a, b, c] { try Evctl.run(["init", "--store", s]) }
        try Evctl.run(["append", "--store", a], stdin: try Evctl.run(["sample", "--count", "400", "--seed", "3"]).stdout)
        try Evctl.run(["append", "--store", b], stdin: try Evctl.run(["sample", "--count", "400", "--seed", "3"]).stdout)
        try Evctl.run(["append", "--store", b], stdin: try Evctl.run(["sample", "--count", "100", "--seed", "8"]).stdout)
        let sync = try Evctl.run(["sync", "--store", a, b, "--json"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(json(sync.stdout)["pulled_events"] as? Int == 500 && json(sync.stdout)["pushed_events"] as? Int == 400)
        let itemsA = try Evctl.run(["items", "--store", a, "--json", "--include-deleted", "--limit", "100000"]).stdout
        let itemsB = try Evctl.run(["items", "--store", b, "--json", "--include-deleted", "--limit", "100000"]).stdout
        #expect(!itemsA.isEmpty && itemsA == itemsB)
        #expect(try Evctl.run(["cursor", "--store", a]).stdout == Evctl.run(["cursor", "--store", b]).stdout)
        // Bundles: export everything from a, import into c, twice.
        let bundle = dir.path + "/a.bundle"
        // --out as a bare file name (its directory is the current one, also when made durable).
        let bare = try Evctl.run(["export", "--store", a, "--out", "a.bundle"], cwd: dir.path)
        #expect(bare.status == 0, "\(bare.stderr)")
        #expect(FileManager.default.fileExists(atPath: bundle))
        let first = json(try Evctl.run(["import", "--store", c, bundle, "--json"]).stdout)
        #expect(first["events"] as? Int == 900)
        let second = json(try Evctl.run(["import", "--store", c, bundle, "--json"]).stdout)
        #expect(second["events"] as? Int == 0 && (second["already_held"] as? Int ?? 0) > 0)
        #expect(try Evctl.run(["items", "--store", c, "--json", "--include-deleted", "--limit", "100000"]).stdout == itemsA)
        #expect(try Evctl.run(["verify", "--deep", "--store", c]).status == 0)
        // Incremental: only what lies past c's cursor.
        try Evctl.run(["append", "--store", a], stdin: try Evctl.run(["sample", "--count", "5", "--seed", "11"]).stdout)
        let token = try Evctl.run(["cursor", "--store", c]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let delta = json(try Evctl.run(["export", "--store", a, "--since", token, "--out", dir.path + "/d.bundle", "--json"]).stdout)
        #expect(delta["events"] as? Int == 5)
        // A damaged bundle is refused and changes nothing.
        var bytes = try Data(contentsOf: URL(fileURLWithPath: dir.path + "/d.bundle"))
        bytes[bytes.count / 2] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: dir.path + "/bad.bundle"))
        let bad = try Evctl.run(["import", "--store", c, dir.path + "/bad.bundle"])
        #expect(bad.status != 0 && bad.stderr.contains("damaged"))
        #expect(try Evctl.run(["cursor", "--store", c]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == token)
        // A URL that is not one: a clear message, no retries.
        let http = try Evctl.run(["pull", "--store", c, "http://"])
        #expect(http.status != 0 && http.stderr.contains("is not an http:// or https:// URL"))
    }
}

@Suite struct PeerStateCLITests {
    @Test func statusRemembersPeersTheirCursorsAndErrors() throws {
        let dir = TempDir()
        let a = dir.path + "/a", b = dir.path + "/b"
        for s in [a, b] { try Evctl.run(["init", "--store", s]) }
        try Evctl.run(["append", "--store", b], stdin: try Evctl.run(["sample", "--count", "30"]).stdout)
        #expect(try Evctl.run(["sync", "--store", a, b]).status == 0)
        var peers = json(try Evctl.run(["status", "--store", a, "--json"]).stdout)["peers"] as? [[String: Any]] ?? []
        #expect(peers.count == 1 && peers[0]["name"] as? String == b && peers[0]["pulled_events"] as? Int == 30)
        #expect(peers[0]["last_sync_at"] is String && peers[0]["last_error"] is NSNull)
        #expect(peers[0]["cursor"] as? String == (try Evctl.run(["cursor", "--store", b]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        // A push the peer refuses (its writer lock is held here) is remembered as the last error.
        let held = try LogAppender(store: try Store.open(at: b))
        let push = try Evctl.run(["push", "--store", a, b])
        #expect(push.status == 3)
        try held.close()
        peers = json(try Evctl.run(["status", "--store", a, "--json"]).stdout)["peers"] as? [[String: Any]] ?? []
        #expect((peers.first?["last_error"] as? String)?.contains("open for writing") == true)
        #expect(peers.first?["last_sync_at"] is String)
        let text = try Evctl.run(["status", "--store", a]).stdout
        #expect(text.contains("peer") && text.contains("last error"))
    }
}

@Suite struct CompactionCLITests {
    /// After `evctl compact`, a replica lagging below the floor pulls by path: it bootstraps from
    /// the snapshot and goes on by cursor. Exports and pushes that would need the dropped frames
    /// say "cursor expired" instead of leaving a gap for the receiver to find.
    @Test func pathPullsBootstrapPastACompactionAndOthersSayCursorExpired() throws {
        let dir = TempDir()
        let a = dir.path + "/a", c = dir.path + "/c"
        let storeA = try Store.create(at: a)
        try Evctl.run(["init", "--store", c])
        let lagging = try Evctl.run(["cursor", "--store", c]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        var small = AppendOptions()
        small.segmentBytesMax = 4096
        let pa = try ProjectedStore(store: storeA, options: small)
        for k in 0..<12 {
            _ = try pa.append(SampleWorkload(seed: UInt64(k), count: 40).enumerated().map { try MutationParser.parse($1, lineNumber: $0 + 1) })
        }
        try pa.close()
        let snapshot = try Evctl.run(["snapshot", "--store", a, "--out", "a.snapshot"], cwd: dir.path)
        #expect(snapshot.status == 0 && FileManager.default.fileExists(atPath: dir.path + "/a.snapshot"), "\(snapshot.stderr)")
        let compact = try Evctl.run(["compact", "--store", a, "--without-peers"])
        #expect(compact.status == 0, "\(compact.stderr)")
        #expect(FileManager.default.fileExists(atPath: a + "/log/\(storeA.replicaID)/FLOOR"))

        // An export from below the floor, and a push to a store below it, are refused as such.
        let export = try Evctl.run(["export", "--store", a, "--since", lagging, "--out", dir.path + "/x.bundle"])
        #expect(export.status != 0 && export.stderr.contains("cursor expired"), "\(export.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/x.bundle"))
        let push = try Evctl.run(["push", "--store", a, c])
        #expect(push.status != 0 && push.stderr.contains("cursor expired"), "\(push.stderr)")
        #expect(try Evctl.run(["cursor", "--store", c]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == lagging)

        // The lagging replica pulls by path: bootstrap, then every event after the floor.
        let pull = try Evctl.run(["pull", "--store", c, a, "--json"])
        #expect(pull.status == 0, "\(pull.stderr)")
        #expect(json(pull.stdout)["bootstrapped"] as? Bool == true)
        #expect(try Evctl.run(["cursor", "--store", c]).stdout == (try Evctl.run(["cursor", "--store", a]).stdout))
        let items = ["items", "--json", "--include-deleted", "--limit", "100000"]
        #expect(try Evctl.run(items + ["--store", c]).stdout == (try Evctl.run(items + ["--store", a]).stdout))
        #expect(try Evctl.run(["verify", "--deep", "--store", c]).status == 0)
        // Afterwards, by cursor: one new event on each side, one sync.
        try Evctl.run(["append", "--store", a], stdin: try Evctl.run(["sample", "--count", "1", "--seed", "40"]).stdout)
        try Evctl.run(["append", "--store", c], stdin: try Evctl.run(["sample", "--count", "1", "--seed", "41"]).stdout)
        let sync = json(try Evctl.run(["sync", "--store", c, a, "--json"]).stdout)
        #expect(sync["pulled_events"] as? Int == 1 && sync["pushed_events"] as? Int == 1)
        #expect(try Evctl.run(items + ["--store", c]).stdout == (try Evctl.run(items + ["--store", a]).stdout))
    }
}
