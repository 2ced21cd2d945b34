import Domain
import AsyncHTTPClient
import Crypto
import EventLog
@testable import LogbookServer
import Foundation
import TestSupport
import Logging
import NIOCore
import NIOHTTP1
import Projections
import Testing
@testable import Replicator

/// A transport that misbehaves on purpose: cuts pages off at a random byte, hands out a page it
/// handed out before, and fails requests outright, each at random.
final class FlakyTransport: ReplicaTransport, @unchecked Sendable {
    let inner: any ReplicaTransport
    private let lock = NSLock()
    private var rng: SplitMix
    private var previous: (FramePage.Decoded, Int)?
    private(set) var cuts = 0, duplicates = 0, failures = 0

    init(_ inner: any ReplicaTransport, seed: UInt64) {
        self.inner = inner
        rng = SplitMix(seed)
    }

    private func roll() -> Double { lock.withLock { Double(rng.next() % 1000) / 1000 } }

    func cursor() async throws -> ReplicationCursor {
        if roll() < 0.1 { lock.withLock { failures += 1 }; throw TransferFailure.transient("injected: connection reset") }
        return try await inner.cursor()
    }

    func page(since: ReplicationCursor, limits: PageLimits) async throws -> (FramePage.Decoded, Int) {
        let r = roll()
        if r < 0.1 { lock.withLock { failures += 1 }; throw TransferFailure.transient("injected: 503") }
        if r < 0.25, let p = lock.withLock({ previous }) { lock.withLock { duplicates += 1 }; return p }
        let (page, bytes) = try await inner.page(since: since, limits: limits)
        lock.withLock { previous = (page, bytes) }
        if r < 0.45, page.complete, let next = page.next {
            // Cut the encoded page at a random byte and decode what "arrived".
            let encoded = FramePage(frames: page.frames, next: next, more: page.more).encoded()
            let cut = Int(lock.withLock { rng.next() } % UInt64(encoded.count))
            lock.withLock { cuts += 1 }
            return (try FramePage.decode(Array(encoded[..<cut])), cut)
        }
        return (page, bytes)
    }

    func push(_ page: FramePage) async throws -> (ReceiveResult, ReplicationCursor) {
        let r = roll()
        if r < 0.1 { lock.withLock { failures += 1 }; throw TransferFailure.transient("injected: connection refused") }
        if r < 0.2 {
            // The page lands but the answer is lost.
            _ = try await inner.push(page)
            lock.withLock { failures += 1 }
            throw TransferFailure.transient("injected: answer lost")
        }
        if r < 0.3 { _ = try await inner.push(page); lock.withLock { duplicates += 1 } }  // sent twice
        return try await inner.push(page)
    }
}

