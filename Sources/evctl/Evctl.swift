import ArgumentParser
import Foundation
import EventLog
import Logbook

@main
struct Evctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evctl",
        abstract: "Logbook: an append-only, checksummed event log for task-manager data.",
        discussion: """
            The store is --store PATH, else $EVCTL_STORE, else ./evstore.
            Exit status: 0 success; 1 failure or problems found; 3 the store is locked by another writer (after waiting 2 s);
            4 the input was refused (nothing was appended); 5 appended durably but not projected (do not retry the
            append: `evctl replay` completes it); 6 the disk is full (nothing acknowledged was lost); 7 a push left out origins
            the peer refused (other than the store's own; each named); 64 bad usage.
            """,
        subcommands: [InitCommand.self, AppendCommand.self, ReplayCommand.self, ItemsCommand.self, HistoryCommand.self, LinksCommand.self,
                      ConflictsCommand.self, AnomaliesCommand.self, ResolveCommand.self, PurgeCommand.self, LogCommand.self, VerifyCommand.self,
                      StatusCommand.self, CursorCommand.self, ExportCommand.self, ImportCommand.self, ImportLegacyCommand.self, PullCommand.self,
                      PushCommand.self, SyncCommand.self, ServeCommand.self, InspectCommand.self, SnapshotCommand.self, CompactCommand.self, SampleCommand.self, WatchCommand.self, KeysCommand.self, ShareCommand.self]
    )
}

extension Evctl {
    /// Exit status of `append` when its events are in the log but the projection failed.
    static let appendedNotProjected: Int32 = 5
    /// A write failed because the disk is full: nothing acknowledged was lost; free space and
    /// run it again (work resumes by itself).
    static let diskFull: Int32 = 6
    /// A push sent everything but the origins, other than the store's own, that the peer refused
    /// to take from this principal (each named on stderr; their frames stay in the store).
    static let pushedExceptRefused: Int32 = 7
}

/// Seconds a writing command waits while another process holds the store's writer lock (a
/// server holds it for a moment after each push) before it gives up with exit status 3.
let writerLockWait = 2.0

/// Options every store command takes.
struct StoreOptions: ParsableArguments {
    @Option(name: .long, help: "The store directory (default: $EVCTL_STORE, else ./evstore).")
    var store: String?

    @Flag(name: .long, help: "Print JSON for scripts instead of text.")
    var json = false

    var path: String {
        if let store { return store }
        if let env = ProcessInfo.processInfo.environment["EVCTL_STORE"], !env.isEmpty { return env }
        return "./evstore"
    }

    /// Opens the store through the Logbook, reporting on stderr what recovery repaired, how far
    /// behind a read-only projection is, and projection progress on a terminal.
    func book(_ access: Logbook.Access, project: Bool = true, lockWait: Double = writerLockWait) throws -> Logbook {
        Terminal.storePath = path
        let progress = ProjectionProgress()
        let book = try Logbook.open(at: path, access: access, options: LogbookOptions(
            lockWait: lockWait, project: project, progress: { progress.report($0, $1) }, recovered: { Terminal.reportRecovery($0) }))
        Terminal.endProgress()
        if book.behindAtOpen > 0 {
            Terminal.note("the projection is \(book.behindAtOpen) events behind the log (another process is writing, or the store cannot be written now: a full disk, a read-only mount)")
        }
        return book
    }
}

/// A command whose failures print one clear message on stderr and exit with a status that says what kind.
protocol StoreCommand: ParsableCommand {
    func execute() throws
}

extension StoreCommand {
    func run() throws {
        do {
            try execute()
        } catch {
            throw Terminal.exitCode(for: error)
        }
    }
}

/// A `StoreCommand` that runs async work (HTTP transfers, the server).
protocol AsyncStoreCommand: AsyncParsableCommand {
    func execute() async throws
}

