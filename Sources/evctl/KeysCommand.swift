import ArgumentParser
import EventLog
import Logbook

struct KeysCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "Print this replica's public signing key.",
        discussion: """
            Every frame a replica appends is signed with its Ed25519 key, and its replica id derives from the public
            key, so anyone can check that frames come from it. The key is printed as LBK1- and base32 in groups of
            four (to read out, or to put in a QR code as is) and as hex. The private key stays in the store's
            replica.key and is never printed or shipped. A store made before signed logs has no key: its frames
            are unsigned.
            """)
    @OptionGroup var options: StoreOptions

    func execute() throws {
        let store = try Store.open(at: options.path)
        let key = try store.signingKey(op: "keys")?.public
        if options.json {
            print(try ReportJSON.string(KeysReport(replicaID: store.replicaID.description, signed: key != nil,
                                                   publicKey: key?.printable, publicKeyHex: key?.hex)))
            return
        }
        print("replica     \(store.replicaID)")
        guard let key else {
            print("signing     none: this store was made before signed logs, and its frames are unsigned")
            return
        }
        print("signing     Ed25519; every frame this replica appends is signed, and its id derives from the key")
        print("public key  \(key.printable)")
        print("hex         \(key.hex)")
    }
}

/// `evctl keys --json`.
struct KeysReport: Encodable {
    var replicaID: String
    var signed: Bool
    var publicKey: String?
    var publicKeyHex: String?
}
