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

/// A frame's decoded payload, shared by the views of its events.
final class FrameRecords: Sendable {
    let bytes: [UInt8]
    init(_ bytes: [UInt8]) { self.bytes = bytes }
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
