import Foundation

/// Reads one frame's bytes from anywhere (a bundle, a page, a file a user points at) with every
/// check the log makes: header, size, checksum, signature, every event record. For tools and fuzzing.
public enum FrameInspector {
    /// The frame's header and events.
    /// - Throws: `LogError` (corrupt) naming the byte offset inside the frame when it does not check.
    public static func events(in frame: UnsafeRawBufferPointer) throws -> (FrameHeader, [Event]) {
        try events(in: frame, openingSealed: true)
    }

    /// `events(in:)`, except that a share's sealed frame (checked as far as one can without its
    /// key: header, size, checksum, signature and share block) gives no events: for a relay,
    /// which passes such frames on and never opens them.
    public static func eventsUnlessSealed(in frame: UnsafeRawBufferPointer) throws -> (FrameHeader, [Event]) {
        try events(in: frame, openingSealed: false)
    }

    /// Whether `frame` is a share's frame whose checksum holds and whose origin derives from the
    /// share and the key that signs it (its signature is not verified here).
    public static func isWellFormedShareFrame(_ frame: [UInt8]) -> Bool {
        frame.withUnsafeBytes { p in
            guard let h = try? FrameHeader.decode(p), h.shared, Int(h.totalBytes) == p.count, ShareBlock.of(p, header: h) != nil,
                  (try? FrameDecoder.checkCRC(p, header: h)) != nil else { return false }
            return (try? FrameSignature.checkForm(p, header: h)) == true
        }
    }

    /// Whether `frame` is a well-formed share's frame (`isWellFormedShareFrame`) whose signature
    /// verifies: written by the holder of the key its origin derives from.
    public static func isSignedShareFrame(_ frame: [UInt8]) -> Bool {
        guard isWellFormedShareFrame(frame) else { return false }
        return frame.withUnsafeBytes { p in
            guard let h = try? FrameHeader.decode(p) else { return false }
            return (try? FrameSignature.verify(p, header: h)) != nil
        }
    }

    /// The share a share's frame belongs to (its share block); nil for any other frame.
    public static func share(of frame: [UInt8]) -> ShareID? {
        frame.withUnsafeBytes { p in
            guard let h = try? FrameHeader.decode(p), h.shared, Int(h.totalBytes) == p.count else { return nil }
            return ShareBlock.of(p, header: h)?.share
        }
    }

    private static func events(in frame: UnsafeRawBufferPointer, openingSealed: Bool) throws -> (FrameHeader, [Event]) {
        do throws(FrameDecodeError) {
            let h = try FrameHeader.decode(frame)
            guard h.totalBytes == frame.count else { throw FrameDecodeError.invalid("frame is \(frame.count) bytes, its header says \(h.totalBytes)") }
            try FrameDecoder.checkCRC(frame, header: h)
            try FrameSignature.check(frame, header: h)
            if h.sealed && !openingSealed { return (h, []) }
            return (h, try FrameDecoder().events(of: frame, header: h))
        } catch {
            throw LogError(.corrupt, "inspect frame", error.message)
        }
    }

    /// `crossCheck` and `events(in:)` of the frame with its CRC made right, as a relay can: what
    /// lies past the checksum (records, signature blocks) is reached by any bytes, not only by
    /// valid frames. For the fuzz targets and their fixtures. Returns whether the frame is valid.
    @discardableResult
    public static func crossCheckWithCRCFixed(_ frame: UnsafeRawBufferPointer) -> Bool {
        var fixed = Array(frame)
        guard let h = FrameHeader(parsing: fixed), h.totalBytes <= fixed.count else { return false }
        var crc = CRC32C()
        fixed.withUnsafeBytes { p in
            crc.update(UnsafeRawBufferPointer(rebasing: p[0..<FrameHeader.size - 4]))
            crc.update(UnsafeRawBufferPointer(rebasing: p[FrameHeader.size..<h.totalBytes]))
        }
        withUnsafeBytes(of: crc.final.littleEndian) { for i in 0..<4 { fixed[FrameHeader.size - 4 + i] = $0[i] } }
        return fixed.withUnsafeBytes { p in
            let valid = crossCheck(p)
            _ = try? events(in: UnsafeRawBufferPointer(rebasing: p[0..<h.totalBytes]))
            return valid
        }
    }

