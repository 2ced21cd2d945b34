import EventLog
import Foundation

/// What went wrong in a transfer, as a value both ends of a replication link agree on: the
/// server sends it as `code` in its error JSON (docs/PROTOCOL.md, "Errors"), the client turns it
/// back into the same `TransferFailure`, and callers decide by it, never by a message's text.
public enum FailureCode: String, Sendable, CaseIterable, Codable {
    // The request or its credentials.
    case unauthorized = "unauthorized"
    case forbidden = "forbidden"
    case badRequest = "bad_request"
    case tooLarge = "too_large"
    case unsupportedContentType = "unsupported_content_type"
    // What the receiver found in the frames (nothing was written).
    case gap = "gap"
    case corrupt = "corrupt"
    case clockAhead = "clock_ahead"
    case ownLog = "own_log"
    case invalidFrames = "invalid_frames"
    // Where the log is.
    case cursorExpired = "cursor_expired"
    // The peer, the link, or the moment.
    case busy = "busy"
    case rateLimited = "rate_limited"
    case timeout = "timeout"
    case network = "network"
    case serverError = "server_error"
    case tls = "tls"
    /// The peer answered with something that is not what the protocol says.
    case invalidAnswer = "invalid_answer"
    /// This side cannot go on (a bad URL or token, a local store that cannot be read or written).
    case local = "local"
    case cancelled = "cancelled"

    /// Whether trying again can help.
    public var retry: TransferFailure.Retry {
        switch self {
        case .busy, .rateLimited, .timeout, .network, .serverError: .transient
        case .cursorExpired: .cursorExpired
        default: .permanent
        }
    }

    /// The code for what a receiver's `LogError` says about frames it refused.
    public init(refusal e: LogError) {
        if e.isGap { self = .gap }
        else if e.isCorruption { self = .corrupt }
        else if e.isClockAhead { self = .clockAhead }
        else if e.isOwnLogDamaged { self = .ownLog }
        else if e.isLocked { self = .busy }
        else if e.isInvalidInput { self = .invalidFrames }
        else { self = .local }
    }

    /// The code an HTTP status stands for, when the answer carried none.
    public init(status: Int) {
        switch status {
        case 400, 414: self = .badRequest
        case 401: self = .unauthorized
        case 403: self = .forbidden
        case 410: self = .cursorExpired
        case 413: self = .tooLarge
        case 415: self = .unsupportedContentType
        case 422: self = .invalidFrames
        case 429: self = .rateLimited
        case 408, 504: self = .timeout
        case 503: self = .busy
        case 500, 502: self = .serverError
        default: self = status >= 500 ? .serverError : .invalidAnswer
        }
    }
}

/// Why one step of an exchange failed: a code (what, and whether to retry), a message for
/// people, and where in the log when the failure is about frames.
public struct TransferFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// What the session does about it.
    public enum Retry: Sendable, Equatable {
        /// Worth another try after a pause: connection refused or reset, timeout, busy, 429, 5xx.
        case transient
        /// Retrying cannot help: bad credentials, a refused frame, a page that is not a page.
        case permanent
        /// The peer no longer holds the log from the stated cursor (it was compacted away).
        case cursorExpired
    }

    public var code: FailureCode
    public var message: String
    /// The frames the failure is about, when it is about frames: their origin and seqs.
    public var origin: ReplicaID?
    public var seqs: ClosedRange<UInt64>?
    /// The HTTP status it came with, over HTTP.
    public var status: Int?
    /// Seconds the peer asked the client to wait before trying again (HTTP `Retry-After`), kept
    /// on a failure worth trying again (its code says so: 408, 429 and 5xx answers, or an
    /// answer whose JSON code is one of those), within `0...retryAfterMax`. A session waits at
    /// least this long before its next attempt, and its backoff when that is longer.
    public var retryAfter: Double?

    /// The longest pause a peer's `Retry-After` can ask for: a hostile or broken server asking
    /// for a day would otherwise park every sync of its clients for a day. The pause taken is
    /// spread over up to half of it more (`pause`), so at most 90 s.
    public static let retryAfterMax = 60.0

    /// The pause before trying again: `backoff`, or what the peer `asked` (at most
    /// `retryAfterMax`) when that is longer, spread over up to half of it more by `jitter` (a
    /// draw in [0, 1]). A server tells every client it turns away at once the same pause; taken
    /// as it is, they would all come back at the same moment. A backoff that is not a number, or
    /// below zero, is none.
    static func pause(backoff: Double, asked: Double?, jitter: Double) -> Double {
        let backoff = backoff >= 0 ? backoff : 0
        let asked = min(retryAfterMax, max(0, asked ?? 0))
        guard asked > backoff else { return backoff }
        return asked * (1 + 0.5 * min(1, max(0, jitter)))
    }

    /// `seconds` as the nanoseconds of a sleep: a pause that is not a number or below zero is
    /// none, and one past a year is a year, so that no setting (a `RetryPolicy` or a follower's
    /// `backoffMax` of an app's) traps the conversion.
    static func nanoseconds(_ seconds: Double) -> UInt64 {
        guard seconds > 0 else { return 0 }
        return UInt64(min(seconds, 31_536_000) * 1e9)
    }

    public init(_ code: FailureCode, _ message: String, origin: ReplicaID? = nil, seqs: ClosedRange<UInt64>? = nil, status: Int? = nil) {
        self.code = code
        self.message = message
        self.origin = origin
        self.seqs = seqs
        self.status = status
    }

    public var retry: Retry { code.retry }

    public static func transient(_ message: String, code: FailureCode = .network) -> TransferFailure { TransferFailure(code, message) }
    public static func permanent(_ message: String, code: FailureCode = .local) -> TransferFailure { TransferFailure(code, message) }
    public static func cursorExpired(_ message: String) -> TransferFailure { TransferFailure(.cursorExpired, message) }

    /// Frames a receiver refused (by path or over HTTP), from its `LogError`.
    public static func refused(_ e: LogError, by receiver: String) -> TransferFailure {
        TransferFailure(FailureCode(refusal: e), "\(receiver) refused the frames, nothing was written: \(e.description)", seqs: e.seqs)
    }

    public var description: String {
        code == .cursorExpired ? "cursor expired: \(message)" : message
    }
}
