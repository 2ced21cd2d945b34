import Foundation
import Testing
@testable import EventLog

/// `LZ4Codec.decompress` writes into a buffer kept from the frame before (cut or grown to the new
/// frame's size, its old bytes overwritten) or into a new one left uninitialized until liblz4
/// fills it: whatever the buffer held before, the result is the frame's bytes and nothing else, a
/// copy a caller kept of an earlier result is never changed, and a frame that does not decode
/// leaves the next one to decode as well as ever.
@Suite struct LZ4CodecTests {
    /// `n` bytes that compress (words, some repeated) with a seeded run that does not.
    static func plain(_ n: Int, seed: UInt64) -> [UInt8] {
        var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
        var out: [UInt8] = []
        out.reserveCapacity(n)
        let words = ["task", "inbox", "project", "tag", "due", "2026-11-30", "done", "next"].map { Array($0.utf8) }
        while out.count < n {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            if state >> 60 == 0 {
                for _ in 0..<64 { out.append(UInt8(truncatingIfNeeded: state >> 24)); state = state &* 31 &+ 7 }
            } else {
                out.append(contentsOf: words[Int(state >> 33) % words.count])
                out.append(0x20)
            }
        }
        return Array(out.prefix(n))
    }

    static func frame(_ plain: [UInt8], _ codec: LZ4Codec) -> [UInt8] {
        var frame: [UInt8] = []
        _ = plain.withUnsafeBytes { codec.compress($0, into: &frame) }
        return frame
    }

    /// Sizes that take every way: a first frame into an empty buffer, smaller ones (the buffer
    /// cut), a larger one within its room (grown), one past twice the room's need (a new buffer),
    /// one much smaller (room past twice its need: a new buffer), the same size twice, and a
    /// buffer cut, then grown within its room by more than the block of zeros it is grown from.
    static let sizes = [100_000, 60_000, 55_000, 66_000, 140_000, 150_000, 1, 70_000, 70_000, 300_000, 5_000,
                        2_000_000, 1_150_000, 2_240_000]

    @Test func everyFrameReadsAsItsBytesWhateverTheBufferHeld() throws {
        // The last step grows a kept buffer by more than one block of zeros.
        #expect(2_240_000 - 1_150_000 > LZ4Codec.zeros.count && 2_000_000 * 9 / 8 >= 2_240_000)
        let codec = LZ4Codec()
        var out: [UInt8] = []
        for (k, n) in Self.sizes.enumerated() {
            let bytes = Self.plain(n, seed: UInt64(k))
            let frame = Self.frame(bytes, codec)
            try frame.withUnsafeBytes { try codec.decompress($0, expected: n, into: &out) }
            #expect(out == bytes, "frame \(k) of \(n) bytes")
        }
    }

    @Test func aCopyKeptOfAnEarlierResultIsNeverChanged() throws {
        let codec = LZ4Codec()
        var out: [UInt8] = []
        var kept: [(copy: [UInt8], bytes: [UInt8])] = []
        for (k, n) in Self.sizes.enumerated() {
            let bytes = Self.plain(n, seed: UInt64(100 + k))
            let frame = Self.frame(bytes, codec)
            try frame.withUnsafeBytes { try codec.decompress($0, expected: n, into: &out) }
            kept.append((out, bytes))  // shares the buffer until the next frame is decompressed
        }
        for (k, pair) in kept.enumerated() { #expect(pair.copy == pair.bytes, "kept result \(k)") }
    }

    @Test func aFrameThatDoesNotDecodeLeavesTheNextOneWhole() throws {
        let codec = LZ4Codec()
        let first = Self.plain(80_000, seed: 1), second = Self.plain(78_000, seed: 2), third = Self.plain(200, seed: 3)
        var out: [UInt8] = []
        try Self.frame(first, codec).withUnsafeBytes { try codec.decompress($0, expected: first.count, into: &out) }
        // Into the kept buffer, and into a new one: cut short and with bytes after it (errors),
        // and damaged inside a block (an error, or other bytes). The next frame decodes as if
        // none had come.
        for start in [[UInt8](), out] {
            var damaged = Self.frame(second, codec)
            damaged[damaged.count / 2] ^= 0xFF
            let bad: [(bytes: [UInt8], mustFail: Bool)] = [(Array(Self.frame(second, codec).dropLast(9)), true),
                                                           (Self.frame(second, codec) + [1, 2, 3], true), (damaged, false)]
            for (bytes, mustFail) in bad {
                out = start
                var failed = false
                do {
                    try bytes.withUnsafeBytes { try codec.decompress($0, expected: second.count, into: &out) }
                } catch {
                    failed = true
                }
                #expect(failed || !mustFail)
                // A flipped byte inside a block may still decode (LZ4 has no checksum here; the
                // frame's CRC-32C and hash are checked before it): then its bytes differ.
                if !failed { #expect(out != second) }
                try Self.frame(third, codec).withUnsafeBytes { try codec.decompress($0, expected: third.count, into: &out) }
                #expect(out == third)
                try Self.frame(second, codec).withUnsafeBytes { try codec.decompress($0, expected: second.count, into: &out) }
                #expect(out == second)
            }
        }
    }
}
