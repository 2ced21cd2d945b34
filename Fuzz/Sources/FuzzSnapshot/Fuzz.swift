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
