import Foundation
import TestSupport
import Testing

/// The inspector's pages in a real browser: headless Chromium (Debian's `chromium`, installed
/// by `make deps`) loads each page served by `evctl inspect` and `evctl serve --tokens`; the DOM
/// it built is checked, and a screenshot of each page is kept in test-artifacts/ui/.
@Suite(.serialized) struct BrowserTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let artifacts = root + "/test-artifacts/ui"

    static var chromium: String? {
        for p in ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/lib/chromium/chromium"] where FileManager.default.isExecutableFile(atPath: p) {
            return p
        }
        return nil
    }

    struct Failure: Error, CustomStringConvertible { let description: String }

    /// Runs Chromium headless with `args` on `url`; its standard output.
    static func browse(_ url: String, _ args: [String], profile: String) throws -> String {
        guard let chromium else { throw Failure(description: "chromium is not installed (make deps installs it)") }
        let p = Process()
        // Through a step that closes every descriptor the test process let the child inherit (its
        // sockets): a browser holding one keeps another test's connection open.
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", "-c", "import os, sys; os.closerange(3, 65536); os.execv(sys.argv[1], sys.argv[1:])", chromium,
                       "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
                       "--user-data-dir=\(profile)", "--window-size=1280,1000"] + args + [url]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        let killer = DispatchWorkItem { if p.isRunning { p.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: killer)
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        killer.cancel()
        return String(decoding: data, as: UTF8.self)
    }

    static func start(_ args: [String], dir: TempDir) throws -> (Process, String) { try startListening(args, dir: dir) }

    static let item = "00000000-0000-4000-8000-0000000000a1"
    static let hostile = #"<script>document.title='owned'</script><img src=x onerror=alert(1)> & "quoted""#

    /// Two replicas editing one item's notes at once: a conflict; a hostile title; a sample workload.
    static func makeStore(_ dir: TempDir) throws -> String {
        let a = dir.path + "/a", b = dir.path + "/b"
        try Evctl.run(["init", "--store", a])
        try Evctl.run(["init", "--store", b])
        let title = hostile.replacingOccurrences(of: "\"", with: "\\\"")
        try Evctl.run(["append", "--store", a], stdin: #"{"entity":"item","op":"create","id":"\#(item)","fields":{"title":"\#(title)","notes":"shared"}}"# + "\n")
        let sample = try Evctl.run(["sample", "--count", "400", "--seed", "3"]).stdout
        try Evctl.run(["append", "--store", a], stdin: sample)
        try Evctl.run(["sync", "--store", b, a])
        try Evctl.run(["append", "--store", b], stdin: #"{"entity":"item","op":"update","id":"\#(item)","fields":{"notes":"edited on b"}}"# + "\n")
        try Evctl.run(["append", "--store", a], stdin: #"{"entity":"item","op":"update","id":"\#(item)","fields":{"notes":"edited on a"}}"# + "\n")
        try Evctl.run(["sync", "--store", a, b])
        try Evctl.run(["verify", "--store", a])
        return a
    }

    @Test func everyPageInHeadlessChromium() async throws {
        try await offThePool {
            let dir = TempDir()
            let store = try Self.makeStore(dir)
            try FileManager.default.createDirectory(atPath: Self.artifacts, withIntermediateDirectories: true)
            let (server, url) = try Self.start(["inspect", "--store", store], dir: dir)
            defer { server.terminate(); server.waitUntilExit() }
            let profile = dir.path + "/chromium"
            // (name, path, what its DOM must hold)
            let pages: [(String, String, [String])] = [
                ("overview", "/ui/", ["data-page=\"overview\"", "<svg", "<rect x=", "1 open conflicts", "clean: "]),
                ("log", "/ui/log", ["data-page=\"log\"", "rel=\"next\"", "class=\"held\""]),
                ("log-tags", "/ui/log?entity=tag", ["data-page=\"log\"", "/ui/entity/tag/"]),
                ("entity", "/ui/entity/item/\(Self.item)", ["data-page=\"entity\"", "<span class=\"label\">winner</span>", "<span class=\"label\">loser</span>",
                                                            "edited on a", "edited on b", "&lt;script&gt;document.title="]),
                ("conflicts", "/ui/conflicts", ["data-page=\"conflicts\"", "winner", "loser", "/ui/entity/item/\(Self.item)"]),
                ("anomalies", "/ui/anomalies", ["data-page=\"anomalies\""]),
                ("search", "/ui/search?q=quoted", ["data-page=\"search\"", "/ui/entity/item/\(Self.item)"]),
            ]
            for (name, path, wanted) in pages {
                let dom = try Self.browse(url + path, ["--dump-dom"], profile: profile)
                #expect(dom.contains("</html>"), "\(name): the browser rendered a document")
                for w in wanted { #expect(dom.contains(w), "\(name): \(w)") }
                // The hostile title stayed text: no element of its own, and no script ran.
                #expect(!dom.contains("<script") && !dom.contains("<img src=\"x\""), "\(name)")
                #expect(!dom.contains("<title>owned</title>"), "\(name)")
                if name == "log-tags" { #expect(!dom.contains("/ui/entity/item_tag/"), "entity=tag is not item_tag") }
                let shot = Self.artifacts + "/\(name).png"
                try? FileManager.default.removeItem(atPath: shot)
                _ = try Self.browse(url + path, ["--screenshot=\(shot)", "--hide-scrollbars"], profile: profile)
                let size = (try? FileManager.default.attributesOfItem(atPath: shot)[.size] as? Int) ?? 0
                #expect(size > 5_000, "\(name): a screenshot in \(shot)")
            }
        }
    }

    @Test func inspectListensOnLoopbackOnly() throws {
        let dir = TempDir()
        try Evctl.run(["init", "--store", dir.path + "/s"])
        let r = try Evctl.run(["inspect", "--store", dir.path + "/s", "--listen", "0.0.0.0:0"])
        #expect(r.status != 0)
        #expect(r.stderr.contains("loopback"))
    }

    /// Drives Chromium over the DevTools protocol (scripts/browser-signin.py); its JSON answer.
    static func drive(_ args: [String]) throws -> [String: Any] {
        guard let chromium else { throw Failure(description: "chromium is not installed (make deps installs it)") }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", root + "/scripts/browser-signin.py", chromium] + args
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw Failure(description: "browser-signin.py \(args.prefix(3)) failed: \(String(decoding: data, as: UTF8.self))") }
        return json(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// A person signing in: sent from the page to the form, typing the token, landing back on
    /// the page with its data; the cookie is out of the page's reach (HttpOnly), no script runs
    /// (CSP), and signing out (its CSRF token) ends the session.
    @Test func signingInAndOutInTheBrowser() async throws {
        try await offThePool {
            let dir = TempDir()
            let store = try Self.makeStore(dir)
            let tokens = dir.path + "/tokens.json"
            try #"{"principals":[{"name":"auditor","token":"auditor-token-0123456789","push":[],"pull":true}]}"#.write(toFile: tokens, atomically: true, encoding: .utf8)
            try FileManager.default.createDirectory(atPath: Self.artifacts, withIntermediateDirectories: true)
            let (server, url) = try Self.start(["serve", "--store", store, "--listen", "127.0.0.1:0", "--tokens", tokens], dir: dir)
            defer { server.terminate(); server.waitUntilExit() }
            let r = try Self.drive([url, "auditor-token-0123456789", "/ui/log?entity=tag", Self.artifacts + "/signed-in.png", dir.path + "/chromium"])
            #expect(r["first_page"] as? String == "login" && (r["first_shows_data"] as? Int) == 0)
            #expect(r["after"] as? String == "/ui/log?entity=tag" && r["after_page"] as? String == "log")
            #expect(((r["after_rows"] as? Int) ?? 0) > 0)
            #expect(r["script_sees_cookie"] as? String == "", "the session cookie is HttpOnly")
            #expect(r["signed_in_as"] as? String == "Sign out auditor")
            #expect(r["inline_script_ran"] as? Bool == false, "the CSP forbids the page's scripts")
            #expect(r["after_signout"] as? String == "/ui/login" && r["again"] as? String == "login")
        }
    }

    /// Keeping a conflict's loser with the button of its page, on `evctl inspect` (no tokens:
    /// the page's own CSRF token), lands back on the entity with the conflict resolved.
    @Test func resolvingAConflictInTheBrowser() async throws {
        try await offThePool {
            let dir = TempDir()
            let store = try Self.makeStore(dir)
            let (server, url) = try Self.start(["inspect", "--store", store], dir: dir)
            defer { server.terminate(); server.waitUntilExit() }
            let r = try Self.drive([url, "--resolve", "/ui/entity/item/\(Self.item)", Self.artifacts + "/resolved.png", dir.path + "/chromium"])
            #expect(r["forms_before"] as? Int == 1 && r["forms_after"] as? Int == 0)
            #expect(r["after"] as? String == "/ui/entity/item/\(Self.item)" && r["after_page"] as? String == "entity")
            let items = try Evctl.run(["items", "--store", store, "--json", "--limit", "1000"]).stdout
            #expect(items.contains("\"notes\":\"edited on b\""), "the loser's value is kept")
            #expect(try Evctl.run(["conflicts", "--store", store]).stdout.contains("no open conflicts"))
        }
    }

    /// SIGTERM (or Ctrl-C) ends `evctl inspect` and `evctl serve`, with their audit indexers, cleanly.
    @Test func inspectAndServeStopCleanlyOnSIGTERM() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        for args in [["inspect", "--store", store], ["serve", "--store", store, "--listen", "127.0.0.1:0"]] {
            let portFile = dir.path + "/port-\(args[0])"
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Evctl.path)
            p.arguments = args + ["--port-file", portFile]
            let err = Pipe()
            p.standardOutput = FileHandle.nullDevice
            p.standardError = err
            try p.run()
            for _ in 0..<400 where !FileManager.default.fileExists(atPath: portFile) { Thread.sleep(forTimeInterval: 0.025) }
            Thread.sleep(forTimeInterval: 0.3)  // the indexer is in its wait
            p.terminate()
            let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            #expect(p.terminationStatus == 0, "\(args[0]): \(text)")
            #expect(!text.contains("error"), "\(args[0]): \(text)")
        }
    }

    @Test func aBrowserWithoutATokenIsSentToSignIn() async throws {
        try await offThePool {
            let dir = TempDir()
            let store = try Self.makeStore(dir)
            let tokens = dir.path + "/tokens.json"
            try #"{"principals":[{"name":"auditor","token":"auditor-token-0123456789","push":[],"pull":true}]}"#.write(toFile: tokens, atomically: true, encoding: .utf8)
            try FileManager.default.createDirectory(atPath: Self.artifacts, withIntermediateDirectories: true)
            let (server, url) = try Self.start(["serve", "--store", store, "--listen", "127.0.0.1:0", "--tokens", tokens], dir: dir)
            defer { server.terminate(); server.waitUntilExit() }
            let profile = dir.path + "/chromium"
            let dom = try Self.browse(url + "/ui/entity/item/\(Self.item)", ["--dump-dom"], profile: profile)
            #expect(dom.contains("data-page=\"login\"") && dom.contains("name=\"token\""))
            #expect(!dom.contains(Self.item) || dom.contains("name=\"next\" value=\"/ui/entity/item/\(Self.item)\""), "no data, only where to go back to")
            #expect(!dom.contains("edited on"))
            let shot = Self.artifacts + "/login.png"
            _ = try Self.browse(url + "/ui/", ["--screenshot=\(shot)", "--hide-scrollbars"], profile: profile)
            #expect(((try? FileManager.default.attributesOfItem(atPath: shot)[.size] as? Int) ?? 0) > 2_000)
        }
    }
}
