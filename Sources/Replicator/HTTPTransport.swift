import AsyncHTTPClient
import EventLog
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
import Projections

/// The client side of `evctl serve` (AsyncHTTPClient): bearer token, bounded reads, and errors
/// sorted into transient (retried by the sessions) and permanent ones with a clear message.
public final class HTTPTransport: ReplicaTransport {
    public let base: String
    let token: String?
    let replica: ReplicaID?
    let client: HTTPClient
    let timeout: TimeAmount
    /// The most a page's body may be: the server's page limit plus the frame that may run past it.
    public static let pageBytesMax = PageLimits.serverMax.maxBytes + FrameHeader.size + FrameHeader.payloadBytesMax + (1 << 16)

    /// - Parameters:
    ///   - url: `http://host:port` or `https://…` (a path prefix is kept).
    ///   - token: the bearer token, when the server has a tokens file.
    ///   - caCertificate: a PEM file of the certificate authority to trust for `https` (for a
    ///     server with a self-signed certificate); the system's trust store otherwise.
    ///   - replica: this store's replica id, sent so the server can show per-peer lag.
    ///   - insecureHTTP: send the token over plain `http` to a host other than this machine
    ///     (refused otherwise: anyone on the path could read it and act as this replica).
    public init(url: String, token: String? = nil, caCertificate: String? = nil, replica: ReplicaID? = nil, timeout: Double = 60,
                insecureHTTP: Bool = false) throws {
        guard let u = URL(string: url), let scheme = u.scheme?.lowercased(), scheme == "http" || scheme == "https", let host = u.host else {
            throw TransferFailure.permanent("\(url) is not an http:// or https:// URL")
        }
        if token != nil, scheme == "http", !Wire.isLoopback(host), !insecureHTTP {
            throw TransferFailure.permanent("refusing to send the token over plain http to \(host), where anyone on the way could read it: use https:// (or --insecure-http if the link is private)")
        }
        if let token {
            guard !token.isEmpty, token.utf8.count <= Wire.tokenLengthMax, token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw TransferFailure.permanent("the token must be 1 to \(Wire.tokenLengthMax) printable ASCII characters without spaces")
            }
        }
        base = url.hasSuffix("/") ? url : url + "/"
        self.token = token
        self.replica = replica
        self.timeout = .milliseconds(Int64(timeout * 1000))
        var config = HTTPClient.Configuration()
        // AsyncHTTPClient keeps retrying a refused connection until the connect timeout, so it is short;
        // the sessions retry with backoff on top of it.
        config.timeout = .init(connect: .seconds(3), read: self.timeout)
        config.redirectConfiguration = .disallow
        config.decompression = .disabled
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        if let caCertificate {
            do {
                tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(caCertificate))
            } catch {
                throw TransferFailure.permanent("cannot read the CA certificate \(caCertificate): \(error)")
            }
        }
        config.tlsConfiguration = tls
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
    }

    /// Closes the connections; call once done.
    public func shutdown() async {
        try? await client.shutdown()
    }

    private func request(_ path: String, method: HTTPMethod = .GET) -> HTTPClientRequest {
        var r = HTTPClientRequest(url: base + path)
        r.method = method
        if let token { r.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let replica { r.headers.add(name: "Logbook-Replica", value: replica.description) }
        return r
    }

    private func execute(_ r: HTTPClientRequest) async throws -> HTTPClientResponse {
        let shown = String(r.url.prefix { $0 != "?" })  // errors name the endpoint, not the cursor
        let response: HTTPClientResponse
        do { response = try await client.execute(r, timeout: timeout) } catch {
            throw Self.classify(error, url: shown)
        }
        guard response.status == .ok else {
            let text = (try? await response.body.collect(upTo: 1 << 16)).map { String(buffer: $0) } ?? ""
            throw Self.failure(status: Int(response.status.code), body: text, url: shown,
                               retryAfter: response.headers.first(name: "Retry-After"))
        }
        return response
    }

    public func cursor() async throws -> ReplicationCursor {
        let response = try await execute(request("v1/cursor"))
        let body = try await collect(response, max: 1 << 16)
        guard let answer = Wire.decode(Wire.CursorAnswer.self, from: body) else {
            throw TransferFailure.permanent("\(base)v1/cursor did not answer with a cursor", code: .invalidAnswer)
        }
        do { return try ReplicationCursor(token: answer.cursor) } catch { throw TransferFailure.permanent("the server's cursor is not valid: \(error)", code: .invalidAnswer) }
    }

    public func page(since: ReplicationCursor, limits: PageLimits) async throws -> (FramePage.Decoded, Int) {
        // page_version=2: the server streams the page (an older server ignores it and sends version 1).
        let response = try await execute(request("v1/frames?since=\(since.token)&max_bytes=\(limits.maxBytes)&max_frames=\(limits.maxFrames)&page_version=2"))
        var body: [UInt8] = []
        if let length = response.headers.first(name: "Content-Length").flatMap({ Int($0) }), length <= Self.pageBytesMax {
            body.reserveCapacity(length)
        }
        do {
            for try await chunk in response.body {
                guard body.count + chunk.readableBytes <= Self.pageBytesMax else {
                    throw TransferFailure.permanent("the server sent a page larger than \(Self.pageBytesMax) bytes", code: .tooLarge)
                }
                chunk.withUnsafeReadableBytes { body.append(contentsOf: $0) }
            }
        } catch let f as TransferFailure {
            throw f
        } catch {
            // Cut off: keep the whole frames that arrived; the session asks again from there.
        }
        do {
            var decoded = try FramePage.decode(body)
            if decoded.complete, let token = response.headers.first(name: "Logbook-Cursor") {
                decoded.holder = try? ReplicationCursor(token: token)
            }
            return (decoded, body.count)
        } catch {
            throw TransferFailure.permanent("the server's answer is not a page of frames: \(error)", code: .invalidAnswer)
        }
    }

    /// The server's durable cursor now and each time it moves (`GET /v1/watch`, Server-Sent
    /// Events), until the stream ends (the server stops, the link breaks: it then throws).
    public func watch() -> AsyncThrowingStream<ReplicationCursor, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    var r = request("v1/watch")
                    r.headers.add(name: "Accept", value: "text/event-stream")
                    let shown = base + "v1/watch"
                    let response: HTTPClientResponse
                    do { response = try await client.execute(r, timeout: .hours(24 * 365)) } catch { throw Self.classify(error, url: shown) }
                    guard response.status == .ok else {
                        let text = (try? await response.body.collect(upTo: 1 << 16)).map { String(buffer: $0) } ?? ""
                        throw Self.failure(status: Int(response.status.code), body: text, url: shown,
                                           retryAfter: response.headers.first(name: "Retry-After"))
                    }
                    // A 200 of another kind (a proxy's or a portal's page) is named as what it
                    // is, not read as a stream that sent nothing. A stream without the header
                    // is read (nothing the server sends lacks it; a link that drops it still
                    // works).
                    if let type = response.headers.first(name: "Content-Type"), !Self.isEventStream(type) {
                        throw TransferFailure(.invalidAnswer, "\(shown) answered 200 with Content-Type \"\(Self.quoted(type))\", not an event stream: something other than a Logbook server answered (a proxy, a login page)", status: 200)
                    }
                    var parser = ServerSentEvents()
                    for try await chunk in response.body {
                        for event in try parser.add(chunk.readableBytesView) where event.name == "cursor" {
                            do { continuation.yield(try ReplicationCursor(token: event.data)) } catch {
                                throw TransferFailure(.invalidAnswer, "\(shown) sent a cursor that is not valid: \(error)")
                            }
                        }
                    }
                    throw TransferFailure.transient("\(shown): the server ended the stream")
                } catch {
                    continuation.finish(throwing: Self.classify(error, url: base + "v1/watch"))
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// A peer's header as shown between quotes: its quotes and backslashes escaped (so that it
    /// can neither close the quotes and pass what follows for the message's own words, nor
    /// imitate an escape), then `printable`, at most 64 characters.
    static func quoted(_ value: String) -> String {
        printable(value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\""), limit: 64)
    }

    /// Whether a Content-Type names `text/event-stream` (any case, parameters aside).
    static func isEventStream(_ type: String) -> Bool {
        let media = type.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        return media.trimmingCharacters(in: .whitespaces).lowercased() == "text/event-stream"
    }

    public func push(_ page: FramePage) async throws -> (ReceiveResult, ReplicationCursor) {
        var r = request("v1/frames", method: .POST)
        r.headers.add(name: "Content-Type", value: Wire.pageContentType)
        let bytes = page.encoded()
        r.body = .bytes(ByteBuffer(bytes: bytes))
        let response = try await execute(r)
        let body = try await collect(response, max: 1 << 16)
        guard let answer = Wire.decode(Wire.PushAnswer.self, from: body), let c = try? ReplicationCursor(token: answer.cursor) else {
            throw TransferFailure.permanent("\(base)v1/frames did not answer a push with a cursor", code: .invalidAnswer)
        }
        return (Self.result(of: answer, for: page), c)
    }

    /// What a push's answer says the server took of `page`, each count kept to what the page held
    /// (0 up to its frames, or its events): the server's word, not to be trusted past that (a
    /// count of Int.max made the session's totals overflow on the next page).
    static func result(of answer: Wire.PushAnswer, for page: FramePage) -> ReceiveResult {
        let frames = page.frames.count
        let events = page.frames.reduce(0) { $0 + (FrameHeader(parsing: $1).map { Int($0.count) } ?? 0) }
        var result = ReceiveResult()
        result.frames = min(max(0, answer.frames), frames)
        result.events = min(max(0, answer.events), events)
        result.alreadyHeld = min(max(0, answer.alreadyHeld), frames)
        result.incomplete = min(max(0, answer.incomplete), frames)
        return result
    }

    /// The largest snapshot accepted when the server does not say what it covers; otherwise
    /// `Snapshot.bytesMax(events:)` of the cursor it announces (`Logbook-Snapshot-Cursor`).
    public static var snapshotBytesMax: Int { Snapshot.absoluteBytesMax }

    /// Fetches the server's snapshot into `path`, streaming, and checks it arrived whole: its
    /// length against `Content-Length` and every byte against the SHA-256 the server sent ahead
    /// (`Logbook-Snapshot-SHA256`). A cut-off or altered snapshot is an error, never installed.
    public func snapshot(to path: String) async throws {
        let response = try await execute(request("v1/snapshot"))
        guard let digest = response.headers.first(name: Wire.snapshotDigestHeader) else {
            throw TransferFailure.permanent("\(base)v1/snapshot came without its digest (\(Wire.snapshotDigestHeader))", code: .invalidAnswer)
        }
        guard FileManager.default.createFile(atPath: path, contents: nil), let out = FileHandle(forWritingAtPath: path) else {
            throw TransferFailure.permanent("cannot write \(path)")
        }
        defer { try? out.close() }
        // What the snapshot claims to cover bounds how large it may be, before a byte is written.
        var bytesMax = Self.snapshotBytesMax
        if let claim = response.headers.first(name: Wire.snapshotCursorHeader) {
            guard let c = try? ReplicationCursor(token: claim) else {
                throw TransferFailure.permanent("\(base)v1/snapshot announced a cursor that is not valid", code: .invalidAnswer)
            }
            bytesMax = Snapshot.bytesMax(events: Seq.total(c.entries.values.lazy.map(\.rawValue)))
        }
        let length = response.headers.first(name: "Content-Length").flatMap { Int($0) }
        if let length, length > bytesMax {
            throw TransferFailure.permanent("\(base)v1/snapshot is \(length) bytes, more than the \(bytesMax) a snapshot of what it covers may need; refused", code: .tooLarge)
        }
        var check = SnapshotCheck(expectedLength: length, sha256: digest, bytesMax: bytesMax)
        do {
            for try await chunk in response.body {
                try chunk.withUnsafeReadableBytes { p in
                    try check.add(p)
                    try out.write(contentsOf: Data(p))
                }
            }
            try check.finish()
            try out.synchronize()
        } catch let f as TransferFailure {
            throw f
        } catch {
            throw TransferFailure.transient("\(base)v1/snapshot was cut off: \(error)")
        }
    }

    private func collect(_ response: HTTPClientResponse, max: Int) async throws -> [UInt8] {
        do { return Array(try await response.body.collect(upTo: max).readableBytesView) } catch {
            throw Self.classify(error, url: base)
        }
    }

    /// An HTTP status other than 200 as a failure: the server's code (or the one the status
    /// stands for, from a server that sends none), its message, and the frames it names.
    static func failure(status: Int, body: String, url: String, retryAfter: String? = nil, now: Date = Date()) -> TransferFailure {
        var message = body.trimmingCharacters(in: .whitespacesAndNewlines)
        var code = FailureCode(status: status)
        var origin: ReplicaID?
        var seqs: ClosedRange<UInt64>?
        if let answer = Wire.decode(Wire.FailureAnswer.self, from: Array(body.utf8)) {
            if !answer.error.isEmpty { message = answer.error }
            // An unknown code (a newer server) keeps the status's meaning.
            if let c = answer.code, let known = FailureCode(rawValue: c) { code = known }
            if let o = answer.origin { origin = ReplicaID(o) }
            if let s = answer.seqs, s.count == 2, s[0] <= s[1] { seqs = s[0]...s[1] }
        }
        // The peer's text, kept to 500 characters and to one line: it reaches a terminal, a
        // peer's last error and reports, where a line break of its own could pass for ours.
        message = printable(message, limit: 500)
        let what: String = switch status {
        case 401: "401 unauthorized"
        case 403: "403 forbidden"
        case 410: "410 gone"
        case 413: "413 too large"
        case 415: "415 unsupported content type"
        default: String(status)
        }
        let text = code == .cursorExpired ? "\(url): \(message)" : "\(url): \(what): \(message)"
        var failure = TransferFailure(code, text, origin: origin, seqs: seqs, status: status)
        // Only where waiting is what the answer asks for: a pause on a refusal would delay
        // nothing but the error.
        if code.retry == .transient { failure.retryAfter = retryAfter.flatMap { Self.retryAfterSeconds($0, now: now) } }
        return failure
    }

    /// A `Retry-After` value as seconds from `now`, within `0...TransferFailure.retryAfterMax`:
    /// delay-seconds (ASCII digits only, leading zeros ignored; more than the bound is the bound)
    /// or an HTTP date in any of RFC 9110's three forms (`httpDate`; one passed is 0). Anything
    /// else is no value, and the session's own backoff stands. Read byte by byte: Foundation's
    /// `DateFormatter` on Linux traps on a value whose parse stops inside a multi-byte character,
    /// which a peer's header can be. Outside the module for the fuzz package only
    /// (`@_spi(Fuzz)`), as are the date readers.
    @_spi(Fuzz) public static func retryAfterSeconds(_ value: String, now: Date) -> Double? {
        var b = Array(value.utf8)[...]
        while let f = b.first, f == 0x20 || f == 0x09 { b = b.dropFirst() }
        while let l = b.last, l == 0x20 || l == 0x09 { b = b.dropLast() }
        if !b.isEmpty, b.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            // Past nine digits (already far past the bound) it is the bound, never converted,
            // so no length of them overflows.
            let digits = b.drop { $0 == UInt8(ascii: "0") }
            guard digits.count <= 9, let n = decimal(digits) else { return TransferFailure.retryAfterMax }
            return min(TransferFailure.retryAfterMax, Double(n))
        }
        guard let at = httpDate(Array(b), now: now) else { return nil }
        return min(TransferFailure.retryAfterMax, max(0, at - now.timeIntervalSince1970))
    }

    /// An HTTP date as seconds since 1970, in any of the three forms RFC 9110 (§5.6.7) has a
    /// recipient read: the IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), and the two obsolete
    /// ones, rfc850-date ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime-date ("Sun Nov  6
    /// 08:49:37 1994"). An rfc850-date's two-digit year is the year of `now`'s century with those
    /// digits, or of the century before when that would be more than 50 years after `now`'s.
    @_spi(Fuzz) public static func httpDate(_ s: [UInt8], now: Date) -> Double? {
        imfFixdate(s) ?? rfc850Date(s, now: now) ?? asctimeDate(s)
    }

    private static let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let longWeekdays = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") as seconds since 1970, read at its fixed
    /// places. A field out of range, a day its month does not have, a weekday that is not the
    /// date's, or any byte other than the form's is no date.
    @_spi(Fuzz) public static func imfFixdate(_ s: [UInt8]) -> Double? {
        guard s.count == 29 else { return nil }
        let f = FixedText(s)
        guard f.has(", ", at: 3), f.has(" ", at: 7), f.has(" ", at: 11), f.has(" GMT", at: 25),
              let weekday = weekdays.firstIndex(where: { f.has($0, at: 0) }),
              let month = months.firstIndex(where: { f.has($0, at: 8) }).map({ $0 + 1 }),
              let day = f.number(at: 5, digits: 2), let year = f.number(at: 12, digits: 4),
              let (hour, minute, second) = f.time(at: 17)
        else { return nil }
        return gmtSeconds(year: year, month: month, day: day, hour: hour, minute: minute, second: second, weekday: weekday)
    }

    /// An rfc850-date ("Sunday, 06-Nov-94 08:49:37 GMT"): the weekday's full name, then fixed places.
    static func rfc850Date(_ s: [UInt8], now: Date) -> Double? {
        guard let weekday = longWeekdays.firstIndex(where: { s.starts(with: $0.utf8) }) else { return nil }
        let at = longWeekdays[weekday].utf8.count
        guard s.count == at + 24 else { return nil }
        let f = FixedText(s)
        guard f.has(", ", at: at), f.has("-", at: at + 4), f.has("-", at: at + 8), f.has(" ", at: at + 11), f.has(" GMT", at: at + 20),
              let day = f.number(at: at + 2, digits: 2),
              let month = months.firstIndex(where: { f.has($0, at: at + 5) }).map({ $0 + 1 }),
              let yy = f.number(at: at + 9, digits: 2),
              let (hour, minute, second) = f.time(at: at + 12)
        else { return nil }
        // `now`'s year, from its days since 1970 (within what a `Date` holds, whole years of
        // 365.2425 days place it; a date a day off at a year's turn moves the window by a year).
        let days = (now.timeIntervalSince1970 / 86_400).rounded(.down)
        guard days.isFinite, abs(days) < 100_000_000 else { return nil }
        let nowYear = 1970 + Int((days / 365.2425).rounded(.down))
        var year = nowYear - nowYear % 100 + yy
        if year > nowYear + 50 { year -= 100 }
        return gmtSeconds(year: year, month: month, day: day, hour: hour, minute: minute, second: second, weekday: weekday)
    }

    /// An asctime-date ("Sun Nov  6 08:49:37 1994"; a day below 10 after a space, or as two digits).
    static func asctimeDate(_ s: [UInt8]) -> Double? {
        guard s.count == 24 else { return nil }
        let f = FixedText(s)
        let day = f.has(" ", at: 8) ? f.number(at: 9, digits: 1) : f.number(at: 8, digits: 2)
        guard f.has(" ", at: 3), f.has(" ", at: 7), f.has(" ", at: 10), f.has(" ", at: 19),
              let weekday = weekdays.firstIndex(where: { f.has($0, at: 0) }),
              let month = months.firstIndex(where: { f.has($0, at: 4) }).map({ $0 + 1 }),
              let day, let year = f.number(at: 20, digits: 4),
              let (hour, minute, second) = f.time(at: 11)
        else { return nil }
        return gmtSeconds(year: year, month: month, day: day, hour: hour, minute: minute, second: second, weekday: weekday)
    }

    /// Bytes read at fixed places (every place within them: the caller checks the length).
    private struct FixedText {
        let s: [UInt8]
        init(_ s: [UInt8]) { self.s = s }
        func has(_ text: String, at i: Int) -> Bool {
            i >= 0 && i + text.utf8.count <= s.count && s[i..<(i + text.utf8.count)].elementsEqual(text.utf8)
        }
        func number(at i: Int, digits n: Int) -> Int? {
            guard i >= 0, i + n <= s.count else { return nil }
            return HTTPTransport.decimal(s[i..<(i + n)])
        }
        /// "HH:MM:SS" at `i`: hours below 24, minutes below 60, seconds below 60, or 60 at 23:59
        /// (a leap second, which UTC inserts only there).
        func time(at i: Int) -> (Int, Int, Int)? {
            guard has(":", at: i + 2), has(":", at: i + 5),
                  let h = number(at: i, digits: 2), let m = number(at: i + 3, digits: 2), let sec = number(at: i + 6, digits: 2),
                  h < 24, m < 60, sec < 60 || sec == 60 && h == 23 && m == 59
            else { return nil }
            return (h, m, sec)
        }
    }

    /// A date and time of day in GMT as seconds since 1970; nil for a day its month does not
    /// have, or a weekday (0 for Sunday) that is not the date's.
    private static func gmtSeconds(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, weekday: Int) -> Double? {
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
        guard day >= 1, day <= monthDays else { return nil }
        // Days from 1970-01-01 to the date in the proleptic Gregorian calendar, counted from
        // March so that a leap day ends its year (years of 0000-9999 keep every term small).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        guard ((days % 7) + 11) % 7 == weekday else { return nil }  // 1970-01-01 was a Thursday
        // In 64 bits: a date past 2038 passes a 32-bit Int's seconds.
        return Double(Int64(days) * 86_400 + Int64(hour * 3_600 + minute * 60 + second))
    }

    /// ASCII digits as their number; nil when any byte is not a digit. The caller bounds their
    /// count (nine at most here), so that the number cannot overflow.
    private static func decimal(_ digits: some Collection<UInt8>) -> Int? {
        var v = 0
        for d in digits {
            guard d >= UInt8(ascii: "0"), d <= UInt8(ascii: "9") else { return nil }
            v = v * 10 + Int(d - UInt8(ascii: "0"))
        }
        return v
    }

    static func classify(_ error: any Error, url: String) -> TransferFailure {
        if let f = error as? TransferFailure { return f }
        if error is NIOSSLError || error is BoringSSLError {
            return TransferFailure(.tls, "\(url): TLS failed: \(error)")
        }
        return .transient("\(url): \(error)")
    }
}

