#if canImport(Glibc)
import Glibc
#endif
/// Why a frame does not continue an origin's chain. The one rule for what "continues" means,
/// used for frames read from a segment file and for frames received from a peer.
enum ChainFault: Equatable, CustomStringConvertible {
    case seqGap(expected: Seq, found: Seq)
    case hashBroken(expected: FrameHash, found: FrameHash)
    case clockBackwards(previous: HLC, found: HLC)

    var description: String {
        switch self {
        case let .seqGap(e, f): "seq gap: frame starts at seq \(f), expected \(e)"
        case let .hashBroken(e, f): "hash chain broken: frame links to \(f), previous frame hashes to \(e)"
        case let .clockBackwards(p, f): "hlc goes backwards: \(f) after \(p)"
        }
    }
}

extension ChainState {
    init(after tip: LogTip) {
        self.init(nextSeq: tip.lastSeq.next, previousHash: tip.lastHash, lastHLC: tip.lastHLC)
    }

    /// nil when `h` continues the chain: it starts at the next seq, links to the previous frame's
    /// hash (when known) and its clock moves forward.
    func fault(of h: FrameHeader) -> ChainFault? {
        if h.baseSeq != nextSeq { return .seqGap(expected: nextSeq, found: h.baseSeq) }
        if let previousHash, previousHash != h.previousHash { return .hashBroken(expected: previousHash, found: h.previousHash) }
        if h.firstHLC <= lastHLC { return .clockBackwards(previous: lastHLC, found: h.firstHLC) }
        return nil
    }

    /// nil when a segment whose header is `h` continues the chain of the segment before it.
    func fault(ofSegment h: SegmentHeader) -> ChainFault? {
        if h.firstSeq != nextSeq { return .seqGap(expected: nextSeq, found: h.firstSeq) }
        if let previousHash, previousHash != h.previousHash { return .hashBroken(expected: previousHash, found: h.previousHash) }
        return nil
    }
}

/// What the bytes where a scan stopped mean. Decided in one place (`SegmentScanner`) for
/// recovery, the reader, the verifier and compaction, so that a damaged byte means the same to
/// each of them.
enum ScanVerdict: Error, Equatable {
    /// The segment's frames end cleanly at the end of the file (in the newest segment: or where
    /// its zero fill starts, every byte from there to the end of the file zero).
    case end
    /// The newest segment ends in bytes a writer had not finished: a torn frame, an append whose
    /// last frame is missing (or still being written), or a damaged frame with nothing valid after
    /// it. A reader stops at `cut` for now; the next writer to open the store cuts the file there.
    /// `at` is where the scan stopped; `seqs` the seqs the bytes past `cut` hold or claim.
    case tail(cut: Int, at: Int, reason: String, seqs: ClosedRange<UInt64>?)
    /// Damage inside the log: anything wrong in a sealed segment, a damaged frame followed by
    /// valid frames, or a segment header that is wrong. Never skipped; restored from a peer.
    case damage(at: Int, reason: String, seqs: ClosedRange<UInt64>?)
}

/// One step of a scan.
enum ScanStep {
    case frame(FrameHeader, hash: FrameHash, offset: Int)
    case stop(ScanVerdict)
}

/// The one walk over a segment's frames: every frame checked (header, checksum, seq, hash link,
/// hlc order) through `SegmentFile.frame`, and where the walk stops judged by one rule
/// (`ScanVerdict`). Recovery, `LogReader` and `Verifier` all read segments through it; `receive`
/// checks frames from memory with the same `ChainState.fault`.
///
/// With `committedOnly`, a frame is returned only once the append it belongs to is known to be
/// whole and valid: the frames of a multi-frame append are checked (checksums, seqs, clocks)
/// before the first of them is returned, so a caller never sees part of an append.
struct SegmentScanner {
    let file: SegmentFile
    let origin: ReplicaID
    let isNewest: Bool
    let committedOnly: Bool
    private(set) var offset: Int
    private(set) var chain: ChainState
    /// End of the last whole append returned (where a tail would be cut).
    private(set) var committedOffset: Int
    /// The chain at `committedOffset`.
    private(set) var committedChain: ChainState
    /// Frames before this offset were checked ahead (committed-only mode).
    private var checkedThrough: Int
    private var openAppend = false
    private var lastSeen: Seq

