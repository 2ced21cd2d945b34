import Foundation
import Testing
@testable import Replicator

/// The client's reader of a server's `/v1/watch` stream: what a hostile or broken server can
/// send it (split anywhere, comments, CRLF, an endless line, a cursor that is not one).
@Suite struct ServerSentEventsTests {
    @Test func eventsSplitAnywhereParseTheSame() throws {
        let stream = Array("retry: 1000\n\n: ping\n\nevent: cursor\r\ndata: lbc1.AAAAAA\r\n\r\nevent: other\ndata: a\ndata: b\n\n".utf8)
        var whole = ServerSentEvents()
        let expected = try whole.add(stream)
        #expect(expected == [.init(name: "cursor", data: "lbc1.AAAAAA"), .init(name: "other", data: "a\nb")])
        for cut in 0...stream.count {
            var p = ServerSentEvents()
            let got = try p.add(stream[..<cut]) + p.add(stream[cut...])
            #expect(got == expected, "cut at \(cut)")
        }
    }

    @Test func anEndlessLineIsAnErrorNotMemory() {
        var p = ServerSentEvents()
        let line = [UInt8](repeating: UInt8(ascii: "x"), count: ServerSentEvents.lineBytesMax + 1)
        #expect { _ = try p.add(line) } throws: { ($0 as? TransferFailure)?.code == .invalidAnswer }
    }

    /// Endless `data:` lines, each short, and no blank line: before, the event grew without end
    /// (the client reached 1.7 GiB); now it is an error once the event passes its bound.
    @Test func anEndlessEventIsAnErrorNotMemory() throws {
        var p = ServerSentEvents()
        let chunk = Array(String(repeating: "data: " + String(repeating: "y", count: 1000) + "\n", count: 64).utf8)
        var fed = 0
        var failure: TransferFailure?
        while fed <= ServerSentEvents.eventBytesMax + chunk.count {
            do { _ = try p.add(chunk) } catch let e as TransferFailure { failure = e; break }
            fed += chunk.count
        }
        #expect(failure?.code == .invalidAnswer && fed <= ServerSentEvents.eventBytesMax)
        // A stream of ordinary events, however long, goes on.
        var q = ServerSentEvents()
        for _ in 0..<2000 { #expect(try q.add(Array("event: cursor\ndata: lbc1.AAAA\n\n".utf8)).count == 1) }
    }
}
