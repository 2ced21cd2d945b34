#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// Thin, checked wrappers over POSIX file calls. Every failure becomes a `LogError` naming the file.
enum FileIO {
    /// Opens a file of a store (ours, or a peer's reached by path, whose files are hostile): a
    /// symbolic link is refused (`O_NOFOLLOW`: a write cannot be sent to another file, a read
    /// cannot be pointed at one), and so is anything but a regular file, checked with `fstat` on
    /// the descriptor opened without blocking (a FIFO would hang the process, holding whatever
    /// lock it took). Directories are opened with `O_DIRECTORY` and only checked to be ones.
    static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o644, op: String) throws -> Int32 {
        let directory = flags & O_DIRECTORY != 0
        let extra = directory ? O_CLOEXEC : O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY
        let fd = path.withCString { Sys.open($0, flags | extra, mode) }
        if fd < 0 {
            let e = errno
            if e == ELOOP { throw LogError(.invalidInput, op, "is a symbolic link; a store's files are never followed elsewhere", file: path, errno: e) }
            throw LogError(.io, op, "cannot open", file: path, errno: e)
        }
        guard !directory else { return fd }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let e = errno
            Sys.close(fd)
            throw LogError(.io, op, "cannot stat", file: path, errno: e)
        }
        guard (st.st_mode & S_IFMT) == S_IFREG else {
            Sys.close(fd)
            throw LogError(.invalidInput, op, "not a regular file (\(ForeignFile.kind(st.st_mode))); only regular files are read or written", file: path,
                           hint: "copy it to a regular file first")
        }
        // Reads and writes of a regular file never block; the flag goes, so nothing downstream sees it.
        _ = fcntl(fd, F_SETFL, flags & O_APPEND)
        return fd
    }

    /// Closes a descriptor this code owns. A descriptor that is not open means it was closed
    /// twice, and the second close may have closed one another thread had just opened: stop
    /// rather than go on with the descriptor table in an unknown state. (EINTR is not retried:
    /// Linux has released the descriptor by then.)
    static func close(_ fd: Int32) {
        if Sys.close(fd) != 0 && errno == EBADF {
            preconditionFailure("close(\(fd)): the descriptor was not open (closed twice?)")
        }
    }

    /// Writes all of `bytes` at `offset`, retrying short writes and EINTR.
    static func pwriteAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int, path: String, op: String) throws {
        var done = 0
        while done < bytes.count {
            let n = Sys.pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset + done))
            if n < 0 {
                if errno == EINTR { continue }
                throw LogError(.io, op, "write failed", file: path, offset: offset + done, errno: errno)
            }
            if n == 0 { throw LogError(.io, op, "write made no progress", file: path, offset: offset + done) }
            done += n
        }
    }

    /// Reads up to `count` bytes at `offset`; returns fewer only at end of file.
    static func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, count: Int, at offset: Int, path: String, op: String) throws -> Int {
        precondition(count <= buffer.count)
        var done = 0
        while done < count {
            let n = Sys.pread(fd, buffer.baseAddress! + done, count - done, off_t(offset + done))
            if n < 0 {
                if errno == EINTR { continue }
                throw LogError(.io, op, "read failed", file: path, offset: offset + done, errno: errno)
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Reads a whole file of at most `bytesMax` bytes (a larger one is an error, not an allocation
    /// of whatever size a peer's file claims).
    static func readFile(_ path: String, op: String, bytesMax: Int = 16 << 20) throws -> [UInt8] {
        let fd = try open(path, O_RDONLY, op: op)
        defer { FileIO.close(fd) }
        let size = try fileSize(fd, path: path, op: op)
        guard size <= bytesMax else {
            throw LogError(.corrupt, op, "the file is \(size) bytes, more than the \(bytesMax) it can be", file: path)
        }
        var buf = [UInt8](repeating: 0, count: size)
        let n = try buf.withUnsafeMutableBytes { try pread(fd, into: $0, count: size, at: 0, path: path, op: op) }
        buf.removeLast(size - n)
        return buf
    }

    static func fsync(_ fd: Int32, path: String, op: String) throws {
        while Sys.fsync(fd) != 0 {
            if errno == EINTR { continue }
            throw LogError(.io, op, "fsync failed; the data may not be durable", file: path, errno: errno)
        }
    }

    /// fsyncs a directory; "" (the parent of a bare file name) is the current directory.
    static func fsyncDirectory(_ path: String, op: String) throws {
        let path = path.isEmpty ? "." : path
        if let observe = directorySyncObserver.withLock({ $0 }) { observe(path) }
        let fd = try open(path, O_RDONLY | O_DIRECTORY, op: op)
        defer { FileIO.close(fd) }
        try fsync(fd, path: path, op: op)
    }

    /// fdatasync: the data and the metadata needed to read it back (the file size).
    static func fdatasync(_ fd: Int32, path: String, op: String) throws {
        while Sys.fdatasync(fd) != 0 {
            if errno == EINTR { continue }
            throw LogError(.io, op, "fdatasync failed; the data may not be durable", file: path, errno: errno)
        }
    }

    static func fileSize(_ fd: Int32, path: String, op: String) throws -> Int {
        var st = stat()
        if fstat(fd, &st) != 0 { throw LogError(.io, op, "stat failed", file: path, errno: errno) }
        return Int(st.st_size)
    }

    static func size(of path: String) -> Int? {
        var st = stat()
        return stat(path, &st) == 0 ? Int(st.st_size) : nil
    }

    static func truncate(_ fd: Int32, to size: Int, path: String, op: String) throws {
        if ftruncate(fd, off_t(size)) != 0 { throw LogError(.io, op, "truncate failed", file: path, offset: size, errno: errno) }
    }

    static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }
    static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    static func listDirectory(_ path: String, op: String) throws -> [String] {
        guard let dir = opendir(path) else { throw LogError(.io, op, "cannot list directory", file: path, errno: errno) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// Told the path of every directory about to be synced, in order (for a test of the order of
    /// syncs; one test at a time may set it, and it must not sync a directory itself).
    static let directorySyncObserver = Locked<(@Sendable (String) -> Void)?>(nil)

    static func makeDirectory(_ path: String, op: String) throws {
        if mkdir(path, 0o755) != 0 && errno != EEXIST {
            throw LogError(.io, op, "cannot create directory", file: path, errno: errno)
        }
    }

    /// Makes the directory `path` if it is missing, and syncs its parent either way, so that its
    /// entry is on disk before anything written in it is counted on: a directory found may be
    /// one a crash left between its mkdir and that sync.
    static func makeDirectoryDurably(_ path: String, op: String) throws {
        try makeDirectory(path, op: op)
        try fsyncDirectory(parent(path), op: op)
    }

    /// The folder holding `path`: `a/b` → `a`, `/a` → `/`, `a` → `.` (a path of one relative
    /// component is in the current folder). Foundation's `deletingLastPathComponent` traps on such
    /// a path here (swift-corelibs-foundation, Swift 6.3), so the project's code uses this instead.
    package static func parent(_ path: String) -> String {
        var b = Array(path.utf8)
        while b.count > 1, b.last == 0x2F { b.removeLast() }
        guard var i = b.lastIndex(of: 0x2F) else { return "." }
        while i > 0, b[i - 1] == 0x2F { i -= 1 }
        return i == 0 ? "/" : String(decoding: b[..<i], as: UTF8.self)
    }

    /// Creates `path` and every missing folder above it (as `mkdir -p` and `git init a/b` do), and
    /// makes each creation durable by fsyncing the folder it was made in.
    static func makeDirectories(_ path: String, op: String) throws {
        guard !path.isEmpty else { throw LogError(.io, op, "no path given", file: path, errno: ENOENT) }
        var missing: [String] = []
        var p = path
        while !p.isEmpty, p != "/", p != ".", !exists(p) {
            missing.append(p)
            p = parent(p)
        }
        if !p.isEmpty, !isDirectory(p) {
            throw LogError(.io, op, "cannot create a folder under a file that is not a folder", file: p, errno: ENOTDIR)
        }
        for dir in missing.reversed() {
            try makeDirectory(dir, op: op)
            try fsyncDirectory(parent(dir), op: op)
        }
    }

    static func remove(_ path: String, op: String) throws {
        if unlink(path) != 0 && errno != ENOENT { throw LogError(.io, op, "cannot remove", file: path, errno: errno) }
    }

    /// Publishes `bytes` at `path` atomically: temp file, write, fsync, rename, fsync directory.
    /// A crash leaves either the old file or the new one, and possibly a `.tmp` file that open sweeps.
    /// With `restrictedMode` (a secret's file), that mode is set on the file before any byte is
    /// written (a leftover `.tmp` keeps its old mode through `O_CREAT`, so it is set explicitly;
    /// a file system without modes, FAT or some network mounts, is let be). Otherwise the file
    /// is created 0644 less the umask, as every other file.
    static func writeAtomically(_ bytes: [UInt8], to path: String, op: String, durable: Bool = true, restrictedMode: mode_t? = nil) throws {
        let tmp = path + ".tmp"
        // A secret's temp file is made new (O_EXCL), never reused: one planted by someone else
        // in a folder others can write to would keep its owner, and get the secret.
        if restrictedMode != nil, unlink(tmp) != 0, errno != ENOENT { throw LogError(.io, op, "cannot remove a leftover temp file", file: tmp, errno: errno) }
        let fd = try open(tmp, O_WRONLY | O_CREAT | (restrictedMode == nil ? O_TRUNC : O_EXCL), mode: restrictedMode ?? 0o644, op: op)
        do {
            if let mode = restrictedMode, fchmod(fd, mode) != 0, errno != EPERM, errno != ENOTSUP, errno != EINVAL {
                throw LogError(.io, op, "cannot set the file's mode", file: tmp, errno: errno)
            }
            try bytes.withUnsafeBytes { try pwriteAll(fd, $0, at: 0, path: tmp, op: op) }
            if durable { try fsync(fd, path: tmp, op: op) }
            FileIO.close(fd)
        } catch {
            FileIO.close(fd)
            unlink(tmp)
            throw error
        }
        try publish(tmp, as: path, op: op, durable: durable)
    }

    /// Moves a complete `tmp` into place at `path`: rename, then fsync the directory (the file
    /// itself must already be synced). On failure `tmp` is removed.
    static func publish(_ tmp: String, as path: String, op: String, durable: Bool = true) throws {
        if rename(tmp, path) != 0 {
            let e = errno
            unlink(tmp)
            throw LogError(.io, op, "cannot rename temp file into place", file: path, errno: e)
        }
        if durable { try fsyncDirectory(parent(path), op: op) }
    }
}

/// Durable file publication for the other modules (bundles, snapshots), with the same steps the
/// log uses for its own files.
package enum DurableFile {
    /// Writes `bytes` to `path` atomically: temp file, fsync, rename, fsync the directory.
    public static func write(_ bytes: [UInt8], to path: String, op: String) throws {
        try FileIO.writeAtomically(bytes, to: path, op: op)
    }

    /// fsyncs the file at `path`; throws when the data may not be durable.
    public static func sync(_ path: String, op: String) throws {
        let fd = try FileIO.open(path, O_RDONLY, op: op)
        defer { FileIO.close(fd) }
        try FileIO.fsync(fd, path: path, op: op)
    }

    /// fsyncs the directory holding `path`, making a rename or unlink in it durable.
    public static func syncDirectory(of path: String, op: String) throws {
        try FileIO.fsyncDirectory(FileIO.parent(path), op: op)
    }

    /// fsyncs the finished file `tmp`, renames it to `path` and fsyncs the directory; removes
    /// `tmp` when anything fails.
    public static func publish(_ tmp: String, as path: String, op: String) throws {
        do {
            try sync(tmp, op: op)
        } catch {
            unlink(tmp)
            throw error
        }
        try FileIO.publish(tmp, as: path, op: op)
    }
}
