import EventLog
import Foundation

/// How much one page of frames may hold. A page may end inside an append (appends are not
/// bounded, pages are): it runs past `maxBytes` by at most one frame, and always holds at least
/// one frame when anything is left to send. The receiver keeps an append that arrives over
/// several pages open until its last frame comes.
public struct PageLimits: Sendable, Equatable {
    public var maxBytes: Int
    public var maxFrames: Int
    /// What the page's frames hold uncompressed (their headers' raw sizes), at most: a page ends
    /// before a frame that would pass it, unless it is the page's first. Not sent to a server
    /// (it bounds what this side collects). LZ4 expands up to 255 times, so a page bounded in
    /// compressed bytes alone may decode to 255 times its size; a server refuses a push past
    /// `PushRequest.rawBytesMax`, which is never less than this default.
    public var maxRawBytes: Int
    public init(maxBytes: Int = 8 << 20, maxFrames: Int = 8192, maxRawBytes: Int = PageLimits.rawBytesMax) {
        self.maxBytes = maxBytes
        self.maxFrames = maxFrames
        self.maxRawBytes = maxRawBytes
    }

    /// The default bound of what a page's frames hold uncompressed: 256 MiB.
    public static let rawBytesMax = 256 << 20

    /// How many of `frames`, from the first, hold at most `rawBytesMax` uncompressed by their
    /// headers' raw sizes: at least one when there is any (a frame whose header does not parse
    /// counts as nothing here; the receiver refuses it).
    public static func framesWithin(_ frames: [[UInt8]], rawBytesMax: Int) -> Int {
        var raw = 0
        for (i, f) in frames.enumerated() {
            raw += FrameHeader.rawBytes(of: f)
            if raw > rawBytesMax { return max(1, i) }
        }
        return frames.count
    }

    /// The most a server hands out per page, whatever the client asks for.
    public static let serverMax = PageLimits(maxBytes: 32 << 20, maxFrames: 1 << 16)

    /// These limits, each lowered to at most `cap`'s and raised to at least one frame or byte.
    public func clamped(to cap: PageLimits) -> PageLimits {
        PageLimits(maxBytes: max(1, min(maxBytes, cap.maxBytes)), maxFrames: max(1, min(maxFrames, cap.maxFrames)),
                   maxRawBytes: max(1, min(maxRawBytes, cap.maxRawBytes)))
    }
}

/// One page of an exchange: frames verbatim, the cursor a receiver holds after applying them on
/// top of the cursor it asked from, and whether the sender has more. See docs/PROTOCOL.md, "Page".
///
/// Layout (little-endian), version 1: `LBKP`, version 1, flags (bit 0: more), 2 reserved bytes,
/// u16 length and ASCII of the next cursor token; then per frame a u32 length (> 0) and the
/// frame; then a u32 zero and the u32 frame count.
///
/// Version 2 (a page streamed as it is read, so its end is known only at its end): `LBKP`,
/// version 2, 3 reserved zero bytes; the frames as in version 1; then a u32 zero, the u32 frame
/// count, a u8 more flag (0 or 1), the u16 length and ASCII of the next cursor token.
///
/// A page of either version cut off anywhere still yields its whole frames.
public struct FramePage: Sendable, Equatable {
    public static let magic: [UInt8] = Array("LBKP".utf8)
    public static let version: UInt8 = 1
    /// The version of a page streamed by a server (cursor and more flag in the trailer).
    public static let streamedVersion: UInt8 = 2
    public var frames: [[UInt8]]
    public var next: ReplicationCursor
    public var more: Bool

    public init(frames: [[UInt8]], next: ReplicationCursor, more: Bool) {
        self.frames = frames
        self.next = next
        self.more = more
    }

    public var frameBytes: Int { frames.reduce(0) { $0 + $1.count } }

