import Crypto
import Foundation

extension FrameHeader {
    /// The header at the start of `frame`, or nil when it is not a well-formed header.
    /// Does not check the CRC; `LogAppender.receive` checks everything before writing.
    public init?(parsing frame: [UInt8]) {
        guard let h = frame.withUnsafeBytes({ try? FrameHeader.decode($0) }) else { return nil }
        self = h
    }

    /// `init?(parsing:)` of the frame at the start of `frame`'s bytes.
    public init?(parsing frame: UnsafeRawBufferPointer) {
        guard let h = try? FrameHeader.decode(frame) else { return nil }
        self = h
    }

    /// What `frame`'s header says its payload holds uncompressed (`rawBytes`); 0 when the header
    /// does not parse (what bounds a page counts such a frame as, and the receiver refuses it).
    public static func rawBytes(of frame: [UInt8]) -> Int { FrameHeader(parsing: frame).map { Int($0.rawBytes) } ?? 0 }

    /// `rawBytes(of:)` of the frame at the start of `frame`'s bytes.
    public static func rawBytes(of frame: UnsafeRawBufferPointer) -> Int { FrameHeader(parsing: frame).map { Int($0.rawBytes) } ?? 0 }
}

/// The fixed 96-byte header in front of every frame. See docs/FORMAT.md, "Frame header".
public struct FrameHeader: Sendable, Equatable {
    public static let size = 96
    public static let magic: [UInt8] = Array("LBKF".utf8)
    public static let formatVersion: UInt8 = 1
    /// Whole frames larger than this are refused: bounds every buffer a reader allocates.
    public static let payloadBytesMax = 16 << 20
    /// Events in one frame at most; bounds decode work per frame.
    public static let eventsMax = 1 << 16

    public enum Codec: UInt8, Sendable { case raw = 0, lz4Frame = 1 }

    public var codec: Codec
    /// Set on every frame of a multi-frame append except its last: the append is not committed
    /// until a frame without this flag follows.
    public var continues: Bool
    /// The stored section ends with a signature block (`FrameSignature`): the origin's public
    /// key and its signature of the frame.
    public var signed: Bool = false
    /// The frame belongs to a share: a share block (`ShareBlock`) sits between the payload and the
    /// signature block (docs/FORMAT.md, "Share frames"). Only on signed frames.
    public var shared: Bool = false
    /// The payload is sealed with the share's content key (ChaCha20-Poly1305): only members read
    /// it. Only on shared frames.
    public var sealed: Bool = false
    public var origin: ReplicaID
    public var baseSeq: Seq
    public var count: UInt32
    public var rawBytes: UInt32
    public var firstHLC: HLC
    public var lastHLC: HLC
    public var storedBytes: UInt32
    public var previousHash: FrameHash
    public var crc: UInt32

    public var lastSeq: Seq { Seq(baseSeq.rawValue + UInt64(count) - 1) }
    public var totalBytes: Int { FrameHeader.size + Int(storedBytes) }
    /// Where the payload (the records, compressed or not) ends: before the signature block of a
    /// signed frame, at the frame's end otherwise.
    public var payloadEnd: Int { totalBytes - trailerBytes }
    /// The blocks after the payload: the share block and the signature block.
    var trailerBytes: Int { (signed ? FrameSignature.blockBytes : 0) + (shared ? ShareBlock.bytes : 0) }
    /// Bytes of a sealed payload beyond the plaintext's (the AEAD tag).
    static let sealTagBytes = 16

    func encode(into w: inout ByteWriter) {
        w.raw(FrameHeader.magic)
        w.u8(FrameHeader.formatVersion)
        w.u8(codec.rawValue)
        w.u8((continues ? 1 : 0) | (signed ? 2 : 0) | (shared ? 4 : 0) | (sealed ? 8 : 0))
        w.u8(0)
        w.uuid(origin.rawValue)
        w.u64(baseSeq.rawValue)
        w.u32(count)
        w.u32(rawBytes)
        w.u64(firstHLC.rawValue)
        w.u64(lastHLC.rawValue)
        w.u32(storedBytes)
        w.raw(previousHash.bytes)
        w.u32(crc)
    }

