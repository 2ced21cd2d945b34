import Domain
import Foundation
import TestSupport
import Testing
@testable import EventLog

@Suite struct CodecTests {
    static let values: [FieldValue] = [
        .null, .boolean(true), .boolean(false), .integer(0), .integer(-1), .integer(Int64.max), .integer(Int64.min),
        .real(0.5), .real(-0.0), .real(1e300), .real(-123.456), .text(""), .text("Buy milk"), .text("ünïcödé ✓ 🚀"),
        .text("5a3c0e4e-9b7d-4f0a-8c2e-1d6f3b9a7e21"), .text("5A3C0E4E-9B7D-4F0A-8C2E-1D6F3B9A7E21"),
        .text(String(repeating: "x", count: 70_000)),
    ]

    func roundTrip(_ events: [Event]) throws -> [Event] {
        let bytes = FrameEncoder().encode(events[...], continues: false, previousHash: .zero)
        return try bytes.withUnsafeBytes { p in
            let h = try FrameHeader.decode(p)
            try FrameDecoder.checkCRC(p, header: h)
            return try FrameDecoder().events(of: p, header: h)
        }
    }

    @Test func everyEntityOpAndValueRoundTrips() throws {
        var events: [Event] = []
        var seq: UInt64 = 1
        var hlc = HLC(wallMillis: 1_767_225_600_000, counter: 0)
        for entity in Entity.allCases {
            for op in Op.allCases {
                for (i, v) in Self.values.enumerated() {
                    let m = Mutation(entity: entity, op: op, entityID: UUID(),
                                     fields: [Field("title", v), Field("custom_\(i)", v)],
                                     eventID: i % 2 == 0 ? UUID() : nil,
                                     base: i % 3 == 0 ? HLC(rawValue: UInt64(i) * 1000) : nil,
                                     actor: i % 4 == 0 ? "user-\(i)" : nil)
                    events.append(Event(origin: fixedReplica, seq: Seq(seq), hlc: hlc, mutation: m))
                    seq += 1
                    hlc = HLC(rawValue: hlc.rawValue + UInt64(i) + 1)
                }
            }
        }
        // No fields, and the most fields allowed.
        let many = (0..<FieldRules.fieldsMax).map { Field("f\($0)", .integer(Int64($0))) }
        for fields in [[], many] {
            events.append(Event(origin: fixedReplica, seq: Seq(seq), hlc: hlc, mutation: Mutation(entity: .tag, op: .update, entityID: UUID(), fields: fields)))
            seq += 1
            hlc = HLC(rawValue: hlc.rawValue + 1)
        }
        for chunk in stride(from: 0, to: events.count, by: 100) {
            let part = Array(events[chunk..<min(chunk + 100, events.count)])
            let back = try roundTrip(part)
            #expect(back == part)
        }
    }

    /// An actor is absent, empty or a text, three different things (the record's actor flag):
    /// kept apart through setting, comparing, moving a mutation into an event and a round trip.
    @Test func anEmptyActorIsNotAnAbsentOne() throws {
        let id = UUID()
        var absent = Mutation(entity: .tag, op: .update, entityID: id)
        var empty = Mutation(entity: .tag, op: .update, entityID: id, actor: "")
        let named = Mutation(entity: .tag, op: .update, entityID: id, actor: "ana")
        #expect(absent.actor == nil && empty.actor == "" && named.actor == "ana")
        #expect(absent != empty && empty != named && absent != named)
        // Set to nil and back: equal to one made so.
        empty.actor = nil
        #expect(empty == absent)
        absent.actor = "ana"
        #expect(absent == named)
        absent.actor = ""
        #expect(absent == Mutation(entity: .tag, op: .update, entityID: id, actor: ""))
        let hlc = HLC(wallMillis: 1_767_225_600_000, counter: 0)
        let events = [nil, "", "ana"].enumerated().map { k, actor in
            Event(origin: fixedReplica, seq: Seq(UInt64(k + 1)), hlc: HLC(rawValue: hlc.rawValue + UInt64(k)),
                  mutation: Mutation(entity: .tag, op: .update, entityID: id, actor: actor))
        }
        #expect(events.map(\.actor) == [nil, "", "ana"])
        let back = try roundTrip(events)
        #expect(back == events)
        #expect(back.map(\.actor) == [nil, "", "ana"])
        var e = back[1]
        e.actor = nil
        #expect(e.actor == nil && e != back[1])
    }

