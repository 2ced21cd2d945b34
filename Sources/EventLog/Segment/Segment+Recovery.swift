import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Something recovery did, or found, when a writer opened the store.
public enum RecoveryAction: Sendable, Equatable, CustomStringConvertible {
    /// A temp file left by an interrupted atomic write was removed.
    case removedTempFile(path: String)
    /// The newest segment's damaged or incomplete tail was cut back to the last whole, committed frame.
    case truncatedTail(file: String, offset: Int, droppedBytes: Int, droppedSeqs: ClosedRange<UInt64>?, reason: String)
    /// A segment too short to hold its header (a creation cut off) was removed.
    case removedTornSegment(file: String, bytes: Int)
    /// A missing or stale index was rebuilt from its segment.
    case rebuiltIndex(file: String, reason: String)
    /// A sealed segment holds damaged bytes; reads stop there. Resync the origin from a peer.
    case damagedSealedSegment(file: String, offset: Int, reason: String)
    /// The event-id index could not read the whole log (it is damaged): retries of writes whose
    /// events lie past the damage are not recognised.
    case eventIDIndexIncomplete(origin: ReplicaID, indexedThrough: UInt64, reason: String)

    public var description: String {
        switch self {
        case .removedTempFile(let p): "removed leftover temp file \(p)"
        case let .truncatedTail(f, o, b, s, r):
            "truncated \(f) at byte offset \(o): dropped \(b) bytes" + (s.map { " (seq \($0.lowerBound)…\($0.upperBound))" } ?? "") + ": \(r)"
        case let .removedTornSegment(f, b): "removed torn segment \(f) (\(b) bytes, shorter than its header)"
        case let .rebuiltIndex(f, r): "rebuilt index \(f): \(r)"
        case let .damagedSealedSegment(f, o, r): "damaged sealed segment \(f) at byte offset \(o): \(r)"
        case let .eventIDIndexIncomplete(o, s, r): "event-id index of origin \(o) stops at seq \(s): \(r)"
        }
    }
}

/// What recovery did when a writer opened the store. Empty when the store was clean.
public struct RecoveryReport: Sendable, Equatable {
    public var actions: [RecoveryAction] = []
    public var isClean: Bool { actions.isEmpty }
}

/// An origin's log after recovery: its segments, and the writable end of the newest one.
struct RecoveredOrigin {
    var dir: OriginDirectory
    var segments: [Seq]
    /// The newest segment's index, covering every committed frame in it.
    var active: SegmentIndex?
    var tip: LogTip
}