    /// Parses and range-checks a header; does not check the CRC (that needs the payload).
    static func decode(_ p: UnsafeRawBufferPointer) throws(FrameDecodeError) -> FrameHeader {
        guard p.count >= size else { throw .truncated("frame header needs \(size) bytes, \(p.count) present") }
        guard p[0] == magic[0], p[1] == magic[1], p[2] == magic[2], p[3] == magic[3] else { throw .invalid("bad frame magic") }
        guard p[4] == formatVersion else { throw .invalid("unknown frame format version \(p[4])") }
        guard let codec = Codec(rawValue: p[5]) else { throw .invalid("unknown codec \(p[5])") }
        guard p[6] & ~15 == 0, p[7] == 0 else { throw .invalid("unknown frame flags") }
        var r = ByteReader(p, offset: 8, end: size)
        do {
            let origin = ReplicaID(rawValue: try r.uuid())
            let base = try r.u64()
            let count = try r.u32()
            let raw = try r.u32()
            let first = try r.u64()
            let last = try r.u64()
            let stored = try r.u32()
            let prev = FrameHash(bytes: Array(try r.bytes(32)))
            let crc = try r.u32()
            guard base >= 1 else { throw FrameDecodeError.invalid("base seq 0") }
            guard count >= 1, count <= eventsMax else { throw FrameDecodeError.invalid("event count \(count) out of range") }
            guard base <= Seq.max.rawValue - UInt64(count) + 1 else { throw FrameDecodeError.invalid("seq range \(base)+\(count) runs past the largest seq \(Seq.max)") }
            guard Int(raw) <= payloadBytesMax, Int(stored) <= payloadBytesMax, stored > 0 else {
                throw FrameDecodeError.invalid("payload sizes out of range (stored \(stored), raw \(raw))")
            }
            guard first <= last else { throw FrameDecodeError.invalid("first hlc after last hlc") }
            let signed = p[6] & 2 != 0, shared = p[6] & 4 != 0, sealed = p[6] & 8 != 0
            guard !shared || signed else { throw FrameDecodeError.invalid("a share's frame that is not signed") }
            guard !sealed || shared else { throw FrameDecodeError.invalid("a sealed frame that is not a share's") }
            let block = UInt32((signed ? FrameSignature.blockBytes : 0) + (shared ? ShareBlock.bytes : 0) + (sealed ? sealTagBytes : 0))
            guard stored > block else { throw FrameDecodeError.invalid("frame of \(stored) stored bytes: too short for its \(block) bytes of tag, share and signature blocks") }
            if codec == .raw && raw != stored - block { throw FrameDecodeError.invalid("raw payload with differing sizes") }
            return FrameHeader(codec: codec, continues: p[6] & 1 != 0, signed: signed, shared: shared, sealed: sealed, origin: origin, baseSeq: Seq(base), count: count,
                               rawBytes: raw, firstHLC: HLC(rawValue: first), lastHLC: HLC(rawValue: last),
                               storedBytes: stored, previousHash: prev, crc: crc)
        } catch let e as FrameDecodeError {
            throw e
        } catch {
            throw .truncated("frame header")
        }
    }
}

/// SHA-256 of a whole frame (header and payload); each frame carries its predecessor's.
public struct FrameHash: Sendable, Hashable, CustomStringConvertible {
    public var bytes: [UInt8]
    public init(bytes: [UInt8]) {
        precondition(bytes.count == 32, "a frame hash is 32 bytes")
        self.bytes = bytes
    }
    /// The "previous hash" of an origin's first frame.
    public static let zero = FrameHash(bytes: [UInt8](repeating: 0, count: 32))

    public static func of(_ frame: UnsafeRawBufferPointer) -> FrameHash {
        FrameHash(bytes: Array(SHA256.hash(data: frame)))
    }
    public var description: String { bytes.map { String(format: "%02x", $0) }.joined() }
}

enum FrameDecodeError: Error, Equatable {
    /// The bytes end before the frame does (a torn write at the end of a file).
    case truncated(String)
    /// The bytes are there but wrong.
    case invalid(String)
    /// A sealed frame of a share whose key for the frame's epoch this reader does not hold.
    case locked(ShareID, UInt32)
    /// A sealed frame, intact and signed by its origin, whose payload does not open with the
    /// share's key or whose records do not decode: its writer (a member) sealed something
    /// wrong. Readers skip it and `evctl verify` names it; it is never read as data.
    case unreadable(String)

    var message: String {
        switch self {
        case .truncated(let m): "truncated: \(m)"
        case .invalid(let m): m
        case .locked(let s, let e): "sealed with key epoch \(e) of share \(s), which this replica does not hold"
        case .unreadable(let m): "sealed by its writer with contents that do not read: \(m)"
        }
    }
}

/// An event whose record, as written, takes more than `FrameEncoder.recordBytesMax`: the frame
/// is left as it was before the event (`FrameEncoder.add`).
struct RecordTooLarge: Error {
    /// The event's seq, as it was to be written.
    var seq: Seq
    /// The bytes its record took (its length prefix included).
    var bytes: Int
    /// The most it could take.
    var limit = FrameEncoder.recordBytesMax

    /// The error an append reports for it (`operation`: "append", "share append", …).
    func logError(_ operation: String) -> LogError {
        let most = limit == FrameEncoder.recordBytesMax ? "1 MiB (\(limit) bytes)" : "\(limit) bytes"
        return LogError(.invalidInput, operation, "an event's record may take at most \(most); the event at seq \(seq.rawValue) takes \(bytes)",
                        seqs: seq.rawValue...seq.rawValue,
                        hint: "nothing was appended; keep large texts out of the log (a file beside it, named in a field) or split them across events")
    }
}

/// Builds frames: encodes events, compresses, checksums. Reuses its buffers; not thread-safe.
///
/// Its state is touched once per event, from one thread (the type is not `Sendable` and its owner
/// serializes use), so its stored properties skip the runtime's exclusivity bookkeeping, which
/// cost a tenth of a batched append.
final class FrameEncoder {
    @exclusivity(unchecked) private var records = ByteWriter(capacity: 1 << 20)
    @exclusivity(unchecked) private var out = ByteWriter(capacity: 1 << 20)
    private let lz4 = LZ4Codec()
    /// Payloads at most this large are stored raw: LZ4's framing would outweigh any gain.
    static let rawPayloadBytesMax = 64

