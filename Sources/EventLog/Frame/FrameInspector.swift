import Foundation

/// Reads one frame's bytes from anywhere (a bundle, a page, a file a user points at) with every
/// check the log makes: header, size, checksum, every event record. For tools and fuzzing.
public enum FrameInspector {
    /// The frame's header and events.
    /// - Throws: `LogError` (corrupt) naming the byte offset inside the frame when it does not check.
    public static func events(in frame: UnsafeRawBufferPointer) throws -> (FrameHeader, [Event]) {
        do throws(FrameDecodeError) {
            let h = try FrameHeader.decode(frame)
            guard h.totalBytes == frame.count else { throw FrameDecodeError.invalid("frame is \(frame.count) bytes, its header says \(h.totalBytes)") }
            try FrameDecoder.checkCRC(frame, header: h)
            return (h, try FrameDecoder().events(of: frame, header: h))
        } catch {
            throw LogError(.corrupt, "inspect frame", error.message)
        }
    }

    /// Decodes the frame both ways the log does (building events, and skimming them as
    /// receiving does) and stops the process if the two disagree on the verdict: the fuzz
    /// targets' oracle. Returns whether the frame is valid.
    public static func crossCheck(_ frame: UnsafeRawBufferPointer) -> Bool {
        let full: Result<Int, FrameDecodeError>
        let skim: Result<Int, FrameDecodeError>
        do throws(FrameDecodeError) {
            let h = try FrameHeader.decode(frame)
            guard h.totalBytes <= frame.count else { throw FrameDecodeError.truncated("frame") }
            let f = UnsafeRawBufferPointer(rebasing: frame[0..<h.totalBytes])
            try FrameDecoder.checkCRC(f, header: h)
            do throws(FrameDecodeError) { full = .success(try FrameDecoder().events(of: f, header: h).count) } catch { full = .failure(error) }
            do throws(FrameDecodeError) { skim = .success(try FrameDecoder().check(f, header: h).count) } catch { skim = .failure(error) }
        } catch {
            return false
        }
        switch (full, skim) {
        case (.success, .success): return true
        case (.failure(let a), .failure(let b)):
            precondition(a == b, "decode and skim disagree: \(a) / \(b)")
            return false
        default:
            preconditionFailure("decode and skim disagree on a frame's verdict: \(full) / \(skim)")
        }
    }
}
