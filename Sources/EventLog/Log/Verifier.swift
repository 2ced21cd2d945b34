import Foundation

/// One problem found by `Verifier`: where, and what.
public struct VerifyProblem: Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var offset: Int
    public var message: String
    public var description: String { "\(file) at byte offset \(offset): \(message)" }
}

/// What `Verifier.run` found.
public struct VerifyReport: Sendable {
    public var origins = 0
    public var segments = 0
    public var frames = 0
    /// Frames whose signature verified against their origin's key (the rest are of origins
    /// made before signed logs).
    public var signedFrames = 0
    /// Frames sealed for a share this replica holds no key of: their checksum, chain and
    /// signature checked, their events not (only members can open them).
    public var sealedUnopened = 0
    public var events = 0
    public var bytes = 0
    public var problems: [VerifyProblem] = []
    /// Fixable by reopening for writing (indexes): not damage to the data.
    public var notes: [String] = []
    public var isClean: Bool { problems.isEmpty }
}

/// Checks every frame of every origin: segment headers, checksums, the hash chain (across
/// segments too), seq contiguity, hlc order, signatures, and that every event decodes. Read-only: it never
/// repairs, and it can run while a writer appends.
public struct Verifier: Sendable {
    public let store: Store
    /// Frames whose clock is further ahead of `wallClock` than this are reported (a far-future
    /// hlc drags every replica's clock along; see `AppendOptions.clockDriftMaxMs`).
    public var clockDriftMaxMs: UInt64 = AppendOptions.defaultClockDriftMaxMs
    public var wallClock: any WallClock = SystemWallClock()
    public init(store: Store) { self.store = store }

