import Domain
import Foundation
import TestSupport
@testable import EventLog

let fixedReplica = ReplicaID("5a3c0e4e-9b7d-4f0a-8c2e-1d6f3b9a7e21")!

func makeStore(_ dir: TempDir, replica: ReplicaID = fixedReplica) throws -> Store {
    try Store.create(at: dir.path + "/store", replicaID: replica)
}

func item(_ title: String, id: UUID = UUID(), op: Op = .create, eventID: UUID? = nil) -> Mutation {
    Mutation(entity: .item, op: op, entityID: id, fields: [Field("title", .text(title))], eventID: eventID)
}

func sampleMutations(_ n: Int, seed: UInt64 = 7) -> [Mutation] {
    SampleWorkload(seed: seed, count: n).enumerated().map { i, line in try! MutationParser.parse(line, lineNumber: i + 1) }
}

/// Copies a directory tree (for damaging a copy of a store).
func copyTree(_ from: String, _ to: String) {
    try? FileManager.default.removeItem(atPath: to)
    try! FileManager.default.copyItem(atPath: from, toPath: to)
}

func segmentFiles(_ store: Store, _ origin: ReplicaID? = nil) -> [String] {
    let dir = store.directory(origin ?? store.replicaID)
    return (try! dir.segments(op: "test")).map { dir.segmentPath($0) }
}

func readBytes(_ path: String) -> [UInt8] { Array(FileManager.default.contents(atPath: path)!) }

/// Where the frames of a segment file end: past its last frame, an open writer's zero fill.
func framesEnd(_ path: String) -> Int {
    guard let last = frameOffsets(path).last else { return SegmentHeader.size }
    let b = readBytes(path)
    return b.withUnsafeBytes { last + (try! FrameHeader.decode(UnsafeRawBufferPointer(rebasing: $0[last..<last + FrameHeader.size]))).totalBytes }
}
func writeBytes(_ path: String, _ b: [UInt8]) { _ = FileManager.default.createFile(atPath: path, contents: Data(b)) }

/// Frame start offsets in a segment file, by walking headers (to the end of the file, or to
/// the zero fill an open writer keeps past its last frame).
func frameOffsets(_ path: String) -> [Int] {
    let b = readBytes(path)
    var out: [Int] = []
    var o = SegmentHeader.size
    while o + FrameHeader.size <= b.count, b[o..<o + FrameHeader.size].contains(where: { $0 != 0 }) {
        let h = b.withUnsafeBytes { try! FrameHeader.decode(UnsafeRawBufferPointer(rebasing: $0[o..<o + FrameHeader.size])) }
        out.append(o)
        o += h.totalBytes
    }
    return out
}

/// The number of blocks of the LZ4 frame that is the payload of `frame` (an LZ4-coded frame
/// whose descriptor declares a content size and no dictionary id), found by walking the blocks'
/// sizes to the end mark; -1 for a frame of another codec, or blocks that overrun it.
func lz4BlockCount(_ frame: [UInt8]) -> Int {
    guard frame.count > 5, frame[5] == FrameHeader.Codec.lz4Frame.rawValue else { return -1 }
    var at = FrameHeader.size + 4 + 2 + 8 + 1  // magic, FLG, BD, content size, header checksum
    var blocks = 0
    while true {
        guard at + 4 <= frame.count else { return -1 }
        let size = Int(frame[at]) | Int(frame[at + 1]) << 8 | Int(frame[at + 2]) << 16 | Int(frame[at + 3] & 0x7F) << 24
        at += 4
        if size == 0 { return blocks }
        blocks += 1
        at += size
    }
}
