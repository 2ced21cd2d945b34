import EventLog
import Foundation

/// Exponential backoff with jitter: attempt n waits `base × 2^(n-1)`, at most `cap`, scaled by a
/// random factor in [0.5, 1] so that replicas retrying together spread out.
public struct RetryPolicy: Sendable, Equatable {
    public var attempts: Int
    public var base: Double
    public var cap: Double
    public init(attempts: Int = 5, base: Double = 0.2, cap: Double = 5) {
        self.attempts = attempts
        self.base = base
        self.cap = cap
    }

    /// Seconds to wait before retry number `attempt` (1-based), given a jitter draw in [0, 1].
    public func delay(attempt: Int, jitter: Double) -> Double {
        let raw = min(cap, base * pow(2, Double(max(0, attempt - 1))))
        return raw * (0.5 + 0.5 * min(1, max(0, jitter)))
    }
}

/// Counts consecutive transient failures of a session against its policy.
struct RetryBudget: Sendable {
    let policy: RetryPolicy
    let jitter: @Sendable () -> Double
    private(set) var failures = 0

    init(policy: RetryPolicy, jitter: @escaping @Sendable () -> Double) {
        self.policy = policy
        self.jitter = jitter
    }

    /// A step succeeded: the next failure is the first again.
    mutating func reset() { failures = 0 }

    /// Seconds to wait before trying again, or the failure that ends the session.
    mutating func after(_ failure: TransferFailure) -> Result<Double, TransferFailure> {
        guard failure.retry == .transient else { return .failure(failure) }
        failures += 1
        guard failures < policy.attempts else {
            var last = failure
            last.message += " (gave up after \(failures) attempts)"
            return .failure(last)
        }
        let draw = jitter()
        return .success(TransferFailure.pause(backoff: policy.delay(attempt: failures, jitter: draw), asked: failure.retryAfter, jitter: draw))
    }
}

/// What a session did, for reports and per-peer state.
public struct TransferSummary: Sendable, Equatable {
    public var pages = 0
    public var frames = 0
    public var events = 0
    public var bytes = 0
    public var alreadyHeld = 0
    public var retries = 0
    /// The peer's cursor as last seen (pull: the page's next cursor; push: the peer's answer).
    public var peerCursor: ReplicationCursor = .empty
    /// Pull: the peer's own cursor with the last whole page, when the transport carries it.
    public var peerHolds: ReplicationCursor?
    /// Pull: the store was bootstrapped from the peer's snapshot first (its cursor had expired).
    public var bootstrapped = false
    /// Push: the origins other than this store's own that the peer refused to take from this
    /// principal (403 `forbidden` naming the origin: another user's, one the principal may not
    /// push), each with the peer's message. Their frames stay here, and every other origin was
    /// pushed past them: a replica that took another user's frames (from a shared folder, say)
    /// is not kept from pushing its own. A refusal of the store's own origin ends the push.
    public var refused: [ReplicaID: String] = [:]
    /// Push: how far the peer holds this store's own log, when that is past where the log here
    /// ends (nil otherwise). This store lost that tail: it was restored from a backup, or a
    /// damaged tail was cut off. A pull takes it back when its frames are signed by this
    /// replica's key; until then, what this store appends takes seqs the peer holds with other
    /// events (a fork of its own log, which peers refuse past what they hold).
    public var peerHoldsOwnLogTo: Seq?
    /// Pull: why this store refused the peer's frames of its own origin, when it did (a fork of
    /// its own log, restored from a backup and written to since; an unsigned origin's frames it
    /// has no evidence of losing). The pull went on without that origin: everything else the
    /// peer holds was taken.
    public var ownLogRefused: String?
    public init() {}
}

