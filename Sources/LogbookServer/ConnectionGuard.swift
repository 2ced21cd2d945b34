import EventLog
import Replicator
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes

/// Limits that keep `evctl serve` answering when clients misbehave: a client that opens
/// connections and sends nothing (or a header a byte at a time) is cut off, and the number of
/// connections stays below the descriptors the process may open. See docs/SECURITY.md.
public struct ConnectionLimits: Sendable, Equatable {
    /// From a connection's start (or the end of its last answer) to a request's whole head.
    public var headerTimeoutMs = 10_000
    /// From a request's head to the end of its body.
    public var requestTimeoutMs = 300_000
    /// A connection on which nothing is read or written for this long is closed.
    public var idleTimeoutMs = 60_000
    /// A connection whose client takes nothing of an answer for this long (what is written waits
    /// past the socket's buffers, and none of it leaves) is closed: the answer's memory (a page's
    /// reserved slice, a watch) would otherwise be held for as long as the client keeps the
    /// connection open. A client that reads, however slowly, is not cut off.
    public var writeStallTimeoutMs = 60_000
    /// Open connections at most; further ones wait in the listen backlog.
    public var connectionsMax = ConnectionLimits.defaultConnectionsMax
    /// Open connections from one client address at most: an IPv4 address, or an IPv6 /64 (one
    /// network's share: the hosts of one LAN, and every link-local peer, count together). One
    /// more is closed as it arrives, before anything of it is read; the server logs it once, and
    /// again only after the address has closed every connection, and `/metrics` counts each
    /// (`logbook_connections_refused_total`). nil: half of `connectionsMax`. The per-user limits bound what a token holds, not sockets: without this,
    /// one host (with a token or without one) could hold every connection the server allows.
    public var connectionsPerAddressMax: Int?
    /// Whether connections from this machine (loopback addresses) count against
    /// `connectionsPerAddressMax`. Off by default: they are this machine's own programs, which
    /// could take the server's connections anyway.
    public var countsLoopback = false
    /// The bound `connectionsPerAddressMax` sets (at least 1).
    public var connectionsPerAddress: Int { max(1, connectionsPerAddressMax ?? connectionsMax / 2) }
    /// Watch streams (`GET /v1/watch`) one user (or a principal without a user) keeps open at
    /// once, with tokens; one more is answered 429. A watch holds its connection for as long as
    /// the client likes: without a bound, one token's streams could take every connection the
    /// server allows.
    public var watchesPerPrincipalMax = 16
    /// Pushes (`POST /v1/frames`) one user (or a principal without a user) has open at once,
    /// with tokens; one more is answered 429 (a client retries it). A push whose body trickles
    /// in holds its connection for up to the request timeout, and the memory budget, which a
    /// small declared length barely touches, did not bound how many: one token's trickling
    /// pushes could take every connection the server allows.
    public var pushesPerPrincipalMax = 16

    public init() {}

    /// Half the process's descriptor limit (the rest is for the store's files), at most 1,024.
    public static var defaultConnectionsMax: Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 256 }
        let soft = Int(clamping: limit.rlim_cur)
        return max(8, min(1024, soft / 2 - 32))
    }
}

/// How many long-lived requests (watch streams) each holder keeps open, bounded per holder (a
/// user, or a principal without one: `ReplicaBackend.memoryHolder`). Safe to use from any thread.
final class PrincipalSlots: @unchecked Sendable {
    let max: Int
    private let lock = Lock()
    /// Per principal, its slots held and what asks each whether its client is still there.
    private var held: [String: [UInt64: (@Sendable () -> Void)?]] = [:]
    private var nextID: UInt64 = 0

    init(max: Int) { self.max = max }

    /// One slot of `name`'s, given back when the slot is let go; nil when `name` holds `max`.
    func take(_ name: String) -> Slot? {
        let id: UInt64? = lock.withLock {
            guard (held[name]?.count ?? 0) < max else { return nil }
            nextID += 1
            held[name, default: [:]][nextID] = .some(nil)
            return nextID
        }
        return id.map { Slot(self, name, $0) }
    }

