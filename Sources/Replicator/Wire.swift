import EventLog
import Foundation

/// What the client and the server agree on at the HTTP boundary (docs/PROTOCOL.md): the one place
/// both read the names from, so the client needs no server code to speak the protocol.
package enum Wire {
    /// The Content-Type of a page of frames, pulled or pushed.
    public static let pageContentType = "application/x-logbook-page"
    /// The header carrying a snapshot's SHA-256 (hex).
    public static let snapshotDigestHeader = "Logbook-Snapshot-SHA256"
    /// The header carrying the cursor a snapshot stands for.
    public static let snapshotCursorHeader = "Logbook-Snapshot-Cursor"
    /// The longest bearer token either side accepts, in bytes.
    public static let tokenLengthMax = 512

    /// True for a host name or address of this machine (`localhost`, `127.x.y.z`, `::1`): where a
    /// token may travel over plain http and a server may listen without tokens.
    public static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased()
        if h == "localhost" || h == "::1" || h == "[::1]" { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }
}

extension Wire {
    /// `GET /v1/cursor`'s answer: `{"replica_id": …, "cursor": …}`.
    package struct CursorAnswer: Codable, Sendable, Equatable {
        package var replicaID: String
        package var cursor: String
        package init(replicaID: String, cursor: String) {
            self.replicaID = replicaID
            self.cursor = cursor
        }
        enum CodingKeys: String, CodingKey {
            case replicaID = "replica_id", cursor
        }
    }

    /// `POST /v1/frames`'s answer: what the push added, and the server's cursor after it. Read
    /// leniently (a count that is missing or not an integer reads as 0); the cursor is required.
    package struct PushAnswer: Codable, Sendable, Equatable {
        package var frames: Int
        package var events: Int
        package var alreadyHeld: Int
        package var incomplete: Int
        package var cursor: String
        package init(frames: Int, events: Int, alreadyHeld: Int, incomplete: Int, cursor: String) {
            self.frames = frames
            self.events = events
            self.alreadyHeld = alreadyHeld
            self.incomplete = incomplete
            self.cursor = cursor
        }
        enum CodingKeys: String, CodingKey {
            case frames, events, alreadyHeld = "already_held", incomplete, cursor
        }
        package init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            func count(_ key: CodingKeys) -> Int { ((try? c.decodeIfPresent(Int.self, forKey: key)) ?? nil) ?? 0 }
            frames = count(.frames)
            events = count(.events)
            alreadyHeld = count(.alreadyHeld)
            incomplete = count(.incomplete)
            cursor = try c.decode(String.self, forKey: .cursor)
        }
    }

    /// Every refusal's answer: `{"error": message, "code": code, "origin": …, "seqs": [first, last]}`,
    /// the keys after `error` present only when known. Read leniently: each field that is missing or
    /// of another shape reads as nil (`error` as empty); a body that is no JSON object is no answer.
    package struct FailureAnswer: Codable, Sendable, Equatable {
        package var error: String
        package var code: String?
        package var origin: String?
        package var seqs: [UInt64]?
        package init(error: String, code: String? = nil, origin: String? = nil, seqs: [UInt64]? = nil) {
            self.error = error
            self.code = code
            self.origin = origin
            self.seqs = seqs
        }
        enum CodingKeys: String, CodingKey { case error, code, origin, seqs }
        package init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            error = ((try? c.decodeIfPresent(String.self, forKey: .error)) ?? nil) ?? ""
            code = (try? c.decodeIfPresent(String.self, forKey: .code)) ?? nil
            origin = (try? c.decodeIfPresent(String.self, forKey: .origin)) ?? nil
            seqs = (try? c.decodeIfPresent([UInt64].self, forKey: .seqs)) ?? nil
        }
        /// Absent keys are left out, not written as null.
        package func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(error, forKey: .error)
            if let code { try c.encode(code, forKey: .code) }
            if let origin { try c.encode(origin, forKey: .origin) }
            if let seqs { try c.encode(seqs, forKey: .seqs) }
        }
    }

    /// An answer's JSON text, by the project's one JSON writer (ReportJSON).
    package static func json<T: Encodable>(_ answer: T) -> String {
        do { return try ReportJSON.string(answer) } catch {
            // Answers hold strings and integers only; kept total all the same.
            return "{\"error\":" + JSON.string("the server could not write its answer") + "}"
        }
    }

    /// An answer read from a body: nil when the body is not that answer.
    package static func decode<T: Decodable>(_ type: T.Type, from body: [UInt8]) -> T? {
        try? JSONDecoder().decode(T.self, from: Data(body))
    }
}
