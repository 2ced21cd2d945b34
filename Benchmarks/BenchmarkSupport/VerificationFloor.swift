import CLZ4Bench
import Crypto
import EventLog
import Foundation

/// The least any receiver that keeps Logbook's checks must do to take a log in, measured as one
/// plain loop: read the segment files, check each frame's CRC-32C and SHA-256 link to the frame
/// before it, verify a signed frame's Ed25519 signature (every frame of a signing replica since
/// signed logs), LZ4-decompress its payload, write the frames to a new file, fsync once. Shipping
/// is reported as a ratio to this (issue 9's "verification floor"), measured in the same run.
public enum VerificationFloor {
    /// Seconds to take every segment of `logDirectory` (one origin's `log/<origin>/`) into a
    /// new file under `scratch`; returns the seconds and the frames checked.
    public static func run(logDirectory: String, scratch: String) throws -> (seconds: Double, frames: Int) {
        let names = try FileManager.default.contentsOfDirectory(atPath: logDirectory).filter { $0.hasSuffix(".seg") }.sorted()
        let outPath = scratch + "/floor-\(UUID().uuidString.prefix(6)).frames"
        let out = open(outPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard out >= 0 else { throw FloorError("cannot create \(outPath)") }
        defer { close(out); unlink(outPath) }
        var dctx: OpaquePointer?
        guard LZ4F_isError(LZ4F_createDecompressionContext(&dctx, UInt32(LZ4F_VERSION))) == 0 else { throw FloorError("LZ4F context") }
        defer { LZ4F_freeDecompressionContext(dctx) }
        var raw = [UInt8](repeating: 0, count: 1 << 20)
        var previous = [UInt8](repeating: 0, count: 32)
        var frames = 0
        let t0 = Clock.now()
        for name in names {
            let data = try Data(contentsOf: URL(fileURLWithPath: logDirectory + "/" + name), options: .alwaysMapped)
            try data.withUnsafeBytes { (p: UnsafeRawBufferPointer) in
                var o = 72  // segment header
                if p.count >= 72 { previous = Array(p[32..<64]) }  // the segment's link to the one before
                while o + 96 <= p.count {
                    let stored = Int(p.loadUnaligned(fromByteOffset: o + 56, as: UInt32.self).littleEndian)
                    let rawBytes = Int(p.loadUnaligned(fromByteOffset: o + 36, as: UInt32.self).littleEndian)
                    let total = 96 + stored
                    guard o + total <= p.count else { break }
                    let frame = UnsafeRawBufferPointer(rebasing: p[o..<o + total])
                    var crc = CRC32C()
                    crc.update(UnsafeRawBufferPointer(rebasing: frame[0..<92]))
                    crc.update(UnsafeRawBufferPointer(rebasing: frame[96...]))
                    guard crc.final == frame.loadUnaligned(fromByteOffset: 92, as: UInt32.self).littleEndian else { throw FloorError("crc at \(o)") }
                    guard frame[60..<92].elementsEqual(previous) else { throw FloorError("chain at \(o)") }
                    previous = FrameHash.of(frame).bytes
                    // A signed frame (flags bit 1) ends with its key and signature: the signature
                    // is verified over "LBSG" 1, header bytes 0..<92 and the payload's SHA-256
                    // (docs/FORMAT.md, "Signed frames"). Share frames are not part of this floor.
                    let signed = frame[6] & 2 != 0
                    guard frame[6] & 4 == 0 else { throw FloorError("a share frame at \(o)") }
                    let payloadEnd = total - (signed ? 96 : 0)
                    if signed {
                        var message = Array("LBSG".utf8) + [1]
                        message.append(contentsOf: frame[0..<92])
                        message.append(contentsOf: SHA256.hash(data: UnsafeRawBufferPointer(rebasing: frame[96..<payloadEnd])))
                        guard let key = try? Curve25519.Signing.PublicKey(rawRepresentation: Array(frame[payloadEnd..<payloadEnd + 32])),
                              key.isValidSignature(Array(frame[payloadEnd + 32..<total]), for: message) else { throw FloorError("signature at \(o)") }
                    }
                    if frame[5] == 1 {
                        if raw.count < rawBytes { raw = [UInt8](repeating: 0, count: rawBytes) }
                        var dst = rawBytes, src = payloadEnd - 96
                        let r = raw.withUnsafeMutableBytes { d in
                            LZ4F_decompress(dctx, d.baseAddress, &dst, frame.baseAddress! + 96, &src, nil)
                        }
                        guard LZ4F_isError(r) == 0, dst == rawBytes else { throw FloorError("lz4 at \(o)") }
                    }
                    var done = 0
                    while done < total {
                        let n = write(out, frame.baseAddress! + done, total - done)
                        guard n > 0 else { throw FloorError("write") }
                        done += n
                    }
                    frames += 1
                    o += total
                }
            }
        }
        guard fsync(out) == 0 else { throw FloorError("fsync") }
        return (Clock.now() - t0, frames)
    }

    struct FloorError: Error { let message: String; init(_ m: String) { message = m } }
}

/// The least a reader of the log must do: read the segment files and LZ4-decompress every
/// frame's payload (no checksum, no hash, no decoding of events). Reading is reported as a
/// ratio to this, measured in the same run (issue 29: a raw read alone is not the floor of a
/// compressed log).
public enum ReadFloor {
    /// Seconds to read and decompress every segment of `logDirectory` (`log/<origin>/`), and the frames.
    public static func run(logDirectory: String) throws -> (seconds: Double, frames: Int) {
        let names = try FileManager.default.contentsOfDirectory(atPath: logDirectory).filter { $0.hasSuffix(".seg") }.sorted()
        var dctx: OpaquePointer?
        guard LZ4F_isError(LZ4F_createDecompressionContext(&dctx, UInt32(LZ4F_VERSION))) == 0 else { throw VerificationFloor.FloorError("LZ4F context") }
        defer { LZ4F_freeDecompressionContext(dctx) }
        var raw = [UInt8](repeating: 0, count: 1 << 20)
        var frames = 0
        let t0 = Clock.now()
        for name in names {
            let data = try Data(contentsOf: URL(fileURLWithPath: logDirectory + "/" + name))
            try data.withUnsafeBytes { (p: UnsafeRawBufferPointer) in
                var o = 72  // segment header
                while o + 96 <= p.count {
                    let stored = Int(p.loadUnaligned(fromByteOffset: o + 56, as: UInt32.self).littleEndian)
                    let rawBytes = Int(p.loadUnaligned(fromByteOffset: o + 36, as: UInt32.self).littleEndian)
                    let total = 96 + stored
                    guard o + total <= p.count else { break }
                    if p[o + 5] == 1 {
                        if raw.count < rawBytes { raw = [UInt8](repeating: 0, count: rawBytes) }
                        var dst = rawBytes, src = stored
                        let r = raw.withUnsafeMutableBytes { d in
                            LZ4F_decompress(dctx, d.baseAddress, &dst, p.baseAddress! + o + 96, &src, nil)
                        }
                        guard LZ4F_isError(r) == 0, dst == rawBytes else { throw VerificationFloor.FloorError("lz4 at \(o)") }
                    }
                    frames += 1
                    o += total
                }
            }
        }
        return (Clock.now() - t0, frames)
    }
}
