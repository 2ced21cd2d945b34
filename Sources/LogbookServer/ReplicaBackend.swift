import Replicator
import EventLog
import Foundation
import NIOCore

/// What the HTTP routes of `ReplicaServer` serve: a keeper of frames. `ReplicaEndpoint` keeps
/// them in a store on this machine (`evctl serve --store`); a hub keeps them in a database shared
/// by several serve nodes (`evctl serve --hub`, the `Hub` module). The routes only move bytes in
/// and out; a backend authenticates nothing itself (the routes ask `authenticate`), but decides
/// what each principal may read and push.
public protocol ReplicaBackend: AnyObject, Sendable {
    /// The access policy in force (a tokens file reloaded by `TokensFileWatcher` swaps it).
    var policies: PolicySource { get }
    var metrics: ServerMetrics { get }
    /// Bytes of pages being sent and pushed bodies being read, over every connection.
    var memory: MemoryBudget { get }
    var pushBytesMax: Int { get }
    /// `GET /metrics` as `principal` may see it.
    func metricsText(principal: AccessPolicy.Principal) async -> String
    /// `GET /v1/cursor`.
    func cursor(principal: AccessPolicy.Principal) async throws -> (replica: ReplicaID, cursor: ReplicationCursor)
    /// `GET /v1/frames` (page version 1): a page, the principal's view of the cursor, and the
    /// memory the page holds (released once sent).
    func reservedPage(principal: AccessPolicy.Principal, since token: String?, maxBytes: String?, maxFrames: String?,
                      peer: String?) async throws -> (page: OutgoingPage, cursor: ReplicationCursor, reservation: MemoryBudget.Reservation)
    /// `GET /v1/frames?page_version=2`.
    func streamedPage(principal: AccessPolicy.Principal, since token: String?, maxBytes: String?, maxFrames: String?,
                      peer: String?) async throws -> StreamedPage
    /// `GET /v1/watch`: the principal's view of the cursor now and each time it moves.
    func watch(principal: AccessPolicy.Principal) async throws -> AsyncStream<ReplicationCursor>
    /// `GET /v1/snapshot`.
    func snapshot(principal: AccessPolicy.Principal) async throws -> SnapshotFile
    /// `POST /v1/frames`.
    func push(principal: AccessPolicy.Principal, body: [UInt8], peer: String?) async throws -> PushAnswer
    /// The server is shutting down: end what `watch` started.
    func stopWatching()
}

extension ReplicaBackend {
    public var policy: AccessPolicy { policies.current }

    /// Whose share of `memory` (and of watch streams) a request of `principal` takes: its user's
    /// (a user's several tokens share one), else the principal's; nil without tokens, where every
    /// request is this machine's programs' and one principal stands for them all.
    public func memoryHolder(_ principal: AccessPolicy.Principal) -> String? {
        policy.isOpen ? nil : principal.user.map { "user \"\($0)\"" } ?? "principal \"\(principal.name)\""
    }

    /// The principal behind an `Authorization` header, or a 401.
    public func authenticate(_ authorization: String?) throws(EndpointError) -> AccessPolicy.Principal {
        switch policy.authenticate(authorization: authorization) {
        case .success(let p): return p
        case .failure(let d): throw EndpointError(d.status, d.message)
        }
    }
}

/// What a push did, as answered to the client.
public struct PushAnswer: Sendable {
    public var result: ReceiveResult
    public var cursor: ReplicationCursor
    public init(result: ReceiveResult, cursor: ReplicationCursor) {
        self.result = result
        self.cursor = cursor
    }
}

/// The body of a push, checked before anything else is done with it.
public enum PushRequest {
    /// The most a push's frames may hold uncompressed: 16 times what its body may take, and never
    /// less than a client collects in a page by default (`PageLimits.rawBytesMax`), which is more
    /// than any one frame holds: a page of one frame is always taken.
    public static func rawBytesMax(pushBytesMax: Int) -> Int {
        max(pushBytesMax.multipliedReportingOverflow(by: 16).overflow ? .max : pushBytesMax * 16, PageLimits.rawBytesMax)
    }

