#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// Files that come from elsewhere (a legacy database, an NDJSON file to import, a bundle, a
/// peer's kept snapshot): opened only when they are regular files and no larger than a bound.
/// A FIFO, a device, a socket or a directory given as such a file is refused at once: the file is
/// opened without blocking (a FIFO with no writer would otherwise hang the process, holding
/// whatever lock it took) and checked with `fstat` on the open descriptor, so what is checked is
/// what is read. See docs/SECURITY.md, "Bounds".
package enum ForeignFile {
    /// Opens `path` for reading after checking that it is a regular file of at most `bytesMax`
    /// bytes. Returns the descriptor (the caller closes it) and the file's size.
    /// - Throws: `LogError` naming the file and what it is instead.
    public static func openRegular(_ path: String, bytesMax: Int, op: String) throws -> (fd: Int32, size: Int) {
        // FileIO.open refuses what is not a regular file (without blocking) and symbolic links.
        let fd = try FileIO.open(path, O_RDONLY, op: op)
        let size: Int
        do { size = try FileIO.fileSize(fd, path: path, op: op) } catch {
            FileIO.close(fd)
            throw error
        }
        guard size <= bytesMax else {
            FileIO.close(fd)
            throw LogError(.invalidInput, op, "the file is \(size) bytes, more than the \(bytesMax) allowed", file: path)
        }
        return (fd, size)
    }

    /// Checks `path` as `openRegular` does and closes it again: for a file another library then
    /// opens by name (SQLite). Returns its size.
    @discardableResult
    public static func checkRegular(_ path: String, bytesMax: Int, op: String) throws -> Int {
        let (fd, size) = try openRegular(path, bytesMax: bytesMax, op: op)
        FileIO.close(fd)
        return size
    }

    /// Reads the whole of a regular file of at most `bytesMax` bytes.
    public static func read(_ path: String, bytesMax: Int, op: String) throws -> [UInt8] {
        let (fd, size) = try openRegular(path, bytesMax: bytesMax, op: op)
        defer { FileIO.close(fd) }
        var buf = [UInt8](repeating: 0, count: size)
        let n = try buf.withUnsafeMutableBytes { try FileIO.pread(fd, into: $0, count: size, at: 0, path: path, op: op) }
        buf.removeLast(size - n)
        return buf
    }

    /// Copies a regular file of at most `bytesMax` bytes to `destination` durably (temp file,
    /// fsync, rename, fsync the directory). A file that grows past the bound while it is copied
    /// is refused too; nothing is left at `destination` then.
    public static func copy(_ path: String, to destination: String, bytesMax: Int, op: String) throws {
        let (fd, _) = try openRegular(path, bytesMax: bytesMax, op: op)
        defer { FileIO.close(fd) }
        let tmp = destination + ".tmp"
        unlink(tmp)
        let out = try FileIO.open(tmp, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600, op: op)
        var closed = false
        defer { if !closed { FileIO.close(out); unlink(tmp) } }
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        var offset = 0
        while true {
            let n = try buf.withUnsafeMutableBytes { try FileIO.pread(fd, into: $0, count: $0.count, at: offset, path: path, op: op) }
            if n == 0 { break }
            guard offset + n <= bytesMax else {
                throw LogError(.invalidInput, op, "the file grew past the \(bytesMax) bytes allowed while it was copied", file: path)
            }
            try buf.withUnsafeBytes { try FileIO.pwriteAll(out, UnsafeRawBufferPointer(rebasing: $0[0..<n]), at: offset, path: tmp, op: op) }
            offset += n
        }
        try FileIO.fsync(out, path: tmp, op: op)
        FileIO.close(out)
        closed = true
        try FileIO.publish(tmp, as: destination, op: op)
    }

    static func kind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFIFO: return "a FIFO"
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        case S_IFSOCK: return "a socket"
        case S_IFDIR: return "a directory"
        case S_IFLNK: return "a symbolic link"
        default: return "not a regular file"
        }
    }
}
