import CFuzzDriver
import Inspector

/// What a browser sends the inspector's pages: any text is a form, a place in the log (which
/// reads back as itself), a time or an error, and the audit index's field text reads as fields
/// or as "unreadable", never a trap.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: count), as: UTF8.self)
    _ = InspectorInput.form(text)
    if let k = InspectorInput.place(text) {
        precondition(InspectorInput.place(k.description) == k, "a place does not read back as itself")
    }
    _ = try? InspectorInput.time(text, name: "since")
    _ = InspectorInput.indexedFields(text)
    return 0
}

/// The executable's entry (SwiftPM links `main` to `FuzzInspectorInput_main`): libFuzzer's driver.
@_cdecl("FuzzInspectorInput_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    logbook_fuzz_main(argc, argv) { data, count in data.map { fuzz($0, count) } ?? 0 }
}
