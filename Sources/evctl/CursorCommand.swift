import ArgumentParser
import EventLog
import Logbook

struct CursorCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "cursor",
        abstract: "Print this store's cursor: the last seq it holds of every origin, as an opaque token.",
        discussion: "--json prints {\"token\":…,\"origins\":{origin: last_seq}}. Tokens are stable: the same holdings always print the same token."
    )
    @OptionGroup var options: StoreOptions

    func execute() throws {
        let cursor = try options.book(.inspect).cursor()
        if options.json {
            Reports.print(CursorReport(token: cursor.token, origins: .init(cursor.origins.map { ($0.description, cursor[$0].rawValue) })))
        } else {
            print(cursor.token)
        }
    }
}