    /// A page checked by `check`.
    public struct Checked: Sendable {
        public var frames: [[UInt8]]
        /// The page's origins, sorted.
        public var origins: [ReplicaID]
        /// The refusal of each share's log in the page the principal may not push: a backend
        /// leaves out such a log's frames it holds already (they change nothing), and refuses
        /// the page with this if any frame of it is left.
        public var denied: [ReplicaID: EndpointError]
    }

    /// Checks the size, decodes the page, parses every frame's header (what the frames hold
    /// uncompressed bounded by `rawBytesMax`) and checks the principal may push every origin in
    /// it. Returns the frames and their origins (sorted). A share's log the principal may not
    /// push is not refused here: its refusal is returned (`Checked.denied`), for the backend to
    /// give once it has left out what it holds of that log. A replica whose user no longer reads
    /// a share's logs pushes what it holds of them, and a principal that may push only its
    /// replica's origin was refused them on every run where one that may push any origin had
    /// them left out. Any other origin it may not push refuses the page here.
    public static func check(principal: AccessPolicy.Principal, body: [UInt8], pushBytesMax: Int) throws(EndpointError) -> Checked {
        guard body.count <= pushBytesMax else { throw EndpointError(413, "the page is \(body.count) bytes; this server takes at most \(pushBytesMax) per request") }
        let decoded: FramePage.Decoded
        do { decoded = try FramePage.decode(body) } catch { throw EndpointError(400, "the request body is not a page of frames: \(error)") }
        var origins = Set<ReplicaID>()
        var raw = 0
        let rawMax = rawBytesMax(pushBytesMax: pushBytesMax)
        for (i, f) in decoded.frames.enumerated() {
            guard let h = FrameHeader(parsing: f) else { throw EndpointError(400, "frame \(i + 1) of \(decoded.frames.count): not a frame header; nothing was written") }
            origins.insert(h.origin)
            // What the frames decode to is bounded, not only what they take compressed: LZ4
            // expands up to 255 times, and checking, storing and projecting cost what a frame
            // holds, so a page of 64 MiB of frames of zeros cost as much as 16 GiB of events.
            raw += Int(h.rawBytes)
            guard raw <= rawMax else {
                throw EndpointError(413, "the page's frames hold more than \(rawMax) bytes uncompressed (past frame \(i + 1) of \(decoded.frames.count)); this server takes at most that per request: push smaller pages; nothing was written")
            }
        }
        let sorted = origins.sorted()
        var denied: [ReplicaID: EndpointError] = [:]
        if case .origins = principal.push {
            let writers = shareWriters(decoded.frames)
            for o in sorted {
                guard let d = AccessPolicy.checkPush(principal, origins: [o], shareWriter: { writers[$0] }) else { continue }
                let refusal = EndpointError(d.status, d.message, code: .forbidden, origin: d.origin)
                // A share's log: every frame of it here is a share's frame of that log (its
                // writer found), or the refusal stands now.
                guard writers[o] != nil else { throw refusal }
                denied[o] = refusal
            }
        } else if let d = AccessPolicy.checkPush(principal, origins: sorted) {
            throw EndpointError(d.status, d.message, code: .forbidden, origin: d.origin)
        }
        return Checked(frames: decoded.frames, origins: sorted, denied: denied)
    }

    /// The writer of each share's log in `frames`: the replica whose key signs them, when all its
    /// frames here name the same one (a frame whose form does not check names none, and leaves
    /// its log out; receiving refuses it anyway). The signatures are not verified here: a right
    /// given by a writer holds only because receiving verifies them before anything is written.
    public static func shareWriters(_ frames: [[UInt8]]) -> [ReplicaID: ReplicaID] {
        var writers: [ReplicaID: ReplicaID?] = [:]
        for f in frames {
            guard let h = FrameHeader(parsing: f), h.shared else { continue }
            let w = f.withUnsafeBytes { FrameSignature.shareWriter(of: $0, header: h) }
            writers[h.origin] = writers[h.origin].map { $0 == w ? w : nil } ?? w
        }
        return writers.compactMapValues { $0 }
    }
}

