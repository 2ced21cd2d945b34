import Foundation

/// A Logbook store: a directory holding `store.json`, `log/<origin>/` segment files, the
/// event-id index and the writer lock. See docs/FORMAT.md, "Store layout".
///
/// Opening a `Store` reads `store.json` only. Any number of processes may read a store;
/// one at a time may write, through `openAppender()` or `LogWriter`.
/// `Store` is immutable and safe to share between threads.
public struct Store: Sendable {
    /// The store format this build writes: 2 once a store holds signed frames (a new store
    /// signs from its first append), so a build before signed logs, which would take a signed
    /// frame for damage and cut it off as a torn tail, refuses to open it instead.
    /// 3 once it holds a share's frames (flags a build before shares takes for damage).
    public static let formatVersion = 3
    /// Store formats this build reads: 1 (stores made before signed logs), 2 and 3.
    public static let readableFormats = 1...3
    /// The format of a store holding unsigned frames only, which every build reads.
    static let unsignedFormatVersion = 1
    /// The format of a store holding signed frames, and no share's.
    static let signedFormatVersion = 2
    /// The format of a store holding a share's frames (docs/SHARING.md).
    public static let sharedFormatVersion = 3
    public let path: String
    public let replicaID: ReplicaID
    /// The format version its `store.json` said when opened.
    public let format: Int

    /// Creates a new, empty store with a new signing key, and the folders above it that are
    /// missing: its replica id derives from the key, and every frame it appends is signed
    /// (docs/FORMAT.md, "Signed frames").
    /// - Throws: `LogError` when the directory already holds a store or cannot be written.
    public static func create(at path: String) throws -> Store {
        try create(at: path, signingKey: .generate())
    }

    /// Creates a new, empty store signing with `signingKey` (its replica id is the key's).
    public static func create(at path: String, signingKey: ReplicaKey) throws -> Store {
        try make(at: path, replicaID: signingKey.replicaID, key: signingKey)
    }

    /// Creates a new, empty store with the given replica id and no signing key: its frames are
    /// unsigned, as every store's were before signed logs (a fixed id for tests and tools).
    /// - Throws: `LogError` when the directory already holds a store, or `replicaID` has the
    ///   form of an id derived from a key (UUID version 8), whose frames must be signed.
    public static func create(at path: String, replicaID: ReplicaID) throws -> Store {
        guard !replicaID.isKeyDerived else {
            throw LogError(.invalidInput, "init", "replica id \(replicaID) has the form of an id derived from a signing key (UUID version 8), but no key was given", file: path,
                           hint: "let the store make its key and id (`evctl init` without an id)")
        }
        return try make(at: path, replicaID: replicaID, key: nil)
    }

    private static func make(at path: String, replicaID: ReplicaID, key: ReplicaKey?) throws -> Store {
        let op = "init"
        try FileIO.makeDirectories(path, op: op)
        let layout = StoreLayout(root: path)
        let meta = layout.storeFile
        if FileIO.exists(meta) {
            throw LogError(.alreadyExists, op, "a store already exists here", file: meta)
        }
        try FileIO.makeDirectory(layout.log, op: op)
        // The key first: store.json is what makes the folder a store.
        if let key { try FileIO.writeAtomically(key.fileContents(), to: layout.signingKey, op: op, restrictedMode: 0o600) }
        let format = key == nil ? unsignedFormatVersion : signedFormatVersion
        try FileIO.writeAtomically(metaFile(format: format, replicaID: replicaID), to: meta, op: op)
        // The store's own folder, made above or found (a crash may have left it before its
        // parent was synced): its entry reaches the disk before anything is counted on in it.
        try FileIO.fsyncDirectory(FileIO.parent(path), op: op)
        return Store(path: path, replicaID: replicaID, format: format)
    }

    static func metaFile(format: Int, replicaID: ReplicaID) -> [UInt8] {
        Array("{\"format_version\":\(format),\"replica_id\":\"\(replicaID)\"}\n".utf8)
    }

