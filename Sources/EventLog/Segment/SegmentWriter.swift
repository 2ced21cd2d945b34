import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The writable end of one origin's log: its newest segment, kept open, and that segment's
/// in-memory index. Frames are written at the end, read back and compared; `sync` makes them
/// durable. Used by `LogAppender` for the store's own origin and for each origin it receives.
/// Not thread-safe: owned by the appender.
final class SegmentWriter {
    let dir: OriginDirectory
    private(set) var segments: [Seq]
    private var fd: Int32 = -1
    /// Index of the frames in the newest segment (covers every frame written, committed or not).
    /// Unchecked: the appender that owns the writer reads it for every event it adds.
    @exclusivity(unchecked) var active: SegmentIndex
    /// `active` as it was after the last frame that ends an append: what readers see, and what
    /// the index file records. Frames past it belong to an append still open (a local append in
    /// progress, or a received append whose last frame has not arrived yet).
    private(set) var committed: SegmentIndex
    /// True while frames of an unfinished append sit past `committed`.
    var hasOpenAppend: Bool { active.coveredBytes != committed.coveredBytes }
    private var indexWrittenAt: Int
    private var readBack: [UInt8] = []
    /// `DURABLE` of this origin, open for rewriting after each fsync.
    private var durableFD: Int32 = -1
    /// When its appender last used it (to close the least recently used).
    var lastUse: UInt64 = 0
    /// Whether zeros are kept written past the last frame (`fillAhead`).
    private let fillsAhead: Bool
    /// The newest segment's size as this writer left it: past `active.coveredBytes`, zero fill.
    private var fileEnd: Int
    /// Set while a frame is being written and not yet recorded: a write that failed part-way
    /// may have left bytes past the frames (`truncate(to:)` cuts them).
    private var writing = false

    /// Opens the newest segment left by recovery, or creates the origin's first one. With
    /// `fillingAhead`, the writer keeps zeros written past its last frame (`fillAhead`).
    init(dir: OriginDirectory, recovered: RecoveredOrigin?, fillingAhead: Bool = false) throws {
        self.dir = dir
        fillsAhead = fillingAhead
        segments = recovered?.segments ?? []
        // A log bootstrapped from a snapshot starts past its floor, linked to the floor's hash.
        let floor = segments.isEmpty ? try dir.loadFloor() ?? .empty : .empty
        active = recovered?.active ?? Recovery.emptyIndex(dir, floor.lastSeq.next, floor.lastHash)
        if segments.isEmpty { active.lastHLC = floor.lastHLC }
        committed = active
        indexWrittenAt = active.coveredBytes
        fileEnd = active.coveredBytes
        let created = segments.isEmpty
        if segments.isEmpty {
            try FileIO.makeDirectoryDurably(dir.path, op: "open")
            try createSegment(first: floor.lastSeq.next, previous: floor.lastHash)
        } else {
            let path = dir.segmentPath(active.firstSeq)
            fd = try FileIO.open(path, O_RDWR, op: "open")
            let size = try FileIO.fileSize(fd, path: path, op: "open")
            // Recovery (or a writer closed to save descriptors) left it at a frame boundary; a
            // file of another size was changed behind this writer's back.
            guard size == active.coveredBytes else {
                throw LogError(.io, "open", "the active segment is \(size) bytes where its writer left it at \(active.coveredBytes)", file: path,
                               hint: "close and reopen the store (recovery checks the segment)")
            }
        }
        // What recovery kept may have been written by a process that died before its fsync:
        // made durable now, then published as the durable mark — unless the mark says more was
        // durable than the log now holds: committed frames were lost (damage), and the mark is
        // kept as the evidence until the log is restored past it.
        if let mark = dir.loadDurable(), mark > committed.lastSeq {
            markAhead = mark
            durableOnFile = mark
            try FileIO.fdatasync(fd, path: path, op: "open")
        } else if created {
            // The segment was just made durable whole (written, synced, renamed, its folder
            // synced): another fdatasync would find nothing to write and still flush the device.
            try writeDurableMark(op: "open")
        } else {
            try sync(op: "open")
        }
    }

