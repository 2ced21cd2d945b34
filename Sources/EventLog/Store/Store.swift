import Foundation

/// A Logbook store: a directory holding `store.json`, `log/<origin>/` segment files, the
/// event-id index and the writer lock. See docs/FORMAT.md, "Store layout".
///
/// Opening a `Store` reads `store.json` only. Any number of processes may read a store;
/// one at a time may write, through `openAppender()` or `LogWriter`.
/// `Store` is immutable and safe to share between threads.
public struct Store: Sendable {
    public static let formatVersion = 1
    public let path: String
    public let replicaID: ReplicaID

    /// Creates a new, empty store with a random replica id, and the folders above it that are missing.
    /// - Throws: `LogError` when the directory already holds a store or cannot be written.
    public static func create(at path: String, replicaID: ReplicaID = .random()) throws -> Store {
        let op = "init"
        try FileIO.makeDirectories(path, op: op)
        let meta = StoreLayout(root: path).storeFile
        if FileIO.exists(meta) {
            throw LogError(.alreadyExists, op, "a store already exists here", file: meta)
        }
        try FileIO.makeDirectory(StoreLayout(root: path).log, op: op)
        let json = "{\"format_version\":\(formatVersion),\"replica_id\":\"\(replicaID)\"}\n"
        try FileIO.writeAtomically(Array(json.utf8), to: meta, op: op)
        return Store(path: path, replicaID: replicaID)
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
        guard version == formatVersion else {
            throw LogError(.unsupportedFormat, op, "store format version \(version) is not supported (this build reads \(formatVersion))", file: meta)
        }
        guard let id = ReplicaID(idText) else {
            throw LogError(.corrupt, op, "replica_id \"\(idText)\" is not a UUID", file: meta)
        }
        return Store(path: path, replicaID: id)
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
