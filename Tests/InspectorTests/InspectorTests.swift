import AsyncHTTPClient
import EventLog
@testable import LogbookServer
import Foundation
import TestSupport
import Logbook
import Logging
import NIOCore
import NIOHTTP1
import Testing
@testable import Inspector
@testable import Replicator

typealias InspectorDir = TempDir

struct Answer {
    var status: Int
    var body: String
    var headers: HTTPHeaders
}

/// A client that follows no redirect and keeps no cookie: each test says what it sends.
func fetch(_ url: String, method: HTTPMethod = .GET, headers: [(String, String)] = [], form: String? = nil) async throws -> Answer {
    let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
    defer { _ = client.shutdown() }
    var r = HTTPClientRequest(url: url)
    r.method = method
    for (k, v) in headers { r.headers.replaceOrAdd(name: k, value: v) }
    if let form {
        r.headers.replaceOrAdd(name: "Content-Type", value: "application/x-www-form-urlencoded")
        r.body = .bytes(ByteBuffer(string: form))
    }
    let response = try await client.execute(r, timeout: .seconds(120))
    return Answer(status: Int(response.status.code), body: String(buffer: try await response.body.collect(upTo: 8 << 20)), headers: response.headers)
}

/// A store with what the pages show: two origins, a conflict settled by the merge, a hostile
/// title, a tag and an item_tag, a link, a child item, and a peer.
struct Fixture {
    let dir = InspectorDir()
    let book: Logbook
    let item: UUID
    let child: UUID
    let tag: UUID
    static let hostile = "<script>alert('x')</script> & \"quoted\" <img src=x onerror=alert(1)>"

    init() async throws {
        book = try await Logbook.open(at: dir.path + "/a", creating: true)
        let b = try await Logbook.open(at: dir.path + "/b", access: .readOnly, creating: true)
        try await b.close()
        item = try await book.create(ItemValues(title: .set(Self.hostile), notes: "groceries for the week"))
        child = try await book.create(ItemValues(parentID: .set(item), title: "a child"))
        tag = try await book.create(TagValues(name: "errands"))
        _ = try await book.append([.tag(item, with: tag)])
        let other = try await book.create(ItemValues(title: "linked to"))
        _ = try await book.create(LinkValues(from: item, to: other, kind: "LINK", label: "see also"))
        let peer = Peer(dir.path + "/b")
        try await book.sync(with: peer)
        let bw = try await Logbook.open(at: dir.path + "/b")
        try await bw.update(item, ItemValues(notes: "from b"))
        try await bw.close()
        try await book.update(item, ItemValues(notes: "from a"))
        try await book.sync(with: peer)
    }

    func serve<T>(tokens: String? = nil, _ body: (String, PolicySource) async throws -> T) async throws -> T {
        var config = ServerConfiguration()
        config.port = 0
        if let tokens { config.policy = try AccessPolicy(json: Data(tokens.utf8)) }
        var source: PolicySource?
        let book = self.book
        let r = try await ServerThreads.run {
            try await ReplicaServer.withRunningServer(store: book.store, configuration: config, logger: Logger(label: "test"), routes: { router, policies in
                let i = try Inspector.open(reader: LogbookReader(book: book), policies: policies)
                i.install(on: router)
                source = policies
            }) { url in try await body(url, source!) }
        }
        return r
    }
}

