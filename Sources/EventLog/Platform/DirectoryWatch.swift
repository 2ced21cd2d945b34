import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Sleeps until a file in one of some directories changes (inotify: written, closed after
/// writing, created, renamed in), or a timeout passes; on a system or filesystem without
/// inotify, just the timeout. Which file changed is not reported: a caller re-reads what it
/// follows. Used by the projection watcher and the server's cursor watcher. Not thread-safe.
package final class DirectoryWatch {
    private var fd: Int32
    private var watched = Set<String>()
    private var buffer = [UInt8](repeating: 0, count: 4096)

    public init() {
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
    }

    deinit { if fd >= 0 { close(fd) } }

    /// Watches `path` too (once; a directory that cannot be watched is left to the timeout).
    public func add(_ path: String) {
        guard fd >= 0, !watched.contains(path) else { return }
        if inotify_add_watch(fd, path, UInt32(IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE)) >= 0 { watched.insert(path) }
    }

    /// Returns once something changed or `seconds` passed; pending events are consumed.
    public func wait(seconds: Double) {
        guard fd >= 0 else {
            usleep(useconds_t(max(1000, seconds * 1_000_000)))
            return
        }
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        _ = Glibc.poll(&p, 1, Int32(max(1, seconds * 1000)))
        while buffer.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
    }
}
