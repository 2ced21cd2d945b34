/// An error from the event log: what failed, where (file, byte offset, seq range), why, and
/// whether trying again can help. Cases are private so new ones can be added.
public struct LogError: Error, CustomStringConvertible, Sendable {
    enum Kind: Sendable, Equatable {
        case io
        case corrupt
        case locked
        case notAStore
        case alreadyExists
        case invalidInput
        case unsupportedFormat
        case gap
        case clockAhead
        case ownLogDamaged
        case ownLogRestoring
    }

    let kind: Kind
    /// The operation that failed ("append", "open", "read", ...).
    public var operation: String
    public var file: String?
    public var offset: Int?
    public var seqs: ClosedRange<UInt64>?
    public var message: String
    public var hint: String?
    /// POSIX errno for I/O failures.
    public var errno: Int32?

    init(_ kind: Kind, _ operation: String, _ message: String, file: String? = nil, offset: Int? = nil,
         seqs: ClosedRange<UInt64>? = nil, hint: String? = nil, errno: Int32? = nil) {
        self.kind = kind
        self.operation = operation
        self.message = message
        self.file = file
        self.offset = offset
        self.seqs = seqs
        self.hint = hint
        self.errno = errno
    }

    /// A read or write failed: `operation` on `file` at `offset`, with the system's `errno`.
    public static func io(_ operation: String, _ message: String, file: String?, offset: Int? = nil, errno: Int32?) -> LogError {
        LogError(.io, operation, message, file: file, offset: offset, errno: errno)
    }

    /// Damaged bytes were found in a log file.
    public var isCorruption: Bool { kind == .corrupt }
    /// Another process holds the store's writer lock.
    public var isLocked: Bool { kind == .locked }
    /// The directory is not a Logbook store.
    public var isNotAStore: Bool { kind == .notAStore }
    /// What kind of failure, as a word (`io`, `corrupt`, `locked`…), for the error at the door.
    package var kindName: String { "\(kind)" }
    /// Received frames do not continue the log this store holds (a gap, a misaligned overlap).
    public var isGap: Bool { kind == .gap }
    /// Received frames carry a clock further ahead of this machine's than the drift bound allows;
    /// nothing was written. Trying again once the clock has caught up can succeed.
    public var isClockAhead: Bool { kind == .clockAhead }
    /// This store's own log lost frames it had committed (appends wait until they are
    /// restored), or a peer's frames of it were refused: a fork of it, or unsigned frames the
    /// store has no evidence of losing. True too while they are being restored
    /// (`isOwnLogRestoring`).
    public var isOwnLogDamaged: Bool { kind == .ownLogDamaged || kind == .ownLogRestoring }
    /// An append was refused because a peer is giving this store back an append of its own log
    /// (a store restored from a backup, a tail lost to damage) whose last frame has not arrived:
    /// the pull going on completes it, and the append can be tried again then (a pull that
    /// ended first leaves it open until the next pull completes it, or the store is reopened).
    /// Nothing was appended.
    public var isOwnLogRestoring: Bool { kind == .ownLogRestoring }
    /// The input was refused; nothing was written.
    public var isInvalidInput: Bool { kind == .invalidInput }
    /// Trying again later can succeed (a lock held by another process, a transient I/O error,
    /// the own log's tail still arriving from a peer).
    public var isRetryable: Bool {
        kind == .locked || kind == .clockAhead || kind == .ownLogRestoring || (kind == .io && (errno == EINTR || errno == EAGAIN))
    }

    public var description: String {
        var s = "\(operation): \(message)"
        if let file { s += " [file \(file)" + (offset.map { ", byte offset \($0)" } ?? "") + "]" }
        if let seqs { s += " [seq \(seqs.lowerBound)…\(seqs.upperBound)]" }
        if let errno { s += " (errno \(errno): \(String(cString: strerror(errno))))" }
        if let hint { s += "\nhint: \(hint)" }
        return s
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs `open` again while it fails because another process holds the store's writer lock, for
/// up to `seconds` (a server holds the lock briefly after each push); then lets the error through.
public func retryingWhileLocked<T>(upTo seconds: Double, _ open: () throws -> T) throws -> T {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while true {
        do { return try open() } catch let e as LogError where e.isLocked && ContinuousClock.now < deadline {
            usleep(10_000)
        }
    }
}