@Suite(.serialized) struct InspectorTests {
    @Test func pagesShowTheStoreAndEscapeItsText() async throws {
        let f = try await Fixture()
        let conflict = try await #require(try f.book.conflicts().first)
        #expect(conflict.field == "notes")
        try await f.serve { url, _ in
            let overview = try await fetch(url + "/ui/")
            #expect(overview.status == 200)
            #expect(overview.headers["Content-Security-Policy"].first?.contains("default-src 'none'") == true)
            #expect(overview.headers["Content-Type"].first?.hasPrefix("text/html") == true)
            for o in try await f.book.status().log.origins { #expect(overview.body.contains(o.origin.description)) }
            // Which origins sign their frames: this replica's does (a store made now).
            #expect(f.book.replicaID.isKeyDerived && overview.body.contains("<span class=\"tag signed\""))
            #expect(overview.body.contains("<svg") && overview.body.contains("<rect x="))
            #expect(overview.body.contains("1 open conflicts"))
            #expect(overview.body.contains(f.dir.path + "/b"), "the peer is listed")

            // The hostile title is text wherever it appears, never markup.
            let log = try await fetch(url + "/ui/log")
            #expect(log.status == 200)
            let entity = try await fetch(url + "/ui/entity/item/\(f.item.lowercasedString)")
            #expect(entity.status == 200)
            for page in [log.body, entity.body] {
                #expect(!page.contains("<script>") && !page.contains("<img src=x"))
            }
            #expect(entity.body.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;quoted&quot;"))

            // The entity page: the conflict with its winner and loser, the fields each event holds.
            #expect(entity.body.contains(conflict.winnerEventID) && entity.body.contains(conflict.loserEventID))
            #expect(entity.body.contains("<span class=\"label\">winner</span> <span class=\"value\">\(conflict.winnerValue.replacingOccurrences(of: "\"", with: "&quot;"))"))
            #expect(entity.body.contains("<span class=\"label\">loser</span> <span class=\"value\">\(conflict.loserValue.replacingOccurrences(of: "\"", with: "&quot;"))"))
            #expect(entity.body.contains("<span class=\"held\">notes</span>"))
            #expect(entity.body.contains(f.child.lowercasedString), "the subtree")
            #expect(entity.body.contains(">errands</a>"), "the tags")
            #expect(entity.body.contains("see also"), "the links")
            let events = entity.body.components(separatedBy: "<tr id=\"e-").count - 1
            await #expect(events == (try f.book.history(of: .item, id: f.item).entries.count))

            // Filters match exactly: entity=tag is not item_tag.
            let tags = try await fetch(url + "/ui/log?entity=tag")
            #expect(tags.body.contains("/ui/entity/tag/\(f.tag.lowercasedString)"))
            #expect(!tags.body.contains("/ui/entity/item_tag/"))
            let byID = try await fetch(url + "/ui/log?id=\(f.child.lowercasedString.uppercased())")
            #expect(byID.body.components(separatedBy: "<tr id=\"e-").count - 1 == 1)

            let conflicts = try await fetch(url + "/ui/conflicts")
            #expect(conflicts.body.contains("c-\(conflict.id)") && conflicts.body.contains("winner") && conflicts.body.contains("loser"))
            let search = try await fetch(url + "/ui/search?q=quoted")
            #expect(search.body.contains("/ui/entity/item/\(f.item.lowercasedString)"))
            #expect((try await fetch(url + "/ui/anomalies")).status == 200)

            // Bad input: a clear page naming the parameter, never a crash.
            for (path, says) in [("/ui/log?entity=tags", "entity=tags is not one of"), ("/ui/log?origin=nope", "origin=nope"),
                                 ("/ui/log?since=yesterday", "since=yesterday"), ("/ui/log?before=1-2-3", "before=1-2-3"),
                                 ("/ui/conflicts?after=-4", "after=-4"), ("/ui/entity/item/not-a-uuid", "not-a-uuid"),
                                 ("/ui/entity/items/\(f.item.lowercasedString)", "items is not one of"),
                                 ("/ui/search?q=quoted%00x", "q contains a NUL character")] {
                let a = try await fetch(url + path)
                #expect(a.status == 400 || a.status == 404, "\(path)")
                #expect(a.body.contains(says), "\(path)")
            }
            // Read-only: a POST to a page is refused.
            for path in ["/ui/", "/ui/log", "/ui/entity/item/\(f.item.lowercasedString)", "/ui/conflicts"] {
                #expect(try await fetch(url + path, method: .POST, form: "x=1").status == 405, "\(path)")
                #expect(try await fetch(url + path, method: .DELETE).status == 405, "\(path)")
            }
        }
    }

    static func csrf(_ page: String, form action: String) -> String? {
        guard let at = page.range(of: "action=\"\(action)\"") else { return nil }
        return page[at.upperBound...].range(of: "name=\"csrf\" value=\"").map { r in String(page[r.upperBound...].prefix(64)) }
    }

    @Test func aConflictIsResolvedFromThePageWithItsCSRFToken() async throws {
        let f = try await Fixture()
        let c = try await #require(try f.book.conflicts().first)
        // As `evctl serve` and `evctl inspect` hold it: read-only; the action opens a writer.
        let path = f.book.path
        try await f.book.close()
        let book = try await Logbook.open(at: path, access: .inspect)
        var config = ServerConfiguration()
        config.port = 0
        try await ServerThreads.run {
            try await ReplicaServer.withRunningServer(store: book.store, configuration: config, logger: Logger(label: "test"), routes: { router, policies in
                try Inspector.open(reader: LogbookReader(book: book), policies: policies).install(on: router)
            }) { url in
                let entityPage = "/ui/entity/item/\(f.item.lowercasedString)"
                let page = try await fetch(url + entityPage)
                let action = "/ui/conflicts/\(c.id)/resolve"
                let csrf = try #require(Self.csrf(page.body, form: action))
                // No token, a wrong one, or a form from another site: refused, nothing appended.
                let before = try await book.status().log.totalEvents
                #expect(try await fetch(url + action, method: .POST, form: "keep=loser").status == 403)
                #expect(try await fetch(url + action, method: .POST, form: "keep=loser&csrf=\(String(repeating: "0", count: 64))").status == 403)
                #expect(try await fetch(url + action, method: .POST, headers: [("Origin", "https://evil.example")], form: "keep=loser&csrf=\(csrf)").status == 403)
                #expect(try await fetch(url + action, method: .POST, form: "keep=both&csrf=\(csrf)").status == 400)
                await #expect(try book.status().log.totalEvents == before)
                let done = try await fetch(url + action, method: .POST, form: "keep=loser&csrf=\(csrf)")
                #expect(done.status == 303 && done.headers["Location"].first == entityPage + "#c-\(c.id)")
                await #expect(try book.status().log.totalEvents == before + 1)
                let loser = c.loserValue.trimmingCharacters(in: CharacterSet(charactersIn: "\""))
                await #expect(try book.item(f.item)?.notes == loser)
                let after = try await fetch(url + entityPage)
                #expect(Self.csrf(after.body, form: action) == nil, "a resolved conflict has no form")
                #expect(try await fetch(url + action, method: .POST, form: "keep=winner&csrf=\(csrf)").status == 409)
            }
        }
    }

    @Test func resolvingNeedsThePushRight() async throws {
        let f = try await Fixture()
        let c = try await #require(try f.book.conflicts().first)
        let tokens = """
            {"principals":[{"name":"reader","token":"reader-token-0123456789","push":[],"pull":true},
                           {"name":"owner","token":"owner-token-01234567890","push":["\(f.book.replicaID)"],"pull":true}]}
            """
        try await f.serve(tokens: tokens) { url, _ in
            let action = "/ui/conflicts/\(c.id)/resolve"
            let reader = [("Authorization", "Bearer reader-token-0123456789")]
            let page = try await fetch(url + "/ui/conflicts", headers: reader)
            #expect(page.status == 200 && Self.csrf(page.body, form: action) == nil)
            #expect(try await fetch(url + action, method: .POST, headers: reader, form: "keep=winner").status == 403)
            // Signed in with a cookie, the owner needs the session's CSRF token.
            let signIn = try await fetch(url + "/ui/login", method: .POST, form: "token=owner-token-01234567890")
            let cookie = [("Cookie", String(try #require(signIn.headers["Set-Cookie"].first).prefix(while: { $0 != ";" })))]
            let own = try await fetch(url + "/ui/conflicts", headers: cookie)
            let csrf = try #require(Self.csrf(own.body, form: action))
            #expect(try await fetch(url + action, method: .POST, headers: cookie, form: "keep=winner").status == 403)
            #expect(try await fetch(url + action, method: .POST, headers: cookie, form: "keep=winner&csrf=\(csrf)").status == 303)
            await #expect(try f.book.conflicts().isEmpty)
        }
    }

    @Test func paginationWalksTheWholeLogOnce() async throws {
        let f = try await Fixture()
        for i in 0..<130 { _ = try await f.book.create(TagValues(name: .set("t\(i)"))) }
        let total = try await f.book.status().log.totalEvents
        try await f.serve { url, _ in
            var next: String? = "/ui/log"
            var rows: [String] = []
            while let n = next {
                let page = try await fetch(url + n.replacingOccurrences(of: "&amp;", with: "&"))
                #expect(page.status == 200)
                rows += page.body.components(separatedBy: "<tr id=\"e-").dropFirst().map { String($0.prefix(while: { $0 != "\"" })) }
                next = page.body.range(of: "rel=\"next\" href=\"").map { r in String(page.body[r.upperBound...].prefix(while: { $0 != "\"" })) }
            }
            #expect(UInt64(rows.count) == total)
            #expect(Set(rows).count == rows.count)
        }
    }

    static let tokens = """
        {"principals":[
          {"name":"reader","token":"reader-token-0123456789","push":[],"pull":true},
          {"name":"nopull","token":"nopull-token-0123456789","push":[],"pull":false},
          {"name":"alice","token":"alice-token-01234567890","push":[],"pull":true,"user":"alice"}
        ]}
        """

    @Test func pagesNeedATokenThatMayPull() async throws {
        let f = try await Fixture()
        try await f.serve(tokens: Self.tokens) { url, policies in
            // No credentials: sent to sign in, no data shown.
            let anon = try await fetch(url + "/ui/log?entity=item")
            #expect(anon.status == 303)
            #expect(anon.headers["Location"].first == "/ui/login?next=%2Fui%2Flog%3Fentity%3Ditem")
            #expect(!anon.body.contains(f.item.lowercasedString))
            let login = try await fetch(url + "/ui/login")
            #expect(login.status == 200 && login.body.contains("name=\"token\"") && !login.body.contains(f.item.lowercasedString))

            // Bearer works; a token that may not pull, or is scoped to a user, gets a 403.
            #expect(try await fetch(url + "/ui/log", headers: [("Authorization", "Bearer reader-token-0123456789")]).status == 200)
            #expect(try await fetch(url + "/ui/log", headers: [("Authorization", "Bearer nopull-token-0123456789")]).status == 403)
            #expect(try await fetch(url + "/ui/log", headers: [("Authorization", "Bearer alice-token-01234567890")]).status == 403)
            let wrong = try await fetch(url + "/ui/log", headers: [("Authorization", "Bearer wrong-token-0123456789")])
            #expect(wrong.status == 401 && !wrong.body.contains(f.item.lowercasedString))

            // Signing in: a wrong token shows the form again; the right one sets a strict, HttpOnly cookie.
            let bad = try await fetch(url + "/ui/login", method: .POST, form: "token=nope-nope-nope-nope&next=%2Fui%2Flog")
            #expect(bad.status == 401 && bad.body.contains("not valid") && bad.headers["Set-Cookie"].isEmpty)
            let foreign = try await fetch(url + "/ui/login", method: .POST, headers: [("Origin", "https://evil.example")], form: "token=reader-token-0123456789")
            #expect(foreign.status == 403 && foreign.headers["Set-Cookie"].isEmpty)
            let offsite = try await fetch(url + "/ui/login", method: .POST, form: "token=reader-token-0123456789&next=%2F%2Fevil.example%2F")
            #expect(offsite.status == 303 && offsite.headers["Location"].first == "/ui/")
            let ok = try await fetch(url + "/ui/login", method: .POST, form: "token=reader-token-0123456789&next=%2Fui%2Fconflicts")
            #expect(ok.status == 303 && ok.headers["Location"].first == "/ui/conflicts")
            let setCookie = try #require(ok.headers["Set-Cookie"].first)
            #expect(setCookie.contains("HttpOnly") && setCookie.contains("SameSite=Strict") && setCookie.contains("Path=/ui"))
            #expect(!setCookie.contains("reader-token"), "the cookie is a session id, not the token")
            let cookie = String(setCookie.prefix(while: { $0 != ";" }))
            let signedIn = try await fetch(url + "/ui/conflicts", headers: [("Cookie", cookie)])
            #expect(signedIn.status == 200 && signedIn.body.contains("Sign out reader"))
            #expect(signedIn.body.contains("from b"), "the conflict's values are what a revoked session must no longer see")

            // Signing out needs the session's CSRF token.
            let csrf = try #require(signedIn.body.range(of: "name=\"csrf\" value=\"").map { r in String(signedIn.body[r.upperBound...].prefix(64)) })
            #expect(try await fetch(url + "/ui/logout", method: .POST, headers: [("Cookie", cookie)], form: "csrf=0000").status == 403)
            #expect(try await fetch(url + "/ui/conflicts", headers: [("Cookie", cookie)]).status == 200, "still signed in")

            // A token revoked in the tokens file ends its sessions at once.
            let kept = policies.current
            policies.replace(with: try AccessPolicy(json: Data(#"{"principals":[{"name":"other","token":"other-token-0123456789","push":[],"pull":true}]}"#.utf8)))
            let revoked = try await fetch(url + "/ui/conflicts", headers: [("Cookie", cookie)])
            // The page is the sign-in form; nothing of the conflict it asked for (the item, its
            // competing notes) is on it. (Every page shows the replica's id, a random UUID, so
            // a short marker such as "c-1" could match it by chance: look for the data itself.)
            #expect(revoked.status == 401 && revoked.body.contains("name=\"token\""))
            #expect(!revoked.body.contains(f.item.lowercasedString) && !revoked.body.contains("from a") && !revoked.body.contains("from b"))
            policies.replace(with: kept)
            #expect(try await fetch(url + "/ui/conflicts", headers: [("Cookie", cookie)]).status == 303, "the session is gone")

            let again = try await fetch(url + "/ui/login", method: .POST, form: "token=reader-token-0123456789")
            let cookie2 = String(try #require(again.headers["Set-Cookie"].first).prefix(while: { $0 != ";" }))
            let page = try await fetch(url + "/ui/", headers: [("Cookie", cookie2)])
            let csrf2 = try #require(page.body.range(of: "name=\"csrf\" value=\"").map { r in String(page.body[r.upperBound...].prefix(64)) })
            #expect(csrf2 != csrf)
            let out = try await fetch(url + "/ui/logout", method: .POST, headers: [("Cookie", cookie2)], form: "csrf=\(csrf2)")
            #expect(out.status == 303)
            #expect(try await fetch(url + "/ui/", headers: [("Cookie", cookie2)]).status == 303)
        }
    }

    @Test func theAuditIndexCatchesUpAndRebuildsWhatItCannotUse() throws {
        let dir = InspectorDir()
        let book = try Logbook.open(at: dir.path + "/s", creating: true)
        for i in 0..<40 { _ = try book.create(TagValues(name: .set("t\(i)"))) }
        var index: AuditIndex? = try AuditIndex(store: book.store)
        #expect(try index!.catchUp(limit: 25) == 25)
        #expect(!index!.isCaughtUp)
        #expect(try index!.catchUp() == 15)
        #expect(index!.isCaughtUp)
        #expect(try index!.catchUp() == 0)
        let newest = try index!.timeline(TimelineFilter(), before: nil, limit: 5)
        #expect(newest.events.map(\.seq.rawValue) == [40, 39, 38, 37, 36] && newest.more)
        index = nil
        // A damaged file is set aside (kept for a look) and built again.
        let file = dir.path + "/s/audit.sqlite"
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: file + suffix) }
        try Data("this is not a database, just bytes in its place".utf8).write(to: URL(fileURLWithPath: file))
        let rebuilt = try AuditIndex(store: book.store)
        #expect(try rebuilt.catchUp() == 40)
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path + "/s")
        #expect(names.contains { $0.hasPrefix("audit.sqlite.damaged-") })
        // Another store's index in this store's place is not used.
        let other = try Logbook.open(at: dir.path + "/o", creating: true)
        try FileManager.default.copyItem(atPath: file, toPath: dir.path + "/o/audit.sqlite")
        #expect(try AuditIndex(store: other.store).indexedEvents() == 0)
    }

    @Test func anIndexAheadOfAStorePutBackIsBuiltAgain() throws {
        let dir = InspectorDir()
        var book: Logbook? = try Logbook.open(at: dir.path + "/s", creating: true)
        for i in 0..<10 { _ = try book!.create(TagValues(name: .set("t\(i)"))) }
        try book!.close()
        try FileManager.default.copyItem(atPath: dir.path + "/s", toPath: dir.path + "/older")
        book = try Logbook.open(at: dir.path + "/s")
        for i in 10..<25 { _ = try book!.create(TagValues(name: .set("t\(i)"))) }
        #expect(try AuditIndex(store: book!.store).catchUp() == 25)
        try book!.close()
        book = nil
        // The store is put back to its older copy; the index file stays.
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: dir.path + "/s/audit.sqlite" + suffix) {
            try FileManager.default.copyItem(atPath: dir.path + "/s/audit.sqlite" + suffix, toPath: dir.path + "/older/audit.sqlite" + suffix)
        }
        try FileManager.default.removeItem(atPath: dir.path + "/s")
        try FileManager.default.moveItem(atPath: dir.path + "/older", toPath: dir.path + "/s")
        let older = try Logbook.open(at: dir.path + "/s", access: .inspect)
        let index = try AuditIndex(store: older.store)
        #expect(try index.indexedEvents() == 0)
        #expect(try index.catchUp() == 10)
        #expect(try index.timeline(TimelineFilter(), before: nil, limit: 100).events.count == 10)
    }

    @Test func placesInTheLogParseOnlyWhenWhole() {
        let k = MergeKey(hlc: HLC(rawValue: 123_456), origin: ReplicaID.random(), seq: Seq(7))
        #expect(MergeKey(k.description) == k)
        for bad in ["", "-", "1-2-3", "x-\(k.origin)-1", "1-\(k.origin)-0", "1-\(k.origin)-", String(repeating: "9", count: 100),
                    "18446744073709551616-\(k.origin)-1", "1-\(k.origin)-1-1"] {
            #expect(MergeKey(bad) == nil, "\(bad)")
        }
        var g = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let s = String((0..<Int.random(in: 0...60, using: &g)).map { _ in "0123456789abcdef-x".randomElement(using: &g)! })
            _ = MergeKey(s)
        }
    }

    @Test func fieldsKeptByTheIndexReadBackAsShown() {
        let long = String(repeating: "é", count: 5_000)
        let fields = [Field("title", .text("a \"quoted\" \\ line\nnext\u{0}\u{1b}[31m")), Field("n", .integer(-3)), Field("r", .real(1.5)),
                      Field("b", .boolean(true)), Field("z", .null), Field("notes", .text(long))]
        let back = AuditIndex.fields(AuditIndex.fieldsText(fields))
        #expect(back.map(\.name) == ["title", "n", "r", "b", "z", "notes"])
        #expect(back[0].value == "a \"quoted\" \\ line\nnext\u{0}\u{1b}[31m")
        #expect(back[1].value == "-3" && back[2].value == "1.5" && back[3].value == "true" && back[4].value == "null")
        #expect(back[5].value.hasPrefix(String(repeating: "é", count: 500) + "…") && back[5].value.contains("5000 characters"))
        #expect(AuditIndex.fields("not json").first?.name == "(unreadable in the audit index)")
        #expect(AuditIndex.fields("[[1,2]]").first?.name == "(unreadable in the audit index)")
    }

    /// Each of `< > & " '` with U+0600 (which joins the next character's grapheme cluster) before
    /// it and a combining acute accent after it: an escaper that compares `Character`s sees neither.
    static let clustered: [String] = ["<", ">", "&", "\"", "'"].flatMap { c in ["\u{0600}" + c, c + "\u{0301}"] }
    static let clusteredTitle = "\u{0600}<meta http-equiv=refresh content=\"0;url=http://example.invalid/\u{0301}\">" + clustered.joined(separator: " ")

    /// Whether `page`'s UTF-8 bytes hold `needle`'s (String.contains compares grapheme clusters).
    /// A needle ending in `&` counts only where no character reference follows it (an escaped
    /// `<` after U+0600 is U+0600 then `&lt;`).
    static func holdsBytes(_ page: String, _ needle: String) -> Bool {
        let bytes = Array(page.utf8), n = Array(needle.utf8)
        guard n.count <= bytes.count else { return false }
        let references = ["amp;", "lt;", "gt;", "quot;", "#39;"].map { Array($0.utf8) }
        return (0...(bytes.count - n.count)).contains { i in
            guard bytes[i..<(i + n.count)].elementsEqual(n) else { return false }
            guard n.last == UInt8(ascii: "&") else { return true }
            let rest = bytes[(i + n.count)...]
            return !references.contains { rest.starts(with: $0) }
        }
    }

    /// The first of the five characters `page` holds raw next to the scalar that hid it.
    static func rawClusteredMarkup(_ page: String) -> String? {
        clustered.first { holdsBytes(page, $0) }.map { $0.unicodeScalars.map { String(format: "U+%04X", $0.value) }.joined(separator: " ") }
    }

    @Test func escapingWorksPerScalarNotPerCharacter() {
        for c in Self.clustered {
            let e = HTMLEscape.escape("a" + c + "b")
            #expect(Self.rawClusteredMarkup(e) == nil, "\(c.unicodeScalars.map(\.value))")
            #expect(!e.utf8.contains(UInt8(ascii: "<")) && !e.utf8.contains(UInt8(ascii: ">")) && !e.utf8.contains(UInt8(ascii: "\"")) && !e.utf8.contains(UInt8(ascii: "'")))
        }
        #expect(HTMLEscape.escape("plain é text") == "plain é text")
        #expect(HTMLEscape.escape("\u{0600}<b>") == "\u{0600}&lt;b&gt;")
        #expect(HTMLEscape.escape("\"\u{0301}&'") == "&quot;\u{0301}&amp;&#39;")
    }

    /// Text whose markup characters share a grapheme cluster with a neighbour, in a title, notes, a
    /// tag's name, a link's label and kind and a search query, is text on every page: in elements,
    /// in attributes, in the search box and on the problem page that echoes a bad parameter.
    @Test func clusteredMarkupIsEscapedOnEveryPage() async throws {
        let f = try await Fixture()
        let item = try await f.book.create(ItemValues(title: .set(Self.clusteredTitle), notes: .set(Self.clustered.joined())))
        let tag = try await f.book.create(TagValues(name: .set("tag " + Self.clusteredTitle)))
        _ = try await f.book.append([.tag(item, with: tag)])
        let link = try await f.book.create(LinkValues(from: item, to: f.item, kind: .set("K" + Self.clustered.joined()), label: .set(Self.clusteredTitle)))
        func q(_ s: String) -> String { s.addingPercentEncoding(withAllowedCharacters: .alphanumerics)! }
        try await f.serve { url, _ in
            let paths = ["/ui/", "/ui/log", "/ui/log?entity=item", "/ui/entity/item/\(item.lowercasedString)",
                         "/ui/entity/tag/\(tag.lowercasedString)", "/ui/entity/link/\(link.lowercasedString)",
                         "/ui/entity/item/\(f.item.lowercasedString)", "/ui/conflicts", "/ui/anomalies",
                         "/ui/search?q=\(q(Self.clusteredTitle))", "/ui/search?q=meta", "/ui/log?origin=\(q(Self.clusteredTitle))",
                         "/ui/log?entity=\(q(Self.clusteredTitle))", "/ui/login?next=\(q(Self.clusteredTitle))"]
            for path in paths {
                let page = try await fetch(url + path)
                #expect(page.status < 500, "\(path)")
                #expect(Self.rawClusteredMarkup(page.body) == nil, "\(path): \(Self.rawClusteredMarkup(page.body) ?? "")")
                #expect(!Self.holdsBytes(page.body, "<meta http-equiv"), "\(path)")
            }
            // The title is shown (escaped) where it is expected.
            let entity = try await fetch(url + "/ui/entity/item/\(item.lowercasedString)")
            #expect(entity.body.contains("\u{0600}&lt;meta http-equiv=refresh"))
            let search = try await fetch(url + "/ui/search?q=\(q(Self.clusteredTitle))")
            #expect(search.body.contains("value=\"\u{0600}&lt;meta"))
        }
    }

    /// An event that names no actor, in an origin a user owns on a served store, is shown as that
    /// user's (attributed by ownership; a claim not confirmed attributes nothing); one that names
    /// its actor shows it as it is.
    @Test func eventsWithoutAnActorShowTheirOriginsOwner() async throws {
        let f = try await Fixture()
        let other = try Store.open(at: f.dir.path + "/b")
        let owners = try OriginOwners(store: f.book.store)
        _ = try owners.claim([other.replicaID], user: "bob", principal: "bob-phone")
        _ = try await f.book.append([Change.create(ItemValues(title: "named")).by("carol")])
        try await f.serve { url, _ in
            let claimed = try await fetch(url + "/ui/log?origin=\(other.replicaID)")
            #expect(claimed.status == 200 && !claimed.body.contains("(owner)"), "\(claimed.body.prefix(300))")
            try owners.confirm([other.replicaID], user: "bob")
            let log = try await fetch(url + "/ui/log?origin=\(other.replicaID)")
            #expect(log.status == 200 && log.body.contains("<td>bob (owner)</td>"), "\(log.body.prefix(300))")
            let mine = try await fetch(url + "/ui/log?origin=\(f.book.replicaID)")
            #expect(mine.body.contains("<td>carol</td>") && !mine.body.contains("(owner)"))
        }
    }

    /// The pages say which share each log and event belongs to (by id, and by name where this
    /// replica holds the share's key; the name escaped like any text), and whether its frames
    /// were signed and verified; a log of no share shows as private.
    @Test func pagesNameTheShareOfEachLogAndItsSignature() async throws {
        let f = try await Fixture()
        let share = try f.book.createShare(name: "Family <b>list</b>")
        _ = try f.book.append(mutations: [Change.create(ItemValues(title: "shared milk")).mutation], toShare: share)
        let sealed = try #require(try f.book.store.origins().first { try ShareDirectory.scope(ofLog: f.book.store, origin: $0) == .sealed(share) })
        try await f.serve { url, _ in
            let overview = try await fetch(url + "/ui/")
            #expect(overview.status == 200)
            #expect(overview.body.contains("title=\"sealed of share \(share)\"") && overview.body.contains("title=\"membership of share \(share)\""), "\(overview.body.prefix(2000))")
            #expect(overview.body.contains("Family &lt;b&gt;list&lt;/b&gt;") && !overview.body.contains("<b>list</b>"))
            let log = try await fetch(url + "/ui/log?origin=\(sealed)")
            #expect(log.status == 200 && log.body.contains("shared milk"))
            #expect(log.body.contains("sealed of share \(share)") && log.body.contains(">verified</span>"), "\(log.body.prefix(2000))")
            let mine = try await fetch(url + "/ui/log?origin=\(f.book.replicaID)")
            #expect(mine.body.contains("<span class=\"private\">private</span>") && !mine.body.contains("of share"))
        }
    }

    /// What one event or one store can make a page hold is bounded: an event of 100,000 fields
    /// keeps `Bounds.fieldsShownMax` of them and a count (before: 2,000,000 fields made /ui/log
    /// take 17 s and 144 MB); long names are cut; a chart draws at most `Bounds.chartSeriesMax`.
    @Test func whatAPeerControlsIsBoundedOnThePages() {
        let many = (0..<100_000).map { Field("f\($0)", .integer(Int64($0))) } + [Field(String(repeating: "n", count: 5000), .null)]
        let kept = AuditIndex.fields(AuditIndex.fieldsText(many))
        #expect(kept.count == Bounds.fieldsShownMax + 1)
        #expect(kept.last?.name == "…" && kept.last?.value.contains("\(many.count - Bounds.fieldsShownMax) more fields") == true)
        let long = AuditIndex.fields(AuditIndex.fieldsText([Field(String(repeating: "n", count: 5000), .null)]))
        #expect(long.first?.name.count == Bounds.fieldNameCharactersMax + 1)
        var hourly: [ReplicaID: [(hour: Int64, events: Int64)]] = [:]
        for n in 0..<100 { hourly[ReplicaID(rawValue: UUID())] = [(hour: 490_000, events: Int64(n + 1))] }
        let chart = ActivityChart(hourly: hourly)
        #expect(chart.series.count == Bounds.chartSeriesMax && chart.seriesLeftOut == 100 - Bounds.chartSeriesMax)
        #expect(chart.series.allSatisfy { $0.total > Int64(100 - Bounds.chartSeriesMax) }, "the origins with the most events are drawn")
    }

    @Test func templatesNeverPrintAValueUnescaped() throws {
        for (name, text) in Templates.all {
            #expect(!text.contains("{{{") && !text.contains("{{&"), "\(name)")
        }
        _ = try Templates.library()
    }
}
