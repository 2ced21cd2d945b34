import Foundation
import Logging
import NIOSSL
import PostgresNIO

/// Where a hub's database is: `evctl serve --hub postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`.
///
/// - `?host=/path/to/dir` connects through the Unix socket in that directory instead (as libpq).
/// - `?sslmode=disable` (the default on loopback and sockets) or `require` (the default elsewhere;
///   the server's certificate is verified against the system's roots).
/// - The password may come from `PGPASSWORD` instead of the address, so it stays out of `ps`.
public struct HubDatabase: Sendable, CustomStringConvertible {
    public var user: String
    public var password: String?
    public var host: String
    public var port: Int
    public var database: String
    /// A Unix socket directory (the address's `host` query parameter).
    public var socketDirectory: String?
    public var tls: Bool

    /// - Throws: `HubError` naming what in the address is wrong.
    public init(url text: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        guard text.hasPrefix("postgres://") || text.hasPrefix("postgresql://"), let url = URLComponents(string: text) else {
            throw HubError("--hub: expected postgres://USER@HOST[:PORT]/DATABASE, got \"\(text.prefix(80))\"")
        }
        guard let user = url.user, !user.isEmpty else { throw HubError("--hub: the address names no user (postgres://USER@HOST/DATABASE)") }
        let database = String(url.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else { throw HubError("--hub: the address names no database (postgres://USER@HOST/DATABASE)") }
        self.user = user
        self.database = database
        password = url.password ?? environment["PGPASSWORD"]
        var socket: String?
        var sslmode: String?
        for q in url.queryItems ?? [] {
            switch q.name {
            case "host": socket = q.value
            case "sslmode": sslmode = q.value
            default: throw HubError("--hub: unknown parameter \"\(q.name.prefix(40))\" (host, sslmode)")
            }
        }
        host = url.host ?? "localhost"
        guard !host.isEmpty || socket != nil else { throw HubError("--hub: the address names no host") }
        if let p = url.port {
            guard (1...65535).contains(p) else { throw HubError("--hub: port \(p) is out of range") }
            port = p
        } else {
            port = 5432
        }
        if let socket { guard socket.hasPrefix("/") else { throw HubError("--hub: host=\(socket.prefix(80)) must be a directory's absolute path") } }
        socketDirectory = socket
        switch sslmode {
        case nil: tls = socket == nil && !["localhost", "127.0.0.1", "::1"].contains(host)
        case "disable": tls = false
        case "require", "verify-full": tls = true
        case let m?: throw HubError("--hub: sslmode=\(m.prefix(20)) is not one of disable, require, verify-full")
        }
    }

    /// The client configuration (the pool of connections a node keeps).
    func configuration() -> PostgresClient.Configuration {
        var c: PostgresClient.Configuration
        if let dir = socketDirectory {
            c = .init(unixSocketPath: "\(dir)/.s.PGSQL.\(port)", username: user, password: password, database: database)
        } else {
            c = .init(host: host, port: port, username: user, password: password, database: database,
                      tls: tls ? .require(.makeClientConfiguration()) : .disable)
        }
        c.options.maximumConnections = 16
        c.options.connectionIdleTimeout = .seconds(60)
        return c
    }

    /// The configuration of one connection (to check the address before a pool is made).
    func connectionConfiguration() throws -> PostgresConnection.Configuration {
        if let dir = socketDirectory {
            return .init(unixSocketPath: "\(dir)/.s.PGSQL.\(port)", username: user, password: password, database: database)
        }
        return .init(host: host, port: port, username: user, password: password, database: database,
                     tls: tls ? .require(try NIOSSLContext(configuration: .makeClientConfiguration())) : .disable)
    }

    /// The address without its password.
    public var description: String {
        let at = socketDirectory.map { "\(host):\(port) (socket in \($0))" } ?? "\(host):\(port)"
        return "postgres://\(user)@\(at)/\(database)"
    }
}

/// A hub that cannot start or answer: what and why.
public struct HubError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ m: String) { message = m }
    public var description: String { message }
}
