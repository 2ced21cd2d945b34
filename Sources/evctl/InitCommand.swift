import ArgumentParser
import EventLog

struct InitCommand: StoreCommand {
    static let configuration = CommandConfiguration(commandName: "init", abstract: "Create a store and print its replica id.")
    @OptionGroup var options: StoreOptions

    func execute() throws {
        let store = try Store.create(at: options.path)
        if options.json {
            print(JSON.object([("replica_id", JSON.string(store.replicaID.description)), ("store", JSON.string(store.path))]))
        } else {
            print(store.replicaID)
        }
    }
}
