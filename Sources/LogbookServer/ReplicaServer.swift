import Replicator
import EventLog
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOSSL
import ServiceLifecycle

/// `evctl serve`: a store's frames over HTTP (Hummingbird 2). See docs/PROTOCOL.md, "HTTP".
///
/// | route | what |
/// |---|---|
/// | `GET /healthz` | `ok`, no token needed |
/// | `GET /metrics` | Prometheus text (needs a token that may pull, when tokens are set) |
/// | `GET /v1/cursor` | `{"replica_id":…,"cursor":…}` |
/// | `GET /v1/frames?since=TOKEN&max_bytes=N&max_frames=N` | a page (`application/x-logbook-page`) |
/// | `POST /v1/frames` | push a page; answers what was appended and the server's cursor |
public struct ServerConfiguration: Sendable {
    public var host = "127.0.0.1"
    public var port = 8427
    public var policy = AccessPolicy.open
    /// The file `policy` was read from: re-read when it changes and on SIGHUP (`TokensFileWatcher`).
    public var tokensFile: String?
    /// Seconds between looks at `tokensFile`.
    public var tokensCheckInterval = 0.25
    /// PEM files of the certificate chain and private key; TLS is used when both are set.
    public var certificate: String?
    public var key: String?
    public var pageMax = PageLimits.serverMax
    public var pushBytesMax = 64 << 20
    /// Bytes the server may hold in pages being sent and pushes being read, over all connections
    /// (see `MemoryBudget`); `evctl serve --max-memory`. 512 MiB by default.
    public var memoryBytesMax = ServerConfiguration.defaultMemoryBytesMax
    public static let defaultMemoryBytesMax = 512 << 20
    public var lockWait = 2.0
    /// Whether a store's server projects pushes as they arrive (`evctl serve --no-project`: false).
    public var project = true
    /// Timeouts and the connection cap.
    public var limits = ConnectionLimits()
    public init() {}

    /// True for addresses only this machine can reach.
    public static func isLoopback(_ host: String) -> Bool { Wire.isLoopback(host) }

    /// Refuses what would expose the store: a non-loopback address without tokens, half a TLS setup.
    public func validate() throws {
        if policy.isOpen && !Self.isLoopback(host) {
            throw ServerError("refusing to listen on \(host) without --tokens: anyone who can reach this machine could read and write the store (give a tokens file, or listen on 127.0.0.1)")
        }
        if (certificate == nil) != (key == nil) { throw ServerError("TLS needs both --tls-cert and --tls-key") }
        if let n = limits.connectionsPerAddressMax, n < 1 {
            throw ServerError("ConnectionLimits.connectionsPerAddressMax is \(n): one client address must be let hold at least one connection")
        }
        guard (1...65535).contains(port) || port == 0 else { throw ServerError("port \(port) is out of range") }
        let need = max(2 * pushBytesMax, OutgoingPage.bytesBound(pageMax))
        guard memoryBytesMax >= need else {
            throw ServerError("--max-memory \(memoryBytesMax) is less than one request may hold (\(need) bytes: a pushed page of \(pushBytesMax) bytes twice, or a page of \(pageMax.maxBytes) bytes and one more frame)")
        }
    }
}

public struct ServerError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ m: String) { message = m }
    public var description: String { message }
}

public enum ReplicaServer {
    public static let pageContentType = Wire.pageContentType
    static let moreHeader = HTTPField.Name("Logbook-More")!
    static let nextHeader = HTTPField.Name("Logbook-Next-Cursor")!
    static let replicaHeader = HTTPField.Name("Logbook-Replica")!
    static let cursorHeader = HTTPField.Name("Logbook-Cursor")!
    static let snapshotDigestHeader = HTTPField.Name(Wire.snapshotDigestHeader)!
    static let snapshotCursorHeader = HTTPField.Name(Wire.snapshotCursorHeader)!
    /// Bounds of what a request may carry besides a pushed body.
    static let queryBytesMax = 1 << 15

