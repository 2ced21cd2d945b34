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

    /// Opens the newest segment left by recovery, or creates the origin's first one.
    init(dir: OriginDirectory, recovered: RecoveredOrigin?) throws {
        self.dir = dir
        segments = recovered?.segments ?? []
        // A log bootstrapped from a snapshot starts past its floor, linked to the floor's hash.
        let floor = segments.isEmpty ? try dir.loadFloor() ?? .empty : .empty
        active = recovered?.active ?? Recovery.emptyIndex(dir, floor.lastSeq.next, floor.lastHash)
        if segments.isEmpty { active.lastHLC = floor.lastHLC }
        committed = active
        indexWrittenAt = active.coveredBytes
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

    deinit { close() }

    var tip: LogTip { LogTip(lastSeq: active.lastSeq, lastHLC: active.lastHLC, lastHash: active.lastHash) }
    private var path: String { dir.segmentPath(active.firstSeq) }

    /// Writes one whole frame at the end of the newest segment, reads it back and compares.
    /// `hash` is the frame's SHA-256 when the caller already computed it.
    func write(_ bytes: [UInt8], header: FrameHeader, hash: FrameHash? = nil, op: String) throws {
        let offset = active.coveredBytes
        try bytes.withUnsafeBytes { try FileIO.pwriteAll(fd, $0, at: offset, path: path, op: op) }
        if readBack.count < bytes.count { readBack = [UInt8](repeating: 0, count: bytes.count) }
        try readBack.withUnsafeMutableBytes {
            try Self.checkReadBack(fd: fd, bytes: bytes, offset: offset, into: $0, path: path, header: header, op: op)
        }
        active.add(header, at: offset, hash: hash ?? bytes.withUnsafeBytes { FrameHash.of($0) })
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
        let offset = active.coveredBytes
        try bytes.withUnsafeBytes { try FileIO.pwriteAll(fd, $0, at: offset, path: path, op: op) }
        let check = ClaimedWork { [fd, path] () throws -> FrameHash in
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 16)
            defer { buffer.deallocate() }
            try SegmentWriter.checkReadBack(fd: fd, bytes: bytes, offset: offset, into: buffer, path: path, header: header, op: op)
            return bytes.withUnsafeBytes { FrameHash.of($0) }
        }
        DispatchQueue.global(qos: .userInitiated).async { check.runIfUnclaimed() }
        let synced = Result { try FileIO.fdatasync(fd, path: path, op: op) }
        let hash = try check.result().get()
        try synced.get()
        active.add(header, at: offset, hash: hash)
        committed = active
        try writeDurableMark(op: op)
    }

    /// Writes back the whole filesystem this log is on (`Sys.syncFilesystem`): a way to make
    /// several logs' `sync` cheaper, never a durability answer (its result is not looked at).
    func syncFilesystem() {
        _ = Sys.syncFilesystem(fd)
    }

    /// Makes every frame written durable, then records the committed end in `DURABLE`, so
    /// readers ship only frames that are on disk (a frame shipped and then lost to a crash
    /// here would have its seq reused by a later append).
    func sync(op: String) throws {
        try FileIO.fdatasync(fd, path: path, op: op)
        try writeDurableMark(op: op)
    }

    /// Records the committed end in `DURABLE` (every frame up to it must be on disk).
    private func writeDurableMark(op: String) throws {
        if let m = markAhead {
            guard committed.lastSeq >= m else { return }
            markAhead = nil
        }
        if durableFD < 0 {
            durableFD = try FileIO.open(dir.durablePath, O_RDWR | O_CREAT, op: op)
        }
        try OriginDirectory.durableBytes(committed.lastSeq).withUnsafeBytes {
            try FileIO.pwriteAll(durableFD, $0, at: 0, path: dir.durablePath, op: op)
        }
    }

    /// Where the writer stands: everything written, and the committed part of it.
    struct Mark {
        var active: SegmentIndex
        var committed: SegmentIndex
    }
    var mark: Mark { Mark(active: active, committed: committed) }

    /// Cuts the newest segment back to `mark` (frames written since are dropped).
    func truncate(to mark: Mark, op: String) throws {
        // By the file's size, not only by what was recorded: a write that failed part-way
        // recorded nothing but may have left bytes.
        if try active.coveredBytes != mark.active.coveredBytes || FileIO.fileSize(fd, path: path, op: op) != mark.active.coveredBytes {
            try FileIO.truncate(fd, to: mark.active.coveredBytes, path: path, op: op)
            try FileIO.fsync(fd, path: path, op: op)
        }
        active = mark.active
        committed = mark.committed
    }

    /// Seals the newest segment and starts the next one once it has reached `bytesMax`
    /// (only at an append boundary: never while an append is open, so an append never spans
    /// two segments).
    func rollIfFull(bytesMax: Int) throws {
        guard !hasOpenAppend, active.coveredBytes >= bytesMax && active.lastSeq >= active.firstSeq else { return }
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
        fd = try FileIO.open(path, O_RDWR, op: "create segment")
        segments.append(first)
        let lastHLC = active.lastHLC
        active = Recovery.emptyIndex(dir, first, previous)
        active.lastHLC = lastHLC
        committed = active
        indexWrittenAt = 0
    }
}