/// The recovery cases, in order (each has a test):
///
/// | case | found | done |
/// |---|---|---|
/// | clean | index covers the file, or the frames past it check out | nothing |
/// | leftover temp file | `*.tmp` in the origin directory | removed |
/// | torn segment creation | newest segment shorter than its header | removed |
/// | torn frame header | file ends inside a frame header | cut back to the last committed frame |
/// | torn payload | file ends inside a payload | cut back to the last committed frame |
/// | incomplete append | last whole frames carry `continues` | cut back to the last committed frame |
/// | bad checksum in the tail | a damaged frame with no valid frame after it | cut back to the last committed frame |
/// | damage inside the newest segment | a damaged frame followed by valid frames | open fails, naming file and offset |
/// | bad checksum in a sealed segment | found while rebuilding its index | reported; reads stop there with an error |
/// | missing or stale index | no `.idx`, bad checksum, or not covering the file | rebuilt by scanning |
enum Recovery {
    static func recover(_ dir: OriginDirectory, report: inout RecoveryReport) throws -> RecoveredOrigin {
        let op = "recover"
        // Leftover temp files and indexes without a segment.
        for name in try FileIO.listDirectory(dir.path, op: op) {
            let full = dir.path + "/" + name
            if name.hasSuffix(SegmentName.tempSuffix) {
                try FileIO.remove(full, op: op)
                report.actions.append(.removedTempFile(path: full))
            }
        }
        var segments = try dir.segments(op: op)
        // A newest segment shorter than its header was cut off while being created.
        while let last = segments.last, let size = FileIO.size(of: dir.segmentPath(last)), size < SegmentHeader.size {
            try FileIO.remove(dir.segmentPath(last), op: op)
            try FileIO.remove(dir.indexPath(last), op: op)
            report.actions.append(.removedTornSegment(file: dir.segmentPath(last), bytes: size))
            segments.removeLast()
        }
        guard let newest = segments.last else {
            return RecoveredOrigin(dir: dir, segments: [], active: nil, tip: .empty)
        }
        // Sealed segments: only their indexes are checked (opening must not read every frame).
        for first in segments.dropLast() {
            let path = dir.segmentPath(first)
            guard let size = FileIO.size(of: path) else { continue }
            if let idx = dir.loadIndex(first, segmentSize: size), idx.coveredBytes == size { continue }
            let reason = FileIO.exists(dir.indexPath(first)) ? "stale or damaged" : "missing"
            let (idx, verdict) = try rebuildIndex(dir, first: first)
            switch verdict {
            case .end:
                try FileIO.writeAtomically(idx.encode(), to: dir.indexPath(first), op: op, durable: false)
                report.actions.append(.rebuiltIndex(file: dir.indexPath(first), reason: reason))
            case .tail(_, let o, let r, _), .damage(let o, let r, _):
                report.actions.append(.damagedSealedSegment(file: path, offset: o, reason: r))
            }
        }
        var active = try recoverNewest(dir, first: newest, report: &report)
        active.coveredBytes = max(active.coveredBytes, SegmentHeader.size)
        // An empty newest segment takes its clock floor from the segment before it.
        if active.lastSeq < active.firstSeq, segments.count > 1 {
            let previous = segments[segments.count - 2]
            if let size = FileIO.size(of: dir.segmentPath(previous)), let idx = dir.loadIndex(previous, segmentSize: size) {
                active.lastHLC = idx.lastHLC
            }
        }
        let tip = LogTip(lastSeq: active.lastSeq, lastHLC: active.lastHLC, lastHash: active.lastHash)
        return RecoveredOrigin(dir: dir, segments: segments, active: active, tip: tip)
    }

    /// Scans a whole sealed segment from its header, building its index.
    static func rebuildIndex(_ dir: OriginDirectory, first: Seq) throws -> (SegmentIndex, ScanVerdict) {
        let (file, opened) = try SegmentScanner.open(dir, first: first, isNewest: false, committedOnly: false, continuing: nil, op: "recover")
        guard case .success(let header) = opened else {
            if case .failure(let verdict) = opened { return (emptyIndex(dir, first, .zero), verdict) }
            preconditionFailure()
        }
        var idx = emptyIndex(dir, first, header.previousHash)
        var scanner = SegmentScanner(file: file, origin: dir.origin, isNewest: false, committedOnly: false, offset: SegmentHeader.size,
                                     chain: ChainState(nextSeq: first, previousHash: header.previousHash, lastHLC: .zero))
        while true {
            switch try scanner.next() {
            case .frame(let h, let hash, let at): idx.add(h, at: at, hash: hash)
            case .stop(let verdict): return (idx, verdict)
            }
        }
    }

    static func emptyIndex(_ dir: OriginDirectory, _ first: Seq, _ prev: FrameHash) -> SegmentIndex {
        SegmentIndex(origin: dir.origin, firstSeq: first, coveredBytes: SegmentHeader.size,
                     lastSeq: Seq(first.rawValue - 1), lastHLC: .zero, lastHash: prev, entries: [])
    }

    /// The newest frame an index covers is read again at every open: damage there (a write the
    /// disk lost after the index was written) must be found before anything is appended after it.
    static func lastFrameChecks(_ file: SegmentFile, _ idx: SegmentIndex) throws -> Bool {
        guard idx.lastFrameOffset != 0 else { return idx.coveredBytes == SegmentHeader.size }
        guard let h = try file.peekHeader(at: idx.lastFrameOffset) else { return false }
        var probe = ChainState(nextSeq: h.baseSeq, previousHash: nil, lastHLC: .zero)
        guard case .frame(let checked, let hash) = try file.frame(at: idx.lastFrameOffset, chain: &probe) else { return false }
        return checked.lastSeq == idx.lastSeq && hash == idx.lastHash && idx.lastFrameOffset + checked.totalBytes == idx.coveredBytes
    }