/// The logic of pulling from a peer, without I/O: the driver performs each action and reports
/// the outcome, and the session says what to do next.
///
/// ```swift
/// var s = PullSession(local: try store.cursor())
/// var action = s.start()
/// while true {
///     switch action {
///     case .request(let since, let limits): action = s.received(try await peer.page(since, limits))
///     case .apply(let frames): action = s.applied(try appender.receive(frames), cursor: try store.cursor())
///     case .wait(let seconds): try await Task.sleep(for: .seconds(seconds)); action = s.resume()
///     case .done(let summary): return summary
///     case .fail(let failure): throw failure
///     }
/// }
/// ```
/// Every request states the cursor the receiver really holds, so a page cut off, duplicated or
/// answered twice never skips or repeats anything: whole frames that arrived are kept, the rest
/// is asked for again.
package struct PullSession: Sendable {
    public enum Action: Sendable, Equatable {
        /// Ask the peer for the frames past `since`.
        case request(since: ReplicationCursor, limits: PageLimits)
        /// Hand these frames to the receiving store, then call `applied`.
        case apply([[UInt8]])
        /// Pause, then call `resume`.
        case wait(seconds: Double)
        case done(TransferSummary)
        case fail(TransferFailure)
    }

    enum Phase: Sendable, Equatable { case idle, requesting, applying, waiting, finished }

    public let limits: PageLimits
    public var retry: RetryPolicy { budget.policy }
    private var phase = Phase.idle
    private var cursor: ReplicationCursor
    private var more = true
    private var cutOff = false
    private var budget: RetryBudget
    private var stalls = 0
    public private(set) var summary = TransferSummary()
    /// The receiving store's own origin.
    public let own: ReplicaID?
    /// How far the peer's frames of the own origin are left out, once the store refused them
    /// (`ownLogRefused`): each request asks from there for that origin. Raised only forward, to
    /// where the refused page or the peer's cursor said that origin goes.
    public private(set) var ownPast: Seq?
    /// The store's tip of its own log, while requests ask for the peer's frame there to compare
    /// it (`ownTip`); nil once a page reached it (or went past it, or was the last), or when
    /// not asked.
    private var checking: LogTip?
    /// The page with the store held the peer's frame at the store's tip, not the store's: a
    /// refusal of it for a fork is news even though it reaches no further than the tip.
    private var comparing = false
    /// Where the last page's frames end, per origin (its `next`).
    private var pageNext: ReplicationCursor?
    /// The frames of the page handed to the store, while it applies them (for `failed`).
    private var applying: [[UInt8]] = []

    /// - Parameters:
    ///   - local: the receiving store's cursor when the session starts.
    ///   - own: the receiving store's own origin: a page refused for frames of it (`own_log`)
    ///     is asked for again without them (`TransferSummary.ownLogRefused`).
    ///   - ownPast: where an earlier session of the same pull left the own origin out (its
    ///     `ownPast`): this one starts past it, not asking for a page the store refuses again.
    ///   - ownTip: the store's tip of its own log, to compare with the peer's: the first request
    ///     asks for the own origin from one seq before it, so that the peer's frame ending there
    ///     comes back. The same frame (by its hash) is dropped here, before the store sees it (a
    ///     pull with nothing new still opens nothing); another goes to the store, which names it
    ///     a fork of its own log when its key signed it (a store restored from a backup, written
    ///     to as far as the peer holds its log or less far, which asking past its tip never
    ///     shows). Used only when `local` is at that tip.
    ///   - jitter: the random draw for backoff (tests pass a fixed one).
    public init(local: ReplicationCursor, own: ReplicaID? = nil, ownPast: Seq? = nil, ownTip: LogTip? = nil,
                limits: PageLimits = PageLimits(), retry: RetryPolicy = RetryPolicy(),
                jitter: @escaping @Sendable () -> Double = { Double.random(in: 0...1) }) {
        cursor = local
        self.own = own
        self.ownPast = own == nil ? nil : ownPast
        if let own, let ownTip, ownPast == nil, ownTip.lastSeq > Seq(0), local[own] == ownTip.lastSeq { checking = ownTip }
        self.limits = limits
        budget = RetryBudget(policy: retry, jitter: jitter)
    }

    public mutating func start() -> Action {
        precondition(phase == .idle, "start called twice")
        phase = .requesting
        return .request(since: asked, limits: limits)
    }

    /// What a request asks from: the store's cursor, with the own origin's refused frames left out.
    private var asked: ReplicationCursor {
        guard let own else { return cursor }
        if let checking, checking.lastSeq == cursor[own] {
            var c = cursor
            c[own] = Seq(checking.lastSeq.rawValue - 1)
            return c
        }
        guard let ownPast, ownPast > cursor[own] else { return cursor }
        var c = cursor
        c[own] = ownPast
        return c
    }

    /// The peer answered with a page (whole, or cut off: then only its whole frames count).
    public mutating func received(_ page: FramePage.Decoded, bytes: Int) -> Action {
        precondition(phase == .requesting, "received without a request")
        summary.pages += 1
        summary.bytes = summary.bytes.addingClamped(bytes)
        cutOff = !page.complete
        more = page.more || !page.complete
        pageNext = page.next
        // What a page's frames hold uncompressed is bounded here too, by their headers, before
        // anything is decompressed: LZ4 expands up to 255 times, so a peer's page of 32 MiB could
        // cost 8 GiB of checks and projection. The frames past the bound are left for the next
        // page, asked for from where these end (a page always keeps its first frame, so every log
        // comes across). A server of this build cuts its pages at the bound, passing it by one
        // frame at most (a streamed page's slices each keep their first): that much more is taken.
        let kept = PageLimits.framesWithin(page.frames, rawBytesMax: limits.maxRawBytes.addingClamped(FrameHeader.payloadBytesMax))
        if kept < page.frames.count {
            more = true
        } else if let next = page.next {
            summary.peerCursor = next
        }
        if let holder = page.holder { summary.peerHolds = holder }
        var frames = kept < page.frames.count ? Array(page.frames.prefix(kept)) : page.frames
        var dropped = false
        if let own, let tip = checking {
            // The peer's frame at the store's tip, asked for only to be compared, is left out when
            // it is the store's; any other goes on to the store. Asked for until a page holds a
            // frame of that origin reaching the tip, or goes past it, or is the last (other
            // origins' frames may fill the first pages).
            var seen = false
            frames.removeAll { f in
                guard let h = FrameHeader(parsing: f), h.origin == own, h.lastSeq >= tip.lastSeq else { return false }
                seen = true
                guard h.lastSeq == tip.lastSeq, f.withUnsafeBytes({ FrameHash.of($0) }) == tip.lastHash else { return false }
                dropped = true
                return true
            }
            // (A page cut at the raw bound has frames past `kept` that were not looked at: its
            // `next` does not count.)
            let passed = kept == page.frames.count && (page.next?[own] ?? Seq(0)) >= tip.lastSeq
            if seen || !more || passed {
                checking = nil
                comparing = seen && !dropped
            }
        }
        if let own, let past = ownPast {
            // Once the store refused the own origin's frames, those a page still holds (a peer
            // that sends no cursor of its own, a page past the first) are left out here, and
            // move the place asked from past them.
            var reach = past
            frames.removeAll { f in
                guard let h = FrameHeader(parsing: f), h.origin == own else { return false }
                reach = max(reach, h.lastSeq)
                return true
            }
            ownPast = reach
        }
        // A page whose only frame was the one compared brought what was asked.
        if frames.isEmpty { return afterApply(progressed: dropped) }
        phase = .applying
        applying = frames
        return .apply(frames)
    }

    /// The last seq of `origin`'s frames in `frames` (0: none).
    private static func reach(of origin: ReplicaID, in frames: [[UInt8]]) -> Seq {
        frames.reduce(Seq(0)) { r, f in
            guard let h = FrameHeader(parsing: f), h.origin == origin else { return r }
            return max(r, h.lastSeq)
        }
    }

    /// The store took the frames of the last page; `cursor` is its cursor now.
    public mutating func applied(_ r: ReceiveResult, cursor now: ReplicationCursor) -> Action {
        precondition(phase == .applying, "applied without frames to apply")
        summary.frames = summary.frames.addingClamped(r.frames)
        summary.events = summary.events.addingClamped(r.events)
        summary.alreadyHeld = summary.alreadyHeld.addingClamped(r.alreadyHeld)
        comparing = false
        let progressed = now != cursor
        cursor = now
        applying = []
        return afterApply(progressed: progressed)
    }

    private mutating func afterApply(progressed: Bool) -> Action {
        if cutOff {
            // The transfer broke off: whole frames were kept; ask again from there after a pause.
            return failed(.transient("the transfer was cut off after \(summary.frames) frames"))
        }
        budget.reset()
        guard more else {
            phase = .finished
            return .done(summary)
        }
        if progressed {
            stalls = 0
        } else {
            stalls += 1
            if stalls >= 3 {
                phase = .finished
                return .fail(.permanent("the peer says it has more but sent nothing new three times in a row (at cursor \(cursor.token))"))
            }
        }
        phase = .requesting
        return .request(since: asked, limits: limits)
    }

    /// A request failed. Transient failures are retried with backoff until the policy's attempts
    /// are used up; anything else ends the session, but for a page the store refused for frames
    /// of its own origin: that page is asked for again without them (once per reach of that
    /// origin: a page refused again with nothing further to leave out ends the session, and
    /// each such page counts as one that brought nothing new).
    public mutating func failed(_ failure: TransferFailure) -> Action {
        precondition(phase == .requesting || phase == .applying, "failure outside a step")
        let refusedFrames = applying
        applying = []
        let compared = comparing
        comparing = false
        if phase == .requesting, checking != nil, failure.code == .cursorExpired {
            // The peer no longer holds the own origin from one seq before the store's tip (its
            // floor is there): the compare is given up, and the request asked from the tip.
            checking = nil
            return .request(since: asked, limits: limits)
        }
        if phase == .applying, failure.code == .ownLog, let own {
            // As far as the page's own frames went (a page cut off has no `next`), its `next`, or
            // the peer's cursor says.
            let reach = max(Self.reach(of: own, in: refusedFrames), pageNext?[own] ?? Seq(0), summary.peerHolds?[own] ?? Seq(0))
            if reach > max(cursor[own], ownPast ?? Seq(0)) || compared && reach >= cursor[own] {
                // A page refused is no progress: a peer that keeps naming the origin further on
                // (and sends nothing else new) ends the session as any peer sending nothing new.
                stalls += 1
                if stalls >= 3 {
                    phase = .finished
                    return .fail(failure)
                }
                ownPast = reach
                summary.ownLogRefused = failure.message
                phase = .requesting
                return .request(since: asked, limits: limits)
            }
        }
        switch budget.after(failure) {
        case .failure(let f):
            phase = .finished
            return .fail(f)
        case .success(let seconds):
            summary.retries += 1
            phase = .waiting
            return .wait(seconds: seconds)
        }
    }

    /// The pause is over: ask again from the cursor the store holds.
    public mutating func resume() -> Action {
        precondition(phase == .waiting, "resume without a wait")
        cutOff = false
        phase = .requesting
        return .request(since: asked, limits: limits)
    }
}

