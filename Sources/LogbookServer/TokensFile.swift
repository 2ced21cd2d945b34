import Replicator
import Foundation
import Logging
import ServiceLifecycle
import Synchronization  // Atomic: the SIGHUP handler may not take a lock
import EventLog

/// SIGHUPs received since the process started (counted by a signal handler, read by watchers).
private let hangups = Atomic<Int>(0)

/// The access policy a server uses now. Requests read it once each; a reload swaps it whole.
/// What outlives a request's head (a watch stream, a streamed page or snapshot, a push's body)
/// asks to hear of each swap (`onReplace`), or checks the version (`versioned`) before it goes on.
public final class PolicySource: @unchecked Sendable {
    private let lock = Lock()
    private var policy: AccessPolicy
    /// How many times the policy was replaced (swapped with it, under `lock`).
    private var replaced: UInt64 = 0
    private var listeners: [UInt64: @Sendable () -> Void] = [:]
    private var nextListener: UInt64 = 0

    public init(_ policy: AccessPolicy) { self.policy = policy }

    public var current: AccessPolicy { lock.withLock { policy } }

    /// The policy in force and its version: a different version, later, means it was replaced.
    public var versioned: (policy: AccessPolicy, version: UInt64) { lock.withLock { (policy, replaced) } }

    /// Calls `changed` after each replacement of the policy from now on (on the replacing
    /// thread, outside the lock), until `stopListening` is given the returned id.
    public func onReplace(_ changed: @escaping @Sendable () -> Void) -> UInt64 {
        lock.withLock {
            nextListener += 1
            listeners[nextListener] = changed
            return nextListener
        }
    }

    public func stopListening(_ id: UInt64) { _ = lock.withLock { listeners.removeValue(forKey: id) } }

    func replace(with p: AccessPolicy) {
        let told = lock.withLock {
            policy = p
            replaced &+= 1
            return Array(listeners.values)
        }
        for f in told { f() }
    }
}

/// Keeps a `PolicySource` in step with its tokens file: re-read when the file changes (written
/// in place, or replaced by a rename) and on SIGHUP, so a token is added or revoked without a
/// restart. A file that cannot be used (unreadable, invalid JSON, a bad principal) leaves the
/// last good policy in force, and the log says why. The file is looked at every `interval`
/// seconds (one `stat`), which works on any filesystem; a SIGHUP is acted on within 0.1 s.
public final class TokensFileWatcher: Service, @unchecked Sendable {
    public let path: String
    public let source: PolicySource
    let interval: Double
    let logger: Logger
    private var seen: FileStamp?
    private let lock = Lock()

    /// What says a file changed: its inode (a rename), size and times (an edit in place).
    struct FileStamp: Equatable {
        var device: UInt64, inode: UInt64, size: Int64
        var mtime: timespec, ctime: timespec
        static func == (a: FileStamp, b: FileStamp) -> Bool {
            a.device == b.device && a.inode == b.inode && a.size == b.size && a.mtime.tv_sec == b.mtime.tv_sec
                && a.mtime.tv_nsec == b.mtime.tv_nsec && a.ctime.tv_sec == b.ctime.tv_sec && a.ctime.tv_nsec == b.ctime.tv_nsec
        }

        init?(_ path: String) {
            var st = stat()
            guard stat(path, &st) == 0 else { return nil }
            device = UInt64(st.st_dev)
            inode = UInt64(st.st_ino)
            size = Int64(st.st_size)
            mtime = st.st_mtim
            ctime = st.st_ctim
        }
    }

    /// - Parameter source: holds the policy read from `path` at start.
    public init(path: String, source: PolicySource, interval: Double = 0.25, logger: Logger) {
        self.path = path
        self.source = source
        self.interval = interval
        self.logger = logger
        seen = FileStamp(path)
    }

    /// Reads the file again now. Returns whether the policy in force changed.
    @discardableResult
    public func reload(reason: String) -> Bool {
        lock.withLock {
            seen = FileStamp(path)
            do {
                let p = try AccessPolicy.load(path: path)
                source.replace(with: p)
                logger.notice("tokens file reloaded (\(reason)): \(p.principals.count) principal\(p.principals.count == 1 ? "" : "s")", metadata: ["file": "\(path)"])
                return true
            } catch {
                logger.error("tokens file not reloaded (\(reason)); the last good one stays in force (\(source.current.principals.count) principals): \(error)",
                             metadata: ["file": "\(path)"])
                return false
            }
        }
    }

    /// Reloads when the file's stamp moved since it was last read.
    func check() {
        let now = FileStamp(path)
        let changed = lock.withLock { now != seen }
        if changed { reload(reason: now == nil ? "the file is gone" : "the file changed") }
    }

    /// Counts SIGHUPs from now on (instead of the default action, ending the process). Idempotent.
    public static func handleHangups() {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in hangups.add(1, ordering: .relaxed) }
        action.sa_flags = SA_RESTART
        sigemptyset(&action.sa_mask)
        sigaction(SIGHUP, &action, nil)
    }

    public func run() async throws {
        Self.handleHangups()
        try? await cancelWhenGracefulShutdown { try await self.loop() }
    }

    private func loop() async throws {
        var hupsSeen = hangups.load(ordering: .relaxed)
        var sinceCheck = 0.0
        let tick = min(0.1, interval)
        do {
            while !Task.isCancelled {
                try await Task.sleep(nanoseconds: UInt64(tick * 1e9))
                let hups = hangups.load(ordering: .relaxed)
                if hups != hupsSeen {
                    hupsSeen = hups
                    sinceCheck = 0
                    reload(reason: "SIGHUP")
                    continue
                }
                sinceCheck += tick
                if sinceCheck >= interval {
                    sinceCheck = 0
                    check()
                }
            }
        }
    }
}
