import Foundation
import Testing
@testable import EventLog

/// Blocking work from async code runs on the blocking queue, never on the caller's thread, and
/// a non-escaping closure handed over comes back let go (the runtime traps if it escaped).
@Suite struct BlockingTests {
    static let marker = DispatchSpecificKey<Int>()

    @Test func aNonEscapingClosureRunsOffThePoolAndIsLetGo() async throws {
        Blocking.queue.setSpecific(key: Self.marker, value: 1)
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<400 {
                group.addTask {
                    var local = i  // captured by the non-escaping closure, changed there
                    let onQueue = try await Blocking.run { () -> Bool in
                        local += 1
                        return DispatchQueue.getSpecific(key: Self.marker) == 1
                    }
                    #expect(onQueue)
                    return local
                }
            }
            var all: [Int] = []
            for try await r in group { all.append(r) }
            return all.sorted()
        }
        #expect(results == Array(1...400))
    }

    @Test func anErrorComesBackToTheCaller() async {
        struct Refused: Error {}
        await #expect(throws: Refused.self) { try await Blocking.run { () throws -> Int in throw Refused() } }
    }
}
