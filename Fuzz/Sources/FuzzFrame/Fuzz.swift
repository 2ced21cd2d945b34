import CFuzzDriver
import EventLog

/// One frame's bytes: header, checksum, signature, event records. Decode, skim and views must agree.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: count)
    _ = FrameInspector.crossCheck(bytes)
    _ = try? FrameInspector.events(in: bytes)
    // Again with the CRC made right, as a relay can: what lies past the checksum (records,
    // signature blocks) is reached by mutations, not only by the seeds.
    var fixed = Array(bytes)
    if let h = FrameHeader(parsing: fixed), h.totalBytes <= fixed.count {
        var crc = CRC32C()
        fixed.withUnsafeBytes { p in
            crc.update(UnsafeRawBufferPointer(rebasing: p[0..<FrameHeader.size - 4]))
            crc.update(UnsafeRawBufferPointer(rebasing: p[FrameHeader.size..<h.totalBytes]))
        }
        withUnsafeBytes(of: crc.final.littleEndian) { for i in 0..<4 { fixed[FrameHeader.size - 4 + i] = $0[i] } }
        fixed.withUnsafeBytes { p in
            _ = FrameInspector.crossCheck(p)
            _ = try? FrameInspector.events(in: UnsafeRawBufferPointer(rebasing: p[0..<h.totalBytes]))
        }
    }
    return 0
}

/// The executable's entry (SwiftPM links `main` to `FuzzFrame_main`): libFuzzer's driver.
@_cdecl("FuzzFrame_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    logbook_fuzz_main(argc, argv) { data, count in data.map { fuzz($0, count) } ?? 0 }
}
