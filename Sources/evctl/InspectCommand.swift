import ArgumentParser
import Foundation
import Inspector
import EventLog
import Logbook
import Logging

struct InspectCommand: AsyncStoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Open the store's audit pages in a browser: a server on a free loopback port; prints its URL.",
        discussion: """
            The pages (docs/INSPECT.md): origins and events over time, the log newest first with filters,
            any entity's events in merge order with the fields each holds now, conflicts with winner and
            loser, anomalies, full-text search. Read-only; the audit index (<store>/audit.sqlite) is built
            on first use and kept up to date. Stop it with Ctrl-C. To share the pages with other machines,
            use `evctl serve --tokens`, which serves them under /ui/ with sign-in.
            """
    )
    @OptionGroup var options: StoreOptions
    @Option(help: "Address and port to listen on (a loopback address; port 0 picks a free one).") var listen = "127.0.0.1:0"
    @Option(name: .customLong("port-file"), help: "Write the port listened on to this file once serving.") var portFile: String?

    func execute() async throws {
        let book = try options.book(.inspect)
        let (host, port) = try ServeCommand.parseListen(listen)
        var logger = Logger(label: "evctl.inspect")
        logger.logLevel = .notice
        let portFile = self.portFile
        let shown = host.contains(":") ? "[\(host)]" : host
        let (app, _) = try Inspector.application(reader: LogbookReader(book: book), host: host, port: port, logger: logger) { port in
            if let portFile { try? Data("\(port)\n".utf8).write(to: URL(fileURLWithPath: portFile), options: .atomic) }
            Terminal.note("audit pages of \(book.path) at http://\(shown):\(port)/ui/ (Ctrl-C stops)")
            print("http://\(shown):\(port)/ui/")
        }
        try await app.runService()
    }
}
