import Domain

/// The Swift types of the domain's entities (Sources/Logbook/Entities.swift), made from
/// `DomainSchema`: each entity's record (every column typed as declared) and its values (the edit
/// form). Run by `make generate`; `EntitySourceTests` fails when the file has drifted.
public enum EntitySource {
    static func swiftType(_ k: FieldKind) -> String {
        switch k {
        case .text: "String"
        case .uuid: "UUID"
        case .integer: "Int"
        case .number: "Double"
        case .boolean: "Bool"
        case .timestamp: "Date"
        case .date: "Day"
        }
    }

    static func reader(_ k: FieldKind) -> String {
        switch k {
        case .text: "text"
        case .uuid: "uuid"
        case .integer: "int"
        case .number: "double"
        case .boolean: "bool"
        case .timestamp: "date"
        case .date: "day"
        }
    }

    public static func render(_ entities: [EntitySpec]) -> String {
        var o = """
            // Made from DomainSchema by `make generate` (Sources/EntitySource; EntitySourceTests checks it):
            // do not edit; change Sources/Domain/DomainSchema.swift and run it again.

            import Domain
            import EventLog
            import Foundation
            import GRDB


            """
        for e in entities { o += entity(e) }
        return o
    }

    static func doc(_ text: String, _ indent: String) -> String {
        text.isEmpty ? "" : "\(indent)/// \(text)\n"
    }

    static func entity(_ e: EntitySpec) -> String {
        let t = e.typeName
        let columns = e.fields.filter(\.isColumn)
        let identity = e.fields.filter(\.isIdentity)
        var o = doc(e.doc, "")
        o += "///\n/// Read from the projection with every column typed as `DomainSchema` declares it; written with\n"
        o += "/// `\(t).Values`, or from a record: `Change.create(record)`, `Change.update(from: old, to: new)`.\n"
        o += "public struct \(t): EntityRecord {\n"
        o += "    /// The entity kind this record holds.\n    public static let entity = Entity.\(entityCase(e))\n"
        o += "    /// The entity's id.\n    public var id: UUID\n"
        for f in columns {
            o += doc(f.doc, "    ")
            o += "    public var \(f.swiftName): \(swiftType(f.kind))\(f.isIdentity ? "" : "?")\n"
        }
        o += """
                /// The hybrid-logical-clock stamp of the newest event applied: the entity's version.
                public internal(set) var version: Int64
                /// When the app says the entity was created.
                public internal(set) var createdAt: Date?
                /// When the projection last changed it.
                public internal(set) var modifiedAt: Date?
                /// When it was soft-deleted; nil while it is live.
                public internal(set) var deletedAt: Date?
                /// Columns whose stored value is not what the schema declares (an event written
                /// before a rule existed): their property is nil (a zero UUID when required).
                public internal(set) var undecodable: [String]

            """
        // Memberwise init, for records made in code.
        var params = ["id: UUID = UUID()"]
        for f in columns {
            params.append(f.isIdentity ? "\(f.swiftName): \(swiftType(f.kind))" : "\(f.swiftName): \(swiftType(f.kind))? = nil")
        }
        o += "    /// A record made in code (to create with `Change.create(_:)`).\n"
        o += "    public init(\(params.joined(separator: ", "))) {\n"
        o += "        self.id = id\n"
        for f in columns { o += "        self.\(f.swiftName) = \(f.swiftName)\n" }
        o += "        version = 0\n        undecodable = []\n    }\n\n"
        // Decoding.
        o += "    /// Decodes a row of `\(e.table)`; a value that is not what its column declares is listed\n"
        o += "    /// in `undecodable`, never trapped on or thrown.\n"
        o += "    public init(row: Row) {\n        var r = RecordRow(row)\n        id = r.requiredUUID(\"id\")\n"
        for f in columns {
            o += "        \(f.swiftName) = r.\(f.isIdentity ? "required" + swiftType(f.kind) : reader(f.kind))(\"\(f.name)\")\n"
        }
        o += """
                    version = r.version()
                    createdAt = r.date("created_at")
                    modifiedAt = r.date("modified_at")
                    deletedAt = r.date("deleted_at")
                    undecodable = r.undecodable
                }


            """
        // Values: the write form.
        o += "    /// Edits to \(e.table): a field left nil is not part of the mutation (an update leaves it as\n"
        o += "    /// it is); `.clear` sets it to null.\n"
        o += "    public struct Values: EntityValues, Equatable {\n"
        o += "        /// The entity kind these values belong to.\n        public static let entity = Entity.\(entityCase(e))\n"
        for f in e.fields {
            o += doc(f.doc, "        ")
            o += "        public var \(f.swiftName): \(f.isIdentity ? swiftType(f.kind) : "Edit<\(swiftType(f.kind))>?")\n"
        }
        o += "        /// Fields the schema does not describe: kept in the log, surfaced once a projection knows them.\n"
        o += "        public var extra: [Field] = []\n\n"
        var vparams: [String] = []
        for f in e.fields {
            vparams.append(f.isIdentity ? "\(f.swiftName): \(swiftType(f.kind))" : "\(f.swiftName): Edit<\(swiftType(f.kind))>? = nil")
        }
        vparams.append("extra: [Field] = []")
        o += "        /// Values with the given fields set; every other field is left out.\n"
        o += "        public init(\(vparams.joined(separator: ", "))) {\n"
        for f in e.fields { o += "            self.\(f.swiftName) = \(f.swiftName)\n" }
        o += "            self.extra = extra\n        }\n\n"
        o += "        /// The fields set, as the log stores them.\n        public var fields: [Field] {\n            var l = FieldList()\n"
        for f in e.fields { o += "            l.\(f.isIdentity ? "require" : "add")(\"\(f.name)\", \(f.swiftName))\n" }
        o += "            return l.fields + extra\n        }\n    }\n\n"
        // Record → values.
        let idArgs = identity.map { "\($0.swiftName): \($0.swiftName)" }.joined(separator: ", ")
        let editable = columns.filter { !$0.isIdentity }
        o += "    /// Every field this record holds, as values for a create.\n    public var values: Values {\n"
        if editable.isEmpty {
            o += "        Values(\(idArgs))\n    }\n\n"
        } else {
            o += "        var v = Values(\(idArgs))\n"
            for f in editable { o += "        v.\(f.swiftName) = \(f.swiftName).map(Edit.set)\n" }
            o += "        return v\n    }\n\n"
        }
        o += "    /// The edits that turn `old` into this record: the fields that differ.\n"
        o += "    public func changes(from old: \(t)) -> Values {\n"
        if editable.isEmpty {
            o += "        Values(\(idArgs))\n    }\n}\n\n"
        } else {
            o += "        var v = Values(\(idArgs))\n"
            for f in editable { o += "        if \(f.swiftName) != old.\(f.swiftName) { v.\(f.swiftName) = Edit(\(f.swiftName)) }\n" }
            o += "        return v\n    }\n}\n\n"
        }
        o += "/// The values of `\(t)` (its edit form).\npublic typealias \(t)Values = \(t).Values\n\n"
        return o
    }

    /// `Entity`'s static member for the entity (`item_tag` → `itemTag`).
    static func entityCase(_ e: EntitySpec) -> String {
        let s = FieldSpec.swiftName(of: e.entity.name)
        return s
    }
}
