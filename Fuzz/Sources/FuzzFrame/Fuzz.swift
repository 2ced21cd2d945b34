import CFuzzDriver
import EventLog

/// One frame's bytes: header, checksum, signature, event records. Decode, skim and views must agree.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: count)
    _ = FrameInspector.crossCheck(bytes)
    _ = try? FrameInspector.events(in: bytes)
    // Again with the CRC made right, as a relay can (FuzzFixtureTests replays this pass too).
    _ = FrameInspector.crossCheckWithCRCFixed(bytes)
    return 0
}

/// The executable's entry (SwiftPM links `main` to `FuzzFrame_main`): libFuzzer's driver.
@_cdecl("FuzzFrame_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    logbook_fuzz_main(argc, argv) { data, count in data.map { fuzz($0, count) } ?? 0 }
}