    // The frame being built: records are encoded as events are added.
    @exclusivity(unchecked) private(set) var count = 0
    @exclusivity(unchecked) private var origin = ReplicaID(rawValue: UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)))
    @exclusivity(unchecked) private var baseSeq = Seq(0)
    @exclusivity(unchecked) private var firstHLC = HLC.zero
    @exclusivity(unchecked) private var lastHLC = HLC.zero
    /// Bytes of records so far (exact, before compression).
    var recordBytes: Int { blockRuns > 0 ? runBytes : records.count }

    /// The most bytes an event's record may take as written, its length prefix included
    /// (docs/FORMAT.md, "Event record"). A frame is cut once its records reach the writer's
    /// limit (at most `LogAppender.frameRecordBytesCap`), so the record that crosses it still
    /// leaves the frame under `FrameHeader.payloadBytesMax`. Readers take any record a frame holds.
    static let recordBytesMax = 1 << 20

    /// Adds the next event of the frame as a mutation with its position and clock.
    /// - Throws: `RecordTooLarge` when its record takes more than `recordBytesMax` (the type's,
    ///   unless the caller's frames bound it otherwise); the frame is then as it was before the call.
    func add(_ m: Mutation, origin: ReplicaID, seq: Seq, hlc: HLC, recordBytesMax: Int = FrameEncoder.recordBytesMax) throws(RecordTooLarge) {
        if count == 0 {
            startFrame()
            self.origin = origin
            baseSeq = seq
            firstHLC = hlc
        } else {
            precondition(seq.rawValue == baseSeq.rawValue + UInt64(count) && origin == self.origin && hlc > lastHLC,
                         "frame events must be contiguous seqs of one origin in hlc order")
            joinRuns()  // the runs' blocks will no longer hold every record
        }
        precondition(count < FrameHeader.eventsMax, "frame event count out of range")
        let before = records.count
        EventCodec.encode(m, hlcDelta: hlc.rawValue - firstHLC.rawValue, into: &records)
        let bytes = records.count - before
        guard bytes <= recordBytesMax else {
            records.bytes.removeSubrange(before...)
            throw RecordTooLarge(seq: seq, bytes: bytes, limit: recordBytesMax)
        }
        lastHLC = hlc
        count += 1
    }

    /// Per run of `add(_:picks:…)` and `addUpToLimit`: the first of its events (an index of the
    /// picks) whose record takes more than `recordBytesMax`, and its bytes; -1 for none.
    private var oversized: [(pick: Int, bytes: Int)] = []

    /// After a batch's runs are encoded: throws for the first event too large, leaving the frame
    /// empty, as it was.
    private func refuseOversized(runs: Int, baseSeq: Seq) throws(RecordTooLarge) {
        guard let hit = oversized[..<runs].filter({ $0.pick >= 0 }).min(by: { $0.pick < $1.pick }) else { return }
        reset()
        throw RecordTooLarge(seq: Seq(baseSeq.rawValue + UInt64(hit.pick)), bytes: hit.bytes)
    }

    /// Where each run of the last `add(_:picks:…)` starts, and the end: the split it encoded.
    private(set) var runStarts: [Int] = []
    /// Per-worker record buffers of `add(_:picks:…)`, kept for their capacity.
    private var parts: [ByteWriter] = []
    /// Per-worker LZ4 blocks of `add(_:picks:…)`'s runs, each compressed by the worker that
    /// encoded it; `blockRuns` of them hold the frame being built (0: `finish` compresses the
    /// records itself).
    private var blockWriters: [LZ4BlockWriter] = []
    private var blockRuns = 0
    /// The records' bytes in `parts[..<blockRuns]`: while blocks hold the frame, its records stay
    /// in the runs (joined into `records` only for a frame stored raw).
    private var runBytes = 0

    /// Adds `ms[picks]` as the next events of an empty frame, at `baseSeq` on, stamped `hlcs`
    /// (increasing), their records encoded by `workers` threads, each a contiguous run into a
    /// buffer of its own, joined in order: the bytes are exactly those `add` writes one by one.
    /// The first run is `callerLead` events longer than an equal share, at most half a share
    /// longer, taken from the last run (the runs are the LZ4 blocks of the frame: where they
    /// split is the writer's choice, and any split reads alike).
    /// - Returns: false, leaving the frame empty, when the records reach `bytesLimit` (a worker
    ///   stops once its own run reaches it, so a batch of large records costs at most about
    ///   `bytesLimit` per worker to find out); the caller then adds them one at a time.
    ///   An event whose record takes more than `recordBytesMax` ends its run the same way: the
    ///   frame is left empty, and `addUpToLimit`, which encodes every event of its runs, names
    ///   the first such event.
    func add(_ ms: [Mutation], picks: [Int], origin: ReplicaID, baseSeq: Seq, hlcs: [HLC], workers: Int, callerLead: Int = 0,
             bytesLimit: Int) -> Bool {
        let runs = shareOut(ms, picks: picks, hlcs: hlcs, workers: workers, callerLead: callerLead)
        let first = hlcs[0]
        let n = picks.count
        nonisolated(unsafe) let writers = blockWriters
        let starts = runStarts
        // The mutations are read in place, through a pointer to each (`EventCodec.encode(_:…)`
        // taking an `UnsafePointer`): `ms[i]`, a buffer's subscript or a pointer's `pointee`
        // passed on would copy, and so retain and release, each one.
        ms.withUnsafeBufferPointer { mutations in
            nonisolated(unsafe) let mutations = mutations.baseAddress
            parts.withUnsafeMutableBufferPointer { buffer in
              oversized.withUnsafeMutableBufferPointer { over in
                nonisolated(unsafe) let out = buffer, over = over
                DispatchQueue.concurrentPerform(iterations: runs) { w in
                    // Each worker writes into a buffer moved out to its own stack while it
                    // encodes: the writers lie side by side in `parts` (16 bytes each, usually on
                    // one cache line), and every record appended wrote to its own, so the two cores
                    // took that line from each other at each record. Apart, the workers' encoding
                    // took a quarter to a third less CPU time.
                    var mine = ByteWriter()
                    swap(&mine, &out[w])
                    defer { swap(&mine, &out[w]) }
                    mine.removeAll()
                    for k in starts[w]..<starts[w + 1] {
                        precondition(k == 0 || hlcs[k] > hlcs[k - 1], "frame events must be in hlc order")
                        if mine.count >= bytesLimit { break }
                        let before = mine.count
                        EventCodec.encode(mutations! + picks[k], hlcDelta: hlcs[k].rawValue - first.rawValue, into: &mine)
                        if mine.count - before > Self.recordBytesMax {
                            over[w] = (k, mine.count - before)
                            break
                        }
                    }
                    // Each run is compressed by the thread that encoded it, while it is in that
                    // core's cache (`finish` joins the blocks into one LZ4 frame).
                    writers[w].reset()
                    if mine.count < bytesLimit && over[w].pick < 0 { mine.bytes.withUnsafeBytes { writers[w].append($0) } }
                }
              }
            }
        }
        guard parts[..<runs].reduce(0, { $0 + $1.count }) < bytesLimit, !oversized[..<runs].contains(where: { $0.pick >= 0 }) else { return false }
        holdRuns(runs, origin: origin, baseSeq: baseSeq, hlcs: hlcs, count: n)
        return true
    }

    /// Makes the frame the first `runs` runs' records and blocks: `count` events from `baseSeq`,
    /// stamped `hlcs[..<count]`.
    private func holdRuns(_ runs: Int, origin: ReplicaID, baseSeq: Seq, hlcs: [HLC], count: Int) {
        records.removeAll()
        blockRuns = runs
        runBytes = parts[..<runs].reduce(0, { $0 + $1.count })
        self.origin = origin
        self.baseSeq = baseSeq
        firstHLC = hlcs[0]
        lastHLC = hlcs[count - 1]
        self.count = count
    }

    /// Checks a batch's picks and clock values for `add(_:picks:…)` and `addUpToLimit`, readies
    /// a record buffer and an LZ4 block per run, and sets `runStarts`; returns the runs' count.
    private func shareOut(_ ms: [Mutation], picks: [Int], hlcs: [HLC], workers: Int, callerLead: Int) -> Int {
        precondition(count == 0 && !picks.isEmpty && picks.count == hlcs.count && picks.count <= FrameHeader.eventsMax,
                     "a frame built at once starts empty and has one clock value per event")
        // The picks are read through a pointer: each must be an index of `ms`.
        precondition(picks.allSatisfy { $0 >= 0 && $0 < ms.count }, "a frame's picks are indices of its mutations")
        let n = picks.count
        let runs = max(1, min(workers, n))
        while parts.count < runs { parts.append(ByteWriter(capacity: 1 << 16)) }
        while blockWriters.count < runs { blockWriters.append(LZ4BlockWriter()) }
        while recordEnds.count < runs { recordEnds.append([]) }
        while oversized.count < runs { oversized.append((-1, 0)) }
        for w in 0..<runs { oversized[w] = (-1, 0) }
        // Where each run starts: equal shares, but the first run (usually the calling thread's,
        // which starts at once while the others wait for a worker to wake) is `callerLead` events
        // longer, at most half a share more, so that every run keeps events; the last is shorter.
        let lead = max(0, min(callerLead, n / runs / 2))
        runStarts.removeAll(keepingCapacity: true)
        for w in 0...runs { runStarts.append(w == 0 ? 0 : w == runs ? n : n * w / runs + lead) }
        return runs
    }

    /// Per-run offsets where each record of `addUpToLimit`'s runs ends, kept for their capacity.
    private var recordEnds: [[Int]] = []

    /// Adds the first of `ms[picks]` as the events of an empty frame, as `add(_:picks:…)` does,
    /// for a batch whose records are expected to reach `bytesLimit`: the frame takes the events
    /// up to and including the first whose record brings its records to `bytesLimit`, exactly
    /// where adding them one at a time cuts a frame, and those after it are left out. Every run
    /// is encoded on its own thread, each noting where its records end; the frame is then cut,
    /// and the runs it keeps are compressed, each on its own thread (the records of events left
    /// out are dropped: the caller adds them to the next frame).
    /// - Returns: how many of `picks` the frame holds (all of them when their records stay
    ///   under the limit; the frame is then not full by bytes).
    /// - Throws: `RecordTooLarge` for the first of its events whose record takes more than
    ///   `recordBytesMax` (every event of its runs is encoded, so it is the first of them); the
    ///   frame is then left empty.
    func addUpToLimit(_ ms: [Mutation], picks: [Int], origin: ReplicaID, baseSeq: Seq, hlcs: [HLC], workers: Int,
                      bytesLimit: Int) throws(RecordTooLarge) -> Int {
        let runs = shareOut(ms, picks: picks, hlcs: hlcs, workers: workers, callerLead: 0)
        let first = hlcs[0]
        let starts = runStarts
        ms.withUnsafeBufferPointer { mutations in
            nonisolated(unsafe) let mutations = mutations.baseAddress
            parts.withUnsafeMutableBufferPointer { buffer in
                recordEnds.withUnsafeMutableBufferPointer { ends in
                  oversized.withUnsafeMutableBufferPointer { over in
                    nonisolated(unsafe) let out = buffer, ends = ends, over = over
                    DispatchQueue.concurrentPerform(iterations: runs) { w in
                        // Moved to this thread's stack while written, as in `add(_:picks:…)`.
                        var mine = ByteWriter(), myEnds: [Int] = []
                        swap(&mine, &out[w])
                        swap(&myEnds, &ends[w])
                        defer {
                            swap(&mine, &out[w])
                            swap(&myEnds, &ends[w])
                        }
                        mine.removeAll()
                        myEnds.removeAll(keepingCapacity: true)
                        for k in starts[w]..<starts[w + 1] {
                            precondition(k == 0 || hlcs[k] > hlcs[k - 1], "frame events must be in hlc order")
                            let before = mine.count
                            EventCodec.encode(mutations! + picks[k], hlcDelta: hlcs[k].rawValue - first.rawValue, into: &mine)
                            if mine.count - before > Self.recordBytesMax {
                                over[w] = (k, mine.count - before)
                                break
                            }
                            myEnds.append(mine.count)
                        }
                    }
                  }
                }
            }
        }
        try refuseOversized(runs: runs, baseSeq: baseSeq)
        // Where one at a time would cut: after the first record that brings the total to the limit.
        var taken = picks.count, kept = runs, total = 0
        cut: for w in 0..<runs {
            for (i, end) in recordEnds[w].enumerated() where total + end >= bytesLimit {
                parts[w].bytes.removeSubrange(end...)
                taken = starts[w] + i + 1
                kept = w + 1
                break cut
            }
            total += parts[w].count
        }
        nonisolated(unsafe) let writers = blockWriters
        parts.withUnsafeBufferPointer { buffer in
            nonisolated(unsafe) let records = buffer
            DispatchQueue.concurrentPerform(iterations: kept) { w in
                writers[w].reset()
                records[w].bytes.withUnsafeBytes { writers[w].append($0) }
            }
        }
        holdRuns(kept, origin: origin, baseSeq: baseSeq, hlcs: hlcs, count: taken)
        return taken
    }

    /// Empties the frame's records, those of a batch's runs included.
    private func startFrame() {
        records.removeAll()
        blockRuns = 0
    }

    /// Moves the records still held in the runs into `records`, which then holds them all
    /// (and `finish` compresses them itself).
    private func joinRuns() {
        guard blockRuns > 0 else { return }
        for w in 0..<blockRuns { records.raw(parts[w].bytes) }
        blockRuns = 0
    }

    /// Drops the frame being built.
    func reset() {
        count = 0
        blockRuns = 0
    }

    /// Adds an event (its explicit id, base, actor and schema version as recorded).
    func add(_ e: Event) {
        if count == 0 {
            startFrame()
            origin = e.origin
            baseSeq = e.seq
            firstHLC = e.hlc
        } else {
            precondition(e.seq.rawValue == baseSeq.rawValue + UInt64(count) && e.origin == origin && e.hlc > lastHLC,
                         "frame events must be contiguous seqs of one origin in hlc order")
            joinRuns()
        }
        EventCodec.encode(e, firstHLC: firstHLC, into: &records)
        lastHLC = e.hlc
        count += 1
    }

    /// Returns the frame's bytes. `events` must be contiguous seqs of one origin, in hlc order.
    func encode(_ events: ArraySlice<Event>, continues: Bool, previousHash: FrameHash) -> [UInt8] {
        precondition(!events.isEmpty && events.count <= FrameHeader.eventsMax, "frame event count out of range")
        reset()
        for e in events { add(e) }
        return finish(continues: continues, previousHash: previousHash)
    }

    /// Compresses, checksums and returns the frame built by `add`; the encoder is then empty.
    /// With `signer`, the frame is signed (docs/FORMAT.md, "Signed frames"); with `share` too, it
    /// carries the share block and, given a content key, its payload is sealed ("Share frames").
    func finish(continues: Bool, previousHash: FrameHash, signer: ReplicaKey? = nil, share: (block: ShareBlock, key: ContentKey?)? = nil) -> [UInt8] {
        precondition(count > 0, "a frame holds at least one event")
        defer { reset() }
        let rawBytes = recordBytes
        precondition(rawBytes <= FrameHeader.payloadBytesMax, "frame payload exceeds payloadBytesMax")
        precondition(share == nil || signer != nil, "a share's frame is signed")
        out.removeAll()
        out.bytes.append(contentsOf: repeatElement(0, count: FrameHeader.size))
        var codec = FrameHeader.Codec.lz4Frame
        if rawBytes > FrameEncoder.rawPayloadBytesMax {
            if blockRuns > 0 {
                // Runs compressed on several cores: one LZ4 frame of independent blocks.
                lz4.appendIndependentFrameHeader(contentSize: rawBytes, into: &out.bytes)
                for w in 0..<blockRuns {
                    let b = blockWriters[w]
                    b.bytes.withUnsafeBufferPointer { out.bytes.append(contentsOf: $0[..<b.count]) }
                }
                LZ4Codec.appendEndMark(into: &out.bytes)
            } else {
                _ = records.bytes.withUnsafeBytes { lz4.compress($0, into: &out.bytes) }
            }
        }
        if out.count - FrameHeader.size >= rawBytes || rawBytes <= FrameEncoder.rawPayloadBytesMax {
            joinRuns()
            out.bytes.removeSubrange(FrameHeader.size...)
            out.raw(records.bytes)
            codec = .raw
        }
        if let share, let key = share.key {
            precondition(key.epoch == share.block.epoch, "a payload is sealed with its block's epoch key")
            let sealed = out.bytes.withUnsafeBytes {
                ShareCrypto.seal(UnsafeRawBufferPointer(rebasing: $0[FrameHeader.size...]), key: key, block: share.block, origin: origin, baseSeq: baseSeq)
            }
            out.bytes.removeSubrange(FrameHeader.size...)
            out.raw(sealed)
        }
        let block = (signer == nil ? 0 : FrameSignature.blockBytes) + (share == nil ? 0 : ShareBlock.bytes)
        let stored = out.count - FrameHeader.size + block
        var header = FrameHeader(codec: codec, continues: continues, signed: signer != nil, shared: share != nil, sealed: share?.key != nil,
                                 origin: origin, baseSeq: baseSeq,
                                 count: UInt32(count), rawBytes: UInt32(rawBytes),
                                 firstHLC: firstHLC, lastHLC: lastHLC, storedBytes: UInt32(stored),
                                 previousHash: previousHash, crc: 0)
        var hw = ByteWriter(capacity: FrameHeader.size)
        header.encode(into: &hw)
        if let share { share.block.encode(into: &out) }
        if let signer {
            precondition(origin == (share.map { s in
                s.key == nil ? ReplicaID.shareMembers(s.block.share, signingKey: signer.publicKey) : ReplicaID.shareLog(s.block.share, signingKey: signer.publicKey)
            } ?? signer.replicaID), "a frame is signed by its origin's key")
            let message = hw.bytes.withUnsafeBytes { h in
                out.bytes.withUnsafeBytes { FrameSignature.message(header: h, payload: UnsafeRawBufferPointer(rebasing: $0[FrameHeader.size...])) }
            }
            out.raw(signer.publicKey)
            out.raw(signer.sign(message))
        }
        var crc = CRC32C()
        hw.bytes.withUnsafeBytes { crc.update(UnsafeRawBufferPointer(rebasing: $0[0..<FrameHeader.size - 4])) }
        out.bytes.withUnsafeBytes { crc.update(UnsafeRawBufferPointer(rebasing: $0[FrameHeader.size...])) }
        header.crc = crc.final
        hw.removeAll()
        header.encode(into: &hw)
        out.bytes.replaceSubrange(0..<FrameHeader.size, with: hw.bytes)
        return out.bytes
    }
}

