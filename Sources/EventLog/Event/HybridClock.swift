import Foundation

/// A hybrid logical clock value: 48 bits of wall-clock milliseconds since the Unix epoch and a
/// 16-bit counter that orders events within one millisecond (or while the wall clock lags).
public struct HLC: RawRepresentable, Comparable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    /// The largest wall-clock millisecond an hlc holds (48 bits).
    public static let wallMillisMax: UInt64 = (1 << 48) - 1
    /// Wall-clock milliseconds past `wallMillisMax` are clamped to it.
    public init(wallMillis: UInt64, counter: UInt16) {
        rawValue = (min(wallMillis, HLC.wallMillisMax) << 16) | UInt64(counter)
    }
    public static let zero = HLC(rawValue: 0)
    public var wallMillis: UInt64 { rawValue >> 16 }
    public var counter: UInt16 { UInt16(truncatingIfNeeded: rawValue) }
    public static func < (a: HLC, b: HLC) -> Bool { a.rawValue < b.rawValue }
    /// The wall-clock part as a date.
    public var date: Date { Date(timeIntervalSince1970: Double(wallMillis) / 1000) }
    public var description: String { "\(wallMillis).\(counter)" }
}

/// A source of wall-clock time in milliseconds. Passed in so tests control time.
public protocol WallClock: Sendable {
    func nowMillis() -> UInt64
}

/// The system's real-time clock.
public struct SystemWallClock: WallClock {
    public init() {}
    public func nowMillis() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(max(0, ts.tv_sec)) * 1000 + UInt64(max(0, ts.tv_nsec)) / 1_000_000
    }
}

/// Issues hybrid logical clock values that never go backwards, even when the wall clock does,
/// and that stay ahead of every value observed from other replicas.
///
/// Not thread-safe: one clock belongs to one writer.
package struct HybridClock: Sendable {
    public private(set) var last: HLC
    private let wall: any WallClock

    public init(wall: any WallClock = SystemWallClock(), last: HLC = .zero) {
        self.wall = wall
        self.last = last
    }

    /// The wall clock now, in milliseconds.
    public func wallNow() -> UInt64 { min(wall.nowMillis(), HLC.wallMillisMax) }

    /// The next value: the wall clock if it is ahead of the last value, else the last value
    /// with its counter advanced (carrying into the millisecond field when the counter is full).
    /// - Throws: `ClockError` when the clock cannot advance: the last value is the largest an hlc
    ///   holds (a clock poisoned by a far-future value received before drift was bounded).
    public mutating func tick() throws(ClockError) -> HLC {
        try tick(wall: wallNow())
    }

    /// `tick` with a wall-clock reading the caller took (`wallNow`), so that a batch of events
    /// reads the clock once per few events rather than once each: values stay strictly increasing
    /// whatever `now` is.
    @inline(__always)
    public mutating func tick(wall now: UInt64) throws(ClockError) -> HLC {
        if now > last.wallMillis {
            last = HLC(wallMillis: now, counter: 0)
        } else {
            guard last.rawValue < UInt64.max else { throw ClockError(last: last, wallMillis: now) }
            last = HLC(rawValue: last.rawValue + 1)
        }
        return last
    }

    /// Advances past a value seen in another replica's event.
    public mutating func observe(_ other: HLC) {
        if other > last { last = other }
    }
}

/// The hybrid clock cannot issue a value past its last one (it reached the largest hlc).
package struct ClockError: Error, CustomStringConvertible, Sendable, Equatable {
    public var last: HLC
    public var wallMillis: UInt64
    public var description: String {
        "the clock cannot advance: its last value \(last) is the largest an hlc holds (the wall clock says \(wallMillis)); "
            + "an event from far in the future reached this store before drift was bounded"
    }
}
