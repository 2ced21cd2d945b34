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
    /// Per share, who may write it: members (nil) and removed members (the clock of the
    /// record that removed them: their frames up to it are theirs, the ones after are not).
    private var writers: [ShareID: [ReplicaID: HLC?]] = [:]
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

    /// Whether `writer`'s frame of `share` whose last event is at `hlc` is read: the writer is
    /// a member, or was one and the frame comes before the record that removed it. A removed
    /// member keeps the old epochs' keys, and a rotation alone would not stop it writing.
    /// - Returns: nil when this replica does not know `writer` as a member (yet: the record
    ///   that added it may not have arrived), else whether the frame is read.
    public func mayWrite(_ share: ShareID, writer: ReplicaID, at hlc: HLC) -> Bool? {
        lock.lock()
        defer { lock.unlock() }
        guard let w = writers[share], let entry = w[writer] else { return nil }
        guard let removedAt = entry else { return true }
        return hlc < removedAt
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
    /// The share's membership changed in a way that may change which frames are read: the
    /// projection is rebuilt (`pendingErasure`), then this marker removed.
    static let rebuildSuffix = ".rebuild"
    /// The last line of a `.deleted` or `.left` marker once the projection was rebuilt without the share.
    static let erasedLine = "erased\n"
    /// A share has at most this many epochs (one per removal): bounds a key file.
    static let epochsMax = 1 << 16

    /// Members and removed members a key file holds at most.
    static let writersMax = 1 << 16

    static func encode(_ keys: [ContentKey], writers: [ReplicaID: HLC?]) -> [UInt8] {
        var w = ByteWriter(capacity: 20 + keys.count * 36 + writers.count * 24)
        w.raw(magic)
        w.u8(version)
        w.raw([0, 0, 0])
        w.u32(UInt32(keys.count))
        for k in keys.sorted(by: { $0.epoch < $1.epoch }) {
            w.u32(k.epoch)
            w.raw(k.bytes)
        }
        w.u32(UInt32(writers.count))
        for (id, removedAt) in writers.sorted(by: { $0.key < $1.key }) {
            w.uuid(id.rawValue)
            w.u64(removedAt?.rawValue ?? 0)
        }
        w.u32(CRC32C.checksum(w.bytes))
        return w.bytes
    }

    static func decode(_ b: [UInt8], path: String) throws -> (keys: [ContentKey], writers: [ReplicaID: HLC?]) {
        func damaged(_ why: String) -> LogError {
            LogError(.corrupt, "read share keys", "a share's key file is damaged: \(why)", file: path,
                     hint: "remove it; the keys are learnt again from the share's membership log when it next grows, or with `evctl share list --refresh`")
        }
        func u32(_ at: Int) -> UInt32 { UInt32(b[at]) | UInt32(b[at + 1]) << 8 | UInt32(b[at + 2]) << 16 | UInt32(b[at + 3]) << 24 }
        guard b.count >= 20, Array(b[0..<4]) == magic else { throw damaged("bad magic or too short") }
        guard b[4] == version else { throw damaged("version \(b[4]) is not supported") }
        let n = Int(u32(8))
        guard n <= epochsMax, b.count >= 20 + n * 36 else { throw damaged("\(b.count) bytes do not hold \(n) keys") }
        let m = Int(u32(12 + n * 36))
        guard m <= writersMax, b.count == 20 + n * 36 + m * 24 else { throw damaged("\(b.count) bytes do not hold \(n) keys and \(m) writers") }
        let crcAt = b.count - 4
        guard CRC32C.checksum(Array(b[0..<crcAt])) == u32(crcAt) else { throw damaged("checksum mismatch") }
        var keys: [ContentKey] = []
        for i in 0..<n {
            let at = 12 + i * 36
            guard let k = ContentKey(epoch: u32(at), bytes: Array(b[at + 4..<at + 36])) else { throw damaged("key \(i + 1) has epoch 0") }
            keys.append(k)
        }
        var writers: [ReplicaID: HLC?] = [:]
        for i in 0..<m {
            let at = 16 + n * 36 + i * 24
            let id = ReplicaID(rawValue: b.withUnsafeBytes { UUID(bytes: UnsafeRawBufferPointer(rebasing: $0[at..<at + 16])) })
            let removed = UInt64(u32(at + 16)) | UInt64(u32(at + 20)) << 32
            writers[id] = removed == 0 ? .some(nil) : .some(HLC(rawValue: removed))
        }
        return (keys, writers)
    }

    /// Reads the folder; a damaged file is reported, not taken as keys.
    func load(_ dir: String) throws {
        var keys: [ShareID: [UInt32: ContentKey]] = [:]
        var writers: [ShareID: [ReplicaID: HLC?]] = [:]
        var deleted = Set<ShareID>()
        var erasing = Set<ShareID>()
        if FileIO.isDirectory(dir) {
            for name in try FileIO.listDirectory(dir, op: "read share keys") {
                let gone = name.hasSuffix(Self.deletedSuffix) ? Self.deletedSuffix : name.hasSuffix(Self.leftSuffix) ? Self.leftSuffix : nil
                if name.hasSuffix(Self.rebuildSuffix), let id = ShareID(String(name.dropLast(Self.rebuildSuffix.count))) {
                    erasing.insert(id)
                } else if let gone, let id = ShareID(String(name.dropLast(gone.count))) {
                    deleted.insert(id)
                    let marker = (try? ForeignFile.read(dir + "/" + name, bytesMax: 64, op: "read share keys")) ?? []
                    if !String(decoding: marker, as: UTF8.self).hasSuffix(Self.erasedLine) { erasing.insert(id) }
                } else if name.hasSuffix(Self.keysSuffix), let id = ShareID(String(name.dropLast(Self.keysSuffix.count))) {
                    // A damaged file is that share's alone: the others' keys still read.
                    let path = dir + "/" + name
                    guard let bytes = try? ForeignFile.read(path, bytesMax: 20 + Self.epochsMax * 36 + Self.writersMax * 24, op: "read share keys"),
                          let file = try? Self.decode(bytes, path: path) else { continue }
                    keys[id] = Dictionary(file.keys.map { ($0.epoch, $0) }, uniquingKeysWith: { a, _ in a })
                    writers[id] = file.writers
                }
            }
        }
        for d in deleted { keys[d] = nil }
        lock.lock()
        self.keys = keys
        self.writers = writers
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
