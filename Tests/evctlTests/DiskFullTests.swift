import Foundation
import TestSupport
import Testing

/// A full disk loses nothing and stops nothing for good (issue 26 §8): on a small tmpfs the test
/// mounts (the suite runs as root), appends fail with a clear error and exit status 6 once the
/// disk is full, every file stays verifiable, reads keep working, and work resumes by itself once
/// space is freed, with no acknowledged event lost or duplicated.
@Suite(.serialized) struct DiskFullTests {
    /// A tmpfs of `megabytes` at a new folder, unmounted (and removed) by `close`.
    final class SmallDisk {
        let path: String
        let mounted: Bool
        init(megabytes: Int) {
            path = NSTemporaryDirectory() + "/evctl-disk-\(UUID().uuidString.prefix(8))"
            try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            mounted = Self.sh("mount -t tmpfs -o size=\(megabytes)m tmpfs '\(path)'") == 0
        }
        /// Writes a file `name` of zeros, `chunkBytes` at a time, until the disk takes no more.
        @discardableResult
        func fillUp(_ name: String, chunkBytes: Int) throws -> String {
            let file = path + "/" + name
            FileManager.default.createFile(atPath: file, contents: nil)
            let h = try #require(FileHandle(forWritingAtPath: file))
            let chunk = Data(count: chunkBytes)
            while (try? h.write(contentsOf: chunk)) != nil {}
            try? h.close()
            return file
        }
        func close() {
            if mounted { _ = Self.sh("umount '\(path)'") }
            try? FileManager.default.removeItem(atPath: path)
        }
        @discardableResult
        static func sh(_ command: String) -> Int32 {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/bin/sh")
            p.arguments = ["-c", command + " >/dev/null 2>&1"]
            try? p.run()
            p.waitUntilExit()
            return p.terminationStatus
        }
    }

    static let isRoot = getuid() == 0

    func sample(_ n: Int, seed: Int) throws -> String {
        try Evctl.run(["sample", "--count", String(n), "--seed", String(seed)]).stdout
    }

    func eventCount(_ store: String) throws -> Int {
        try Evctl.run(["log", "--store", store, "--json", "--limit", "100000000"]).stdout.split(separator: "\n").count
    }

