import EventLog
import Foundation

/// Events over time per origin, as bars on one shared time axis: the geometry of an inline SVG
/// chart (the template draws it; nothing is fetched from elsewhere).
struct ActivityChart {
    struct Bar {
        var x: String
        var y: String
        var width: String
        var height: String
        /// The tooltip: the bucket's start and its count.
        var title: String
    }
    struct Series {
        var origin: String
        var total: Int64
        var peak: Int64
        var bars: [Bar]
        var color: String
    }
    var series: [Series]
    /// Origins with events that are not drawn (past `Bounds.chartSeriesMax`, the fewest events).
    var seriesLeftOut = 0
    var from: String
    var to: String
    var bucket: String
    var width = 640
    var height = 72

    /// At most this many bars per origin: buckets are whole hours, as many as it takes.
    static let barsMax = 60
    static let axisHoursMin: Int64 = 24
    static let palette = ["#2f6fb0", "#b0552f", "#2f8f5a", "#7a4fb0", "#b08a2f", "#2f9fa6", "#a62f6b", "#5f6b2f"]

    init(hourly: [ReplicaID: [(hour: Int64, events: Int64)]]) {
        let all = hourly.values.flatMap { $0.map(\.hour) }
        let last = all.max() ?? 0
        // At least a day on the axis, so that a young store's hour is a bar, not the whole chart.
        let first = min(all.min() ?? 0, last - (Self.axisHoursMin - 1))
        let spanHours = last - first + 1
        let hoursPerBar = max(1, (spanHours + Int64(Self.barsMax) - 1) / Int64(Self.barsMax))
        let bars = Int((spanHours + hoursPerBar - 1) / hoursPerBar)
        let w = Double(width) / Double(max(bars, 1))
        func stamp(_ hour: Int64) -> String {
            ISO8601DateFormatter.string(from: Date(timeIntervalSince1970: Double(hour) * 3600), timeZone: TimeZone(identifier: "UTC")!,
                                        formatOptions: [.withFullDate, .withTime, .withColonSeparatorInTime, .withDashSeparatorInDate]) + "Z"
        }
        from = all.isEmpty ? "" : stamp(first)
        to = all.isEmpty ? "" : stamp(last + 1)
        bucket = hoursPerBar == 1 ? "1 hour" : hoursPerBar % 24 == 0 ? "\(hoursPerBar / 24) days" : "\(hoursPerBar) hours"
        var out: [Series] = []
        let h = Double(height)
        // The origins with the most events, at most `Bounds.chartSeriesMax` of them, in id order.
        let totals = hourly.mapValues { $0.reduce(Int64(0)) { $0 &+ $1.events } }
        let drawnOrigins = Set(totals.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.prefix(Bounds.chartSeriesMax).map(\.key))
        seriesLeftOut = hourly.count - drawnOrigins.count
        for (n, origin) in hourly.keys.sorted().filter(drawnOrigins.contains).enumerated() {
            var counts = [Int64](repeating: 0, count: max(bars, 1))
            for (hour, events) in hourly[origin] ?? [] {
                let i = Int((hour - first) / hoursPerBar)
                if counts.indices.contains(i) { counts[i] += events }
            }
            let peak = counts.max() ?? 0
            var drawn: [Bar] = []
            for (i, c) in counts.enumerated() where c > 0 {
                let bh = max(1, h * Double(c) / Double(max(peak, 1)))
                drawn.append(Bar(x: Self.number(Double(i) * w), y: Self.number(h - bh), width: Self.number(max(1, w - 1)),
                                 height: Self.number(bh), title: "\(stamp(first + Int64(i) * hoursPerBar)): \(c) event\(c == 1 ? "" : "s")"))
            }
            out.append(Series(origin: origin.description, total: counts.reduce(0, +), peak: peak, bars: drawn,
                              color: Self.palette[n % Self.palette.count]))
        }
        series = out
    }

    static func number(_ d: Double) -> String { String(format: "%.1f", d) }
}
