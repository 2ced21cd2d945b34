import CFuzzDriver
import EventLog
import Foundation
import Replicator

/// A bundle file as a user carries it on a disk: checked whole, then imported into a store.
nonisolated(unsafe) var counter = 0

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    counter += 1
    let dir = NSTemporaryDirectory() + "/logbook-fuzz-bundle-\(getpid())"
    let file = dir + "/in.bundle"
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    FileManager.default.createFile(atPath: file, contents: Data(bytes: data, count: count))
    guard (try? FrameBundle.check(file)) != nil else { return 0 }
    let storeDir = dir + "/store-\(counter)"
    defer { try? FileManager.default.removeItem(atPath: storeDir) }
    guard let store = try? Store.create(at: storeDir) else { return 0 }
    var options = AppendOptions()
    options.clockDriftMaxMs = .max
    guard let appender = try? LogAppender(store: store, options: options) else { return 0 }
    _ = try? StoreSync.importBundle(file, into: appender)
    try? appender.close()
    return 0
}

/// The executable's entry (SwiftPM links `main` to `FuzzBundle_main`): libFuzzer's driver.
@_cdecl("FuzzBundle_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    logbook_fuzz_main(argc, argv) { data, count in data.map { fuzz($0, count) } ?? 0 }
}
