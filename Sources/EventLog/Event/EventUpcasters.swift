import Foundation

/// Turns events written in an older event schema version into the current shape as they are
/// read, so the projection, history and watchers only ever see one shape and the log is never
/// rewritten (docs/FORMAT.md, "Evolution").
///
/// Each step takes an event of version N to version N + 1 and is frozen once shipped: it states
/// what version N + 1 changed, not what today's domain says, so a later evolution adds a step and
/// never edits one. An upcast event's `schemaVersion` is the current one.
public enum EventUpcasters {
    /// The steps, by the version they start from: `steps[0]` takes version 1 to version 2.
    static let steps: [@Sendable (inout Event) -> Void] = [v1toV2]

    /// Brings `e` from its written version up to `Event.currentSchemaVersion`. Events already in
    /// the current version, or in a newer one, are left as they are.
    @inline(__always)
    public static func upcast(_ e: inout Event) {
        while e.schemaVersion >= 1 && e.schemaVersion < Event.currentSchemaVersion {
            steps[Int(e.schemaVersion) - 1](&e)
            e.schemaVersion += 1
        }
    }

    // MARK: Version 1 to 2

    /// Version 2 gave seed 001's item fields a type. In version 1 they were undeclared, so an app
    /// could write any scalar (`"priority": "high"`); version 2 holds `priority` and `importance`
    /// as integers, `latitude` and `longitude` as numbers, `location_name` and `location_address`
    /// as text. A version-1 value converts when the conversion loses nothing:
    ///
    /// - priority and importance: an integer; a real with no fraction; a text of decimal digits;
    ///   the words none 0, low 1, medium or normal 2, high 3, urgent 4 (any case, trimmed); `!`,
    ///   `!!`, `!!!` as 1, 2, 3; true 1, false 0.
    /// - latitude and longitude: a number; a text that is a finite decimal number.
    /// - location_name and location_address: text; a number or boolean as its JSON text.
    ///
    /// Any other value moves to the field `NAME_v1` (for instance `priority_v1`), which no table
    /// has a column for: it stays in the event and in its history, and the typed field is unset.
    /// null stays null.
    static func v1toV2(_ e: inout Event) {
        guard e.entity == .item else { return }
        var moved = false
        for i in e.fields.indices {
            let f = e.fields[i]
            let converted: FieldValue?
            switch f.name {
            case "priority", "importance": converted = integerV2(f.value)
            case "latitude", "longitude": converted = numberV2(f.value)
            case "location_name", "location_address": converted = textV2(f.value)
            default: continue
            }
            if let converted {
                e.fields[i].value = converted
            } else {
                e.fields[i].name = f.name + "_v1"
                moved = true
            }
        }
        if moved { e.fields.withArray { Field.sortInNameOrder(&$0) } }
    }

    /// A priority or importance as version 2 holds it (an integer), from what version 1 let apps
    /// write; nil when it does not convert. `import-legacy` reads old apps' values the same way.
    public static func integerV2(_ v: FieldValue) -> FieldValue? {
        switch v {
        case .null, .integer: return v
        case .boolean(let b): return .integer(b ? 1 : 0)
        case .real(let d):
            guard d.isFinite, d.rounded() == d, let i = Int64(exactly: d) else { return nil }
            return .integer(i)
        case .text(let s):
            let t = s.trimmingCharacters(in: .whitespaces).lowercased()
            if let i = Int64(t), t.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 || $0 == 0x2D }) { return .integer(i) }
            let words: [String: Int64] = ["none": 0, "low": 1, "medium": 2, "normal": 2, "high": 3, "urgent": 4, "!": 1, "!!": 2, "!!!": 3]
            return words[t].map { .integer($0) }
        }
    }

    static func numberV2(_ v: FieldValue) -> FieldValue? {
        switch v {
        case .null, .integer, .real: return v
        case .boolean: return nil
        case .text(let s):
            let t = s.trimmingCharacters(in: .whitespaces)
            guard !t.isEmpty, t.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x2E || $0 == 0x2B }),
                  let d = Double(t), d.isFinite else { return nil }
            return .real(d)
        }
    }

    static func textV2(_ v: FieldValue) -> FieldValue? {
        switch v {
        case .null, .text: return v
        case .integer(let i): return .text(String(i))
        case .real(let d): return d.isFinite ? .text("\(d)") : nil
        case .boolean(let b): return .text(b ? "true" : "false")
        }
    }
}
