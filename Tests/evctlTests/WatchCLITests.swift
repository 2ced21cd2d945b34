import Foundation
import TestSupport
import Testing

/// `evctl watch`: change data capture from another process, resumable by cursor.
@Suite(.serialized) struct WatchCLITests {
    /// A running `evctl watch`, its stdout collected line by line as it arrives.
    final class Watch: @unchecked Sendable {
        let process = Process()
        private let lock = NSLock()
        private var buffer = Data()

        init(_ args: [String], env: [String: String] = [:]) throws {
            process.executableURL = URL(fileURLWithPath: Evctl.path)
            process.arguments = ["watch"] + args
            var environment = ProcessInfo.processInfo.environment.merging(env) { $1 }
            environment.removeValue(forKey: "EVCTL_STORE")
            process.environment = environment
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            out.fileHandleForReading.readabilityHandler = { [weak self] h in
                let d = h.availableData
                guard let self, !d.isEmpty else { return }
                self.lock.withLock { self.buffer.append(d) }
            }
            try process.run()
        }

        var lines: [String] {
            lock.withLock { String(decoding: buffer, as: UTF8.self).split(separator: "\n").map(String.init) }
        }

        /// Waits until `n` lines arrived (or `seconds` passed), then returns what arrived.
        func wait(for n: Int, seconds: Double = 20) -> [String] {
            let deadline = Date().addingTimeInterval(seconds)
            while lines.count < n && Date() < deadline { usleep(10_000) }
            return lines
        }

        func stop() {
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
        }
    }

    @Test func anotherProcessesAppendsArePrintedAtOnceAndResumeByCursor() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        let start = json(try Evctl.run(["cursor", "--store", store, "--json"]).stdout)["token"] as? String ?? ""
        #expect(start.hasPrefix("lbc1."))
        // From the cursor before the appends: nothing is missed however fast the appends come.
        let watch = try Watch(["--store", store, "--json", "--since", start, "--poll", "30"])
        defer { watch.stop() }
        let sample = try Evctl.run(["sample", "--count", "5", "--seed", "4"]).stdout
        let lines = sample.split(separator: "\n").map(String.init)
        #expect(try Evctl.run(["append", "--store", store], stdin: lines[0...2].joined(separator: "\n") + "\n").status == 0)
        #expect(try Evctl.run(["append", "--store", store], stdin: lines[3...4].joined(separator: "\n") + "\n").status == 0)
        // --poll 30: only the filesystem notification can wake it this fast.
        let got = watch.wait(for: 5).map(json)
        #expect(got.count == 5)
        #expect(got.map { $0["seq"] as? Int } == [1, 2, 3, 4, 5])
        #expect(got.allSatisfy { ($0["cursor"] as? String)?.hasPrefix("lbc1.") == true && $0["event_id"] is String && $0["entity"] as? String != nil && $0["op"] as? String != nil && $0["fields"] is [String: Any] })
        let ids = sample.split(separator: "\n").map { json(String($0))["id"] as? String }
        #expect(got.map { $0["id"] as? String } == ids)
        watch.stop()

        // Resuming from line 2's cursor gives lines 3, 4, 5 exactly.
        let cursor2 = got[1]["cursor"] as! String
        let resumed = try Evctl.run(["watch", "--store", store, "--json", "--since", cursor2, "--stop-after", "3"])
        #expect(resumed.status == 0)
        #expect(resumed.stdout.split(separator: "\n").map { json(String($0))["seq"] as? Int } == [3, 4, 5])
        #expect(resumed.stdout.split(separator: "\n").last.map { json(String($0))["cursor"] as? String } == got[4]["cursor"] as? String)

        // Filters: one entity id; text lines carry the id.
        let target = ids[2]!
        let one = try Evctl.run(["watch", "--store", store, "--since", start, "--id", target, "--stop-after", "1"])
        #expect(one.stdout.split(separator: "\n").count == 1 && one.stdout.contains(target))
        #expect(try Evctl.run(["watch", "--store", store, "--entity", "nonsense"]).status == 64)
        #expect(try Evctl.run(["watch", "--store", store, "--since", "lbc1.!!"]).status == 64)
    }

    /// The portable watcher (polling), selected at run time, beside inotify above: another
    /// process's appends arrive within the poll interval, in order, none missed.
    @Test func thePollingWatcherSeesAnotherProcessesAppends() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        let start = json(try Evctl.run(["cursor", "--store", store, "--json"]).stdout)["token"] as? String ?? ""
        let watch = try Watch(["--store", store, "--json", "--since", start, "--poll", "0.5"], env: ["LOGBOOK_WATCH": "polling"])
        defer { watch.stop() }
        let sample = try Evctl.run(["sample", "--count", "4", "--seed", "9"]).stdout
        let lines = sample.split(separator: "\n").map(String.init)
        #expect(try Evctl.run(["append", "--store", store], stdin: lines[0...1].joined(separator: "\n") + "\n").status == 0)
        #expect(try Evctl.run(["append", "--store", store], stdin: lines[2...3].joined(separator: "\n") + "\n").status == 0)
        let got = watch.wait(for: 4).map(json)
        #expect(got.map { $0["seq"] as? Int } == [1, 2, 3, 4])
    }
}