/// The logic of pushing to a peer, without I/O. The peer's cursor decides what is sent, and
/// every answer carries the peer's new cursor, so a push that broke off resumes where the peer
/// really is.
package struct PushSession: Sendable {
    public enum Action: Sendable, Equatable {
        /// Ask the peer for its cursor.
        case requestCursor
        /// Collect a page of this store's frames past `since` and call `collected`.
        case collect(since: ReplicationCursor, limits: PageLimits)
        /// Send this page to the peer and call `sent` with its answer.
        case send(FramePage)
        case wait(seconds: Double)
        case done(TransferSummary)
        case fail(TransferFailure)
    }

    enum Phase: Sendable, Equatable { case idle, cursor, collecting, sending, waiting, finished }

    public let limits: PageLimits
    public var retry: RetryPolicy { budget.policy }
    private var phase = Phase.idle
    private var budget: RetryBudget
    private var stalls = 0
    private var lastPage: FramePage?
    /// The gaps the peer's cursor was asked for again after, since a page last made progress:
    /// the origins they named, and whether one named none (`Trust.all`). Each origin is asked
    /// about once, so a peer that lost several logs at once (restored from a backup) has each
    /// explained in one push; a gap naming an origin asked about already, or any gap after one
    /// that named none, ends the push.
    private var gapsAsked: (origins: Set<ReplicaID>, all: Bool) = ([], false)
    /// Per origin, how far the peer's answers showed it holds the frames this session sent: the
    /// answer's seq, up to the last frame of that origin sent. Pages are collected from this
    /// store, so this is bounded by its log, and a page makes progress only by raising it: a
    /// peer cannot keep a push going by answers that merely differ (other origins, or less). An
    /// answer showing less lowers it (the peer is believed); what that has sent again is bounded
    /// by `sendingAgain`.
    private var taken: [ReplicaID: Seq] = [:]
    /// Where the next page is collected from: the peer's last cursor, with each origin it does
    /// not show at its `taken` place (see `believed`). `summary.peerCursor` keeps the peer's
    /// own word.
    private var position = ReplicationCursor()
    /// How far the next cursor asked for is believed (`Trust`).
    private var trusting = Trust.shown
    enum Trust: Sendable, Equatable {
        /// An answer to a page: believed for the origins it shows.
        case shown
        /// The cursor after a gap naming an origin (`all`: naming none): believed for it too.
        case origin(ReplicaID), all
        /// The cursor after a transient failure: never below what was taken. A store's hub
        /// shows an open append to the push that carries it, and its cursor shows durable
        /// positions only: believing it sent the append's part so far again at every dropped
        /// link. A peer that did lose frames says so by refusing the next page for a gap.
        case resumed
    }
    /// Per origin, the seqs of the frames sent so far (pages sent, whatever their answer).
    private var sent: [ReplicaID: SeqRuns] = [:]
    /// Bytes of frames sent for the first time, and of frames sent before (again: a retry, a
    /// gap, a peer that says it lost what it took).
    private var bytesOnce = 0, bytesAgain = 0
    /// Origins refused in this push (not those a push before was refused, left out from the
    /// start): each has a page go again without it.
    private var refusedHere = 0
    /// The largest page sent: slack for what is sent again (a retried page or two).
    private var pageBytesMax = 0
    public private(set) var summary = TransferSummary()

    /// This store's own origin: a refusal of it ends the push (its user must fix what is wrong:
    /// a token, an actor, an owner), as every refusal did before others were left out.
    public let own: ReplicaID?

    /// - Parameter refused: origins a push before was refused (`TransferSummary.refused`): left
    ///   out without asking again, and listed in this push's summary too.
    public init(limits: PageLimits = PageLimits(), retry: RetryPolicy = RetryPolicy(), own: ReplicaID? = nil,
                refused: [ReplicaID: String] = [:], jitter: @escaping @Sendable () -> Double = { Double.random(in: 0...1) }) {
        self.limits = limits
        self.own = own
        budget = RetryBudget(policy: retry, jitter: jitter)
        summary.refused = own.map { o in refused.filter { $0.key != o } } ?? refused
    }

    /// - Parameter known: the peer's cursor when it is already known (from a pull just before);
    ///   the first page is then collected without asking. A stale cursor is harmless: the peer
    ///   skips frames it already holds and answers with its real cursor.
    public mutating func start(known: ReplicationCursor? = nil) -> Action {
        precondition(phase == .idle, "start called twice")
        phase = .cursor
        if let known { return peerCursor(known) }
        return .requestCursor
    }

    /// The peer's cursor, from `requestCursor` or from the answer to a page.
    public mutating func peerCursor(_ answer: ReplicationCursor) -> Action {
        precondition(phase == .cursor, "a cursor nobody asked for")
        let c = believed(answer, trusting: trusting)
        trusting = .shown
        summary.peerCursor = answer
        position = c
        // The retry budget is not reset here, only by a page taken: a peer that answers where
        // it stands but fails every page would otherwise be retried for ever.
        phase = .collecting
        return .collect(since: c, limits: limits)
    }

    /// The origins to leave out of the pages collected (`TransferSummary.refused`).
    public var skipping: Set<ReplicaID> { Set(summary.refused.keys) }

    public mutating func collected(_ page: FramePage) -> Action {
        precondition(phase == .collecting, "collected without collect")
        guard !page.frames.isEmpty else {
            phase = .finished
            return .done(summary)
        }
        if let f = sendingAgain(page) {
            phase = .finished
            return .fail(f)
        }
        lastPage = page
        phase = .sending
        return .send(page)
    }

    /// Counts `page`'s frames as sent once or again, and returns the failure that ends the push
    /// when what was sent again passes what the retries allow: each byte sent once may go again
    /// `retry.attempts` times, plus four of the largest pages and one for each origin refused in
    /// this push (the page it was refused in goes again without it). A frame goes again when its
    /// seqs lie within those of its origin sent before (`SeqRuns`); every other frame adds its
    /// own, so what is sent once is at most this store's log, and whatever a peer answers, a
    /// push sends at most that multiple of it. A peer answering one seq past where each page
    /// began had a push send a frame again for each seq of the log; one answering as if it lost
    /// what it took, or refusing every other page for a gap, had it send the same frames for
    /// ever.
    private mutating func sendingAgain(_ page: FramePage) -> TransferFailure? {
        for f in page.frames {
            // A page is collected from this store, whose frames parse; a frame that did not
            // could be counted in neither run, and counts as sent once.
            guard let h = FrameHeader(parsing: f) else {
                bytesOnce = bytesOnce.addingClamped(f.count)
                continue
            }
            if sent[h.origin, default: SeqRuns()].insert(h.baseSeq.rawValue...h.lastSeq.rawValue) {
                bytesOnce = bytesOnce.addingClamped(f.count)
            } else {
                bytesAgain = bytesAgain.addingClamped(f.count)
            }
        }
        pageBytesMax = max(pageBytesMax, page.frameBytes)
        let allowed = bytesOnce.multipliedClamped(by: max(1, retry.attempts)).addingClamped(pageBytesMax.multipliedClamped(by: 4 + refusedHere))
        guard bytesAgain > allowed else { return nil }
        return .permanent("the peer's answers had this push send again \(bytesAgain) bytes it had sent (against \(bytesOnce) sent once): a peer that keeps placing the push behind what it took, or losing it, is not pushed to further")
    }

    /// The peer took the page; `answer` is its cursor now (as `believed` takes it).
    public mutating func sent(_ r: ReceiveResult, peer answer: ReplicationCursor) -> Action {
        precondition(phase == .sending, "sent without send")
        let page = lastPage!
        // Saturating: the counts are a peer's word (bounded by the transport, added here anyway
        // so that no transport's count can trap a session).
        summary.pages += 1
        summary.bytes = summary.bytes.addingClamped(page.frameBytes)
        summary.frames = summary.frames.addingClamped(r.frames)
        summary.events = summary.events.addingClamped(r.events)
        summary.alreadyHeld = summary.alreadyHeld.addingClamped(r.alreadyHeld)
        let cursor = believed(answer, trusting: .shown)
        // The page was collected past `position`: the origins it moved are those it held
        // frames of, and `page.next` is where its frames of each end.
        var progressed = false
        for o in page.next.origins where page.next[o] > position[o] {
            let reach = min(cursor[o], page.next[o])
            if reach > taken[o, default: Seq(0)] {
                taken[o] = reach
                progressed = true
            }
        }
        summary.peerCursor = answer
        position = cursor
        budget.reset()
        if progressed { gapsAsked = ([], false) }
        if progressed { stalls = 0 } else {
            stalls += 1
            if stalls >= 3 {
                phase = .finished
                return .fail(.permanent("the peer took nothing of three pages in a row (its cursor stays at \(answer.token))"))
            }
        }
        guard page.more else {
            phase = .finished
            return .done(summary)
        }
        phase = .collecting
        return .collect(since: cursor, limits: limits)
    }

    public mutating func failed(_ failure: TransferFailure) -> Action {
        precondition(phase == .cursor || phase == .sending || phase == .collecting, "failure outside a step")
        // A page refused for a gap: where this session thought the peer stood was wrong (a
        // cursor learnt before, an answer that showed frames the peer later dropped). The peer is
        // asked where it is, once per origin until a page makes progress (`gapsAsked`); a gap
        // naming an origin asked about already ends the push. After the first, only an origin the
        // page held: a peer naming made-up origins cannot keep a push asking.
        if phase == .sending, failure.code == .gap, gapsAllow(failure.origin) {
            if let o = failure.origin { gapsAsked.origins.insert(o) } else { gapsAsked.all = true }
            trusting = failure.origin.map(Trust.origin) ?? .all
            phase = .cursor
            return .requestCursor
        }
        // A page refused for one origin of it that the peer will never take from this principal
        // (another user's, say, taken from a shared folder): that origin is left out of the pages
        // from here on, and the rest goes on. Only an origin the page held (a peer naming another
        // refuses the push, as before), each once, and never this store's own.
        if phase == .sending, failure.code == .forbidden, let o = failure.origin, o != own, summary.refused[o] == nil,
           lastPage?.frames.contains(where: { FrameHeader(parsing: $0)?.origin == o }) == true {
            summary.refused[o] = failure.message
            refusedHere += 1
            phase = .collecting
            return .collect(since: position, limits: limits)
        }
        switch budget.after(failure) {
        case .failure(let f):
            phase = .finished
            return .fail(f)
        case .success(let seconds):
            summary.retries += 1
            phase = .waiting
            return .wait(seconds: seconds)
        }
    }

    /// Whether a gap naming `origin` (nil: none) has the peer's cursor asked for again.
    private func gapsAllow(_ origin: ReplicaID?) -> Bool {
        if gapsAsked.all { return false }
        guard let origin else { return gapsAsked.origins.isEmpty }
        if gapsAsked.origins.isEmpty { return true }
        return !gapsAsked.origins.contains(origin) && lastPage?.frames.contains(where: { FrameHeader(parsing: $0)?.origin == origin }) == true
    }

    /// The pause is over: ask the peer where it is now (the failed page may have landed).
    public mutating func resume() -> Action {
        precondition(phase == .waiting, "resume without a wait")
        // A gap's trust, set before a cursor request that failed, stays for the next one.
        if case .shown = trusting { trusting = .resumed }
        phase = .cursor
        return .requestCursor
    }

    /// `c`, a cursor the peer answered, as this session takes it. An origin `c` does not show
    /// (or, after a transient failure, `Trust.resumed`, shows below what was taken) keeps what
    /// an answer before showed taken: a scoped peer shows only what its user may read, and
    /// places the origins it left out as held only in the answer to the page that held them (a
    /// page collected past an answer without them sent them again, every other page). Unless
    /// `trusting` names it: after a gap, the peer's word on where that log ends is believed. An
    /// origin shown at less than was taken lowers `taken` (the peer is believed; what this sends
    /// again is bounded by `sendingAgain`).
    private mutating func believed(_ c: ReplicationCursor, trusting: Trust) -> ReplicationCursor {
        var out = c
        for (o, seq) in taken {
            let shown: Bool
            switch trusting {
            case .shown: shown = c.entries[o] != nil
            case .origin(let g): shown = c.entries[o] != nil || o == g
            case .all: shown = true
            case .resumed: shown = false
            }
            if !shown { out[o] = max(c[o], seq) } else if c[o] < seq { taken[o] = c[o].rawValue == 0 ? nil : c[o] }
        }
        return out
    }
}