/// Checks a snapshot as it streams in: bounded size, the announced length, the announced SHA-256.
struct SnapshotCheck {
    let expectedLength: Int?
    let sha256: String
    let bytesMax: Int
    private var hasher = SHA256()
    private(set) var received = 0

    init(expectedLength: Int?, sha256: String, bytesMax: Int = HTTPTransport.snapshotBytesMax) {
        self.expectedLength = expectedLength
        self.sha256 = sha256.lowercased()
        self.bytesMax = bytesMax
    }

    mutating func add(_ bytes: UnsafeRawBufferPointer) throws {
        received += bytes.count
        guard received <= bytesMax else {
            throw TransferFailure.permanent("the server's snapshot is larger than \(bytesMax) bytes, the most one of what it covers may need", code: .tooLarge)
        }
        if let expectedLength, received > expectedLength {
            throw TransferFailure.permanent("the server's snapshot runs past its announced \(expectedLength) bytes", code: .invalidAnswer)
        }
        hasher.update(bufferPointer: bytes)
    }

    func finish() throws {
        if let expectedLength, received != expectedLength {
            throw TransferFailure.transient("the snapshot was cut off after \(received) of \(expectedLength) bytes")
        }
        let got = hex(hasher.finalize())
        guard got == sha256 else {
            throw TransferFailure.permanent("the snapshot does not match its SHA-256 (announced \(sha256), received \(got)): not installed")
        }
    }
}

