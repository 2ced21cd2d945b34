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
            print(JSON.object([("replica_id", JSON.string(book.replicaID.description)), ("store", JSON.string(book.path))]))
        } else {
            print(book.replicaID)
        }
    }
}
