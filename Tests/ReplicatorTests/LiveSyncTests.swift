import EventLog
import Foundation
import TestSupport
import Testing
@testable import Replicator

/// A live follower against a peer whose watch answers what each test says. The exchanges are
/// stubbed, so only the watch reaches the peer.
@Suite struct LiveSyncTests {
    /// An HTTP answer of `status` closing its connection.
    static func answer(_ status: String, _ headers: [String] = [], body: String = "") -> String {
        (["HTTP/1.1 \(status)", "Content-Length: \(body.utf8.count)", "Connection: close"] + headers)
            .joined(separator: "\r\n") + "\r\n\r\n" + body
    }

    /// A follower of `url` from a new store under `dir`, with every state it tells.
    static func follower(_ url: String, _ dir: TempDir) throws -> (LiveSync, AsyncStream<LiveSync.State>) {
        let store = try Store.create(at: dir.path + "/follower")
        let (states, told) = AsyncStream.makeStream(of: LiveSync.State.self)
        var live = LiveSync(store: store) { try HTTPTransport(url: url) }
        live.exchange = { _, _, _, _, _ in LiveSync.Exchange(pulled: nil, pushed: nil) }
        live.onState = { told.yield($0) }
        return (live, states)
    }

    /// A watch refused at every connection, without `Retry-After` (a server of an older build, a
    /// proxy in front): the pause doubles from one connection to the next. Before, the backoff
    /// started again at each connection's first exchange, so such a follower connected and
    /// exchanged twice a second for ever.
    @Test(.timeLimit(.minutes(1))) func aWatchRefusedAtEveryConnectionBacksOff() async throws {
        let peer = try CannedServer { _, _ in Self.answer("503 Service Unavailable") }
        let dir = TempDir()
        let (live, states) = try Self.follower(peer.url, dir)
        let run = Task { try await live.run() }
        defer { run.cancel() }
        var pauses: [Double] = []
        for await state in states {
            guard case .retrying(let after, _) = state else { continue }
            pauses.append(after)
            if pauses.count == 4 { break }
        }
        #expect(pauses == [0.5, 1, 2, 4])
        #expect(peer.requests.allSatisfy { $0.hasPrefix("GET /v1/watch ") })
    }

    /// A watch refused for good (a token the server no longer knows) or answered with something
    /// other than cursors ends the follower with that failure. Before, every failure of the
    /// watch was taken for a broken link and tried again for ever.
    @Test(.timeLimit(.minutes(1))) func aWatchRefusedForGoodEndsTheFollower() async throws {
        let cases: [(String, FailureCode)] = [
            (Self.answer("401 Unauthorized", ["Content-Type: application/json"],
                         body: #"{"error":"this token is not known here","code":"unauthorized"}"#), .unauthorized),
            (Self.answer("200 OK", ["Content-Type: text/event-stream"], body: "event: cursor\ndata: not-a-cursor\n\n"), .invalidAnswer),
            (Self.answer("404 Not Found", body: "no such route"), .invalidAnswer),
        ]
        for (text, code) in cases {
            let peer = try CannedServer { _, _ in text }
            let dir = TempDir()
            let (live, states) = try Self.follower(peer.url, dir)
            let run = Task { try await live.run() }
            // A retry is the old behaviour: stop the follower there rather than wait for ever.
            let watcher = Task { () -> String? in
                for await state in states {
                    if case .retrying(_, let why) = state {
                        run.cancel()
                        return why
                    }
                }
                return nil
            }
            switch await run.result {
            case .failure(let f as TransferFailure):
                #expect(f.code == code, "\(f)")
            case .failure(let e):
                Issue.record("ended with \(e)")
            case .success:
                Issue.record("retried: \(await watcher.value ?? "")")
            }
            watcher.cancel()
        }
    }
}
