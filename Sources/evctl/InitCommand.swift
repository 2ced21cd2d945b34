import ArgumentParser
import EventLog
import Logbook

struct InitCommand: StoreCommand {
    static let configuration = CommandConfiguration(commandName: "init", abstract: "Create a store and print its replica id.")
    @OptionGroup var options: StoreOptions

    func execute() throws {
        let book = try Logbook.create(at: options.path)
        defer { try? book.close() }
        if options.json {
            print(try ReportJSON.string(InitReport(replicaID: book.replicaID.description, store: book.path)))
        } else {
            print(book.replicaID)
        }
    }
}

/// `evctl init --json`.
struct InitReport: Encodable {
    var replicaID: String
    var store: String
}