struct SplitMix {
    var state: UInt64
    init(_ seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite(.serialized) struct HTTPTests {
    func mutations(_ n: Int, seed: UInt64) -> [Mutation] {
        SampleWorkload(seed: seed, count: n).enumerated().map { try! MutationParser.parse($1, lineNumber: $0 + 1) }
    }

    func edit(_ store: Store, _ n: Int, seed: UInt64) throws {
        let p = try ProjectedStore.open(store: store, waitingUpTo: 5)
        _ = try p.append(mutations(n, seed: seed))
        try p.close()
    }

    func dump(_ store: Store) throws -> [String] { try Workload.dump(store) }

    /// One pull or push between `from` and `to` through `transport` (pointing at `to` for push, at `from` for pull).
    func exchange(pull: Bool, local: Store, transport: any ReplicaTransport, limits: PageLimits) async throws {
        let retry = RetryPolicy(attempts: 50, base: 0.001, cap: 0.002)
        if pull {
            _ = try await Replication.pull(from: transport, store: local, limits: limits, retry: retry, lockWait: 5)
        } else {
            _ = try await Replication.push(from: local, to: transport, limits: limits, retry: retry)
        }
    }

    /// Three replicas edit at random and exchange in random directions and orders through a
    /// misbehaving transport; once each has synced with the others they hold the same logs and
    /// byte-identical projections.
    func convergence(seed: UInt64, transports: @escaping ([Store], Int) -> any ReplicaTransport, stores: [Store]) async throws {
        var rng = SplitMix(seed)
        var made: [FlakyTransport] = []
        for round in 0..<12 {
            let who = Int(rng.next() % 3)
            try edit(stores[who], 20 + Int(rng.next() % 200), seed: seed &* 100 &+ UInt64(round))
            let local = Int(rng.next() % 3)
            var peer = Int(rng.next() % 3)
            if peer == local { peer = (peer + 1) % 3 }
            let limits = PageLimits(maxBytes: 1 + Int(rng.next() % 6000), maxFrames: 1 + Int(rng.next() % 4))
            let flaky = FlakyTransport(transports(stores, peer), seed: rng.next())
            made.append(flaky)
            try await exchange(pull: rng.next() % 2 == 0, local: stores[local], transport: flaky, limits: limits)
        }
        // Everyone syncs with everyone: pull from each other, then once more so all are equal.
        for _ in 0..<2 {
            for local in 0..<3 {
                for peer in 0..<3 where peer != local {
                    let flaky = FlakyTransport(transports(stores, peer), seed: rng.next())
                    made.append(flaky)
                    try await exchange(pull: true, local: stores[local], transport: flaky, limits: PageLimits(maxBytes: 3000, maxFrames: 3))
                }
            }
        }
        // The misbehaviour did happen.
        #expect(made.reduce(0) { $0 + $1.cuts } > 0 && made.reduce(0) { $0 + $1.duplicates } > 0 && made.reduce(0) { $0 + $1.failures } > 0)
        let cursors = try stores.map { try $0.cursor() }
        #expect(cursors[0] == cursors[1] && cursors[1] == cursors[2])
        let dumps = try stores.map { try dump($0) }
        #expect(dumps[0] == dumps[1] && dumps[1] == dumps[2])
        #expect(dumps[0].count > 10)
        for s in stores { #expect(try Verifier(store: s).run().isClean) }
    }

    @Test func threeReplicasConvergeOverHTTPWithCutOffsAndDuplicatedPages() async throws {
        for seed in [UInt64(1), 2] {
            let dir = ShippingTests.Dir()
            let stores = try (0..<3).map { try Store.create(at: dir.path + "/r\($0)") }
            try await withServer(stores[0]) { u0 in
                try await withServer(stores[1]) { u1 in
                    try await withServer(stores[2]) { u2 in
                        let clients = try [u0, u1, u2].map { try HTTPTransport(url: $0) }
                        do {
                            try await convergence(seed: seed, transports: { _, i in clients[i] }, stores: stores)
                        } catch {
                            for c in clients { await c.shutdown() }
                            throw error
                        }
                        for c in clients { await c.shutdown() }
                    }
                }
            }
        }
    }

    @Test func threeReplicasConvergeThroughTheFilesystemTransport() async throws {
        for seed in [UInt64(3), 4] {
            let dir = ShippingTests.Dir()
            let stores = try (0..<3).map { try Store.create(at: dir.path + "/r\($0)") }
            try await convergence(seed: seed, transports: { s, i in StoreTransport(store: s[i]) }, stores: stores)
        }
    }

    // MARK: security

    typealias Raw = RawHTTP.Answer

    /// A request with the raw client, so tests can send what `HTTPTransport` never would.
    func raw(_ url: String, method: HTTPMethod = .GET, token: String? = nil, body: [UInt8]? = nil) async throws -> Raw {
        try await RawHTTP.request(url, method: method, token: token, body: body)
    }

    @Test func tokensAndRightsAreEnforcedAndRefusalsLeaveTheStoreUnchanged() async throws {
        let dir = ShippingTests.Dir()
        let server = try Store.create(at: dir.path + "/server")
        let laptop = try Store.create(at: dir.path + "/laptop")
        let other = try Store.create(at: dir.path + "/other")
        try edit(server, 50, seed: 1)
        try edit(laptop, 40, seed: 2)
        try edit(other, 30, seed: 3)
        let policy = try AccessPolicy(json: Data("""
            {"principals":[
              {"name":"laptop","token":"laptop-token-0123456789","push":["\(laptop.replicaID)"],"pull":true},
              {"name":"reader","token":"reader-token-0123456789","pull":true},
              {"name":"pusher","token":"pusher-token-0123456789","push":["\(laptop.replicaID)"],"pull":false}
            ]}
            """.utf8))
        let before = try server.cursor()
        let beforeDump = try dump(server)
        try await withServer(server, configure: { $0.policy = policy; $0.pushBytesMax = 1 << 20 }) { url in
            // Missing and wrong tokens: 401, nothing about which principals exist.
            var r = try await raw(url + "/v1/cursor")
            #expect(r.status == 401 && r.body.contains("needs a bearer token"))
            r = try await raw(url + "/v1/frames", token: "laptop-token-WRONG")
            #expect(r.status == 401 && r.body.contains("not valid") && !r.body.contains("laptop\""))
            #expect(try await raw(url + "/healthz").status == 200)
            #expect(try await raw(url + "/metrics").status == 401)
            // Through the client: clear, permanent errors.
            let noToken = try HTTPTransport(url: url)
            await #expect { _ = try await noToken.cursor() } throws: { ($0 as? TransferFailure)?.description.contains("401 unauthorized") == true }
            await noToken.shutdown()
            // A principal that may not pull: 403.
            r = try await raw(url + "/v1/frames", token: "pusher-token-0123456789")
            #expect(r.status == 403 && r.body.contains("may not pull"))
            // A principal that may not push: 403.
            let laptopPage = try FramePage.collect(from: laptop, since: .empty, limits: PageLimits())
            r = try await raw(url + "/v1/frames", method: .POST, token: "reader-token-0123456789", body: laptopPage.encoded())
            #expect(r.status == 403 && r.body.contains("may not push"))
            // Pushing another origin's frames: 403, naming the origin; nothing written.
            let otherPage = try FramePage.collect(from: other, since: .empty, limits: PageLimits())
            let mixed = FramePage(frames: laptopPage.frames + otherPage.frames, next: .empty, more: false)
            r = try await raw(url + "/v1/frames", method: .POST, token: "laptop-token-0123456789", body: mixed.encoded())
            #expect(r.status == 403 && r.body.contains("origin \(other.replicaID)"))
            // A tampered frame (one flipped bit): 422, nothing written.
            var flipped = laptopPage
            flipped.frames[0][FrameHeader.size + 5] ^= 0x10
            r = try await raw(url + "/v1/frames", method: .POST, token: "laptop-token-0123456789", body: flipped.encoded())
            #expect(r.status == 422 && r.body.contains("damaged"))
            // A rewritten frame with a recomputed checksum but a broken chain: 422.
            var second = try FramePage.collect(from: laptop, since: .empty, limits: PageLimits())
            second.frames[0][60] ^= 1  // its previous-frame hash (the first frame's is all zeros)
            var crc = CRC32C()
            second.frames[0].withUnsafeBytes { p in
                crc.update(UnsafeRawBufferPointer(rebasing: p[0..<92]))
                crc.update(UnsafeRawBufferPointer(rebasing: p[96...]))
            }
            withUnsafeBytes(of: crc.final.littleEndian) { for i in 0..<4 { second.frames[0][92 + i] = $0[i] } }
            r = try await raw(url + "/v1/frames", method: .POST, token: "laptop-token-0123456789", body: second.encoded())
            // (The laptop signs its frames: the signature covers the link and fails first.)
            #expect(r.status == 422 && (r.body.contains("hash chain") || r.body.contains("signature does not verify")))
            // An oversized body: 413.
            r = try await raw(url + "/v1/frames", method: .POST, token: "laptop-token-0123456789", body: [UInt8](repeating: 7, count: (1 << 20) + 1))
            #expect(r.status == 413)
            // Not a page at all: 400.
            r = try await raw(url + "/v1/frames", method: .POST, token: "laptop-token-0123456789", body: Array("{\"frames\":[]}".utf8))
            #expect(r.status == 400 && r.body.contains("not a page"))
            // Path traversal and junk in names: never reach a file.
            for path in ["/v1/../../store.json", "/v1/frames/..%2F..%2Fstore.json", "/log/\(server.replicaID)/00000000000000000001.seg", "/%2e%2e/store.json"] {
                let s = try await raw(url + path, token: "laptop-token-0123456789").status
                #expect(s == 404 || s == 400, "\(path) answered \(s)")
            }
            r = try await raw(url + "/v1/frames?since=../../etc/passwd", token: "laptop-token-0123456789")
            #expect(r.status == 400 && r.body.contains("since"))
            r = try await raw(url + "/v1/frames?max_bytes=-5", token: "laptop-token-0123456789")
            #expect(r.status == 400 && r.body.contains("max_bytes"))
            #expect(try server.cursor() == before)
            #expect(try dump(server) == beforeDump)
            #expect(FileManager.default.fileExists(atPath: server.path + "/log/\(other.replicaID)") == false)

            // The allowed push and pull work, and metrics count what happened.
            let t = try HTTPTransport(url: url, token: "laptop-token-0123456789", replica: laptop.replicaID)
            let pushed = try await Replication.push(from: laptop, to: t)
            #expect(pushed.events == 40)
            let p = try ProjectedStore(store: laptop)
            let pulled = try await Replication.pull(from: t, into: p)
            try p.close()
            #expect(pulled.events == 50)
            // The page told the client the server's own cursor.
            let serverHolds = try server.cursor()
            #expect(pulled.peerHolds == serverHolds)
            await t.shutdown()
            r = try await raw(url + "/metrics", token: "reader-token-0123456789")
            #expect(r.status == 200)
            #expect(r.body.contains("logbook_events_received_total 40"))
            #expect(r.body.contains("logbook_http_requests_total{status=\"401\"}"))
            #expect(r.body.contains("logbook_http_requests_total{status=\"403\"}"))
            #expect(r.body.contains("logbook_cursor_seq{origin=\"\(laptop.replicaID)\"} 40"))
            #expect(r.body.contains("logbook_peer_lag_events{peer=\"laptop/\(laptop.replicaID)\"} 0"))
        }
        #expect(try dump(server) == (try dump(laptop)))
    }

    @Test func aServerWithoutTokensOnlyListensOnLoopback() throws {
        var c = ServerConfiguration()
        c.host = "0.0.0.0"
        #expect { try c.validate() } throws: { String(describing: $0).contains("without --tokens") }
        c.host = "127.0.0.1"
        try c.validate()
        c.host = "::1"
        try c.validate()
        c.host = "0.0.0.0"
        c.policy = try AccessPolicy(json: Data(#"{"principals":[{"name":"a","token":"0123456789abcdef","pull":true}]}"#.utf8))
        try c.validate()
    }

    @Test func tlsWithACertificateTheClientTrusts() async throws {
        let dir = ShippingTests.Dir()
        let cert = dir.path + "/cert.pem", key = dir.path + "/key.pem"
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                       "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0, "openssl could not make a test certificate")
        let server = try Store.create(at: dir.path + "/server"), client = try Store.create(at: dir.path + "/client")
        try edit(server, 30, seed: 9)
        try await withServer(server, configure: { $0.certificate = cert; $0.key = key }) { url in
            #expect(url.hasPrefix("https://"))
            // Without trusting the certificate: a permanent TLS failure, not retried.
            let untrusted = try HTTPTransport(url: url)
            await #expect { _ = try await untrusted.cursor() } throws: { ($0 as? TransferFailure)?.code == .tls }
            await untrusted.shutdown()
            let t = try HTTPTransport(url: url, caCertificate: cert)
            let projected = try ProjectedStore(store: client)
            let s = try await Replication.pull(from: t, into: projected)
            try projected.close()
            await t.shutdown()
            #expect(s.events == 30)
        }
        #expect(try dump(server) == (try dump(client)))
    }

    /// A snapshot is installed only when every byte matches the SHA-256 the server announced.
    @Test func snapshotsAreCheckedAgainstTheirLengthAndDigest() throws {
        let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let digest = hex(SHA256.hash(data: bytes))
        func run(_ data: [UInt8], length: Int? = bytes.count, sha: String = digest) throws {
            var check = SnapshotCheck(expectedLength: length, sha256: sha)
            for chunk in stride(from: 0, to: data.count, by: 65_536) {
                try data[chunk..<min(chunk + 65_536, data.count)].withUnsafeBytes { try check.add($0) }
            }
            try check.finish()
        }
        try run(bytes)
        try run(bytes, length: nil, sha: digest.uppercased())
        var flipped = bytes
        flipped[123_456] ^= 0x10
        #expect { try run(flipped) } throws: { "\($0)".contains("does not match its SHA-256") }
        #expect { try run(Array(bytes.prefix(200_000))) } throws: {
            guard let f = $0 as? TransferFailure else { return false }
            return f.retry == .transient && f.message.contains("cut off after 200000 of 300000")
        }
        #expect { try run(bytes + [0]) } throws: { "\($0)".contains("runs past its announced 300000 bytes") }
    }

    /// Replicas bootstrapping one after another share one snapshot while the store has not
    /// moved; a push makes the next request take a new one. Nothing is left on disk.
    @Test func aSnapshotIsMadeOnceWhileTheStoreHasNotMoved() async throws {
        let dir = ShippingTests.Dir()
        let store = try Store.create(at: dir.path + "/s")
        try edit(store, 40, seed: 3)
        let endpoint = try ReplicaEndpoint(store: store, policy: .open)
        let principal = try endpoint.authenticate(nil)
        let tmpBefore = try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory()).filter { $0.hasPrefix("evctl-snapshot-") }
        func fetch() async throws -> (String, [UInt8]) {
            let f = try await endpoint.snapshot(principal: principal)
            var bytes: [UInt8] = []
            while let chunk = try f.next() { bytes += chunk }
            #expect(bytes.count == f.size)
            #expect(hex(SHA256.hash(data: bytes)) == f.sha256)
            return (f.sha256, bytes)
        }
        let (a, bytesA) = try await fetch()
        let (b, bytesB) = try await fetch()
        #expect(a == b && bytesA == bytesB)
        var metrics = endpoint.metrics.render(current: nil)
        #expect(metrics.contains("logbook_snapshots_made_total 1\n") && metrics.contains("logbook_snapshots_served_total 2\n"))
        // The store moves: the next snapshot is a new one, covering the new event.
        let other = try Store.create(at: dir.path + "/o")
        try edit(other, 1, seed: 4)
        _ = try await endpoint.push(principal: principal, body: try FramePage.collect(from: other, since: .empty, limits: PageLimits()).encoded(), peer: nil)
        let (c, bytesC) = try await fetch()
        #expect(c != a)
        metrics = endpoint.metrics.render(current: nil)
        #expect(metrics.contains("logbook_snapshots_made_total 2\n"))
        try Data(bytesC).write(to: URL(fileURLWithPath: dir.path + "/c.sqlite"))
        #expect(try Snapshot.read(dir.path + "/c.sqlite").anchors[other.replicaID]?.lastSeq == Seq(1))
        let tmpAfter = try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory()).filter { $0.hasPrefix("evctl-snapshot-") }
        #expect(Set(tmpAfter).isSubset(of: Set(tmpBefore)), "no snapshot directory left behind")
    }

    /// A refusal crosses the link as a typed value: the receiver's reason travels as a code (and
    /// the seqs it names) in the error JSON, and the sender gets the same `TransferFailure` code
    /// over HTTP as from a store reached by path, so callers decide by code, never by text.
    @Test func refusalsCrossTheLinkAsTypedValues() async throws {
        let dir = ShippingTests.Dir()
        let a = try Store.create(at: dir.path + "/a"), b = try Store.create(at: dir.path + "/b"), c = try Store.create(at: dir.path + "/c")
        try edit(a, 10, seed: 1)
        try edit(a, 10, seed: 2)
        let page = try FramePage.collect(from: a, since: .empty, limits: PageLimits())
        #expect(page.frames.count == 2)
        let gap = FramePage(frames: [page.frames[1]], next: page.next, more: false)
        var damagedFrame = page.frames[0]
        damagedFrame[damagedFrame.count - 2] ^= 0x20
        let damaged = FramePage(frames: [damagedFrame], next: page.next, more: false)
        let byPath = StoreTransport(store: c)
        try await withServer(b) { url in
            let overHTTP = try HTTPTransport(url: url)
            defer { Task { await overHTTP.shutdown() } }
            for (page, code, seqs) in [(gap, FailureCode.gap, Optional<ClosedRange<UInt64>>(11...20)), (damaged, .corrupt, nil)] {
                var got: [TransferFailure] = []
                for t in [overHTTP as any ReplicaTransport, byPath] {
                    do { _ = try await t.push(page); Issue.record("\(code): the push was taken") } catch let f as TransferFailure { got.append(f) }
                }
                #expect(got.map(\.code) == [code, code], "\(got)")
                #expect(got.allSatisfy { $0.retry == .permanent })
                if let seqs { #expect(got.map(\.seqs) == [seqs, seqs], "\(got)") }
                #expect(got.first?.status == 422)
            }
        }
        #expect(try LogReader(store: b).events(origin: a.replicaID).isEmpty)
        #expect(try LogReader(store: c).events(origin: a.replicaID).isEmpty)
        // A server that sends no code (an older build) still gives the status's meaning.
        #expect(HTTPTransport.failure(status: 503, body: "{\"error\":\"busy\"}", url: "u").retry == .transient)
        #expect(HTTPTransport.failure(status: 410, body: "gone", url: "u").code == .cursorExpired)
        #expect(HTTPTransport.failure(status: 422, body: "{\"error\":\"x\",\"code\":\"from_the_future\"}", url: "u").code == .invalidFrames)
        #expect(HTTPTransport.failure(status: 422, body: "{\"error\":\"x\",\"code\":\"gap\",\"seqs\":[5,2]}", url: "u").seqs == nil)
    }
}
