import Foundation
import EventLog
import Logbook

/// `evctl sync --follow URL`: `Logbook.follow`, each exchange remembered like a `sync`; one line
/// per exchange that moved events (with `--json`, also per exchange that first left out an
/// origin the server refused, named in `refused`), state on stderr.
enum Follow {
    static func run(_ book: Logbook, peer: Peer, json: Bool) async throws {
        let name = peer.name
        // Each origin the server refuses is named once, not at every push that leaves it out;
        // so is this store's refusal of the server's frames of its own origin (a fork of it).
        let told = Locked(Set<ReplicaID>())
        let toldOwn = Locked(false)
        try await book.follow(peer, onExchange: { e in
            var newly: [String: String] = [:]
            for (o, why) in (e.pushed?.refused ?? [:]).sorted(by: { $0.key < $1.key }) where told.withLock({ $0.insert(o).inserted }) {
                Terminal.note("following \(name): origin \(o) is not pushed (its frames stay in this store; every other origin is): \(why)")
                newly[o.description] = why
            }
            var ownRefused: String?
            if let why = e.pulled?.ownLogRefused, toldOwn.withLock({ let first = !$0; $0 = true; return first }) {
                Terminal.note("following \(name): the server's frames of this store's own log are not taken, and this store's own are not pushed (every other origin is, both ways): \(why)")
                ownRefused = why
            }
            guard e.pulledEvents > 0 || e.pushedEvents > 0 || (json && (!newly.isEmpty || ownRefused != nil)) else { return }
            let line = json
                ? Reports.line(ExchangeReport(pulledEvents: e.pulledEvents, pushedEvents: e.pushedEvents,
                                              time: ISO8601DateFormatter().string(from: Date()), refused: newly.isEmpty ? nil : newly,
                                              ownLogRefused: ownRefused))
                : "pulled \(e.pulledEvents) events, pushed \(e.pushedEvents) events"
            Output.write(Array((line + "\n").utf8))
        }, onState: { state in
            switch state {
            case .inSync(let c): Terminal.note("following \(name): in sync at \(c.token)")
            case .partlyInSync(let c, let refused):
                let n = refused.count == 1 ? "1 origin" : "\(refused.count) origins"
                Terminal.note("following \(name): in sync at \(c.token) but for \(n) (named above)")
            case .retrying(let after, let why): Terminal.note("following \(name): \(why); retrying in \(after) s")
            }
        })
    }
}

