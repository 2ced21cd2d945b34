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
    /// - Parameter linking: false checks each frame's header, checksum, seqs and clock but not its
    ///   hash link to the frame before (no SHA-256): for a server passing frames on to a receiver
    ///   that checks every link itself against the hash it holds (docs/SECURITY.md).
    public func forEachFrame(origin: ReplicaID, from: Seq = Seq(1), linking: Bool = true,
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
                let step = try scanner.next(hashFrom: from, linking: linking) { h, bytes in keepGoing = try body(h, bytes) }
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
    /// With a second core, a worker decodes batches of frames while this thread reads the next
    /// (and helps with what is left of each); `body` runs on the calling thread, in order.
    /// Building events is bound by the allocator: what the worker decodes, the worker frees once
    /// handed out (`forEachChecked`), which is what made the second core pay (LogBenchmarks,
    /// 2026-11-28: 2.9-4.2M events/s against 2.3-2.7M decoding in turn; before the hand-back, a
    /// second core read slower than one). `forEachEventView` is the fast scan.
    public func forEachEvent(origin: ReplicaID, from: Seq = Seq(1), _ body: (Event) throws -> Bool) throws {
        try forEachEvent(origin: origin, from: from, pipelined: LogAppender.cores > 1, body)
    }

    /// As `forEachEvent`; `pipelined` false decodes every frame on the calling thread (one core).
    /// `lendingAsBytes` false lends each event by moving it out of its batch and back, the way
    /// taken were an `Event` not to move as its bytes (`handOut`; tests take it on purpose).
    package func forEachEvent(origin: ReplicaID, from: Seq, pipelined: Bool, lendingAsBytes: Bool = lendsAsBytes,
                              _ body: (Event) throws -> Bool) throws {
        let asBytes = lendingAsBytes && Self.lendsAsBytes
        guard pipelined else { return try forEachEventInTurn(origin: origin, from: from, asBytes: asBytes, body) }
        try forEachChecked(origin: origin, from: from, pipelined: pipelined,
                           check: { (d: FrameDecoder, p: UnsafeRawBufferPointer, h: FrameHeader) throws(FrameDecodeError) -> [Event] in
                               try d.events(of: p, header: h)
                           }) { (events: inout [Event]) in try Self.handOut(&events, from: from, asBytes: asBytes, body) }
    }

    /// Calls `body` with each event of `events` from seq `from` on, until it returns false.
    ///
    /// Each event is lent to the call as a copy of its bytes in a slot of this thread's; the batch
    /// is only read. Its events keep their references, which the batch alone releases, once, on
    /// the thread that made it (`CheckBatch.handBack`). `body` borrows the event, so the slot's
    /// bytes are the same after the call, and the slot is let go without being deinitialized.
    /// This needs an `Event` to move as its bytes (nothing whose address matters), as arrays,
    /// strings and UUIDs do (`lendsAsBytes`); were it not to (or with `asBytes` false), each event
    /// is moved out of the batch for the call and back after it.
    /// - Passing an element of the batch's buffer copied the event: a retain and a release of its
    ///   fields and actor, about a quarter of the reading thread's time (2026-11-29).
    /// - Moving it out and back wrote each event into the batch, memory the worker that decoded
    ///   it had just written: each line went to this core and back (2-4% of the read's rate).
    @inline(__always)
    private static func handOut(_ events: inout [Event], from: Seq, asBytes: Bool, _ body: (Event) throws -> Bool) throws -> Bool {
        // Calls `body` with the event at `slot`, moved out for the call and put back after it.
        @inline(__always)
        func lend(_ slot: UnsafeMutablePointer<Event>) throws -> Bool {
            let e = slot.move()
            let more: Bool
            do { more = try body(e) } catch { slot.initialize(to: consume e); throw error }
            slot.initialize(to: consume e)
            return more
        }
        guard asBytes else {
            return try events.withUnsafeMutableBufferPointer { p in
                guard let base = p.baseAddress else { return true }
                for i in 0..<p.count where base[i].seq >= from {
                    if try !lend(base + i) { return false }
                }
                return true
            }
        }
        return try events.withUnsafeBufferPointer { p in
            guard let base = p.baseAddress else { return true }
            return try withUnsafeTemporaryAllocation(of: Event.self, capacity: 1) { scratch in
                let slot = scratch.baseAddress!
                for i in 0..<p.count where base[i].seq >= from {
                    // A byte copy of a value that is not trivial, knowingly: the copy owns nothing
                    // (it is never deinitialized); the batch keeps the references. A whole stride:
                    // the batch's slots and the scratch hold one each.
                    UnsafeMutableRawPointer(slot).copyMemory(from: base + i, byteCount: MemoryLayout<Event>.stride)
                    if try !lend(slot) { return false }
                }
                return true
            }
        }
    }

    /// Whether an event can be lent as a copy of its bytes (`handOut`): known when compiled.
    static var lendsAsBytes: Bool { _isBitwiseTakable(Event.self) }

    /// `forEachEvent` on this thread alone: each frame decoded straight from the bytes read, into
    /// one batch kept for the whole read (no copy of the frame, no new batch per frame), and its
    /// events handed out once all of them decoded, as `forEachChecked` hands out a frame's.
    private func forEachEventInTurn(origin: ReplicaID, from: Seq, asBytes: Bool, _ body: (Event) throws -> Bool) throws {
        let decoder = ReadDecoder(keysOf: store)
        var events: [Event] = []
        // An error of `body` or of a record ends the read at once (not as damage the scan found).
        var handOutError: (any Error)?
        try forEachFrame(origin: origin, from: from) { h, bytes in
            // The frame's events live until handed out, not until the next frame is read.
            defer { events.removeAll(keepingCapacity: true) }
            do throws(FrameDecodeError) {
                try decoder.made.events(of: bytes, header: h, into: &events)
            } catch {
                do { return try Self.readsOn(after: error, header: h) } catch { handOutError = error; return false }
            }
            do {
                if try !Self.handOut(&events, from: from, asBytes: asBytes, body) { return false }
            } catch {
                handOutError = error
                return false
            }
            return true
        }
        if let handOutError { throw handOutError }
    }

    /// What a read does after a frame whose CRC and link are good does not decode: true to read on
    /// past it, false to stop there; throws when the frame is damage.
    private static func readsOn(after error: FrameDecodeError, header h: FrameHeader) throws -> Bool {
        switch error {
        case .unreadable:
            // Signed by its origin and intact, but sealed wrong by its writer: skipped
            // (never read as data; `evctl verify` names it), the log reads on.
            return true
        case .locked:
            // A share's sealed frame this replica holds no key for: the end of what it
            // can read of this log, for now (a key that arrives later reads on from here).
            return false
        default:
            throw LogError(.corrupt, "read", "frame does not decode: \(error.message)", seqs: h.baseSeq.rawValue...h.lastSeq.rawValue)
        }
    }

    /// Calls `body` with a view of each event of `origin` from seq `from` on, until it returns
    /// false. Every frame is checked as `forEachEvent` checks it (checksum, hash chain, every
    /// record) before any of its events is handed out; the events' fields are decoded only when
    /// `body` asks (`EventView.event()`), so a scan that reads ids, entities and clocks costs
    /// little more than reading and decompressing the log.
    public func forEachEventView(origin: ReplicaID, from: Seq = Seq(1), _ body: (EventView) throws -> Bool) throws {
        try forEachEventView(origin: origin, from: from, pipelined: LogAppender.cores > 1, body)
    }

    func forEachEventView(origin: ReplicaID, from: Seq, pipelined: Bool, _ body: (EventView) throws -> Bool) throws {
        try forEachChecked(origin: origin, from: from, pipelined: pipelined,
                           check: { (d: FrameDecoder, p: UnsafeRawBufferPointer, h: FrameHeader) throws(FrameDecodeError) -> FrameViews in
                               try d.views(of: p, header: h)
                           }) { (views: inout FrameViews) in try views.forEach(from: from, body) }
    }

    /// Reads the frames of `origin` from `from`, checks each with `check` (its records: the
    /// checksum and link are checked here), and hands what `check` made to `deliver`, in order,
    /// until it returns false.
    private func forEachChecked<T: Sendable>(origin: ReplicaID, from: Seq, pipelined: Bool,
                                             check: @escaping @Sendable (FrameDecoder, UnsafeRawBufferPointer, FrameHeader) throws(FrameDecodeError) -> T,
                                             deliver hand: (inout T) throws -> Bool) throws {
        // Two stages, overlapped when the machine has a second core: this thread reads frames
        // and checks their checksums and hash links, in order; a worker decompresses a batch of
        // them and checks their records while this thread reads the next batch, which then helps
        // with what is left of it; this thread hands out the batch's views, in order. A batch is
        // bounded in frames and bytes, and at most one is being checked while another is read.
        // Batches start at one frame and double up to 16: a read that stops early (a limit, a
        // search) decodes at most about twice what it hands out.
        var size = 1
        // Shares' content keys, for sealed frames, asked of the store's keyring at each one met
        // (a damaged key file reads as no keys: such frames are then the end of what this replica
        // can read).
        let keys = store
        // This thread's decoder, kept for the whole read, not made again per batch.
        let decoder = ReadDecoder(keysOf: keys)
        var batch = CheckBatch(check, keys: keys, caller: decoder)
        var inFlight: CheckBatch<T>?
        var stopped = false
        func deliver(_ done: CheckBatch<T>) throws {
            done.wait()
            // What the worker made, once handed out, is freed on the worker's queue, right after
            // what it is checking: memory freed by the thread that allocated it goes back to that
            // thread's free lists, while freeing another thread's takes the lock of its arena,
            // which the two threads then contend for (decoded events are many small allocations).
            defer { done.handBack() }
            for i in done.checked.indices {
                let more = try done.handOut(i, hand) { error in try Self.readsOn(after: error, header: done.frames[i].header) }
                if !more { stopped = true; return }
            }
        }
        func ship() throws {
            let full = batch
            batch = CheckBatch(check, keys: keys, caller: decoder)
            // The first batch (one frame) is checked here and handed out at once: a read of one
            // frame (the catch-up after an append, a tip) gains nothing from a worker but a
            // hand-off to it.
            let here = !pipelined || size == 1
            size = min(16, size * 2)
            if here { full.run() } else { full.start() }
            let previous = inFlight
            inFlight = full  // waited for by the `defer` below if handing out `previous` throws
            if let previous { try deliver(previous) }
            if here || stopped {
                inFlight = nil
                if stopped { full.abandon() } else { try deliver(full) }
            }
        }
        defer { inFlight?.abandon() }  // no frame of this read is checked after it returns (a worker that starts late finds none left)
        // What came before the end of the log (or damage in it) is handed out first, as a
        // reader one frame at a time would.
        func finish() throws {
            if !stopped, let previous = inFlight { inFlight = nil; try deliver(previous) }
            if !stopped, !batch.frames.isEmpty { batch.run(); try deliver(batch) }
        }
        // An error of `body` or of a record ends the read at once; only damage the scan finds
        // lets what came before it be handed out.
        var handOutError: (any Error)?
        do {
            try forEachFrame(origin: origin, from: from) { h, bytes in
                batch.frames.append((h, Array(bytes)))
                batch.bytes += bytes.count
                batch.rawBytes += Int(h.rawBytes)
                // On one thread nothing is gained by reading ahead: each frame is handed out as read.
                // A batch is bounded in the bytes it holds and in what they decode to (a frame's
                // payload may decompress to 16 MiB).
                guard batch.frames.count >= (pipelined ? size : 1) || batch.bytes >= 2 << 20 || batch.rawBytes >= 8 << 20 else { return true }
                do { try ship() } catch { handOutError = error; return false }
                return !stopped
            }
        } catch {
            try finish()
            if stopped { return }  // the body stopped before the damage, as it would one frame at a time
            throw error
        }
        if let handOutError { throw handOutError }
        try finish()
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
        try tipAndFramesEnd(origin: origin, hashing: hashing).tip
    }

    /// `tip`, and where the committed frames of `origin`'s newest segment end (bytes from the
    /// start of that file; 0 without a segment): short of the file's size by the zero fill a
    /// writer keeps past its last frame while it is open (docs/FORMAT.md, "Zero fill"), and by
    /// an append still being written or a torn tail.
    /// - Parameter listed: the origin's segments as the caller listed them, so that the end is
    ///   that of the segment the caller takes as the newest even if a writer starts another
    ///   meanwhile (listed here when nil).
    func tipAndFramesEnd(origin: ReplicaID, hashing: Bool = true, segments listed: [Seq]? = nil) throws -> (tip: LogTip, framesEnd: Int) {
        let dir = store.directory(origin)
        let segments = try listed ?? dir.segments(op: "read")
        guard let newest = segments.last else { return (try dir.loadFloor() ?? .empty, 0) }
        var tip = LogTip.empty
        var from = newest
        // The frames past the index start where it ends (those the walk passes before `from`
        // are not handed to the body, which counts the rest).
        var end = SegmentHeader.size
        if let size = FileIO.size(of: dir.segmentPath(newest)), let idx = dir.loadIndex(newest, segmentSize: size) {
            tip = LogTip(lastSeq: idx.lastSeq, lastHLC: idx.lastHLC, lastHash: idx.lastHash)
            from = idx.lastSeq.next
            end = idx.coveredBytes
            if idx.coveredBytes == size { return (tip, end) }
        }
        try forEachFrame(origin: origin, from: from) { h, bytes in
            tip = LogTip(lastSeq: h.lastSeq, lastHLC: h.lastHLC, lastHash: hashing ? FrameHash.of(bytes) : tip.lastHash)
            end += h.totalBytes
            return true
        }
        if tip.lastSeq.rawValue == 0 && newest.rawValue > 1 {
            // An empty newest segment: the tip is where the one before it (or the floor) ends,
            // its clock and hash included (a cursor needs the seq; a compare of tips, the hash).
            if segments.count == 1, let floor = try dir.loadFloor() { return (floor, end) }
            if segments.count > 1, let before = try? tipAndFramesEnd(origin: origin, hashing: hashing, segments: Array(segments.dropLast())).tip,
               before.lastSeq.rawValue == newest.rawValue - 1 {
                return (before, end)
            }
            tip.lastSeq = Seq(newest.rawValue - 1)
        }
        return (tip, end)
    }
}

