import EventLog
import Foundation
import Projections

/// A file of frames for carrying logs on removable media or shared folders: frames verbatim, as
/// their authors wrote them, so the receiver verifies each one (checksum, chain, contiguity).
///
/// Layout (little-endian): `LBKB`, version 1, 3 reserved bytes; then per frame a u32 length and
/// the frame; then the trailer `LBKE`, u64 frame count, and a CRC-32C of every byte before the
/// trailer. A bundle cut short or damaged anywhere is refused whole before anything is written.
public enum FrameBundle {
    static let magic: [UInt8] = Array("LBKB".utf8)
    static let trailerMagic: [UInt8] = Array("LBKE".utf8)
    static let version: UInt8 = 1

    /// What an export wrote.
    public struct ExportResult: Sendable {
        public var frames = 0
        public var events = 0
        public var bytes = 0
        /// The cursor a receiver holds after importing this bundle on top of `since`.
        public var cursor: ReplicationCursor
    }

    /// Writes a bundle of everything `store` holds past `since` (everything when `since` is empty),
    /// atomically (temp file, fsync, rename), streaming: frames go from the log to the file in
    /// chunks, whatever the size of the log.
    public static func export(store: Store, since: ReplicationCursor = .empty, to path: String) throws -> ExportResult {
        let tmp = path + ".tmp"
        try? FileManager.default.removeItem(atPath: tmp)
        guard FileManager.default.createFile(atPath: tmp, contents: nil), let out = FileHandle(forWritingAtPath: tmp) else {
            throw BundleError("cannot create \(tmp)", .io)
        }
        var result = ExportResult(cursor: since)
        do {
            var writer = ChunkWriter(out)
            var crc = CRC32C()
            func put(_ b: UnsafeRawBufferPointer) throws {
                crc.update(b)
                try writer.write(b)
            }
            try (magic + [version, 0, 0, 0]).withUnsafeBytes { try put($0) }
            try forEachFrame(of: store, since: since) { bytes, h in
                var len = UInt32(bytes.count).littleEndian
                try withUnsafeBytes(of: &len) { try put($0) }
                try put(bytes)
                result.frames += 1
                result.events += Int(h.count)
                result.cursor[h.origin] = max(result.cursor[h.origin], h.lastSeq)
            }
            var trailer = trailerMagic
            withUnsafeBytes(of: UInt64(result.frames).littleEndian) { trailer += $0 }
            withUnsafeBytes(of: crc.final.littleEndian) { trailer += $0 }
            try trailer.withUnsafeBytes { try writer.write($0) }
            try writer.flush()
            result.bytes = writer.written
            try out.close()
        } catch {
            try? out.close()
            try? FileManager.default.removeItem(atPath: tmp)
            throw error
        }
        try DurableFile.publish(tmp, as: path, op: "export")
        return result
    }

    /// Every committed frame `store` holds past `since`, handed over without copying (the bytes
    /// are valid only during the call).
    static func forEachFrame(of store: Store, since: ReplicationCursor, _ body: (UnsafeRawBufferPointer, FrameHeader) throws -> Void) throws {
        let reader = LogReader(store: store)
        for origin in try store.origins() {
            try reader.requireHeld(origin: origin, past: since[origin])
            let from = since[origin].next
            let durable = reader.durable(origin: origin)
            try reader.forEachFrame(origin: origin, from: from) { h, bytes in
                if let durable, h.lastSeq > durable { return false }  // not on disk yet: not shipped
                if h.lastSeq >= from { try body(bytes, h) }
                return true
            }
        }
    }

    /// Checks a bundle whole without holding it in memory: framing, every frame length, the
    /// trailer's frame count and checksum.
    /// - Returns: the number of frames.
    /// - Throws: `BundleError` naming the byte offset of what is wrong.
    public static func check(_ path: String) throws -> Int {
        var count = 0
        try scan(path) { _ in count += 1 }
        return count
    }

    /// Reads a bundle's frames in batches of at most `framesMax` frames or about `bytesMax`
    /// bytes, after checking the whole file first (`check`), so a damaged bundle is refused
    /// before any batch is handed over.
    public static func forEachBatch(_ path: String, framesMax: Int = StoreSync.batchFramesMax, bytesMax: Int = StoreSync.batchBytesMax,
                                    _ body: ([[UInt8]]) throws -> Void) throws {
        _ = try check(path)
        var batch: [[UInt8]] = []
        var bytes = 0
        try scan(path) { frame in
            batch.append(frame)
            bytes += frame.count
            if batch.count >= framesMax || bytes >= bytesMax {
                try body(batch)
                batch.removeAll(keepingCapacity: true)
                bytes = 0
            }
        }
        if !batch.isEmpty { try body(batch) }
    }

