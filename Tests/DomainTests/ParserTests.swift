import Domain
import Foundation
import Testing
@testable import EventLog

@Suite struct ParserTests {
    let id = "5a3c0e4e-9b7d-4f0a-8c2e-1d6f3b9a7e21"

    @Test func parsesTheDocumentedShape() throws {
        let m = try MutationParser.parse(#"{"entity":"item","op":"create","id":"\#(id)","fields":{"title":"Buy milk","parent_id":null}}"#)
        #expect(m.entity == .item && m.op == .create && m.entityID == UUID(uuidString: id))
        #expect(m.fields == [Field("parent_id", .null), Field("title", .text("Buy milk"))])
        #expect(m.eventID == nil)
    }

    /// Fields come out in name order whatever order the line names them in (most lines are in
    /// order already, and are then only checked), with each value kept with its name.
    @Test func fieldsComeOutInNameOrderFromAnyOrder() throws {
        let names = ["zeta", "alpha", "mid", "x_1", "x1", "yy", "a", "ab", "b"]
        var rng = SplitMix64(seed: 7)
        for round in 0..<200 {
            let count = Int(rng.next() % UInt64(names.count + 1))
            var chosen = Array(names.shuffled(using: &rng).prefix(count))
            if round % 3 == 0 { chosen.sort { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) } }
            let body = chosen.enumerated().map { k, n in "\"\(n)\":\(k)" }.joined(separator: ",")
            let m = try MutationParser.parse(#"{"entity":"item","op":"update","id":"\#(id)","fields":{\#(body)}}"#)
            let expected = chosen.enumerated().map { k, n in Field(n, .integer(Int64(k))) }.sorted(by: Field.inNameOrder)
            #expect(m.fields == expected, "from \(chosen)")
            #expect(Field.areInNameOrder(m.fields))
            #expect(Field.areInNameOrder(chosen.map { Field($0, .null) }) == (chosen.map { Field($0, .null) } == chosen.map { Field($0, .null) }.sorted(by: Field.inNameOrder)))
        }
    }

    @Test func parsesEveryValueKindAndEscape() throws {
        let line = #"{ "op" : "update", "entity":"item", "id":"\#(id)", "event_id":"\#(id)", "actor":"ann", "base": 42, "fields":{"notes":"a\"b\\c\/d\n\u00e9\ud83d\ude80","sort_order":-1.5e2,"custom":12,"flag":true,"other":false} }"#
        let m = try MutationParser.parse(line)
        #expect(m.eventID == UUID(uuidString: id))
        #expect(m.actor == "ann")
        #expect(m.base == HLC(rawValue: 42))
        #expect(m.fields.first { $0.name == "notes" }?.value == .text("a\"b\\c/d\né🚀"))
        #expect(m.fields.first { $0.name == "sort_order" }?.value == .real(-150))
        #expect(m.fields.first { $0.name == "custom" }?.value == .integer(12))
        #expect(m.fields.first { $0.name == "flag" }?.value == .boolean(true))
    }

    /// Swift's `uuidString` is uppercase: UUID fields are stored lowercase, so `items --under`
    /// and every join find them (issue 11 §5).
    @Test func uuidFieldsAreLowercasedOnTheWayIn() throws {
        let upper = id.uppercased()
        let m = try MutationParser.parse(#"{"entity":"item","op":"create","id":"\#(upper)","fields":{"parent_id":"\#(upper)","title":"\#(upper)"}}"#)
        #expect(m.fields.first { $0.name == "parent_id" }?.value == .text(id))
        #expect(m.fields.first { $0.name == "title" }?.value == .text(upper), "text fields keep their case")
        var built = Mutation(entity: .timeEntry, op: .create, entityID: UUID(), fields: [Field("item_id", .text(upper))])
        FieldRules.normalize(&built)
        #expect(built.fields[0].value == .text(id))
    }

    /// An item_tag is its pair: an event naming another pair for it, or half a pair, is refused.
    @Test func anItemTagsPairCannotChange() throws {
        let tag = "0b331645-445b-4d27-bf6c-67e81909778a", other = "7d7d1c8e-23c5-4f55-9a57-3b1f0b0c9d11"
        let pairID = FieldRules.itemTagID(item: UUID(uuidString: id)!, tag: UUID(uuidString: tag)!).lowercasedString
        #expect(throws: InputError.self) {
            try MutationParser.parse(#"{"entity":"item_tag","op":"update","id":"\#(pairID)","fields":{"item_id":"\#(id)","tag_id":"\#(other)"}}"#)
        }
        #expect(throws: InputError.self) {
            try MutationParser.parse(#"{"entity":"item_tag","op":"update","id":"\#(pairID)","fields":{"tag_id":"\#(other)"}}"#)
        }
        // Naming its own pair is fine, in any case.
        let same = try MutationParser.parse(#"{"entity":"item_tag","op":"delete","id":"\#(pairID)","fields":{"item_id":"\#(id.uppercased())","tag_id":"\#(tag)"}}"#)
        #expect(same.entityID.lowercasedString == pairID)
        let built = Mutation(entity: .itemTag, op: .update, entityID: UUID(uuidString: pairID)!,
                             fields: [Field("item_id", .text(id)), Field("tag_id", .text(other))])
        #expect(throws: InputError.self) { try FieldRules.validate(built, position: 1) }
    }

    @Test func itemTagIDComesFromThePair() throws {
        let tag = "0b331645-445b-4d27-bf6c-67e81909778a"
        let a = try MutationParser.parse(#"{"entity":"item_tag","op":"create","fields":{"item_id":"\#(id)","tag_id":"\#(tag)"}}"#)
        let b = try MutationParser.parse(#"{"entity":"item_tag","op":"delete","fields":{"tag_id":"\#(tag)","item_id":"\#(id)"}}"#)
        #expect(a.entityID == b.entityID)
        #expect(a.entityID == FieldRules.itemTagID(item: UUID(uuidString: id)!, tag: UUID(uuidString: tag)!))
    }

    /// The ids are part of the format: pinned to values made by another implementation of RFC 9562
    /// version 5 (Python's `uuid.uuid5`), whatever case the pair is spelled in.
    @Test func itemTagAndLegacyIDsAreStandardUUIDv5s() {
        let item = "0a6f3c1e-5b2d-4e8f-9a7c-1d2e3f4a5b6c", tag = "f1e2d3c4-b5a6-4978-8a9b-0c1d2e3f4a5b"
        #expect(FieldRules.itemTagID(item: UUID(uuidString: item)!, tag: UUID(uuidString: tag)!).lowercasedString == "433ba525-7219-5617-a191-7070b9970ea9")
        #expect(FieldRules.pairID([Field("tag_id", .text(tag.uppercased())), Field("item_id", .text(item))])?.lowercasedString == "433ba525-7219-5617-a191-7070b9970ea9")
        #expect(FieldRules.pairID([Field("item_id", .text(item)), Field("tag_id", .text("not a uuid"))]) == nil)
        #expect(UUIDv5.make(namespace: UUID(uuidString: "3c0a5f6e-8d1b-4b7a-9e2c-6f4d8a1b2c3e")!, name: Array("items:42".utf8)).lowercasedString
                == "0866fa82-824f-520e-b30e-c73d4f0362dd")
    }

    /// Each bad line is refused with its line number, the column and field where it can say.
    @Test(arguments: [
        ("not json", "expected '{'"),
        (#"{"entity":"gadget","op":"create","id":"ID"}"#, "unknown entity \"gadget\""),
        (#"{"entity":"item","op":"explode","id":"ID"}"#, "unknown op \"explode\""),
        (#"{"entity":"item","op":"create","id":"not-a-uuid"}"#, "not a UUID"),
        (#"{"entity":"item","op":"create","id":"ID","fields":{"title":5}}"#, "expected text, got integer 5"),
        (#"{"entity":"item","op":"create","id":"ID","fields":{"parent_id":"nope"}}"#, "expected a UUID string"),
        (#"{"entity":"item","op":"create","id":"ID","fields":{"due_at":"tomorrow"}}"#, "ISO 8601 timestamp"),
        (#"{"entity":"item","op":"create","id":"ID","fields":{"title":{"a":1}}}"#, "wrong value type"),
        (#"{"entity":"item","op":"create","id":"ID","fields":{"title":"x","title":"y"}}"#, "field appears twice"),
        (#"{"entity":"item","op":"create","id":"ID","fields":{"Bad Name":1}}"#, "field name"),
        (#"{"entity":"item","op":"create","id":"ID","colour":"red"}"#, "unknown key \"colour\""),
        // Keys one letter from a known one, of its length and first letter: still unknown.
        (#"{"entitz":"item","op":"create","id":"ID"}"#, "unknown key \"entitz\""),
        (#"{"entity":"item","ox":"create","id":"ID"}"#, "unknown key \"ox\""),
        (#"{"entity":"item","op":"create","iD":"ID"}"#, "unknown key \"iD\""),
        (#"{"entity":"item","op":"create","id":"ID","fieldz":{}}"#, "unknown key \"fieldz\""),
        (#"{"entity":"item","op":"create","id":"ID","event_iD":null}"#, "unknown key \"event_iD\""),
        (#"{"entity":"item","op":"create","id":"ID","basE":null}"#, "unknown key \"basE\""),
        (#"{"entity":"item","op":"create","id":"ID","actoR":"a"}"#, "unknown key \"actoR\""),
        (#"{"entity":"item","op":"create","id":"ID","":1}"#, "unknown key \"\""),
        (#"{"entity":"item","op":"create"}"#, "missing key \"id\""),
        (#"{"op":"create","id":"ID"}"#, "missing key \"entity\""),
        (#"{"entity":"item","op":"create","id":"ID"} trailing"#, "unexpected text"),
        (#"{"entity":"item","op":"create","id":"ID","fields":{"n":99999999999999999999}}"#, "out of the 64-bit range"),
        (#"{"entity":"item","op":"create","id":"ID","fields":{"n":01}}"#, "leading zero"),
        (#"{"entity":"item","op":"create","id":"ID","fields":{"n":"\x"}}"#, "invalid escape"),
        (#"{"entity":"item_tag","op":"create","fields":{"item_id":"ID"}}"#, "names its pair"),
        (#"{"entity":"item","op":"create","id":"ID","fields":{"title":"unterminated}}"#, "not closed"),
    ])
    func refusesBadLines(_ line: String, _ expected: String) {
        let text = line.replacingOccurrences(of: "ID", with: id)
        do {
            _ = try MutationParser.parse(text, lineNumber: 17)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.line == 17)
            #expect(error.description.contains(expected), "\(error.description)")
        }
    }

    /// Every key, escaped or not, reads as itself.
    @Test func readsEveryKeyHoweverSpelledInJSON() throws {
        let m = try MutationParser.parse(#"{"\u0065ntity":"item","op":"update","id":"\#(id)","fields":{"title":"t"},"event_id":"\#(id)","base":7,"act\u006fr":"ann"}"#)
        #expect(m.entity == .item && m.op == .update && m.entityID.uuidString.lowercased() == id && m.eventID == m.entityID && m.base == HLC(rawValue: 7) && m.actor == "ann")
    }

    /// A field name reads as itself however it is spelled: a known one escaped is that known
    /// field (its code kept, its rule applied, a repeat refused); an unknown one is kept by name.
    @Test func readsEveryFieldNameHoweverSpelledInJSON() throws {
        let m = try MutationParser.parse(#"{"entity":"item","op":"update","id":"\#(id)","fields":{"ti\u0074le":"t","parent\u005fid":"\#(id.uppercased())","my_own":1}}"#)
        #expect(m.fields == [Field("my_own", .integer(1)), Field("parent_id", .text(id)), Field("title", .text("t"))])
        #expect(m.fields.map(\.knownCode) == [0, UInt8(FieldCodes.code("parent_id")), UInt8(FieldCodes.code("title"))])
        for line in [#"{"entity":"item","op":"update","id":"\#(id)","fields":{"title":"a","ti\u0074le":"b"}}"#,
                     #"{"entity":"item","op":"update","id":"\#(id)","fields":{"mine":"a","min\u0065":"b"}}"#] {
            #expect(throws: InputError.self) { try MutationParser.parse(line) }
        }
        let wrongKind = Result { try MutationParser.parse(#"{"entity":"item","op":"update","id":"\#(id)","fields":{"sort_ord\u0065r":"x"}}"#) }
        guard case .failure(let e as InputError) = wrongKind else { Issue.record("a text sort_order was taken in"); return }
        #expect(e.field == "sort_order" && e.message.contains("expected a number"))
    }

    @Test func refusesOversizedText() {
        let big = String(repeating: "a", count: FieldRules.textBytesMax + 1)
        #expect(throws: InputError.self) {
            try MutationParser.parse(#"{"entity":"item","op":"create","id":"\#(id)","fields":{"notes":"\#(big)"}}"#)
        }
    }

    /// An event's texts together are bounded (`FieldRules.eventBytesMax`), so that its record
    /// fits the 1 MiB an event may take in the log: four texts of the most a text may hold pass
    /// it, refused by the parser, naming the field that crosses the bound, and by the check of
    /// built mutations; an event of exactly the bound is taken.
    @Test func refusesAnEventWhoseTextsTogetherPassTheBound() throws {
        let big = String(repeating: "a", count: FieldRules.textBytesMax)
        let four = (0..<4).map { #""n\#($0)":"\#(big)""# }.joined(separator: ",")
        let refused = Result { try MutationParser.parse(#"{"entity":"item","op":"create","id":"\#(id)","fields":{\#(four)}}"#) }
        guard case .failure(let e as InputError) = refused else { Issue.record("four texts of 256 KiB were taken in"); return }
        #expect(e.field == "n3" && e.message.contains("more than the \(FieldRules.eventBytesMax)"))
        let built = Mutation(entity: .item, op: .create, entityID: UUID(), fields: (0..<4).map { Field("n\($0)", .text(big)) })
        #expect(throws: InputError.self) { try FieldRules.validate(built, position: 3) }
        // At the bound, taken; a byte past it, refused (the log takes the largest such event:
        // `RecordSizeTests`).
        var fits = Mutation(entity: .item, op: .create, entityID: UUID(), fields: (0..<4).map { Field("n\($0)", .text(big)) })
        let under = FieldRules.eventBytesMax - FieldRules.eventBytes(fits)
        fits.fields[3] = Field("n3", .text(String(repeating: "a", count: FieldRules.textBytesMax + under)))
        #expect(FieldRules.eventBytes(fits) == FieldRules.eventBytesMax)
        try FieldRules.validate(fits, position: 1)
        fits.actor = "u"
        #expect(throws: InputError.self) { try FieldRules.validate(fits, position: 1) }
    }

    /// Text read back from SQLite ends at a NUL, so a NUL would silently cut every later read:
    /// refused, naming the field and the byte, by the parser and by the check of built mutations.
    @Test func refusesTextWithANul() throws {
        let refused = Result { try MutationParser.parse(#"{"entity":"item","op":"create","id":"\#(id)","fields":{"title":"before\u0000after"}}"#) }
        guard case .failure(let e as InputError) = refused else {
            Issue.record("a NUL was taken in")
            return
        }
        #expect(e.field == "title" && e.message.contains("NUL") && e.message.contains("byte 6"))
        let built = Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("notes", .text("a\u{0}"))])
        #expect(throws: InputError.self) { try FieldRules.validate(built, position: 1) }
        // Other control characters, escaped, are text like any other.
        _ = try MutationParser.parse(#"{"entity":"item","op":"create","id":"\#(id)","fields":{"title":"tab\tbell\u0007"}}"#)
    }

    /// Strings are scanned eight bytes at a time past bytes that need no look: a closing quote,
    /// an escape or a raw control byte at any position of a word (and at the line's last bytes,
    /// where no whole word is left) is found where the byte-by-byte reading finds it.
    @Test func stringsScannedByWordsEndAndFailWhereTheirBytesSay() throws {
        let prefix = #"{"entity":"item","op":"create","id":"\#(id)","fields":{"title":""#
        for length in 0..<26 {
            for at in 0..<max(1, length) {
                var title = Array(repeating: UInt8(ascii: "a"), count: length)
                // Bytes the scan passes: space, DEL, '~', '!'.
                if length > 0 { title[at] = [0x20, 0x7F, 0x7E, 0x21][at % 4] }
                let plain = try MutationParser.parse(prefix + String(decoding: title, as: UTF8.self) + #""}}"#)
                #expect(plain.fields.first?.value == .text(String(decoding: title, as: UTF8.self)))
                // Characters whose UTF-8 bytes have the high bit set over the low bits of '"',
                // '\\' or a control byte (0xA2, 0x9C, 0x80, 0x9F), at every offset of a word.
                for c in ["é", "¢", "Ü", "\u{80}", "\u{9F}", "\u{5C22}"] {
                    let text = String(repeating: "a", count: at) + c + String(repeating: "b", count: length)
                    let accented = try MutationParser.parse(prefix + text + #""}}"#)
                    #expect(accented.fields.first?.value == .text(text))
                }
                // An escape at `at`.
                let escaped = try MutationParser.parse(prefix + String(repeating: "a", count: at) + #"\""# + String(repeating: "b", count: length) + #""}}"#)
                #expect(escaped.fields.first?.value == .text(String(repeating: "a", count: at) + "\"" + String(repeating: "b", count: length)))
                // A raw control byte (tab, 0x1F) at `at`: refused at its column.
                for control: UInt8 in [0x09, 0x1F, 0x01] {
                    var bytes = Array(prefix.utf8) + Array(repeating: UInt8(ascii: "a"), count: at) + [control] + Array(repeating: UInt8(ascii: "b"), count: length) + Array(#""}}"#.utf8)
                    let result = bytes.withUnsafeMutableBytes { p in Result { try MutationParser.parse(UnsafeRawBufferPointer(p), lineNumber: 1) } }
                    guard case .failure(let e as InputError) = result else {
                        Issue.record("a raw control byte \(control) at \(at) was taken in")
                        continue
                    }
                    #expect(e.message.contains("control character") && e.column == prefix.utf8.count + at + 1)
                    bytes.removeAll()
                }
                // A string that does not close: the line ends inside it, at any length.
                #expect(throws: InputError.self) { try MutationParser.parse(prefix + String(repeating: "a", count: length)) }
            }
        }
    }

    @Test func refusesInvalidUTF8() {
        var bytes = Array(#"{"entity":"item","op":"create","id":"\#(id)","fields":{"title":"ab"}}"#.utf8)
        let at = bytes.firstIndex(of: UInt8(ascii: "b"))!
        bytes[at] = 0xC3  // a lead byte with no continuation
        _ = bytes.withUnsafeBytes { p in
            #expect(throws: InputError.self) { try MutationParser.parse(p, lineNumber: 1) }
        }
    }

    @Test func sampleWorkloadIsDeterministicAndValid() throws {
        let a = Array(SampleWorkload(seed: 11, count: 3000))
        let b = Array(SampleWorkload(seed: 11, count: 3000))
        #expect(a == b)
        #expect(a != Array(SampleWorkload(seed: 12, count: 3000)))
        var kinds: [String: Int] = [:]
        for (i, line) in a.enumerated() {
            let m = try MutationParser.parse(line, lineNumber: i + 1)
            kinds["\(m.entity.name).\(m.op.name)", default: 0] += 1
        }
        #expect(kinds["item.update", default: 0] > a.count / 2)
        for k in ["item.create", "tag.create", "item_tag.create", "time_entry.create", "item.delete", "saved_search.create"] {
            #expect(kinds[k, default: 0] > 0, "\(k)")
        }
    }
}