    public func encoded() -> [UInt8] {
        var out = FramePage.head(next: next, more: more)
        out.reserveCapacity(out.count + frameBytes + 4 * frames.count + 8)
        for f in frames { f.withUnsafeBytes { FramePage.appendFrame($0, to: &out) } }
        out += FramePage.trailer(frames: frames.count)
        return out
    }

    /// The page in version 2 (as a server streams it).
    public func encodedStreamed() -> [UInt8] {
        var out = FramePage.streamedHead
        for f in frames { f.withUnsafeBytes { FramePage.appendFrame($0, to: &out) } }
        out += FramePage.streamedTrailer(frames: frames.count, next: next, more: more)
        return out
    }

    /// The bytes before the frames of a version-2 page.
    public static let streamedHead: [UInt8] = magic + [streamedVersion, 0, 0, 0]

    /// The bytes after the frames of a version-2 page: a u32 zero, the frame count, the more
    /// flag and the next cursor.
    public static func streamedTrailer(frames: Int, next: ReplicationCursor, more: Bool) -> [UInt8] {
        let token = Array(next.token.utf8)
        var out = trailer(frames: frames)
        out.append(more ? 1 : 0)
        put16(&out, UInt16(token.count))
        return out + token
    }

    /// The bytes before the frames: magic, version, flags, the next cursor.
    public static func head(next: ReplicationCursor, more: Bool) -> [UInt8] {
        let token = Array(next.token.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(10 + token.count)
        out += magic
        out += [version, more ? 1 : 0, 0, 0]
        put16(&out, UInt16(token.count))
        out += token
        return out
    }

    /// One frame as a page carries it: its u32 length, then its bytes.
    public static func appendFrame(_ frame: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        put32(&out, UInt32(frame.count))
        out.append(contentsOf: frame)
    }

    /// The bytes after the frames: a u32 zero and the frame count.
    public static func trailer(frames: Int) -> [UInt8] {
        var out: [UInt8] = []
        put32(&out, 0)
        put32(&out, UInt32(frames))
        return out
    }

    /// What a received body holds: the page when it arrived whole, or only its whole frames when
    /// it was cut off (`complete == false`; the cursor and the more flag are then unknown).
    public struct Decoded: Sendable, Equatable {
        public var frames: [[UInt8]]
        public var next: ReplicationCursor?
        public var more: Bool
        public var complete: Bool
        /// The sender's own cursor when it answered, if the transport carries it (HTTP sends it
        /// in `Logbook-Cursor`); lets a push that follows start without asking for it.
        public var holder: ReplicationCursor?

        public init(frames: [[UInt8]], next: ReplicationCursor?, more: Bool, complete: Bool, holder: ReplicationCursor? = nil) {
            self.frames = frames
            self.next = next
            self.more = more
            self.complete = complete
            self.holder = holder
        }
    }

    /// Reads a page. A body cut off at any byte gives the whole frames before the cut.
    /// - Throws: `PageError` when the bytes are not a page (wrong magic or version, a length out
    ///   of range, a count that disagrees), naming the byte offset.
    public static func decode(_ b: [UInt8]) throws(PageError) -> Decoded {
        var out = Decoded(frames: [], next: nil, more: true, complete: false)
        if b.count < 4 {
            guard Array(b) == Array(magic.prefix(b.count)) else { throw PageError("not a page of frames (bad magic at byte offset 0)") }
            return out
        }
        guard Array(b[0..<4]) == magic else { throw PageError("not a page of frames (bad magic at byte offset 0)") }
        guard b.count >= 5 else { return out }
        if b[4] == streamedVersion { return try decodeStreamed(b) }
        guard b.count >= 10 else { return out }
        guard b[4] == version else { throw PageError("page version \(b[4]) is not supported (this build reads \(version) and \(streamedVersion))") }
        guard b[5] <= 1, b[6] == 0, b[7] == 0 else { throw PageError("unknown page flags at byte offset 5") }
        let more = b[5] == 1
        let tokenLength = Int(get16(b, 8))
        guard tokenLength <= 1 << 14 else { throw PageError("cursor token length \(tokenLength) at byte offset 8 is out of range") }
        let o = 10 + tokenLength
        guard o <= b.count else { return out }
        let tokenText = String(decoding: b[10..<o], as: UTF8.self)
        let next: ReplicationCursor
        do { next = try ReplicationCursor(token: tokenText) } catch { throw PageError("the page's next cursor (byte offset 10) is not valid: \(error)") }
        guard let t = try frames(b, from: o, into: &out) else { return out }
        guard t + 8 == b.count else { throw PageError("\(b.count - t - 8) unexpected bytes after the page trailer at byte offset \(t + 8)") }
        out.next = next
        out.more = more
        out.complete = true
        return out
    }

    private static func decodeStreamed(_ b: [UInt8]) throws(PageError) -> Decoded {
        var out = Decoded(frames: [], next: nil, more: true, complete: false)
        guard b.count >= 8 else { return out }
        guard b[5] == 0, b[6] == 0, b[7] == 0 else { throw PageError("unknown page flags at byte offset 5") }
        guard let t = try frames(b, from: 8, into: &out) else { return out }
        guard t + 11 <= b.count else { return out }
        guard b[t + 8] <= 1 else { throw PageError("the more flag at byte offset \(t + 8) is \(b[t + 8]), not 0 or 1") }
        let tokenLength = Int(get16(b, t + 9))
        guard tokenLength <= 1 << 14 else { throw PageError("cursor token length \(tokenLength) at byte offset \(t + 9) is out of range") }
        let end = t + 11 + tokenLength
        guard end <= b.count else { return out }
        let next: ReplicationCursor
        do { next = try ReplicationCursor(token: String(decoding: b[(t + 11)..<end], as: UTF8.self)) } catch {
            throw PageError("the page's next cursor (byte offset \(t + 11)) is not valid: \(error)")
        }
        guard end == b.count else { throw PageError("\(b.count - end) unexpected bytes after the page trailer at byte offset \(end)") }
        out.next = next
        out.more = b[t + 8] == 1
        out.complete = true
        return out
    }

    /// Reads frames from offset `o` into `out` up to the trailer; returns the trailer's offset
    /// once its u32 zero and frame count are whole and agree, nil when the bytes end first.
    private static func frames(_ b: [UInt8], from start: Int, into out: inout Decoded) throws(PageError) -> Int? {
        var o = start
        while true {
            guard o + 4 <= b.count else { return nil }
            let n = Int(get32(b, o))
            if n == 0 {
                guard o + 8 <= b.count else { return nil }
                let count = Int(get32(b, o + 4))
                guard count == out.frames.count else {
                    throw PageError("page trailer at byte offset \(o) says \(count) frames, found \(out.frames.count)")
                }
                return o
            }
            guard n >= FrameHeader.size, n <= FrameHeader.size + FrameHeader.payloadBytesMax else {
                throw PageError("frame length \(n) at byte offset \(o) is out of range")
            }
            guard o + 4 + n <= b.count else { return nil }
            out.frames.append(Array(b[(o + 4)..<(o + 4 + n)]))
            o += 4 + n
        }
    }

    /// Collects a page of what `store` holds past `since`: origin by origin in seq order,
    /// committed appends only, stopping once `limits` is reached (possibly inside an append).
    /// - Throws: `TransferFailure.cursorExpired` when an origin's log here starts after a floor
    ///   (a snapshot) past `since`: the frames between are not held, a reader must bootstrap.
    public static func collect(from store: Store, since: ReplicationCursor, limits: PageLimits, including: ((ReplicaID) -> Bool)? = nil) throws -> FramePage {
        var frames: [[UInt8]] = []
        let (next, more) = try collect(from: store, since: since, limits: limits, including: including) { frames.append(Array($0)) }
        return FramePage(frames: frames, next: next, more: more)
    }

    /// The frames `collect` would put in a page, handed to `frame` one by one (the bytes are
    /// valid only during the call), so a sender can write them straight to where they go.
    /// Returns the page's next cursor and whether more remains.
    /// - Parameter including: the origins the page may hold (a scoped principal's); nil for all.
    ///   Others are never read, nor checked against `since`.
    public static func collect(from store: Store, since: ReplicationCursor, limits: PageLimits, including: ((ReplicaID) -> Bool)? = nil,
                               frame: (UnsafeRawBufferPointer) throws -> Void) throws -> (next: ReplicationCursor, more: Bool) {
        let reader = LogReader(store: store)
        var plan: [(ReplicaID, Seq?)] = []
        for origin in try store.origins() where including?(origin) ?? true {
            try reader.requireHeld(origin: origin, past: since[origin])
            plan.append((origin, reader.durable(origin: origin)))
        }
        return try collect(from: store, plan: plan, since: since, limits: limits, frame: frame)
    }

    /// `collect` over the origins of `plan` only, in its order, each read up to the seq given
    /// with it (what is durable there; nil: a log written before durable marks, read to its
    /// end). For a keeper that knows which origins moved (`OriginIndex`): the others are never
    /// opened.
    package static func collect(from store: Store, plan: [(ReplicaID, Seq?)], since: ReplicationCursor, limits: PageLimits,
                                frame: (UnsafeRawBufferPointer) throws -> Void) throws -> (next: ReplicationCursor, more: Bool) {
        var next = since
        var more = false
        var bytes = 0, count = 0, raw = 0
        var full = false
        let reader = LogReader(store: store)
        for (origin, durable) in plan {
            let from = since[origin].next
            // Every receiver checks each frame's link to the hash it holds: not hashed here too.
            try reader.forEachFrame(origin: origin, from: from, linking: false) { h, bytesOfFrame in
                guard h.lastSeq >= from else { return true }
                // Nothing ships before it is on disk here (see LogReader.durable).
                if let durable, h.lastSeq > durable { return false }
                if full || (count > 0 && raw + Int(h.rawBytes) > limits.maxRawBytes) {
                    more = true
                    return false
                }
                try frame(bytesOfFrame)
                raw += Int(h.rawBytes)
                bytes += bytesOfFrame.count
                count += 1
                next[origin] = max(next[origin], h.lastSeq)
                if bytes >= limits.maxBytes || count >= limits.maxFrames { full = true }
                return true
            }
            if more { break }
        }
        return (next, more)
    }

    private static func put16(_ out: inout [UInt8], _ v: UInt16) { out += [UInt8(v & 0xFF), UInt8(v >> 8)] }
    private static func put32(_ out: inout [UInt8], _ v: UInt32) {
        out += [UInt8(v & 0xFF), UInt8((v >> 8) & 0xFF), UInt8((v >> 16) & 0xFF), UInt8(v >> 24)]
    }
    private static func get16(_ b: [UInt8], _ o: Int) -> UInt16 { UInt16(b[o]) | UInt16(b[o + 1]) << 8 }
    private static func get32(_ b: [UInt8], _ o: Int) -> UInt32 {
        UInt32(b[o]) | UInt32(b[o + 1]) << 8 | UInt32(b[o + 2]) << 16 | UInt32(b[o + 3]) << 24
    }
}

extension LogReader {
    /// Throws `TransferFailure.cursorExpired` when `origin`'s log here starts after a floor (a
    /// snapshot) past `held`: the frames between are gone, so the receiver must bootstrap.
    package func requireHeld(origin: ReplicaID, past held: Seq) throws {
        if let floor = try floor(origin: origin), held < floor.lastSeq {
            throw TransferFailure.cursorExpired("the log of origin \(origin) here starts after seq \(floor.lastSeq) (the receiver holds through \(held)); "
                                                + "the receiver must bootstrap from a snapshot (evctl pull does)")
        }
    }
}

/// Bytes that are not a page of frames.
public struct PageError: Error, CustomStringConvertible, Sendable, Equatable {
    public var message: String
    init(_ m: String) { message = m }
    public var description: String { message }
}
