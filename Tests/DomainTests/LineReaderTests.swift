import Domain
import Foundation
import Testing
@testable import EventLog

/// The line reader over a file: every line comes back exactly, whatever the buffer's refills cut
/// (lines straddling them, CRLF endings, a last line with no newline), and a line over the bound
/// is refused with its number, while one at the bound is read.
@Suite struct LineReaderTests {
    /// Writes `bytes` to a new file and returns an open descriptor on it (closed by the caller).
    private func file(_ bytes: [UInt8]) throws -> (Int32, String) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("lines-\(UUID().uuidString)").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let fd = open(path, O_RDONLY)
        #expect(fd >= 0)
        return (fd, path)
    }

    private func readAll(_ reader: LineReader) throws -> [[UInt8]] {
        var out: [[UInt8]] = []
        while try reader.next({ out.append(Array($0)) }) {}
        return out
    }

    @Test func readsEveryLineAcrossRefillsAsWritten() throws {
        // About 3 MiB of lines of 0 to 5,000 bytes: the 1 MiB buffer is refilled, moved and cut
        // mid-line many times. Some end in CRLF (the CR is dropped), the last has no newline.
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(truncatingIfNeeded: state >> 33)
        }
        var expected: [[UInt8]] = []
        var bytes: [UInt8] = []
        while bytes.count < 3 << 20 {
            let n = next() % 5_000
            let line = (0..<n).map { UInt8(0x21 + ($0 + n) % 90) }
            expected.append(line)
            bytes += line
            bytes += next() % 3 == 0 ? [0x0D, 0x0A] : [0x0A]
        }
        expected.append(Array("last, unterminated".utf8))
        bytes += expected.last!
        let (fd, path) = try file(bytes)
        defer { close(fd); unlink(path) }
        let reader = LineReader(fd: fd, name: path, lineBytesMax: 8_000)
        let lines = try readAll(reader)
        #expect(lines.count == expected.count)
        let firstDifference = zip(lines, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        #expect(firstDifference == nil, "line \((firstDifference ?? 0) + 1) differs")
        #expect(reader.lineNumber == expected.count)
        #expect(reader.bytesRead == bytes.count)
        // The end stays the end.
        #expect(try !reader.next { _ in Issue.record("a line after the end") })
    }

    /// A line of exactly the bound and its CRLF, where a read ends between the CR and the LF (the
    /// first read fills the 1 MiB buffer), is read; so is such a line ending the input with its
    /// CR alone.
    @Test func aLineAtTheBoundWhoseCRLFAReadSplitsIsRead() throws {
        let bound = 1_000, bufferBytes = 1 << 20
        var bytes: [UInt8] = []
        var expected: [[UInt8]] = []
        // Lines up to where the long line must start for its CR to be the buffer's last byte.
        let longStart = bufferBytes - (bound + 1)
        while bytes.count < longStart {
            let n = min(99, longStart - bytes.count - 1)
            let line = [UInt8](repeating: 0x6C, count: n)
            expected.append(line)
            bytes += line + [0x0A]
        }
        #expect(bytes.count == longStart)
        let long = [UInt8](repeating: 0x61, count: bound)
        expected += [long, Array("after".utf8), long]
        bytes += long + [0x0D, 0x0A] + Array("after\n".utf8) + long + [0x0D]
        let (fd, path) = try file(bytes)
        defer { close(fd); unlink(path) }
        let reader = LineReader(fd: fd, name: path, lineBytesMax: bound)
        let lines = try readAll(reader)
        #expect(lines.count == expected.count)
        #expect(lines.suffix(3) == expected.suffix(3))
        #expect(zip(lines, expected).allSatisfy { $0 == $1 })
    }

    @Test func aLineAtTheBoundIsReadAndOneOverItIsRefusedWithItsNumber() throws {
        let bound = 1_000
        let atBound = [UInt8](repeating: 0x61, count: bound)
        let over = [UInt8](repeating: 0x62, count: bound + 1)
        let bytes = Array("first\n".utf8) + atBound + [0x0A] + over + [0x0A] + Array("after\n".utf8)
        let (fd, path) = try file(bytes)
        defer { close(fd); unlink(path) }
        let reader = LineReader(fd: fd, name: path, lineBytesMax: bound)
        var lines: [[UInt8]] = []
        #expect(try reader.next { lines.append(Array($0)) })
        #expect(try reader.next { lines.append(Array($0)) })
        #expect(lines == [Array("first".utf8), atBound])
        do {
            _ = try reader.next { lines.append(Array($0)) }
            Issue.record("a line of \(bound + 1) bytes was read under a bound of \(bound)")
        } catch let error as InputError {
            #expect(error.line == 3)
            #expect(error.message.contains("\(bound)"))
        }
        #expect(lines.count == 2)
    }

    @Test func anEmptyFileHasNoLines() throws {
        let (fd, path) = try file([])
        defer { close(fd); unlink(path) }
        let reader = LineReader(fd: fd, name: path)
        #expect(try readAll(reader).isEmpty)
        #expect(reader.lineNumber == 0)
    }
}
