import Foundation
import TestSupport
import Testing

/// Kills real `evctl append` processes with SIGKILL at random moments, many times: every append
/// that reported success is in the log, nothing partial is visible, and the log verifies.
@Suite struct CrashTests {
    @Test func sigkillDuringAppendsLosesNothingAcknowledged() throws {
        let dir = TempDir()
        let store = dir.path + "/s"
        try Evctl.run(["init", "--store", store])
        var acknowledged: [(first: Int, last: Int)] = []
        var rng = SystemRandomNumberGenerator()
        var killed = 0
        for round in 0..<40 {
            // Inputs of varied sizes, some spanning several frames.
            let count = [1, 3, 50, 1500, 4000][round % 5]
            let file = dir.path + "/in\(round % 5).ndjson"
            if !FileManager.default.fileExists(atPath: file) {
                try Evctl.run(["sample", "--count", "\(count)", "--seed", "\(round)"]).stdout.write(toFile: file, atomically: true, encoding: .utf8)
            }
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Evctl.path)
            p.arguments = ["append", "--store", store, "--json", file]
            let out = Pipe()
            p.standardOutput = out
            p.standardError = FileHandle.nullDevice
            try p.run()
            usleep(UInt32.random(in: 0...30_000, using: &rng))
            kill(p.processIdentifier, SIGKILL)
            let data = out.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            if p.terminationReason == .uncaughtSignal { killed += 1 }
            // Only an append whose success was printed counts as acknowledged.
            let j = json(String(decoding: data, as: UTF8.self))
            if let first = j["first_seq"] as? Int, let last = j["last_seq"] as? Int {
                acknowledged.append((first, last))
            }
            // The log stays whole after every kill: the next writer recovers it.
            let status = try Evctl.run(["status", "--store", store, "--json"])
            #expect(status.status == 0)
        }
        #expect(killed > 0, "no process was killed mid-run; the test proved nothing")
        // Open for writing once more (recovery), then check.
        let final = try Evctl.run(["append", "--store", store, "--json"], stdin: "")
        #expect(final.status == 0, "\(final.stderr)")
        let verify = try Evctl.run(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.stdout)")
        let seqs = try Evctl.run(["log", "--store", store, "--json"]).stdout.split(separator: "\n").compactMap { json(String($0))["seq"] as? Int }
        #expect(seqs == Array(1...max(1, seqs.count)) || seqs.isEmpty)
        let held = Set(seqs)
        for a in acknowledged {
            for s in a.first...a.last { #expect(held.contains(s), "acknowledged seq \(s) is missing") }
        }
        // Appends are atomic: the held seqs are exactly a union of whole appends (each ends a commit).
        let lastHeld = seqs.last ?? 0
        #expect(acknowledged.allSatisfy { $0.last <= lastHeld })
    }
}
