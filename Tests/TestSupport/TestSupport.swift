import EventLog
import Foundation

/// A fresh directory under the system temp dir, removed when the value is released: the one
/// every test target uses.
public final class TempDir: @unchecked Sendable {
    public let path: String

    /// - Parameter name: the folder's prefix, for telling a leftover apart.
    public init(_ name: String = "logbook") {
        let p = NSTemporaryDirectory() + "/\(name)-\(UUID().uuidString.prefix(8))"
        try! FileManager.default.createDirectory(atPath: p, withIntermediateDirectories: true)
        path = p
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A wall clock the test moves by hand (milliseconds since 1970).
public final class ManualClock: WallClock, @unchecked Sendable {
    private let lock = NSLock()
    private var millis: UInt64

    public init(_ start: UInt64 = 1_767_225_600_000) { millis = start }
    public func nowMillis() -> UInt64 { lock.withLock { millis } }
    public func set(_ v: UInt64) { lock.withLock { millis = v } }
    public func advance(_ d: UInt64) { lock.withLock { millis += d } }
}
