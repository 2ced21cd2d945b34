import EventLog
import Domain
import Logbook
import ArgumentParser

struct SampleCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample",
        abstract: "Print a deterministic sample workload as NDJSON mutations (for demos and benchmarks)."
    )
    @Option(help: "How many mutations.") var count: Int = 1000
    @Option(help: "Seed; the same seed always gives the same lines.") var seed: UInt64 = 1

    func execute() throws {
        guard count >= 0 else { throw ValidationError("--count must be at least 0") }
        let out = Output()
        for line in SampleWorkload(seed: seed, count: count) { out.line(line) }
        out.flush()
    }
}
