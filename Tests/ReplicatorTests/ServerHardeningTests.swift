import AsyncHTTPClient
import EventLog
import Foundation
import NIOCore
import NIOHTTP1
import Projections
import Testing
@testable import Replicator

/// The server against clients that misbehave: web pages, slow or silent connections, old TLS.
@Suite(.serialized) struct ServerHardeningTests {
    typealias Dir = ShippingTests.Dir

    func request(_ url: String, method: HTTPMethod = .GET, headers: [(String, String)] = [], body: [UInt8]? = nil) async throws -> (Int, String) {
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        defer { _ = client.shutdown() }
        var r = HTTPClientRequest(url: url)
        r.method = method
        for (k, v) in headers { r.headers.replaceOrAdd(name: k, value: v) }
        if let body { r.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await client.execute(r, timeout: .seconds(10))
        let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
        return (Int(response.status.code), text)
    }

    @Test func aTokenlessServerRefusesWebPagesAndForeignHosts() async throws {
        let dir = Dir()
        let s = try Store.create(at: dir.path + "/s")
        let other = try Store.create(at: dir.path + "/other")
        let p = try ProjectedStore(store: other)
        _ = try p.append(ShippingTests().mutations(5, seed: 1))
        try p.close()
        let page = try FramePage.collect(from: other, since: .empty, limits: PageLimits()).encoded()
        try await withServer(s) { url in
            #expect(try await request(url + "/v1/cursor").0 == 200)
            // A page in a browser: another origin, or a DNS name rebound to 127.0.0.1.
            #expect(try await request(url + "/v1/cursor", headers: [("Origin", "https://evil.example")]).0 == 403)
            #expect(try await request(url + "/v1/cursor", headers: [("Host", "evil.example:8427")]).0 == 403)
            #expect(try await request(url + "/v1/cursor", headers: [("Origin", url)]).0 == 200)
            // A push a form or fetch without preflight could send: text/plain, or no type at all.
            for type in ["text/plain", "application/x-www-form-urlencoded", nil] as [String?] {
                let (status, _) = try await request(url + "/v1/frames", method: .POST, headers: type.map { [("Content-Type", $0)] } ?? [], body: page)
                #expect(status == 415, "\(type ?? "no type")")
            }
            #expect(try s.cursor() == .empty)
            let (ok, _) = try await request(url + "/v1/frames", method: .POST, headers: [("Content-Type", ReplicaServer.pageContentType)], body: page)
            #expect(ok == 200)
        }
        #expect(try s.cursor()[other.replicaID] == Seq(5))
    }

    /// Connections that send nothing, or half a header, are cut off, and the server keeps
    /// answering others even with more of them open than it accepts at once.
    @Test func slowAndSilentConnectionsDoNotStopTheServer() async throws {
        let dir = Dir()
        let s = try Store.create(at: dir.path + "/s")
        try await withServer(s, configure: {
            $0.limits.headerTimeoutMs = 300
            $0.limits.connectionsMax = 4
        }) { url in
            let port = UInt16(url.split(separator: ":").last!)!
            var sockets: [Int32] = []
            defer { for fd in sockets { close(fd) } }
            for i in 0..<12 {
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                var addr = sockaddr_in()
                addr.sin_family = sa_family_t(AF_INET)
                addr.sin_port = port.bigEndian
                addr.sin_addr.s_addr = inet_addr("127.0.0.1")
                let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
                #expect(rc == 0)
                if i % 2 == 0 { _ = "GET /healthz HTTP/1.1\r\nHo".withCString { send(fd, $0, 25, 0) } }  // half a header, then silence
                sockets.append(fd)
            }
            let start = ContinuousClock.now
            let (status, body) = try await request(url + "/healthz")
            #expect(status == 200 && body == "ok\n")
            #expect(ContinuousClock.now - start < .seconds(8))
            // The silent ones were closed by the server: reading gives end of file.
            var buffer = [UInt8](repeating: 0, count: 64)
            var tv = timeval(tv_sec: 3, tv_usec: 0)
            setsockopt(sockets[0], SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            #expect(recv(sockets[0], &buffer, 64, 0) == 0)
        }
    }

    @Test func tlsBelow1Point2IsRefused() async throws {
        let dir = Dir()
        let cert = dir.path + "/cert.pem", key = dir.path + "/key.pem"
        #expect(run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                     "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert]) == 0)
        let s = try Store.create(at: dir.path + "/s")
        try await withServer(s, configure: { $0.certificate = cert; $0.key = key }) { url in
            let target = "127.0.0.1:" + url.split(separator: ":").last!
            // The client side allows the old versions (security level 0), so only the server can refuse.
            #expect(run(["openssl", "s_client", "-connect", target, "-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0"]) != 0)
            #expect(run(["openssl", "s_client", "-connect", target, "-tls1", "-cipher", "DEFAULT:@SECLEVEL=0"]) != 0)
            #expect(run(["openssl", "s_client", "-connect", target, "-tls1_2"]) == 0)
        }
    }

    @Test func aTokenIsNotSentOverPlainHTTPToAnotherMachine() async throws {
        let token = "0123456789abcdef0123"
        #expect(throws: TransferFailure.self) { try HTTPTransport(url: "http://sync.example.org:8427", token: token) }
        #expect(throws: TransferFailure.self) { try HTTPTransport(url: "http://192.168.1.20:8427", token: token) }
        for t in [try HTTPTransport(url: "http://sync.example.org:8427", token: token, insecureHTTP: true),
                  try HTTPTransport(url: "https://sync.example.org:8427", token: token),
                  try HTTPTransport(url: "http://127.0.0.1:8427", token: token),
                  try HTTPTransport(url: "http://sync.example.org:8427")] {  // no token, nothing to leak
            await t.shutdown()
        }
    }

    func run(_ arguments: [String]) -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = arguments
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        do { try p.run() } catch { return -1 }
        p.waitUntilExit()
        return p.terminationStatus
    }
}
