import EventLog

/// One frame's bytes: header, checksum, event records. Decode and skim must agree.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: count)
    _ = FrameInspector.crossCheck(bytes)
    _ = try? FrameInspector.events(in: bytes)
    return 0
}