/// Checks and decodes frames. Reuses its buffers; not thread-safe.
final class FrameDecoder {
    private let lz4 = LZ4Codec()
    private var raw: [UInt8] = []
    /// Opens sealed frames; without it (or without the frame's key) reading one throws `.locked`.
    private var keys: ShareKeyring?
    /// Whose keyring to read at each sealed frame (reads of logs without any pay nothing).
    private var keysOf: Store?

    init(keys: ShareKeyring? = nil) { self.keys = keys }

    /// A decoder that reads `store`'s keyring at each sealed frame it meets.
    init(keysOf store: Store) { keysOf = store }

    /// Checks the CRC of a whole frame whose header has been parsed.
    static func checkCRC(_ frame: UnsafeRawBufferPointer, header: FrameHeader) throws(FrameDecodeError) {
        var crc = CRC32C()
        crc.update(UnsafeRawBufferPointer(rebasing: frame[0..<FrameHeader.size - 4]))
        crc.update(UnsafeRawBufferPointer(rebasing: frame[FrameHeader.size..<header.totalBytes]))
        if crc.final != header.crc {
            throw .invalid(String(format: "checksum mismatch (stored %08x, computed %08x)", header.crc, crc.final))
        }
    }

    /// Decodes the events of a frame whose CRC has been checked.
    func events(of frame: UnsafeRawBufferPointer, header: FrameHeader) throws(FrameDecodeError) -> [Event] {
        var result: [Event] = []
        try events(of: frame, header: header, into: &result)
        return result
    }

