import Foundation

/// The project's one lock: a mutual-exclusion lock taken only around a closure (no `lock()`
/// and `unlock()` to pair by hand), and `Locked`, a value only reachable while it is held.
/// Foundation's lock underneath, so it builds on every platform `Package.swift` declares
/// (Synchronization's `Mutex` needs macOS 15).
///
/// `Lock(recursive: true)` may be taken again by the thread holding it: `ProjectedStore`'s
/// `exclusive { }` wraps calls that take it themselves.
package final class Lock: @unchecked Sendable {
    private let plain: NSLock?
    private let recursive: NSRecursiveLock?

    package init(recursive: Bool = false) {
        plain = recursive ? nil : NSLock()
        self.recursive = recursive ? NSRecursiveLock() : nil
    }

    private func lock() { if let plain { plain.lock() } else { recursive!.lock() } }
    private func unlock() { if let plain { plain.unlock() } else { recursive!.unlock() } }
    private func tryLock() -> Bool { plain?.try() ?? recursive!.try() }

    /// Runs `body` holding the lock.
    @inline(__always)
    package func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }

    /// Runs `body` holding the lock if it is free now; nil, without running it, if it is not.
    package func withLockIfAvailable<T>(_ body: () throws -> T) rethrows -> T? {
        guard tryLock() else { return nil }
        defer { unlock() }
        return try body()
    }
}

/// A value guarded by a `Lock`: read and changed only inside `withLock`.
package final class Locked<Value>: @unchecked Sendable {
    private let lock = Lock()
    private var value: Value

    package init(_ value: Value) { self.value = value }

    /// Runs `body` with the value, holding the lock.
    @inline(__always)
    package func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        try lock.withLock { try body(&value) }
    }
}
