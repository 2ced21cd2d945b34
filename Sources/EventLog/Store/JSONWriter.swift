import Foundation

// The one JSON writer of the project: evctl's `--json` output, the server's answers and error
// bodies, and the audit index all write JSON through it, so one set of escaping rules holds.

/// Appends JSON to a byte buffer directly: no intermediate Strings for long listings.
package struct JSONBytes {
    package var bytes: [UInt8] = []

    package init() {}

    package mutating func raw(_ s: StaticString) {
        s.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    package mutating func raw(_ s: String) {
        var s = s
        s.withUTF8 { bytes.append(contentsOf: $0) }
    }

    package mutating func int<I: BinaryInteger>(_ v: I) { raw(String(v)) }

    /// A JSON string. Besides what JSON requires, DEL, the C1 controls, the line and paragraph
    /// separators and the bidirectional controls are written as `\u` escapes, so data piped
    /// from `--json` to a terminal cannot drive it.
    package mutating func string(_ s: String) {
        var s = s
        bytes.append(0x22)
        s.withUTF8 { u in
            var start = 0
            var i = 0
            while i < u.count {
                let c = u[i]
                if c >= 0x20 && c != 0x22 && c != 0x5C && c < 0x7F {
                    i += 1
                    continue
                }
                if c >= 0x80 {
                    // A multi-byte scalar: escaped only when `printable` would escape it.
                    let n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2
                    let end = min(u.count, i + n)
                    let scalar = String(decoding: UnsafeBufferPointer(rebasing: u[i..<end]), as: UTF8.self)
                    if isPrintable(scalar) {
                        i = end
                        continue
                    }
                    bytes.append(contentsOf: UnsafeBufferPointer(rebasing: u[start..<i]))
                    for v in scalar.unicodeScalars { bytes.append(contentsOf: Array(String(format: "\\u%04x", v.value).utf8)) }
                    i = end
                    start = i
                    continue
                }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: u[start..<i]))
                switch c {
                case 0x22: bytes.append(contentsOf: [0x5C, 0x22])
                case 0x5C: bytes.append(contentsOf: [0x5C, 0x5C])
                case 0x0A: bytes.append(contentsOf: [0x5C, 0x6E])
                case 0x0D: bytes.append(contentsOf: [0x5C, 0x72])
                case 0x09: bytes.append(contentsOf: [0x5C, 0x74])
                default: bytes.append(contentsOf: Array(String(format: "\\u%04x", c).utf8))
                }
                i += 1
                start = i
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: u[start...]))
        }
        bytes.append(0x22)
    }

    package mutating func value(_ v: FieldValue) {
        switch v {
        case .text(let t): string(t)
        default: raw(JSON.value(v))
        }
    }
}

/// Writes JSON text by hand: field order is stable and output is fast for long listings.
package enum JSON {
    package static func string(_ s: String) -> String {
        var j = JSONBytes()
        j.string(s)
        return String(decoding: j.bytes, as: UTF8.self)
    }

    package static func value(_ v: FieldValue) -> String {
        switch v {
        case .null: "null"
        case .boolean(let b): b ? "true" : "false"
        case .integer(let i): String(i)
        case .real(let d): d == d.rounded() && abs(d) < 1e15 ? String(format: "%.1f", d) : "\(d)"
        case .text(let s): string(s)
        }
    }

    package static func object(_ pairs: [(String, String)]) -> String {
        "{" + pairs.map { string($0.0) + ":" + $0.1 }.joined(separator: ",") + "}"
    }
}
