import ArgumentParser
import EventLog
import Logbook

struct KeysCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "Print this replica's public signing key and its member card.",
        discussion: """
            Every frame a replica appends is signed with its Ed25519 key, and its replica id derives from the public
            key, so anyone can check that frames come from it. The key is printed as LBK1- and base32 in groups of
            four (to read out, or to put in a QR code as is) and as hex. The private key stays in the store's
            replica.key and is never printed or shipped. The member card (LBM1-…, the same as `evctl share card`)
            is what a share's admin adds this replica by: its signing key and the key shares' keys are sealed to,
            signed together. A store made before signed logs has no key: its frames are unsigned.
            """)
    @OptionGroup var options: StoreOptions

    func execute() throws {
        let store = try Store.open(at: options.path)
        let signing = try store.signingKey(op: "keys")
        let key = signing?.public
        let card = signing?.memberCard.printable
        if options.json {
            print(try ReportJSON.string(KeysReport(replicaID: store.replicaID.description, signed: key != nil,
                                                   publicKey: key?.printable, publicKeyHex: key?.hex, memberCard: card)))
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
        if let card { print("member card \(card)") }
    }
}

/// `evctl keys --json`.
struct KeysReport: Encodable {
    var replicaID: String
    var signed: Bool
    var publicKey: String?
    var publicKeyHex: String?
    var memberCard: String?
}
