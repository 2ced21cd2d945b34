import Domain
import EventLog
@testable import LogbookServer
import Foundation
import Projections
import Testing
import TestSupport
@testable import Replicator

/// Pages, the pull and push sessions (no sockets), and the tokens file.
@Suite struct ProtocolTests {
    let a = ReplicaID("0c5c37cc-0dcd-48d8-b3a8-019ed2895c06")!
    let b = ReplicaID("a263d404-663c-4fa4-93f5-2b1e65a8726e")!

    /// Frames of a real store: `appends` appends of `size` events each.
    func store(_ dir: ShippingTests.Dir, appends: [Int], frameEvents: Int = 1000) throws -> Store {
        let s = try Store.create(at: dir.path + "/src")
        var o = AppendOptions()
        o.frameEventsMax = frameEvents
        let w = try LogAppender(store: s, options: o)
        for (k, n) in appends.enumerated() {
            _ = try w.append(SampleWorkload(seed: UInt64(k), count: n).enumerated().map { try MutationParser.parse($1, lineNumber: $0 + 1) })
        }
        try w.close()
        return s
    }

    /// The server sends pages as chunked NIO buffers: byte for byte what `encoded()` makes, for
    /// pages of one chunk, of several, and from a cursor part-way.
    @Test func outgoingPagesAreTheEncodedPage() throws {
        let dir = ShippingTests.Dir()
        let s = try store(dir, appends: [40000, 40, 1, 3000, 5])
        let mid = ReplicationCursor([s.replicaID: Seq(40040)])
        var chunked = 0
        for (since, limits) in [(ReplicationCursor.empty, PageLimits()), (.empty, PageLimits(maxBytes: 1, maxFrames: 1)),
                                (.empty, PageLimits(maxBytes: 1 << 30, maxFrames: 4)), (mid, PageLimits()), (try s.cursor(), PageLimits())] {
            let expected = try FramePage.collect(from: s, since: since, limits: limits)
            let out = try OutgoingPage(store: s, since: since, limits: limits)
            #expect(out.bytes == expected.encoded())
            #expect(out.frames == expected.frames.count && out.frameBytes == expected.frameBytes && out.next == expected.next && out.more == expected.more)
            if out.buffers.count > 2 { chunked += 1 }
        }
        #expect(chunked > 0, "some page spans several buffers")
    }

    @Test func pageRoundTripsAndACutAnywhereKeepsTheWholeFrames() throws {
        let dir = ShippingTests.Dir()
        let s = try store(dir, appends: [3, 5, 2, 7])
        let page = try FramePage.collect(from: s, since: .empty, limits: PageLimits())
        let tip = try s.cursor()
        #expect(page.frames.count == 4 && !page.more && page.next == tip)
        let bytes = page.encoded()
        let whole = try FramePage.decode(bytes)
        #expect(whole == FramePage.Decoded(frames: page.frames, next: page.next, more: false, complete: true))
        // Where each frame ends in the encoding.
        var ends: [Int] = []
        var o = 10 + page.next.token.utf8.count
        for f in page.frames { o += 4 + f.count; ends.append(o) }
        for cut in 0..<bytes.count {
            let d = try FramePage.decode(Array(bytes[..<cut]))
            #expect(!d.complete && d.more)
            #expect(d.frames == Array(page.frames.prefix(ends.filter { $0 <= cut }.count)), "cut at \(cut)")
        }
    }

    /// A streamed page (version 2: cursor and more flag in the trailer) decodes to the same page,
    /// and cut off anywhere gives the whole frames before the cut, never a cursor it did not get.
    @Test func streamedPagesRoundTripAndACutAnywhereKeepsTheWholeFrames() throws {
        let dir = ShippingTests.Dir()
        let s = try store(dir, appends: [3, 5, 2, 7])
        let page = try FramePage.collect(from: s, since: .empty, limits: PageLimits(maxBytes: 1 << 20, maxFrames: 3))
        #expect(page.frames.count == 3 && page.more)
        let bytes = page.encodedStreamed()
        #expect(try FramePage.decode(bytes) == FramePage.Decoded(frames: page.frames, next: page.next, more: true, complete: true))
        var ends: [Int] = []
        var o = 8
        for f in page.frames { o += 4 + f.count; ends.append(o) }
        for cut in 0..<bytes.count {
            let d = try FramePage.decode(Array(bytes[..<cut]))
            #expect(!d.complete && d.next == nil)
            #expect(d.frames == Array(page.frames.prefix(ends.filter { $0 <= cut }.count)), "cut at \(cut)")
        }
        var badMore = bytes
        badMore[o + 8] = 2
        #expect { try FramePage.decode(badMore) } throws: { ($0 as? PageError)?.message.contains("more flag at byte offset \(o + 8)") == true }
        #expect { try FramePage.decode(bytes + [0]) } throws: { ($0 as? PageError)?.message.contains("unexpected bytes") == true }
        var badFlags = bytes
        badFlags[6] = 1
        #expect(throws: PageError.self) { try FramePage.decode(badFlags) }
    }

    @Test func malformedPagesAreRefusedWithTheOffset() throws {
        var bytes = FramePage(frames: [], next: .empty, more: false).encoded()
        #expect(throws: PageError.self) { try FramePage.decode(Array("HTTP".utf8)) }
        bytes[4] = 9
        #expect { try FramePage.decode(bytes) } throws: { ($0 as? PageError)?.message.contains("version 9") == true }
        var badLength = FramePage(frames: [], next: .empty, more: false).encoded()
        badLength.insert(contentsOf: [5, 0, 0, 0], at: badLength.count - 8)  // a 5-byte "frame"
        #expect { try FramePage.decode(badLength) } throws: { ($0 as? PageError)?.message.contains("byte offset") == true }
        var badCount = FramePage(frames: [], next: .empty, more: false).encoded()
        badCount[badCount.count - 4] = 3
        #expect { try FramePage.decode(badCount) } throws: { ($0 as? PageError)?.message.contains("says 3 frames") == true }
    }