    /// Builds the application serving `store`; `onRunning` gets the bound port (useful with port 0).
    /// `routes` adds routes of its own (the inspector's pages), given the policies tokens are checked against.
    public static func application(store: Store, configuration: ServerConfiguration, logger: Logger,
                                   routes: (Router<BasicRequestContext>, PolicySource) throws -> Void = { _, _ in },
                                   onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) throws -> some ApplicationProtocol {
        try application(backend: endpoint(store: store, configuration: configuration), configuration: configuration, logger: logger, routes: routes, onRunning: onRunning)
    }

    /// The endpoint serving `store` as `configuration` says.
    static func endpoint(store: Store, configuration: ServerConfiguration) throws -> ReplicaEndpoint {
        try configuration.validate()
        return try ReplicaEndpoint(store: store, policy: configuration.policy, policies: PolicySource(configuration.policy), pageMax: configuration.pageMax,
                                   pushBytesMax: configuration.pushBytesMax, lockWait: configuration.lockWait,
                                   memoryBytesMax: configuration.memoryBytesMax, project: configuration.project)
    }

    /// Builds the application serving `backend` (its `policies` are the ones a tokens file reloads).
    public static func application(backend endpoint: some ReplicaBackend, configuration: ServerConfiguration, logger: Logger,
                                   services extra: [any Service] = [],
                                   routes: (Router<BasicRequestContext>, PolicySource) throws -> Void = { _, _ in },
                                   onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) throws -> some ApplicationProtocol {
        try configuration.validate()
        let policies = endpoint.policies
        let router = Router()
        let watches = PrincipalSlots(max: configuration.limits.watchesPerPrincipalMax)
        let pushes = PrincipalSlots(max: configuration.limits.pushesPerPrincipalMax)
        /// A watch slot of `p`'s (none is needed without tokens: every client is this machine's).
        @Sendable func watchSlot(_ p: AccessPolicy.Principal) async throws(EndpointError) -> PrincipalSlots.Slot? {
            guard let holder = endpoint.memoryHolder(p) else { return nil }
            guard let slot = await watches.take(holder, probing: 1) else {
                throw EndpointError(429, "\(holder) has \(watches.max) watch streams open, the most one user (or a principal without one) may hold; close one",
                                    retryAfter: 5)
            }
            return slot
        }
        router.add(middleware: Counting(metrics: endpoint.metrics))
        if configuration.policy.isOpen { router.add(middleware: LoopbackOnlyMiddleware()) }
        router.get("healthz") { _, _ in Response(status: .ok, headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: "ok\n"))) }
        router.get("metrics") { request, _ in
            try await answer {
                let p = try endpoint.authenticate(request.headers[.authorization])
                if !endpoint.policy.isOpen, let d = AccessPolicy.checkPull(p) { throw EndpointError(d.status, d.message) }
                let text = await endpoint.metricsText(principal: p)
                return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(string: text)))
            }
        }
        router.get("v1/cursor") { request, _ in
            try await answer {
                let p = try endpoint.authenticate(request.headers[.authorization])
                let (id, c) = try await endpoint.cursor(principal: p)
                return json(.ok, Wire.CursorAnswer(replicaID: id.description, cursor: c.token))
            }
        }
        router.get("v1/frames") { request, _ in
            try await answer {
                // A streamed page reads its slices as it sends them, for as long as its client
                // takes to read up to 32 MiB: each is sent only while the token still stands.
                let standing = try Standing(policies: endpoint.policies, authorization: request.headers[.authorization])
                let p = standing.principal
                guard (request.uri.query?.utf8.count ?? 0) <= queryBytesMax else { throw EndpointError(414, "the query is longer than \(queryBytesMax) bytes") }
                let q = request.uri.queryParameters
                if q.get("page_version") == "2" {
                    let page = try await endpoint.streamedPage(principal: p, since: q.get("since"), maxBytes: q.get("max_bytes"),
                                                               maxFrames: q.get("max_frames"), peer: request.headers[replicaHeader])
                    var headers: HTTPFields = [.contentType: pageContentType]
                    headers[cursorHeader] = page.holder.token
                    return Response(status: .ok, headers: headers, body: ResponseBody { writer in
                        try await page.write { slice in
                            // Cut short, not ended: the page's client reads a page without its
                            // end as a failed transfer, never as a whole page.
                            guard standing.holds() else {
                                logger.notice("streamed page for principal \"\(p.name)\" cut short: the tokens file no longer gives its token the same rights")
                                throw EndpointError(401, "the token no longer stands for principal \"\(p.name)\"")
                            }
                            try await writer.write(slice)
                        }
                        try await writer.finish(nil)
                    })
                }
                let (page, mine, reservation) = try await endpoint.reservedPage(principal: p, since: q.get("since"), maxBytes: q.get("max_bytes"),
                                                                                maxFrames: q.get("max_frames"), peer: request.headers[replicaHeader])
                var headers: HTTPFields = [.contentType: pageContentType]
                headers[moreHeader] = page.more ? "true" : "false"
                headers[nextHeader] = page.next.token
                headers[cursorHeader] = mine.token
                // The page's memory is given back once it is sent (or the client went away).
                let buffers = page.buffers
                let length = buffers.reduce(0) { $0 + $1.readableBytes }
                return Response(status: .ok, headers: headers, body: ResponseBody(contentLength: length) { writer in
                    defer { reservation.release() }
                    for b in buffers { try await writer.write(b) }
                    try await writer.finish(nil)
                })
            }
        }
        // Server-Sent Events: `event: cursor` with the store's durable cursor now and whenever it
        // moves, and a comment every 15 s so that idle timeouts and proxies keep the stream open.
        router.get("v1/watch") { request, _ in
            try await answer {
                // The stream lasts only as long as its token stands for the principal that opened
                // it: a reloaded tokens file may revoke the token or change what it may read.
                let standing = try Standing(policies: endpoint.policies, authorization: request.headers[.authorization])
                let p = standing.principal
                // Held until the stream ends (or the answer is dropped unsent).
                let slot = try await watchSlot(p)
                let cursors = try await endpoint.watch(principal: p)
                var headers: HTTPFields = [.contentType: "text/event-stream", .cacheControl: "no-store"]
                headers[.contentEncoding] = "identity"
                return Response(status: .ok, headers: headers, body: ResponseBody { writer in
                    // What is due to be written: the newest cursor and a ping at most, rung in by a
                    // bell that holds one ring. A client that does not read holds these, not a line
                    // per move of the cursor (an unbounded stream of them grew without end).
                    let due = WatchLines()
                    let (bell, ring) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
                    // A reload rings too, so that a stream whose token no longer stands ends at once,
                    // not at its next line; and nothing is written once it does not (checked below).
                    let listener = endpoint.policies.onReplace { ring.yield() }
                    defer { endpoint.policies.stopListening(listener) }
                    slot?.probe {
                        due.ping()
                        ring.yield()
                    }
                    // Child tasks (not unstructured ones), so they run where the server's do.
                    try await withThrowingTaskGroup(of: Void.self) { tasks in
                        tasks.addTask {
                            for await c in cursors {
                                due.cursor("event: cursor\ndata: \(c.token)\n\n")
                                ring.yield()
                            }
                            ring.finish()
                        }
                        tasks.addTask {
                            while !Task.isCancelled {
                                try? await Task.sleep(nanoseconds: 15_000_000_000)
                                due.ping()
                                ring.yield()
                            }
                        }
                        defer { tasks.cancelAll() }
                        try await writer.write(ByteBuffer(string: "retry: 1000\n\n"))
                        // A server shutting down ends the stream (clients reconnect elsewhere or later).
                        try await withGracefulShutdownHandler {
                            for await _ in bell {
                                // Taken, then checked: a line due after a reload is never written.
                                let lines = due.take()
                                guard standing.holds() else {
                                    logger.notice("watch stream of principal \"\(p.name)\" ended: the tokens file no longer gives its token the same rights")
                                    break
                                }
                                for line in lines { try await writer.write(ByteBuffer(string: line)) }
                            }
                        } onGracefulShutdown: {
                            ring.finish()
                        }
                        try await writer.finish(nil)
                    }
                    withExtendedLifetime(slot) {}
                })
            }
        }
        router.get("v1/snapshot") { request, _ in
            try await answer {
                // A snapshot may be large and its client slow: each chunk is sent only while the
                // token still stands (cut short, it fails its length and digest at the client).
                let standing = try Standing(policies: endpoint.policies, authorization: request.headers[.authorization])
                let p = standing.principal
                let file = try await endpoint.snapshot(principal: p)
                var headers: HTTPFields = [.contentType: "application/vnd.sqlite3"]
                headers[snapshotDigestHeader] = file.sha256
                headers[snapshotCursorHeader] = file.cursor.token
                return Response(status: .ok, headers: headers, body: ResponseBody(contentLength: file.size) { writer in
                    while let chunk = try file.next() {
                        guard standing.holds() else {
                            logger.notice("snapshot for principal \"\(p.name)\" cut short: the tokens file no longer gives its token the same rights")
                            throw EndpointError(401, "the token no longer stands for principal \"\(p.name)\"")
                        }
                        try await writer.write(ByteBuffer(bytes: chunk))
                    }
                    try await writer.finish(nil)
                })
            }
        }
        router.post("v1/frames") { request, _ in
            try await answer {
                let standing = try Standing(policies: endpoint.policies, authorization: request.headers[.authorization])
                let p = standing.principal
                if case .origins(let set) = p.push, set.isEmpty {
                    throw EndpointError(403, "principal \"\(p.name)\" may not push to this server")
                }
                // Only a page: no form or text body a web page could send without asking first.
                guard request.headers[.contentType]?.split(separator: ";").first.map({ $0.trimmingCharacters(in: .whitespaces).lowercased() }) == pageContentType else {
                    throw EndpointError(415, "a push carries a page of frames (Content-Type: \(pageContentType))")
                }
                if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > endpoint.pushBytesMax {
                    throw EndpointError(413, "the page is \(length) bytes; this server takes at most \(endpoint.pushBytesMax) per request")
                }
                // Held until the push is answered (none without tokens: every client is this machine's).
                let slot = try endpoint.memoryHolder(p).map { holder throws(EndpointError) in
                    guard let slot = pushes.take(holder) else {
                        throw EndpointError(429, "\(holder) has \(pushes.max) pushes open, the most one user (or a principal without one) may hold; retry when one ends",
                                            retryAfter: 1)
                    }
                    return slot
                }
                defer { withExtendedLifetime(slot) {} }
                // Reserved before a byte is read: the body, and the frames decoded from it.
                let declared = request.headers[.contentLength].flatMap { Int($0) }
                let reservation = try await endpoint.memory.reserve(2 * (declared ?? endpoint.pushBytesMax), holder: endpoint.memoryHolder(p))
                defer { reservation.release() }
                var body: [UInt8] = []
                if let declared { body.reserveCapacity(declared) }
                for try await chunk in request.body {
                    guard body.count + chunk.readableBytes <= endpoint.pushBytesMax else {
                        throw EndpointError(413, "the page is larger than \(endpoint.pushBytesMax) bytes, the most this server takes per request")
                    }
                    chunk.withUnsafeReadableBytes { body.append(contentsOf: $0) }
                }
                // A body may take minutes to arrive: what it pushes is checked against the tokens
                // file in force once it has (a token revoked meanwhile pushes nothing).
                let pusher = standing.holds() ? p : try endpoint.authenticate(request.headers[.authorization])
                if case .origins(let set) = pusher.push, set.isEmpty {
                    throw EndpointError(403, "principal \"\(pusher.name)\" may not push to this server")
                }
                let a = try await endpoint.push(principal: pusher, body: body, peer: request.headers[replicaHeader])
                let r = a.result
                return json(.ok, Wire.PushAnswer(frames: r.frames, events: r.events, alreadyHeld: r.alreadyHeld, incomplete: r.incomplete,
                                                  cursor: a.cursor.token))
            }
        }
        try routes(router, policies)
        let server: HTTPServerBuilder
        let limits = configuration.limits
        let perAddress = AddressConnections(limits)
        let http1 = HTTP1Channel.Configuration(additionalChannelHandlers: [AddressLimitHandler(perAddress, logger: logger, metrics: endpoint.metrics), RequestDeadlineHandler(limits)],
                                               idleTimeout: .milliseconds(Int64(limits.idleTimeoutMs)))
        if let cert = configuration.certificate, let key = configuration.key {
            do {
                let chain = try NIOSSLCertificate.fromPEMFile(cert).map { NIOSSLCertificateSource.certificate($0) }
                var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .file(key))
                tls.minimumTLSVersion = .tlsv12
                server = try .tls(.http1(configuration: http1), tlsConfiguration: tls)
            } catch {
                throw ServerError("cannot use the TLS certificate \(cert) and key \(key): \(error)")
            }
        } else {
            server = .http1(configuration: http1)
        }
        var services: [any Service] = extra
        if let file = configuration.tokensFile {
            services.append(TokensFileWatcher(path: file, source: policies, interval: configuration.tokensCheckInterval, logger: logger))
        }
        return Application(router: router, server: server,
                           configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "evctl",
                                                availableConnectionsDelegate: MaximumAvailableConnections(limits.connectionsMax)),
                           services: services,
                           onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? configuration.port) },
                           logger: logger)
    }

    /// Serves `store` while `body` runs (with its base URL), then stops the server: for programs
    /// and tests that run a server next to other work. `configuration.port` 0 picks a free port.
    public static func withRunningServer<T>(store: Store, configuration: ServerConfiguration, logger: Logger,
                                            routes: (Router<BasicRequestContext>, PolicySource) throws -> Void = { _, _ in },
                                            _ body: (String) async throws -> T) async throws -> T {
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let endpoint = try endpoint(store: store, configuration: configuration)
        let app = try application(backend: endpoint, configuration: configuration, logger: logger, routes: routes, onRunning: { continuation.yield($0) })
        // The store is let go when this returns: its writer closed now, not whenever the last
        // reference to the endpoint goes (a program that writes the store next was refused it
        // as locked, now and then).
        // Its watch feed too: it would otherwise run on for its idle grace, holding a thread,
        // an inotify instance and the store's index.
        defer {
            endpoint.stopWatching()
            endpoint.closeWriterNow()
        }
        return try await withRunning(app, ports: ports, configuration: configuration, logger: logger, body)
    }

    /// `withRunningServer` for any backend (a hub node).
    public static func withRunningServer<T>(backend: some ReplicaBackend, configuration: ServerConfiguration, logger: Logger,
                                            services: [any Service] = [], _ body: (String) async throws -> T) async throws -> T {
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let app = try application(backend: backend, configuration: configuration, logger: logger, services: services, onRunning: { continuation.yield($0) })
        return try await withRunning(app, ports: ports, configuration: configuration, logger: logger, body)
    }

    private static func withRunning<T>(_ app: some ApplicationProtocol, ports: AsyncStream<Int>, configuration: ServerConfiguration, logger: Logger,
                                       _ body: (String) async throws -> T) async throws -> T {
        // Stopped gracefully (connections closed, none left half made), not by cancelling it.
        // A child task, not an unstructured one: the server's tasks then run where the caller's
        // do, so an app (or a test) that prefers a task executor of its own gets it for them.
        let group = ServiceGroup(configuration: .init(services: [app], logger: logger))
        return try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            func stop() async {
                await group.triggerGracefulShutdown()
                while case .some = try? await tasks.next() {}
            }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else {
                await stop()
                throw ServerError("the server did not start")
            }
            let host = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
            do {
                let r = try await body("\(configuration.certificate == nil ? "http" : "https")://\(host):\(port)")
                await stop()
                return r
            } catch {
                await stop()
                throw error
            }
        }
    }

    /// An answer of the wire's (`Wire.CursorAnswer`, `PushAnswer`, `FailureAnswer`) as the body.
    static func json<T: Encodable>(_ status: HTTPResponse.Status, _ answer: T) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: Wire.json(answer) + "\n")))
    }

    /// Runs a handler; an `EndpointError` becomes its status with `{"error":"…"}`, anything else a 500.
    static func answer(_ body: () async throws -> Response) async throws -> Response {
        do { return try await body() } catch let e as EndpointError {
            let answer = Wire.FailureAnswer(error: e.message, code: e.code.rawValue, origin: e.origin?.description,
                                            seqs: e.seqs.map { [$0.lowerBound, $0.upperBound] })
            var r = json(HTTPResponse.Status(code: e.status), answer)
            if e.status == 401 { r.headers[.wwwAuthenticate] = "Bearer realm=\"logbook\"" }
            if let s = e.retryAfter { r.headers[.retryAfter] = String(s) }
            return r
        } catch {
            // The details (paths, errno) stay in the server's log; the client learns that it failed.
            FileHandle.standardError.write(Data("evctl serve: request failed: \(error)\n".utf8))
            return json(.internalServerError, Wire.FailureAnswer(error: "the server failed to answer; its log says why", code: "server_error"))
        }
    }

    /// Counts answers by status for `/metrics`.
    struct Counting<Context: RequestContext>: RouterMiddleware {
        let metrics: ServerMetrics
        func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
            do {
                let r = try await next(request, context)
                metrics.request(status: Int(r.status.code))
                return r
            } catch let e as any HTTPResponseError {
                metrics.request(status: Int(e.status.code))
                throw e
            } catch {
                metrics.request(status: 500)
                throw error
            }
        }
    }
}

