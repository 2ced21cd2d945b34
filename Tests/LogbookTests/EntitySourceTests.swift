import Domain
import EntitySource
import Foundation
import Testing

/// The Swift types of the domain's entities (Sources/Logbook/Entities.swift) are made from
/// `DomainSchema`, the one description: this renders them again and fails when the file has
/// drifted (`make generate` writes it).
@Suite struct EntitySourceTests {
    static var sourcePath: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/Logbook/Entities.swift").path
    }

    @Test func theEntityTypesAreMadeFromTheDomainSchema() throws {
        let rendered = EntitySource.render(DomainSchema.entities)
        let onDisk = try String(contentsOfFile: Self.sourcePath, encoding: .utf8)
        guard onDisk != rendered else { return }
        let a = onDisk.split(separator: "\n", omittingEmptySubsequences: false)
        let b = rendered.split(separator: "\n", omittingEmptySubsequences: false)
        let line = (0..<min(a.count, b.count)).first { a[$0] != b[$0] } ?? min(a.count, b.count)
        Issue.record("""
            Sources/Logbook/Entities.swift differs from what DomainSchema makes, first at line \(line + 1):
              file:     \(line < a.count ? String(a[line]) : "(end)")
              schema:   \(line < b.count ? String(b[line]) : "(end)")
            Run `make generate` after changing DomainSchema.
            """)
    }

    @Test func aNewFieldIsOneLineInTheSchema() {
        // The renderer takes whatever the schema declares: one more FieldSpec gives the record a
        // typed property, the values an edit, and both their decoding and encoding.
        var specs = DomainSchema.entities
        specs[0].fields.append(FieldSpec("energy", .integer, "How much energy it takes."))
        let s = EntitySource.render(specs)
        #expect(s.contains("    public var energy: Int?\n"))
        #expect(s.contains("        public var energy: Edit<Int>?\n"))
        #expect(s.contains("energy = r.int(\"energy\")"))
        #expect(s.contains("l.add(\"energy\", energy)"))
        #expect(s.contains("if energy != old.energy { v.energy = Edit(energy) }"))
    }
}