    /// Whether `a` and `b` are the same events, a number compared by its bits: a peer's frame may
    /// carry a NaN, which `==` finds different from itself (this oracle stopped on such a frame).
    static func sameBits(_ a: [Event], _ b: [Event]) -> Bool {
        guard a.count == b.count else { return false }
        for (x, y) in zip(a, b) {
            var xs = x, ys = y
            xs.fields = []
            ys.fields = []
            guard xs == ys, x.fields.count == y.fields.count else { return false }
            for (f, g) in zip(x.fields, y.fields) {
                guard f.name == g.name, sameBits(f.value, g.value) else { return false }
            }
        }
        return true
    }

    /// Whether `a` and `b` are the same value, a number compared by its bits.
    static func sameBits(_ a: FieldValue?, _ b: FieldValue?) -> Bool {
        if case .real(let p)? = a, case .real(let q)? = b { return p.bitPattern == q.bitPattern }
        return a == b
    }

    /// Whether the first `namesMax` names of each event's fields are found as the first field of
    /// that name is (`Event.field(_:)`, which reads names in place): a bounded number of
    /// searches per event, so that an event of millions of fields does not stall the fuzzer.
    static func fieldsReadByName(_ events: [Event], namesMax: Int = 16) -> Bool {
        for e in events {
            let fields = e.fields.array
            for f in fields.prefix(namesMax) {
                guard sameBits(e.field(f.name), fields.first(where: { $0.name == f.name })?.value) else { return false }
            }
        }
        return true
    }

    /// Decodes the frame every way the log does (building events, skimming them as receiving
    /// does, and as views as `forEachEventView` does) and stops the process if they disagree on
    /// the verdict, or a view's event differs from the decoded one: the fuzz targets' oracle.
    /// Returns whether the frame is valid.
    public static func crossCheck(_ frame: UnsafeRawBufferPointer) -> Bool {
        let full: Result<[Event], FrameDecodeError>
        let eager: Result<[Event], FrameDecodeError>
        let skim: Result<Int, FrameDecodeError>
        let views: Result<FrameViews, FrameDecodeError>
        var sealed = false
        do throws(FrameDecodeError) {
            let h = try FrameHeader.decode(frame)
            sealed = h.sealed
            guard h.totalBytes <= frame.count else { throw FrameDecodeError.truncated("frame") }
            let f = UnsafeRawBufferPointer(rebasing: frame[0..<h.totalBytes])
            try FrameDecoder.checkCRC(f, header: h)
            // Signatures: any bytes give a verdict, never a trap (decoding does not depend on it).
            _ = try? FrameSignature.check(f, header: h)
            do throws(FrameDecodeError) { full = .success(try FrameDecoder().events(of: f, header: h)) } catch { full = .failure(error) }
            do throws(FrameDecodeError) { eager = .success(try FrameDecoder().eagerEvents(of: f, header: h)) } catch { eager = .failure(error) }
            do throws(FrameDecodeError) { skim = .success(try FrameDecoder().check(f, header: h).count) } catch { skim = .failure(error) }
            do throws(FrameDecodeError) { views = .success(try FrameDecoder().views(of: f, header: h)) } catch { views = .failure(error) }
        } catch {
            return false
        }
        if sealed {
            // A share's sealed frame, without its key: reading stops at it (locked), receiving
            // passes it on unopened (no records, no ids).
            guard case .failure(.locked) = full, case .failure(.locked) = eager, case .failure(.locked) = views, case .success(0) = skim else {
                preconditionFailure("a sealed frame read without its key: \(full) / \(eager) / \(skim) / \(views)")
            }
            return false
        }
        switch (full, eager, skim, views) {
        case (.success(let events), .success(let decoded), .success, .success(let vs)):
            var viewed: [Event] = []
            _ = vs.forEach(from: Seq(0)) { v in
                guard let e = try? v.event() else { preconditionFailure("a view of a checked frame does not decode") }
                precondition(v.entityID == e.entityID && v.eventID == e.eventID && v.hlc == e.hlc && v.entity == e.entity && v.op == e.op,
                             "a view's header differs from its event")
                viewed.append(e)
                return true
            }
            precondition(sameBits(viewed, events), "views and decoding disagree on a frame's events")
            precondition(sameBits(decoded, events), "events decoded whole and read from their records disagree")
            precondition(fieldsReadByName(events), "an event's fields read by name differ from its fields")
            return true
        case (.failure(let a), .failure(let d), .failure(let b), .failure(let c)):
            precondition(a == b && b == c && d == a, "decode, skim and views disagree: \(a) / \(d) / \(b) / \(c)")
            return false
        default:
            preconditionFailure("decode, skim and views disagree on a frame's verdict: \(full) / \(eager) / \(skim) / \(views)")
        }
    }
}