/// The seqs of one origin's frames a push has sent: sorted runs, neither touching nor
/// overlapping (pages go on from where the last ended, so usually one run; a gap or a stale
/// cursor starts another). A store's frames of one origin tile its seqs, so each frame is new
/// once at most: what a push counts as sent once is bounded by its log because of that.
struct SeqRuns: Sendable {
    private var runs: [ClosedRange<UInt64>] = []

    /// Adds `r`, a frame's seqs; false when they were all in already (sent before).
    mutating func insert(_ r: ClosedRange<UInt64>) -> Bool {
        // The first run that ends at or after the seq before `r` (it may touch or hold `r`).
        var lo = 0, hi = runs.count
        let from = r.lowerBound == 0 ? 0 : r.lowerBound - 1
        while lo < hi {
            let mid = (lo + hi) / 2
            if runs[mid].upperBound < from { lo = mid + 1 } else { hi = mid }
        }
        if lo < runs.count, runs[lo].contains(r.lowerBound), runs[lo].contains(r.upperBound) { return false }
        // Merge `r` with every run it touches or overlaps, from `lo` on.
        var merged = r
        var end = lo
        while end < runs.count, runs[end].lowerBound <= (merged.upperBound == .max ? .max : merged.upperBound + 1) {
            merged = min(merged.lowerBound, runs[end].lowerBound)...max(merged.upperBound, runs[end].upperBound)
            end += 1
        }
        runs.replaceSubrange(lo..<end, with: [merged])
        return true
    }
}

extension Int {
    /// `self + other`, held at `Int.max` (or `Int.min`) instead of trapping.
    func addingClamped(_ other: Int) -> Int {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }

    /// `self * other` for counts (neither negative), held at `Int.max` instead of trapping.
    func multipliedClamped(by other: Int) -> Int {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        return overflow ? .max : product
    }
}