    /// Reads and checks a whole bundle into memory (small bundles, tests).
    public static func read(_ path: String) throws -> [[UInt8]] {
        var frames: [[UInt8]] = []
        try forEachBatch(path) { frames += $0 }
        return frames
    }

    /// One pass over a bundle: its framing, each frame handed to `frame`, then the trailer
    /// (count and checksum). A pass that fails has handed over only frames before the fault.
    private static func scan(_ path: String, _ frame: ([UInt8]) throws -> Void) throws {
        // Only a regular file (a FIFO would block the import holding the writer lock), bounded.
        let opened: (fd: Int32, size: Int)
        do { opened = try ForeignFile.openRegular(path, bytesMax: Bounds.bundleFileBytesMax, op: "read bundle") } catch let e as LogError {
            throw BundleError("cannot read \(path): \(e.message)", .io)
        }
        let input = FileHandle(fileDescriptor: opened.fd, closeOnDealloc: true)
        defer { try? input.close() }
        let size = opened.size
        guard size >= 8 + 16 else { throw BundleError("\(path) is not a Logbook bundle (\(size) bytes is too short)") }
        var reader = ChunkReader(input)
        var crc = CRC32C()
        let head = try reader.read(8)
        guard Array(head[0..<4]) == magic else { throw BundleError("\(path) is not a Logbook bundle (bad magic at byte offset 0)") }
        guard head[4] == version else { throw BundleError("\(path): bundle version \(head[4]) is not supported", .unsupportedVersion) }
        crc.update(head)
        let t = size - 16
        var o = 8
        var frames: UInt64 = 0
        while o < t {
            guard o + 4 <= t else { throw BundleError("\(path): truncated frame length at byte offset \(o)") }
            let lenBytes = try reader.read(4)
            crc.update(lenBytes)
            let n = Int(lenBytes.withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) })
            guard n >= FrameHeader.size, n <= FrameHeader.size + FrameHeader.payloadBytesMax, o + 4 + n <= t else {
                throw BundleError("\(path): frame length \(n) at byte offset \(o) is out of range")
            }
            let bytes = try reader.read(n)
            crc.update(bytes)
            try frame(bytes)
            frames += 1
            o += 4 + n
        }
        let trailer = try reader.read(16)
        guard Array(trailer[0..<4]) == trailerMagic else {
            throw BundleError("\(path) is cut short or damaged: no trailer at byte offset \(t)")
        }
        let count = trailer[4..<12].withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
        let stored = trailer[12...].withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) }
        guard stored == crc.final else {
            throw BundleError(String(format: "%@ is damaged: checksum mismatch (stored %08x, computed %08x)", path, stored, crc.final))
        }
        guard count == frames else { throw BundleError("\(path): trailer says \(count) frames, found \(frames)") }
    }
}

/// Buffered sequential reads of a file, in exact amounts.
struct ChunkReader {
    let handle: FileHandle
    private var buffer: [UInt8] = []
    private var position = 0
    static let chunkBytes = 1 << 20

    init(_ handle: FileHandle) { self.handle = handle }

    mutating func read(_ n: Int) throws -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(n)
        while out.count < n {
            if position == buffer.count {
                guard let data = try handle.read(upToCount: Self.chunkBytes), !data.isEmpty else {
                    throw BundleError("the file ended early (it changed while being read?)")
                }
                buffer = [UInt8](data)
                position = 0
            }
            let take = min(n - out.count, buffer.count - position)
            out.append(contentsOf: buffer[position..<position + take])
            position += take
        }
        return out
    }
}

/// Buffered sequential writes to a file.
struct ChunkWriter {
    let handle: FileHandle
    private var buffer: [UInt8] = []
    private(set) var written = 0

    init(_ handle: FileHandle) {
        self.handle = handle
        buffer.reserveCapacity(ChunkReader.chunkBytes)
    }

    mutating func write(_ b: UnsafeRawBufferPointer) throws {
        buffer.append(contentsOf: b)
        written += b.count
        if buffer.count >= ChunkReader.chunkBytes { try flush() }
    }

