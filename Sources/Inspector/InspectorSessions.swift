import EventLog
import Foundation

/// Browser sessions of the inspector: a random session id (the cookie) names the token that
/// signed in, kept in this process only, and a CSRF token for the session's forms. The token is
/// checked against the tokens file again on every request, so revoking it ends its sessions.
final class InspectorSessions: @unchecked Sendable {
    struct Session {
        var token: String
        var csrf: String
        var expires: Date
    }

    private let lock = Lock()
    private var sessions: [String: Session] = [:]
    /// How long a session lasts, and how many may be open at once (the oldest goes first).
    static let lifetimeSeconds: Double = 12 * 3600
    static let sessionsMax = 10_000

    static func randomToken() -> String {
        var g = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &g) }
        return bytes.map { String(format: "%02x", $0) }.joined()
    }

    /// Opens a session for `token`: its id and CSRF token.
    func open(token: String, now: Date = Date()) -> (id: String, csrf: String) {
        let id = Self.randomToken()
        let csrf = Self.randomToken()
        lock.withLock {
            sessions = sessions.filter { $0.value.expires > now }
            if sessions.count >= Self.sessionsMax, let oldest = sessions.min(by: { $0.value.expires < $1.value.expires })?.key {
                sessions[oldest] = nil
            }
            sessions[id] = Session(token: token, csrf: csrf, expires: now.addingTimeInterval(Self.lifetimeSeconds))
        }
        return (id, csrf)
    }

    func session(_ id: String, now: Date = Date()) -> Session? {
        guard id.utf8.count == 64 else { return nil }
        return lock.withLock {
            guard let s = sessions[id] else { return nil }
            if s.expires <= now {
                sessions[id] = nil
                return nil
            }
            return s
        }
    }

    func close(_ id: String) { _ = lock.withLock { sessions.removeValue(forKey: id) } }

    /// Compares in time that depends on the lengths only.
    static func same(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        var d: UInt8 = 0
        for i in x.indices { d |= x[i] ^ y[i] }
        return d == 0
    }
}
