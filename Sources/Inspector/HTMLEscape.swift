import Mustache

/// The one HTML escaper of the pages. It works on Unicode scalars (the UTF-8 bytes of the text),
/// never on `Character`s: a `<` or `"` that shares a grapheme cluster with its neighbour (U+0600
/// before it, a combining mark after it) is still a `<` or `"` to a browser's parser, and an
/// escaper that compares whole clusters lets it through raw. Every value a template shows, in an
/// element or an attribute, is escaped by this (`Templates.library` renders every template, and
/// every partial, with it). See docs/SECURITY.md, "Pages".
public enum HTMLEscape {
    /// `text` with `&`, `<`, `>`, `"` and `'` replaced by their character references, scalar by
    /// scalar; every other scalar is copied as it is.
    public static func escape(_ text: String) -> String {
        let utf8 = text.utf8
        // Most values hold none of the five bytes: hand them back without copying.
        guard utf8.contains(where: { needsEscape($0) }) else { return text }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count + 16)
        for b in utf8 {
            switch b {
            case UInt8(ascii: "&"): out.append(contentsOf: "&amp;".utf8)
            case UInt8(ascii: "<"): out.append(contentsOf: "&lt;".utf8)
            case UInt8(ascii: ">"): out.append(contentsOf: "&gt;".utf8)
            case UInt8(ascii: "\""): out.append(contentsOf: "&quot;".utf8)
            case UInt8(ascii: "'"): out.append(contentsOf: "&#39;".utf8)
            default: out.append(b)  // bytes of other scalars: ASCII bytes never occur inside a multi-byte scalar
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    @inline(__always) static func needsEscape(_ b: UInt8) -> Bool {
        b == UInt8(ascii: "&") || b == UInt8(ascii: "<") || b == UInt8(ascii: ">") || b == UInt8(ascii: "\"") || b == UInt8(ascii: "'")
    }

    /// The name under which `Templates` registers this escaper with the template library.
    static let contentTypeName = "LOGBOOK_HTML"

    /// The escaper as the template library's content type.
    struct ContentType: MustacheContentType {
        func escapeText(_ text: String) -> String { HTMLEscape.escape(text) }
    }
}
