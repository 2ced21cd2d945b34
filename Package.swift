// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "Logbook",
    platforms: [.macOS(.v14)],
    products: [
        // Products by who uses them (docs/EMBEDDING.md). An app depends on `Logbook` alone: the store
        // and the sync client, no server code (no Hummingbird, PostgresNIO or Mustache module).
        .library(name: "Logbook", targets: ["Logbook"]),
        // What `evctl serve` runs: the replica server and the audit pages, for a program that serves a store.
        .library(name: "LogbookServer", targets: ["LogbookServer", "Inspector"]),
        // The PostgreSQL hub that serve nodes share.
        .library(name: "LogbookHub", targets: ["Hub"]),
        .executable(name: "evctl", targets: ["evctl"]),
        // The layers below the door, for this repository's own packages (Benchmarks/, Fuzz/), which
        // measure and fuzz them directly. Not API: an app imports Logbook.
        .library(name: "EventLog", targets: ["EventLog"]),
        .library(name: "Domain", targets: ["Domain"]),
        .library(name: "Projections", targets: ["Projections"]),
        .library(name: "Replicator", targets: ["Replicator"]),
        .library(name: "Inspector", targets: ["Inspector"]),
    ],
    dependencies: [
        // `from:` ranges throughout, so an app with its own GRDB 7.x, NIO or Hummingbird 2.x resolves.
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache", from: "2.1.1"),
    ],
    targets: [
        .systemLibrary(
            name: "CLZ4",
            pkgConfig: "liblz4",
            providers: [.apt(["liblz4-dev"])]
        ),
        .target(name: "CCRC32C"),
        .target(name: "CSQLiteGuard", linkerSettings: [.linkedLibrary("sqlite3")]),
        .target(name: "CPrefetch"),
        .target(
            name: "EventLog",
            dependencies: [
                "CLZ4",
                "CCRC32C",
                "CSQLiteGuard",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        // The task-manager domain: entities and fields described once, and the NDJSON input.
        .target(
            name: "Domain",
            dependencies: ["EventLog", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .target(
            name: "Projections",
            dependencies: [
                "EventLog", "Domain", "CPrefetch",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ]
        ),
        .target(
            name: "Replicator",
            dependencies: [
                "EventLog", "Projections",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                // The sync client only (AsyncHTTPClient); the server is LogbookServer.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The replica server of `evctl serve` (docs/PROTOCOL.md): endpoints, tokens, owners, bounds.
        .target(
            name: "LogbookServer",
            dependencies: [
                "EventLog", "Projections", "Replicator",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Legacy import (docs/IMPORT.md): reading the old apps' files and mapping their rows to
        // mutations and a report; Logbook keeps the backup and appends.
        .target(
            name: "LegacyImport",
            dependencies: ["EventLog", "Domain", "Projections",
                           .product(name: "GRDB", package: "GRDB.swift"), .product(name: "Crypto", package: "swift-crypto")]
        ),
        // The store an app opens: append, query, observe, sync (above Projections and Replicator).
        .target(
            name: "Logbook",
            dependencies: ["EventLog", "Domain", "Projections", "Replicator", "LegacyImport",
                           .product(name: "GRDB", package: "GRDB.swift"), .product(name: "Crypto", package: "swift-crypto")]
        ),
        // A hub on PostgreSQL: frames, cursors and origin owners in a database shared by serve nodes.
        .target(
            name: "Hub",
            dependencies: [
                "EventLog", "Replicator", "LogbookServer",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // Audit inspection in the browser: read-only pages under /ui/ of `evctl serve` and `evctl inspect`.
        .target(
            name: "Inspector",
            dependencies: [
                "Logbook", "LogbookServer", "Replicator", "Projections", "EventLog",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "evctl",
            dependencies: [
                "Logbook",
                "LogbookServer",
                "Inspector",
                "Hub",
                "EventLog",
                "Domain",
                "Projections",
                "Replicator",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // A load simulator for hubs (docs/SCALING.md): many replicas in one process.
        .executableTarget(
            name: "hub-load",
            dependencies: [
                "Hub", "LogbookServer", "Replicator", "EventLog", "Domain",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        // Examples/: a to-do core an app developer can copy, and a command line over it.
        .target(name: "TodoCore", dependencies: ["Logbook"], path: "Examples/TodoCore/Sources/TodoCore"),
        // The entity types of Sources/Logbook/Entities.swift, rendered from DomainSchema (make generate).
        .target(name: "EntitySource", dependencies: ["Domain"]),
        .executableTarget(name: "entity-source", dependencies: ["EntitySource", "Domain"]),
        .executableTarget(name: "todo", dependencies: ["TodoCore"], path: "Examples/TodoCore/Sources/todo"),
        // One TempDir, one ManualClock, a workload and a server on a free port for every test target.
        .target(
            name: "TestSupport",
            dependencies: [
                "EventLog", "Domain", "Projections", "Replicator", "LogbookServer",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            path: "Tests/TestSupport"
        ),
        .testTarget(
            name: "LogbookTests",
            dependencies: ["TestSupport", "Logbook", "LegacyImport", "LogbookServer", "TodoCore", "EntitySource", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(
            name: "EventLogTests",
            dependencies: ["TestSupport", "EventLog", "Domain", "CLZ4"],
            resources: []
        ),
        // The replica server's own behaviour: tokens and scopes, hardening, memory budget.
        .testTarget(
            name: "LogbookServerTests",
            dependencies: [
                "TestSupport",
                "Replicator", "LogbookServer", "EventLog", "Projections", "Domain",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // The domain's input: the NDJSON parser and its rules.
        .testTarget(name: "DomainTests", dependencies: ["TestSupport", "Domain", "EventLog"]),
        .testTarget(
            name: "ReplicatorTests",
            dependencies: [
                "TestSupport",
                "Replicator", "LogbookServer", "EventLog", "Projections", "Domain", "Hub",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "HubTests",
            dependencies: [
                "TestSupport", "Hub", "LogbookServer", "Replicator", "EventLog", "Projections", "Domain",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "InspectorTests",
            dependencies: [
                "TestSupport",
                "Inspector", "Logbook", "LogbookServer", "Replicator", "EventLog",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "ProjectionsTests",
            dependencies: ["TestSupport", "Projections", "EventLog", "Domain", .product(name: "GRDB", package: "GRDB.swift")]
        ),
        .testTarget(
            name: "evctlTests",
            dependencies: ["TestSupport", "EventLog", "Projections", "Domain"]
        ),
        // The benchmarks are a package of their own (Benchmarks/Package.swift); the fuzz targets too (Fuzz/).
    ]
)
