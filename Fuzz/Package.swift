// swift-tools-version:6.1
// Coverage-guided fuzz targets (libFuzzer) for every decoder of bytes from outside; see
// docs/SECURITY.md, "Fuzzing". Built apart from the main package, with the fuzzer's
// instrumentation: `make fuzz` (swift build -Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library).
import Foundation
import PackageDescription

// A path dependency is known by its directory's name, whatever the clone is called.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let logbook: [Target.Dependency] = [
    "CFuzzDriver",
    .product(name: "EventLog", package: root),
    .product(name: "Domain", package: root),
    .product(name: "Projections", package: root),
    .product(name: "Replicator", package: root),
    .product(name: "Logbook", package: root),
    .product(name: "Inspector", package: root),
]

let package = Package(
    name: "LogbookFuzz",
    dependencies: [.package(path: "..")],
    targets: [.target(name: "CFuzzDriver")] + ["FuzzFrame", "FuzzPageReceive", "FuzzCursor", "FuzzBundle", "FuzzSnapshot", "FuzzStore", "FuzzEventStream", "FuzzLegacyImport", "FuzzInspectorInput", "FuzzNDJSON"].map {
        .executableTarget(name: $0, dependencies: logbook, path: "Sources/\($0)")
    }
)