    /// A record is written in place after a one-byte length that is fixed afterwards: at every
    /// body length around the varint's steps (1, 2 and 3 bytes), the record is the canonical varint
    /// of its body's length followed by the body, and records after it in the buffer are whole.
    @Test func recordLengthsAreCanonicalVarintsAtEveryStep() throws {
        func varint(_ n: Int) -> [UInt8] {
            var v = UInt64(n), out: [UInt8] = []
            while v >= 0x80 { out.append(UInt8(v & 0x7F) | 0x80); v >>= 7 }
            return out + [UInt8(v)]
        }
        let firstHLC = HLC(wallMillis: 1_767_225_600_000, counter: 0)
        for target in [100, 127, 128, 129, 200, 16_383, 16_384, 16_385, 70_000] {
            // Find the title length that makes the body exactly `target` bytes (or the nearest above).
            for pad in 0..<4 {
                var probe = ByteWriter()
                let short = Mutation(entity: .item, op: .update, entityID: UUID(), fields: [Field("title", .text(""))])
                EventCodec.encode(short, hlcDelta: 5, into: &probe)
                let bodyWithEmptyTitle = probe.count - 1
                let titleLength = max(0, target - bodyWithEmptyTitle - 2 + pad)
                let m = Mutation(entity: .item, op: .update, entityID: UUID(), fields: [Field("title", .text(String(repeating: "é", count: titleLength / 2) + String(repeating: "x", count: titleLength % 2)))])
                var out = ByteWriter()
                out.raw([0xAB])
                EventCodec.encode(m, hlcDelta: 5, into: &out)
                EventCodec.encode(short, hlcDelta: 7, into: &out)
                let bytes = out.bytes
                // The first record: its length prefix, then exactly that many bytes.
                let (events, prefixOK): ([Event], Bool) = try bytes.withUnsafeBytes { p in
                    var r = ByteReader(p, offset: 1)
                    let startOfFirst = r.offset
                    let length = try r.length("record length")
                    let prefix = Array(bytes[startOfFirst..<r.offset])
                    r.offset = startOfFirst
                    let a = try EventCodec.decode(&r, origin: fixedReplica, seq: Seq(1), firstHLC: firstHLC)
                    let b = try EventCodec.decode(&r, origin: fixedReplica, seq: Seq(2), firstHLC: firstHLC)
                    #expect(r.remaining == 0)
                    return ([a, b], prefix == varint(length) && startOfFirst + prefix.count + length + 1 + Int(bytes[startOfFirst + prefix.count + length]) == bytes.count)
                }
                #expect(prefixOK, "body of about \(target) bytes")
                #expect(events[0].fields == m.fields && events[1].fields == short.fields)
                #expect(bytes[0] == 0xAB)
            }
        }
    }

    /// Field codes are found through flat tables by (length, first letter): every known name is
    /// its own code, whatever its storage (literal, built, small or not), and anything else is 0.
    @Test func everyKnownFieldNameIsItsCodeAndNothingElseIs() {
        for (code, name) in EventCodec.knownFieldNames.enumerated() where code > 0 {
            #expect(EventCodec.knownCode(name) == code, "\(name)")
            #expect(EventCodec.knownCode(String(decoding: Array(name.utf8), as: UTF8.self)) == code, "\(name), built")
            // Near misses are 0, unless they are another known name ("note" and "notes").
            for near in [name.uppercased(), name + "s", String(name.dropLast()), String(name.dropLast()) + "\u{0}", "x" + name.dropFirst()] {
                #expect(EventCodec.knownCode(near) == EventCodec.knownFieldNames.lastIndex(of: near) ?? 0, "\(near)")
            }
        }
        for other in ["", "a", "#3", "zz", "title ", " title", "tītle", String(repeating: "t", count: 40), "original_occurrence_datf"] {
            #expect(EventCodec.knownCode(other) == 0, "\(other)")
        }
        #expect(EventCodec.knownCode("kind") != EventCodec.knownCode("name") && EventCodec.knownCode("note") == 25)
    }

