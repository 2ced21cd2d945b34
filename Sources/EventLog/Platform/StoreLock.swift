import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The store's single-writer lock: an exclusive `flock` on `<store>/LOCK`, holding the owner's pid.
/// The kernel releases it when the process dies, so a killed writer never leaves a stale lock.
final class StoreLock: @unchecked Sendable {
    let path: String
    private var fd: Int32

    init(storePath: String) throws {
        let path = StoreLayout(root: storePath).lock
        // The descriptor becomes the object's only once the lock is held: a refused lock closes
        // it here and throws before `self` is whole, so `deinit` never sees it. (Closing it
        // twice could close a descriptor another thread opened in between.)
        let fd = try FileIO.open(path, O_RDWR | O_CREAT, op: "lock")
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let e = errno
            var holder = "another process"
            if let bytes = try? FileIO.readFile(path, op: "lock"),
               let pid = Int(String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) {
                holder = "process \(pid)"
            }
            FileIO.close(fd)
            if e == EWOULDBLOCK {
                throw LogError(.locked, "lock", "the store is open for writing by \(holder)", file: path,
                               hint: "one process writes at a time; wait for it to finish or stop it")
            }
            throw LogError(.io, "lock", "cannot lock the store", file: path, errno: e)
        }
        self.path = path
        self.fd = fd
        // The holder's pid, for the message a second writer gets: a hint, not the lock. Written
        // over the file's first bytes in place (a fixed width, no truncation first), so a lock
        // taken on a full disk reuses the block the file already has; when even that cannot be
        // written (a new file on a full disk), the lock is held all the same.
        Self.writeHolder(fd, "\(getpid())")
    }

    /// The pid field's width: the largest pid fits, padded with spaces.
    static let holderBytes = 16

    private static func writeHolder(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8.prefix(holderBytes - 1))
        bytes += [UInt8](repeating: UInt8(ascii: " "), count: holderBytes - 1 - bytes.count) + [0x0A]
        _ = bytes.withUnsafeBytes { p in Sys.pwrite(fd, p.baseAddress, p.count, 0) }
    }

    func release() {
        guard fd >= 0 else { return }
        Self.writeHolder(fd, "")
        flock(fd, LOCK_UN)
        FileIO.close(fd)
        fd = -1
    }

    deinit { release() }
}
