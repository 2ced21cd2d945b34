import Replicator
import Crypto
import EventLog
import Foundation

/// Who may do what on a served store: bearer tokens mapped to principals, read from a tokens file.
///
/// ```json
/// {"principals":[
///   {"name":"laptop","token":"…at least 16 characters…","push":["<replica id>"],"pull":true},
///   {"name":"relay","token":"…","push":"*","pull":true}
/// ]}
/// ```
/// `push` lists the origins the principal may author (its own replica ids), or `"*"` for a
/// trusted relay; `pull` says whether it may read. Tokens are kept only as SHA-256 digests and
/// compared in constant time against every principal.
///
/// A principal may belong to a user (`"user": "alice"`, and `"read_users": ["bob"]` for the users
/// whose origins it may also read): it is then *scoped* (docs/SECURITY.md, "Per-user scopes").
/// An origin belongs to the user of the first scoped principal that pushes it; a scoped principal
/// pushes only origins of its own user, only events whose actor is its user, and reads only the
/// origins of its own user and of its `read_users`. A principal without a user reads every origin.
public struct AccessPolicy: Sendable {
    public enum PushRight: Sendable, Equatable {
        case origins(Set<ReplicaID>)
        case any

        public func allows(_ origin: ReplicaID) -> Bool {
            switch self {
            case .any: true
            case .origins(let set): set.contains(origin)
            }
        }
    }

    public struct Principal: Sendable, Equatable {
        public var name: String
        public var push: PushRight
        public var pull: Bool
        /// The user the principal acts for; nil for an unscoped principal (a relay, an admin).
        public var user: String?
        /// Other users whose origins it may read.
        public var readUsers: Set<String> = []
        fileprivate var digest: [UInt8]

        /// The users whose origins it may read, or nil for every origin (no user).
        public var readableUsers: Set<String>? { user.map { readUsers.union([$0]) } }
    }

    /// Why a request was refused. `status` is the HTTP status to answer with.
    public struct Denied: Error, Sendable, Equatable, CustomStringConvertible {
        public var status: Int
        public var message: String
        /// The origin refused, when the refusal is about one (a push of an origin the principal
        /// may not push): the client leaves it out and pushes the rest.
        public var origin: ReplicaID? = nil
        public var description: String { message }
    }

    public let principals: [Principal]
    /// True when no tokens file was given: every request acts as one principal with every right
    /// (the server only allows this on a loopback address).
    public let isOpen: Bool
    /// Each principal's position by the SHA-256 of its token (tokens are unique).
    private let byDigest: [[UInt8]: Int]

    public static let tokenLengthMin = 16
    public static let tokenLengthMax = Wire.tokenLengthMax
    /// A hub may hold a principal per replica: about 150 bytes each, so some 200,000.
    public static let fileBytesMax = 32 << 20
    public static let userLengthMax = 64
    /// The fields a principal may have: a misspelt right (`"read_user"`) is an error, never ignored.
    static let principalKeys: Set<String> = ["name", "token", "push", "pull", "user", "read_users", "comment"]

    /// A user name: 1 to 64 of a-z, A-Z, 0-9, '.', '_', '-', '@' (printable anywhere, never markup).
    public static func isValidUser(_ u: String) -> Bool {
        !u.isEmpty && u.utf8.count <= userLengthMax && u.utf8.allSatisfy {
            ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D || $0 == 0x40
        }
    }

    /// True when some principal belongs to a user (the server then keeps who owns each origin).
    public var isScoped: Bool { principals.contains { $0.user != nil } }

    /// The policy of a server without tokens: one principal, `local`, that may pull and push anything.
    public static let open = AccessPolicy(principals: [Principal(name: "local", push: .any, pull: true, user: nil, digest: [])], isOpen: true)

    private init(principals: [Principal], isOpen: Bool) {
        self.principals = principals
        self.isOpen = isOpen
        var index: [[UInt8]: Int] = [:]
        for (i, p) in principals.enumerated() where !isOpen { index[p.digest] = i }
        byDigest = index
    }

    /// Reads a tokens file.
    /// - Throws: `PolicyError` naming the file and the principal and field that are wrong.
    public static func load(path: String) throws -> AccessPolicy {
        guard let data = FileManager.default.contents(atPath: path) else { throw PolicyError("\(path): cannot read the tokens file") }
        guard data.count <= fileBytesMax else { throw PolicyError("\(path): the tokens file is larger than \(fileBytesMax) bytes") }
        return try AccessPolicy(json: data, source: path)
    }