    /// `take`; when `name` holds `max`, first asks each of its slots whether its client is still
    /// there (`Slot.probe`) and waits up to `wait` seconds for those gone to give theirs back.
    /// A server learns that a client went away only when it next writes to it, which an idle
    /// watch does once per ping: without asking, a client that reconnects found its old
    /// streams' slots held for up to a ping's interval.
    func take(_ name: String, probing wait: Double) async -> Slot? {
        if let s = take(name) { return s }
        let probes: [@Sendable () -> Void] = lock.withLock { (held[name] ?? [:]).values.compactMap { $0 } }
        for p in probes { p() }
        let deadline = Date().addingTimeInterval(wait)
        while Date() < deadline {
            do { try await Task.sleep(nanoseconds: 20_000_000) } catch { return nil }  // cancelled: the request is gone
            if let s = take(name) { return s }
        }
        return nil
    }

    /// Slots `name` holds now.
    func count(_ name: String) -> Int { lock.withLock { held[name]?.count ?? 0 } }

    fileprivate func setProbe(_ name: String, _ id: UInt64, _ probe: @escaping @Sendable () -> Void) {
        lock.withLock {
            if held[name]?[id] != nil { held[name]?[id] = .some(probe) }
        }
    }

    fileprivate func give(_ name: String, _ id: UInt64) {
        lock.withLock {
            held[name]?[id] = nil
            if held[name]?.isEmpty == true { held[name] = nil }
        }
    }

    /// A slot held until it is let go (whatever ends the request: its stream, an error, a
    /// response never sent).
    final class Slot: Sendable {
        private let owner: PrincipalSlots
        private let name: String
        private let id: UInt64
        fileprivate init(_ owner: PrincipalSlots, _ name: String, _ id: UInt64) {
            self.owner = owner
            self.name = name
            self.id = id
        }
        /// What writes to the slot's client at once (a watch's ping), so that a client gone
        /// away ends its request and gives the slot back.
        func probe(_ write: @escaping @Sendable () -> Void) { owner.setProbe(name, id, write) }
        deinit { owner.give(name, id) }
    }
}

/// Closes a connection whose request head does not arrive within the header timeout, whose
/// request does not end within the request timeout, or whose client reads nothing of an answer
/// within the write stall timeout. Sits after the HTTP codec.
final class RequestDeadlineHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let headerTimeout: TimeAmount
    private let requestTimeout: TimeAmount
    private let writeStallTimeout: TimeAmount
    private var timer: Scheduled<Void>?
    /// Armed while the channel cannot take more writes (the client is not reading).
    private var stallTimer: Scheduled<Void>?
    /// Bytes of answers' bodies written to the channel so far: less what still waits in it, what
    /// the socket has taken.
    private var bodyBytesWritten = 0
    /// The last request was answered whole (its answer's end written): the connection waits
    /// for the next head, on the head timeout, whatever of the request's body still arrives.
    private var answered = false

    init(_ limits: ConnectionLimits) {
        headerTimeout = .milliseconds(Int64(limits.headerTimeoutMs))
        requestTimeout = .milliseconds(Int64(limits.requestTimeoutMs))
        writeStallTimeout = .milliseconds(Int64(limits.writeStallTimeoutMs))
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            stallTimer?.cancel()
            stallTimer = nil
        } else if stallTimer == nil {
            armStall(context)
        }
        context.fireChannelWritabilityChanged()
    }

    /// Closes the connection unless some of what waits to be written leaves within the write
    /// stall timeout; each time some does, waits again. (Writability alone would cut off a slow
    /// reader: one buffer of a large frame takes longer than the timeout to drain at a few
    /// hundred KB/s, and the channel stays unwritable until it has.)
    private func armStall(_ context: ChannelHandlerContext) {
        let sentBefore = sent(context.channel)
        let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        stallTimer = context.eventLoop.scheduleTask(in: writeStallTimeout) {
            let (handler, context) = bound.value
            if let before = sentBefore, let now = handler.sent(context.channel), now > before, context.channel.isActive {
                handler.armStall(context)  // it is being read: wait again
            } else {
                handler.stallTimer = nil
                context.close(promise: nil)
            }
        }
    }

    /// What the socket has taken of the bodies written (give or take their framing), or nil
    /// where the channel does not say what it holds.
    private func sent(_ channel: any Channel) -> Int? {
        guard let waiting = try? channel.syncOptions?.getOption(ChannelOptions.bufferedWritableBytes) else { return nil }
        return bodyBytesWritten - waiting
    }

    private func arm(_ context: ChannelHandlerContext, _ after: TimeAmount) {
        timer?.cancel()
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: after) { loopBound.value.close(promise: nil) }
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(context, headerTimeout) }
    }

    func channelActive(context: ChannelHandlerContext) {
        arm(context, headerTimeout)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            answered = false
            arm(context, requestTimeout)
        case .end:
            // A request answered before its body ended (refused for its token, say) waits for
            // the next head on the head timeout, armed when the answer ended: cancelling it here
            // left the connection to the idle timeout, and a client without a token held it
            // with one small request a minute.
            if !answered {
                timer?.cancel()
                timer = nil
            }
        case .body: break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .end:
            answered = true
            arm(context, headerTimeout)  // waiting for the next request
        case .body(let b): bodyBytesWritten += b.readableBytes
        case .head: break
        }
        context.write(data, promise: promise)
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        stallTimer?.cancel()
        stallTimer = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        stallTimer?.cancel()
        stallTimer = nil
    }
}