    /// A name kept for a newer build's field code (`#40`) is written back as that code; any other
    /// name that starts with `#` (leading zeros, a sign, a known code's number, past 255) is
    /// written out as text, so every name reads back exactly as it was written.
    @Test func everyFieldNameReadsBackAsWritten() throws {
        let names = ["#40", "#255", "#040", "#+40", "#0", "#5", "#256", "#-1", "#", "#40 ", "#4O"]
        let m = Mutation(entity: .item, op: .update, entityID: UUID(), fields: names.map { Field($0, .integer(1)) })
        let e = Event(origin: fixedReplica, seq: Seq(1), hlc: HLC(wallMillis: 5, counter: 1), mutation: m)
        let frame = FrameEncoder().encode([e][...], continues: false, previousHash: .zero)
        let h = try frame.withUnsafeBytes { try FrameHeader.decode($0) }
        let read = try frame.withUnsafeBytes { try FrameDecoder().events(of: $0, header: h) }
        #expect(read.first?.fields.map(\.name) == m.fields.map(\.name))
        // "#40" is written as its one-byte code, "#040" as text: a zero code, its length, 4 bytes.
        func recordBytes(_ name: String) -> Int {
            var w = ByteWriter()
            EventCodec.encode(Mutation(entity: .item, op: .update, entityID: m.entityID, fields: [Field(name, .null)]), hlcDelta: 0, into: &w)
            return w.count
        }
        #expect(recordBytes("#040") - recordBytes("#40") == 5 && recordBytes("#40") == recordBytes("title"))
        #expect(EventCodec.unknownCode("#40") == 40 && EventCodec.unknownCode("#255") == 255)
        for other in names.dropFirst(2) { #expect(EventCodec.unknownCode(other) == 0, "\(other)") }
    }

    /// A field keeps its name's code (what encoding, checks and projections use instead of a
    /// lookup by name): set when it is made, from its name or from a code read back, and again
    /// when it is renamed.
    @Test func aFieldsCodeFollowsItsName() {
        for (code, name) in FieldCodes.names.enumerated().dropFirst() {
            #expect(Field(name, .null).knownCode == code, "\(name)")
            #expect(Field(knownCode: code, .null) == Field(name, .null), "\(name)")
        }
        var f = Field("title", .integer(1))
        f.name = "zz_custom"
        #expect(f.knownCode == 0 && f == Field("zz_custom", .integer(1)))
        f.name = "notes"
        #expect(f.knownCode == FieldCodes.code("notes") && f == Field("notes", .integer(1)))
        for other in ["", "#40", "Title", "title ", "titl", "titles"] { #expect(Field(other, .null).knownCode == 0, "\(other)") }
    }

    /// A known name written out as text (a zero code, then the name: no encoder of this build
    /// writes one so, another's may) reads back as the field written by code, and encodes by code.
    @Test func aKnownNameWrittenOutReadsBackAsTheFieldWrittenByCode() throws {
        let id = UUID()
        var w = ByteWriter()
        EventCodec.encode(Mutation(entity: .item, op: .update, entityID: id, fields: [Field("titlz", .text("a"))]), hlcDelta: 0, into: &w)
        var bytes = w.bytes
        let at = try #require(bytes.indices.first { Array(bytes[$0..<min($0 + 5, bytes.count)]) == Array("titlz".utf8) })
        bytes[at + 4] = UInt8(ascii: "e")
        let e = try bytes.withUnsafeBytes { p in
            var r = ByteReader(p)
            return try EventCodec.decode(&r, origin: fixedReplica, seq: Seq(1), firstHLC: HLC(wallMillis: 5, counter: 1))
        }
        #expect(e.fields == [Field("title", .text("a"))] && e.fields[0].knownCode == FieldCodes.code("title"))
        var again = ByteWriter(), byCode = ByteWriter()
        EventCodec.encode(e, firstHLC: e.hlc, into: &again)
        EventCodec.encode(Mutation(entity: .item, op: .update, entityID: id, fields: [Field("title", .text("a"))]), hlcDelta: 0, into: &byCode)
        #expect(again.bytes == byCode.bytes && again.count == bytes.count - 6)
    }

    /// A UUID read from bytes (loaded whole where its layout allows) is the UUID of those bytes
    /// in their order, at any offset (aligned or not), and a short read is refused.
    @Test func aUUIDReadsAsItsBytesAtAnyOffset() throws {
        // The layout the whole load relies on (else the reader takes `UUID(uuid:)`).
        #expect(UUID.loadsWhole)
        let bytes: [UInt8] = (0..<40).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
        for at in 0...(bytes.count - 16) {
            let u = try bytes.withUnsafeBytes { p in
                var r = ByteReader(p, offset: at)
                let u = try r.uuid()
                #expect(r.offset == at + 16)
                return u
            }
            let expected = UUID(uuid: (bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3], bytes[at + 4], bytes[at + 5],
                                       bytes[at + 6], bytes[at + 7], bytes[at + 8], bytes[at + 9], bytes[at + 10], bytes[at + 11],
                                       bytes[at + 12], bytes[at + 13], bytes[at + 14], bytes[at + 15]))
            #expect(u == expected)
            #expect(withUnsafeBytes(of: u.uuid) { Array($0) } == Array(bytes[at..<at + 16]))
        }
        bytes.withUnsafeBytes { p in
            var r = ByteReader(p, offset: bytes.count - 15)
            #expect(throws: ByteReaderError.self) { try r.uuid() }
        }
    }

    /// UUID text is written as Foundation writes it (lowercased), for every byte value at every
    /// place; read back whole; and read as a plain reading digit by digit would, whatever byte
    /// stands at whatever place (uppercase refused only when asked).
    @Test func uuidTextWritesAndReadsAsADigitByDigitReadingDoes() {
        var ids: [UUID] = [UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))]
        for v in 0...255 {
            for at in 0..<16 {
                var t: uuid_t = (0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC, 0xDE, 0xF0, 0x0F, 0xED, 0xCB, 0xA9, 0x87, 0x65, 0x43, 0x21)
                withUnsafeMutableBytes(of: &t) { $0[at] = UInt8(v) }
                ids.append(UUID(uuid: t))
            }
        }
        for _ in 0..<200 { ids.append(UUID()) }
        for u in ids {
            let text = UUIDText.format(u)
            #expect(text == u.uuidString.lowercased())
            #expect(withUnsafeBytes(of: u.uuid) { UUIDText.format(bytes: $0) } == text)
            var bytes: [UInt8] = []
            UUIDText.append(u, to: &bytes)
            #expect(bytes == Array(text.utf8))
            #expect(UUIDText.parse(text) == u)
            #expect(UUIDText.parse(u.uuidString) == u)
            #expect(Array(text.utf8).withUnsafeBytes { UUIDText.parse($0, lowercaseOnly: true) } == u)
            #expect(Array(u.uuidString.utf8).withUnsafeBytes { UUIDText.parse($0, lowercaseOnly: true) } == (u.uuidString == text ? u : nil))
        }
        // The reading it must agree with: a dash at 8, 13, 18, 23 and a hex digit everywhere else.
        func plain(_ b: [UInt8], lowercaseOnly: Bool) -> UUID? {
            guard b.count == 36 else { return nil }
            var out: [UInt8] = []
            var digits: [UInt8] = []
            for (i, c) in b.enumerated() {
                if [8, 13, 18, 23].contains(i) {
                    guard c == 0x2D else { return nil }
                    continue
                }
                switch c {
                case 0x30...0x39: digits.append(c - 0x30)
                case 0x61...0x66: digits.append(c - 0x61 + 10)
                case 0x41...0x46 where !lowercaseOnly: digits.append(c - 0x41 + 10)
                default: return nil
                }
            }
            for k in stride(from: 0, to: 32, by: 2) { out.append(digits[k] << 4 | digits[k + 1]) }
            return UUID(uuid: (out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7],
                               out[8], out[9], out[10], out[11], out[12], out[13], out[14], out[15]))
        }
        let base = Array("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".utf8)
        for at in 0..<36 {
            for v in 0...255 {
                var b = base
                b[at] = UInt8(v)
                for lower in [false, true] {
                    let got = b.withUnsafeBytes { UUIDText.parse($0, lowercaseOnly: lower) }
                    #expect(got == plain(b, lowercaseOnly: lower), "byte \(v) at \(at), lowercase only \(lower)")
                }
            }
        }
        // Any other length is refused, in place or from a slice.
        for n in [0, 35, 37] {
            let b = Array(repeating: UInt8(0x30), count: n)
            #expect(b.withUnsafeBytes { UUIDText.parse($0) } == nil)
            #expect(UUIDText.parse(b[...]) == nil)
        }
    }

    /// Fields sort by name byte by byte whether they compare by their codes' ranks (two known
    /// names) or by their bytes (any other pair).
    @Test func knownNamesSortAsTheirBytesDo() {
        let names = FieldCodes.names.dropFirst() + ["a", "zz", "title_x", "tit", "notes2", "#40", "n"]
        for a in names {
            for b in names {
                #expect(Field.inNameOrder(Field(a, .null), Field(b, .null)) == a.utf8.lexicographicallyPrecedes(b.utf8), "\(a) \(b)")
            }
        }
    }

    /// Sorting fields in place (moving them, comparing known names by code) orders them as the
    /// standard library's stable sort by `inNameOrder` does: known and unknown names mixed, a name
    /// repeated (kept in input order), and lists already in order.
    @Test func fieldsSortedInPlaceAsAStableSortOrdersThem() {
        let names = ["title", "status", "parent_id", "sort_order", "notes", "tag_id", "item_id", "a", "zz", "title_x", "tit", "#40", "n"]
        var state: UInt64 = 0x2545_F491_4F6C_DD1D
        func next() -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(truncatingIfNeeded: state >> 33)
        }
        for round in 0..<2_000 {
            // Up to 8 fields, and now and then up to 80: past `insertionSortMax`, the library's sort.
            let count = round % 50 == 0 ? next() % 81 : next() % 9
            var fields = (0..<count).map { k in Field(names[next() % names.count], .integer(Int64(k))) }
            if round % 4 == 0 { fields = fields.sorted(by: Field.inNameOrder) }
            let expected = fields.sorted(by: Field.inNameOrder)
            var sorted = fields
            Field.sortInNameOrder(&sorted)
            #expect(sorted == expected, "from \(fields.map(\.name))")
            #expect(Field.areInNameOrder(sorted))
            #expect(Field.areInNameOrder(fields) == (fields == expected))
        }
    }

    /// A peer's event may hold any number of fields, in any order, and is sorted again each time
    /// it is read (an upcast): 50,000 fields, one known name then one that sorts before it, half
    /// each, come out in order, the repeated names in the order they came (insertion would take
    /// about 6 x 10^8 swaps here).
    @Test func manyFieldsOutOfOrderAreSortedStably() {
        let n = 50_000
        var fields = (0..<n).map { k in Field(k < n / 2 ? "title" : "notes", .integer(Int64(k))) }
        Field.sortInNameOrder(&fields)
        #expect(fields.count == n)
        #expect(fields.prefix(n / 2).allSatisfy { $0.name == "notes" })
        #expect(fields.suffix(n / 2).allSatisfy { $0.name == "title" })
        #expect(fields.map { $0.value } == (n / 2..<n).map { FieldValue.integer(Int64($0)) } + (0..<n / 2).map { FieldValue.integer(Int64($0)) })
    }

    @Test func encodingIsDeterministic() {
        let m = Mutation(entity: .item, op: .update, entityID: UUID(), fields: [Field("z", .integer(1)), Field("a", .text("x")), Field("title", .null)])
        let e = Event(origin: fixedReplica, seq: Seq(1), hlc: HLC(wallMillis: 5, counter: 1), mutation: m)
        let a = FrameEncoder().encode([e][...], continues: false, previousHash: .zero)
        let b = FrameEncoder().encode([e][...], continues: false, previousHash: .zero)
        #expect(a == b)
        // Field order of the input does not matter.
        let m2 = Mutation(entity: .item, op: .update, entityID: m.entityID, fields: [Field("title", .null), Field("z", .integer(1)), Field("a", .text("x"))])
        let e2 = Event(origin: fixedReplica, seq: Seq(1), hlc: HLC(wallMillis: 5, counter: 1), mutation: m2)
        #expect(FrameEncoder().encode([e2][...], continues: false, previousHash: .zero) == a)
    }

    @Test func derivedEventIDsAreStableAndDistinct() {
        let a = Event.derivedEventID(origin: fixedReplica, seq: Seq(1))
        #expect(a == Event.derivedEventID(origin: fixedReplica, seq: Seq(1)))
        var seen = Set<UUID>()
        for s in 1...10_000 { seen.insert(Event.derivedEventID(origin: fixedReplica, seq: Seq(UInt64(s)))) }
        #expect(seen.count == 10_000)
        #expect(a.uuidString.lowercased().dropFirst(14).first == "8")  // version 8
    }

    /// The CPU-instruction path (three interleaved streams over 12 KiB blocks) agrees with the
    /// table-driven one on long and odd-sized buffers, from any starting register.
    @Test func crc32cHardwareAgreesWithTables() {
        var rng = SystemRandomNumberGenerator()
        for length in [0, 1, 7, 8, 4095, 12_287, 12_288, 12_289, 24_576 + 5, 100_003, 1 << 20] {
            let data = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            var table = CRC32C()
            data.withUnsafeBytes { table.updateWithTables($0) }
            #expect(CRC32C.checksum(data) == table.final, "length \(length)")
            // Split at an odd point: the register carries across calls.
            if length > 3 {
                var a = CRC32C()
                a.update(Array(data[..<(length / 3)]))
                a.update(Array(data[(length / 3)...]))
                #expect(a.final == table.final)
            }
        }
    }

    @Test func crc32cCheckValues() {
        #expect(CRC32C.checksum("123456789") == 0xE306_9283)
        #expect(CRC32C.checksum([UInt8]()) == 0)
        #expect(CRC32C.checksum([UInt8](repeating: 0, count: 32)) == 0x8A91_36AA)
        #expect(CRC32C.checksum([UInt8](repeating: 0xFF, count: 32)) == 0x62A8_AB43)
        #expect(CRC32C.checksum(Array(0..<32 as Range<UInt8>)) == 0x46DD_794E)
        // Incremental updates agree with one pass, at every split point.
        let data = Array("The quick brown fox jumps over the lazy dog".utf8)
        for split in 0...data.count {
            var c = CRC32C()
            c.update(Array(data[..<split]))
            c.update(Array(data[split...]))
            #expect(c.final == CRC32C.checksum(data))
        }
    }

    @Test func frameHeaderRejectsBadFields() {
        let e = Event(origin: fixedReplica, seq: Seq(1), hlc: HLC(wallMillis: 5, counter: 0), mutation: item("a"))
        let good = FrameEncoder().encode([e][...], continues: false, previousHash: .zero)
        func decodes(_ b: [UInt8]) -> Bool { b.withUnsafeBytes { (try? FrameHeader.decode($0)) != nil } }
        #expect(decodes(good))
        var badMagic = good; badMagic[0] ^= 1
        #expect(!decodes(badMagic))
        var badVersion = good; badVersion[4] = 9
        #expect(!decodes(badVersion))
        var zeroCount = good; for i in 32..<36 { zeroCount[i] = 0 }
        #expect(!decodes(zeroCount))
        #expect(!decodes(Array(good.prefix(95))))
    }
}