    @Test func pagesAreBoundedAndMayEndInsideAnAppend() throws {
        let dir = ShippingTests.Dir()
        // Appends of 25 events in frames of 10: each append is three frames (10, 10, 5).
        let s = try store(dir, appends: [25, 25, 25, 25], frameEvents: 10)
        var since = ReplicationCursor.empty
        var pages = 0
        var seen = 0
        while true {
            let p = try FramePage.collect(from: s, since: since, limits: PageLimits(maxBytes: 1 << 30, maxFrames: 4))
            pages += 1
            seen += p.frames.count
            #expect(p.frames.count == 4)
            since = p.next
            if !p.more { break }
        }
        let tip = try s.cursor()
        #expect(seen == 12 && pages == 3 && since == tip)
        // A page limited to one byte still carries one frame, and may stop inside an append.
        let tiny = try FramePage.collect(from: s, since: .empty, limits: PageLimits(maxBytes: 1, maxFrames: 1))
        #expect(tiny.frames.count == 1 && tiny.more && tiny.next[s.replicaID] == Seq(10))
        #expect(FrameHeader(parsing: tiny.frames[0])?.continues == true)
    }

    /// An append that arrives over two calls is written as it comes and becomes visible (and
    /// counted) only with its last frame; a store closed in between drops the open part at the
    /// next open, and it is fetched again.
    @Test func anAppendArrivesOverSeveralCallsAndIsVisibleOnlyWhole() throws {
        let dir = ShippingTests.Dir()
        let s = try store(dir, appends: [25, 25], frameEvents: 10)
        let frames = try FramePage.collect(from: s, since: .empty, limits: PageLimits()).frames
        let dst = try Store.create(at: dir.path + "/dst")
        let w = try LogAppender(store: dst)
        let r = try w.receive(Array(frames.prefix(4)))  // the first append (3 frames) and one of the second
        #expect(r.frames == 3 && r.incomplete == 1 && r.events == 25, "\(r)")
        #expect(try dst.cursor()[s.replicaID] == Seq(25))  // the open part is not visible
        #expect(w.openAppends == [s.replicaID: Seq(35)])
        let rest = try w.receive(Array(frames.dropFirst(3)))  // from the committed point again: the open frame is held
        #expect(rest.frames == 3 && rest.incomplete == 0 && rest.events == 25 && rest.alreadyHeld == 1)
        #expect(w.openAppends.isEmpty)
        try w.close()
        #expect(try dst.cursor() == (try s.cursor()))
        #expect(try Verifier(store: dst).run().isClean)

        // Cut off inside an append and closed: the open part is dropped at the next open.
        let other = try Store.create(at: dir.path + "/other")
        let w2 = try LogAppender(store: other)
        _ = try w2.receive(Array(frames.prefix(5)))
        try w2.close()
        let w3 = try LogAppender(store: other)
        #expect(try other.cursor()[s.replicaID] == Seq(25))
        #expect(try w3.receive(Array(frames.dropFirst(3))).frames == 3)
        try w3.close()
        #expect(try other.cursor() == (try s.cursor()))
        #expect(try Verifier(store: other).run().isClean)
    }

    // MARK: sessions

    func decoded(_ frames: Int, next: ReplicationCursor, more: Bool, complete: Bool = true) -> FramePage.Decoded {
        FramePage.Decoded(frames: Array(repeating: [0], count: frames), next: complete ? next : nil, more: more, complete: complete)
    }

    func received(_ frames: Int, events: Int) -> ReceiveResult {
        var r = ReceiveResult()
        r.frames = frames
        r.events = events
        return r
    }

    @Test func pullSessionPagesUntilThePeerHasNoMore() {
        var s = PullSession(local: .empty, limits: PageLimits(maxBytes: 100, maxFrames: 5), jitter: { 1 })
        let c1 = ReplicationCursor([a: Seq(10)]), c2 = ReplicationCursor([a: Seq(20)])
        #expect(s.start() == .request(since: .empty, limits: PageLimits(maxBytes: 100, maxFrames: 5)))
        #expect(s.received(decoded(2, next: c1, more: true), bytes: 50) == .apply([[0], [0]]))
        #expect(s.applied(received(2, events: 10), cursor: c1) == .request(since: c1, limits: s.limits))
        #expect(s.received(decoded(2, next: c2, more: false), bytes: 50) == .apply([[0], [0]]))
        guard case .done(let summary) = s.applied(received(2, events: 10), cursor: c2) else { Issue.record("not done"); return }
        #expect(summary.pages == 2 && summary.frames == 4 && summary.events == 20 && summary.bytes == 100 && summary.peerCursor == c2)
    }

