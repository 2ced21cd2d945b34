import Domain
import EventLog
import Projections
import Replicator
import LogbookServer
import Logging
import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import Foundation

/// A fresh directory under the system temp dir, removed when the value is released: the one
/// every test target uses.
public final class TempDir: @unchecked Sendable {
    public let path: String

    /// - Parameter name: the folder's prefix, for telling a leftover apart.
    public init(_ name: String = "logbook") {
        let p = NSTemporaryDirectory() + "/\(name)-\(UUID().uuidString.prefix(8))"
        try! FileManager.default.createDirectory(atPath: p, withIntermediateDirectories: true)
        path = p
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A wall clock the test moves by hand (milliseconds since 1970).
public final class ManualClock: WallClock, @unchecked Sendable {
    private let lock = NSLock()
    private var millis: UInt64

    public init(_ start: UInt64 = 1_767_225_600_000) { millis = start }
    public func nowMillis() -> UInt64 { lock.withLock { millis } }
    public func set(_ v: UInt64) { lock.withLock { millis = v } }
    public func advance(_ d: UInt64) { lock.withLock { millis += d } }
}

/// The sample workload's mutations and the stores they are written into, as the suites of
/// several modules use them.
public enum Workload {
    /// `n` mutations of the seeded sample workload (`evctl sample`), by `actor` when given.
    public static func mutations(_ n: Int, seed: UInt64, actor: String? = nil) -> [Mutation] {
        SampleWorkload(seed: seed, count: n).enumerated().map { i, line in
            var m = try! MutationParser.parse(line, lineNumber: i + 1)
            if let actor { m.actor = actor }
            return m
        }
    }

    /// Appends `n` of them to `store` and projects them (the writer lock waited for up to 5 s).
    public static func edit(_ store: Store, _ n: Int, seed: UInt64, actor: String? = nil) throws {
        let p = try ProjectedStore.open(store: store, waitingUpTo: 5)
        _ = try p.append(mutations(n, seed: seed, actor: actor))
        try p.close()
    }

    /// The store's projection, caught up, as canonical lines: equal dumps, equal projections.
    public static func dump(_ store: Store) throws -> [String] {
        let p = try Projection(store: store)
        defer { try? p.close() }
        try p.catchUp()
        return try p.canonicalDump()
    }
}

extension Workload {
    /// A store at `path` of 300 events, each a note of one repeated byte a million long, in
    /// frames of up to 16 MiB: about 300 MB uncompressed in about 1.2 MB of frames (LZ4's
    /// 255-fold expansion, as a peer bent on it would write).
    public static func framesThatDecodeFarPastTheirSize(at path: String) throws -> Store {
        let store = try Store.create(at: path)
        var options = AppendOptions()
        options.frameRawBytesMax = 16 << 20
        let a = try LogAppender(store: store, options: options)
        let text = String(repeating: "a", count: 1_000_000)
        for _ in 0..<20 {
            _ = try a.append((0..<15).map { _ in Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("notes", .text(text))]) })
        }
        try a.close()
        return store
    }

    /// What `frames` hold uncompressed, by their headers.
    public static func rawBytes(_ frames: [[UInt8]]) -> Int {
        frames.reduce(0) { $0 + FrameHeader.rawBytes(of: $1) }
    }

    /// The frames of `origin` in `store`, as stored.
    public static func frames(_ store: Store, _ origin: ReplicaID) throws -> [[UInt8]] {
        var out: [[UInt8]] = []
        try LogReader(store: store).forEachFrame(origin: origin) { _, b in out.append(Array(b)); return true }
        return out
    }
}

/// Requests with the raw HTTP client, so tests send what `HTTPTransport` never would.
public enum RawHTTP {
    public struct Answer: Sendable {
        public let status: Int
        public let body: String
    }

