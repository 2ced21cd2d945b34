import CFuzzDriver
import Foundation
import Logbook

/// A legacy file as a user hands it to `import-legacy` (an SQLite database or a JSON export):
/// detected, backed up, read and mapped into a fresh store. Any bytes: an error, never a trap.
nonisolated(unsafe) var counter = 0

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    counter += 1
    let dir = NSTemporaryDirectory() + "/logbook-fuzz-legacy-\(getpid())"
    let file = dir + "/in.legacy"
    try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    FileManager.default.createFile(atPath: file, contents: Data(bytes: data, count: count))
    let storeDir = dir + "/store-\(counter)"
    defer { try? FileManager.default.removeItem(atPath: storeDir) }
    guard let writer = try? LogbookWriter.open(at: storeDir, creating: true) else { return 0 }
    _ = try? writer.importLegacy(from: file)
    try? writer.close()
    return 0
}

/// The executable's entry (SwiftPM links `main` to `FuzzLegacyImport_main`): libFuzzer's driver.
@_cdecl("FuzzLegacyImport_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    logbook_fuzz_main(argc, argv) { data, count in data.map { fuzz($0, count) } ?? 0 }
}
