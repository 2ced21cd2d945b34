import Domain
import Foundation
import TestSupport
import GRDB
import Testing
@testable import EventLog
@testable import Projections

/// The domain is described once (DomainSchema); the input rules and the projection's tables
/// follow it, and the shipped migrations must create what it declares.
@Suite struct DomainSchemaTests {
    @Test func everyEntityIsDescribedOnceAndItsColumnsExistInTheMigratedTables() throws {
        #expect(DomainSchema.entities.map(\.entity) == Entity.allCases)
        let dir = TempDir()
        let (_, p) = try makeProjection(dir)
        for spec in DomainSchema.entities {
            let columns = try p.database.read { db in try db.columns(in: spec.table).map(\.name) }
            let expected = ["id"] + spec.columns + ["version", "created_at", "modified_at", "deleted_at", "_clocks"]
            #expect(Set(columns) == Set(expected), "table \(spec.table)")
            #expect(ProjectionSchema.current.table(for: spec.entity)?.columns == spec.columns)
        }
    }

    @Test func aFieldNameMeansOneThingInEveryEntity() {
        var seen: [String: FieldSpec] = [:]
        for f in DomainSchema.common + DomainSchema.entities.flatMap(\.fields) {
            if let s = seen[f.name] {
                #expect(s.kind == f.kind && s.nullable == f.nullable, "field \(f.name) is declared twice with different rules")
            }
            seen[f.name] = f
        }
        // The input rules are the schema's; every declared field has a one-byte code (those of
        // event schema version 2 from 27 on); a name no entity declares holds any scalar.
        #expect(Set(FieldRules.known.keys) == Set(seen.keys))
        // Every coded name is declared (a field added later needs no code: it is written by name).
        #expect(FieldCodes.names.dropFirst().allSatisfy { seen[$0] != nil })
        #expect(FieldCodes.code("priority") == 31)
        #expect(FieldRules.check("energy", .text("high")) == nil)
        #expect(FieldRules.check("priority", .text("high")) != nil)
        #expect(FieldRules.check("latitude", .real(48.85)) == nil)
        #expect(FieldRules.check("parent_id", .text("not a uuid")) != nil)
        #expect(FieldRules.check("item_id", .null) != nil)
        #expect(FieldRules.check("is_pinned", .boolean(true)) == nil)
    }

    /// A new field is one line in DomainSchema: the projection's column comes from a migration
    /// made from the schema, and a projection filled before it is rebuilt by the next writer, so
    /// the value events already hold appears.
    @Test func aDeclaredColumnTheMigrationsLackIsAddedAndFilledByARebuild() throws {
        var tables = ProjectionSchema.current.tables
        tables[0].columns.append("energy")
        let named = ProjectionSchema.current.migrations.filter { !$0.name.hasPrefix(ProjectionSchema.columnMigrationPrefix) }
        let added = ProjectionSchema.columnMigrations(tables, after: named)
        #expect(added.map(\.name) == ["column items.energy"])
        #expect(ProjectionSchema.columnMigrations(ProjectionSchema.current.tables, after: named).isEmpty)
        let wider = ProjectionSchema(tables: tables, migrations: named + added)

        let dir = TempDir()
        let store = try Store.create(at: dir.path + "/s")
        let id = UUID()
        let w = try ProjectedStore(store: store)
        _ = try w.append([Mutation(entity: .item, op: .create, entityID: id, fields: [Field("energy", .integer(3)), Field("title", .text("run"))])])
        try w.close()

        let p = try Projection(store: store, schema: wider)
        #expect(try p.owedRebuild() == ["column items.energy"])
        #expect(try p.database.read { db in try Int?.fetchOne(db, sql: "SELECT energy FROM items") } == .some(nil))
        try p.close()
        _ = try Projection.rebuild(store: store, schema: wider)
        let q = try Projection(store: store, schema: wider)
        #expect(try q.owedRebuild().isEmpty)
        #expect(try q.database.read { db in try Int?.fetchOne(db, sql: "SELECT energy FROM items WHERE id = ?", arguments: [id.lowercasedString]) } == 3)
        try q.close()
    }
}

/// Snapshots are matched to a build by their prefix of migrations, so the migrations that shipped
/// keep their names and their order for good. Column migrations (made from DomainSchema) come
/// after the named ones: once one has shipped, a new named migration must not be added before it
/// (copy it into `named` first). When a release ships new migrations, append their names here.
@Suite struct MigrationOrderTests {
    static let shipped = [
        "v1 entity tables", "v1 bookkeeping", "v1 item search", "v2 commit journal",
        "v3 priority, place, query indexes", "v4 links, unread events, event ids, purged rows",
    ]

    @Test func theShippedMigrationsArePrefixOfThisBuilds() {
        let names = ProjectionSchema.current.migrations.map(\.name)
        #expect(Array(names.prefix(Self.shipped.count)) == Self.shipped,
                "a shipped migration was renamed, removed or moved: snapshots made by the builds that shipped it would no longer match")
    }
}
