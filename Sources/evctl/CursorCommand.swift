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
            let origins = cursor.origins.map { JSON.string($0.description) + ":" + String(cursor[$0].rawValue) }.joined(separator: ",")
            print(JSON.object([("token", JSON.string(cursor.token)), ("origins", "{" + origins + "}")]))
        } else {
            print(cursor.token)
        }
    }
}