    /// - Parameter progress: called after each segment with (bytes checked so far, total bytes).
    public func run(progress: ((Int, Int) -> Void)? = nil) throws -> VerifyReport {
        var report = VerifyReport()
        let origins = try store.origins()
        report.origins = origins.count
        var total = 0
        var plan: [(OriginDirectory, [Seq])] = []
        for o in origins {
            let dir = store.directory(o)
            let segs = try dir.segments(op: "verify")
            plan.append((dir, segs))
            for s in segs { total += FileIO.size(of: dir.segmentPath(s)) ?? 0 }
        }
        let decoder = FrameDecoder(keysOf: store)
        let now = min(wallClock.nowMillis(), HLC.wallMillisMax)
        let (horizon, noHorizon) = now.addingReportingOverflow(clockDriftMaxMs)
        for (dir, segs) in plan {
            var reportedFuture = false
            let floor: LogTip?
            do { floor = try dir.loadFloor() } catch {
                report.problems.append(VerifyProblem(file: dir.floorPath, offset: 0, message: "floor file is damaged"))
                continue
            }
            if let floor {
                report.notes.append("origin \(dir.origin): log starts after a snapshot, at seq \(floor.lastSeq.next)")
                if let first = segs.first, first > floor.lastSeq.next {
                    report.problems.append(VerifyProblem(file: dir.segmentPath(first), offset: 0, message: "the log starts at seq \(first), its floor says \(floor.lastSeq.next): frames are missing"))
                } else if let first = segs.first, first < floor.lastSeq.next {
                    report.notes.append("origin \(dir.origin): segments below the floor remain (a compaction was cut short; run `evctl compact` again)")
                }
            } else if let first = segs.first, first != Seq(1) {
                report.notes.append("origin \(dir.origin): log starts at seq \(first)")
            }
            var chain: ChainState?
            for (i, first) in segs.enumerated() {
                let path = dir.segmentPath(first)
                report.segments += 1
                let isNewest = i == segs.count - 1
                let (file, opened) = try SegmentScanner.open(dir, first: first, isNewest: isNewest, committedOnly: false, continuing: chain, op: "verify")
                report.bytes += file.size
                defer { progress?(report.bytes, total) }
                let header: SegmentHeader
                switch opened {
                case .success(let h): header = h
                case .failure(let verdict):
                    report.problems.append(Self.problem(verdict, path: path))
                    chain = nil
                    continue
                }
                if chain == nil, i == 0, let floor, first == floor.lastSeq.next, header.previousHash != floor.lastHash {
                    report.problems.append(VerifyProblem(file: path, offset: 0, message: "hash chain broken: the log does not link to its floor (the snapshot's last frame hash)"))
                }
                var scanner = SegmentScanner(file: file, origin: dir.origin, isNewest: isNewest, committedOnly: false, offset: SegmentHeader.size,
                                             chain: ChainState(nextSeq: first, previousHash: header.previousHash, lastHLC: chain?.lastHLC ?? .zero))
                var index = Recovery.emptyIndex(dir, first, header.previousHash)
                var decodeFailure: String?
                var unreadable: String?
                var verdict = ScanVerdict.end
                scan: while true {
                    let step = try scanner.next { h, bytes in
                        do {
                            if try FrameSignature.check(bytes, header: h) { report.signedFrames += 1 }
                            report.events += try decoder.events(of: bytes, header: h).count
                        } catch FrameDecodeError.locked {
                            report.sealedUnopened += 1
                            report.events += Int(h.count)
                        } catch FrameDecodeError.unreadable(let m) {
                            unreadable = "frame of seq \(h.baseSeq)…\(h.lastSeq) (origin \(h.origin)) is intact and signed, but its writer sealed contents that do not read: \(m); readers skip it"
                        } catch {
                            decodeFailure = (error as? FrameDecodeError)?.message ?? "\(error)"
                        }
                    }
                    switch step {
                    case .stop(let v):
                        verdict = v
                        break scan
                    case .frame(let h, let hash, let offset):
                        if let m = decodeFailure {
                            report.problems.append(VerifyProblem(file: path, offset: offset, message: "frame of seq \(h.baseSeq)…\(h.lastSeq) does not decode: \(m)"))
                            verdict = .damage(at: offset, reason: m, seqs: nil)
                            break scan
                        }
                        report.frames += 1
                        if let m = unreadable {
                            report.problems.append(VerifyProblem(file: path, offset: offset, message: m))
                            unreadable = nil
                        }
                        if !noHorizon, !reportedFuture, h.lastHLC.wallMillis > horizon {
                            reportedFuture = true
                            report.problems.append(VerifyProblem(file: path, offset: offset, message: "frame of seq \(h.baseSeq)…\(h.lastSeq) carries a clock \(h.lastHLC.wallMillis - now) ms ahead of this machine's (hlc \(h.lastHLC); the bound is \(clockDriftMaxMs) ms): a far-future clock, later frames of this origin not listed"))
                        }
                        index.add(h, at: offset, hash: hash)
                    }
                }
                if verdict != .end, decodeFailure == nil { report.problems.append(Self.problem(verdict, path: path)) }
                let offset = scanner.offset
                // (The scan reached the end: the file's, or where the newest segment's zero fill starts.)
                if offset == file.size || verdict == .end, FileIO.exists(dir.indexPath(first)) {
                    if let idx = dir.loadIndex(first, segmentSize: file.size) {
                        let rebuilt = Set(index.entries)
                        let consistent = idx.entries.allSatisfy { e in rebuilt.contains(e) || e.offset >= index.coveredBytes }
                            && idx.coveredBytes <= index.coveredBytes
                        if !consistent { report.notes.append("\(dir.indexPath(first)): index disagrees with its segment (rebuilt at next writer open)") }
                    } else {
                        report.notes.append("\(dir.indexPath(first)): index is stale or damaged (rebuilt at next writer open)")
                    }
                }
                chain = verdict == .end ? scanner.chain : nil
            }
        }
        return report
    }

    /// A stop that is not the end of the segment, as a problem: where and what (a tail is named
    /// as one, since the next writer cuts it off).
    static func problem(_ verdict: ScanVerdict, path: String) -> VerifyProblem {
        switch verdict {
        case .end:
            preconditionFailure("the end is not a problem")
        case let .tail(_, at, reason, _):
            VerifyProblem(file: path, offset: at, message: "\(reason) (a torn tail: the next writer to open the store cuts it off)")
        case let .damage(at, reason, seqs):
            VerifyProblem(file: path, offset: at, message: reason + (seqs.map { " (claims seq \($0.lowerBound)…\($0.upperBound))" } ?? ""))
        }
    }
}
