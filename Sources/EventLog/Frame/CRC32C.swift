import CCRC32C
import Foundation

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by iSCSI, ext4 and Kafka's
/// record batches. The CPU's instruction where there is one (SSE 4.2, three interleaved
/// streams; Sources/CCRC32C), else slicing-by-8 over a table built once.
///
/// Check value: `CRC32C.checksum("123456789")` is `0xE3069283`.
public struct CRC32C: Sendable {
    public private(set) var value: UInt32 = 0xFFFF_FFFF

    public init() {}

    static let tables: [UInt32] = {
        var t = [UInt32](repeating: 0, count: 8 * 256)
        for i in 0..<256 {
            var c = UInt32(i)
            for _ in 0..<8 { c = (c & 1) != 0 ? (c >> 1) ^ 0x82F6_3B78 : c >> 1 }
            t[i] = c
        }
        for i in 0..<256 {
            var c = t[i]
            for k in 1..<8 {
                c = t[Int(c & 0xFF)] ^ (c >> 8)
                t[k * 256 + i] = c
            }
        }
        return t
    }()

    static let hardware = logbook_crc32c_hw_available() != 0

    public mutating func update(_ buffer: UnsafeRawBufferPointer) {
        if CRC32C.hardware, let base = buffer.baseAddress {
            value = logbook_crc32c_hw_update(value, base, buffer.count)
        } else {
            updateWithTables(buffer)
        }
    }

    /// The portable path (also the reference the hardware path is tested against).
    mutating func updateWithTables(_ buffer: UnsafeRawBufferPointer) {
        var crc = value
        var i = 0
        let n = buffer.count
        CRC32C.tables.withUnsafeBufferPointer { t in
            while n - i >= 8 {
                let lo = buffer.loadUnaligned(fromByteOffset: i, as: UInt32.self).littleEndian ^ crc
                let hi = buffer.loadUnaligned(fromByteOffset: i + 4, as: UInt32.self).littleEndian
                crc = t[7 * 256 + Int(lo & 0xFF)] ^ t[6 * 256 + Int((lo >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((lo >> 16) & 0xFF)] ^ t[4 * 256 + Int(lo >> 24)]
                    ^ t[3 * 256 + Int(hi & 0xFF)] ^ t[2 * 256 + Int((hi >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((hi >> 16) & 0xFF)] ^ t[Int(hi >> 24)]
                i += 8
            }
            while i < n {
                crc = t[Int((crc ^ UInt32(buffer[i])) & 0xFF)] ^ (crc >> 8)
                i += 1
            }
        }
        value = crc
    }

    public mutating func update<C: ContiguousBytes>(_ bytes: C) {
        bytes.withUnsafeBytes { update($0) }
    }

    public var final: UInt32 { value ^ 0xFFFF_FFFF }

    public static func checksum(_ buffer: UnsafeRawBufferPointer) -> UInt32 {
        var c = CRC32C()
        c.update(buffer)
        return c.final
    }

    public static func checksum<C: ContiguousBytes>(_ bytes: C) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }

    public static func checksum(_ text: String) -> UInt32 {
        checksum(Array(text.utf8))
    }
}
