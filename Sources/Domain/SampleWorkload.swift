import EventLog
import Foundation

/// A deterministic, seeded generator of task-manager mutations as NDJSON lines: mostly item
/// updates, some creates, tag links, time entries, saved searches, deletes and restores.
/// The same seed always yields the same lines; used by benchmarks, fixtures and `make demo`.
public struct SampleWorkload: Sequence, IteratorProtocol {
    private var rng: SplitMix64
    private var items: [String] = []
    private var tags: [String] = []
    private var deleted: [String] = []
    private var minute: Int = 0
    public private(set) var produced = 0
    public let count: Int

    public init(seed: UInt64, count: Int) {
        rng = SplitMix64(seed: seed)
        self.count = count
    }

    public static let words = ["buy", "milk", "call", "mom", "draft", "report", "review", "budget", "fix", "bike", "plan",
                        "trip", "book", "dentist", "renew", "passport", "water", "plants", "email", "team", "prepare",
                        "slides", "clean", "garage", "pay", "rent", "update", "resume", "read", "chapter", "order",
                        "groceries", "schedule", "meeting", "write", "notes", "backup", "laptop", "walk", "dog"]
    static let statuses = ["inbox", "next", "waiting", "someday", "done"]
    static let tagNames = ["home", "work", "errands", "calls", "computer", "reading", "health", "finance"]
    static let colors = ["#e5484d", "#30a46c", "#0091ff", "#f76b15", "#8e4ec6", "#12a594"]

    private mutating func uuid() -> String {
        var a = rng.next(), b = rng.next()
        a = (a & ~0xF000) | 0x4000
        b = (b & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        let hex = String(format: "%016llx%016llx", a, b)
        let c = Array(hex)
        return String(c[0..<8]) + "-" + String(c[8..<12]) + "-" + String(c[12..<16]) + "-" + String(c[16..<20]) + "-" + String(c[20..<32])
    }

    static let linkKinds = ["LINK", "SEQUENCE", "AFFINITY"]
    private mutating func pick<T>(_ a: [T]) -> T { a[Int(rng.next() % UInt64(a.count))] }

    private mutating func title() -> String {
        let n = 2 + Int(rng.next() % 4)
        var w: [String] = []
        for _ in 0..<n { w.append(pick(Self.words)) }
        return w.joined(separator: " ")
    }

    private mutating func timestamp() -> String {
        minute += Int(rng.next() % 7)
        let base: UInt64 = 1_767_225_600  // 2026-01-01T00:00:00Z
        return ISOTime.string(millis: (base + UInt64(minute) * 60) * 1000, fraction: false)
    }

    public mutating func next() -> String? {
        guard produced < count else { return nil }
        produced += 1
        let roll = rng.next() % 100
        if items.count < 20 || roll < 6 {
            let id = uuid()
            let parent = items.isEmpty || rng.next() % 3 != 0 ? "null" : "\"\(pick(items))\""
            items.append(id)
            return "{\"entity\":\"item\",\"op\":\"create\",\"id\":\"\(id)\",\"fields\":{\"title\":\"\(title())\",\"parent_id\":\(parent),\"status\":\"inbox\",\"sort_order\":\(rng.next() % 1000)}}"
        }
        if tags.count < 4 || roll < 8 {
            let id = uuid()
            tags.append(id)
            return "{\"entity\":\"tag\",\"op\":\"create\",\"id\":\"\(id)\",\"fields\":{\"name\":\"\(pick(Self.tagNames))\",\"color\":\"\(pick(Self.colors))\"}}"
        }
        if roll < 16 {
            return "{\"entity\":\"item_tag\",\"op\":\"create\",\"fields\":{\"item_id\":\"\(pick(items))\",\"tag_id\":\"\(pick(tags))\"}}"
        }
        if roll < 22 {
            let start = timestamp()
            return "{\"entity\":\"time_entry\",\"op\":\"create\",\"id\":\"\(uuid())\",\"fields\":{\"item_id\":\"\(pick(items))\",\"started_at\":\"\(start)\",\"duration_seconds\":\(60 * (1 + rng.next() % 90))}}"
        }
        if roll < 23 {
            return "{\"entity\":\"saved_search\",\"op\":\"create\",\"id\":\"\(uuid())\",\"fields\":{\"name\":\"\(pick(Self.tagNames)) \(pick(Self.statuses))\",\"query\":\"status:\(pick(Self.statuses)) tag:\(pick(Self.tagNames))\",\"sort_order\":\(rng.next() % 100)}}"
        }
        if roll < 26 {
            let id = pick(items)
            deleted.append(id)
            return "{\"entity\":\"item\",\"op\":\"delete\",\"id\":\"\(id)\"}"
        }
        if roll < 27, !deleted.isEmpty {
            return "{\"entity\":\"item\",\"op\":\"restore\",\"id\":\"\(pick(deleted))\"}"
        }
        if roll < 30 {
            // Links between items (seed 001's edges), since event schema version 2.
            return "{\"entity\":\"link\",\"op\":\"create\",\"id\":\"\(uuid())\",\"fields\":{\"from_id\":\"\(pick(items))\",\"to_id\":\"\(pick(items))\",\"kind\":\"\(pick(Self.linkKinds))\"}}"
        }
        let id = pick(items)
        switch rng.next() % 5 {
        case 0: return "{\"entity\":\"item\",\"op\":\"update\",\"id\":\"\(id)\",\"fields\":{\"title\":\"\(title())\"}}"
        case 1: return "{\"entity\":\"item\",\"op\":\"update\",\"id\":\"\(id)\",\"fields\":{\"status\":\"\(pick(Self.statuses))\"}}"
        case 2: return "{\"entity\":\"item\",\"op\":\"update\",\"id\":\"\(id)\",\"fields\":{\"notes\":\"\(title()) \(title())\"}}"
        case 3: return "{\"entity\":\"item\",\"op\":\"update\",\"id\":\"\(id)\",\"fields\":{\"sort_order\":\(rng.next() % 1000)}}"
        default: return "{\"entity\":\"item\",\"op\":\"update\",\"id\":\"\(id)\",\"fields\":{\"due_at\":\"\(timestamp())\"}}"
        }
    }
}

/// SplitMix64: a small, fast, well-distributed seeded generator (Steele, Lea, Flood 2014).
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