/// Connections open per client address (`ConnectionLimits.connectionsPerAddressMax`), shared by
/// every connection of a server. Safe to use from any thread.
final class AddressConnections: @unchecked Sendable {
    let max: Int
    let countsLoopback: Bool
    private let lock = Lock()
    private var open: [[UInt8]: Int] = [:]
    /// Addresses refused since they last held no connection: each is logged once meanwhile.
    private var told: Set<[UInt8]> = []

    init(_ limits: ConnectionLimits) {
        max = limits.connectionsPerAddress
        countsLoopback = limits.countsLoopback
    }

    /// The key `address` is counted under: the four bytes of an IPv4 address, also when an IPv6
    /// address carries one (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64's
    /// `64:ff9b::/96`, and 6to4's `2002:a.b.c.d::/48`, whose host is that IPv4 address); else the
    /// first eight bytes of an IPv6 address (its /64). nil when it is not counted: loopback
    /// (`127.0.0.0/8`, `::1`, `::ffff:127.0.0.0/104`, unless `countsLoopback`; an embedded
    /// IPv4 address of 127 is not this machine), or not an IP address.
    func key(_ address: SocketAddress?) -> [UInt8]? {
        var bytes: [UInt8]
        switch address {
        case .v4(let a)?:
            bytes = withUnsafeBytes(of: a.address.sin_addr) { Array($0) }
        case .v6(let a)?:
            let all = withUnsafeBytes(of: a.address.sin6_addr) { Array($0) }
            func zero(_ r: Range<Int>) -> Bool { all[r].allSatisfy { $0 == 0 } }
            if zero(0..<15) && all[15] == 1 {
                return countsLoopback ? all : nil  // ::1
            } else if zero(0..<10) && all[10] == 0xFF && all[11] == 0xFF {
                bytes = Array(all[12..<16])  // IPv4-mapped: the IPv4 address itself
            } else if zero(0..<12) {
                return Array(all[12..<16])  // IPv4-compatible (and ::): counted, never loopback
            } else if all[0..<4] == [0x00, 0x64, 0xFF, 0x9B] && zero(4..<12) {
                return Array(all[12..<16])  // NAT64: counted, never loopback
            } else if all[0] == 0x20 && all[1] == 0x02 {
                return Array(all[2..<6])  // 6to4: counted, never loopback
            } else {
                bytes = Array(all[0..<8])
            }
        default:
            return nil
        }
        if bytes.count == 4 && bytes[0] == 127 && !countsLoopback { return nil }
        return bytes
    }