/// Lowercase hex of a digest, as the snapshot header carries it.
package func hex(_ digest: SHA256.Digest) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    for b in digest {
        out.append(digits[Int(b >> 4)])
        out.append(digits[Int(b & 0x0F)])
    }
    return String(decoding: out, as: UTF8.self)
}

/// A Server-Sent Events parser (the subset `/v1/watch` uses: `event:` and `data:` fields, comment
/// lines, events ended by a blank line). Bounded: a line over `Bounds.streamLineBytesMax`, or an
/// event whose lines add up to more than `Bounds.streamEventBytesMax` (endless `data:` lines and
/// no blank line), is an error, not memory.
/// Total over any bytes (a fuzz target, FuzzEventStream, holds it to that).
public struct ServerSentEvents: Sendable {
    /// One event: its name (`message` unless the stream says) and its data lines joined by `\n`.
    public struct Event: Equatable, Sendable {
        public var name = "message"
        public var data = ""
    }

    /// A parser at the start of a stream.
    public init() {}
    private var line: [UInt8] = []
    private var current = Event()
    private var hasData = false
    /// The longest line accepted, in bytes.
    public static let lineBytesMax = Bounds.streamLineBytesMax
    /// The most bytes of one event, its lines together.
    public static let eventBytesMax = Bounds.streamEventBytesMax
    /// Bytes of the event being read so far.
    private var eventBytes = 0

