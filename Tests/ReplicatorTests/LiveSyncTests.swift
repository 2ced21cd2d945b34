import EventLog
import Foundation
import TestSupport
import Testing
@testable import Replicator

// The time limits in this file catch a follower that never ends, not a slow one: on two cores
// an async test can wait minutes for a thread while synchronous tests hold them (a CI run of
// 2026-12-02 had three such tests, seconds long alone, take 250 s against a limit of one minute).

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

    /// The pauses `live` tells (with why), until it has told `count`.
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

    /// How `live` ends when stopped at its `retries`th retry: its result (success: stopped
    /// there) and why it retried each time.
    static func outcome(of live: LiveSync, _ states: AsyncStream<LiveSync.State>, stoppingAt retries: Int) async
        -> (Result<Void, any Error>, [String]) {
        let run = Task { try await live.run() }
        let watcher = Task { () -> [String] in
            var why: [String] = []
            for await state in states {
                guard case .retrying(_, let w) = state else { continue }
                why.append(w)
                if why.count == retries { run.cancel() }
            }
            return why
        }
        let result = await run.result
        watcher.cancel()
        return (result, await watcher.value)
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
    @Test(.timeLimit(.minutes(10))) func aWatchRefusedAtEveryConnectionBacksOff() async throws {
        let peer = try CannedServer { _, _ in Self.answer("503 Service Unavailable") }
        let dir = TempDir()
        let (live, states) = try Self.follower(peer.url, dir)
        let told = await Self.pauses(of: live, states, count: 4)
        #expect(told.map(\.0) == [0.5, 1, 2, 4])
        #expect(told.allSatisfy { $0.1.contains("503") }, "\(told)")
        let asked = peer.requests
        #expect(asked.count >= 4 && asked.allSatisfy { $0.hasPrefix("GET /v1/watch ") }, "\(asked)")
        // Each pause is spread over [0.5, 1] of the backoff: here the least draw.
        var (least, more) = try Self.follower(peer.url, TempDir())
        least.jitter = { 0 }
        #expect(await Self.pauses(of: least, more, count: 2).map(\.0) == [0.25, 0.5])
    }

    /// The backoff starts again from its least only after a working link: a watch that sent a
    /// cursor and then lasted. A server that sends a cursor and hangs up at once, over and over,
    /// has the follower back off as from one that refuses.
    @Test(.timeLimit(.minutes(10))) func theBackoffStartsAgainOnlyAfterALastingWatch() async throws {
        let peer = try CannedServer { _, _ in Self.oneCursor }
        let dir = TempDir()
        let (live, states) = try Self.follower(peer.url, dir)
        let told = await Self.pauses(of: live, states, count: 4)
        #expect(told.map(\.0) == [0.5, 1, 2, 4], "\(told)")
        #expect(peer.requests.count >= 4)
        // Counted as lasting from the moment the watch spoke (a link that lasted is not timed
        // here: under a full test run a task can wait seconds for a thread): each connection
        // starts the backoff again. A watch that never spoke does not.
        var (steady, again) = try Self.follower(peer.url, TempDir())
        steady.steadyAfter = .zero
        #expect(await Self.pauses(of: steady, again, count: 3).map(\.0) == [0.5, 0.5, 0.5])
        #expect(LiveSync.backoff(8, spokeFor: nil, steadyAfter: .zero) == 8)
        #expect(LiveSync.backoff(8, spokeFor: .seconds(9), steadyAfter: .seconds(10)) == 8)
        #expect(LiveSync.backoff(8, spokeFor: .seconds(10), steadyAfter: .seconds(10)) == 0.5)
    }

    /// A watch refused for good by the server (a token it no longer knows) or answered with a
    /// cursor that is not one ends the follower with that failure. Before, every failure of the
    /// watch was taken for a broken link and tried again for ever. What else comes on the way (a
    /// proxy's 404 while a service is replaced, a redirect, a 400) is a link to make again.
    @Test(.timeLimit(.minutes(10))) func aWatchRefusedForGoodEndsTheFollower() async throws {
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
            // A retry: what a link to make again gets, and what a refusal got before.
            let (result, retried) = await Self.outcome(of: live, states, stoppingAt: 1)
            switch (result, ends) {
            case (.failure(let f as TransferFailure), let code?):
                #expect(f.code == code, "\(f)")
            case (.success, nil):
                #expect(retried.count == 1)
            default:
                Issue.record("\(text.prefix(while: { $0 != "\r" })): ended with \(result), retried: \(retried)")
            }
            withExtendedLifetime(peer) {}
        }
    }

    /// A watch answered 200 with a page that is not an event stream (a proxy's, a captive
    /// portal's login page) is named as such, and tried again with backoff. Before, it was read
    /// as a stream that sent nothing and said only that the server ended it. A stream whose
    /// Content-Type has parameters or another case, or has none, is read as ever.
    @Test(.timeLimit(.minutes(10))) func aWatchAnsweredWithAPageIsNamed() async throws {
        let page = try CannedServer { _, _ in
            Self.answer("200 OK", ["Content-Type: text/html; charset=utf-8"], body: "<html>sign in</html>")
        }
        let (live, states) = try Self.follower(page.url, TempDir())
        let told = await Self.pauses(of: live, states, count: 2)
        #expect(told.map(\.0) == [0.5, 1], "\(told)")
        #expect(told.allSatisfy { $0.1.contains("not an event stream") && $0.1.contains("\"text/html; charset=utf-8\"") }, "\(told)")
        // Shown so that it can neither close its quotes nor pass for an escape of ours.
        #expect(HTTPTransport.quoted("a\"b\\u{1b}\u{1B}") == #"a\"b\\u{1b}\u{1b}"#)
        #expect(HTTPTransport.isEventStream("Text/Event-Stream ; charset=utf-8") && HTTPTransport.isEventStream("text/event-stream"))
        #expect(!HTTPTransport.isEventStream("text/event-streams") && !HTTPTransport.isEventStream("") && !HTTPTransport.isEventStream("text/html"))
        for type in [["Content-Type: TEXT/event-stream;charset=utf-8"], []] {
            let peer = try CannedServer { _, _ in
                Self.answer("200 OK", type, body: "event: cursor\ndata: \(ReplicationCursor.empty.token)\n\n", length: false)
            }
            let (follower, more) = try Self.follower(peer.url, TempDir())
            let again = await Self.pauses(of: follower, more, count: 1)
            #expect(again.allSatisfy { !$0.1.contains("not an event stream") }, "\(type): \(again)")
        }
    }

    /// A proxy in front of the server answers for it while the service behind is replaced (a
    /// 404 with no route, a redirect): once the follower has been connected, an exchange that
    /// meets such an answer is tried again, as a watch is. Before, the next connection's exchange
    /// ended the follower. A first exchange that meets one (a wrong address) still ends it, and
    /// so does the server's own refusal of the token at any time.
    @Test(.timeLimit(.minutes(10))) func aProxysAnswerToALaterExchangeIsRetried() async throws {
        let peer = try CannedServer { _, _ in Self.answer("503 Service Unavailable") }
        let proxy = HTTPTransport.failure(status: 404, body: "404 page not found", url: "u")
        let refused = HTTPTransport.failure(status: 401, body: #"{"error":"unknown token","code":"unauthorized"}"#, url: "u")
        for (first, later, ends) in [(false, proxy, nil), (true, proxy, FailureCode.invalidAnswer), (false, refused, .unauthorized)] {
            let calls = Locked(0)
            var (live, states) = try Self.follower(peer.url, TempDir())
            live.exchange = { _, _, _, _, _ in
                let before = calls.withLock { n in defer { n += 1 }; return n }
                if before >= (first ? 0 : 1) { throw later }
                return LiveSync.Exchange(pulled: nil, pushed: nil)
            }
            let (result, retried) = await Self.outcome(of: live, states, stoppingAt: 3)
            switch (result, ends) {
            case (.success, nil):
                #expect(retried.count >= 3 && retried.dropFirst().allSatisfy { $0.contains("404") }, "\(retried)")
            case (.failure(let f as TransferFailure), let code?):
                #expect(f.code == code, "\(f)")
            default:
                Issue.record("first: \(first), \(later.code): ended with \(result) after \(retried)")
            }
        }
        withExtendedLifetime(peer) {}
    }
}
