import Foundation

/// The content keys of the shares this replica belongs to, by share and epoch: what its readers
/// open sealed frames with. Kept in the store's `shares` folder, one file per share
/// (`<share>.keys`, mode 0600, never shipped), written from the share's membership log
/// (`ShareDirectory.refresh`): a key is only ever learnt from a record its admin signed and
/// sealed to this replica. A deleted share's file is removed and replaced by `<share>.deleted`.
///
/// One keyring per store path per process (`of(_:)`), reloaded when the folder changes.
public final class ShareKeyring: @unchecked Sendable {
    private let lock = NSLock()
    private var keys: [ShareID: [UInt32: ContentKey]] = [:]
    private var deleted = Set<ShareID>()
    private var erasing = Set<ShareID>()

    init() {}

    /// Shares deleted or left whose rows the projection may still hold: it is rebuilt without
    /// them (`ProjectedStore`), then `ShareDirectory.markErased` records it.
    public var pendingErasure: Set<ShareID> {
        lock.lock()
        defer { lock.unlock() }
        return erasing
    }

    /// The key of `share` for `epoch`; nil when this replica does not hold it.
    public func key(_ share: ShareID, epoch: UInt32) -> ContentKey? {
        lock.lock()
        defer { lock.unlock() }
        return keys[share]?[epoch]
    }

    /// The newest epoch's key of `share` this replica holds.
    public func newest(_ share: ShareID) -> ContentKey? {
        lock.lock()
        defer { lock.unlock() }
        return keys[share]?.values.max { $0.epoch < $1.epoch }
    }

    /// Shares whose keys this replica holds.
    public var shares: [ShareID] {
        lock.lock()
        defer { lock.unlock() }
        return keys.keys.sorted()
    }

    /// Whether this replica synced `share`'s deletion or left it (its keys were destroyed).
    public func isDeleted(_ share: ShareID) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return deleted.contains(share)
    }

    // MARK: Files

    static let magic: [UInt8] = Array("LBSK".utf8)
    static let version: UInt8 = 1
    static let keysSuffix = ".keys"
    static let deletedSuffix = ".deleted"
    /// This replica left the share: its keys are destroyed and not learnt again.
    static let leftSuffix = ".left"
    /// The last line of a `.deleted` or `.left` marker once the projection was rebuilt without the share.
    static let erasedLine = "erased\n"
    /// A share has at most this many epochs (one per removal): bounds a key file.
    static let epochsMax = 1 << 16

    static func encode(_ keys: [ContentKey]) -> [UInt8] {
        var w = ByteWriter(capacity: 16 + keys.count * 36)
        w.raw(magic)
        w.u8(version)
        w.raw([0, 0, 0])
        w.u32(UInt32(keys.count))
        for k in keys.sorted(by: { $0.epoch < $1.epoch }) {
            w.u32(k.epoch)
            w.raw(k.bytes)
        }
        w.u32(CRC32C.checksum(w.bytes))
        return w.bytes
    }

    static func decode(_ b: [UInt8], path: String) throws -> [ContentKey] {
        func damaged(_ why: String) -> LogError {
            LogError(.corrupt, "read share keys", "a share's key file is damaged: \(why)", file: path,
                     hint: "remove it; the keys are learnt again from the share's membership log at the next sync")
        }
        guard b.count >= 16, Array(b[0..<4]) == magic else { throw damaged("bad magic or too short") }
        guard b[4] == version else { throw damaged("version \(b[4]) is not supported") }
        let n = Int(UInt32(b[8]) | UInt32(b[9]) << 8 | UInt32(b[10]) << 16 | UInt32(b[11]) << 24)
        guard n <= epochsMax, b.count == 16 + n * 36 else { throw damaged("\(b.count) bytes do not hold \(n) keys") }
        let crcAt = b.count - 4
        let crc = UInt32(b[crcAt]) | UInt32(b[crcAt + 1]) << 8 | UInt32(b[crcAt + 2]) << 16 | UInt32(b[crcAt + 3]) << 24
        guard CRC32C.checksum(Array(b[0..<crcAt])) == crc else { throw damaged("checksum mismatch") }
        var out: [ContentKey] = []
        for i in 0..<n {
            let at = 12 + i * 36
            let epoch = UInt32(b[at]) | UInt32(b[at + 1]) << 8 | UInt32(b[at + 2]) << 16 | UInt32(b[at + 3]) << 24
            guard let k = ContentKey(epoch: epoch, bytes: Array(b[at + 4..<at + 36])) else { throw damaged("key \(i + 1) has epoch 0") }
            out.append(k)
        }
        return out
    }

    /// Reads the folder; a damaged file is reported, not taken as keys.
    func load(_ dir: String) throws {
        var keys: [ShareID: [UInt32: ContentKey]] = [:]
        var deleted = Set<ShareID>()
        var erasing = Set<ShareID>()
        if FileIO.isDirectory(dir) {
            for name in try FileIO.listDirectory(dir, op: "read share keys") {
                let gone = name.hasSuffix(Self.deletedSuffix) ? Self.deletedSuffix : name.hasSuffix(Self.leftSuffix) ? Self.leftSuffix : nil
                if let gone, let id = ShareID(String(name.dropLast(gone.count))) {
                    deleted.insert(id)
                    let marker = (try? ForeignFile.read(dir + "/" + name, bytesMax: 64, op: "read share keys")) ?? []
                    if !String(decoding: marker, as: UTF8.self).hasSuffix(Self.erasedLine) { erasing.insert(id) }
                } else if name.hasSuffix(Self.keysSuffix), let id = ShareID(String(name.dropLast(Self.keysSuffix.count))) {
                    let path = dir + "/" + name
                    let list = try Self.decode(try ForeignFile.read(path, bytesMax: 16 + Self.epochsMax * 36, op: "read share keys"), path: path)
                    keys[id] = Dictionary(list.map { ($0.epoch, $0) }, uniquingKeysWith: { a, _ in a })
                }
            }
        }
        for d in deleted { keys[d] = nil }
        lock.lock()
        self.keys = keys
        self.deleted = deleted
        self.erasing = erasing
        lock.unlock()
    }

    // MARK: One per store

    private static let cacheLock = NSLock()
    nonisolated(unsafe) private static var cache: [String: (stamp: timespec?, ring: ShareKeyring)] = [:]

    private static func stamp(_ dir: String) -> timespec? {
        var st = stat()
        guard stat(dir, &st) == 0 else { return nil }
        return st.st_mtim
    }

    /// The keyring of `store`, read again when its `shares` folder changed since.
    /// - Throws: `LogError` when a key file is damaged.
    public static func of(_ store: Store) throws -> ShareKeyring {
        let dir = store.layout.shares
        let now = stamp(dir)
        cacheLock.lock()
        defer { cacheLock.unlock() }
        if let c = cache[store.path], c.stamp?.tv_sec == now?.tv_sec, c.stamp?.tv_nsec == now?.tv_nsec { return c.ring }
        let ring = ShareKeyring()
        if now != nil { try ring.load(dir) }
        cache[store.path] = (now, ring)
        return ring
    }

    /// Forgets the cached keyring of `store` (after this process wrote its folder).
    static func invalidate(_ store: Store) {
        cacheLock.lock()
        cache[store.path] = nil
        cacheLock.unlock()
    }
}
