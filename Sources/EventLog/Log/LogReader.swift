import Foundation

/// Reads an origin's log from any seq, checking every frame (checksum, seq contiguity, hash
/// chain, hlc order) as it goes. Safe while a writer appends: a frame that is not yet whole, or
/// an append whose last frame is not yet written, is the end of the log for now.
///
/// Damage inside the log (a sealed segment, or a damaged frame followed by good ones) is never
/// skipped: reading stops with a `LogError` naming the file and byte offset.
///
/// A `LogReader` value is immutable and can be shared; each read uses its own buffers.
public struct LogReader: Sendable {
    public let store: Store

    public init(store: Store) { self.store = store }

    /// Calls `body` with each whole, committed frame of `origin` holding seqs at or after `from`,
    /// in order, until it returns false. The bytes are valid only during the call.
    public func forEachFrame(origin: ReplicaID, from: Seq = Seq(1),
                             _ body: (FrameHeader, UnsafeRawBufferPointer) throws -> Bool) throws {
        let op = "read"
        let dir = store.directory(origin)
        let segments = try dir.segments(op: op)
        guard !segments.isEmpty else { return }
        let start = segments.lastIndex(where: { $0 <= from }) ?? 0
        var chain: ChainState?
        for i in start..<segments.count {
            let first = segments[i]
            let isNewest = i == segments.count - 1
            let (file, opened) = try SegmentScanner.open(dir, first: first, isNewest: isNewest, committedOnly: true, continuing: chain, op: op)
            let header: SegmentHeader
            switch opened {
            case .success(let h): header = h
            case .failure(let verdict):
                try Self.stopOrThrow(verdict, file: file)
                return
            }
            var offset = SegmentHeader.size
            var startChain = ChainState(nextSeq: first, previousHash: header.previousHash, lastHLC: chain?.lastHLC ?? .zero)
            if chain == nil, from > first, let idx = dir.loadIndex(first, segmentSize: file.size) {
                // Start at the index entry before `from`; that frame's link is taken as given.
                offset = idx.offset(forSeq: from)
                let entrySeq = idx.entries.last(where: { $0.offset == offset })?.seq ?? first
                startChain = ChainState(nextSeq: entrySeq, previousHash: offset == SegmentHeader.size ? header.previousHash : nil, lastHLC: .zero)
            }
            var scanner = SegmentScanner(file: file, origin: origin, isNewest: isNewest, committedOnly: true, offset: offset, chain: startChain)
            while true {
                var keepGoing = true
                let step = try scanner.next(hashFrom: from) { h, bytes in keepGoing = try body(h, bytes) }
                guard case .frame = step else {
                    if case .stop(let verdict) = step, verdict != .end { try Self.stopOrThrow(verdict, file: file); return }
                    break
                }
                if !keepGoing { return }
            }
            chain = scanner.chain
        }
    }

    /// A tail (a write in progress or torn, in the newest segment) is the end of the log for now;
    /// damage is an error naming the file and offset.
    private static func stopOrThrow(_ verdict: ScanVerdict, file: SegmentFile) throws {
        switch verdict {
        case .end, .tail:
            return
        case let .damage(at, reason, seqs):
            throw LogError(.corrupt, "read", reason, file: file.path, offset: at, seqs: seqs,
                           hint: "run `evctl verify`; restore this origin's log from a peer")
        }
    }

    /// Calls `body` with each event of `origin` from seq `from` on, until it returns false.
    public func forEachEvent(origin: ReplicaID, from: Seq = Seq(1), _ body: (Event) throws -> Bool) throws {
        let decoder = FrameDecoder()
        try forEachFrame(origin: origin, from: from) { h, bytes in
            let events: [Event]
            do {
                events = try decoder.events(of: bytes, header: h)
            } catch {
                throw LogError(.corrupt, "read", "frame does not decode: \((error as? FrameDecodeError)?.message ?? String(describing: error))", seqs: h.baseSeq.rawValue...h.lastSeq.rawValue)
            }
            for e in events where e.seq >= from {
                if try !body(e) { return false }
            }
            return true
        }
    }

    /// Events of `origin` in seq order from `from`, at most `limit`.
    public func events(origin: ReplicaID, from: Seq = Seq(1), limit: Int = .max) throws -> [Event] {
        var out: [Event] = []
        try forEachEvent(origin: origin, from: from) { e in
            out.append(e)
            return out.count < limit
        }
        return out
    }

    /// The last seq of `origin` known to be durable (fsynced) here; frames past it may still be
    /// lost to a crash, so they are not shipped. nil for a log written by an older build.
    public func durable(origin: ReplicaID) -> Seq? {
        store.directory(origin).loadDurable()
    }

    /// Where `origin`'s log starts when a snapshot bootstrap left it starting past seq 1 (the
    /// snapshot's last seq, hlc and frame hash); nil for a log that starts at seq 1.
    public func floor(origin: ReplicaID) throws -> LogTip? {
        try store.directory(origin).loadFloor()
    }

    /// The end of `origin`'s committed log, found from the newest segment's index and the frames past it.
    /// - Parameter hashing: false skips hashing the frames past the index (`lastHash` is then only
    ///   right when the index covers the whole segment); enough for a cursor, which needs the seq.
    public func tip(origin: ReplicaID, hashing: Bool = true) throws -> LogTip {
        let dir = store.directory(origin)
        let segments = try dir.segments(op: "read")
        guard let newest = segments.last else { return try dir.loadFloor() ?? .empty }
        var tip = LogTip.empty
        var from = newest
        if let size = FileIO.size(of: dir.segmentPath(newest)), let idx = dir.loadIndex(newest, segmentSize: size) {
            tip = LogTip(lastSeq: idx.lastSeq, lastHLC: idx.lastHLC, lastHash: idx.lastHash)
            from = idx.lastSeq.next
            if idx.coveredBytes == size { return tip }
        }
        try forEachFrame(origin: origin, from: from) { h, bytes in
            tip = LogTip(lastSeq: h.lastSeq, lastHLC: h.lastHLC, lastHash: hashing ? FrameHash.of(bytes) : tip.lastHash)
            return true
        }
        if tip.lastSeq.rawValue == 0 && newest.rawValue > 1 {
            // An empty newest segment: the tip is where the one before it (or the floor) ends.
            if segments.count == 1, let floor = try dir.loadFloor() { return floor }
            tip.lastSeq = Seq(newest.rawValue - 1)
        }
        return tip
    }
}
