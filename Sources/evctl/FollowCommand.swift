import ArgumentParser
import EventLog
import Foundation
import Projections
import Replicator

/// `evctl sync --follow URL`: keeps this store and an `evctl serve` in sync until stopped.
enum Follow {
    enum Trigger: Sendable {
        case remote(ReplicationCursor)
        case local(ReplicationCursor)
        case ended(String)
    }

    /// Catches up both ways, then pulls each time the server says its cursor moved (`/v1/watch`)
    /// and pushes each time this store's durable cursor moves (inotify on its log), whichever
    /// process moved it. A lost connection is retried with backoff (0.5 s doubling to 30 s).
    /// Prints one line per exchange that moved events (JSON with `--json`); state changes go to
    /// stderr.
    static func run(_ mine: Store, url: String, peer: PeerOptions, json: Bool) async throws {
        let local = try CursorWatcher(store: mine)
        defer { local.stop() }
        var backoff = 0.5
        while !Task.isCancelled {
            do {
                try await peer.withTransport(url, replica: mine.replicaID) { t in
                    let first = try await HTTPShip.exchange(mine, url: url, peer: peer, pull: true, push: true)
                    report(first, json: json)
                    var server = first.pushed?.peerCursor ?? first.pulled?.peerHolds ?? .empty
                    Terminal.note("following \(url): in sync at \(try mine.cursor().token)")
                    backoff = 0.5
                    let (triggers, feed) = AsyncStream.makeStream(of: Trigger.self)
                    let remote = Task {
                        do {
                            for try await c in t.watch() { feed.yield(.remote(c)) }
                            feed.yield(.ended("the server ended the stream"))
                        } catch {
                            feed.yield(.ended(String(describing: error)))
                        }
                    }
                    let changes = local.changes()
                    let mineTask = Task { for await c in changes { feed.yield(.local(c)) } }
                    defer {
                        remote.cancel()
                        mineTask.cancel()
                    }
                    for await trigger in triggers {
                        switch trigger {
                        case .remote(let c):
                            server = c
                            if !(try mine.cursor().includes(c)) {
                                let s = try await HTTPShip.exchange(mine, url: url, peer: peer, pull: true, push: false)
                                report(s, json: json)
                            }
                        case .local(let c):
                            if !server.includes(c) {
                                let s = try await HTTPShip.exchange(mine, url: url, peer: peer, pull: false, push: true)
                                if let holds = s.pushed?.peerCursor { server = server.merged(with: holds) }
                                report(s, json: json)
                            }
                        case .ended(let why):
                            throw TransferFailure.transient(why)
                        }
                    }
                }
            } catch is CancellationError {
                return
            } catch let f as TransferFailure where f.retry == .permanent {
                throw f  // bad token, refused frames: retrying cannot help
            } catch {
                Terminal.note("following \(url): \(error); retrying in \(backoff) s")
                try await Task.sleep(nanoseconds: UInt64(backoff * 1e9))
                backoff = min(30, backoff * 2)
            }
        }
    }

    static func report(_ s: (pulled: TransferSummary?, pushed: TransferSummary?), json: Bool) {
        let pulled = s.pulled?.events ?? 0, pushed = s.pushed?.events ?? 0
        guard pulled > 0 || pushed > 0 else { return }
        let line = json
            ? JSON.object([("pulled_events", String(pulled)), ("pushed_events", String(pushed)), ("time", JSON.string(ISO8601DateFormatter().string(from: Date())))])
            : "pulled \(pulled) events, pushed \(pushed) events"
        WatchCommand.writeAll(Array((line + "\n").utf8))
    }
}
