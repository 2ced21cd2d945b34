import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How a process learns that a store's files changed: inotify where the system has it (Linux),
/// or polling, which works everywhere (NFS, macOS, a container without inotify) at the cost of
/// `pollInterval` of delay. `LOGBOOK_WATCH=polling` in the environment selects polling at run
/// time; the tests run both.
package enum ChangeWatching: String, Sendable {
    case inotify
    case polling

    /// The mode this process uses: polling when `LOGBOOK_WATCH=polling` or the system has no
    /// inotify, inotify otherwise.
    package static var selected: ChangeWatching {
        #if os(Linux)
        ProcessInfo.processInfo.environment["LOGBOOK_WATCH"] == "polling" ? .polling : .inotify
        #else
        .polling
        #endif
    }
}

/// Sleeps until a file in one of some directories changes (inotify: written, closed after
/// writing, created, renamed in), or a timeout passes; polling, or on a filesystem without
/// inotify, just the timeout. Which file changed is not reported: a caller re-reads what it
/// follows. Used by the projection watcher and the server's cursor watcher. Not thread-safe.
package final class DirectoryWatch {
    /// The mode in use.
    package let mode: ChangeWatching
    private var fd: Int32 = -1
    private var watched = Set<String>()
    private var buffer = [UInt8](repeating: 0, count: 4096)

    package init(_ mode: ChangeWatching = .selected) {
        self.mode = mode
        #if os(Linux)
        if mode == .inotify { fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) }
        #endif
    }

    deinit { if fd >= 0 { _ = Sys.close(fd) } }

    /// Watches `path` too (once; a directory that cannot be watched is left to the timeout).
    package func add(_ path: String) {
        guard fd >= 0, !watched.contains(path) else { return }
        #if os(Linux)
        if inotify_add_watch(fd, path, UInt32(IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE)) >= 0 { watched.insert(path) }
        #endif
    }

    /// Returns once something changed or `seconds` passed; pending events are consumed.
    package func wait(seconds: Double) {
        guard fd >= 0 else {
            usleep(useconds_t(max(1000, seconds * 1_000_000)))
            return
        }
        _ = Sys.pollReadable(fd, milliseconds: Int32(max(1, seconds * 1000)))
        while buffer.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
    }
}
