#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The system calls the store makes, in one place (with `FileIO`, `StoreLock`, `DiskSpace` and
/// `DirectoryWatch` beside it in Platform/): everything else calls these, so a port touches
/// this folder only. Built and tested on Linux; the Darwin branches are written for macOS and
/// iOS but not built here.
package enum Sys {
    package static func open(_ path: UnsafePointer<CChar>, _ flags: Int32, _ mode: mode_t) -> Int32 {
        #if canImport(Glibc)
        Glibc.open(path, flags, mode)
        #else
        Darwin.open(path, flags, mode)
        #endif
    }

    package static func close(_ fd: Int32) -> Int32 {
        #if canImport(Glibc)
        Glibc.close(fd)
        #else
        Darwin.close(fd)
        #endif
    }

    package static func pread(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int, _ offset: off_t) -> Int {
        #if canImport(Glibc)
        Glibc.pread(fd, buffer, count, offset)
        #else
        Darwin.pread(fd, buffer, count, offset)
        #endif
    }

    package static func pwrite(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int, _ offset: off_t) -> Int {
        #if canImport(Glibc)
        Glibc.pwrite(fd, buffer, count, offset)
        #else
        Darwin.pwrite(fd, buffer, count, offset)
        #endif
    }

    /// The file's data and metadata on stable storage.
    package static func fsync(_ fd: Int32) -> Int32 {
        #if canImport(Glibc)
        Glibc.fsync(fd)
        #else
        // On Apple systems fsync only reaches the drive's cache; F_FULLFSYNC reaches the medium.
        Darwin.fcntl(fd, F_FULLFSYNC) == -1 ? Darwin.fsync(fd) : 0
        #endif
    }

    /// The file's data and the metadata needed to read it back (its size).
    package static func fdatasync(_ fd: Int32) -> Int32 {
        #if canImport(Glibc)
        Glibc.fdatasync(fd)
        #else
        fsync(fd)
        #endif
    }

    /// Starts writing back, and waits for, every dirty page of the filesystem holding `fd`, with
    /// one cache flush of the device. Only a way to make the `fdatasync`s that follow cheap: its
    /// result is not a durability answer (kernels before 5.8 report no write-back error here).
    /// Returns false where there is no such call (not Linux).
    package static func syncFilesystem(_ fd: Int32) -> Bool {
        guard let call = syncfsCall else { return false }
        return call(fd) == 0
    }

    /// glibc's `syncfs`, which Swift's Glibc module does not declare (it is a GNU extension).
    private static let syncfsCall: (@convention(c) (Int32) -> Int32)? = {
        #if os(Linux)
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syncfs") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self)
        #else
        return nil
        #endif
    }()

    /// Waits up to `milliseconds` for one of `fds` to be readable.
    package static func pollReadable(_ fds: [Int32], milliseconds: Int32) -> Int32 {
        var ps = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        #if canImport(Glibc)
        return Glibc.poll(&ps, nfds_t(ps.count), milliseconds)
        #else
        return Darwin.poll(&ps, nfds_t(ps.count), milliseconds)
        #endif
    }
}
