import EventLog
import Foundation
import Testing
@_spi(Fuzz) @testable import Replicator

/// The server's JSON answers are written and read through one type each (`Wire`): the bytes the
/// protocol documents, and a client that takes a hostile server's body without trapping.
@Suite struct WireAnswerTests {
    @Test func answersAreTheDocumentedBytes() {
        #expect(Wire.json(Wire.CursorAnswer(replicaID: "r1", cursor: "t1")) == #"{"replica_id":"r1","cursor":"t1"}"#)
        #expect(Wire.json(Wire.PushAnswer(frames: 2, events: 5, alreadyHeld: 1, incomplete: 0, cursor: "t2"))
                == #"{"frames":2,"events":5,"already_held":1,"incomplete":0,"cursor":"t2"}"#)
        #expect(Wire.json(Wire.FailureAnswer(error: "no", code: "forbidden")) == #"{"error":"no","code":"forbidden"}"#)
        #expect(Wire.json(Wire.FailureAnswer(error: "gap", code: "gap", origin: "o", seqs: [3, 9]))
                == #"{"error":"gap","code":"gap","origin":"o","seqs":[3,9]}"#)
        // Text that quotes or breaks lines stays inside its string.
        let quoted = Wire.json(Wire.FailureAnswer(error: "Host \"x\",\"code\":\"ok\"\n refused"))
        #expect(quoted == #"{"error":"Host \"x\",\"code\":\"ok\"\n refused"}"#)
        #expect(Wire.decode(Wire.FailureAnswer.self, from: Array(quoted.utf8))?.code == nil)
    }