    /// Replaces the contents of `result` (keeping its capacity) with the events of a frame whose
    /// CRC has been checked; on a failure, `result` is left empty.
    func events(of frame: UnsafeRawBufferPointer, header: FrameHeader, into result: inout [Event]) throws(FrameDecodeError) {
        result.removeAll(keepingCapacity: true)
        result.reserveCapacity(Int(header.count))
        do throws(FrameDecodeError) {
            try decodeEvents(of: frame, header: header, into: &result)
        } catch {
            result.removeAll(keepingCapacity: true)
            throw error
        }
    }

    /// Checks every record as `views(of:header:)` does, noting where each field starts, then
    /// makes the events: their fixed parts read from the checked records, their fields left in
    /// them (one payload shared by the frame's events, each field decoded when read:
    /// `EventFields`). Decoding every field here, each event's fields in an array of its own
    /// and most texts in one more, was most of a read's time (docs/SPEED.md).
    ///
    /// A frame whose payload is larger than `keptPayloadBytesMax` is decoded up front instead, as
    /// `EventView.event()` decodes: an event kept from it must not keep the whole payload (up
    /// to 16 MiB, and a note of every field of every other event in it) alive.
    private func decodeEvents(of frame: UnsafeRawBufferPointer, header: FrameHeader, into result: inout [Event]) throws(FrameDecodeError) {
        if Int(header.rawBytes) > Self.keptPayloadBytesMax { return try decodeWhole(of: frame, header: header, into: &result) }
        defer { if skimmed.capacity > 4096 { skimmed = [] } }  // one frame of many records does not size every later one
        skimmed.removeAll(keepingCapacity: true)
        var offsets: [UInt32] = []
        offsets.reserveCapacity(Int(header.count) * 2)
        try forEachRecord(of: frame, header: header) { r, seq in
            let k = try EventCodec.skim(&r, firstHLC: header.firstHLC, fieldOffsets: &offsets)
            skimmed.append(k)
            return k.hlc
        }
        let records = keptRecords(of: frame, header: header, fieldOffsets: offsets)
        var seq = header.baseSeq, first = 0
        for k in skimmed {
            result.append(EventCodec.event(k, records: records, firstField: first, origin: header.origin, seq: seq))
            first += k.fieldCount
            seq = seq.next
        }
    }