    @Test(.enabled(if: isRoot, "mounting a tmpfs needs root (CI and the suite run as root)"))
    func aFullDiskLosesNothingAndWorkResumesOnceSpaceIsFreed() throws {
        let disk = SmallDisk(megabytes: 12)
        defer { disk.close() }
        try #require(disk.mounted, "could not mount a tmpfs at \(disk.path)")
        let store = disk.path + "/store"
        #expect(try Evctl.run(["init", "--store", store]).status == 0)
        // Room to free later, written first.
        let filler = disk.path + "/filler"
        try Data(count: 4 << 20).write(to: URL(fileURLWithPath: filler))

        var acknowledged = 0
        var full: Evctl.Result?
        for round in 0..<400 {
            let input = try sample(500, seed: round)
            let r = try Evctl.run(["append", "--store", store, "--json"], stdin: input)
            if r.status == 0 {
                acknowledged += json(r.stdout)["appended"] as? Int ?? 0
            } else if r.status == 5 {
                // Durable, not projected: acknowledged all the same.
                acknowledged += json(r.stdout)["appended"] as? Int ?? 0
            } else {
                full = r
                break
            }
        }
        let failure = try #require(full, "the disk never filled")
        #expect(failure.status == 6, "\(failure.status): \(failure.stderr)")
        #expect(failure.stderr.contains("no space left") && failure.stderr.contains(disk.path), "\(failure.stderr)")

        // What the failed write had taken (a projection's WAL mid catch-up) is given back when it
        // ends; the rest of the disk is now taken by another file, so it stays full.
        let rest = try disk.fillUp("rest", chunkBytes: 64 << 10)

        // Nothing acknowledged is lost or duplicated, every file verifies, and reads work.
        let verify = try Evctl.run(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        #expect(try eventCount(store) == acknowledged)
        for read in [["items", "--limit", "3"], ["status"], ["log", "--limit", "2"], ["cursor"]] {
            let r = try Evctl.run(read + ["--store", store])
            #expect(r.status == 0, "\(read[0]): \(r.stderr)")
        }
        // Every other write path fails the same way, and leaves every file verifiable.
        let other = NSTemporaryDirectory() + "/evctl-other-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: other) }
        #expect(try Evctl.run(["init", "--store", other]).status == 0)
        #expect(try Evctl.run(["append", "--store", other], stdin: try sample(3000, seed: 4242)).status == 0)
        let before = try eventCount(store)
        for write in [["pull", other], ["replay", "--rebuild"], ["snapshot", "--out", disk.path + "/snap.sqlite"],
                      ["export", "--out", disk.path + "/all.bundle"]] {
            let r = try Evctl.run(write + ["--store", store])
            #expect(r.status == 6, "\(write[0]): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("no space left on the disk holding"), "\(write[0]): \(r.stderr)")
            #expect(try Evctl.run(["verify", "--store", store]).status == 0, "\(write[0])")
            #expect(try Evctl.run(["items", "--store", store, "--limit", "1"]).status == 0, "\(write[0])")
        }
        #expect(try eventCount(store) == before, "a pull that failed for space appended nothing it did not acknowledge")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: store).filter { $0.hasSuffix(".tmp") || $0.contains(".rebuild") }
        #expect(leftovers.isEmpty, "\(leftovers)")
        acknowledged = before

        // The audit pages work too (their index kept in memory while the disk is full).
        let tmp = TempDir()
        let (inspect, url) = try startListening(["inspect", "--store", store], dir: tmp)
        for page in ["/ui/", "/ui/log"] {
            let curl = Process()
            curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            curl.arguments = ["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "60", url + page]
            let out = Pipe()
            curl.standardOutput = out
            try curl.run()
            let code = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            curl.waitUntilExit()
            #expect(code == "200", "\(page): \(code)")
        }
        inspect.terminate()
        inspect.waitUntilExit()

        let status = try Evctl.run(["status", "--store", store, "--json"])
        #expect(status.stdout.contains("\"disk\""), "status shows the disk's use")

        // Space freed: the next append goes through, and the projection catches up.
        try FileManager.default.removeItem(atPath: filler)
        try FileManager.default.removeItem(atPath: rest)
        let again = try Evctl.run(["append", "--store", store, "--json"], stdin: try sample(200, seed: 999))
        #expect(again.status == 0, "\(again.stderr)")
        acknowledged += json(again.stdout)["appended"] as? Int ?? 0
        #expect(try eventCount(store) == acknowledged)
        let pulled = try Evctl.run(["pull", other, "--store", store])
        #expect(pulled.status == 0, "\(pulled.stderr)")
        acknowledged += 3000
        #expect(try eventCount(store) == acknowledged)
        #expect(try Evctl.run(["verify", "--deep", "--store", store]).status == 0)
        // The projection's WAL is kept bounded.
        let wal = (try? FileManager.default.attributesOfItem(atPath: store + "/projection.sqlite-wal")[.size] as? Int) ?? 0
        #expect(wal <= 8 << 20, "the projection's WAL is \(wal) bytes")
    }

    /// A projection whose WAL and shared-memory files were given back (its last connection
    /// closed), on a disk then filled to the last byte: SQLite cannot size the `-shm` a reader
    /// needs, and the projection is read as the file stands, never refused.
    @Test(.enabled(if: isRoot, "mounting a tmpfs needs root (CI and the suite run as root)"))
    func theProjectionIsReadOnADiskWithNoRoomForItsSharedMemoryFile() throws {
        let disk = SmallDisk(megabytes: 8)
        defer { disk.close() }
        try #require(disk.mounted, "could not mount a tmpfs at \(disk.path)")
        let store = disk.path + "/store"
        #expect(try Evctl.run(["init", "--store", store]).status == 0)
        #expect(try Evctl.run(["append", "--store", store], stdin: try sample(300, seed: 1)).status == 0)
        // Every commit is in the file (the WAL is empty): its WAL and shared-memory files go, as
        // SQLite removes them when the last connection of a file closes.
        let wal = (try? FileManager.default.attributesOfItem(atPath: store + "/projection.sqlite-wal")[.size] as? Int) ?? 0
        try #require(wal == 0, "the WAL holds \(wal) bytes")
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store + "/projection.sqlite" + suffix) }
        try disk.fillUp("rest", chunkBytes: 4 << 10)
        let items = try Evctl.run(["items", "--store", store, "--limit", "500", "--json"])
        #expect(items.status == 0, "\(items.stderr)")
        #expect(items.stdout.split(separator: "\n").count > 10, "\(items.stdout.prefix(300))")
    }
}