    @Test func aHostileAnswerReadsAsNothingOrAsDefaults() {
        func push(_ s: String) -> Wire.PushAnswer? { Wire.decode(Wire.PushAnswer.self, from: Array(s.utf8)) }
        #expect(push(#"{"cursor":"t"}"#) == Wire.PushAnswer(frames: 0, events: 0, alreadyHeld: 0, incomplete: 0, cursor: "t"))
        #expect(push(#"{"frames":"many","events":1e400,"already_held":-1,"incomplete":1.5,"cursor":"t"}"#)
                == Wire.PushAnswer(frames: 0, events: 0, alreadyHeld: -1, incomplete: 0, cursor: "t"))
        #expect(push(#"{"frames":1}"#) == nil)
        #expect(push("<html>busy</html>") == nil)
        #expect(push("") == nil)
        #expect(Wire.decode(Wire.CursorAnswer.self, from: Array(#"{"cursor":7}"#.utf8)) == nil)
        let failure = Wire.decode(Wire.FailureAnswer.self, from: Array(#"{"code":"gap","seqs":[-1,2],"origin":4}"#.utf8))
        #expect(failure == Wire.FailureAnswer(error: "", code: "gap", origin: nil, seqs: nil))
    }

    /// A push's answer counts what the server took of the page: a hostile server's counts are
    /// kept to what the page held (0 up to its frames and events), so that a session adding them
    /// page after page never overflows (a count of Int.max, then 1, trapped the client).
    @Test func aPushAnswersCountsAreBoundedByThePageSent() throws {
        let key = ReplicaKey.generate()
        let builder = OriginFrameBuilder(signer: key)
        for i in 0..<3 { try builder.add(Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text("t\(i)"))]),
                                         at: HLC(wallMillis: 1_767_225_600_000 + UInt64(i), counter: 0)) }
        let page = FramePage(frames: builder.finish(), next: .empty, more: true)
        #expect(page.frames.count == 1)
        let lying = Wire.PushAnswer(frames: .max, events: .max, alreadyHeld: .min, incomplete: .max, cursor: "")
        let r = HTTPTransport.result(of: lying, for: page)
        #expect(r.frames == 1 && r.events == 3 && r.alreadyHeld == 0 && r.incomplete == 1)
        let honest = HTTPTransport.result(of: Wire.PushAnswer(frames: 0, events: 0, alreadyHeld: 1, incomplete: 0, cursor: ""), for: page)
        #expect(honest.frames == 0 && honest.alreadyHeld == 1)
        // A session's totals saturate whatever a transport hands it.
        var session = PushSession()
        _ = session.start(known: .empty)
        for k in 0..<3 {
            _ = session.collected(page)
            var big = ReceiveResult()
            big.frames = .max
            big.events = .max
            big.alreadyHeld = .max
            _ = session.sent(big, peer: ReplicationCursor([key.replicaID: Seq(UInt64(k + 1))]))
        }
        #expect(session.summary.frames == .max && session.summary.events == .max && session.summary.pages == 3)
    }

    /// A refusal's body becomes the failure's message, code and frames; a body that is not the
    /// answer (a proxy's page) keeps the status's meaning and shows the text.
    @Test func theClientReadsARefusal() {
        let f = HTTPTransport.failure(status: 409, body: #"{"error":"a gap","code":"gap","origin":"aaaaaaaa-0000-4000-8000-000000000001","seqs":[4,2]}"#, url: "u")
        #expect(f.code == .gap)
        #expect(f.seqs == nil)  // backwards: not a range
        #expect(f.origin?.description == "aaaaaaaa-0000-4000-8000-000000000001")
        let proxy = HTTPTransport.failure(status: 503, body: "<html>down</html>", url: "u")
        #expect(proxy.code == FailureCode(status: 503))
        #expect(proxy.description.contains("<html>down</html>"))
        // A peer's text breaks no line and moves no cursor wherever the message goes (stderr, a
        // peer's last error, a JSON report): a made-up second line of its own stays on the first.
        let forged = HTTPTransport.failure(status: 403, body: #"{"error":"no\nevctl: error: origin x was pushed\u001b[2K\r","code":"forbidden"}"#, url: "u")
        #expect(!forged.message.contains("\n") && !forged.message.contains("\u{1B}") && !forged.message.contains("\r"), "\(forged.message)")
        #expect(forged.message.contains("no\\u{a}evctl"))
        let plain = HTTPTransport.failure(status: 502, body: "bad gateway\r\n<html>", url: "u")
        #expect(!plain.message.contains("\n") && !plain.message.contains("\r"), "\(plain.message)")
    }

    /// `Retry-After` comes from the peer: read as delay-seconds or an HTTP date, bounded, never
    /// trapping, and kept only on a failure worth trying again.
    @Test func theClientReadsARetryAfterWithinBounds() {
        let now = Date(timeIntervalSince1970: 784_111_777)  // Sun, 06 Nov 1994 08:49:37 GMT
        func seconds(_ v: String) -> Double? { HTTPTransport.retryAfterSeconds(v, now: now) }
        #expect(seconds("5") == 5)
        #expect(seconds(" 120 ") == TransferFailure.retryAfterMax)
        #expect(seconds("0") == 0)
        #expect(seconds("000000000000000000000000000007") == 7)
        #expect(seconds(String(repeating: "9", count: 10_000)) == TransferFailure.retryAfterMax)
        #expect(seconds("18446744073709551616") == TransferFailure.retryAfterMax)
        #expect(seconds("Sun, 06 Nov 1994 08:50:07 GMT") == 30)
        #expect(seconds("Sun, 06 Nov 1994 08:00:00 GMT") == 0)   // passed
        #expect(seconds("Mon, 06 Nov 1995 08:49:37 GMT") == TransferFailure.retryAfterMax)
        #expect(seconds("\t9\t") == 9)
        // RFC 9110's two obsolete forms, which a recipient must read too (before 2026-12-01 they
        // were not, and the session's own backoff stood).
        #expect(seconds("Sunday, 06-Nov-94 08:50:07 GMT") == 30)
        #expect(seconds("Sun Nov  6 08:50:07 1994") == 30)
        #expect(seconds("Sun Nov 06 08:50:07 1994") == 30)
        #expect(seconds("Wed Nov  9 08:49:37 1994") == TransferFailure.retryAfterMax)
        // An rfc850-date's two-digit year: in `now`'s century, or the one before when that is
        // more than 50 years ahead.
        let today = Date(timeIntervalSince1970: 1_796_083_200)  // 2026-12-01
        #expect(HTTPTransport.httpDate(Array("Saturday, 01-Jan-77 00:00:00 GMT".utf8), now: today) == 220_924_800)
        #expect(HTTPTransport.httpDate(Array("Monday, 01-Jan-46 00:00:00 GMT".utf8), now: today) == 2_398_377_600)
        #expect(HTTPTransport.httpDate(Array("Friday, 31-Dec-99 00:00:00 GMT".utf8), now: today) == 946_598_400)
        #expect(HTTPTransport.httpDate(Array("Thursday, 01-Jan-70 00:00:00 GMT".utf8), now: now) == 0)
        // No date whose weekday, day, month or time is not one (29 February is one only in a leap
        // year), nor any byte not of its form, nor a form's weekday in another's spelling.
        // Foundation's DateFormatter, used at first, traps on Linux when its parse stops inside
        // a multi-byte character: the two values with a combining accent (29 bytes each).
        for bad in ["", " ", "-1", "1.5", "+3", "5s", "٣", "Sun, 06-Nov-94 08:49:37 GMT", "Sunday, 06 Nov 1994 08:49:37 GMT",
                    "Monday, 06-Nov-94 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 PST", "Sunday, 6-Nov-94 08:49:37 GMT",
                    "Sunday, 06-Nov-1994 08:49:37 GMT", "Sunday, 31-Nov-94 08:49:37 GMT", "Sunday, 06-Nov-94 24:49:37 GMT",
                    "Sunday", "Sunday, ", "Sunday, 06-Nov-94 08:49:37 GMT\u{301}", "Sunday\u{301}, 06-Nov-94 08:49:37 GMT",
                    "Sun Nov 6 08:49:37 1994", "Sun Nov  6 08:49:37 94", "Mon Nov  6 08:49:37 1994", "Sun Nov  0 08:49:37 1994",
                    "Sun Nov 6  08:49:37 1994", "Sun, Nov  6 08:49:37 1994", "Sun Nov  6 08:49:37 1994 GMT", "Sun Nov  6 08:49:37 1994\u{301}",
                    "Sun, 06 Nov 1994 08:49:37 PST", "Mon, 06 Nov 1994 08:49:37 GMT", "sun, 06 Nov 1994 08:49:37 GMT",
                    "Sun, 99 Nov 1994 08:49:37 GMT", "Thu, 31 Nov 1994 08:49:37 GMT", "Thu, 00 Dec 1994 08:49:37 GMT",
                    "Thu, 29 Feb 1900 00:00:00 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT",
                    "Sun, 06 Nov 1994 08:49:61 GMT", "Sun, 06 Nov 1994 08:49:60 GMT", "Sun, 06 Nov 1994 23:58:60 GMT", "Sun, 06 Nov 1994 8:49:37 GMT", "Sun, 6 Nov 1994 8:49:37 GMT\u{301}",
                    "Sun\u{301}" + String(repeating: "x", count: 24), "Sun, 06 Nov 1994 08:49:37 GMT ,", "\u{0}",
                    "Sun, 0: Nov 1994 08:49:37 GMT", "Sun,  6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:\u{E9} GMT",
                    "Sun, 06 Nov 19 4 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 gmt",
                    String(repeating: "a", count: 29)] {
            #expect(seconds(bad) == nil, "\(bad)")
        }
        #expect(HTTPTransport.imfFixdate(Array("Tue, 29 Feb 2000 00:00:00 GMT".utf8)) == 951_782_400)
        #expect(HTTPTransport.imfFixdate(Array("Thu, 01 Jan 1970 00:00:00 GMT".utf8)) == 0)
        #expect(HTTPTransport.imfFixdate(Array("Sat, 01 Jan 0000 00:00:00 GMT".utf8)) == -62_167_219_200)
        #expect(HTTPTransport.imfFixdate(Array("Fri, 31 Dec 9999 23:59:60 GMT".utf8)) == 253_402_300_800)
        // Dates 1,000,003 s apart (every time of day comes up) over two centuries, against
        // Foundation writing them.
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "GMT")
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        var at = -2_208_988_800.0  // 1900-01-01
        while at < 4_102_444_800 {  // 2100-01-01
            let text = f.string(from: Date(timeIntervalSince1970: at))
            #expect(HTTPTransport.imfFixdate(Array(text.utf8)) == at, "\(text)")
            at += 1_000_003
        }
        let limited = HTTPTransport.failure(status: 429, body: #"{"error":"too many","code":"rate_limited"}"#, url: "u", retryAfter: "1", now: now)
        #expect(limited.code == .rateLimited && limited.retryAfter == 1)
        #expect(HTTPTransport.failure(status: 503, body: "", url: "u", retryAfter: "junk", now: now).retryAfter == nil)
        // On a refusal, a pause would delay nothing but the error.
        #expect(HTTPTransport.failure(status: 403, body: "", url: "u", retryAfter: "5", now: now).retryAfter == nil)
    }
}
