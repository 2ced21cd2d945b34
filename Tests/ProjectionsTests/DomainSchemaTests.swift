import Domain
import Foundation
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
        // The input rules are the schema's, and every declared field has a one-byte code in the format.
        #expect(Set(FieldRules.known.keys) == Set(seen.keys))
        for name in seen.keys { #expect(FieldCodes.code(name) != 0, "\(name) has no code") }
        #expect(FieldRules.check("parent_id", .text("not a uuid")) != nil)
        #expect(FieldRules.check("item_id", .null) != nil)
        #expect(FieldRules.check("is_pinned", .boolean(true)) == nil)
    }
}
