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
        #expect(seen.keys.allSatisfy { FieldCodes.code($0) != 0 })
        #expect(FieldCodes.code("priority") == 31)
        #expect(FieldRules.check("energy", .text("high")) == nil)
        #expect(FieldRules.check("priority", .text("high")) != nil)
        #expect(FieldRules.check("latitude", .real(48.85)) == nil)
        #expect(FieldRules.check("parent_id", .text("not a uuid")) != nil)
        #expect(FieldRules.check("item_id", .null) != nil)
        #expect(FieldRules.check("is_pinned", .boolean(true)) == nil)
    }
}
