#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import GRDB

/// The disk a store lives on: how full it is, and whether an error was the disk being full. A
/// write that fails for space is reported as such (naming the filesystem and what is free), with
/// its own exit status in evctl, and work resumes by itself once space is freed: nothing about a
/// full disk is remembered. See docs/SECURITY.md, "A full disk".
public enum DiskSpace {
    /// The filesystem holding a path.
    public struct Usage: Sendable, Equatable {
        /// Where the filesystem is mounted (the topmost folder of the path on the same device).
        public var mountPoint: String
        public var totalBytes: UInt64
        /// Bytes an unprivileged writer may still use.
        public var availableBytes: UInt64
    }

    /// Below this many free bytes, an I/O error is taken to be the disk being full (SQLite
    /// reports a failed write to its shared memory file or journal as a plain I/O error).
    public static let lowBytes: UInt64 = 1 << 20

    /// The filesystem holding `path` (or its nearest existing parent).
    public static func usage(of path: String) -> Usage? {
        var p = (path as NSString).standardizingPath
        if p.isEmpty { p = "." }
        while !FileManager.default.fileExists(atPath: p), p != "/", !p.isEmpty { p = FileIO.parent(p) }
        var fs = statvfs()
        guard statvfs(p, &fs) == 0 else { return nil }
        let block = UInt64(fs.f_frsize > 0 ? fs.f_frsize : fs.f_bsize)
        return Usage(mountPoint: mountPoint(of: p), totalBytes: UInt64(fs.f_blocks) &* block, availableBytes: UInt64(fs.f_bavail) &* block)
    }

    /// The topmost existing folder of `path` on the same device as it.
    static func mountPoint(of path: String) -> String {
        var st = stat()
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var current = (absolute as NSString).standardizingPath
        guard stat(current, &st) == 0 else { return current }
        let device = st.st_dev
        while current != "/" {
            let parent = FileIO.parent(current)
            var ps = stat()
            guard stat(parent, &ps) == 0, ps.st_dev == device else { break }
            current = parent
        }
        return current
    }

    /// Whether `error` was a write refused for lack of space; `path` is where the write went,
    /// for errors that only say "I/O error" (checked against what is free now). Decided by the
    /// error's type, errno and SQLite result code only, never by its text: a message can quote
    /// a peer's words (a server answering "No space left on device" is not this disk being full).
    public static func isFull(_ error: any Error, near path: String?) -> Bool {
        if let e = error as? LogError, let n = e.errno, n == ENOSPC || n == EDQUOT { return true }
        if let e = error as? DatabaseError, e.resultCode == .SQLITE_FULL { return true }
        if !(error is LogError) && !(error is DatabaseError) {
            let ns = error as NSError
            if ns.domain == NSPOSIXErrorDomain, ns.code == Int(ENOSPC) || ns.code == Int(EDQUOT) { return true }
            if ns.domain == NSCocoaErrorDomain, ns.code == NSFileWriteOutOfSpaceError { return true }
        }
        let ioError = (error as? DatabaseError).map { $0.resultCode == .SQLITE_IOERR } ?? false || (error as? LogError)?.kind == .io
        if ioError, let path, let u = usage(of: path), u.availableBytes < lowBytes { return true }
        return false
    }

    /// Whether `error` says the store cannot be written now: its disk is full, or it is mounted
    /// read-only, or a file of it may not be written (a lock file, a database).
    public static func cannotWrite(_ error: any Error, near path: String?) -> Bool {
        if isFull(error, near: path) { return true }
        if let e = error as? LogError, let n = e.errno, n == EROFS || n == EACCES || n == EPERM { return true }
        if let e = error as? DatabaseError, e.resultCode == .SQLITE_READONLY || e.resultCode == .SQLITE_CANTOPEN || e.resultCode == .SQLITE_PERM { return true }
        return false
    }

    /// A line that names the disk: where it is mounted and what is free on it.
    public static func describe(near path: String) -> String {
        guard let u = usage(of: path) else { return "the disk holding \(path)" }
        return "the disk holding \(path) (the filesystem mounted at \(u.mountPoint): \(u.availableBytes) of \(u.totalBytes) bytes free)"
    }
}