/// Frames read and linked, whose records are checked (`forEachEvent`, `forEachEventView`): by a
/// worker while the reader reads the next batch, and by the reader too once it has. Frames are
/// claimed one at a time, so neither waits while the other has work, and the reader waits only
/// for frames a worker is checking, never for a worker to start (a worker that starts late finds
/// nothing left and touches nothing).
private final class CheckBatch<T: Sendable>: @unchecked Sendable {
    // `frames` is written before `start` and only read after; each slot is written by the one
    // thread that claimed it, and read once all are finished.
    var frames: [(header: FrameHeader, bytes: [UInt8])] = []
    var bytes = 0
    /// The frames' payload bytes once decompressed (`FrameHeader.rawBytes`).
    var rawBytes = 0
    private(set) var checked: [Result<T, FrameDecodeError>] = []
    private let check: @Sendable (FrameDecoder, UnsafeRawBufferPointer, FrameHeader) throws(FrameDecodeError) -> T
    private let progress = NSCondition()
    private var claimed = 0, finished = 0  // under `progress`
    private typealias Slots = UnsafeMutableBufferPointer<Result<T, FrameDecodeError>>
    private var slots: Slots?
    /// Per frame: whether the worker checked it (written by the one thread that claimed it).
    private var byWorker: UnsafeMutableBufferPointer<Bool>?
    /// Which frames the worker checked, collected with `checked`.
    private var checkedByWorker: [Bool] = []