    /// Set when `DURABLE` records a seq past the end of the recovered log: frames this store
    /// once made durable are gone.
    private(set) var markAhead: Seq?

    /// What `DURABLE` holds as this writer last wrote it (or found it, when ahead of the log): a
    /// cut of frames it claims lowers it first (`truncate(to:)`).
    private var durableOnFile = Seq(0)
    /// Set when a cut had to lower `DURABLE` and could not: the seq to lower it to. Nothing is
    /// written until it is (`cutWhatFailed`): a frame written at seqs the mark still claims would
    /// be read as durable before its fdatasync.
    private var durableToLower: Seq?

    deinit { close() }

    var tip: LogTip { LogTip(lastSeq: active.lastSeq, lastHLC: active.lastHLC, lastHash: active.lastHash) }
    private var path: String { dir.segmentPath(active.firstSeq) }

    /// Writes one whole frame at the end of the newest segment, reads it back and compares.
    /// `hash` is the frame's SHA-256 when the caller already computed it.
    func write(_ bytes: [UInt8], header: FrameHeader, hash: FrameHash? = nil, op: String) throws {
        try cutWhatFailed(op: op)
        let offset = active.coveredBytes
        writing = true
        try bytes.withUnsafeBytes { try FileIO.pwriteAll(fd, $0, at: offset, path: path, op: op) }
        fillAhead(past: offset + bytes.count, frameBytes: bytes.count)
        if readBack.count < bytes.count { readBack = [UInt8](repeating: 0, count: bytes.count) }
        try readBack.withUnsafeMutableBytes {
            try Self.checkReadBack(fd: fd, bytes: bytes, offset: offset, into: $0, path: path, header: header, op: op)
        }
        active.add(header, at: offset, hash: hash ?? bytes.withUnsafeBytes { FrameHash.of($0) })
        writing = false
        if !header.continues { committed = active }
    }

    /// Reads back `bytes`, just written at `offset`, and compares: a write the kernel accepted
    /// but stored wrong is caught here.
    static func checkReadBack(fd: Int32, bytes: [UInt8], offset: Int, into readBack: UnsafeMutableRawBufferPointer,
                              path: String, header: FrameHeader, op: String) throws {
        let n = try FileIO.pread(fd, into: readBack, count: bytes.count, at: offset, path: path, op: op)
        let same = n == bytes.count && bytes.withUnsafeBytes { memcmp(readBack.baseAddress!, $0.baseAddress!, bytes.count) == 0 }
        guard same else {
            throw LogError(.io, op, "frame read back differs from what was written", file: path, offset: offset,
                           seqs: header.baseSeq.rawValue...header.lastSeq.rawValue, hint: "the disk or filesystem is failing")
        }
    }

    /// Frames at least this large, when they end an append, have their read-back check and hash
    /// done beside the fdatasync (`writeAndSync`); for smaller ones the handoff costs more.
    static let checkBesideSyncBytesMin = 16 << 10

