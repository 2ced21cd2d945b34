import Foundation

/// Frees what a merging thread is done with on another thread (freeing a batch's events, or a
/// rebuild's rows, is a tenth of merging), deterministically there; `import-legacy` hands it the
/// file's rows and its frames once they are used (`Logbook+Import.swift`).
///
/// Handing a value to a queue in a closure is not enough: the closure's copy and the caller's
/// are two references, and whichever goes last frees the value. A queue already running takes
/// the closure at once and often drops its copy first: in a rebuild's profile, over a third of
/// the batches were freed on the merging thread. Here the caller keeps no reference: the value
/// is moved into a box and the box is released on the queue, by its only owner.
package enum FreeAside {
    /// The queue batches and rows are freed on.
    static let queue = DispatchQueue(label: "logbook.free", qos: .utility)

    private final class Box<T> {
        var value: T
        init(_ value: consuming T) { self.value = consume value }
    }

    /// Frees `value` (whatever it holds the last reference to) on `queue`.
    package static func release<T>(_ value: consuming T) {
        releaseLater(Unmanaged.passRetained(Box(consume value)))
    }

    /// Gives up `object`'s reference on `queue`.
    private static func releaseLater<U: AnyObject>(_ object: Unmanaged<U>) {
        // Handed over whole: no other thread touches it before the queue lets it go.
        nonisolated(unsafe) let object = object
        queue.async { object.release() }
    }

    /// Frees objects one step late: `retire` keeps the object it is given and releases the one
    /// before on the queue. An item the caller's loop held (`Handoff.run`'s current item) has
    /// been let go by the time the next is retired, so nothing but this holds it then.
    ///
    /// With `keeping`, the objects retired are kept there instead, up to a total `weight` of
    /// `keepMax` (past it, they are freed as usual), to be freed once the caller releases it:
    /// for a fill, whose merging is followed by work on one core (its indexes built) beside
    /// which the other core is free for the freeing.
    final class Retirer<T: AnyObject> {
        private var held: T?
        private var heldWeight = 0
        private let keeping: Later<T>?
        private var keepLeft: Int

        init(keeping: Later<T>? = nil, keepMax: Int = 0) {
            self.keeping = keeping
            keepLeft = keeping == nil ? 0 : keepMax
        }

        /// Takes `x` (the caller's loop may still hold it) and frees the one taken before.
        /// - Parameter weight: what `x` counts for against `keepMax` (the bytes it holds, say).
        func retire(_ x: T, weight: Int = 1) {
            if let keeping, let previous = held, heldWeight <= keepLeft {
                keepLeft -= heldWeight
                held = x
                heldWeight = weight
                keeping.keep(previous)
                return
            }
            let previous = held.map { Unmanaged.passRetained($0) }
            held = x
            heldWeight = weight
            if let previous { releaseLater(previous) }
        }

        /// Frees the last one taken (call once the caller's loop has let go of it).
        func finish() {
            let last = held.map { Unmanaged.passRetained($0) }
            held = nil
            if let last { releaseLater(last) }
        }

        deinit { finish() }
    }

    /// Keeps values until `release()` (or its end), then frees them all on the queue: for what
    /// must not be freed beside the work that follows it (see `Projector.keepWritten`).
    final class Later<T> {
        private var kept: [T] = []

        init() {}

        func keep(_ value: consuming T) { kept.append(consume value) }

        /// Frees what was kept, on the queue.
        func release() {
            guard !kept.isEmpty else { return }
            var all: [T] = []
            swap(&all, &kept)
            FreeAside.release(consume all)
        }

        deinit { release() }
    }
}