    /// Opens a segment: its header must parse, name `dir`'s origin and `first`, and continue
    /// `previous` (the chain where the segment before it ended) when given. A newest segment cut
    /// off inside its header is a tail; any other header fault is damage.
    static func open(_ dir: OriginDirectory, first: Seq, isNewest: Bool, committedOnly: Bool,
                     continuing previous: ChainState?, op: String) throws -> (SegmentFile, Result<SegmentHeader, ScanVerdict>) {
        let file = try SegmentFile(path: dir.segmentPath(first), op: op)
        switch try file.header() {
        case .failure(let e):
            if isNewest, case .truncated = e {
                return (file, .failure(.tail(cut: 0, at: 0, reason: "segment header is cut short: \(e.message)", seqs: nil)))
            }
            return (file, .failure(.damage(at: 0, reason: "segment header: \(e.message)", seqs: nil)))
        case .success(let h):
            guard h.origin == dir.origin, h.firstSeq == first else {
                return (file, .failure(.damage(at: 0, reason: "segment header names origin \(h.origin) and seq \(h.firstSeq), not its directory and name", seqs: nil)))
            }
            if let previous, let fault = previous.fault(ofSegment: h) {
                return (file, .failure(.damage(at: 0, reason: "segment does not continue the one before it: \(fault)", seqs: nil)))
            }
            return (file, .success(h))
        }
    }

    init(file: SegmentFile, origin: ReplicaID, isNewest: Bool, committedOnly: Bool, offset: Int, chain: ChainState) {
        self.file = file
        self.origin = origin
        self.isNewest = isNewest
        self.committedOnly = committedOnly
        self.offset = offset
        self.chain = chain
        committedOffset = offset
        committedChain = chain
        checkedThrough = offset
        lastSeen = Seq(chain.nextSeq.rawValue &- 1)
    }

    /// The next frame, or why the scan stops here. `body` sees the frame's bytes while they are
    /// buffered; frames ending before `hashFrom` are checksummed but not hashed (a reader seeking
    /// to a later seq).
    mutating func next(hashFrom: Seq = Seq(0), linking: Bool = true, _ body: (FrameHeader, UnsafeRawBufferPointer) throws -> Void = { _, _ in }) throws -> ScanStep {
        if committedOnly && offset >= checkedThrough {
            if let stop = try checkAhead() { return .stop(stop) }
        }
        let at = offset
        var next = chain
        let step = try file.frame(at: at, chain: &next, hashFrom: hashFrom, linking: linking, zeroFillEnds: isNewest, body: body)
        guard case .frame(let h, let hash) = step else { return .stop(try verdict(step, at: at)) }
        chain = next
        offset = at + h.totalBytes
        lastSeen = h.lastSeq
        openAppend = h.continues
        if !h.continues {
            committedOffset = offset
            committedChain = chain
        }
        return .frame(h, hash: hash, offset: at)
    }

    /// Committed-only mode, at the start of an append: finds where it ends and checks its frames
    /// (without hashing) before any is returned. nil when the append is whole and valid.
    private mutating func checkAhead() throws -> ScanVerdict? {
        // An append this process already walked whole, in the file as it still is: not again
        // (a server builds every page and slice of a large append with a scanner of its own).
        // Only within what this reader sees of the file (it may have opened it before the
        // append grew to where the walk was made).
        let identity = file.identity()
        if let identity, let end = CheckedAppends.shared.end(covering: offset, in: identity), end <= file.size {
            checkedThrough = end
            return nil
        }
        let end = try file.commitEnd(from: offset)
        var probe = chain
        var at = offset
        var continues = false
        var seen = lastSeen
        // A single-frame append is checked when it is read; longer ones (and an unfinished one,
        // end == offset) are walked now.
        if end > offset, let h = try file.peekHeader(at: offset), offset + h.totalBytes == end {
            checkedThrough = end
            return nil
        }
        while end == offset || at < end {
            let step = try file.frame(at: at, chain: &probe, hashFrom: Seq.max, zeroFillEnds: isNewest)
            guard case .frame(let h, _) = step else {
                return try verdict(step, at: at, seen: seen, continues: continues, chain: probe)
            }
            at += h.totalBytes
            seen = h.lastSeq
            continues = h.continues
        }
        checkedThrough = end
        // Remembered only for a file that did not change during the walk, that this reader saw
        // whole, and whose times are older than any clock granularity (a write within the same
        // tick could keep them: git's rule for "racy" files).
        if let identity, Int(identity.size) == file.size, file.identity() == identity, identity.settled {
            CheckedAppends.shared.record(offset..<end, in: identity)
        }
        return nil
    }

