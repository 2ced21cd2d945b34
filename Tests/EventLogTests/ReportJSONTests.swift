import Foundation
import Testing
@testable import EventLog

/// `--json` outputs are `Encodable` reports written by `ReportJSON`: keys in declaration order,
/// snake_case, every key present (nil as null), the one writer's escaping.
@Suite struct ReportJSONTests {
    struct Inner: Encodable {
        var mountPoint: String
        var bytes: UInt64
    }
    struct Report: Encodable {
        var replicaID: String
        var lastSeq: Int
        var seconds: Double
        var ratio: Double
        var ok: Bool
        var missing: String?
        var inner: Inner?
        var none: Inner?
        var list: [Inner]
        var names: [String?]
        var tricky: String
    }

    @Test func aReportIsWrittenInDeclarationOrderWithEveryKey() throws {
        let r = Report(replicaID: "r1", lastSeq: -3, seconds: 2, ratio: 0.25, ok: true, missing: nil,
                       inner: Inner(mountPoint: "/", bytes: 7), none: nil, list: [Inner(mountPoint: "/a", bytes: 1)],
                       names: ["x", nil], tricky: "quote \" back \\ nl \n bell \u{7} del \u{7F} bidi \u{202E}")
        let text = try ReportJSON.string(r)
        #expect(text == #"{"replica_id":"r1","last_seq":-3,"seconds":2.0,"ratio":0.25,"ok":true,"missing":null,"#
            + #""inner":{"mount_point":"/","bytes":7},"none":null,"list":[{"mount_point":"/a","bytes":1}],"names":["x",null],"#
            + #""tricky":"quote \" back \\ nl \n bell \u0007 del \u007f bidi \u202e"}"#)
        // What it writes is JSON.
        #expect(try JSONSerialization.jsonObject(with: Data(text.utf8)) is [String: Any])
    }

    @Test func namesBecomeSnakeCase() {
        #expect(ReportJSON.snakeCase("replicaID") == "replica_id")
        #expect(ReportJSON.snakeCase("bytesOnDisk") == "bytes_on_disk")
        #expect(ReportJSON.snakeCase("sha256Digest") == "sha256_digest")
        #expect(ReportJSON.snakeCase("ok") == "ok")
        #expect(ReportJSON.snakeCase("URL") == "url")
    }

    @Test func numbersThatJSONCannotHoldAreNull() throws {
        struct N: Encodable { var a: Double; var b: Double }
        #expect(try ReportJSON.string(N(a: .nan, b: .infinity)) == #"{"a":null,"b":null}"#)
    }

    /// Maps keyed by data keep their keys verbatim and in order; fixed decimals and JSON text
    /// already written go in as they are.
    @Test func mapsFixedNumbersAndRawValues() throws {
        struct Origin: Encodable { var floorSeq: UInt64 }
        struct R: Encodable {
            var origins: ReportJSON.Map<Origin>
            var seconds: ReportJSON.Fixed
            var kept: ReportJSON.Raw
        }
        let r = R(origins: .init([("b-Origin", Origin(floorSeq: 2)), ("a", Origin(floorSeq: 0))]),
                  seconds: .init(1.23456, decimals: 3), kept: .init(#"{"x":[1,"y"]}"#))
        #expect(try ReportJSON.string(r) == #"{"origins":{"b-Origin":{"floor_seq":2},"a":{"floor_seq":0}},"seconds":1.235,"kept":{"x":[1,"y"]}}"#)
    }
}
