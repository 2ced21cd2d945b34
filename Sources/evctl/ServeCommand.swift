import ArgumentParser
import Foundation
import Hub
import Inspector
import EventLog
import Logbook
import LogbookServer
import Logging
import Replicator
import ServiceLifecycle

struct ServeCommand: AsyncStoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve this store's log over HTTP: pull and push for other replicas, /healthz and /metrics.",
        discussion: """
            Without --tokens the server only listens on a loopback address and every caller may pull and push.
            A tokens file maps bearer tokens to principals:
              {"principals":[{"name":"laptop","token":"...","push":["<replica id>"],"pull":true}]}
            ("push": "*" lets a trusted relay push any origin). A principal with "user": "NAME" (and
            "read_users": [...]) is scoped: it reads only its users' origins and pushes only its own
            user's, with that user as every event's actor (docs/SECURITY.md). The tokens file is re-read
            when it changes and on SIGHUP; an invalid one keeps the last good one. The writer lock is taken per push only,
            so local appends keep working while the server runs. Stop it with Ctrl-C or SIGTERM.

            The audit pages (docs/INSPECT.md) are served under /ui/: with --tokens, sign in at /ui/login with a
            token that may pull (or send it as Authorization: Bearer).

            --hub postgres://USER@HOST/DATABASE serves a hub kept in PostgreSQL instead of a store: several
            serve nodes on one database are interchangeable, and reads are enforced by row-level security.
            Every principal of a hub has a user (docs/HUB.md). The password may be given in PGPASSWORD.
            """
    )
    @OptionGroup var options: StoreOptions
    @Option(help: "Address and port to listen on (HOST:PORT, [IPv6]:PORT; port 0 picks a free one).") var listen = "127.0.0.1:8427"
    @Option(help: "The tokens file (JSON) of principals allowed to connect.") var tokens: String?
    @Option(name: .customLong("tls-cert"), help: "PEM certificate chain; with --tls-key, serve https.") var tlsCert: String?
    @Option(name: .customLong("tls-key"), help: "PEM private key of --tls-cert.") var tlsKey: String?
    @Option(name: .customLong("max-push-bytes"), help: "The largest pushed page accepted, in bytes.") var maxPushBytes = 64 << 20
    @Option(name: .customLong("max-memory"), help: "Bytes held at most in pages being sent and pushes being read, over all connections; requests wait their turn past it. With --tokens, one user (or a principal without one) holds at most a quarter.")
    var maxMemory = ServerConfiguration.defaultMemoryBytesMax
    @Option(name: .customLong("port-file"), help: "Write the port listened on to this file once serving (useful with port 0).") var portFile: String?
    @Option(help: "Serve a hub kept in this PostgreSQL database (postgres://USER@HOST[:PORT]/DATABASE) instead of a store.") var hub: String?
    @Flag(name: .customLong("no-project"), help: "Do not project pushes as they arrive (a pure relay): pulls, pushes and the pages' log views work as before, and the projection is brought up to date when a snapshot is made.")
    var noProject = false
    @Option(name: .customLong("max-connections-per-address"), help: "Connections one client address (an IPv4 address, an IPv6 /64) may hold open at once; one more is closed as it arrives. Default: half of those the server accepts. Behind a balancer or proxy on another machine (or Docker's, or a NAT), every client is one address: give 1024 or more.")
    var maxConnectionsPerAddress: Int?
    @Flag(name: .customLong("count-loopback"), help: "Count this machine's own connections (loopback) against --max-connections-per-address, as one address: on a machine shared with users who should not hold every connection. Not for a proxy on this machine: its clients would share one bound.")
    var countLoopback = false
    @Flag(help: "Log every request.") var verbose = false

    /// Bad usage is refused before the store is opened (exit status 64).
    func validate() throws {
        if let n = maxConnectionsPerAddress, n < 1 {
            throw ValidationError("--max-connections-per-address must be at least 1 (got \(n))")
        }
    }

    /// The connection limits the options set.
    func limits(_ config: inout ServerConfiguration) {
        if let n = maxConnectionsPerAddress { config.limits.connectionsPerAddressMax = n }
        config.limits.countsLoopback = countLoopback
    }

    static func parseListen(_ s: String) throws -> (String, Int) {
        var host = "127.0.0.1"
        var portText = s
        if s.hasPrefix("[") {
            guard let close = s.firstIndex(of: "]"), s[s.index(after: close)...].hasPrefix(":") else {
                throw ValidationError("--listen \(s): expected [IPv6]:PORT")
            }
            host = String(s[s.index(after: s.startIndex)..<close])
            portText = String(s[s.index(close, offsetBy: 2)...])
        } else if let colon = s.lastIndex(of: ":") {
            host = String(s[..<colon])
            portText = String(s[s.index(after: colon)...])
        }
        guard let port = Int(portText), (0...65535).contains(port), !host.isEmpty else {
            throw ValidationError("--listen \(s): expected HOST:PORT with a port from 0 to 65535")
        }
        return (host, port)
    }

    func execute() async throws {
        if let hub { return try await serveHub(hub) }
        let book = try options.book(.inspect)
        let store = book.store
        var config = ServerConfiguration()
        config.project = !noProject
        (config.host, config.port) = try Self.parseListen(listen)
        if let tokens {
            config.policy = try AccessPolicy.load(path: tokens)
            config.tokensFile = tokens
            TokensFileWatcher.handleHangups()  // before anything can send one: SIGHUP reloads, never ends the server
        }
        config.certificate = tlsCert
        config.key = tlsKey
        guard maxPushBytes > 0 else { throw ValidationError("--max-push-bytes must be positive") }
        config.pushBytesMax = maxPushBytes
        config.memoryBytesMax = maxMemory
        limits(&config)
        var logger = Logger(label: "evctl.serve")
        logger.logLevel = verbose ? .debug : .notice
        let scheme = tlsCert == nil ? "http" : "https"
        let host = config.host.contains(":") ? "[\(config.host)]" : config.host
        let portFile = self.portFile
        let count = config.policy.principals.count
        let principals = config.policy.isOpen ? "no tokens (loopback only)" : "\(count) principal\(count == 1 ? "" : "s") in \(tokens ?? "")"
        // The inspector's pages under /ui/, checked against the same (reloaded) tokens.
        var inspector: Inspector?
        let app = try ReplicaServer.application(store: store, configuration: config, logger: logger, routes: { router, policies in
            let i = try Inspector.open(reader: LogbookReader(book: book), policies: policies, secureCookies: tlsCert != nil, logger: logger)
            i.install(on: router)
            inspector = i
        }, onRunning: { port in
            if let portFile { try? Data("\(port)\n".utf8).write(to: URL(fileURLWithPath: portFile), options: .atomic) }
            Terminal.note("serving \(store.path) (replica \(store.replicaID)) at \(scheme)://\(host):\(port), \(principals); audit pages at \(scheme)://\(host):\(port)/ui/")
        })
        let services: [any Service] = [app] + (inspector.map { [$0.indexer] } ?? [])
        try await ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)).run()
    }

    /// `--hub`: a node of a hub kept in PostgreSQL.
    func serveHub(_ address: String) async throws {
        let database = try HubDatabase(url: address)
        if options.store != nil { throw ValidationError("--hub and --store name two different things to serve: give one") }
        guard let tokens else { throw ValidationError("--hub needs --tokens: every principal of a hub has a user") }
        var config = ServerConfiguration()
        (config.host, config.port) = try Self.parseListen(listen)
        config.policy = try AccessPolicy.load(path: tokens)
        try HubPolicy.check(config.policy)
        config.tokensFile = tokens
        TokensFileWatcher.handleHangups()
        config.certificate = tlsCert
        config.key = tlsKey
        guard maxPushBytes > 0 else { throw ValidationError("--max-push-bytes must be positive") }
        config.pushBytesMax = maxPushBytes
        config.memoryBytesMax = maxMemory
        limits(&config)
        try config.validate()
        var logger = Logger(label: "evctl.serve")
        logger.logLevel = verbose ? .debug : .notice
        let node = try await PostgresHub.open(database, policies: PolicySource(config.policy), pageMax: config.pageMax, pushBytesMax: config.pushBytesMax,
                                              memoryBytesMax: config.memoryBytesMax, logger: logger)
        defer { node.close() }
        let scheme = tlsCert == nil ? "http" : "https"
        let host = config.host.contains(":") ? "[\(config.host)]" : config.host
        let portFile = self.portFile
        let count = config.policy.principals.count
        let app = try ReplicaServer.application(backend: node, configuration: config, logger: logger, onRunning: { port in
            if let portFile { try? Data("\(port)\n".utf8).write(to: URL(fileURLWithPath: portFile), options: .atomic) }
            Terminal.note("serving hub \(node.hubID) in \(database) at \(scheme)://\(host):\(port), \(count) principal\(count == 1 ? "" : "s") in \(tokens)")
        })
        try await app.runService()
    }
}