    /// The records of the frame `decodeEvents` read, kept for its events.
    private var skimmed: [EventCodec.SkimmedRecord] = []

    /// The largest payload whose events read their fields from it (`EventFields`); a larger
    /// frame's events are decoded whole. A batch of a thousand small events is about 60 KiB.
    static let keptPayloadBytesMax = 1 << 20

    /// The events of a frame whose CRC has been checked, each decoded whole (`EventCodec.decode`)
    /// as a frame larger than `keptPayloadBytesMax` is: for the fuzz oracle, which holds this
    /// verdict and these events to the others (`FrameInspector.crossCheck`).
    func eagerEvents(of frame: UnsafeRawBufferPointer, header: FrameHeader) throws(FrameDecodeError) -> [Event] {
        var result: [Event] = []
        try decodeWhole(of: frame, header: header, into: &result)
        return result
    }

    private func decodeWhole(of frame: UnsafeRawBufferPointer, header: FrameHeader, into result: inout [Event]) throws(FrameDecodeError) {
        try forEachRecord(of: frame, header: header) { r, seq in
            let e = try EventCodec.decode(&r, origin: header.origin, seq: seq, firstHLC: header.firstHLC)
            let hlc = e.hlc
            result.append(consume e)  // moved into the batch, not copied
            return hlc
        }
    }