    public init(json: Data, source: String = "tokens") throws {
        let root: Any
        do { root = try JSONSerialization.jsonObject(with: json) } catch {
            throw PolicyError("\(source): not valid JSON (\(error.localizedDescription))")
        }
        guard let obj = root as? [String: Any], let list = obj["principals"] as? [Any] else {
            throw PolicyError("\(source): expected an object with a \"principals\" array")
        }
        guard !list.isEmpty else { throw PolicyError("\(source): \"principals\" is empty; nobody could connect") }
        var out: [Principal] = []
        var names = Set<String>()
        var digests = Set<[UInt8]>()
        for (i, item) in list.enumerated() {
            let at = "\(source): principals[\(i)]"
            guard let p = item as? [String: Any] else { throw PolicyError("\(at) is not an object") }
            guard let name = p["name"] as? String, !name.isEmpty, name.count <= 128 else {
                throw PolicyError("\(at).name: needs a name of 1 to 128 characters")
            }
            guard names.insert(name).inserted else { throw PolicyError("\(at).name: \"\(name)\" is used twice") }
            guard let token = p["token"] as? String else { throw PolicyError("\(at).token: missing (principal \"\(name)\")") }
            guard token.utf8.count >= Self.tokenLengthMin, token.utf8.count <= Self.tokenLengthMax,
                  token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw PolicyError("\(at).token: needs \(Self.tokenLengthMin) to \(Self.tokenLengthMax) printable ASCII characters without spaces (principal \"\(name)\")")
            }
            let digest = Array(SHA256.hash(data: Array(token.utf8)))
            guard digests.insert(digest).inserted else { throw PolicyError("\(at).token: the same token is given to two principals") }
            let push: PushRight
            switch p["push"] {
            case nil: push = .origins([])
            case let s as String where s == "*": push = .any
            case let ids as [Any]:
                var set = Set<ReplicaID>()
                for (j, v) in ids.enumerated() {
                    guard let text = v as? String, let id = ReplicaID(text) else {
                        throw PolicyError("\(at).push[\(j)]: not a replica id (a UUID, as `evctl status` prints it)")
                    }
                    set.insert(id)
                }
                push = .origins(set)
            default:
                throw PolicyError("\(at).push: expected a list of replica ids or \"*\"")
            }
            let pull: Bool
            switch p["pull"] {
            case nil: pull = false
            case let b as Bool: pull = b
            default: throw PolicyError("\(at).pull: expected true or false")
            }
            var user: String?
            switch p["user"] {
            case nil: user = nil
            case let u as String where Self.isValidUser(u): user = u
            default: throw PolicyError("\(at).user: expected a user name of 1 to \(Self.userLengthMax) characters a-z, A-Z, 0-9, '.', '_', '-', '@' (principal \"\(name)\")")
            }
            var readUsers = Set<String>()
            switch p["read_users"] {
            case nil: break
            case let list as [Any]:
                guard user != nil else { throw PolicyError("\(at).read_users: needs \"user\" too (a principal without a user already reads every origin; principal \"\(name)\")") }
                for (j, v) in list.enumerated() {
                    guard let u = v as? String, Self.isValidUser(u) else {
                        throw PolicyError("\(at).read_users[\(j)]: expected a user name of 1 to \(Self.userLengthMax) characters a-z, A-Z, 0-9, '.', '_', '-', '@'")
                    }
                    readUsers.insert(u)
                }
            default: throw PolicyError("\(at).read_users: expected a list of user names")
            }
            for key in p.keys where !Self.principalKeys.contains(key) {
                throw PolicyError("\(at): unknown field \"\(key.prefix(40))\" (principal \"\(name)\"; expected \(Self.principalKeys.sorted().joined(separator: ", ")))")
            }
            out.append(Principal(name: name, push: push, pull: pull, user: user, readUsers: readUsers, digest: digest))
        }
        self.init(principals: out, isOpen: false)
    }

    /// The principal an `Authorization` header belongs to.
    /// - Returns: the principal, or `Denied` with status 401 when the header is missing,
    ///   malformed or names no principal. The message never says which part was wrong beyond that.
    public func authenticate(authorization: String?) -> Result<Principal, Denied> {
        if isOpen { return .success(principals[0]) }
        guard let header = authorization else {
            return .failure(Denied(status: 401, message: "this server needs a bearer token (pass --token or set EVCTL_TOKEN)"))
        }
        let prefix = "Bearer "
        guard header.utf8.count <= Self.tokenLengthMax + prefix.utf8.count, header.hasPrefix(prefix) else {
            return .failure(Denied(status: 401, message: "the Authorization header must be \"Bearer <token>\""))
        }
        // Looked up by the SHA-256 of the presented token, never by the token: how long the lookup
        // takes depends on that digest only, which tells nothing of any principal's token. One
        // lookup whatever the number of principals (a hub may have one per replica).
        let presented = Array(SHA256.hash(data: Array(header.utf8.dropFirst(prefix.utf8.count))))
        guard let found = byDigest[presented] else { return .failure(Denied(status: 401, message: "the token is not valid for this server")) }
        return .success(principals[found])
    }

    /// Checks that `principal` may pull.
    public static func checkPull(_ principal: Principal) -> Denied? {
        principal.pull ? nil : Denied(status: 403, message: "principal \"\(principal.name)\" may not pull from this server")
    }

    /// Checks that `principal` may push frames of every one of `origins`. A share's log is its
    /// writer's (`shareWriter`: the replica whose key signs its frames): a principal that may
    /// push that replica's origin may push the logs its key signs (its sealed logs, and the
    /// membership logs of the shares it administers).
    public static func checkPush(_ principal: Principal, origins: some Sequence<ReplicaID>,
                                 shareWriter: (ReplicaID) -> ReplicaID? = { _ in nil }) -> Denied? {
        for o in origins where !principal.push.allows(o) && !(shareWriter(o).map(principal.push.allows) ?? false) {
            return Denied(status: 403, message: "principal \"\(principal.name)\" may not push frames of origin \(o); nothing was written", origin: o)
        }
        return nil
    }
}

/// A tokens file that cannot be used.
public struct PolicyError: Error, CustomStringConvertible, Sendable {
    public var message: String
    init(_ m: String) { message = m }
    public var description: String { message }
}
