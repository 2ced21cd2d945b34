import CFuzzDriver
import EventLog
import Foundation

/// A store reachable by path whose newest segment, purge record and declined share logs hold
/// these bytes: recovery, reading, verifying, the share files' readers and the writer's open
/// must each give a result or an error, never trap.
nonisolated(unsafe) var counter = 0
let origin = ReplicaID("0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")!

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    counter += 1
    let dir = NSTemporaryDirectory() + "/logbook-fuzz-store-\(getpid())-\(counter)"
    defer { try? FileManager.default.removeItem(atPath: dir) }
    guard let store = try? Store.create(at: dir, replicaID: .random()) else { return 0 }
    let log = dir + "/log/\(origin)"
    try? FileManager.default.createDirectory(atPath: log, withIntermediateDirectories: true)
    FileManager.default.createFile(atPath: log + "/00000000000000000001.seg", contents: Data(bytes: data, count: count))
    // The same bytes as a purge record and as the declined share logs a store keeps (files of a
    // store on a shared path: hostile).
    let shares = dir + "/shares"
    try? FileManager.default.createDirectory(atPath: shares, withIntermediateDirectories: true)
    FileManager.default.createFile(atPath: shares + "/07dc4849-2c9a-8215-b929-6c1f8482b3c3.purged", contents: Data(bytes: data, count: count))
    FileManager.default.createFile(atPath: shares + "/DECLINED", contents: Data(bytes: data, count: count))
    _ = try? SharePurge.purged(store)
    _ = try? ShareDirectory.declinedOrPurgedLogs(store)
    _ = try? Verifier(store: store).run()
    _ = try? LogReader(store: store).events(origin: origin, limit: 10_000)
    _ = try? LogReader(store: store).tip(origin: origin)
    if let appender = try? LogAppender(store: store) {
        _ = try? appender.append([Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("after"))])])
        try? appender.close()
    }
    return 0
}

/// The executable's entry (SwiftPM links `main` to `FuzzStore_main`): libFuzzer's driver.
@_cdecl("FuzzStore_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    logbook_fuzz_main(argc, argv) { data, count in data.map { fuzz($0, count) } ?? 0 }
}