    /// `method` on `url`, with a bearer token and a page body when given.
    public static func request(_ url: String, method: HTTPMethod = .GET, token: String? = nil, body: [UInt8]? = nil) async throws -> Answer {
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        do {
            var r = HTTPClientRequest(url: url)
            r.method = method
            if let token { r.headers.add(name: "Authorization", value: "Bearer \(token)") }
            if let body {
                r.body = .bytes(ByteBuffer(bytes: body))
                r.headers.add(name: "Content-Type", value: Wire.pageContentType)
            }
            let response = try await client.execute(r, timeout: .seconds(120))
            let text = String(buffer: try await response.body.collect(upTo: 1 << 26))
            try await client.shutdown()
            return Answer(status: Int(response.status.code), body: text)
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// A GET: the status, the body as bytes, the `Logbook-Cursor` header.
    public static func fetch(_ url: String, token: String) async throws -> (Int, [UInt8], String?) {
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        do {
            var r = HTTPClientRequest(url: url)
            r.headers.add(name: "Authorization", value: "Bearer \(token)")
            let response = try await client.execute(r, timeout: .seconds(120))
            let body = try await response.body.collect(upTo: 1 << 26)
            try await client.shutdown()
            return (Int(response.status.code), Array(body.readableBytesView), response.headers.first(name: "Logbook-Cursor"))
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// Pushes `page` to the server at `url`: the status and the body.
    public static func push(_ page: FramePage, to url: String, token: String) async throws -> (Int, String) {
        let r = try await request(url + "/v1/frames", method: .POST, token: token, body: page.encoded())
        return (r.status, r.body)
    }
}

/// A server on a free loopback port for the length of `body`, both on `ServerThreads`.
public func withServer<T>(_ store: Store, configure: (inout ServerConfiguration) -> Void = { _ in },
                   _ body: (String) async throws -> T) async throws -> T {
    var config = ServerConfiguration()
    config.port = 0
    configure(&config)
    var logger = Logger(label: "test.serve")
    logger.logLevel = .critical
    return try await ServerThreads.run {
        try await ReplicaServer.withRunningServer(store: store, configuration: config, logger: logger, body)
    }
}

/// `withServer` with its principals read from the tokens file at `file`, looked at every 50 ms,
/// so that a test sees a reload at once.
public func withServer<T>(_ store: Store, tokensFile file: String, configure: (inout ServerConfiguration) -> Void = { _ in },
                          _ body: (String) async throws -> T) async throws -> T {
    try await withServer(store, configure: {
        $0.policy = try! AccessPolicy.load(path: file)
        $0.tokensFile = file
        $0.tokensCheckInterval = 0.05
        configure(&$0)
    }, body)
}

/// Tokens files for tests.
public enum TestTokens {
    /// A tokens file's text: each principal, by name and token, with `rights` (JSON members after
    /// its token, `"pull":true` by default).
    public static func json(_ principals: [(name: String, token: String)], rights: String = #""pull":true"#) -> String {
        "{\"principals\":[" + principals.map { "{\"name\":\"\($0.name)\",\"token\":\"\($0.token)\",\(rights)}" }.joined(separator: ",") + "]}"
    }

    /// Waits up to 10 s for `url`'s `/v1/cursor` to answer `token` with `status` (a tokens file
    /// reloaded); whether it did.
    public static func until(_ url: String, _ token: String, answers status: Int) async throws -> Bool {
        for _ in 0..<200 {
            if try await RawHTTP.request(url + "/v1/cursor", token: token).status == status { return true }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        return false
    }
}

/// Threads of their own for a server under test and the test that drives it, outside Swift's
/// cooperative pool. That pool has two threads on this machine, and synchronous suites running
/// beside (a test function that is not async, a process waited for) hold them for seconds or
/// minutes: a server on them answered nothing meanwhile, and its clients timed out (a CI run of
/// 2026-12-03 saw a server silent for 338 s while one synchronous suite ran 535 s). The tasks a
/// server starts for its connections are children of the one run here, so they prefer these
/// threads too; what the server hands to its own queues runs there as it always does.
public enum ServerThreads {
    /// Runs jobs on a concurrent dispatch queue, whose threads grow when some of them block.
    final class QueueExecutor: TaskExecutor, @unchecked Sendable {
        let queue = DispatchQueue(label: "test.server-threads", attributes: .concurrent)

        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            let executor = asUnownedTaskExecutor()
            queue.async { job.runSynchronously(on: executor) }
        }
    }

    static let executor = QueueExecutor()

    /// Runs `body` with its tasks, and their child tasks, preferring `ServerThreads`' threads.
    public static func run<T>(_ body: () async throws -> T) async throws -> T {
        try await withTaskExecutorPreference(executor, operation: body)
    }

    /// An unstructured task on `ServerThreads`' threads: one made with `Task {}` runs on the
    /// cooperative pool whatever its creator prefers (a live sync following a server under test,
    /// which synchronous suites beside it could otherwise hold up for minutes).
    public static func task<T: Sendable>(_ body: sending @escaping () async throws -> T) -> Task<T, any Error> {
        Task(executorPreference: executor, operation: body)
    }
}

/// Frames made up from valid ones, as a hostile peer can: changed bytes under a checksum made
/// right again, so that what lies past the checksum is what gets checked.
public enum CraftedFrames {
    /// `frame` with its checksum made right for its bytes (as far as its header's length).
    public static func withChecksumMadeRight(_ frame: [UInt8]) -> [UInt8] {
        guard let h = FrameHeader(parsing: frame), h.totalBytes <= frame.count else { return frame }
        var f = frame
        var crc = CRC32C()
        f.withUnsafeBytes { p in
            crc.update(UnsafeRawBufferPointer(rebasing: p[0..<FrameHeader.size - 4]))
            crc.update(UnsafeRawBufferPointer(rebasing: p[FrameHeader.size..<h.totalBytes]))
        }
        for i in 0..<4 { f[FrameHeader.size - 4 + i] = UInt8(truncatingIfNeeded: crc.final >> (8 * UInt32(i))) }
        return f
    }

    /// `frame` with one bit of its first payload byte changed and its checksum made right: its
    /// header and blocks are as they were, its content is not the one its signature covers.
    public static func withPayloadAltered(_ frame: [UInt8]) -> [UInt8] {
        var f = frame
        f[FrameHeader.size] ^= 1
        return withChecksumMadeRight(f)
    }

    /// A signed frame with one bit of its signature (the last byte) changed and its checksum
    /// made right: its form still names the key's replica, its signature no longer verifies.
    public static func withSignatureAltered(_ frame: [UInt8]) -> [UInt8] {
        var f = frame
        f[f.count - 1] ^= 1
        return withChecksumMadeRight(f)
    }
}

/// Appends to `store`'s log in `share` one new item per title, in one append.
public func appendSharedItems(_ store: Store, _ share: ShareID, _ titles: [String], options: AppendOptions = AppendOptions()) throws {
    let w = try LogAppender(store: store, options: options)
    defer { try? w.close() }
    _ = try w.appendShared(titles.map { Mutation(entity: .item, op: .create, entityID: UUID(), fields: [Field("title", .text($0))]) }, to: share)
}

/// Pushes `store` to the server at `url` as `token`'s principal, over a transport shut down
/// after, and returns what the push did.
public func pushed(_ store: Store, to url: String, token: String, limits: PageLimits = PageLimits()) async throws -> TransferSummary {
    let t = try HTTPTransport(url: url, token: token, replica: store.replicaID)
    do {
        let summary = try await Replication.push(from: store, to: t, limits: limits)
        await t.shutdown()
        return summary
    } catch {
        await t.shutdown()
        throw error
    }
}
