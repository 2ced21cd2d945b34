import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A peer on loopback that answers each connection's first request with the bytes `answer`
/// gives for it (the request's number from 0, its head), then closes the connection: a server
/// that says exactly what a test needs, hostile or broken, where `evctl serve` never would.
/// Stopped when released.
public final class CannedServer: @unchecked Sendable {
    /// `http://127.0.0.1:PORT/`.
    public let url: String
    private let listener: Int32
    private let log = Heads()
    private let done = DispatchSemaphore(value: 0)

    /// What was asked, kept apart from the server so that its thread does not hold the server.
    private final class Heads: @unchecked Sendable {
        let lock = NSLock()
        var all: [String] = []
    }

    public init(answer: @escaping @Sendable (_ number: Int, _ head: String) -> String) throws {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let noSignal = Int32(MSG_NOSIGNAL)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        let noSignal: Int32 = 0
        #endif
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p in
                bind(fd, p, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, p, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            throw POSIXError(.EADDRNOTAVAIL)
        }
        listener = fd
        url = "http://127.0.0.1:\(UInt16(bigEndian: address.sin_port))/"
        let thread = Thread { [log, done] in
            var number = 0
            while true {
                let c = accept(fd, nil, nil)
                if c < 0 {
                    if errno == EINTR { continue }
                    break  // the listener was shut down
                }
                #if !canImport(Glibc)
                var on: Int32 = 1  // a client gone before the answer must not end the tests
                setsockopt(c, SOL_SOCKET, SO_NOSIGPIPE, &on, socklen_t(MemoryLayout<Int32>.size))
                #endif
                // A client that never ends its head is given up on, so that the server stops.
                var timeout = timeval(tv_sec: 2, tv_usec: 0)
                setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                var head = [UInt8]()
                var buffer = [UInt8](repeating: 0, count: 4096)
                while head.count < 65_536 {
                    let n = recv(c, &buffer, buffer.count, 0)
                    if n <= 0 { break }
                    head += buffer.prefix(n)
                    if let end = head.firstRange(of: Array("\r\n\r\n".utf8)) {
                        head.removeSubrange(end.upperBound...)
                        break
                    }
                }
                let text = String(decoding: head, as: UTF8.self)
                log.lock.withLock { log.all.append(text) }
                let reply = Array(answer(number, text).utf8)
                _ = reply.withUnsafeBytes { send(c, $0.baseAddress, $0.count, noSignal) }
                number += 1
                shutdown(c, Int32(SHUT_WR))
                close(c)
            }
            done.signal()
        }
        thread.start()
    }

    /// The heads of the requests answered so far, in order.
    public var requests: [String] { log.lock.withLock { log.all } }

    deinit {
        // Closed only once the thread has stopped, so that its last accept cannot meet a
        // descriptor of the same number opened since.
        shutdown(listener, Int32(SHUT_RDWR))
        done.wait()
        close(listener)
    }
}
