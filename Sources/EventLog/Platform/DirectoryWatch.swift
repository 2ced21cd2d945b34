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
/// follows. Used by the projection watcher and the server's cursor watcher. Not thread-safe,
/// but for `wake`, which any thread may call to end a `wait` at once (a watcher being stopped).
package final class DirectoryWatch: @unchecked Sendable {
    /// The mode in use.
    package let mode: ChangeWatching
    private var fd: Int32 = -1
    /// A pipe `wake` writes a byte into, which `wait` polls beside `fd` ([-1, -1]: none could be
    /// made, and a wait runs its time out).
    private let wakePipe: [Int32]
    private var watched = Set<String>()
    /// The path of each watch descriptor (to say which directory an event is about).
    private var paths: [Int32: String] = [:]
    private var buffer = [UInt8](repeating: 0, count: 4096)

    package init(_ mode: ChangeWatching = .selected) {
        self.mode = mode
        #if os(Linux)
        if mode == .inotify { fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) }
        #endif
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) == 0 {
            for e in ends {
                _ = fcntl(e, F_SETFL, fcntl(e, F_GETFL) | O_NONBLOCK)
                _ = fcntl(e, F_SETFD, FD_CLOEXEC)
            }
        } else {
            ends = [-1, -1]
        }
        wakePipe = ends
    }

    deinit {
        if fd >= 0 { _ = Sys.close(fd) }
        for e in wakePipe where e >= 0 { _ = Sys.close(e) }
    }

    /// Ends the `wait` under way, or the next one, at once. Any thread may call it.
    package func wake() {
        guard wakePipe[1] >= 0 else { return }
        var byte: UInt8 = 1
        _ = write(wakePipe[1], &byte, 1)  // a full pipe is a wake already pending
    }

    /// True when changes are reported by inotify (false: polling, or inotify could not start).
    package var reportsChanges: Bool { fd >= 0 }

    /// Watches `path` too (once; a directory that cannot be watched is left to the timeout).
    /// Returns whether it is watched.
    @discardableResult
    package func add(_ path: String) -> Bool {
        guard fd >= 0 else { return false }
        guard !watched.contains(path) else { return true }
        #if os(Linux)
        let wd = inotify_add_watch(fd, path, UInt32(IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF))
        if wd >= 0 {
            watched.insert(path)
            paths[wd] = path
            return true
        }
        #endif
        return false
    }

    /// What changed since the last call, without waiting: for each event, the watched directory
    /// and the name in it (empty for the directory itself). nil when changes may have gone
    /// unreported (the kernel's queue overflowed, or nothing is watched by inotify): the caller
    /// then looks at everything. A directory whose watch ended (it was removed) is reported and
    /// forgotten, so `add` watches it again if it comes back.
    package func changes() -> [(directory: String, name: String)]? {
        guard fd >= 0 else { return nil }
        var out: [(directory: String, name: String)] = []
        var overflow = false
        #if os(Linux)
        let headerSize = MemoryLayout<inotify_event>.size
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            var at = 0
            // Each record: wd (i32), mask (u32), cookie (u32), len (u32), then len bytes of name.
            while at + headerSize <= n {
                let (wd, mask, len) = buffer.withUnsafeBytes { b -> (Int32, UInt32, Int) in
                    (b.loadUnaligned(fromByteOffset: at, as: Int32.self), b.loadUnaligned(fromByteOffset: at + 4, as: UInt32.self),
                     Int(b.loadUnaligned(fromByteOffset: at + 12, as: UInt32.self)))
                }
                let end = at + headerSize + len
                guard end <= n else { overflow = true; break }
                if mask & UInt32(IN_Q_OVERFLOW) != 0 { overflow = true }
                if let dir = paths[wd] {
                    let nameBytes = buffer[(at + headerSize)..<end].prefix { $0 != 0 }
                    out.append((dir, String(decoding: nameBytes, as: UTF8.self)))
                    if mask & UInt32(IN_IGNORED) != 0 {
                        paths[wd] = nil
                        watched.remove(dir)
                    }
                }
                at = end
            }
        }
        #endif
        return overflow ? nil : out
    }

    /// Returns once something changed, `wake` was called or `seconds` passed; pending events
    /// (and wakes) are consumed.
    package func wait(seconds: Double) {
        let fds = [fd, wakePipe[0]].filter { $0 >= 0 }
        guard !fds.isEmpty else {
            usleep(useconds_t(max(1000, seconds * 1_000_000)))
            return
        }
        _ = Sys.pollReadable(fds, milliseconds: Int32(max(1, seconds * 1000)))
        if fd >= 0 { while buffer.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {} }
        if wakePipe[0] >= 0 { while buffer.withUnsafeMutableBytes({ read(wakePipe[0], $0.baseAddress, $0.count) }) > 0 {} }
    }
}