    private func verdict(_ step: FrameStep, at: Int) throws -> ScanVerdict {
        try verdict(step, at: at, seen: lastSeen, continues: openAppend, chain: chain)
    }

    /// The one rule for what the bytes where a walk stopped mean (`chain`: what the frame at
    /// `at` had to continue).
    private func verdict(_ step: FrameStep, at: Int, seen: Seq, continues: Bool, chain: ChainState) throws -> ScanVerdict {
        let cut = committedOffset
        func dropped(_ claimed: FrameHeader?) -> ClosedRange<UInt64>? {
            var top = seen.rawValue
            if let claimed, claimed.baseSeq.rawValue == seen.rawValue &+ 1 { top = claimed.lastSeq.rawValue }
            let first = committedChain.nextSeq.rawValue
            return top >= first ? first...top : nil
        }
        func claims(_ h: FrameHeader?) -> ClosedRange<UInt64>? { h.map { $0.baseSeq.rawValue...$0.lastSeq.rawValue } }
        switch step {
        case .frame:
            preconditionFailure("a frame is not a stop")
        case .end:
            guard continues else { return .end }
            return isNewest
                ? .tail(cut: cut, at: at, reason: "an append of several frames was cut off before its last frame", seqs: dropped(nil))
                : .damage(at: at, reason: "sealed segment ends inside an append", seqs: dropped(nil))
        case .torn(let r, let h):
            return isNewest
                ? .tail(cut: cut, at: at, reason: "torn write: \(r)", seqs: dropped(h))
                : .damage(at: at, reason: "sealed segment is cut short: \(r)", seqs: claims(h))
        case .bad(let r, let h):
            if isNewest, try !file.hasValidFrame(after: at, origin: origin) {
                return .tail(cut: cut, at: at, reason: "damaged tail: \(r)", seqs: dropped(h))
            }
            // A valid frame after it: damage, unless this frame was being written over the zero
            // fill as it was read. A writer writes in order, so once a later frame is there this
            // one is whole: read again, it checks, and the frames simply went on (the end for now,
            // to a reader). Only a reader asks (committed-only): recovery, which holds the lock,
            // must never take a frame that failed twice as a reason to cut, nor verify to pass it.
            var probe = chain
            if isNewest, committedOnly, case .frame = try file.frame(at: at, chain: &probe, hashFrom: Seq.max) {
                return .tail(cut: cut, at: at, reason: "a frame was being written as it was read", seqs: nil)
            }
            let inner = isNewest ? "damaged frame inside the log, followed by valid frames" : "damaged frame in a sealed segment"
            return .damage(at: at, reason: "\(inner): \(r)", seqs: claims(h))
        }
    }
}

/// Multi-frame appends that committed-only scanners of this process walked whole, per segment
/// file as it stood then (device, inode, size, modification and change times: any write, cut or
/// replacement of the file makes another key; a file changed in the last two seconds is not
/// remembered, since a write within one tick of the clock may keep its times), so that a later scanner starting inside one
/// does not walk it again. Without it a server serving a 1,000-frame append page by page read
/// the rest of the append again for every slice (39 times the log's bytes for a 38 MB append).
/// Bounded: at most `keysMax` files and `rangesMax` ranges each. Safe from any thread.
final class CheckedAppends: @unchecked Sendable {
    static let shared = CheckedAppends()
    static let keysMax = 256
    static let rangesMax = 64
    private let lock = Lock()
    private var ranges: [SegmentFile.Identity: [Range<Int>]] = [:]

    /// The end of a walked append holding `offset`, in the file as `identity` describes it.
    func end(covering offset: Int, in identity: SegmentFile.Identity) -> Int? {
        lock.withLock { ranges[identity]?.last { $0.contains(offset) }?.upperBound }
    }

    func record(_ range: Range<Int>, in identity: SegmentFile.Identity) {
        guard !range.isEmpty else { return }
        lock.withLock {
            if ranges[identity] == nil && ranges.count >= Self.keysMax { ranges.removeAll() }
            var list = ranges[identity] ?? []
            if list.count >= Self.rangesMax { list.removeFirst() }
            list.append(range)
            ranges[identity] = list
        }
    }
}

extension SegmentFile.Identity {
    /// Both times at least two seconds old (coarser than ext4's tick and NFS's or FAT's seconds).
    var settled: Bool {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let newest = max(modifiedSeconds, changedSeconds)
        return Int64(now.tv_sec) - newest >= 2
    }
}
