import Foundation

/// An event read in place: one record of a frame the reader has verified whole (checksum, hash
/// chain, and every record checked exactly as decoding checks it). What every event has (its
/// position, clock, entity, op and ids) is read when the view is made; its fields and actor are
/// decoded only when asked for, by `event()`. A scan that needs only some events, or only their
/// ids, pays for decoding just those.
///
/// A view keeps its frame's decoded payload alive (shared by the frame's views), so it stays
/// valid after the read that handed it out returns, like any value.
public struct EventView: Sendable {
    /// Where a checked record sits in its payload, and its fixed start.
    struct Span: Sendable {
        var start: Int
        var entityIDAt: Int
        var hlc: HLC
        var version: UInt8
        var flags: UInt8
        var entity: Entity
        var op: Op
    }

    let records: FrameRecords
    let span: Span
    public let origin: ReplicaID
    public let seq: Seq
    let firstHLC: HLC

    init(records: FrameRecords, span: Span, origin: ReplicaID, seq: Seq, firstHLC: HLC) {
        self.records = records
        self.span = span
        self.origin = origin
        self.seq = seq
        self.firstHLC = firstHLC
    }

    public var hlc: HLC { span.hlc }
    public var entity: Entity { span.entity }
    public var op: Op { span.op }
    /// As `Event.schemaVersion`: the current version for an event written in an older one (its
    /// fields are upcast by `event()`), the written one for a newer version's event.
    public var schemaVersion: UInt8 { span.version < Event.currentSchemaVersion ? Event.currentSchemaVersion : span.version }
    /// As `Event.isUnderstood`.
    public var isUnderstood: Bool { entity.isKnown && op.isKnown && span.version <= Event.currentSchemaVersion }

    public var entityID: UUID { uuid(at: span.entityIDAt) }
    /// The writer-supplied event id, if any.
    public var explicitEventID: UUID? {
        span.flags & EventCodec.Flag.explicitEventID != 0 ? uuid(at: span.entityIDAt + 16) : nil
    }
    public var hasExplicitEventID: Bool { span.flags & EventCodec.Flag.explicitEventID != 0 }
    /// The event id: the writer's, else the one derived from (origin, seq), as `Event.eventID`.
    public var eventID: UUID { explicitEventID ?? Event.derivedEventID(origin: origin, seq: seq) }

    /// The whole event, decoded (and upcast, for an older schema version) as `LogReader`'s
    /// `forEachEvent` hands it out.
    /// - Throws: `LogError` (corrupt) only if the record does not decode, which the check made
    ///   before the view was handed out rules out; a decoder never traps on bytes.
    public func event() throws -> Event {
        try records.bytes.withUnsafeBytes { p in
            var r = ByteReader(p, offset: span.start)
            do {
                return try EventCodec.decode(&r, origin: origin, seq: seq, firstHLC: firstHLC)
            } catch let e as ByteReaderError {
                throw LogError(.corrupt, "read", "event record at payload offset \(e.offset): \(e.message)", seqs: seq.rawValue...seq.rawValue)
            }
        }
    }

    private func uuid(at offset: Int) -> UUID {
        records.bytes.withUnsafeBytes { UUID.load(from: $0, at: offset) }
    }
}

/// A frame's decoded payload, shared by the views of its events and by the events read from it
/// (`EventFields`); every record in it has been checked.
final class FrameRecords: Sendable {
    let bytes: [UInt8]
    /// Where each field of each event starts in `bytes` (its code), events in order: kept for
    /// events whose fields are decoded when read, empty for views.
    let fieldOffsets: [UInt32]

    init(_ bytes: [UInt8], fieldOffsets: [UInt32] = []) {
        self.bytes = bytes
        self.fieldOffsets = fieldOffsets
    }

    /// The field at `fieldOffsets[k]`, decoded. The record holding it was checked before the
    /// records were kept, by the code that decodes it here, so this cannot fail; were the bytes
    /// to read otherwise, the field reads as `EventCodec.unreadableFieldName` with a null value
    /// (never a trap).
    func field(at k: Int) -> Field {
        bytes.withUnsafeBytes { p in
            var r = ByteReader(p, offset: Int(fieldOffsets[k]))
            return (try? EventCodec.decodeField(&r)) ?? Field(EventCodec.unreadableFieldName, .null)
        }
    }

    /// The value of the first field named `name` among fields `ks`; only that field's value is
    /// decoded (a known name is compared by its code, read in place).
    func value(named name: String, in ks: Range<Int>) -> FieldValue? {
        let code = EventCodec.knownCode(name)
        return bytes.withUnsafeBytes { p in
            for k in ks {
                var r = ByteReader(p, offset: Int(fieldOffsets[k]))
                guard let c = try? r.small("field code", atMost: 255) else { return nil }
                let matches: Bool
                if c == 0 {
                    // Written out (a peer may spell out even a known name).
                    guard let n = try? r.length("field name length"), let b = try? r.bytes(n) else { return nil }
                    matches = makeUTF8String(b) == name  // as `Field.name == name` compares
                } else if c < EventCodec.knownFieldNames.count {
                    matches = c == code
                } else {
                    matches = EventCodec.unknownCodeName(c) == name  // a newer build's field
                }
                if matches { return try? EventCodec.decodeValue(&r) }
            }
            return nil
        }
    }
}

/// The checked records of one frame, as views.
struct FrameViews: Sendable {
    let header: FrameHeader
    let records: FrameRecords
    let spans: [EventView.Span]

    /// Calls `body` with a view of each event at or after `from`, in order, until it returns
    /// false; returns false then.
    func forEach(from: Seq, _ body: (EventView) throws -> Bool) rethrows -> Bool {
        var seq = header.baseSeq
        for span in spans {
            defer { seq = seq.next }
            if seq < from { continue }
            if try !body(EventView(records: records, span: span, origin: header.origin, seq: seq, firstHLC: header.firstHLC)) { return false }
        }
        return true
    }
}
