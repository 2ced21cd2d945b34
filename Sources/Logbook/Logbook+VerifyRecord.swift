import EventLog
import Foundation

/// The outcome of the last `verify` of a store (`<store>/last-verify.json`), for status pages:
/// when, whether the log was clean, and a one-line summary. Written by `Logbook.verify`; a file
/// that does not decode is reported as absent, never shown as a result.
public struct VerifyRecord: Sendable, Codable, Equatable {
    /// ISO 8601 time the verify finished.
    public var at: String
    public var clean: Bool
    /// Whether the projection was rebuilt aside and compared too.
    public var deep: Bool
    public var summary: String

    static let fileName = StoreLayout.Entry.lastVerify.rawValue
    /// A record is a few lines; anything larger is not one.
    static let fileBytesMax = 64 << 10
}

extension Logbook {
    /// What the last `verify` found, if one was recorded.
    package func lastVerify() -> VerifyRecord? {
        let path = store.layout.lastVerify
        guard let attrs = try? FileManager.default.attributesOfItem(atPath: path),
              let size = attrs[.size] as? Int, size <= VerifyRecord.fileBytesMax,
              let data = FileManager.default.contents(atPath: path) else { return nil }
        return try? JSONDecoder().decode(VerifyRecord.self, from: data)
    }

    /// Records a verify's outcome; a store we may not write keeps its last record.
    func recordVerify(_ report: VerifyReport, deep: Bool, difference: String?) {
        var summary = "\(report.events) events in \(report.frames) frames of \(report.origins) origins"
        if let p = report.problems.first {
            summary += "; \(report.problems.count) problem\(report.problems.count == 1 ? "" : "s"), first: \(p)"
        } else if deep {
            summary += difference.map { "; the projection differs from a rebuild: \($0)" } ?? "; the projection matches a rebuild"
        }
        let record = VerifyRecord(at: ISOTime.string(millis: UInt64(max(0, Date().timeIntervalSince1970 * 1000))),
                                  clean: report.isClean && difference == nil, deep: deep, summary: summary)
        guard FileManager.default.isWritableFile(atPath: store.path), let data = try? JSONEncoder().encode(record) else { return }
        try? DurableFile.write(Array(data), to: store.layout.lastVerify, op: "record verify")
    }
}