extension AsyncStoreCommand {
    func run() async throws {
        do {
            try await execute()
        } catch {
            throw Terminal.exitCode(for: error)
        }
    }
}

enum Terminal {
    /// The store the command works on, for errors that name its disk.
    nonisolated(unsafe) static var storePath: String?

    /// Prints what failed and gives the exit status that says what kind of failure it was.
    static func exitCode(for error: any Error) -> any Error {
        // The disk of the file that failed (a peer's, for a push by path), else the store's.
        let near = (error as? LogError)?.file ?? storePath
        if !(error is ExitCode), DiskSpace.isFull(error, near: near) {
            Terminal.error(diskFull(error, near: near))
            return ExitCode(Evctl.diskFull)
        }
        switch error {
        case let e as ExitCode: return e
        case let e as InputError:
            Terminal.error("\(e) (nothing was appended)")
            return ExitCode(4)
        case let e as LogError:
            Terminal.error(e.description)
            return ExitCode(e.isLocked ? 3 : 1)
        case let e as LogbookError:
            Terminal.error(e.description)
            return ExitCode(1)
        case let f as TransferFailure:
            // The code is stable (docs/PROTOCOL.md, "Errors"); scripts match on it, not the text.
            Terminal.error("\(f.description) [\(f.code.rawValue)]")
            return ExitCode(f.code == .busy ? 3 : 1)
        default:
            Terminal.error(String(describing: error))
            return ExitCode(1)
        }
    }

    /// A write refused for space: the disk, what is free, and that nothing acknowledged was lost.
    static func diskFull(_ error: any Error, near: String?) -> String {
        "no space left on \(DiskSpace.describe(near: near ?? ".")): \(error); nothing acknowledged was lost and every file stays verifiable: free some space and run it again"
    }

    /// Error and note messages may quote data (a peer's answer, a file's bytes): control
    /// characters are escaped, line breaks kept.
    static func error(_ message: String) {
        FileHandle.standardError.write(Data("evctl: error: \(safe(message))\n".utf8))
    }

    static func note(_ message: String) {
        FileHandle.standardError.write(Data("evctl: \(safe(message))\n".utf8))
    }

    static func safe(_ message: String) -> String {
        message.split(separator: "\n", omittingEmptySubsequences: false).map { printable(String($0)) }.joined(separator: "\n")
    }

    static var stderrIsTerminal: Bool { isatty(2) != 0 }

    /// Overwrites one progress line on a terminal; silent otherwise.
    static func progress(_ message: String) {
        guard stderrIsTerminal else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[2K\(message)".utf8))
    }

    static func endProgress() {
        guard stderrIsTerminal else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8))
    }

    static func reportRecovery(_ r: RecoveryReport) {
        for a in r.actions { note("recovery: \(a)") }
    }
}

/// Buffered standard output (one write per 64 KiB), so long listings are not syscall-bound.
final class Output {
    private var buffer: [UInt8] = []
    init() { buffer.reserveCapacity(1 << 16) }
    func line(_ b: [UInt8]) {
        buffer.append(contentsOf: b)
        buffer.append(0x0A)
        if buffer.count >= 1 << 16 { flush() }
    }
    func line(_ s: String) {
        buffer.append(contentsOf: s.utf8)
        buffer.append(0x0A)
        if buffer.count >= 1 << 16 { flush() }
    }
    func flush() {
        guard !buffer.isEmpty else { return }
        Output.write(buffer)
        buffer.removeAll(keepingCapacity: true)
    }
    deinit { flush() }

    /// Writes `bytes` to standard output at once, straight to the descriptor (no buffering: a
    /// consumer reading a pipe sees them now).
    static func write(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { p in
            var done = 0
            while done < p.count {
                let n = Glibc.write(1, p.baseAddress! + done, p.count - done)
                if n <= 0 {
                    if n < 0 && errno == EINTR { continue }
                    return
                }
                done += n
            }
        }
    }
}
