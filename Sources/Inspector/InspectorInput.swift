import Foundation

/// Everything the inspector reads from a browser, as total functions of text: a form body, a
/// place in the log, a time, and the fields the audit index keeps. Each answers a value or nil /
/// an error, never traps (fuzzed: `FuzzInspectorInput`).
public enum InspectorInput {
    /// An `application/x-www-form-urlencoded` body: names to values (`+` is a space; a bad
    /// percent escape makes that part empty). The last of a repeated name wins.
    public static func form(_ text: String) -> [String: String] {
        var out: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ s: Substring) -> String { String(s).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "" }
            out[decode(kv[0])] = kv.count > 1 ? decode(kv[1]) : ""
        }
        return out
    }

    /// `before=` / `after=`: a place in merge order, `HLC-ORIGIN-SEQ`.
    public static func place(_ text: String) -> MergeKey? { MergeKey(text) }

    /// `since=` / `until=`: a date or an ISO 8601 time, as Unix milliseconds.
    public static func time(_ text: String, name: String) throws -> UInt64? { try InspectorSite.time(text, name: name) }

    /// The fields the audit index keeps for an event, as a page shows them.
    public static func indexedFields(_ text: String) -> [(name: String, value: String)] { AuditIndex.fields(text) }
}
