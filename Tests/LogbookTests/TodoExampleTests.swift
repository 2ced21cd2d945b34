import Foundation
import TestSupport
import EventLog
import Logbook
import LogbookServer
import Logging
import Testing
import TodoCore

/// The example app (Examples/TodoCore) driven end to end: two replicas syncing through a hub,
/// each watching its list; then the `todo` binary from a shell's point of view.
@Suite struct TodoExampleTests {
    @Test func twoReplicasShareAListThroughAHub() async throws {
        let dir = TempDir()
        let hub = try Store.create(at: dir.path + "/hub")
        var config = ServerConfiguration()
        config.port = 0
        var logger = Logger(label: "test.todo")
        logger.logLevel = .critical
        try await ServerThreads.run {
            try await ReplicaServer.withRunningServer(store: hub, configuration: config, logger: logger) { url in
                let laptop = try Todos(path: dir.path + "/laptop")
                let phone = try Todos(path: dir.path + "/phone")
                let onPhone = phone.watchTasks()
                let milk = try await laptop.add("Buy milk")
                try await laptop.tag(milk, "errands")
                try await laptop.add("Call the plumber")
                let up = try await laptop.sync(with: url)
                #expect(up.pushed == 4)  // two items, a tag, a tagging

                let wait = Task { try await first(onPhone, within: 30) { $0.count == 2 } }
                try await Task.sleep(nanoseconds: 50_000_000)
                let down = try await phone.sync(with: url)
                #expect(down.pulled == 4)
                let seen = try #require(try await wait.value)
                #expect(Set(seen.map(\.title)) == ["Buy milk", "Call the plumber"])
                #expect(seen.first { $0.id == milk }?.tags == ["errands"])

                // Done on the phone, renamed on the laptop at the same time: both edits survive
                // (different fields), on both replicas.
                try await phone.complete(milk)
                try await laptop.rename(milk, to: "Buy oat milk")
                try await phone.sync(with: url)
                try await laptop.sync(with: url)
                try await phone.sync(with: url)
                for side in [laptop, phone] {
                    let t = try #require(try side.tasks().first { $0.id == milk })
                    #expect(t.done && t.title == "Buy oat milk")
                }
                #expect(try laptop.tasks(matching: "plumber").count == 1)
                try laptop.close()
                try phone.close()
            }
        }
    }

    @Test func theTodoCommandAddsListsSyncsAndWatches() throws {
        let dir = TempDir()
        let a = dir.path + "/a", b = dir.path + "/b"
        let added = try Todo.run(["--store", a, "add", "Call mom"])
        #expect(added.status == 0, "\(added.stderr)")
        let id = added.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(UUID(uuidString: id) != nil)
        #expect(try Todo.run(["--store", a, "tag", id, "family"]).status == 0)
        #expect(try Todo.run(["--store", a, "done", id]).status == 0)
        let synced = try Todo.run(["--store", b, "sync", a])
        #expect(synced.status == 0 && synced.stdout.contains("pulled 4"), "\(synced.stdout)\(synced.stderr)")
        #expect(try Todo.run(["--store", b, "list"]).stdout.contains("[x] Call mom #family  \(id)"))

        // A watcher (read-only) sees another process's add.
        let watcher = Process()
        watcher.executableURL = URL(fileURLWithPath: Todo.path)
        watcher.arguments = ["--store", b, "watch", "2"]
        let out = Pipe()
        watcher.standardOutput = out
        try watcher.run()
        Thread.sleep(forTimeInterval: 0.5)
        #expect(try Todo.run(["--store", b, "add", "Water plants"]).status == 0)
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        watcher.waitUntilExit()
        let lists = text.components(separatedBy: "--\n").filter { !$0.isEmpty }
        #expect(lists.count == 2)
        #expect(lists.last?.contains("Water plants") == true)
        #expect(try Todo.run(["--store", b, "done", "not-an-id"]).status == 1)
    }
}

/// Runs the built `todo` example (next to the test bundle).
enum Todo {
    static let path: String = {
        var dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = dir.appendingPathComponent("todo").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/todo").path
    }()

    static func run(_ args: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = args
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self))
    }
}
