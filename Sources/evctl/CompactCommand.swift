import ArgumentParser
import Foundation
import EventLog
import Logbook

struct CompactCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "compact",
        abstract: "Drop old sealed segments every known peer already holds, keeping a snapshot that covers them.",
        discussion: """
            Takes a snapshot (kept as snapshot.sqlite; rebuilds start from it), then removes each origin's oldest
            sealed segments up to what every peer in `evctl status` holds. A peer asking from before what was
            removed gets "cursor expired" and bootstraps from a snapshot.
            """
    )
    @OptionGroup var options: StoreOptions
    @Flag(name: .customLong("without-peers"), help: "Compact even when no peer is known (up to the snapshot).") var withoutPeers = false

    func execute() throws {
        let r = try options.book(.inspect).compact(withoutPeers: withoutPeers)
        if options.json {
            Reports.print(CompactReport(segments: r.segments, bytes: r.bytes, origins: .init(r.origins.sorted { $0.key < $1.key }.map {
                ($0.key.description, CompactReport.Origin(segments: $0.value.segments, bytes: $0.value.bytes, floorSeq: $0.value.floor?.lastSeq.rawValue ?? 0))
            })))
        } else if r.segments == 0 {
            print("nothing to compact (no sealed segment lies wholly below what every peer holds)")
        } else {
            for (o, c) in r.origins.sorted(by: { $0.key < $1.key }) {
                print("origin \(o): removed \(c.segments) segments (\(c.bytes) bytes); its log now starts at seq \((c.floor?.lastSeq.rawValue ?? 0) + 1)")
            }
        }
    }
}