    /// Feeds the next bytes of the stream (split anywhere) and returns the events they complete.
    /// - Throws: `TransferFailure` `invalid_answer` for a line longer than `lineBytesMax`.
    public mutating func add(_ bytes: some Sequence<UInt8>) throws -> [Event] {
        var out: [Event] = []
        for b in bytes {
            if b == 0x0A {
                if line.last == 0x0D { line.removeLast() }
                if line.isEmpty {
                    if hasData { out.append(current) }
                    current = Event()
                    hasData = false
                    eventBytes = 0
                } else if line.first != UInt8(ascii: ":") {
                    eventBytes += line.count + 1
                    guard eventBytes <= Self.eventBytesMax else {
                        throw TransferFailure(.invalidAnswer, "an event stream event is longer than \(Self.eventBytesMax) bytes (no blank line ends it)")
                    }
                    let text = String(decoding: line, as: UTF8.self)
                    let (field, value) = text.firstIndex(of: ":").map { (String(text[..<$0]), String(text[text.index(after: $0)...]).drop { $0 == " " }) }
                        .map { ($0.0, String($0.1)) } ?? (text, "")
                    switch field {
                    case "event": current.name = value
                    case "data":
                        current.data += hasData ? "\n" + value : value
                        hasData = true
                    default: break
                    }
                }
                line.removeAll(keepingCapacity: true)
            } else {
                guard line.count < Self.lineBytesMax else {
                    throw TransferFailure(.invalidAnswer, "an event stream line is longer than \(Self.lineBytesMax) bytes")
                }
                line.append(b)
            }
        }
        return out
    }
}