@Suite struct ClockTests {
    @Test func hlcIsMonotonicWhenTheWallClockStepsBack() {
        let wall = ManualClock(1_000_000)
        var clock = HybridClock(wall: wall)
        var last = HLC.zero
        var rng = SplitMix64(seed: 3)
        for _ in 0..<10_000 {
            // Jitter both ways, including big steps back.
            let step = Int64(rng.next() % 2000) - 1200
            wall.set(UInt64(max(1, Int64(wall.nowMillis()) + step)))
            let t = try! clock.tick()
            #expect(t > last)
            last = t
        }
    }

    @Test func counterCarriesIntoMilliseconds() throws {
        let wall = ManualClock(5000)
        var clock = HybridClock(wall: wall, last: HLC(wallMillis: 5000, counter: UInt16.max - 1))
        let a = try clock.tick()
        let b = try clock.tick()
        #expect(a == HLC(wallMillis: 5000, counter: .max))
        #expect(b == HLC(wallMillis: 5001, counter: 0))
        #expect(b > a)
    }

    @Test func observingARemoteClockMovesPastIt() throws {
        let wall = ManualClock(1000)
        var clock = HybridClock(wall: wall)
        clock.observe(HLC(wallMillis: 9000, counter: 7))
        #expect(try clock.tick() == HLC(wallMillis: 9000, counter: 8))
    }
}

