import CFuzzDriver
import Domain
import EventLog
import Foundation
import Logbook

/// NDJSON mutations, the input of `evctl append` and `appendNDJSON`: any bytes, line by line,
/// parse to a mutation or an `InputError`, never a trap; a mutation parsed writes back as a
/// line that parses to the same mutation; and the whole input appended through the door lands
/// entirely (one event per line that is not blank, less duplicates) or fails at the first line
/// the parser refuses, with the log and its projection left as they were (for a quarter of the
/// inputs: see below).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: count)
    // Lines as `LineReader` cuts them: at LF, a CR before it dropped, numbered from 1.
    var lines: [ArraySlice<UInt8>] = []
    var start = 0
    for i in 0...count where i == count || bytes[i] == 0x0A {
        if i == count && start == count { break }
        var end = i
        if end > start && bytes[end - 1] == 0x0D { end -= 1 }
        lines.append(ArraySlice(bytes[start..<end]))
        start = i + 1
    }
    var firstBad: Int?
    var mutations = 0
    for (n, line) in lines.enumerated() {
        if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
        let parsed: Result<Mutation, InputError> = line.withUnsafeBytes { b in
            Result { () throws(InputError) in try MutationParser.parse(b, lineNumber: n + 1) }
        }
        switch parsed {
        case .success(let m):
            mutations += 1
            let again = Result { () throws(InputError) in try MutationParser.parse(NDJSONLine.of(m), lineNumber: n + 1) }
            guard case .success(let m2) = again else { preconditionFailure("a parsed mutation does not parse when written back: \(again)") }
            precondition(m2 == m, "a parsed mutation reads back as another: \(m) vs \(m2)")
        case .failure(let e):
            precondition(e.line == n + 1, "an error names line \(e.line), not \(n + 1)")
            if firstBad == nil { firstBad = n + 1 }
        }
    }
    // The door costs a durable append (or a rollback) per input: a quarter of the inputs, picked
    // by their bytes (the same input always takes the same path), keeps the parser's rate up.
    if bytes.reduce(UInt32(count), { $0 &* 31 &+ UInt32($1) }) % 4 == 0 {
        Door.append(Array(bytes), lines: mutations, firstBad: firstBad)
    }
    return 0
}

/// A mutation as one NDJSON line, every key written (the parser's own keys, JSON escapes).
enum NDJSONLine {
    static func of(_ m: Mutation) -> String {
        var s = "{\"entity\":\(quoted(m.entity.name)),\"op\":\(quoted(m.op.name)),\"id\":\(quoted(m.entityID.uuidString.lowercased()))"
        s += ",\"fields\":{" + m.fields.map { quoted($0.name) + ":" + value($0.value) }.joined(separator: ",") + "}"
        if let e = m.eventID { s += ",\"event_id\":" + quoted(e.uuidString.lowercased()) }
        if let b = m.base { s += ",\"base\":\(b.rawValue)" }
        if let a = m.actor { s += ",\"actor\":" + quoted(a) }
        return s + "}"
    }

    static func value(_ v: FieldValue) -> String {
        switch v {
        case .null: "null"
        case .integer(let i): String(i)
        case .real(let d): d.description  // shortest text that reads back as the same double
        case .text(let t): quoted(t)
        case .boolean(let b): b ? "true" : "false"
        }
    }

    static func quoted(_ t: String) -> String {
        var s = "\""
        for u in t.unicodeScalars {
            switch u {
            case "\"": s += "\\\""
            case "\\": s += "\\\\"
            case _ where u.value < 0x20: s += String(format: "\\u%04x", u.value)
            default: s.unicodeScalars.append(u)
            }
        }
        return s + "\""
    }
}

/// One store for the whole run, appended to through the public door.
enum Door {
    nonisolated(unsafe) static var writer: LogbookWriter?
    static let dir = NSTemporaryDirectory() + "logbook-fuzz-ndjson-\(getpid())"

    static func append(_ input: [UInt8], lines: Int, firstBad: Int?) {
        if writer == nil {
            try? FileManager.default.removeItem(atPath: dir)
            writer = try! LogbookWriter.open(at: dir + "/store", creating: true)
        }
        let w = writer!
        let file = dir + "/input.ndjson"
        precondition(FileManager.default.createFile(atPath: file, contents: Data(input)))
        let fd = open(file, O_RDONLY)
        precondition(fd >= 0)
        defer { close(fd) }
        let before = try! w.reader.cursor()
        let itemsBefore = try! w.reader.items().count
        let outcome = Result { try w.write { try $0.appendNDJSON(from: fd, name: "input.ndjson") } }
        switch outcome {
        case .success(let (r, projectionFailure)):
            precondition(firstBad == nil, "input with a bad line at \(firstBad!) was appended")
            precondition(projectionFailure == nil, "appended but not projected: \(projectionFailure!)")
            precondition(r.appended + r.duplicateCount == lines, "\(lines) lines, \(r.appended) appended and \(r.duplicateCount) duplicates")
        case .failure(let error):
            let e = error as? LogbookError
            if let bad = firstBad, let input = e?.underlying as? InputError {
                precondition(input.line == bad, "the append reports line \(input.line), the first bad line is \(bad)")
            }
            precondition(firstBad != nil || e?.code == .invalidInput, "an input the parser takes failed otherwise: \(error)")
            precondition(try! w.reader.cursor() == before, "a refused append moved the cursor")
            precondition(try! w.reader.items().count == itemsBefore, "a refused append changed the projection")
        }
    }
}

/// The executable's entry (SwiftPM links `main` to `FuzzNDJSON_main`): libFuzzer's driver.
@_cdecl("FuzzNDJSON_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    logbook_fuzz_main(argc, argv) { data, count in data.map { fuzz($0, count) } ?? 0 }
}