    /// One connection of `key`: false when it holds `max` already, and then whether this is the
    /// first refusal since it last held none (to be logged).
    func take(_ key: [UInt8]) -> (taken: Bool, first: Bool) {
        lock.withLock {
            let n = open[key] ?? 0
            if n < max {
                open[key] = n + 1
                return (true, false)
            }
            return (false, told.insert(key).inserted)
        }
    }

    func give(_ key: [UInt8]) {
        lock.withLock {
            let n = (open[key] ?? 1) - 1
            open[key] = n > 0 ? n : nil
            // Logged again only once it has let every connection go: told again on each one
            // it closed, a client at its bound could write a line per connection it opens.
            if n <= 0 { told.remove(key) }
        }
    }

    /// Connections `key` holds now.
    func count(_ key: [UInt8]) -> Int { lock.withLock { open[key] ?? 0 } }
}

/// Closes a connection from an address that holds `ConnectionLimits.connectionsPerAddressMax`
/// already, as it arrives (before a TLS handshake or a request is read), and counts the others
/// until they close.
final class AddressLimitHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let connections: AddressConnections
    private let logger: Logger
    private let metrics: ServerMetrics
    private var checked = false, refused = false
    private var held: [UInt8]?

    init(_ connections: AddressConnections, logger: Logger, metrics: ServerMetrics) {
        self.connections = connections
        self.logger = logger
        self.metrics = metrics
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { _ = check(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        // A connection refused is closed, and the handlers after this one have been told it is
        // inactive: they are not told it is active after that.
        if check(context) { context.fireChannelActive() }
    }

    /// Counts the connection (once); false when it is refused, and closed.
    private func check(_ context: ChannelHandlerContext) -> Bool {
        guard !checked else { return !refused }
        checked = true
        let address = context.channel.remoteAddress
        guard let key = connections.key(address) else { return true }
        let (taken, first) = connections.take(key)
        if taken {
            held = key
            return true
        }
        if first {
            logger.notice("connections from \(address?.ipAddress ?? "?") refused: it holds \(connections.max) open, the most one address may (ConnectionLimits.connectionsPerAddressMax); logged again once it has closed them all")
        }
        refused = true
        metrics.connectionRefused()
        context.close(promise: nil)
        return false
    }

    private func release() {
        if let key = held { connections.give(key) }
        held = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        release()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) { release() }
}

/// Without tokens the server trusts whatever can reach it, which must then be this machine's
/// own programs, not a web page in its browser: requests naming a non-loopback `Host` (DNS
/// rebinding) or carrying an `Origin` other than the server's own are refused.
public struct LoopbackOnlyMiddleware<Context: RequestContext>: RouterMiddleware {
    public init() {}
    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let host = request.head.authority ?? ""
        guard ServerConfiguration.isLoopback(Self.hostName(host)) else {
            return ReplicaServer.json(.forbidden, Wire.FailureAnswer(
                error: "this server has no tokens and answers only requests addressed to a loopback name (Host \"\(printable(String(host.prefix(100)), limit: 100))\" refused)"))
        }
        if let origin = request.headers[.origin] {
            let own = ["http://" + host, "https://" + host]
            guard own.contains(origin.lowercased()) else {
                return ReplicaServer.json(.forbidden, Wire.FailureAnswer(error: "requests from web pages of other origins are refused (this server has no tokens)"))
            }
        }
        return try await next(request, context)
    }

    /// The host of a `Host` value: without its port, brackets kept off an IPv6 literal.
    static func hostName(_ authority: String) -> String {
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return authority }
            return String(authority[authority.index(after: authority.startIndex)..<close])
        }
        return String(authority.split(separator: ":", maxSplits: 1).first ?? "")
    }
}