    static func recoverNewest(_ dir: OriginDirectory, first: Seq, report: inout RecoveryReport) throws -> SegmentIndex {
        let op = "recover"
        let path = dir.segmentPath(first)
        let (file, opened) = try SegmentScanner.open(dir, first: first, isNewest: false, committedOnly: false, continuing: nil, op: op)
        let header: SegmentHeader
        switch opened {
        case .success(let h): header = h
        case .failure(let verdict):
            // Recovery removed a newest segment shorter than its header before getting here.
            guard case .damage(let at, let reason, _) = verdict else { preconditionFailure("a torn header is removed earlier") }
            throw LogError(.corrupt, op, reason, file: path, offset: at, hint: "run `evctl verify`; restore this origin's log from a peer")
        }
        var idx: SegmentIndex
        var chain: ChainState
        var rebuildReason: String?
        if let loaded = dir.loadIndex(first, segmentSize: file.size), try lastFrameChecks(file, loaded) {
            idx = loaded
            chain = ChainState(nextSeq: loaded.lastSeq.next, previousHash: loaded.lastHash, lastHLC: loaded.lastHLC)
        } else {
            idx = emptyIndex(dir, first, header.previousHash)
            chain = ChainState(nextSeq: first, previousHash: header.previousHash, lastHLC: .zero)
            if file.size > SegmentHeader.size {
                rebuildReason = FileIO.exists(dir.indexPath(first)) ? "stale or damaged, or its last frame fails its check" : "missing"
            }
        }
        defer {
            if let rebuildReason, idx.coveredBytes > SegmentHeader.size,
               (try? FileIO.writeAtomically(idx.encode(), to: dir.indexPath(first), op: op, durable: false)) != nil {
                report.actions.append(.rebuiltIndex(file: dir.indexPath(first), reason: rebuildReason))
            }
        }
        var scanner = SegmentScanner(file: file, origin: dir.origin, isNewest: true, committedOnly: false, offset: idx.coveredBytes, chain: chain)
        var committed = idx
        var verdict = ScanVerdict.end
        scan: while true {
            switch try scanner.next() {
            case .frame(let h, let hash, let at):
                idx.add(h, at: at, hash: hash)
                if !h.continues { committed = idx }
            case .stop(let v):
                verdict = v
                break scan
            }
        }
        idx = committed
        if verdict == .end, scanner.offset < file.size {
            // The frames end where zeros start that run to the end of the file (the scan checked):
            // cut, as a writer that closed would have. As long as a writer's fill leaves them
            // (at most its largest fill, to a 4 KiB boundary), nothing of the log is in them and
            // nothing is reported; more zeros than that are writes a crash lost, reported as a tail.
            let zeros = file.size - scanner.offset
            let fd = try FileIO.open(path, O_WRONLY, op: op)
            defer { FileIO.close(fd) }
            try FileIO.truncate(fd, to: scanner.offset, path: path, op: op)
            if zeros > SegmentWriter.fillSpanMax || file.size % SegmentWriter.fillAlignment != 0 {
                try FileIO.fsync(fd, path: path, op: op)
                report.actions.append(.truncatedTail(file: path, offset: scanner.offset, droppedBytes: zeros, droppedSeqs: nil,
                                                     reason: "\(zeros) zero bytes past the last frame, more than a writer's fill: writes a crash lost"))
            }
        }
        switch verdict {
        case .end:
            break
        case let .damage(at, reason, _):
            throw LogError(.corrupt, op, reason, file: path, offset: at,
                           hint: "this is not a torn write; run `evctl verify` and restore this origin's log from a peer")
        case let .tail(cut, _, reason, seqs):
            precondition(cut == idx.coveredBytes, "a tail is cut where the last whole append ends")
            let fd = try FileIO.open(path, O_WRONLY, op: op)
            defer { FileIO.close(fd) }
            try FileIO.truncate(fd, to: cut, path: path, op: op)
            try FileIO.fsync(fd, path: path, op: op)
            report.actions.append(.truncatedTail(file: path, offset: cut, droppedBytes: file.size - cut, droppedSeqs: seqs, reason: reason))
        }
        return idx
    }
}