    /// Checks that every event of a frame whose CRC has been checked decodes, exactly as
    /// `events(of:header:)` would, without building the events; returns the explicit event ids
    /// with their seqs. Used where frames are only passed on (receiving), not read.
    /// A sealed frame is not opened here (a receiver may not hold its key, and a hub never
    /// does): its records are checked by each member that reads it.
    func check(_ frame: UnsafeRawBufferPointer, header: FrameHeader) throws(FrameDecodeError) -> [(UUID, Seq)] {
        guard !header.sealed else { return [] }
        var ids: [(UUID, Seq)] = []
        try forEachRecord(of: frame, header: header) { r, seq in
            let k = try EventCodec.skim(&r, firstHLC: header.firstHLC)
            if let eventID = k.eventID { ids.append((eventID, seq)) }
            return k.hlc
        }
        return ids
    }

    /// Checks every record of a frame whose CRC has been checked, exactly as
    /// `events(of:header:)` would, without building the events; returns where each is, for
    /// views of them. The views share one copy of the frame's decoded payload.
    func views(of frame: UnsafeRawBufferPointer, header: FrameHeader) throws(FrameDecodeError) -> FrameViews {
        var spans: [EventView.Span] = []
        spans.reserveCapacity(Int(header.count))
        try forEachRecord(of: frame, header: header) { r, seq in
            let start = r.offset
            let k = try EventCodec.skim(&r, firstHLC: header.firstHLC)
            spans.append(EventView.Span(start: start, entityIDAt: k.entityIDAt, hlc: k.hlc, version: k.version,
                                        flags: k.flags, entity: k.entity, op: k.op))
            return k.hlc
        }
        return FrameViews(header: header, records: keptRecords(of: frame, header: header), spans: spans)
    }

