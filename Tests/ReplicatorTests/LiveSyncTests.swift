import EventLog
import Foundation
import TestSupport
import Testing
@testable import Replicator

/// A live follower against a peer whose watch answers what each test says. The exchanges are
/// stubbed, so only the watch reaches the peer.
@Suite struct LiveSyncTests {
    /// An HTTP answer of `status` closing its connection; without a length, its body ends only
    /// when the connection closes (as a stream's does).
    static func answer(_ status: String, _ headers: [String] = [], body: String = "", length: Bool = true) -> String {
        ((["HTTP/1.1 \(status)"] + (length ? ["Content-Length: \(body.utf8.count)"] : []) + ["Connection: close"] + headers)
            .joined(separator: "\r\n")) + "\r\n\r\n" + body
    }

    /// A watch's answer that sends one cursor (the empty one) and goes on until it is closed.
    static let oneCursor = answer("200 OK", ["Content-Type: text/event-stream"],
                                  body: "event: cursor\ndata: \(ReplicationCursor.empty.token)\n\n", length: false)

    /// The pauses a follower of `peer` tells, until it has told `count`.
    static func pauses(of live: LiveSync, _ states: AsyncStream<LiveSync.State>, count: Int) async -> [(Double, String)] {
        let run = Task { try await live.run() }
        defer { run.cancel() }
        var told: [(Double, String)] = []
        for await state in states {
            guard case .retrying(let after, let why) = state else { continue }
            told.append((after, why))
            if told.count == count { break }
        }
        return told
    }

    /// A follower of `url` from a new store under `dir`, with every state it tells.
    static func follower(_ url: String, _ dir: TempDir) throws -> (LiveSync, AsyncStream<LiveSync.State>) {
        let store = try Store.create(at: dir.path + "/follower")
        let (states, told) = AsyncStream.makeStream(of: LiveSync.State.self)
        var live = LiveSync(store: store) { try HTTPTransport(url: url) }
        live.exchange = { _, _, _, _, _ in LiveSync.Exchange(pulled: nil, pushed: nil) }
        live.onState = { told.yield($0) }
        live.jitter = { 1 }  // each pause its whole backoff
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
        let told = await Self.pauses(of: live, states, count: 4)
        #expect(told.map(\.0) == [0.5, 1, 2, 4])
        #expect(told.allSatisfy { $0.1.contains("503") }, "\(told)")
        let asked = peer.requests
        #expect(asked.count >= 4 && asked.allSatisfy { $0.hasPrefix("GET /v1/watch ") }, "\(asked)")
    }

    /// The backoff starts again from its least only after a working link: a watch that sent a
    /// cursor and then lasted. A server that sends a cursor and hangs up at once, over and over,
    /// has the follower back off as from one that refuses.
    @Test(.timeLimit(.minutes(1))) func theBackoffStartsAgainOnlyAfterALastingWatch() async throws {
        let peer = try CannedServer { _, _ in Self.oneCursor }
        let dir = TempDir()
        let (live, states) = try Self.follower(peer.url, dir)
        let told = await Self.pauses(of: live, states, count: 4)
        #expect(told.map(\.0) == [0.5, 1, 2, 4], "\(told)")
        #expect(peer.requests.count >= 4)
        // The rule itself (a watch that lasts is not timed here: under a full test run a task
        // can wait seconds for a thread, and such a test would measure that).
        #expect(LiveSync.backoff(8, spokeFor: nil) == 8)
        #expect(LiveSync.backoff(8, spokeFor: .seconds(9)) == 8)
        #expect(LiveSync.backoff(8, spokeFor: LiveSync.steadyAfter) == 0.5)
        #expect(LiveSync.backoff(8, spokeFor: .seconds(600)) == 0.5)
    }

    /// A watch refused for good by the server (a token it no longer knows) or answered with a
    /// cursor that is not one ends the follower with that failure. Before, every failure of the
    /// watch was taken for a broken link and tried again for ever. What else comes on the way (a
    /// proxy's 404 while a service is replaced, a redirect, a 400) is a link to make again.
    @Test(.timeLimit(.minutes(1))) func aWatchRefusedForGoodEndsTheFollower() async throws {
        let cases: [(String, FailureCode?)] = [
            (Self.answer("401 Unauthorized", ["Content-Type: application/json"],
                         body: #"{"error":"this token is not known here","code":"unauthorized"}"#), .unauthorized),
            (Self.answer("403 Forbidden", body: "no"), .forbidden),
            (Self.answer("200 OK", ["Content-Type: text/event-stream"], body: "event: cursor\ndata: not-a-cursor\n\n"), .invalidAnswer),
            (Self.answer("404 Not Found", body: "no such route"), nil),
            (Self.answer("301 Moved Permanently", ["Location: http://127.0.0.1:1/"]), nil),
            (Self.answer("400 Bad Request", body: "<html>bad</html>"), nil),
        ]
        for (text, ends) in cases {
            let peer = try CannedServer { _, _ in text }
            let dir = TempDir()
            let (live, states) = try Self.follower(peer.url, dir)
            let run = Task { try await live.run() }
            // A retry: what a link to make again gets, and what a refusal got before.
            let watcher = Task { () -> String? in
                for await state in states {
                    if case .retrying(_, let why) = state {
                        run.cancel()
                        return why
                    }
                }
                return nil
            }
            let result = await run.result
            watcher.cancel()
            let retried = await watcher.value
            switch (result, ends) {
            case (.failure(let f as TransferFailure), let code?):
                #expect(f.code == code, "\(f)")
            case (.success, nil):
                #expect(retried != nil)
            default:
                Issue.record("\(text.prefix(while: { $0 != "\r" })): ended with \(result), retried: \(retried ?? "no")")
            }
            withExtendedLifetime(peer) {}
        }
    }
}
