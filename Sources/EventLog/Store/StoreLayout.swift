/// The one owner of a store directory's names (docs/FORMAT.md, "Store layout"): every file and
/// folder a store may hold, at the top level and per origin, is named here and nowhere else.
///
/// `StoreLayoutTests` checks the layout in docs/FORMAT.md against `Entry.allCases`, and that a store
/// taken through init, append, sync, import, verify, snapshot and the audit pages holds nothing this
/// type does not name.
public struct StoreLayout: Sendable, Hashable {
    /// The store's directory.
    public let root: String

    public init(root: String) { self.root = root }

    /// What a store's directory may hold at its top level.
    public enum Entry: String, CaseIterable, Sendable {
        /// `{"format_version":2,"replica_id":"<uuid>"}` (1 for a store holding no signed frame, 3 once it holds a share's), written atomically at init.
        case storeFile = "store.json"
        /// This replica's Ed25519 signing key (mode 0600, never shipped); only in a store whose
        /// replica id derives from its key (docs/FORMAT.md, "Signed frames").
        case signingKey = "replica.key"
        /// `flock(2)`ed by the one writing process; its first 16 bytes hold the holder's pid.
        case lock = "LOCK"
        /// The index of writer-supplied event ids (derived).
        case eventIDs = "eventids.sqlite"
        /// One folder per origin: segments, their indexes, FLOOR and DURABLE.
        case log = "log"
        /// The projection (docs/PROJECTION.md).
        case projection = "projection.sqlite"
        /// A projection being rebuilt beside the live one; renamed over it when done.
        case projectionRebuild = "projection.sqlite.rebuild"
        /// Per-peer state: cursor, last sync, last error (device-local).
        case peers = "peers.sqlite"
        /// The snapshot a bootstrapped or compacted store's logs start after.
        case snapshot = "snapshot.sqlite"
        /// A snapshot being received in a bootstrap, before its checks.
        case snapshotIncoming = "snapshot.incoming"
        /// Which user owns which origin, on a store served to scoped users (docs/SECURITY.md).
        case originOwners = "origin_owners.sqlite"
        /// The audit pages' index (derived; docs/INSPECT.md).
        case audit = "audit.sqlite"
        /// The outcome of the last `verify --deep`.
        case lastVerify = "last-verify.json"
        /// Backups and reports of `import-legacy` (docs/IMPORT.md); never shipped.
        case imports = "imports"
        /// The content keys of the shares this replica belongs to, `<share>.keys` (mode 0600,
        /// never shipped), and `<share>.deleted` for a share whose deletion it synced (docs/SHARING.md).
        case shares = "shares"

        /// True for the SQLite files, which may have `-wal`, `-shm` and `-journal` files beside them.
        public var isSQLite: Bool { rawValue.hasSuffix(".sqlite") || self == .projectionRebuild || self == .snapshotIncoming }
    }

    /// The full path of `entry`.
    public func path(_ entry: Entry) -> String { root + "/" + entry.rawValue }

    public var storeFile: String { path(.storeFile) }
    public var signingKey: String { path(.signingKey) }
    public var lock: String { path(.lock) }
    public var eventIDs: String { path(.eventIDs) }
    public var log: String { path(.log) }
    public var projection: String { path(.projection) }
    public var projectionRebuild: String { path(.projectionRebuild) }
    public var peers: String { path(.peers) }
    public var snapshot: String { path(.snapshot) }
    public var snapshotIncoming: String { path(.snapshotIncoming) }
    public var originOwners: String { path(.originOwners) }
    public var audit: String { path(.audit) }
    public var lastVerify: String { path(.lastVerify) }
    public var imports: String { path(.imports) }
    public var shares: String { path(.shares) }

    /// `log/<origin>/`, the folder of one origin's log.
    public func originDirectory(_ origin: ReplicaID) -> String { log + "/" + origin.description }

    /// The floor of an origin's log: where it starts after a bootstrap or a compaction.
    public static let floorName = "FLOOR"
    /// The last seq of an origin known to be fsynced.
    public static let durableName = "DURABLE"
    /// The suffix of an interrupted atomic write, removed when a writer opens the store.
    public static let temporarySuffix = ".tmp"
    /// The files SQLite keeps beside a database.
    public static let sqliteSidecarSuffixes = ["-wal", "-shm", "-journal"]

    /// The entry `name` (a top-level name in the store's directory) stands for, counting an
    /// SQLite file's sidecars and interrupted atomic writes as their file's; nil for a name no
    /// build of this format writes.
    public static func entry(named name: String) -> Entry? {
        if let e = Entry(rawValue: name) { return e }
        for suffix in sqliteSidecarSuffixes + [temporarySuffix] where name.hasSuffix(suffix) {
            if let e = Entry(rawValue: String(name.dropLast(suffix.count))) { return e }
        }
        return nil
    }
}

extension Store {
    /// The names of this store's files.
    public var layout: StoreLayout { StoreLayout(root: path) }
}
