import EventLog
import Foundation
import Logbook

// What evctl's commands print with --json: one Encodable report type per answer, written by
// ReportJSON (keys in declaration order, snake_case, every key present). The bytes are those the
// commands wrote by hand before; the status, verify, init and snapshot reports sit beside their
// commands.

enum Reports {
    /// Prints a report as one line of JSON.
    static func print<R: Encodable>(_ report: R) {
        Swift.print(line(report))
    }

    /// A report's JSON text. Reports hold strings, numbers and booleans only, so writing one
    /// cannot fail; should a future field fail to encode, the error is printed as a JSON object.
    static func line<R: Encodable>(_ report: R) -> String {
        do { return try ReportJSON.string(report) } catch { return "{\"error\":" + JSON.string("\(error)") + "}" }
    }
}

/// `pull`/`push --json`: one transfer.
struct TransferReport: Encodable {
    var frames: Int
    var events: Int
    var alreadyHeld: Int
    var pages: Int
    var bytes: Int
    var retries: Int
    var peerCursor: String
    var bootstrapped: Bool
    /// Push: the origins the peer refused, with its message (their frames stay here).
    var refused: ReportJSON.Map<String>
    /// Push: how far the peer holds this store's own log, when past where it ends here (absent
    /// otherwise): this store lost that tail.
    var peerHoldsOwnLogTo: UInt64?
    /// Pull: why this store refused the peer's frames of its own origin (absent when it did
    /// not); everything else was pulled.
    var ownLogRefused: String?
}

/// `import --json`: frames received from a bundle, and each origin's tip after.
struct ReceiveReport: Encodable {
    var frames: Int
    var events: Int
    var alreadyHeld: Int
    var origins: ReportJSON.Map<UInt64>
}

/// `export --json`.
struct ExportReport: Encodable {
    var frames: Int
    var events: Int
    var bytes: Int
    var cursor: String
}

/// `sync --json`.
struct SyncReport: Encodable {
    var pulledEvents: Int
    var pushedEvents: Int
    var cursor: String
    /// The origins the peer refused to take from this principal, with its message.
    var refused: ReportJSON.Map<String>
    /// As `TransferReport`'s, for the pull and the push.
    var peerHoldsOwnLogTo: UInt64?
    var ownLogRefused: String?
}

/// `follow --json`: one line per exchange that moved events.
struct ExchangeReport: Encodable {
    var pulledEvents: Int
    var pushedEvents: Int
    var time: String
    /// The origins the server refused that this exchange is the first to leave out (origin →
    /// the server's message); absent when none.
    var refused: [String: String]?
    /// Why this store refused the server's frames of its own origin, when this exchange is the
    /// first to (a fork of its own log); absent otherwise.
    var ownLogRefused: String? = nil
}

/// `conflicts --json`: one line per conflict; the values are JSON as the log keeps them.
struct ConflictReport: Encodable {
    var id: Int64
    var entity: String
    var entityID: String
    var field: String
    var winnerValue: ReportJSON.Raw
    var loserValue: ReportJSON.Raw
    var winnerEventID: String
    var loserEventID: String
    var winnerOrigin: String
    var loserOrigin: String
    var detectedAt: String
    var resolvedBy: String?

    init(_ c: ConflictRow) {
        id = c.id
        entity = c.entity
        entityID = c.entityID
        field = c.field
        winnerValue = ReportJSON.Raw(c.winnerValue)
        loserValue = ReportJSON.Raw(c.loserValue)
        winnerEventID = c.winnerEventID
        loserEventID = c.loserEventID
        winnerOrigin = c.winnerOrigin
        loserOrigin = c.loserOrigin
        detectedAt = c.detectedAt
        resolvedBy = c.resolvedBy
    }
}

/// `anomalies --json`: one line per sync anomaly.
struct AnomalyReport: Encodable {
    var id: Int64
    var kind: String
    var entity: String
    var entityID: String
    var itemID: String?
    var originalOccurrenceDate: String?
    var attemptedOp: String
    var eventID: String
    var winnerID: String?
    var correlationID: String
    var detectedAt: String
    var details: String?

    init(_ a: AnomalyRow) {
        id = a.id
        kind = a.kind
        entity = a.entity
        entityID = a.entityID
        itemID = a.itemID
        originalOccurrenceDate = a.originalOccurrenceDate
        attemptedOp = a.attemptedOp
        eventID = a.eventID
        winnerID = a.otherID
        correlationID = a.correlationID
        detectedAt = a.detectedAt
        details = a.details
    }
}

/// `resolve --json`.
struct ResolutionReport: Encodable {
    var conflict: Int64
    var kept: ReportJSON.Raw
    var seq: UInt64?
}

/// `append --json`.
struct AppendReport: Encodable {
    var appended: Int
    var firstSeq: UInt64?
    var lastSeq: UInt64?
    var duplicates: Int
    var origin: String
    var projected: Bool
}

/// `replay --json`.
struct ReplayReport: Encodable {
    var events: Int
    var rebuilt: Bool
    var seconds: ReportJSON.Fixed
}

/// `cursor --json`: the token and each origin's seq.
struct CursorReport: Encodable {
    var token: String
    var origins: ReportJSON.Map<UInt64>
}

/// `compact --json`.
struct CompactReport: Encodable {
    struct Origin: Encodable {
        var segments: Int
        var bytes: Int
        var floorSeq: UInt64
    }
    var segments: Int
    var bytes: Int
    var origins: ReportJSON.Map<Origin>
}

/// `purge --json`: rows purged per table.
struct PurgeReport: Encodable {
    var purged: ReportJSON.Map<Int>
    var deletedBefore: String?
    var retainDays: Int?
}
