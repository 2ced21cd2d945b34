import CFuzzDriver
import Replicator

/// Cursor tokens as a client sends them: any text is a cursor or an error, and a cursor read
/// from a token gives that token back.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: count), as: UTF8.self)
    if let c = try? ReplicationCursor(token: text) {
        let again = try? ReplicationCursor(token: c.token)
        precondition(again == c, "a token does not round-trip")
        _ = c.lag(behind: c.merged(with: c))
    }
    return 0
}

/// The executable's entry (SwiftPM links `main` to `FuzzCursor_main`): libFuzzer's driver.
@_cdecl("FuzzCursor_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    logbook_fuzz_main(argc, argv) { data, count in data.map { fuzz($0, count) } ?? 0 }
}