@Suite struct ISOTimeTests {
    @Test func matchesFoundationAcrossTheRange() {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var rng = SplitMix64(seed: 1)
        for ms in [0, 86_399_999, 951_782_400_000, 1_767_225_600_000, 4_102_444_800_000] + (0..<2000).map({ _ in rng.next() % 8_000_000_000_000 }) {
            #expect(ISOTime.string(millis: ms) == f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)), "\(ms)")
        }
    }
}

@Suite struct ISOTimeSecondsTests {
    @Test func wholeSecondsMatchFoundation() {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        for s in stride(from: UInt64(0), to: 4_000_000_000, by: 7_777_777) {
            #expect(ISOTime.string(millis: s * 1000, fraction: false) == f.string(from: Date(timeIntervalSince1970: Double(s))))
        }
    }

    /// A field takes two bytes at least: a record whose field count its bytes cannot hold is
    /// refused at the count, before room is made for the fields, by `decode` and `skim` alike.
    @Test func aFieldCountTheRecordCannotHoldIsRefusedAtTheCount() throws {
        var out = ByteWriter()
        let m = Mutation(entity: .tag, op: .update, entityID: UUID(), fields: [Field("name", .text("x"))])
        EventCodec.encode(m, hlcDelta: 0, into: &out)
        // Length, version, flags, entity, op, hlc delta (one byte), entity id, then the count.
        let countAt = 1 + 4 + 1 + 16
        #expect(out.bytes[countAt] == 1 && out.bytes.count == countAt + 5)
        func verdicts(_ count: UInt8) -> (decoded: Result<Event, any Error>, skimmed: Result<Void, any Error>) {
            var bytes = out.bytes
            bytes[countAt] = count
            return bytes.withUnsafeBytes { p in
                var a = ByteReader(p), b = ByteReader(p)
                return (Result { try EventCodec.decode(&a, origin: fixedReplica, seq: Seq(1), firstHLC: HLC(rawValue: 1)) },
                        Result { _ = try EventCodec.skim(&b, firstHLC: HLC(rawValue: 1)) })
            }
        }
        #expect(try verdicts(1).decoded.get().fields == m.fields)
        // Four bytes follow the count: two fields at most.
        for count: UInt8 in [3, 4, 100, 127] {
            let (decoded, skimmed) = verdicts(count)
            // Past the bytes left, the count is refused as any length is.
            let message = count <= 4 ? "field count \(count) exceeds what the 4 bytes left can hold" : "field count \(count) exceeds the 4 bytes left"
            for error in [decoded.error, skimmed.error] {
                let e = try #require(error as? ByteReaderError)
                #expect(e.offset == countAt && e.message == message, "\(e)")
            }
        }
        // Two fields fit the count's bound; the second is then missing.
        let (decoded, skimmed) = verdicts(2)
        #expect((decoded.error as? ByteReaderError).map { !$0.message.hasPrefix("field count") } == true)
        #expect(decoded.error as? ByteReaderError == skimmed.error as? ByteReaderError)
    }

