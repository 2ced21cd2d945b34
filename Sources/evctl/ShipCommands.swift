import ArgumentParser
import EventLog
import Foundation
import Replicator

/// The other end of a transfer: a store reachable as a path. (HTTP is not built yet.)
func openPeerStore(_ source: String) throws -> Store {
    if source.hasPrefix("http://") || source.hasPrefix("https://") {
        throw ValidationError("HTTP transport is not available in this build yet; use a path to another store or a shared folder")
    }
    return try Store.open(at: source)
}

/// Runs one exchange with a peer and remembers its outcome (cursor, time, error) in peers.sqlite.
func remembering<T>(_ store: Store, peer: String, _ body: () throws -> (T, pulled: Int, pushed: Int, cursor: ReplicationCursor)) throws -> T {
    let state = try PeerState(store: store)
    let name = (peer.hasPrefix("/") ? peer : FileManager.default.currentDirectoryPath + "/" + peer)
    do {
        let (value, pulled, pushed, cursor) = try body()
        try state.recordSuccess(name, cursor: cursor, pulled: pulled, pushed: pushed)
        return value
    } catch {
        try? state.recordFailure(name, error: String(describing: error))
        throw error
    }
}

func printReceive(_ r: ReceiveResult, json: Bool, verb: String) {
    if json {
        let tips = r.tips.sorted { $0.key < $1.key }.map { JSON.string($0.key.description) + ":" + String($0.value.rawValue) }.joined(separator: ",")
        print(JSON.object([("frames", String(r.frames)), ("events", String(r.events)), ("already_held", String(r.alreadyHeld)), ("origins", "{" + tips + "}")]))
    } else {
        print("\(verb) \(r.events) events in \(r.frames) frames" + (r.alreadyHeld > 0 ? " (\(r.alreadyHeld) frames already held)" : ""))
    }
}

struct ExportCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write the frames past a cursor (everything by default) to a bundle file, verbatim.",
        discussion: "Bundles carry logs on removable media; `evctl import` verifies every frame before it writes anything."
    )
    @OptionGroup var options: StoreOptions
    @Option(help: "Only what lies past this cursor token (see `evctl cursor` on the receiving store).") var since: String?
    @Option(help: "The bundle file to write.") var out: String

    func execute() throws {
        let store = try options.open()
        var cursor = ReplicationCursor.empty
        if let since {
            do { cursor = try ReplicationCursor(token: since) } catch { throw ValidationError("--since: \(error)") }
        }
        let r = try FrameBundle.export(store: store, since: cursor, to: out)
        if options.json {
            print(JSON.object([("frames", String(r.frames)), ("events", String(r.events)), ("bytes", String(r.bytes)), ("cursor", JSON.string(r.cursor.token))]))
        } else {
            print("exported \(r.events) events in \(r.frames) frames (\(r.bytes) bytes) to \(out)")
        }
    }
}

struct ImportCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Append the frames of a bundle file (verified first; importing twice changes nothing), then project them."
    )
    @OptionGroup var options: StoreOptions
    @Argument(help: "The bundle file.") var file: String

    func execute() throws {
        let r = try StoreSync.importBundle(file, to: try options.open(), recovered: Terminal.reportRecovery, progress: ProjectionProgress().report)
        Terminal.endProgress()
        printReceive(r, json: options.json, verb: "imported")
    }
}

struct PullCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "pull",
        abstract: "Fetch what another store holds past this one's cursor (SOURCE: a path to a store).")
    @OptionGroup var options: StoreOptions
    @Argument(help: "The other store (a path).") var source: String

    func execute() throws {
        let peer = try openPeerStore(source)
        let mine = try options.open()
        let r = try remembering(mine, peer: source) {
            let r = try StoreSync.ship(from: peer, to: mine, recovered: Terminal.reportRecovery, progress: ProjectionProgress().report)
            Terminal.endProgress()
            return (r, r.events, 0, try peer.cursor())
        }
        printReceive(r, json: options.json, verb: "pulled")
    }
}

struct PushCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Send another store what this one holds past its cursor (SOURCE: a path to a store; takes its writer lock).")
    @OptionGroup var options: StoreOptions
    @Argument(help: "The other store (a path).") var source: String

    func execute() throws {
        let peer = try openPeerStore(source)
        let mine = try options.open()
        let r = try remembering(mine, peer: source) {
            let r = try StoreSync.ship(from: mine, to: peer, recovered: Terminal.reportRecovery)
            return (r, 0, r.events, try peer.cursor())
        }
        printReceive(r, json: options.json, verb: "pushed")
    }
}

struct SyncCommand: StoreCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Pull from another store, then push to it: afterwards both hold the same logs.")
    @OptionGroup var options: StoreOptions
    @Argument(help: "The other store (a path).") var source: String

    func execute() throws {
        let peer = try openPeerStore(source)
        let mine = try options.open()
        let (pulled, pushed) = try remembering(mine, peer: source) {
            let pulled = try StoreSync.ship(from: peer, to: mine, recovered: Terminal.reportRecovery)
            let pushed = try StoreSync.ship(from: mine, to: peer, recovered: Terminal.reportRecovery)
            return ((pulled, pushed), pulled.events, pushed.events, try peer.cursor())
        }
        if options.json {
            print(JSON.object([("pulled_events", String(pulled.events)), ("pushed_events", String(pushed.events)), ("cursor", JSON.string(try mine.cursor().token))]))
        } else {
            print("pulled \(pulled.events) events, pushed \(pushed.events) events; both at \(try mine.cursor().token)")
        }
    }
}