    /// The payload the records of the frame just checked were read from, kept for its views or
    /// events: the decoder's buffer, or a copy of the frame's. The decoder lets its buffer go
    /// (its next frame is decompressed into a new one, never zeroed first: `LZ4Codec.decompress`).
    private func keptRecords(of frame: UnsafeRawBufferPointer, header: FrameHeader, fieldOffsets: [UInt32] = []) -> FrameRecords {
        if header.codec == .raw && !header.sealed {
            return FrameRecords(Array(UnsafeRawBufferPointer(rebasing: frame[FrameHeader.size..<header.payloadEnd])), fieldOffsets: fieldOffsets)
        } else if header.codec == .raw {
            return FrameRecords(opened, fieldOffsets: fieldOffsets)
        }
        defer { raw = [] }
        return FrameRecords(raw, fieldOffsets: fieldOffsets)
    }

    /// Decompresses the payload and calls `record` once per event record (with its seq); `record`
    /// reads the record and returns its hlc. Checks the hlcs rise within the header's bounds and
    /// that the records fill the payload exactly.
    private func forEachRecord(of frame: UnsafeRawBufferPointer, header: FrameHeader,
                               _ record: (inout ByteReader, Seq) throws -> HLC) throws(FrameDecodeError) {
        if header.sealed {
            guard let block = ShareBlock.of(frame, header: header) else { throw .invalid("a sealed frame without its share block") }
            // Asked again at each sealed frame (a decoder may serve a whole read): a key that
            // arrives, or a member removed, mid-read counts from the next frame on. Cached by the
            // folder's modification time, so this is a `stat` when nothing changed.
            if let store = keysOf {
                keys = try? ShareKeyring.of(store)  // a damaged key file reads as no keys
            }
            guard let keys, let key = keys.key(block.share, epoch: block.epoch) else { throw .locked(block.share, block.epoch) }
            let writer = ReplicaID.derived(fromSigningKey: Array(UnsafeRawBufferPointer(rebasing: frame[header.totalBytes - FrameSignature.blockBytes..<header.totalBytes - FrameSignature.blockBytes + 32])))
            // A writer not known as a member may be one whose `add` record has not arrived: the
            // log is read up to here for now. One removed before the frame is skipped for good.
            switch keys.mayWrite(block.share, writer: writer, at: header.lastHLC) {
            case nil: throw .locked(block.share, block.epoch)
            case false?: throw .unreadable("written by replica \(writer) after it was removed from share \(block.share)")
            case true?: break
            }
            guard let plain = ShareCrypto.open(UnsafeRawBufferPointer(rebasing: frame[FrameHeader.size..<header.payloadEnd]), key: key, block: block,
                                               origin: header.origin, baseSeq: header.baseSeq) else {
                throw .unreadable("the payload does not open with key epoch \(block.epoch) of share \(block.share)")
            }
            if header.codec == .raw, plain.count != Int(header.rawBytes) { throw .unreadable("raw payload with differing sizes") }
            opened = plain
            let failure: FrameDecodeError? = plain.withUnsafeBytes { p in
                do throws(FrameDecodeError) {
                    try decodeRecords(p, header: header, record)
                    return nil
                } catch {
                    return error
                }
            }
            if let failure { throw .unreadable(failure.message) }
            return
        }
        try decodeRecords(UnsafeRawBufferPointer(rebasing: frame[FrameHeader.size..<header.payloadEnd]), header: header, record)
    }

    /// A sealed frame's opened payload (its records, or their LZ4 frame).
    private var opened: [UInt8] = []

    private func decodeRecords(_ payload: UnsafeRawBufferPointer, header: FrameHeader,
                               _ record: (inout ByteReader, Seq) throws -> HLC) throws(FrameDecodeError) {
        func walk(_ p: UnsafeRawBufferPointer) throws(FrameDecodeError) {
            var r = ByteReader(p)
            var seq = header.baseSeq
            var previous: HLC?
            do {
                for _ in 0..<header.count {
                    let hlc = try record(&r, seq)
                    guard hlc <= header.lastHLC, previous.map({ $0 < hlc }) ?? true else {
                        throw ByteReaderError(offset: r.offset, message: "event hlc out of order")
                    }
                    previous = hlc
                    seq = seq.next
                }
            } catch let e as ByteReaderError {
                throw .invalid("event record at payload offset \(e.offset): \(e.message)")
            } catch {
                throw .invalid("event record: \(error)")
            }
            guard r.remaining == 0 else { throw .invalid("\(r.remaining) bytes follow the last event record") }
            guard previous == header.lastHLC else { throw .invalid("last event hlc differs from header") }
        }
        switch header.codec {
        case .raw:
            try walk(payload)
        case .lz4Frame:
            do {
                try lz4.decompress(payload, expected: Int(header.rawBytes), into: &raw)
            } catch {
                throw .invalid("LZ4 payload: \(error.message)")
            }
            let failure: FrameDecodeError? = raw.withUnsafeBytes { p in
                do throws(FrameDecodeError) {
                    try walk(p)
                    return nil
                } catch {
                    return error
                }
            }
            if let failure { throw failure }
        }
    }
}