    /// A page the store refused for frames of its own origin (`own_log`: a fork of its own log,
    /// or an unsigned origin's frames it has no evidence of losing) is asked for again without
    /// that origin, from where the page or the peer's cursor says it goes, and the pull goes on;
    /// a refusal with nothing further to leave out, or in a session that knows no own origin,
    /// ends it as before.
    @Test func pullSessionLeavesOutTheOwnOriginTheStoreRefused() {
        let own = ReplicaID("5d1c9f4e-8a8b-4c57-9d4e-3f2a1b0c9d8e")!
        let refusal = TransferFailure(.ownLog, "this replica's own log has forked")
        let local = ReplicationCursor([a: Seq(2), own: Seq(3)])
        var s = PullSession(local: local, own: own, jitter: { 1 })
        _ = s.start()
        let next = ReplicationCursor([a: Seq(5), own: Seq(6)])
        #expect(s.received(decoded(2, next: next, more: false), bytes: 50) == .apply([[0], [0]]))
        let without = ReplicationCursor([a: Seq(2), own: Seq(6)])
        #expect(s.failed(refusal) == .request(since: without, limits: s.limits))
        #expect(s.summary.ownLogRefused == "this replica's own log has forked")
        #expect(s.received(decoded(1, next: ReplicationCursor([a: Seq(5), own: Seq(6)]), more: true), bytes: 20) == .apply([[0]]))
        // Taken: the store's cursor moved for `a`; the own origin is still left out past 6.
        #expect(s.applied(received(1, events: 3), cursor: ReplicationCursor([a: Seq(5), own: Seq(3)]))
                == .request(since: ReplicationCursor([a: Seq(5), own: Seq(6)]), limits: s.limits))
        // Refused again with nothing further to leave out: the session ends.
        _ = s.received(decoded(1, next: ReplicationCursor([a: Seq(5), own: Seq(6)]), more: false), bytes: 20)
        guard case .fail(let f) = s.failed(refusal) else { Issue.record("a second refusal went on"); return }
        #expect(f.code == .ownLog)
        // A session that goes on once more (a share joined) starts where this one left the own
        // origin out, not asking for the page the store refused again.
        var again = PullSession(local: ReplicationCursor([a: Seq(5), own: Seq(3)]), own: own, ownPast: s.ownPast, jitter: { 1 })
        #expect(s.ownPast == Seq(6))
        #expect(again.start() == .request(since: ReplicationCursor([a: Seq(5), own: Seq(6)]), limits: again.limits))
        // Comparing the store's tip: the first request asks for the own origin from one seq
        // before it; a peer whose floor is there (cursor expired) is asked again from the tip,
        // the compare given up, not the pull.
        let tip = LogTip(lastSeq: Seq(3), lastHLC: .zero, lastHash: FrameHash(bytes: [UInt8](repeating: 7, count: 32)))
        var c = PullSession(local: local, own: own, ownTip: tip, jitter: { 1 })
        #expect(c.start() == .request(since: ReplicationCursor([a: Seq(2), own: Seq(2)]), limits: c.limits))
        #expect(c.failed(TransferFailure(.cursorExpired, "gone")) == .request(since: local, limits: c.limits))
        guard case .fail(let expired) = c.failed(TransferFailure(.cursorExpired, "gone")) else { Issue.record("went on"); return }
        #expect(expired.code == .cursorExpired)
        // A tip the cursor is not at (it moved) is not compared.
        var d = PullSession(local: ReplicationCursor([a: Seq(2), own: Seq(4)]), own: own, ownTip: tip, jitter: { 1 })
        #expect(d.start() == .request(since: ReplicationCursor([a: Seq(2), own: Seq(4)]), limits: d.limits))
        // A session that knows no own origin ends at the first.
        var t = PullSession(local: local, jitter: { 1 })
        _ = t.start()
        _ = t.received(decoded(2, next: next, more: false), bytes: 50)
        guard case .fail = t.failed(refusal) else { Issue.record("went on without an own origin"); return }
        // A peer naming the origin one seq further at each page, and sending nothing else new,
        // ends the session as one sending nothing new does.
        var h = PullSession(local: local, own: own, jitter: { 1 })
        _ = h.start()
        var ended = false
        for k in 1...10 {
            _ = h.received(decoded(1, next: ReplicationCursor([a: Seq(2), own: Seq(3 + UInt64(k))]), more: true), bytes: 20)
            if case .fail(let f) = h.failed(refusal) {
                #expect(f.code == .ownLog && k == 3, "ended at page \(k)")
                ended = true
                break
            }
        }
        #expect(ended)
        // Another refusal (not of the own origin) ends it too.
        var u = PullSession(local: local, own: own, jitter: { 1 })
        _ = u.start()
        _ = u.received(decoded(2, next: next, more: false), bytes: 50)
        guard case .fail = u.failed(TransferFailure(.corrupt, "a broken chain")) else { Issue.record("a corrupt page went on"); return }
    }

    /// Once the store refused its own origin, a page's frames of it are left out before the
    /// store sees them (a peer that sends no cursor of its own: they would start past the store's
    /// log, a gap), each moving the place asked from; a page cut off (no `next`, no cursor of the
    /// peer's) is placed by its own frames, where before the refusal ended the pull.
    @Test func pullSessionLeavesOutTheRefusedOwnOriginsFramesAsTheyCome() throws {
        let dir = TempDir()
        let mine = try store(dir, frames: 3, eventsPerFrame: 2)
        let own = mine.replicaID
        var frames: [[UInt8]] = []
        try LogReader(store: mine).forEachFrame(origin: own) { _, b in frames.append(Array(b)); return true }
        let refusal = TransferFailure(.ownLog, "this replica's own log has forked")
        var s = PullSession(local: ReplicationCursor([a: Seq(1)]), own: own, jitter: { 1 })
        _ = s.start()
        let cut = FramePage.Decoded(frames: [frames[0], [0]], next: nil, more: true, complete: false)
        #expect(s.received(cut, bytes: 10) == .apply([frames[0], [0]]))
        #expect(s.failed(refusal) == .request(since: ReplicationCursor([a: Seq(1), own: Seq(2)]), limits: s.limits))
        let mixed = FramePage.Decoded(frames: [frames[1], [0], frames[2]], next: ReplicationCursor([a: Seq(2)]), more: true, complete: true)
        #expect(s.received(mixed, bytes: 10) == .apply([[0]]))
        #expect(s.applied(received(1, events: 1), cursor: ReplicationCursor([a: Seq(2)]))
                == .request(since: ReplicationCursor([a: Seq(2), own: Seq(6)]), limits: s.limits))
        // A page of its frames alone brings nothing new.
        let ownOnly = FramePage.Decoded(frames: [frames[2]], next: ReplicationCursor([a: Seq(2)]), more: false, complete: true)
        guard case .done(let summary) = s.received(ownOnly, bytes: 10) else { Issue.record("not done"); return }
        #expect(summary.ownLogRefused != nil)
    }

    @Test func pullSessionNothingNewIsOneRequest() {
        var s = PullSession(local: ReplicationCursor([a: Seq(3)]))
        _ = s.start()
        guard case .done(let summary) = s.received(decoded(0, next: ReplicationCursor([a: Seq(3)]), more: false), bytes: 20) else {
            Issue.record("expected done")
            return
        }
        #expect(summary.pages == 1 && summary.frames == 0)
    }

    @Test func pullSessionKeepsWholeFramesOfACutPageAndAsksAgainFromWhereTheStoreIs() {
        var s = PullSession(local: .empty, retry: RetryPolicy(attempts: 3, base: 0.1, cap: 1), jitter: { 1 })
        let c1 = ReplicationCursor([a: Seq(10)]), c2 = ReplicationCursor([a: Seq(30)])
        _ = s.start()
        // Cut off after one whole frame: apply it, wait, ask again from the store's cursor.
        #expect(s.received(decoded(1, next: .empty, more: true, complete: false), bytes: 70) == .apply([[0]]))
        #expect(s.applied(received(1, events: 10), cursor: c1) == .wait(seconds: 0.1))
        #expect(s.resume() == .request(since: c1, limits: s.limits))
        // A duplicated page (frames already held): nothing new, but the peer says it is done.
        #expect(s.received(decoded(1, next: c1, more: true), bytes: 70) == .apply([[0]]))
        var held = ReceiveResult()
        held.alreadyHeld = 1
        #expect(s.applied(held, cursor: c1) == .request(since: c1, limits: s.limits))
        #expect(s.received(decoded(2, next: c2, more: false), bytes: 140) == .apply([[0], [0]]))
        guard case .done(let summary) = s.applied(received(2, events: 20), cursor: c2) else { Issue.record("not done"); return }
        #expect(summary.frames == 3 && summary.alreadyHeld == 1 && summary.retries == 1)
    }

    @Test func pullSessionRetriesTransientFailuresWithBackoffThenGivesUp() {
        var s = PullSession(local: .empty, retry: RetryPolicy(attempts: 4, base: 0.2, cap: 0.5), jitter: { 0 })
        _ = s.start()
        #expect(s.failed(.transient("connection refused")) == .wait(seconds: 0.1))   // 0.2 × 0.5
        _ = s.resume()
        #expect(s.failed(.transient("connection refused")) == .wait(seconds: 0.2))   // 0.4 × 0.5
        _ = s.resume()
        #expect(s.failed(.transient("connection refused")) == .wait(seconds: 0.25))  // capped at 0.5, × 0.5
        _ = s.resume()
        #expect(s.failed(.transient("connection refused")) == .fail(.transient("connection refused (gave up after 4 attempts)")))
    }

    /// A server that answers 429 or 503 says how long to stay away (`Retry-After`). Before, the
    /// sessions retried on their own backoff alone: five attempts over about 1.5-3 s, so a user
    /// with 16 pushes open (told to come back in a second each time) or a watch refused for 5 s
    /// spent every attempt early. Each wait is now at least the pause asked for, within
    /// `TransferFailure.retryAfterMax`, and the backoff where that is longer.
    @Test func sessionsWaitAtLeastWhatThePeerAsksFor() {
        func asking(_ seconds: Double?) -> TransferFailure {
            var f = TransferFailure(.rateLimited, "429", status: 429)
            f.retryAfter = seconds
            return f
        }
        var s = PullSession(local: .empty, retry: RetryPolicy(attempts: 9, base: 0.2, cap: 5), jitter: { 0 })
        _ = s.start()
        #expect(s.failed(asking(3)) == .wait(seconds: 3))          // the backoff would be 0.1
        _ = s.resume()
        #expect(s.failed(asking(0)) == .wait(seconds: 0.2))        // the backoff is longer
        _ = s.resume()
        #expect(s.failed(asking(86_400)) == .wait(seconds: TransferFailure.retryAfterMax))
        _ = s.resume()
        #expect(s.failed(asking(-5)) == .wait(seconds: 0.8))
        _ = s.resume()
        #expect(s.failed(asking(.nan)) == .wait(seconds: 1.6))
        var p = PushSession(retry: RetryPolicy(attempts: 3, base: 0.2, cap: 5), jitter: { 1 })
        _ = p.start()
        _ = p.peerCursor(.empty)
        _ = p.collected(FramePage(frames: [[1]], next: ReplicationCursor([a: Seq(1)]), more: false))
        // Clients turned away together are told the same pause: each comes back within half of
        // it more (here the draw is 1), not all at the same moment; the pause asked is taken at
        // most at the bound, so a wait is at most half again as long.
        #expect(p.failed(asking(2)) == .wait(seconds: 3))
        _ = p.resume()
        _ = p.peerCursor(.empty)
        _ = p.collected(FramePage(frames: [[1]], next: ReplicationCursor([a: Seq(1)]), more: false))
        #expect(p.failed(asking(86_400)) == .wait(seconds: TransferFailure.retryAfterMax * 1.5))
        // A policy of an app's whose delays are not numbers waits none rather than trapping
        // the sleep, and no pause converts to a sleep that traps.
        var odd = PullSession(local: .empty, retry: RetryPolicy(attempts: 3, base: 0.2, cap: .nan), jitter: { 1 })
        _ = odd.start()
        #expect(odd.failed(.transient("reset")) == .wait(seconds: 0))
        #expect(TransferFailure.nanoseconds(.nan) == 0 && TransferFailure.nanoseconds(-1) == 0)
        #expect(TransferFailure.nanoseconds(.infinity) == 31_536_000_000_000_000 && TransferFailure.nanoseconds(1.5) == 1_500_000_000)
        // A refusal is not waited on, whatever it carries.
        var refusal = TransferFailure(.forbidden, "403", status: 403)
        refusal.retryAfter = 30
        var q = PullSession(local: .empty)
        _ = q.start()
        #expect(q.failed(refusal) == .fail(refusal))
    }

    @Test func pullSessionStopsAtOnceOnPermanentFailuresAndExpiredCursors() {
        var s = PullSession(local: .empty)
        _ = s.start()
        #expect(s.failed(.permanent("401 unauthorized")) == .fail(.permanent("401 unauthorized")))
        var t = PullSession(local: .empty)
        _ = t.start()
        #expect(t.failed(.cursorExpired("compacted")) == .fail(.cursorExpired("compacted")))
    }

    @Test func pullSessionGivesUpOnAPeerThatNeverProgresses() {
        var s = PullSession(local: .empty)
        _ = s.start()
        var last = PullSession.Action.done(TransferSummary())
        for _ in 0..<3 { last = s.received(decoded(0, next: .empty, more: true), bytes: 20) }
        guard case .fail(let f) = last, f.retry == .permanent else { Issue.record("expected a failure, got \(last)"); return }
        #expect(f.message.contains("sent nothing new"))
    }

    @Test func pushSessionSendsPagesPastThePeersCursor() {
        var s = PushSession(limits: PageLimits(maxBytes: 10, maxFrames: 1), jitter: { 1 })
        let c0 = ReplicationCursor([b: Seq(4)]), c1 = c0.merged(with: ReplicationCursor([a: Seq(5)]))
        let c2 = c0.merged(with: ReplicationCursor([a: Seq(9)]))
        #expect(s.start() == .requestCursor)
        #expect(s.peerCursor(c0) == .collect(since: c0, limits: s.limits))
        let p1 = FramePage(frames: [[1, 2]], next: c1, more: true)
        #expect(s.collected(p1) == .send(p1))
        #expect(s.sent(received(1, events: 5), peer: c1) == .collect(since: c1, limits: s.limits))
        let p2 = FramePage(frames: [[3]], next: c2, more: false)
        #expect(s.collected(p2) == .send(p2))
        guard case .done(let summary) = s.sent(received(1, events: 4), peer: c2) else { Issue.record("not done"); return }
        #expect(summary.pages == 2 && summary.events == 9 && summary.bytes == 3 && summary.peerCursor == c2)
    }

    @Test func pushSessionStartsFromACursorAPullJustLearned() {
        var s = PushSession()
        let known = ReplicationCursor([b: Seq(7)])
        #expect(s.start(known: known) == .collect(since: known, limits: s.limits))
        guard case .done(let summary) = s.collected(FramePage(frames: [], next: known, more: false)) else { Issue.record("not done"); return }
        #expect(summary.pages == 0 && summary.peerCursor == known)
    }

    @Test func pushSessionAsksWhereThePeerIsAfterAFailedSend() {
        var s = PushSession(retry: RetryPolicy(attempts: 2, base: 1, cap: 1), jitter: { 1 })
        _ = s.start()
        _ = s.peerCursor(.empty)
        let p = FramePage(frames: [[1]], next: ReplicationCursor([a: Seq(1)]), more: false)
        _ = s.collected(p)
        #expect(s.failed(.transient("reset by peer")) == .wait(seconds: 1))
        #expect(s.resume() == .requestCursor)
        // The page had landed after all: the next collection starts past it and finds nothing.
        #expect(s.peerCursor(ReplicationCursor([a: Seq(1)])) == .collect(since: ReplicationCursor([a: Seq(1)]), limits: s.limits))
        guard case .done = s.collected(FramePage(frames: [], next: ReplicationCursor([a: Seq(1)]), more: false)) else { Issue.record("not done"); return }
    }

    /// A peer that answers where it stands but fails every page gets the policy's attempts, not
    /// more: asking its cursor again between tries does not give the push a new budget.
    @Test func pushSessionGivesUpOnAPeerThatFailsEveryPage() {
        var s = PushSession(retry: RetryPolicy(attempts: 3, base: 1, cap: 1), jitter: { 1 })
        let p = FramePage(frames: [[1]], next: ReplicationCursor([a: Seq(1)]), more: false)
        var action = s.start()
        for _ in 0..<20 {
            switch action {
            case .requestCursor: action = s.peerCursor(.empty)
            case .collect: action = s.collected(p)
            case .send: action = s.failed(TransferFailure(.serverError, "500", status: 500))
            case .wait: action = s.resume()
            case .done, .fail: break
            }
            if case .fail = action { break }
        }
        guard case .fail(let f) = action else { Issue.record("still trying after 20 steps: \(action)"); return }
        #expect(f.message.contains("gave up after 3 attempts") && s.summary.retries == 2)
    }

    /// A page refused for a gap (the session's idea of the peer's cursor was wrong: a cursor
    /// learnt before, an answer showing frames the peer later dropped) has the session ask the
    /// peer where it is and go on from there; a second gap before any page is taken ends it.
    @Test func pushSessionAsksThePeersCursorAgainAfterAGap() {
        var s = PushSession(jitter: { 1 })
        let stale = ReplicationCursor([a: Seq(5)]), real = ReplicationCursor([a: Seq(3)])
        #expect(s.start(known: stale) == .collect(since: stale, limits: s.limits))
        let p1 = FramePage(frames: [[1]], next: ReplicationCursor([a: Seq(6)]), more: false)
        _ = s.collected(p1)
        let gap = TransferFailure(.gap, "origin \(a): a frame starts at seq 6, the log ends at 3", origin: a, status: 422)
        #expect(s.failed(gap) == .requestCursor)
        #expect(s.peerCursor(real) == .collect(since: real, limits: s.limits))
        let p2 = FramePage(frames: [[2]], next: ReplicationCursor([a: Seq(6)]), more: false)
        _ = s.collected(p2)
        guard case .done(let summary) = s.sent(received(1, events: 3), peer: ReplicationCursor([a: Seq(6)])) else { Issue.record("not done"); return }
        #expect(summary.events == 3 && summary.peerCursor == ReplicationCursor([a: Seq(6)]))
        // A peer that answers a gap again at once: the push ends with it.
        var t = PushSession(jitter: { 1 })
        _ = t.start(known: stale)
        _ = t.collected(p1)
        _ = t.failed(gap)
        _ = t.peerCursor(real)
        _ = t.collected(p2)
        guard case .fail(let f) = t.failed(gap) else { Issue.record("a second gap went on"); return }
        #expect(f.code == .gap)
    }

    /// A peer that lost the logs of two origins at once (restored from a backup) has each
    /// explained in the same push: a gap naming the first, then one naming the second, each has
    /// the peer's cursor asked for again, where the second gap ended the push. A gap naming an
    /// origin asked about already, one naming an origin the page did not hold, or one naming
    /// none after those named, still ends it; a page taken lets each be asked about again.
    @Test func pushSessionHasEachLostOriginExplained() throws {
        let dir = TempDir()
        let first = try Store.create(at: dir.path + "/first"), second = try Store.create(at: dir.path + "/second")
        for (store, seed) in [(first, UInt64(1)), (second, 2)] {
            let w = try LogAppender(store: store)
            for k in 0..<6 { _ = try w.append(Workload.mutations(1, seed: seed * 10 + UInt64(k), actor: nil)) }
            try w.close()
        }
        let x = first.replicaID, y = second.replicaID
        func page(_ since: ReplicationCursor) throws -> FramePage {
            var frames: [[UInt8]] = []
            for (store, o) in [(first, x), (second, y)] {
                frames += try FramePage.collect(from: store, since: ReplicationCursor([o: since[o]]), limits: PageLimits()).frames
            }
            return FramePage(frames: frames, next: ReplicationCursor([x: Seq(6), y: Seq(6)]), more: false)
        }
        func gap(_ o: ReplicaID?) -> TransferFailure {
            TransferFailure(.gap, "a frame starts past the log's end", origin: o, status: 422)
        }
        let stale = ReplicationCursor([x: Seq(5), y: Seq(5)])
        let other = ReplicaID("5d1c9f4e-8a8b-4c57-9d4e-3f2a1b0c9d8e")!
        // Both explained, one after the other, and the push goes on to its end.
        var s = PushSession(jitter: { 1 })
        #expect(s.start(known: stale) == .collect(since: stale, limits: s.limits))
        _ = s.collected(try page(stale))
        #expect(s.failed(gap(x)) == .requestCursor)
        let afterX = ReplicationCursor([x: Seq(3), y: Seq(5)])
        #expect(s.peerCursor(afterX) == .collect(since: afterX, limits: s.limits))
        _ = s.collected(try page(afterX))
        #expect(s.failed(gap(y)) == .requestCursor)
        let real = ReplicationCursor([x: Seq(3), y: Seq(2)])
        #expect(s.peerCursor(real) == .collect(since: real, limits: s.limits))
        _ = s.collected(try page(real))
        guard case .done(let summary) = s.sent(received(2, events: 7), peer: ReplicationCursor([x: Seq(6), y: Seq(6)])) else { Issue.record("not done"); return }
        #expect(summary.peerCursor == ReplicationCursor([x: Seq(6), y: Seq(6)]))
        // What still ends it, each after a first gap naming x.
        for (name, second) in [("x again", gap(x)), ("an origin the page did not hold", gap(other)), ("no origin", gap(nil))] {
            var t = PushSession(jitter: { 1 })
            _ = t.start(known: stale)
            _ = t.collected(try page(stale))
            _ = t.failed(gap(x))
            _ = t.peerCursor(afterX)
            _ = t.collected(try page(afterX))
            guard case .fail(let f) = t.failed(second) else { Issue.record("a gap naming \(name) went on"); continue }
            #expect(f.code == .gap, "\(name)")
        }
        // A gap naming none, then one naming an origin: ends too.
        var u = PushSession(jitter: { 1 })
        _ = u.start(known: stale)
        _ = u.collected(try page(stale))
        #expect(u.failed(gap(nil)) == .requestCursor)
        _ = u.peerCursor(afterX)
        _ = u.collected(try page(afterX))
        guard case .fail = u.failed(gap(y)) else { Issue.record("a gap after one naming none went on"); return }
        // A page taken (progress) lets x be asked about again.
        var v = PushSession(limits: PageLimits(maxBytes: 1 << 20, maxFrames: 1), jitter: { 1 })
        _ = v.start(known: stale)
        _ = v.collected(try page(stale))
        #expect(v.failed(gap(x)) == .requestCursor)
        _ = v.peerCursor(afterX)
        _ = v.collected(FramePage(frames: try page(afterX).frames, next: ReplicationCursor([x: Seq(4), y: Seq(5)]), more: true))
        #expect(v.sent(received(1, events: 1), peer: ReplicationCursor([x: Seq(4), y: Seq(5)])) == .collect(since: ReplicationCursor([x: Seq(4), y: Seq(5)]), limits: v.limits))
        _ = v.collected(try page(ReplicationCursor([x: Seq(4), y: Seq(5)])))
        #expect(v.failed(gap(x)) == .requestCursor)
    }

    /// A store of `frames` appends of `eventsPerFrame` events each (a frame each).
    func store(_ dir: TempDir, frames: Int, eventsPerFrame: Int) throws -> Store {
        let store = try Store.create(at: dir.path + "/s\(frames)x\(eventsPerFrame)")
        let w = try LogAppender(store: store)
        for k in 0..<frames { _ = try w.append(Workload.mutations(eventsPerFrame, seed: UInt64(k), actor: nil)) }
        try w.close()
        return store
    }

    /// Drives a push of `store`, `perPage` frames a page, against a peer whose answer to the `n`th
    /// page sent, collected past `since` (the seq of the store's origin), is `answer(n, page,
    /// since)`: a cursor (the page taken), or a failure. Every request for the peer's cursor is
    /// answered with `asked`. Returns the session's last action and the pages sent.
    func push(_ store: Store, perPage: Int = 1, known: ReplicationCursor? = nil, asked: ReplicationCursor = .empty, steps: Int = 4000,
              answer: (Int, FramePage, UInt64) -> Result<ReplicationCursor, TransferFailure>) throws -> (PushSession.Action, Int) {
        var s = PushSession(limits: PageLimits(maxBytes: 1 << 20, maxFrames: perPage), jitter: { 0 })
        var action = s.start(known: known)
        var sent = 0
        var from: UInt64 = 0
        for _ in 0..<steps {
            switch action {
            case .requestCursor: action = s.peerCursor(asked)
            case .collect(let since, let limits):
                from = since[store.replicaID].rawValue
                action = s.collected(try FramePage.collect(from: store, since: since, limits: limits))
            case .send(let page):
                sent += 1
                switch answer(sent, page, from) {
                case .success(let c): action = s.sent(received(1, events: 1), peer: c)
                case .failure(let f): action = s.failed(f)
                }
            case .wait: action = s.resume()
            case .done, .fail: return (action, sent)
            }
        }
        return (action, sent)
    }

    /// A peer whose answers keep a push sending what it sent before cannot keep it going: taking
    /// a page, then answering as if it had lost it, or refusing the next for a gap and then
    /// saying it holds less, had the push send the same frames for ever (every answer differed
    /// from the one before, and a page taken renewed the gap allowance); answering one seq past
    /// where the page began had it send the page's frame again for each seq of the log. The push
    /// now ends once what it sent again passes what retries allow, and a peer that takes every
    /// page, or whose link drops every other page, still gets them all.
    @Test func pushSessionEndsAgainstAPeerThatKeepsItSendingAgain() throws {
        let dir = TempDir()
        let small = try store(dir, frames: 10, eventsPerFrame: 1), large = try store(dir, frames: 10, eventsPerFrame: 100)
        let o = small.replicaID
        // A peer that takes every page: ten pages, done.
        for st in [small, large] {
            let (whole, pages) = try push(st) { _, page, _ in .success(page.next) }
            guard case .done(let summary) = whole else { Issue.record("a plain push: \(whole)"); return }
            let tip = try st.cursor()
            #expect(pages == 10 && summary.peerCursor == tip)
        }
        func endsSendingAgain(_ name: String, _ st: Store, _ answer: (Int, FramePage, UInt64) -> Result<ReplicationCursor, TransferFailure>) throws {
            let (action, pages) = try push(st, answer: answer)
            guard case .fail(let f) = action else { Issue.record("\(name) kept the push going: \(action) after \(pages) pages"); return }
            #expect(f.retry == .permanent && f.message.contains("send again") && pages < 40, "\(name): \(f.message) after \(pages) pages")
        }
        // A peer that takes a page, then answers the next as if it held only the first seq.
        try endsSendingAgain("a forgetting peer", small) { n, page, _ in .success(n % 2 == 1 ? page.next : ReplicationCursor([o: Seq(1)])) }
        // A peer that takes a page, refuses the next for a gap, and then says it holds nothing.
        let gap = TransferFailure(.gap, "origin \(o): the log ends at 0", origin: o, status: 422)
        try endsSendingAgain("a peer of gaps", small) { n, page, _ in n % 2 == 1 ? .success(page.next) : .failure(gap) }
        // A peer that takes one seq of each frame of 100.
        let l = large.replicaID
        try endsSendingAgain("a sliding peer", large) { _, _, since in .success(ReplicationCursor([l: Seq(since + 1)])) }
        // A peer that answers with other origins it says it holds, more each time, and never
        // takes the page: the push ends as one that stalls.
        let other = ReplicaID("5d1c9f4e-8a8b-4c57-9d4e-3f2a1b0c9d8e")!
        let (drifts, driftPages) = try push(small) { n, _, _ in .success(ReplicationCursor([other: Seq(UInt64(n))])) }
        guard case .fail(let d) = drifts else { Issue.record("a drifting peer kept the push going: \(drifts) after \(driftPages) pages"); return }
        #expect(d.retry == .permanent && driftPages <= 3, "\(d.message) after \(driftPages) pages")
        // A peer whose link drops every other page (transient failures, retried), and whose
        // cursor then shows less than its answers did (a store's hub shows an open append to the
        // push carrying it, and durable positions in its cursor): the whole log, each frame
        // sent at most twice.
        let reset = TransferFailure.transient("reset by peer")
        for asked in [ReplicationCursor(), ReplicationCursor([l: Seq(1)])] {
            var delivered = ReplicationCursor()
            let (flaky, pages) = try push(large, asked: asked) { n, page, _ in
                if n % 2 == 0 { return .failure(reset) }
                delivered = page.next
                return .success(page.next)
            }
            guard case .done = flaky else { Issue.record("a flaky link (cursor \(asked)): \(flaky)"); return }
            let tip = try large.cursor()
            #expect(delivered == tip && pages <= 20, "\(pages) pages")
        }
    }

    /// What an honest peer's answers make a push send again stays within the bound: a cursor
    /// learnt before and far ahead of the peer (its first page refused for a gap, then every
    /// frame from the peer's real place), counted as sent once, not as sent again because they
    /// lie below the refused page's frames; and a gap whose cursor request then fails on a
    /// dropped link is still believed for its origin when asked again.
    @Test func pushSessionCountsOnlyFramesSentBeforeAsSentAgain() throws {
        let dir = TempDir()
        let st = try store(dir, frames: 60, eventsPerFrame: 1)
        let o = st.replicaID
        let gap = TransferFailure(.gap, "origin \(o): the log ends at 0", origin: o, status: 422)
        let (action, pages) = try push(st, known: ReplicationCursor([o: Seq(50)])) { n, page, _ in n == 1 ? .failure(gap) : .success(page.next) }
        guard case .done(let summary) = action else { Issue.record("a stale cursor ahead: \(action) after \(pages) pages"); return }
        let tip = try st.cursor()
        #expect(summary.peerCursor == tip && pages == 61)
        // A gap, then a cursor request lost to a dropped link: the cursor asked again is believed.
        var s = PushSession(jitter: { 0 })
        _ = s.start(known: .empty)
        _ = s.collected(FramePage(frames: [[1]], next: ReplicationCursor([a: Seq(5)]), more: true))
        #expect(s.sent(received(1, events: 5), peer: ReplicationCursor([a: Seq(5)])) == .collect(since: ReplicationCursor([a: Seq(5)]), limits: s.limits))
        _ = s.collected(FramePage(frames: [[2]], next: ReplicationCursor([a: Seq(6)]), more: false))
        #expect(s.failed(TransferFailure(.gap, "origin \(a): the log ends at 3", origin: a, status: 422)) == .requestCursor)
        guard case .wait = s.failed(.transient("reset by peer")) else { Issue.record("a dropped link ended the push"); return }
        #expect(s.resume() == .requestCursor)
        #expect(s.peerCursor(ReplicationCursor([a: Seq(3)])) == .collect(since: ReplicationCursor([a: Seq(3)]), limits: s.limits))
    }

    /// The runs of seqs a push has sent: a frame is in when all its seqs were, and inserting
    /// merges what touches, against a plain set of seqs over random frames.
    @Test func seqRunsAgreeWithASetOfSeqs() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            var runs = SeqRuns(), seen = Set<UInt64>()
            for _ in 0..<40 {
                let first = UInt64.random(in: 0...60, using: &rng), count = UInt64.random(in: 1...4, using: &rng)
                let r = first...(first + count - 1)
                let fresh = !r.allSatisfy(seen.contains)
                let inserted = runs.insert(r)
                #expect(inserted == fresh, "\(r) against \(seen.sorted())")
                seen.formUnion(r)
            }
        }
        var edge = SeqRuns()
        let inserts = [edge.insert(UInt64.max...UInt64.max), edge.insert(0...0), edge.insert(UInt64.max...UInt64.max),
                       edge.insert(1...(UInt64.max - 1)), edge.insert(5...9)]
        #expect(inserts == [true, true, false, true, false])
    }

    /// An origin an answer placed (a scoped peer shows another user's log it holds only in the
    /// answer to the page that held it) stays where it was placed when a later answer does not
    /// show it: the next page is collected past it, not from its start again; the summary's
    /// cursor is still the peer's answer. A gap naming it has the peer's word on it believed.
    @Test func pushSessionKeepsAnOriginWhereAnAnswerPlacedIt() {
        var s = PushSession(limits: PageLimits(maxBytes: 1 << 20, maxFrames: 1), jitter: { 1 })
        #expect(s.start(known: .empty) == .collect(since: .empty, limits: s.limits))
        _ = s.collected(FramePage(frames: [[1]], next: ReplicationCursor([b: Seq(2)]), more: true))
        #expect(s.sent(received(1, events: 2), peer: ReplicationCursor([b: Seq(2)])) == .collect(since: ReplicationCursor([b: Seq(2)]), limits: s.limits))
        _ = s.collected(FramePage(frames: [[2]], next: ReplicationCursor([b: Seq(2), a: Seq(1)]), more: true))
        let both = ReplicationCursor([a: Seq(1), b: Seq(2)])
        #expect(s.sent(received(1, events: 1), peer: ReplicationCursor([a: Seq(1)])) == .collect(since: both, limits: s.limits))
        // The summary keeps the peer's own word (what is remembered of it, and compaction trusts).
        #expect(s.summary.peerCursor == ReplicationCursor([a: Seq(1)]))
        // A gap naming b: the peer's cursor, which does not show b, is believed for b.
        _ = s.collected(FramePage(frames: [[3]], next: ReplicationCursor([b: Seq(3), a: Seq(1)]), more: false))
        #expect(s.failed(TransferFailure(.gap, "origin \(b): the log ends at 0", origin: b, status: 422)) == .requestCursor)
        #expect(s.peerCursor(ReplicationCursor([a: Seq(1)])) == .collect(since: ReplicationCursor([a: Seq(1)]), limits: s.limits))
    }

    /// A page refused (403 `forbidden`) for one origin of it leaves that origin out from then on
    /// and pushes the rest; the refusal is in the summary. An origin the page did not hold, or
    /// a refusal naming none, ends the push as before.
    @Test func pushSessionLeavesOutAnOriginThePeerRefusesAndGoesOn() throws {
        let dir = TempDir()
        let mine = try Store.create(at: dir.path + "/mine"), theirs = try Store.create(at: dir.path + "/theirs")
        for (store, seed) in [(mine, UInt64(1)), (theirs, 2)] {
            let w = try LogAppender(store: store)
            _ = try w.append(Workload.mutations(2, seed: seed, actor: nil))
            try w.close()
        }
        let theirFrames = try FramePage.collect(from: theirs, since: .empty, limits: PageLimits()).frames
        let myFrames = try FramePage.collect(from: mine, since: .empty, limits: PageLimits()).frames
        let both = FramePage(frames: theirFrames + myFrames, next: ReplicationCursor([theirs.replicaID: Seq(2), mine.replicaID: Seq(2)]), more: false)
        let refusal = TransferFailure(.forbidden, "origin \(theirs.replicaID) belongs to another user", origin: theirs.replicaID, status: 403)

        var s = PushSession(jitter: { 1 })
        _ = s.start(known: .empty)
        _ = s.collected(both)
        #expect(s.failed(refusal) == .collect(since: .empty, limits: s.limits))
        #expect(s.skipping == [theirs.replicaID])
        let rest = FramePage(frames: myFrames, next: ReplicationCursor([mine.replicaID: Seq(2)]), more: false)
        #expect(s.collected(rest) == .send(rest))
        guard case .done(let summary) = s.sent(received(1, events: 2), peer: ReplicationCursor([mine.replicaID: Seq(2)])) else { Issue.record("not done"); return }
        #expect(summary.refused == [theirs.replicaID: refusal.message] && summary.events == 2)

        // The same origin refused again (a peer that names it whatever is sent): the push ends.
        var again = PushSession(jitter: { 1 })
        _ = again.start(known: .empty)
        _ = again.collected(both)
        _ = again.failed(refusal)
        _ = again.collected(both)
        guard case .fail(let f) = again.failed(refusal) else { Issue.record("a second refusal of one origin went on"); return }
        #expect(f.code == .forbidden)
        // A refusal of the store's own origin ends the push (its user must fix it), and the
        // refusals of a push before are left out from the first page on, the own origin never.
        var own = PushSession(own: theirs.replicaID, jitter: { 1 })
        _ = own.start(known: .empty)
        _ = own.collected(both)
        guard case .fail = own.failed(refusal) else { Issue.record("a refusal of the own origin went on"); return }
        let seeded = PushSession(own: mine.replicaID, refused: [theirs.replicaID: "before", mine.replicaID: "never skipped"], jitter: { 1 })
        #expect(seeded.skipping == [theirs.replicaID] && seeded.summary.refused == [theirs.replicaID: "before"])
        // A refusal naming an origin the page does not hold, or none: the push ends.
        for other in [TransferFailure(.forbidden, "no", origin: a, status: 403), TransferFailure(.forbidden, "no", status: 403)] {
            var t = PushSession(jitter: { 1 })
            _ = t.start(known: .empty)
            _ = t.collected(both)
            guard case .fail = t.failed(other) else { Issue.record("\(other) did not end the push"); return }
        }
    }

    // MARK: tokens

    func policy(_ json: String) throws -> AccessPolicy { try AccessPolicy(json: Data(json.utf8), source: "tokens.json") }

    @Test func tokensFileErrorsNameThePrincipalAndField() {
        func message(_ json: String) -> String {
            do { _ = try policy(json); return "accepted" } catch { return String(describing: error) }
        }
        #expect(message("{") .contains("tokens.json: not valid JSON"))
        #expect(message("{\"principals\":[]}").contains("empty"))
        #expect(message("{\"principals\":[{\"name\":\"x\",\"token\":\"short\"}]}").contains("principals[0].token"))
        #expect(message("{\"principals\":[{\"name\":\"x\",\"token\":\"0123456789abcdef\",\"push\":[\"nope\"]}]}").contains("principals[0].push[0]"))
        #expect(message("{\"principals\":[{\"name\":\"x\",\"token\":\"0123456789abcdef\",\"pull\":\"yes\"}]}").contains("principals[0].pull"))
        #expect(message("{\"principals\":[{\"name\":\"x\",\"token\":\"0123456789abcdef\"},{\"name\":\"x\",\"token\":\"0123456789abcdeg\"}]}").contains("used twice"))
        #expect(message("{\"principals\":[{\"name\":\"x\",\"token\":\"0123456789abcdef\"},{\"name\":\"y\",\"token\":\"0123456789abcdef\"}]}").contains("same token"))
    }

    @Test func tokensAuthenticateToPrincipalsWithTheirRights() throws {
        let p = try policy("""
            {"principals":[
              {"name":"laptop","token":"laptop-token-0123456789","push":["\(a)"],"pull":true},
              {"name":"relay","token":"relay-token-0123456789","push":"*","pull":true},
              {"name":"reader","token":"reader-token-0123456789","pull":false}
            ]}
            """)
        #expect(try p.authenticate(authorization: "Bearer laptop-token-0123456789").get().name == "laptop")
        #expect(try p.authenticate(authorization: "Bearer relay-token-0123456789").get().push == .any)
        for bad in [nil, "laptop-token-0123456789", "Bearer laptop-token-012345678", "Bearer ", "Basic bGFwdG9w"] {
            guard case .failure(let d) = p.authenticate(authorization: bad) else { Issue.record("\(bad ?? "nil") accepted"); continue }
            #expect(d.status == 401 && !d.message.contains("laptop"))
        }
        let laptop = try p.authenticate(authorization: "Bearer laptop-token-0123456789").get()
        #expect(AccessPolicy.checkPush(laptop, origins: [a]) == nil)
        #expect(AccessPolicy.checkPush(laptop, origins: [a, b])?.status == 403)
        let reader = try p.authenticate(authorization: "Bearer reader-token-0123456789").get()
        #expect(AccessPolicy.checkPull(reader)?.status == 403)
        #expect(AccessPolicy.checkPull(laptop) == nil)
    }
}
