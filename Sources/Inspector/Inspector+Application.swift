import Foundation
import Hummingbird
import Logbook
import LogbookServer
import Logging
import NIOCore
import Replicator
import ServiceLifecycle

extension Inspector {
    /// A server of the inspector's pages alone (`evctl inspect`): no replication routes, no
    /// tokens, so only on a loopback address and only for requests addressed to one.
    public static func application(reader: LogbookReader, host: String = "127.0.0.1", port: Int = 0, logger: Logger,
                                   onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) throws -> (app: some ApplicationProtocol, inspector: Inspector) {
        guard ServerConfiguration.isLoopback(host) else {
            throw InspectorError("evctl inspect listens on a loopback address only (\(host) is not one): its pages are open to whoever can reach them; use `evctl serve --tokens` to share them", status: 400)
        }
        let inspector = try Inspector.open(reader: reader, policies: PolicySource(.open), logger: logger)
        let router = Router()
        router.add(middleware: LoopbackOnlyMiddleware())
        router.get("healthz") { _, _ in "ok\n" }
        router.get("/") { _, _ in Inspector.redirect("/ui/") }
        inspector.install(on: router)
        let app = Application(router: router, configuration: .init(address: .hostname(host, port: port), serverName: "evctl-inspect"),
                              services: [inspector.indexer],
                              onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? port) }, logger: logger)
        return (app, inspector)
    }
}