    mutating func flush() throws {
        guard !buffer.isEmpty else { return }
        try handle.write(contentsOf: buffer)
        buffer.removeAll(keepingCapacity: true)
    }
}

/// A bundle that could not be read or written.
public struct BundleError: Error, CustomStringConvertible, Sendable {
    /// What went wrong.
    public enum Kind: Sendable, Equatable {
        /// The file could not be read or written.
        case io
        /// The file is no bundle, or a damaged one (the message names the byte offset).
        case damaged
        /// A bundle of a version this build does not read.
        case unsupportedVersion
    }
    public var kind: Kind
    public var message: String
    init(_ m: String, _ kind: Kind = .damaged) {
        message = m
        self.kind = kind
    }
    public var description: String { message }
}

/// Shipping between two stores reachable as paths (a shared folder, a mounted disk).
public enum StoreSync {
    /// Frames, and bytes, handed to `receive` per call: bounds memory. An append larger than a
    /// batch arrives over several calls (the receiver keeps it open until its last frame).
    public static let batchFramesMax = 1024
    public static let batchBytesMax = 32 << 20
    /// How long a transfer waits for another process's writer lock on the receiving store
    /// (another sync of the same store, a server between pushes) before it gives up.
    public static let lockWaitSeconds = 10.0

    /// Appends to `into` every frame `from` holds past it. `into` must be open for writing.
    public static func pull(from: Store, into appender: LogAppender) throws -> ReceiveResult {
        let since = try appender.store.cursor()
        var total = ReceiveResult()
        var batch: [[UInt8]] = []
        var bytes = 0
        func flush() throws {
            guard !batch.isEmpty else { return }
            total.add(try appender.receive(batch))
            batch.removeAll(keepingCapacity: true)
            bytes = 0
        }
        try FrameBundle.forEachFrame(of: from, since: since) { frame, _ in
            batch.append(Array(frame))
            bytes += frame.count
            if batch.count >= batchFramesMax || bytes >= batchBytesMax { try flush() }
        }
        try flush()
        return total
    }

    /// Imports a bundle file: checked whole first (one streaming pass), then received in
    /// batches (a second pass); never held in memory whole.
    public static func importBundle(_ path: String, into appender: LogAppender) throws -> ReceiveResult {
        var total = ReceiveResult()
        try FrameBundle.forEachBatch(path) { total.add(try appender.receive($0)) }
        return total
    }

    /// Sends a peer's store reached by path everything `source` holds past it: takes the peer's
    /// writer lock, receives the frames into its logs (verified as from any peer), and closes it.
    /// Nothing else of the peer is opened or run: not its projection, not its event-id index, no
    /// SQLite file at all (its owner catches them up from the log at its next open). See
    /// docs/SECURITY.md, "Stores on a shared path".
    /// - Parameters:
    ///   - recovered: told what recovery did when the peer's logs were opened.
    ///   - lockWait: how long to wait for the peer's writer lock.
    public static func ship(from source: Store, toPeer destination: Store, recovered: ((RecoveryReport) -> Void)? = nil,
                            lockWait: Double = lockWaitSeconds) throws -> ReceiveResult {
        let appender = try retryingWhileLocked(upTo: lockWait) { try LogAppender.receivingForPeer(destination) }
        defer { try? appender.close() }
        recovered?(appender.recovery)
        let r = try pull(from: source, into: appender)
        try appender.close()
        return r
    }

    /// Opens `destination` for writing, imports a bundle into it, projects, and closes it.
    public static func importBundle(_ path: String, to destination: Store, recovered: ((RecoveryReport) -> Void)? = nil,
                                    progress: ((Int, Int) -> Void)? = nil) throws -> ReceiveResult {
        try receiving(into: destination, recovered: recovered, progress: progress) { try importBundle(path, into: $0) }
    }

    private static func receiving(into destination: Store, recovered: ((RecoveryReport) -> Void)?, progress: ((Int, Int) -> Void)?,
                                  _ body: (LogAppender) throws -> ReceiveResult) throws -> ReceiveResult {
        let projected = try ProjectedStore.open(store: destination, waitingUpTo: lockWaitSeconds)
        defer { try? projected.close() }
        recovered?(projected.appender.recovery)
        let r = try body(projected.appender)
        try projected.projection.catchUp(progress: progress)
        return r
    }
}
