import CFuzzDriver
import Foundation
@_spi(Fuzz) import Replicator

/// The event stream a server sends to `sync --follow` (`/v1/watch`): any bytes, split anywhere,
/// parse to the same events or the same error, and every event's data is a cursor or an error.
/// The same bytes as the `Retry-After` of a server's answer: a pause within its bound, or none.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: count))
    var whole = ServerSentEvents()
    let all = try? whole.add(bytes)
    // The same bytes in two pieces, cut where the first byte says.
    let cut = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
    var split = ServerSentEvents()
    let pieces: [ServerSentEvents.Event]? = {
        guard let a = try? split.add(bytes[..<cut]), let b = try? split.add(bytes[cut...]) else { return nil }
        return a + b
    }()
    precondition(all == pieces, "an event stream parses differently when split")
    for e in all ?? [] where e.name == "cursor" {
        _ = try? ReplicationCursor(token: e.data)
    }
    if let s = HTTPTransport.retryAfterSeconds(String(decoding: bytes, as: UTF8.self), now: Date(timeIntervalSince1970: 0)) {
        precondition(s >= 0 && s <= TransferFailure.retryAfterMax, "a Retry-After read as \(s) s")
    }
    if bytes.count >= 29, let at = HTTPTransport.imfFixdate(Array(bytes.prefix(29))) {
        precondition(at >= -62_167_219_200 && at <= 253_402_300_800, "a date read as \(at)")  // 0000-01-01 to 9999-12-31 23:59:60
    }
    // The two obsolete forms too (an asctime-date's four-digit year, an rfc850-date's two within
    // a century around now): never a trap, always within years 0000-9999.
    for n in [24, 30, 31, 32, 33, 34] where bytes.count >= n {
        if let at = HTTPTransport.httpDate(Array(bytes.prefix(n)), now: Date(timeIntervalSince1970: 1_796_083_200)) {
            precondition(at >= -62_167_219_200 && at <= 253_402_300_800, "a date read as \(at)")
        }
    }
    return 0
}

/// The executable's entry (SwiftPM links `main` to `FuzzEventStream_main`): libFuzzer's driver.
@_cdecl("FuzzEventStream_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    logbook_fuzz_main(argc, argv) { data, count in data.map { fuzz($0, count) } ?? 0 }
}