    /// Receiving checks records with `skim` (nothing built) where reading uses `decode`: on any
    /// bytes both must agree, pass or fail, and agree on the hlc and the explicit event id.
    @Test(arguments: [UInt64(1), 2, 3])
    func skimAndDecodeGiveTheSameVerdictOnAnyBytes(seed: UInt64) throws {
        var rng = SplitMix64(seed: seed)
        let firstHLC = HLC(wallMillis: 1_767_225_600_000, counter: 0)
        var records: [[UInt8]] = []
        var out = ByteWriter()
        for (i, m) in sampleMutations(300, seed: seed).enumerated() {
            var m = m
            if i % 3 == 0 { m.eventID = UUID() }
            if i % 5 == 0 { m.actor = i % 10 == 0 ? "ünï ✓" : "user" }
            if i % 7 == 0 { m.base = HLC(rawValue: UInt64(i) * 977) }
            if i % 4 == 0 { m.fields.append(Field("custom_\(i)", i % 8 == 0 ? .text("naïve 🚀") : .real(Double(i) / 3))) }
            out.removeAll()
            EventCodec.encode(m, hlcDelta: UInt64(i) * 13, into: &out)
            records.append(out.bytes)
        }
        var agreedFailures = 0, agreedPasses = 0
        for round in 0..<6_000 {
            var bytes = records[Int.random(in: 0..<records.count, using: &rng)]
            switch round % 4 {
            case 0: // flip one bit
                let i = Int.random(in: 0..<bytes.count, using: &rng)
                bytes[i] ^= 1 << UInt8.random(in: 0..<8, using: &rng)
            case 1: // overwrite a byte, often with one that breaks UTF-8 or a tag
                let i = Int.random(in: 0..<bytes.count, using: &rng)
                bytes[i] = [0xFF, 0xC3, 0x80, 0x00, 0x07, 0x05, UInt8.random(in: 0...255, using: &rng)][Int.random(in: 0..<7, using: &rng)]
            case 2: // cut short
                bytes.removeLast(Int.random(in: 1...bytes.count, using: &rng))
            default: // bytes inserted
                bytes.insert(contentsOf: (0..<Int.random(in: 1...3, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) },
                             at: Int.random(in: 0...bytes.count, using: &rng))
            }
            bytes.withUnsafeBytes { p in
                var a = ByteReader(p), b = ByteReader(p)
                let decoded = Result { try EventCodec.decode(&a, origin: fixedReplica, seq: Seq(1), firstHLC: firstHLC) }
                let skimmed = Result { try EventCodec.skim(&b, firstHLC: firstHLC) }
                switch (decoded, skimmed) {
                case (.success(let e), .success(let k)):
                    #expect(e.hlc == k.hlc && e.explicitEventID == k.eventID && a.offset == b.offset)
                    #expect(k.entity == e.entity && k.op == e.op && k.entityIDAt > 0)
                    // The event made from the skim, its fields decoded when read, is the same.
                    var c = ByteReader(p), offsets: [UInt32] = []
                    let again = try? EventCodec.skim(&c, firstHLC: firstHLC, fieldOffsets: &offsets)
                    let lazy = EventCodec.event(again!, records: FrameRecords(bytes, fieldOffsets: offsets), firstField: 0, origin: fixedReplica, seq: Seq(1))
                    #expect(FrameInspector.sameBits([lazy], [e]), "\(lazy) vs \(e)")
                    for f in e.fields { #expect(FrameInspector.sameBits(lazy.field(f.name), e.fields.first { $0.name == f.name }?.value)) }
                    agreedPasses += 1
                case (.failure(let x), .failure(let y)):
                    #expect(x as? ByteReaderError == y as? ByteReaderError, "the same error at the same offset")
                    agreedFailures += 1
                default:
                    Issue.record("decode and skim disagree on \(bytes): \(decoded) vs \(skimmed)")
                }
            }
        }
        // Both outcomes were exercised.
        #expect(agreedFailures > 1_000 && agreedPasses > 100)
    }
}

/// `EventFields`: an event read from the log holds its fields in the frame's records, decoded
/// when read, and reads, compares, hashes and changes exactly as one holding them in an array.
@Suite struct EventFieldsTests {
    /// Records of every shape a field takes: known codes, a newer build's code, names written out
    /// (one of them a known name, as a peer may write it), UUID and other texts, and an event of
    /// schema version 1 (upcast as it is read).
    func records() -> (bytes: [UInt8], mutations: [Mutation], versions: [UInt8]) {
        var out = ByteWriter()
        var ms: [Mutation] = []
        var versions: [UInt8] = []
        let id = UUID(uuidString: "6f1c2a4e-8b3d-4c5e-9f70-1a2b3c4d5e6f")!
        func add(_ m: Mutation, version: UInt8 = Event.currentSchemaVersion, patch: ((inout [UInt8]) -> Void)? = nil) {
            var w = ByteWriter()
            EventCodec.encode(entity: m.entity, op: m.op, entityID: m.entityID, eventID: m.eventID, base: m.base, actor: m.actor,
                              fields: m.fields, hlcDelta: UInt64(ms.count), schemaVersion: version, into: &w)
            var b = w.bytes
            patch?(&b)
            out.raw(b)
            ms.append(m)
            versions.append(version)
        }
        add(Mutation(entity: .item, op: .create, entityID: id, fields: [
            Field("title", .text("a title longer than fifteen bytes")), Field("parent_id", .text(id.lowercasedString)),
            Field("sort_order", .real(1.5)), Field("is_pinned", .boolean(true)), Field("due_at", .null),
            Field("priority", .integer(-3)), Field("zébra ✓", .text("ünï")),
        ], eventID: UUID(), base: HLC(rawValue: 99), actor: "someone with a long name"))
        add(Mutation(entity: .tag, op: .update, entityID: UUID(), fields: []))
        // A known name written out: "tjtle" becomes "title" in the bytes (code 0, then the name).
        add(Mutation(entity: .item, op: .update, entityID: UUID(), fields: [Field("notes", .text("n")), Field("tjtle", .text("spelled"))])) { b in
            let at = b.indices.first { i in i + 5 <= b.count && Array(b[i..<i + 5]) == Array("tjtle".utf8) }!
            b[at + 1] = UInt8(ascii: "i")
        }
        // A newer build's field code (40 is not known here): read as `#40`.
        add(Mutation(entity: .item, op: .update, entityID: UUID(), fields: [Field("#40", .integer(7)), Field("title", .text("t"))]))
        // Schema version 1: "high" becomes priority 3 as it is read; a word with no number moves.
        add(Mutation(entity: .item, op: .update, entityID: UUID(), fields: [Field("importance", .text("whenever")), Field("priority", .text("high"))]),
            version: 1)
        return (out.bytes, ms, versions)
    }

