import CFuzzDriver
import EventLog
import Foundation
import Replicator

/// A page from a peer, decoded and received into a real store: everything the receiving side
/// of a pull does with a server's answer. The store lives for many inputs (frames that check
/// are appended, so later inputs meet a store with a log), and is made anew now and then.
nonisolated(unsafe) var state: (dir: String, appender: LogAppender, runs: Int)?

func receiver() throws -> LogAppender {
    if let s = state, s.runs < 2000 {
        state!.runs += 1
        return s.appender
    }
    if let s = state {
        try? s.appender.close()
        try? FileManager.default.removeItem(atPath: s.dir)
    }
    let dir = NSTemporaryDirectory() + "/logbook-fuzz-\(getpid())-\(UUID().uuidString.prefix(6))"
    let store = try Store.create(at: dir)
    var options = AppendOptions()
    options.clockDriftMaxMs = .max  // the corpus's frames carry fixed clocks
    let appender = try LogAppender(store: store, options: options)
    state = (dir, appender, 0)
    return appender
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: count))
    guard let page = try? FramePage.decode(bytes) else { return 0 }
    guard !page.frames.isEmpty, let appender = try? receiver() else { return 0 }
    _ = try? appender.receive(page.frames)
    _ = try? appender.receivePosition()
    return 0
}

/// The executable's entry (SwiftPM links `main` to `FuzzPageReceive_main`): libFuzzer's driver.
@_cdecl("FuzzPageReceive_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    logbook_fuzz_main(argc, argv) { data, count in data.map { fuzz($0, count) } ?? 0 }
}