    /// Rewrites `store.json` with the current format version (atomically), before the first
    /// signed frame is written into a store of format 1. Hold the writer lock.
    func upgradeFormat(to version: Int, op: String) throws -> Store {
        guard format < version else { return self }
        try FileIO.writeAtomically(Self.metaFile(format: version, replicaID: replicaID), to: layout.storeFile, op: op)
        return Store(path: path, replicaID: replicaID, format: version)
    }

    /// This replica's signing key: nil for a store whose id is not derived from a key (made
    /// before signed logs, or with a fixed id).
    /// - Throws: `LogError` when the id derives from a key and the key file is missing, damaged,
    ///   or holds another replica's key.
    public func signingKey(op: String = "open") throws -> ReplicaKey? {
        guard replicaID.isKeyDerived else { return nil }
        let path = layout.signingKey
        guard FileIO.exists(path) else {
            throw LogError(.corrupt, op, "this replica's id derives from a signing key, and its key file is missing", file: path,
                           hint: "restore replica.key from a backup; without it this replica cannot sign appends (receiving and reading still work)")
        }
        let bytes = try ForeignFile.read(path, bytesMax: 4096, op: op)
        let key = try ReplicaKey.parse(bytes, path: path, op: op)
        guard key.replicaID == replicaID else {
            throw LogError(.corrupt, op, "the signing key file holds the key of replica \(key.replicaID), not this store's (\(replicaID))", file: path,
                           hint: "restore this store's own replica.key")
        }
        return key
    }

    /// Opens an existing store.
    /// - Throws: `LogError` when the directory is not a store or its format is unknown.
    public static func open(at path: String) throws -> Store {
        let op = "open"
        let meta = StoreLayout(root: path).storeFile
        guard FileIO.exists(meta) else {
            throw LogError(.notAStore, op, "no store here (store.json is missing)", file: path,
                           hint: "create one with `evctl init --store \(path)`")
        }
        // A store on a shared path is a peer's: its store.json is read as foreign bytes.
        let bytes = try ForeignFile.read(meta, bytesMax: Bounds.storeFileBytesMax, op: op)
        guard let obj = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
              let version = obj["format_version"] as? Int,
              let idText = obj["replica_id"] as? String else {
            throw LogError(.corrupt, op, "store.json is not valid (needs format_version and replica_id)", file: meta)
        }
        guard readableFormats.contains(version) else {
            throw LogError(.unsupportedFormat, op, "store format version \(version) is not supported (this build reads \(readableFormats.lowerBound) to \(readableFormats.upperBound))", file: meta)
        }
        guard let id = ReplicaID(idText) else {
            throw LogError(.corrupt, op, "replica_id \"\(idText)\" is not a UUID", file: meta)
        }
        return Store(path: path, replicaID: id, format: version)
    }

    /// Origins with a log directory in this store, sorted.
    public func origins() throws -> [ReplicaID] {
        let logDir = layout.log
        guard FileIO.exists(logDir) else { return [] }
        return try FileIO.listDirectory(logDir, op: "list origins").compactMap { name in
            guard let id = ReplicaID(name), id.description == name else { return nil }
            return id
        }.sorted()
    }

    func directory(_ origin: ReplicaID) -> OriginDirectory { OriginDirectory(storePath: path, origin: origin) }

    /// Records that `origin`'s log starts right after `tip` (a snapshot's anchor), for a store
    /// that holds nothing of that origin yet. Hold the writer lock while calling this.
    /// - Throws: `LogError` when the store already holds segments of `origin`.
    public func writeFloor(_ tip: LogTip, origin: ReplicaID) throws {
        let dir = directory(origin)
        guard try dir.segments(op: "write floor").isEmpty else {
            throw LogError(.invalidInput, "write floor", "origin \(origin) already has a log here", file: dir.path)
        }
        try dir.writeFloor(tip)
    }
}
