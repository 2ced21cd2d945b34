// swift-tools-version:6.1
// The benchmarks (package-benchmark), a package of their own so that an app depending on
// Logbook neither fetches nor builds the benchmark dependency. `make bench` runs them all.
import Foundation
import PackageDescription

// A path dependency is known by its directory's name, whatever the clone is called.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "LogbookBenchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        // No trait: the default ones add a malloc interposer (a counting shim with a header of
        // its own on every block, paid by subjects that allocate and not by their floors, while
        // no benchmark here reads an allocation metric) and a runtime interposer the mirror lacks.
        .package(url: "https://github.com/ordo-one/benchmark", exact: "1.38.1", traits: []),
    ],
    targets: [
        // The benchmark plugin finds its targets by their folder's parent, `Benchmarks/`.
        .systemLibrary(name: "CLZ4Bench", path: "CLZ4Bench", pkgConfig: "liblz4", providers: [.apt(["liblz4-dev"])]),
        .target(
            name: "BenchmarkSupport",
            dependencies: ["CLZ4Bench", .product(name: "EventLog", package: root), .product(name: "Domain", package: root),
                           .product(name: "Crypto", package: "swift-crypto")],
            path: "BenchmarkSupport"
        ),
        .executableTarget(
            name: "LogBenchmarks",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "EventLog", package: root), .product(name: "Domain", package: root),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "LogBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "ProjectionBenchmarks",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "EventLog", package: root), .product(name: "Domain", package: root),
                .product(name: "Projections", package: root), .product(name: "Logbook", package: root),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "ProjectionBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "ShippingBenchmarks",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "EventLog", package: root), .product(name: "Domain", package: root),
                .product(name: "Projections", package: root),
                .product(name: "Replicator", package: root),
                .product(name: "LogbookServer", package: root),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "ShippingBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)
