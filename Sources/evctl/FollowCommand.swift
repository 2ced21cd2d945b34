import ArgumentParser
import EventLog
import Foundation
import Projections
import Replicator

/// `evctl sync --follow URL`: `LiveSync` with this command's options, each exchange remembered
/// in peers.sqlite like a `sync`; one line per exchange that moved events, state on stderr.
enum Follow {
    static func run(_ mine: Store, url: String, peer: PeerOptions, json: Bool) async throws {
        var live = LiveSync(store: mine) {
            try HTTPTransport(url: url, token: peer.resolvedToken, caCertificate: peer.caCert, replica: mine.replicaID, insecureHTTP: peer.insecureHTTP)
        }
        live.project = !peer.noProject
        live.limits = peer.limits
        live.retry = peer.retry
        live.exchange = { t, pull, push, known in
            try await remembering(mine, peer: url) {
                let a = pull ? try await Ship.pull(mine, from: t, peer: peer) : nil
                let b = push ? try await Replication.push(from: mine, to: t, known: a?.peerHolds ?? known, limits: peer.limits, retry: peer.retry) : nil
                return (LiveSync.Exchange(pulled: a, pushed: b), a?.events ?? 0, b?.events ?? 0, b?.peerCursor ?? a?.peerHolds)
            }
        }
        live.onExchange = { e in
            let pulled = e.pulled?.events ?? 0, pushed = e.pushed?.events ?? 0
            guard pulled > 0 || pushed > 0 else { return }
            let line = json
                ? JSON.object([("pulled_events", String(pulled)), ("pushed_events", String(pushed)), ("time", JSON.string(ISO8601DateFormatter().string(from: Date())))])
                : "pulled \(pulled) events, pushed \(pushed) events"
            Output.write(Array((line + "\n").utf8))
        }
        live.onState = { state in
            switch state {
            case .inSync(let c): Terminal.note("following \(url): in sync at \(c.token)")
            case .retrying(let after, let why): Terminal.note("following \(url): \(why); retrying in \(after) s")
            }
        }
        try await live.run()
    }
}
