import Domain
import Foundation
import Testing
@testable import EventLog

/// When the consumer of a hand-off fails, the producer stops even while it waits on input that
/// does not come (a pipe whose writer is still open): `run` returns with the consumer's error.
@Suite struct HandoffStopTests {
    struct Refused: Error {}

    @Test func aProducerWaitingOnAnOpenPipeIsStoppedWhenTheConsumerFails() throws {
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        let lines = "one\ntwo\n"
        #expect(lines.utf8.withContiguousStorageIfAvailable { write(ends[1], $0.baseAddress, $0.count) } == lines.utf8.count)
        let readEnd = ends[0]
        let done = DispatchSemaphore(value: 0)
        let outcome = Locked<String>("running")
        Thread.detachNewThread {
            do {
                try Handoff<String>.run(name: "test-producer", depth: 1, produce: { hand, stopped in
                    let reader = LineReader(fd: readEnd, name: "pipe")
                    reader.stopped = stopped
                    while try reader.next({ line in _ = hand(String(decoding: line, as: UTF8.self)) }) {}
                }, consume: { _ in throw Refused() })
                outcome.withLock { $0 = "returned" }
            } catch is Refused {
                outcome.withLock { $0 = "refused" }
            } catch {
                outcome.withLock { $0 = "other: \(error)" }
            }
            done.signal()
        }
        // The writer end stays open: the producer would wait on it forever if nothing stopped it.
        let finished = done.wait(timeout: .now() + 10) == .success
        #expect(finished, "run did not return while the producer waited on the pipe")
        #expect(outcome.withLock { $0 } == "refused")
        if !finished { close(ends[1]); _ = done.wait(timeout: .now() + 5) }
    }
}
