/// `s` made safe to show on a terminal or in a log line: control characters (C0, DEL, C1), line
/// and paragraph separators and the bidirectional overrides become `\u{…}` escapes, so data
/// (a title, a peer's error message) can never move the cursor, clear the screen or reorder
/// what is shown. With `limit`, at most that many characters are kept, then `…`.
public func printable(_ s: String, limit: Int? = nil) -> String {
    var out = ""
    var n = 0
    for u in s.unicodeScalars {
        if let limit, n >= limit {
            out += "…"
            break
        }
        n += 1
        if needsEscape(u) {
            out += "\\u{" + String(u.value, radix: 16) + "}"
        } else {
            out.unicodeScalars.append(u)
        }
    }
    return out
}

/// Whether `s` holds nothing `printable` would change (the common case costs one pass, no copy).
public func isPrintable(_ s: String) -> Bool { !s.unicodeScalars.contains(where: needsEscape) }

@inline(__always)
private func needsEscape(_ u: Unicode.Scalar) -> Bool {
    switch u.value {
    case 0x00...0x1F, 0x7F...0x9F: true
    case 0x2028, 0x2029: true                      // line and paragraph separators
    case 0x202A...0x202E, 0x2066...0x2069: true    // bidirectional embeddings, overrides, isolates
    case 0x200E, 0x200F, 0x061C: true              // directional marks
    default: false
    }
}
