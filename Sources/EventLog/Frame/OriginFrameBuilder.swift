import Crypto
import Foundation

/// Builds the log of an origin that is not this store's appender: events made elsewhere, at
/// times of their own (a legacy import makes the old app's data the log of an origin of its own,
/// each row at the time it was last changed). The frames chain like any origin's (seqs from 1,
/// each frame linking to the hash of the one before), so `LogAppender.receive` verifies and
/// stores them like a peer's, and building the same events again gives the same bytes (a second
/// receive finds them already held).
///
/// An origin's clocks strictly increase: an event whose time is not after the previous one's is
/// given the previous clock plus one (the counter); `add` returns the clock used.
package final class OriginFrameBuilder {
    public let origin: ReplicaID
    /// Signs each frame (an origin whose id derives from this key); nil for an unsigned origin.
    private let signer: ReplicaKey?
    private let encoder = FrameEncoder()
    private var nextSeq: UInt64 = 1
    private var previous = FrameHash.zero
    private var lastHLC = HLC.zero
    private var inFrame = 0
    /// The frames finished so far, in order.
    public private(set) var frames: [[UInt8]] = []
    /// Events per frame (a frame is also finished once its records pass `recordBytesMax`).
    public static let eventsPerFrame = 1000
    static let recordBytesMax = 4 << 20

    /// With `share`, frames are sealed into a share's log (docs/FORMAT.md, "Share frames").
    private let share: (id: ShareID, key: ContentKey)?

    public init(origin: ReplicaID) {
        self.origin = origin
        signer = nil
        share = nil
    }

    /// Builds the signed log of the replica `signer` is the key of.
    public init(signer: ReplicaKey) {
        origin = signer.replicaID
        self.signer = signer
        share = nil
    }

    /// Builds the sealed log of the replica `signer` is the key of in `share`, sealed with `key`
    /// (a load generator's or a test's: a store writes shares through `LogAppender.appendShared`).
    public init(signer: ReplicaKey, share: ShareID, key: ContentKey) {
        origin = ReplicaID.shareLog(share, signingKey: signer.publicKey)
        self.signer = signer
        self.share = (share, key)
    }

    /// Events added so far.
    public var events: Int { Int(nextSeq - 1) }

    /// Adds `m` at `hlc`, or just after the previous event when `hlc` is not later.
    /// - Returns: the clock the event carries.
    /// - Throws: `LogError` when the event's record takes more than 1 MiB
    ///   (`FrameEncoder.recordBytesMax`); the builder is then as it was before the call.
    @discardableResult
    public func add(_ m: Mutation, at hlc: HLC) throws -> HLC {
        let at = hlc > lastHLC ? hlc : HLC(rawValue: lastHLC.rawValue &+ 1)
        do { try encoder.add(m, origin: origin, seq: Seq(nextSeq), hlc: at) } catch { throw error.logError("build") }
        nextSeq += 1
        lastHLC = at
        inFrame += 1
        if inFrame >= Self.eventsPerFrame || encoder.recordBytes >= Self.recordBytesMax { finishFrame() }
        return at
    }

    /// Finishes the frame being built and returns every frame.
    public func finish() -> [[UInt8]] {
        finishFrame()
        return frames
    }

    private func finishFrame() {
        guard inFrame > 0 else { return }
        let sealing = share.map { s in
            (block: ShareBlock(share: s.id, epoch: s.key.epoch, nonce: ChaChaPoly.Nonce().withUnsafeBytes { Array($0) }), key: Optional(s.key))
        }
        let bytes = encoder.finish(continues: false, previousHash: previous, signer: signer, share: sealing)
        previous = bytes.withUnsafeBytes { FrameHash.of($0) }
        frames.append(bytes)
        inFrame = 0
    }
}