    /// What a worker made, handed back to be freed on the worker's queue.
    private final class Garbage: @unchecked Sendable {
        // Unchecked: filled by the reading thread, then handed to the worker, which alone empties it.
        var items: [Result<T, FrameDecodeError>] = []
    }

    private let keys: Store
    /// The reading thread's decoder (used only by `run` and `wait`, on that thread); a worker
    /// makes its own.
    private let caller: ReadDecoder

    init(_ check: @escaping @Sendable (FrameDecoder, UnsafeRawBufferPointer, FrameHeader) throws(FrameDecodeError) -> T, keys: Store,
         caller: ReadDecoder) {
        self.check = check
        self.keys = keys
        self.caller = caller
    }

    /// Checks frames not yet claimed, on the calling thread, until none is left; `decoder` is the
    /// thread's own, if it has one.
    private func work(_ out: Slots, decoder: FrameDecoder? = nil) {
        let isWorker = decoder == nil
        var decoder = decoder
        while true {
            progress.lock()
            let i = claimed
            if i < frames.count { claimed += 1 }
            progress.unlock()
            guard i < frames.count else { return }
            let d = decoder ?? FrameDecoder(keysOf: keys)
            decoder = d
            let f = frames[i]
            out[i] = f.bytes.withUnsafeBytes { p in Result { () throws(FrameDecodeError) in try check(d, p, f.header) } }
            byWorker?[i] = isWorker
            progress.lock()
            finished += 1
            if finished == frames.count { progress.broadcast() }
            progress.unlock()
        }
    }