    func read(_ bytes: [UInt8]) throws -> (lazy: [Event], eager: [Event]) {
        var lazy: [Event] = [], eager: [Event] = []
        var offsets: [UInt32] = []
        var skims: [EventCodec.SkimmedRecord] = []
        try bytes.withUnsafeBytes { p in
            var a = ByteReader(p), b = ByteReader(p)
            while a.remaining > 0 {
                skims.append(try EventCodec.skim(&a, firstHLC: HLC(rawValue: 1000), fieldOffsets: &offsets))
                eager.append(try EventCodec.decode(&b, origin: fixedReplica, seq: Seq(UInt64(eager.count + 1)), firstHLC: HLC(rawValue: 1000)))
            }
        }
        let records = FrameRecords(bytes, fieldOffsets: offsets)
        var first = 0
        for (i, k) in skims.enumerated() {
            lazy.append(EventCodec.event(k, records: records, firstField: first, origin: fixedReplica, seq: Seq(UInt64(i + 1))))
            first += k.fieldCount
        }
        return (lazy, eager)
    }

    @Test func anEventReadsItsFieldsFromItsRecordsAsDecodingDoes() throws {
        let (bytes, ms, _) = records()
        let (lazy, eager) = try read(bytes)
        #expect(lazy.count == ms.count && lazy == eager)
        // Upcast events hold their fields as an array; the others read them from the records.
        #expect(lazy.map(\.fields.isEncoded) == [true, true, true, true, false])
        #expect(eager.allSatisfy { !$0.fields.isEncoded })
        #expect(lazy[4].field("priority") == .integer(3) && lazy[4].field("importance_v1") == .text("whenever"))
        #expect(lazy[2].fields.map(\.name) == ["notes", "title"] && lazy[2].field("title") == .text("spelled"))
        #expect(lazy[3].field("#40") == .integer(7) && lazy[3].field("#41") == nil && lazy[3].field("title") == .text("t"))
        #expect(lazy[0].actor == "someone with a long name" && lazy[0].base == HLC(rawValue: 99) && lazy[0].hasExplicitEventID)
        #expect(lazy[0].field("parent_id") == .text(ms[0].entityID.lowercasedString))
        #expect(lazy[0].field("zébra ✓") == .text("ünï") && lazy[0].field("ze\u{301}bra ✓") == .text("ünï"))
        #expect(lazy[0].field("color") == nil && lazy[1].field("title") == nil && lazy[1].fields.isEmpty)
        for (l, e) in zip(lazy, eager) {
            #expect(l.fields == e.fields.array && e.fields.array == l.fields && Array(l.fields) == e.fields.array)
            #expect(l.fields.hashValue == e.fields.hashValue && l.hashFields == e.hashFields)
            #expect(l.fields.description == e.fields.array.description)
            for f in e.fields { #expect(l.field(f.name) == f.value) }
            for (i, f) in e.fields.enumerated() { #expect(l.fields[i] == f) }
            #expect(l.fields.reversed().map(\.name) == e.fields.array.reversed().map(\.name))
        }
    }

    /// An event kept from a large frame must not keep the whole payload alive: a frame of more
    /// than `keptPayloadBytesMax` bytes of records is decoded whole; smaller ones are read in place.
    @Test func eventsOfALargeFrameAreDecodedWhole() throws {
        let dir = TempDir()
        let store = try makeStore(dir)
        var options = AppendOptions()
        options.frameRawBytesMax = 4 << 20
        let appender = try LogAppender(store: store, options: options)
        let note = String(repeating: "n", count: 4000)
        let large = (0..<400).map { i in Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("notes", .text(note)), Field("title", .text("t\(i)"))]) }
        let small = (0..<400).map { i in Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("t\(i)"))]) }
        _ = try appender.append(large)
        _ = try appender.append(small)
        try appender.close()
        let headers = frameHeaders(store)
        #expect(headers.count == 2 && Int(headers[0].rawBytes) > FrameDecoder.keptPayloadBytesMax && Int(headers[1].rawBytes) < FrameDecoder.keptPayloadBytesMax)
        for pipelined in [false, true] {
            var events: [Event] = []
            try LogReader(store: store).forEachEvent(origin: store.replicaID, from: Seq(1), pipelined: pipelined) { events.append($0); return true }
            #expect(events.count == 800)
            #expect(events.prefix(400).allSatisfy { !$0.fields.isEncoded } && events.suffix(400).allSatisfy { $0.fields.isEncoded })
            #expect(events.map(\.fields.array) == (large + small).map(\.fields))
        }
    }

    @Test func changingAnEventsFieldsTurnsThemIntoAnArrayOfTheirOwn() throws {
        let (lazy, eager) = try read(records().bytes)
        var e = lazy[0]
        let before = e.fields.array
        e.fields[1].value = .text("changed")
        #expect(!e.fields.isEncoded && e.fields.count == before.count && e.fields[1].value == .text("changed"))
        #expect(lazy[0].fields.isEncoded && lazy[0] == eager[0], "the event copied from is unchanged")
        var g = lazy[2]
        g.fields.append(Field("z", .null))
        g.fields.removeFirst()
        #expect(g.fields.map(\.name) == ["title", "z"])
        var h = lazy[3]
        h.fields.removeAll { $0.name == "title" }
        #expect(h.fields == [Field("#40", .integer(7))])
        var d = lazy[0]
        d.fields.detach()
        #expect(!d.fields.isEncoded && d == lazy[0] && d.fields == before)
        var empty: EventFields = []
        #expect(empty.isEmpty && empty == EventFields())
        empty.reserveCapacity(4)
        empty.append(contentsOf: before)
        #expect(empty == before && empty.count == before.count)
    }
}

extension Event {
    /// The fields' hash, as a set holding the event would use it.
    fileprivate var hashFields: Int {
        var h = Hasher()
        h.combine(fields)
        return h.finalize()
    }
}

extension Result {
    /// The failure, if it is one.
    var error: Failure? {
        if case .failure(let e) = self { return e }
        return nil
    }
}
