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

    /// Every committed frame `store` holds past `since`, per origin in seq order.
    /// - Throws: `TransferFailure.cursorExpired` when `since` lies below a floor here.
    public static func frames(of store: Store, since: ReplicationCursor, _ body: ([UInt8], FrameHeader) throws -> Void) throws {
        let reader = LogReader(store: store)
        for origin in try store.origins() {
            try reader.requireHeld(origin: origin, past: since[origin])
            let from = since[origin].next
            try reader.forEachFrame(origin: origin, from: from) { h, bytes in
                if h.lastSeq >= from { try body(Array(bytes), h) }
                return true
            }
        }
    }

    /// Writes a bundle of everything `store` holds past `since` (everything when `since` is empty),
    /// atomically (temp file, fsync, rename).
    public static func export(store: Store, since: ReplicationCursor = .empty, to path: String) throws -> ExportResult {
        var out = Data()
        out.append(contentsOf: magic)
        out.append(contentsOf: [version, 0, 0, 0])
        var result = ExportResult(cursor: since)
        try frames(of: store, since: since) { bytes, h in
            var len = UInt32(bytes.count).littleEndian
            withUnsafeBytes(of: &len) { out.append(contentsOf: $0) }
            out.append(contentsOf: bytes)
            result.frames += 1
            result.events += Int(h.count)
            result.cursor[h.origin] = max(result.cursor[h.origin], h.lastSeq)
        }
        let crc = CRC32C.checksum(out)
        out.append(contentsOf: trailerMagic)
        var count = UInt64(result.frames).littleEndian
        withUnsafeBytes(of: &count) { out.append(contentsOf: $0) }
        var c = crc.littleEndian
        withUnsafeBytes(of: &c) { out.append(contentsOf: $0) }
        result.bytes = out.count
        try DurableFile.write([UInt8](out), to: path, op: "export")
        return result
    }

    /// Reads and checks a bundle: framing, trailer, frame count and checksum.
    /// - Throws: `BundleError` naming the byte offset of what is wrong.
    public static func read(_ path: String) throws -> [[UInt8]] {
        guard let data = FileManager.default.contents(atPath: path) else { throw BundleError("cannot read \(path)") }
        let b = [UInt8](data)
        guard b.count >= 8 + 16, Array(b[0..<4]) == magic else { throw BundleError("\(path) is not a Logbook bundle (bad magic at byte offset 0)") }
        guard b[4] == version else { throw BundleError("\(path): bundle version \(b[4]) is not supported") }
        let t = b.count - 16
        guard Array(b[t..<t + 4]) == trailerMagic else {
            throw BundleError("\(path) is cut short or damaged: no trailer at byte offset \(t)")
        }
        let count = b[(t + 4)..<(t + 12)].withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
        let stored = b[(t + 12)...].withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) }
        let computed = b[..<t].withUnsafeBytes { CRC32C.checksum($0) }
        guard stored == computed else {
            throw BundleError(String(format: "%@ is damaged: checksum mismatch (stored %08x, computed %08x)", path, stored, computed))
        }
        var frames: [[UInt8]] = []
        var o = 8
        while o < t {
            guard o + 4 <= t else { throw BundleError("\(path): truncated frame length at byte offset \(o)") }
            let n = Int(b[o..<o + 4].withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) })
            o += 4
            guard n >= FrameHeader.size, n <= FrameHeader.size + FrameHeader.payloadBytesMax, o + n <= t else {
                throw BundleError("\(path): frame length \(n) at byte offset \(o - 4) is out of range")
            }
            frames.append(Array(b[o..<o + n]))
            o += n
        }
        guard UInt64(frames.count) == count else { throw BundleError("\(path): trailer says \(count) frames, found \(frames.count)") }
        return frames
    }
}

/// A bundle that could not be read or written.
public struct BundleError: Error, CustomStringConvertible, Sendable {
    public var message: String
    init(_ m: String) { message = m }
    public var description: String { message }
}

/// Shipping between two stores reachable as paths (a shared folder, a mounted disk).
public enum StoreSync {
    /// Frames handed to `receive` per call: bounds memory and keeps each call atomic.
    public static let batchFramesMax = 1024

    /// Appends to `into` every frame `from` holds past it. `into` must be open for writing.
    public static func pull(from: Store, into appender: LogAppender) throws -> ReceiveResult {
        let since = try appender.store.cursor()
        var total = ReceiveResult()
        var batch: [[UInt8]] = []
        func flush() throws {
            guard !batch.isEmpty else { return }
            total.add(try appender.receive(batch))
            batch.removeAll()
        }
        try FrameBundle.frames(of: from, since: since) { bytes, _ in
            batch.append(bytes)
            if batch.count >= batchFramesMax { try flush() }
        }
        try flush()
        return total
    }

    /// Imports a bundle file: checked whole first, then received in batches.
    public static func importBundle(_ path: String, into appender: LogAppender) throws -> ReceiveResult {
        let frames = try FrameBundle.read(path)
        var total = ReceiveResult()
        for chunk in stride(from: 0, to: frames.count, by: batchFramesMax) {
            total.add(try appender.receive(Array(frames[chunk..<min(chunk + batchFramesMax, frames.count)])))
        }
        return total
    }

    /// Opens `destination` for writing (taking its lock), receives everything `source` holds past
    /// it, projects what arrived, and closes it again.
    /// - Parameters:
    ///   - recovered: told what recovery did when `destination` was opened.
    ///   - progress: projection progress (events done, events to do).
    public static func ship(from source: Store, to destination: Store, recovered: ((RecoveryReport) -> Void)? = nil,
                            progress: ((Int, Int) -> Void)? = nil) throws -> ReceiveResult {
        try receiving(into: destination, recovered: recovered, progress: progress) { try pull(from: source, into: $0) }
    }

    /// Opens `destination` for writing, imports a bundle into it, projects, and closes it.
    public static func importBundle(_ path: String, to destination: Store, recovered: ((RecoveryReport) -> Void)? = nil,
                                    progress: ((Int, Int) -> Void)? = nil) throws -> ReceiveResult {
        try receiving(into: destination, recovered: recovered, progress: progress) { try importBundle(path, into: $0) }
    }

    private static func receiving(into destination: Store, recovered: ((RecoveryReport) -> Void)?, progress: ((Int, Int) -> Void)?,
                                  _ body: (LogAppender) throws -> ReceiveResult) throws -> ReceiveResult {
        let projected = try ProjectedStore.open(store: destination, waitingUpTo: 2)
        defer { try? projected.close() }
        recovered?(projected.appender.recovery)
        let r = try body(projected.appender)
        try projected.projection.catchUp(progress: progress)
        return r
    }
}
