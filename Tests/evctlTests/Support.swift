import Foundation
import TestSupport

/// Runs the built `evctl` (found next to the test bundle, or at $EVCTL_BIN).
enum Evctl {
    static let path: String = {
        if let p = ProcessInfo.processInfo.environment["EVCTL_BIN"] { return p }
        var dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = dir.appendingPathComponent("evctl").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/evctl").path
    }()

    struct Result {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    @discardableResult
    static func run(_ args: [String], stdin: String? = nil, env: [String: String] = [:], cwd: String? = nil) throws -> Result {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = args
        if let cwd { p.currentDirectoryURL = URL(fileURLWithPath: cwd) }
        var environment = ProcessInfo.processInfo.environment
        environment.removeValue(forKey: "EVCTL_STORE")
        for (k, v) in env { environment[k] = v }
        p.environment = environment
        let out = Pipe(), err = Pipe(), inp = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = inp
        try p.run()
        // A tool that exits before reading all its input (a refusal) must not kill the tests.
        signal(SIGPIPE, SIG_IGN)
        if let stdin { try? inp.fileHandleForWriting.write(contentsOf: Data(stdin.utf8)) }
        try inp.fileHandleForWriting.close()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return Result(status: p.terminationStatus, stdout: String(decoding: o, as: UTF8.self), stderr: String(decoding: e, as: UTF8.self))
    }
}

func json(_ line: String) -> [String: Any] {
    (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
}

/// Starts `evctl ARGS --port-file F` (serve or inspect) and waits until it listens; its URL.
func startListening(_ args: [String], dir: TempDir) throws -> (Process, String) {
    let portFile = dir.path + "/port-\(UUID().uuidString.prefix(6))"
    let p = Process()
    p.executableURL = URL(fileURLWithPath: Evctl.path)
    p.arguments = args + ["--port-file", portFile]
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    try p.run()
    for _ in 0..<400 {
        if let text = try? String(contentsOfFile: portFile, encoding: .utf8), let port = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
            return (p, "http://127.0.0.1:\(port)")
        }
        guard p.isRunning else { break }
        Thread.sleep(forTimeInterval: 0.025)
    }
    p.terminate()
    throw StartFailure(description: "evctl \(args.first ?? "") did not start")
}

struct StartFailure: Error, CustomStringConvertible { let description: String }

/// Runs `body`, which blocks (processes, browsers), on a thread of its own rather than one of
/// Swift concurrency's few shared threads: a test waiting there for seconds would starve the
/// async tests running beside it (their clients and servers time out).
func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
