import EventLog
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Reads lines from a file descriptor through a bounded buffer, so input of any size streams
/// in constant memory. Lines longer than `lineBytesMax` are refused with their line number.
/// Not thread-safe.
package final class LineReader {
    private let fd: Int32
    private let name: String
    private let lineBytesMax: Int
    /// Allocated once, freed with the reader: an array here was counted up and down around each
    /// use (twice a line), the reader being a class whose property `body` might reach. At least
    /// twice `lineBytesMax`, so a read always has room once a line's start is moved to the front.
    private let buffer: UnsafeMutableRawBufferPointer
    // Unchecked: a reader is used by one thread; `body` and `willWait`, called within `next`,
    // only read `lineNumber` and `bytesRead`, never while they change. The checks at each
    // access were a hundredth of a bulk append's time.
    @exclusivity(unchecked) private var start = 0
    @exclusivity(unchecked) private var end = 0
    @exclusivity(unchecked) private var eof = false
    /// 1-based number of the line last returned.
    @exclusivity(unchecked) public private(set) var lineNumber = 0
    /// Bytes read so far.
    @exclusivity(unchecked) public private(set) var bytesRead = 0
    /// Asked before each read, and every `stopCheckMs` while a read would wait (a pipe with
    /// nothing to read): once it answers true, the input ends here. Nil: reads simply block.
    @exclusivity(unchecked) package var stopped: (@Sendable () -> Bool)?
    static let stopCheckMs: Int32 = 100

    public init(fd: Int32, name: String, lineBytesMax: Int = MutationParser.lineBytesMax) {
        self.fd = fd
        self.name = name
        self.lineBytesMax = lineBytesMax
        buffer = .allocate(byteCount: max(1 << 20, lineBytesMax * 2), alignment: 16)
        buffer.initializeMemory(as: UInt8.self, repeating: 0)
    }

    deinit { buffer.deallocate() }

    /// Calls `body` with the next line (without its newline or a trailing CR); returns false at end of input.
    /// - Parameter willWait: called when a read would wait (a pipe with nothing to read yet; only
    ///   looked for when `stopped` is set), before waiting: a caller holding lines back hands
    ///   them on, so a bad line among them is not kept waiting on input that may not come.
    public func next(willWait: () -> Void = {}, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool {
        while true {
            let base = UnsafeRawPointer(buffer.baseAddress!)
            if end > start, let hit = memchr(base + start, 0x0A, end - start) {
                let nl = base.distance(to: UnsafeRawPointer(hit))
                lineNumber += 1
                var lineEnd = nl
                if lineEnd > start && buffer[lineEnd - 1] == 0x0D { lineEnd -= 1 }
                if lineEnd - start > lineBytesMax { throw tooLong() }
                try body(UnsafeRawBufferPointer(rebasing: buffer[start..<lineEnd]))
                start = nl + 1
                return true
            }
            // What is held of the line so far, less a CR it ends in: a line of `lineBytesMax`
            // bytes and its CRLF, cut by a read between the two, is not too long.
            if end - start - (end > start && buffer[end - 1] == 0x0D ? 1 : 0) > lineBytesMax {
                lineNumber += 1
                throw tooLong()
            }
            if eof {
                guard end > start else { return false }
                lineNumber += 1
                var lineEnd = end
                if buffer[lineEnd - 1] == 0x0D { lineEnd -= 1 }
                try body(UnsafeRawBufferPointer(rebasing: buffer[start..<lineEnd]))
                start = end
                return true
            }
            if start > 0 {
                if end > start { memmove(buffer.baseAddress!, buffer.baseAddress! + start, end - start) }
                end -= start
                start = 0
            }
            if let stopped {
                guard try waitReadable(unless: stopped, willWait: willWait) else { return false }
            }
            let n = read(fd, buffer.baseAddress! + end, buffer.count - end)
            if n < 0 {
                if errno == EINTR { continue }
                throw LogError.io("read input", "read failed", file: name, offset: bytesRead, errno: errno)
            }
            if n == 0 { eof = true }
            end += n
            bytesRead += n
        }
    }

    /// Waits until `fd` has something to read (or its end, or an error to report), asking
    /// `stopped` in between; false once it answers true.
    private func waitReadable(unless stopped: () -> Bool, willWait: () -> Void) throws -> Bool {
        var timeout: Int32 = 0  // first without waiting: `willWait` only when a read would wait
        while !stopped() {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let r = poll(&p, 1, timeout)
            if r > 0 { return true }  // readable, hung up or failed: the read says which
            if r < 0 && errno != EINTR {
                throw LogError.io("read input", "poll failed", file: name, offset: bytesRead, errno: errno)
            }
            if r == 0 && timeout == 0 { willWait() }
            timeout = Self.stopCheckMs
        }
        return false
    }

    private func tooLong() -> InputError {
        InputError(line: lineNumber, column: nil, field: nil, message: "line is longer than \(lineBytesMax) bytes")
    }
}