    private func prepare() -> Slots {
        let out = Slots.allocate(capacity: frames.count)
        out.initialize(repeating: .failure(.invalid("not checked")))
        slots = out
        let flags = UnsafeMutableBufferPointer<Bool>.allocate(capacity: frames.count)
        flags.initialize(repeating: false)
        byWorker = flags
        return out
    }

    /// Checks every frame here, now.
    func run() {
        work(prepare(), decoder: caller.made)
        collect()
    }

    /// Starts a worker on the frames.
    func start() {
        nonisolated(unsafe) let out = prepare()
        checkQueue.async { self.work(out) }
    }

    /// Hands frame `i`'s result to `success` (what was made, owned here for the call: `hand` may
    /// work in it in place, without copying it) or to `failure`, and keeps it for `handBack`.
    func handOut(_ i: Int, _ success: (inout T) throws -> Bool, failure: (FrameDecodeError) throws -> Bool) throws -> Bool {
        let placeholder = Result<T, FrameDecodeError>.failure(.invalid("being handed out"))
        var taken = placeholder
        swap(&taken, &checked[i])
        if case .failure(let error) = taken {
            checked[i] = taken
            return try failure(error)
        }
        guard case .success(var made) = taken else { preconditionFailure("a result is a success or a failure") }
        taken = placeholder  // `made` holds the only reference: `success` may change it in place
        defer { checked[i] = .success(made) }
        return try success(&made)
    }