/// Whether the token a request was taken with still stands for the principal it stood for then,
/// rights and scope included, under the policy in force: asked by what outlives the request's
/// head (a watch stream, a streamed page or snapshot, a push's body). Looked up again only when
/// the policy was replaced since the last look (`PolicySource.versioned`), and
/// never again once seen not to stand. Two reloads between two looks (a token revoked, then
/// given back) are seen as the second left things: the token stands.
final class Standing: @unchecked Sendable {
    // Unchecked: `checked` and `fallen` are read and written under `lock`.
    let principal: AccessPolicy.Principal
    private let policies: PolicySource
    private let authorization: String?
    private let lock = NSLock()
    private var checked: UInt64
    private var fallen = false

    /// The principal `authorization` stands for now; refused as `ReplicaBackend.authenticate` refuses.
    init(policies: PolicySource, authorization: String?) throws(EndpointError) {
        // The policy and its version read together: a reload after this is seen by `holds`.
        let (policy, version) = policies.versioned
        switch policy.authenticate(authorization: authorization) {
        case .success(let p): principal = p
        case .failure(let d): throw EndpointError(d.status, d.message)
        }
        self.policies = policies
        self.authorization = authorization
        checked = version
    }

    func holds() -> Bool {
        lock.withLock {
            guard !fallen else { return false }
            let (policy, version) = policies.versioned
            guard version != checked else { return true }
            if case .success(let p) = policy.authenticate(authorization: authorization), p == principal {
                checked = version
                return true
            }
            fallen = true
            return false
        }
    }
}

/// The lines a watch stream has yet to write: the newest cursor event and a ping, each held once
/// (a newer cursor replaces an older one not yet written).
final class WatchLines: @unchecked Sendable {
    // Unchecked: every field is read and written under `lock`.
    private let lock = NSLock()
    private var cursorLine: String?
    private var pingDue = false

    func cursor(_ line: String) { lock.withLock { cursorLine = line } }
    func ping() { lock.withLock { pingDue = true } }

    /// What is due, cursor first, and nothing after it until more is put.
    func take() -> [String] {
        lock.withLock {
            defer { cursorLine = nil; pingDue = false }
            return [cursorLine, pingDue ? ": ping\n\n" : nil].compactMap { $0 }
        }
    }
}
