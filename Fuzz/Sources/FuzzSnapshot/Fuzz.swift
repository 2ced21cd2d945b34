import CFuzzDriver
import Foundation
import Projections

/// A snapshot file from a peer: any bytes are a snapshot this build would install, or an error.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let file = NSTemporaryDirectory() + "/logbook-fuzz-snapshot-\(getpid()).sqlite"
    FileManager.default.createFile(atPath: file, contents: Data(bytes: data, count: count))
    _ = try? Snapshot.read(file)
    return 0
}

/// The executable's entry (SwiftPM links `main` to `FuzzSnapshot_main`): libFuzzer's driver.
@_cdecl("FuzzSnapshot_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    logbook_fuzz_main(argc, argv) { data, count in data.map { fuzz($0, count) } ?? 0 }
}