    /// Once this batch is handed out: drops this thread's share of what was made (what it
    /// checked itself), and has the worker's queue free the worker's share.
    func handBack() {
        var garbage: Garbage?
        for (i, result) in checked.enumerated() where i < checkedByWorker.count && checkedByWorker[i] {
            if garbage == nil { garbage = Garbage() }
            garbage?.items.append(result)
        }
        checked.removeAll()
        if let garbage { checkQueue.async { garbage.items.removeAll() } }
    }

    /// Checks what is left, waits for the frames a worker is still checking, and collects the
    /// results into `checked` (at once for a batch `run` here).
    func wait() {
        guard let out = slots else { return }
        work(out, decoder: caller.made)
        progress.lock()
        while finished < frames.count { progress.wait() }
        progress.unlock()
        collect()
    }

    /// Claims what is left without checking it and waits for the frames a worker is still
    /// checking (a read that ended: nothing of this batch is handed out).
    func abandon() {
        guard slots != nil else { return }
        progress.lock()
        finished += frames.count - claimed
        claimed = frames.count
        while finished < frames.count { progress.wait() }
        progress.unlock()
        collect()
    }

    private func collect() {
        guard let out = slots else { return }
        checked = Array(out)
        out.deinitialize().deallocate()
        slots = nil
        if let flags = byWorker {
            checkedByWorker = Array(flags)
            flags.deallocate()
            byWorker = nil
        }
    }
}

/// The decoder of one read's own thread, made when the read meets its first frame (a read at the
/// tip makes none) and kept to its end: its LZ4 context and payload buffer are made once (one
/// per frame, freeing a payload buffer each time, made glibc fold its free lists every frame).
private final class ReadDecoder {
    private let store: Store
    private var decoder: FrameDecoder?

    init(keysOf store: Store) { self.store = store }

    var made: FrameDecoder {
        if let decoder { return decoder }
        let d = FrameDecoder(keysOf: store)
        decoder = d
        return d
    }
}

/// Where batches are checked beside their readers: one serial queue (given a thread of its own).
/// Readers running at once share it, and each checks its own frames too, so none waits on another
/// for long; one warm thread measured faster than one per core taken in turn. (Internal for
/// tests, which wait on it for what a read hands back to be freed.)
let checkQueue = DispatchQueue(label: "logbook.read.check")