/// The query of a page request, checked.
public enum PageRequest {
    /// Checks a page request: the right to pull, the cursor token, the limits (clamped to `pageMax`).
    public static func check(principal: AccessPolicy.Principal, since token: String?, maxBytes: String?, maxFrames: String?,
                             pageMax: PageLimits) throws(EndpointError) -> (ReplicationCursor, PageLimits) {
        if let d = AccessPolicy.checkPull(principal) { throw EndpointError(d.status, d.message) }
        var since = ReplicationCursor.empty
        if let token, !token.isEmpty {
            guard token.utf8.count <= 1 << 14 else { throw EndpointError(400, "since: the cursor token is longer than \(1 << 14) bytes") }
            do { since = try ReplicationCursor(token: token) } catch { throw EndpointError(400, "since: \(error)") }
        }
        var limits = PageLimits()
        if let maxBytes {
            guard let n = Int(maxBytes), n > 0 else { throw EndpointError(400, "max_bytes: expected a positive integer, got \"\(maxBytes.prefix(40))\"") }
            limits.maxBytes = n
        }
        if let maxFrames {
            guard let n = Int(maxFrames), n > 0 else { throw EndpointError(400, "max_frames: expected a positive integer, got \"\(maxFrames.prefix(40))\"") }
            limits.maxFrames = n
        }
        return (since, limits.clamped(to: pageMax))
    }
}

/// `GET /v1/frames?page_version=2`: a page streamed as it is read (docs/PROTOCOL.md, "Page"),
/// in slices of about `OutgoingPage.chunkBytes`, each read and written before the next is read,
/// so a page of any size holds one slice (and one more frame) in memory, reserved from the
/// backend's memory budget. Its cursor and more flag follow the frames, in the trailer.
///
/// The backend checks the request, and whether it still holds what follows `since` (else 410),
/// before anything is sent; `write` then sends the page. A failure while streaming (a compaction
/// meanwhile, a client gone) ends the body early: the client keeps the whole frames it got.
public struct StreamedPage: Sendable {
    let since: ReplicationCursor
    let limits: PageLimits
    let reservation: MemoryBudget.Reservation
    /// The keeper's cursor (as the principal may see it) when the request was taken (`Logbook-Cursor`).
    public let holder: ReplicationCursor
    /// Reads the frames past a cursor within limits, without head or trailer (`framesOnly`).
    let slice: @Sendable (ReplicationCursor, PageLimits) async throws -> OutgoingPage
    /// Called once the page is sent: where it ended, its frames and bytes (for metrics).
    let finished: @Sendable (_ at: ReplicationCursor, _ frames: Int, _ bytes: Int) async -> Void

    public init(since: ReplicationCursor, limits: PageLimits, reservation: MemoryBudget.Reservation, holder: ReplicationCursor,
                slice: @escaping @Sendable (ReplicationCursor, PageLimits) async throws -> OutgoingPage,
                finished: @escaping @Sendable (_ at: ReplicationCursor, _ frames: Int, _ bytes: Int) async -> Void) {
        self.since = since
        self.limits = limits
        self.reservation = reservation
        self.holder = holder
        self.slice = slice
        self.finished = finished
    }

    /// Sends the page through `write`; returns its frame count.
    @discardableResult
    public func write(_ write: (ByteBuffer) async throws -> Void) async throws -> Int {
        defer { reservation.release() }
        try await write(ByteBuffer(bytes: FramePage.streamedHead))
        var at = since
        var frames = 0, bytes = 0, raw = 0
        var more = false
        while true {
            var part = limits
            part.maxBytes = min(OutgoingPage.chunkBytes, limits.maxBytes - bytes)
            part.maxFrames = limits.maxFrames - frames
            // What the page's frames hold uncompressed is bounded over the whole page, not per
            // slice (a slice always takes its first frame: the page passes by one at most).
            part.maxRawBytes = limits.maxRawBytes - raw
            let got = try await slice(at, part)
            for b in got.buffers where b.readableBytes > 0 { try await write(b) }
            frames += got.frames
            bytes += got.frameBytes
            raw += got.rawBytes
            at = got.next
            if !got.more { break }
            if bytes >= limits.maxBytes || frames >= limits.maxFrames || raw >= limits.maxRawBytes {
                more = true
                break
            }
        }
        try await write(ByteBuffer(bytes: FramePage.streamedTrailer(frames: frames, next: at, more: more)))
        await finished(at, frames, bytes)
        return frames
    }
}