    /// `write` then `sync`, for a frame that ends an append: once the frame is written, its
    /// read-back check and its hash (CPU work) run on another thread while this one waits for the
    /// disk in fdatasync. The frame is recorded, and the durable mark written, only once both
    /// have succeeded; on an error nothing is recorded (the caller cuts the frame off as after a
    /// failed `write`). The other thread is never waited for to start: if it has not taken the
    /// check by the time fdatasync returns, this thread does the check itself.
    func writeAndSync(_ bytes: [UInt8], header: FrameHeader, op: String) throws {
        guard bytes.count >= Self.checkBesideSyncBytesMin, !header.continues else {
            try write(bytes, header: header, op: op)
            try sync(op: op)
            return
        }
        try cutWhatFailed(op: op)
        let offset = active.coveredBytes
        writing = true
        try bytes.withUnsafeBytes { try FileIO.pwriteAll(fd, $0, at: offset, path: path, op: op) }
        fillAhead(past: offset + bytes.count, frameBytes: bytes.count)
        let check = ClaimedWork { [fd, path] () throws -> FrameHash in
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 16)
            defer { buffer.deallocate() }
            try SegmentWriter.checkReadBack(fd: fd, bytes: bytes, offset: offset, into: buffer, path: path, header: header, op: op)
            return bytes.withUnsafeBytes { FrameHash.of($0) }
        }
        DispatchQueue.global(qos: .userInitiated).async { check.runIfUnclaimed() }
        let synced = Result { try fdatasync(op: op) }
        let hash = try check.result().get()
        try synced.get()
        active.add(header, at: offset, hash: hash)
        writing = false
        committed = active
        try writeDurableMark(op: op)
    }

    /// Zeros written past a frame that reaches past the fill: eight times the frame's bytes, from
    /// 64 KiB (a few hundred single events) to 1 MiB (about 26 frames of 1,000 events). Readers
    /// at the end of the log read the fill to check that it is all zero, so it is kept in
    /// proportion to what is written.
    static let fillBytesMin = 64 << 10
    static let fillBytesMax = 1 << 20
    static func fillBytes(after frameBytes: Int) -> Int { frameBytes >= fillBytesMax / 8 ? fillBytesMax : max(fillBytesMin, frameBytes * 8) }
    /// A fill ends on this boundary, so its zeros are at most `fillBytesMax + fillAlignment`.
    static let fillAlignment = 4096
    static let fillSpanMax = fillBytesMax + fillAlignment
    /// Zeros to write from (read only).
    private static let zeros = [UInt8](repeating: 0, count: fillSpanMax)

    /// Keeps the file written with zeros past `end` (the end of a frame of `frameBytes` just
    /// written): when the frame reached past the fill, zeros are written from `end` to
    /// `fillBytes(after:)` further (to a 4 KiB boundary), made durable by the same fdatasync as
    /// the frame.
    ///
    /// Why: a frame written over blocks the file already holds, within its size, is made durable
    /// by writing its data alone; a frame that grows the file also has its inode (size, extents)
    /// written, a second write the device must finish before fdatasync returns (measured here:
    /// 123-151 µs against 197-261 µs per frame of 40 KB). Readers take zeros that run from a frame
    /// boundary to the end of the file as the end of the frames (`SegmentFile.frame`); the fill is cut when the segment is sealed, when
    /// the writer closes, and by recovery after a crash. A failure to write the fill (a full
    /// disk) only cuts it back: the frame is whole without it.
    private func fillAhead(past end: Int, frameBytes: Int) {
        guard fillsAhead, end > fileEnd else { return }
        let target = (end + Self.fillBytes(after: frameBytes) + Self.fillAlignment - 1) & ~(Self.fillAlignment - 1)
        let written: Void? = try? Self.zeros.withUnsafeBytes { zeros in
            try FileIO.pwriteAll(fd, UnsafeRawBufferPointer(rebasing: zeros[0..<(target - end)]), at: end, path: path, op: "fill")
        }
        if written != nil {
            fileEnd = target
        } else {
            // Nothing is lost without the fill; a partial one is cut back to the frame's end (or,
            // should that fail too, is taken to reach as far as it could: cut at the next chance).
            fileEnd = (try? FileIO.truncate(fd, to: end, path: path, op: "fill")) != nil ? end : max(fileEnd, target)
        }
    }

    /// Cuts the zero fill off the end of the newest segment (`durably`: and makes the cut durable).
    private func cutFill(durably: Bool, op: String) throws {
        guard fileEnd > active.coveredBytes else { return }
        try FileIO.truncate(fd, to: active.coveredBytes, path: path, op: op)
        if durably { try FileIO.fsync(fd, path: path, op: op) }
        fileEnd = active.coveredBytes
    }

    /// Writes back the whole filesystem this log is on (`Sys.syncFilesystem`): a way to make
    /// several logs' `sync` cheaper, never a durability answer (its result is not looked at).
    func syncFilesystem() {
        _ = Sys.syncFilesystem(fd)
    }

    /// Makes every frame written durable (`syncFrames`), then records the committed end in
    /// `DURABLE` (`raiseDurableMark`), so readers ship only frames that are on disk (a frame
    /// shipped and then lost to a crash here would have its seq reused by a later append). A
    /// receive of several origins calls the two apart: every origin's fdatasync first, then every
    /// mark, so that a failed fdatasync leaves no origin's mark raised over frames it then cuts.
    func sync(op: String) throws {
        try syncFrames(op: op)
        try raiseDurableMark(op: op)
    }

    /// The first half of `sync`: fdatasync of the frames written.
    func syncFrames(op: String) throws { try fdatasync(op: op) }

    /// The second half of `sync`, once `syncFrames` succeeded: `DURABLE` raised to the committed end.
    func raiseDurableMark(op: String) throws { try writeDurableMark(op: op) }

    private func fdatasync(op: String) throws {
        if syncsToFail > 0 {
            syncsToFail -= 1
            throw LogError(.io, op, "fdatasync failed (a fault a test asked for)", file: path)
        }
        try FileIO.fdatasync(fd, path: path, op: op)
    }

    /// Tests only: how many of the next fdatasyncs of frames, of the cuts of a failed write, and
    /// of the writes that lower `DURABLE` for a cut, fail as a failing disk's would.
    var syncsToFail = 0
    var cutsToFail = 0
    var durableLowersToFail = 0
    /// Tests only: how many of the next writes that raise `DURABLE` after an fdatasync fail (as
    /// if part-way: the mark is counted as possibly written).
    var durableRaisesToFail = 0

    /// Set when the cut of a failed write itself failed: the file may hold bytes past the last
    /// frame this writer knows of (a frame whose append failed, perhaps on disk). No frame is
    /// written after them: each write tries the cut again first, and so does
    /// closing (`cutWhatFailed`). Bytes that can never be cut stay on disk, and a reopen's
    /// recovery takes whole frames among them as any other.
    private(set) var cutFailure: LogError?

    /// True while a cut, or the lowering of `DURABLE` for one, failed and waits to be tried again
    /// (`cutWhatFailed`): such a writer is kept open (closing it would drop the retry).
    var owesARetry: Bool { cutFailure != nil || durableToLower != nil }

    /// Cuts the file to `bytes` (a test may ask this to fail: `cutsToFail`).
    private func cutFile(to bytes: Int, op: String) throws {
        if cutsToFail > 0 {
            cutsToFail -= 1
            throw LogError(.io, op, "ftruncate failed (a fault a test asked for)", file: path)
        }
        try FileIO.truncate(fd, to: bytes, path: path, op: op)
    }

    /// Tries again, durably, a lowering of `DURABLE` and a cut that failed (nothing to do when
    /// none did): before a frame is written (nothing is written after what it was to cut off, nor
    /// at seqs the mark claims, until it succeeds), at a segment's seal, and before a close.
    func cutWhatFailed(op: String) throws {
        if let seq = durableToLower {
            do {
                try lowerDurable(to: seq, op: op)
            } catch {
                throw LogError(.io, op, "the durable mark could not be lowered to seq \(seq) after a cut (\(error)): nothing is written to this origin until it is",
                               file: dir.durablePath, hint: "nothing was written; try again (the mark is tried again before each write and at close)")
            }
        }
        guard let failure = cutFailure else { return }
        do {
            try cutFile(to: active.coveredBytes, op: op)
            try FileIO.fsync(fd, path: path, op: op)
        } catch {
            throw LogError(.io, op, "the cut of a write that failed (\(failure.message)) failed again (\(error)): nothing is written after it until it succeeds",
                           file: path, offset: active.coveredBytes,
                           hint: "nothing was written; try again, or close and reopen the store (recovery checks the segment)")
        }
        fileEnd = active.coveredBytes
        writing = false
        cutFailure = nil
    }

    /// Records the committed end in `DURABLE` (every frame up to it must be on disk).
    private func writeDurableMark(op: String) throws {
        if let m = markAhead {
            guard committed.lastSeq >= m else { return }
            markAhead = nil
        }
        // Counted before it is written: a write that failed part-way may have left it.
        durableOnFile = committed.lastSeq
        if durableRaisesToFail > 0 {
            durableRaisesToFail -= 1
            throw LogError(.io, op, "write failed (a fault a test asked for)", file: dir.durablePath)
        }
        try writeDurable(committed.lastSeq, op: op)
    }

    private func writeDurable(_ seq: Seq, op: String) throws {
        if durableFD < 0 {
            durableFD = try FileIO.open(dir.durablePath, O_RDWR | O_CREAT, op: op)
        }
        try OriginDirectory.durableBytes(seq).withUnsafeBytes {
            try FileIO.pwriteAll(durableFD, $0, at: 0, path: dir.durablePath, op: op)
        }
    }

    /// Lowers `DURABLE` to `seq`, durably (unlike its rewrites after an fdatasync, which only
    /// raise it over frames already on disk: a lowered mark lost to a crash would come back past
    /// the log's end, read as committed frames lost). Until it succeeds, `durableToLower` holds it.
    private func lowerDurable(to seq: Seq, op: String) throws {
        durableToLower = seq
        if durableLowersToFail > 0 {
            durableLowersToFail -= 1
            throw LogError(.io, op, "write failed (a fault a test asked for)", file: dir.durablePath)
        }
        try writeDurable(seq, op: op)
        try FileIO.fdatasync(durableFD, path: dir.durablePath, op: op)
        durableOnFile = seq
        durableToLower = nil
    }

    /// Where the writer stands: everything written, the committed part of it, and its durable
    /// mark (as `DURABLE` holds it, and when that is ahead of the log).
    struct Mark {
        var active: SegmentIndex
        var committed: SegmentIndex
        var durable: Seq
        var markAhead: Seq?
    }
    var mark: Mark { Mark(active: active, committed: committed, durable: durableToLower ?? durableOnFile, markAhead: markAhead) }

    /// Cuts the newest segment back to `mark` (frames written since are dropped, and the zero
    /// fill with them).
    func truncate(to mark: Mark, op: String) throws {
        // `DURABLE` first, if it was raised over frames this cuts (an origin synced in a receive
        // whose next origin's sync failed): a mark past the log's end has readers take frames
        // written next at those seqs as durable before their fdatasync, and a reopen read it as
        // committed frames lost. Lowered durably before the cut, so a crash between the two
        // leaves it behind the log (a reopen syncs and raises it), never past it. Should that
        // fail, the cut goes on, its error is thrown after it, and nothing is written until the
        // mark is lowered.
        var lowerFailure: Error?
        if durableOnFile > mark.durable || durableToLower != nil {
            do { try lowerDurable(to: mark.durable, op: op) } catch { lowerFailure = error }
        }
        markAhead = mark.markAhead
        // By what was written, not only by what was recorded: a write that failed part-way
        // recorded nothing but may have left bytes; and by the file's size against what this
        // writer left it at. Nothing written: the file, and its fill, stay as they are (a
        // rollback of an append refused before its first frame costs nothing).
        let cut = try writing || active.coveredBytes != mark.active.coveredBytes || FileIO.fileSize(fd, path: path, op: op) != fileEnd
        if cut {
            do {
                try cutFile(to: mark.active.coveredBytes, op: op)
            } catch {
                // The file keeps what could not be cut. What the writer counts goes back to the
                // mark all the same (a frame whose append failed is never counted committed, nor
                // claimed by a mark), and it takes no more frames (`cutWhatFailed`).
                active = mark.active
                committed = mark.committed
                cutFailure = error as? LogError ?? LogError(.io, op, "\(error)", file: path)
                throw error
            }
            fileEnd = mark.active.coveredBytes
            writing = false
        }
        // What the writer knows of the file follows the cut at once (the sync may fail).
        active = mark.active
        committed = mark.committed
        if cut {
            try FileIO.fsync(fd, path: path, op: op)
            cutFailure = nil  // nothing was written since (`cutWhatFailed`): the same cut, durable
        }
        if let lowerFailure { throw lowerFailure }
    }

    /// Seals the newest segment and starts the next one once it has reached `bytesMax`
    /// (only at an append boundary: never while an append is open, so an append never spans
    /// two segments).
    func rollIfFull(bytesMax: Int) throws {
        guard !hasOpenAppend, active.coveredBytes >= bytesMax && active.lastSeq >= active.firstSeq else { return }
        try cutWhatFailed(op: "seal segment")
        // A sealed segment ends with its last frame: the cut is durable before the next begins.
        try cutFill(durably: true, op: "seal segment")
        try writeIndex()
        try createSegment(first: active.lastSeq.next, previous: active.lastHash)
    }

    /// Rewrites the index once enough has been appended since it was last written.
    func checkpointIndex(everyBytes: Int) throws {
        if active.coveredBytes - indexWrittenAt >= everyBytes { try writeIndex() }
    }

    /// Writes the index of the committed frames (an open append is never indexed: readers
    /// trust an index that covers the whole file as the end of the log).
    func writeIndex() throws {
        // Nothing to write when no frame was committed since it was last written (or opened).
        guard committed.coveredBytes > SegmentHeader.size, committed.firstSeq == active.firstSeq,
              committed.coveredBytes != indexWrittenAt else { return }
        try FileIO.writeAtomically(committed.encode(), to: dir.indexPath(committed.firstSeq), op: "write index", durable: false)
        indexWrittenAt = committed.coveredBytes
    }

    /// True when the index file lags what is committed (written at the next checkpoint or close).
    var indexStale: Bool {
        committed.coveredBytes > SegmentHeader.size && committed.firstSeq == active.firstSeq && committed.coveredBytes != indexWrittenAt
    }

    /// Says the index file holds only the header's worth (it was not written when this origin's
    /// writer was last closed), so `close` writes it.
    func indexNotWritten() { indexWrittenAt = SegmentHeader.size }

    /// What recovery would find of this origin now (no append open): to reopen it from after `close`.
    var parked: RecoveredOrigin {
        RecoveredOrigin(dir: dir, segments: segments, active: committed, tip: tip)
    }

    func close() {
        // A cut that failed is tried again (a writer without a fill, a received origin's, has
        // nothing else that would cut those bytes).
        if fd >= 0 { try? cutWhatFailed(op: "close") }
        // The fill is cut (a writer that opens the segment again finds it as it was left; one
        // that finds it uncut after a crash has recovery cut it).
        if fd >= 0 { try? cutFill(durably: false, op: "close") }
        if fd >= 0 { FileIO.close(fd) }
        fd = -1
        if durableFD >= 0 { FileIO.close(durableFD) }
        durableFD = -1
    }

    private func createSegment(first: Seq, previous: FrameHash) throws {
        let header = SegmentHeader(origin: dir.origin, firstSeq: first, previousHash: previous)
        let path = dir.segmentPath(first)
        try FileIO.writeAtomically(header.encode(), to: path, op: "create segment")
        if fd >= 0 { FileIO.close(fd) }
        fd = -1
        fd = try FileIO.open(path, O_RDWR, op: "create segment")
        segments.append(first)
        fileEnd = SegmentHeader.size
        let lastHLC = active.lastHLC
        active = Recovery.emptyIndex(dir, first, previous)
        active.lastHLC = lastHLC
        committed = active
        indexWrittenAt = 0
    }
}
