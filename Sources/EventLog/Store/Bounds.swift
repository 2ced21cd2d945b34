/// The one table of bounds on what a peer or a file controls: how much of it is read, walked,
/// kept or shown. Each is a default documented in docs/SECURITY.md ("Bounds"); code that loops
/// over something from outside takes its bound from here.
///
/// Decoding itself is bounded by the frame format (a record is at most 4 MiB, a frame at most
/// 64K events and 16 MiB): events are never refused for how many fields they carry, because
/// an event already in some replica's log can never change, and refusing it would strand every
/// later event of its origin. What such an event costs is bounded where it is kept and shown.
package enum Bounds {
    // MARK: Walks

    /// Levels a recursive walk follows: the path from an item to its root, an item's subtree,
    /// links followed from an item. A deeper chain is cut there (and said so), not followed.
    public static let walkDepthMax = 1_000

    // MARK: What the pages and the audit index keep of one event

    /// Fields of one event kept in the audit index and shown on a page; the rest are counted
    /// ("… N more fields").
    public static let fieldsShownMax = 64
    /// Characters of a field name kept and shown (longer names are cut with `…`).
    public static let fieldNameCharactersMax = 64
    /// Characters of a value kept and shown; the rest is cut with a note of the full length.
    public static let valueCharactersMax = 500

    // MARK: Per page

    /// Events on one page of `/ui/log`.
    public static let logEventsPerPage = 50
    /// Events on one page of an entity's history.
    public static let entityEventsPerPage = 100
    /// Conflicts, and anomalies, on one page.
    public static let conflictsPerPage = 100
    /// Search results on one page.
    public static let searchResultsPerPage = 100
    /// Items of a subtree, links and tags shown for one item.
    public static let subtreeShownMax = 200
    public static let linksShownMax = 200
    public static let tagsShownMax = 200
    /// Origins drawn on the overview's chart (those with the most events); the rest are counted.
    public static let chartSeriesMax = 32

    // MARK: Streams and files

    /// One line of an event stream (`/v1/watch`), in bytes.
    public static let streamLineBytesMax = 64 << 10
    /// One event of an event stream, all its lines together, in bytes.
    public static let streamEventBytesMax = 1 << 20
    /// A store's `store.json` (a peer's, read from a shared path).
    public static let storeFileBytesMax = 64 << 10
    /// A legacy file given to `import-legacy`.
    public static let legacyFileBytesMax = 4 << 30
    /// A bundle given to `evctl import`.
    public static let bundleFileBytesMax = 1 << 40
}
