/// What the client and the server agree on at the HTTP boundary (docs/PROTOCOL.md): the one place
/// both read the names from, so the client needs no server code to speak the protocol.
package enum Wire {
    /// The Content-Type of a page of frames, pulled or pushed.
    public static let pageContentType = "application/x-logbook-page"
    /// The header carrying a snapshot's SHA-256 (hex).
    public static let snapshotDigestHeader = "Logbook-Snapshot-SHA256"
    /// The header carrying the cursor a snapshot stands for.
    public static let snapshotCursorHeader = "Logbook-Snapshot-Cursor"
    /// The longest bearer token either side accepts, in bytes.
    public static let tokenLengthMax = 512

    /// True for a host name or address of this machine (`localhost`, `127.x.y.z`, `::1`): where a
    /// token may travel over plain http and a server may listen without tokens.
    public static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased()
        if h == "localhost" || h == "::1" || h == "[::1]" { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }
}
