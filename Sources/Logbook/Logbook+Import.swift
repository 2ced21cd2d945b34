import Crypto
import Domain
import EventLog
import Foundation
import GRDB
import LegacyImport
import Projections

extension Logbook {
    /// Imports an existing app's data (docs/IMPORT.md): seed 000's synced SQLite shape, seed 003's
    /// v1 SQLite shape, or a JSON export, told apart by the file's contents.
    ///
    /// Nothing is lost: the file is only read, once, into a byte-identical copy kept in the store
    /// (`imports/<sha256>.<ext>`, checked after writing) with its SHA-256, and read from there. Every
    /// row becomes an entity (a row with deleted_at ends deleted), or is listed in the report with
    /// the reason it was kept aside; every column is kept (those the domain does not know as extra
    /// fields of the entity), except seed 000's CloudKit bookkeeping. The events belong to an
    /// origin of the import's own and carry the rows' own times, so a later edit on any replica
    /// wins over imported state. Importing the same file again appends nothing.
    /// - Parameter progress: called with a phase ("reading", "mapping", "appending", "projecting")
    ///   and (done, total) within it.
    @discardableResult
    package func importLegacy(from path: String, progress: ((String, Int, Int) -> Void)? = nil) throws -> LegacyImportReport {
        do {
            return try importingLegacy(from: path, progress: progress)
        } catch let e as LegacyError {
            throw LogbookError(.invalid, e.message, hint: e.hint)
        }
    }

    private func importingLegacy(from path: String, progress: ((String, Int, Int) -> Void)?) throws -> LegacyImportReport {
        let w = try requireWriter("import-legacy")
        let imports = store.layout.imports
        try FileManager.default.createDirectory(atPath: imports, withIntermediateDirectories: true)

        // 1. The backup: a byte-identical copy with its SHA-256, written, synced and read back.
        progress?("reading", 0, 1)
        let (sha, bytes) = try Self.copyHashing(from: path, to: imports + "/incoming.tmp")
        defer { try? FileManager.default.removeItem(atPath: imports + "/incoming.tmp") }  // kept under its name once checked
        let scratch = NSTemporaryDirectory() + "/logbook-import-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        var sqlite: DatabaseQueue?
        defer { try? sqlite?.close() }
        let format = try LegacySource.detect(imports + "/incoming.tmp") {
            // A private copy to read SQLite from (and to replay a -wal into): the backup stays as it came.
            try FileManager.default.copyItem(atPath: imports + "/incoming.tmp", toPath: scratch + "/db.sqlite")
            if FileManager.default.fileExists(atPath: path + "-wal") {
                let wal: Data
                do { wal = Data(try ForeignFile.read(path + "-wal", bytesMax: LegacySource.fileBytesMax, op: "import-legacy")) } catch let e as LogError {
                    throw LogbookError(.invalid, "\(path)-wal: \(e.message)", hint: e.hint)
                }
                if !wal.isEmpty {
                    try wal.write(to: URL(fileURLWithPath: scratch + "/db.sqlite-wal"))
                    try wal.write(to: URL(fileURLWithPath: imports + "/\(sha).sqlite-wal"))
                }
            }
            sqlite = try LegacySource.openSQLite(scratch + "/db.sqlite")
            return try LegacySource.sqliteTables(sqlite!)
        }
        let backup = imports + "/\(sha)." + (format == .jsonExport ? "json" : "sqlite")
        try Self.keep(imports + "/incoming.tmp", as: backup, sha: sha)

        // 2. Rows to events.
        let fileTime = ((try? FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date) ?? nil)
            .map(ISOTime.millis) ?? ISOTime.millis(Date())
        let now = ISOTime.millis(Date())
        let origin = ReplicaID(rawValue: UUIDv5.make(namespace: LegacyImporter.idNamespace, name: Array("\(LegacyImporter.mappingVersion):\(sha)".utf8)))
        var importer = LegacyImporter(format: format, fileTimeMillis: min(fileTime, now), nowMillis: now, report: LegacyImportReport(
            file: path, format: format.rawValue, sha256: sha, bytes: bytes, backup: backup, origin: origin.description, events: 0,
            alreadyHeld: 0, tables: [:], keptAside: [], orphans: [], adjusted: [], adjustedCount: 0, settingsImported: 0,
            settingsKept: 0, leftBehind: []))
        var tables: [String: LegacyTable] = [:]
        if let q = sqlite {
            let wanted = format == .v1SQLite ? LegacySource.v1Tables : LegacySource.syncedTables
            for name in wanted { tables[name] = try LegacySource.readSQLite(q, table: name, file: path, fileBytes: bytes) }
            importer.report.leftBehind = try LegacySource.sqliteTables(q)
                .filter { !wanted.contains($0) && !$0.hasPrefix("sqlite_") && $0 != "grdb_migrations" }.sorted()
        } else {
            let (read, leftBehind) = try LegacySource.readJSON(imports + "/\(sha).json")
            for t in read { tables[t.name] = t }
            importer.report.leftBehind = leftBehind
        }
        progress?("reading", 1, 1)
        let total = tables.values.reduce(0) { $0 + $1.rows.count }
        var done = 0
        func step() {
            done += 1
            if done % 10_000 == 0 { progress?("mapping", done, total) }
        }
        var ids: [String: Set<UUID>] = [:]
        if format == .v1SQLite {
            for r in tables["folders"]?.rows ?? [] {
                step()
                if let id = importer.row(r, table: "folders", entity: .item, renames: ["name": "title"], extra: [Field("item_type", .text("folder"))]) {
                    ids["items", default: []].insert(id)
                }
            }
            // Notes: each item's, in id order, joined by a blank line.
            var notes: [UUID: [(LegacyValue, String)]] = [:]
            var noteRows: [UUID: [LegacyRow]] = [:]
            let itemKeys = Set((tables["items"]?.rows ?? []).compactMap { $0["id"].flatMap { LegacyImporter.uuid($0, table: "items") } })
            for r in tables["notes"]?.rows ?? [] {
                step()
                importer.report.tables["notes", default: .init()].read += 1
                guard let item = r["item_id"].flatMap({ LegacyImporter.uuid($0, table: "items") }), itemKeys.contains(item) else {
                    importer.aside("notes", r, id: r["id"]?.display, "its item_id \(r["item_id"]?.display ?? "(none)") names no item of the file")
                    continue
                }
                guard case .text(let content)? = r["content"] else {
                    importer.aside("notes", r, id: r["id"]?.display, "content is not text")
                    continue
                }
                notes[item, default: []].append((r["id"] ?? .null, content))
                noteRows[item, default: []].append(r)
            }
            for r in tables["items"]?.rows ?? [] {
                step()
                var extra: [Field] = []
                let key = r["id"].flatMap { LegacyImporter.uuid($0, table: "items") }
                if let key, var list = notes[key] {
                    list.sort { Self.legacyOrder($0.0, $1.0) }
                    var text = list.map(\.1).joined(separator: "\n\n")
                    if case .text(let own)? = r["notes"], !own.isEmpty { text = own + "\n\n" + text }
                    extra.append(Field("notes", .text(text)))
                }
                if let id = importer.row(r, table: "items", entity: .item, renames: ["type": "item_type", "folder_id": "parent_id"], extra: extra) {
                    ids["items", default: []].insert(id)
                    importer.report.tables["notes", default: .init()].imported += noteRows[id]?.count ?? 0
                } else if let key, let n = noteRows[key] {
                    for nr in n { importer.aside("notes", nr, id: nr["id"]?.display, "its item was kept aside") }
                }
            }
        }
        let plain: [(String, Entity)] = format == .v1SQLite
            ? [("tags", .tag), ("item_tags", .itemTag)]
            : [("items", .item), ("tags", .tag), ("item_tags", .itemTag), ("time_entries", .timeEntry), ("saved_searches", .savedSearch)]
        for (table, entity) in plain {
            let before = done
            let mapped = importer.rows(tables[table]?.rows ?? [], table: table, entity: entity) { n in
                done = before + n
                progress?("mapping", done, total)
            }
            ids[table, default: []].formUnion(mapped)
        }
        for r in tables["app_settings"]?.rows ?? [] {
            if case .text(let k)? = r["key"] {
                let v = r["value"].map { LegacyImporter.plain($0) }
                if case .text(let s)? = v { importer.settings.append((k, s)) }
                else if let v, v != .null { importer.settings.append((k, Self.settingText(v))) }
            }
        }
        importer.noteOrphans(ids: ids)
        // The file's rows are mapped: freed on another thread, beside the work on one core that
        // follows (building the frames, receiving them, projecting), not at the end of the import.
        FreeAside.release(consume tables)
        FreeAside.release(consume ids)

        // 3. The import's origin: its frames, built the same way every time, received like a peer's.
        let builder = OriginFrameBuilder(origin: origin)
        importer.pending.sort { $0.millis != $1.millis ? $0.millis < $1.millis : $0.order < $1.order }
        for p in importer.pending { try builder.add(p.mutation, at: HLC(wallMillis: p.millis, counter: 0)) }
        var pending: [LegacyImporter.Pending] = []
        swap(&pending, &importer.pending)
        FreeAside.release(consume pending)
        var frames = builder.finish()
        // The builder holds the frames too: it is let go on the other thread now, and the frames
        // follow there once they are received (below).
        let built = builder.events
        FreeAside.release(consume builder)
        progress?("appending", 0, frames.count)
        var received = ReceiveResult()
        try w.exclusive {
            for start in stride(from: 0, to: frames.count, by: 64) {
                let r = try w.receive(Array(frames[start..<min(frames.count, start + 64)]), allowingUnsigned: true)
                received.frames += r.frames
                received.events += r.events
                received.alreadyHeld += r.alreadyHeld
                progress?("appending", min(frames.count, start + 64), frames.count)
            }
            // Received whole: freed on another thread while the projection catches up.
            var sent: [[UInt8]] = []
            swap(&sent, &frames)
            FreeAside.release(consume sent)
            try w.projection.catchUp { done, total in progress?("projecting", done, total) }
        }
        importer.report.events = received.events
        importer.report.alreadyHeld = built - received.events

        // 4. Device-local settings: only keys this store does not have yet.
        for (k, v) in importer.settings {
            if try w.projection.setting(k) == nil {
                try w.projection.setSetting(k, v)
                importer.report.settingsImported += 1
            } else {
                importer.report.settingsKept += 1
            }
        }
        let report = importer.report
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        try encoder.encode(report).write(to: URL(fileURLWithPath: imports + "/\(sha).report.json"), options: .atomic)
        return report
    }

    static func settingText(_ v: FieldValue) -> String {
        switch v {
        case .null: ""
        case .integer(let i): String(i)
        case .real(let d): "\(d)"
        case .text(let s): s
        case .boolean(let b): b ? "true" : "false"
        }
    }

    /// Id order of legacy rows: integers by value, then text.
    static func legacyOrder(_ a: LegacyValue, _ b: LegacyValue) -> Bool {
        switch (a, b) {
        case (.integer(let x), .integer(let y)): x < y
        case (.integer, _): true
        case (_, .integer): false
        case (.text(let x), .text(let y)): x < y
        default: false
        }
    }

    /// Copies `source` to `temp` while hashing it, syncs the copy, and reads it back to check it.
    /// - Returns: the SHA-256 (hex) and the size.
    static func copyHashing(from source: String, to temp: String) throws -> (String, Int) {
        // Only a regular file, opened without blocking (a FIFO would hang the import holding the
        // writer lock) and at most `LegacySource.fileBytesMax` bytes.
        let opened: (fd: Int32, size: Int)
        do { opened = try ForeignFile.openRegular(source, bytesMax: LegacySource.fileBytesMax, op: "import-legacy") } catch let e as LogError {
            throw LogbookError(.invalid, "\(source): \(e.message)", hint: e.hint)
        }
        let input = FileHandle(fileDescriptor: opened.fd, closeOnDealloc: true)
        defer { try? input.close() }
        try? FileManager.default.removeItem(atPath: temp)
        guard FileManager.default.createFile(atPath: temp, contents: nil), let output = FileHandle(forWritingAtPath: temp) else {
            throw LogbookError(.invalid, "\(temp): cannot be created")
        }
        var hash = SHA256()
        var bytes = 0
        do {
            while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty {
                // A file that grows while it is copied stops at the bound too.
                guard bytes + chunk.count <= LegacySource.fileBytesMax else {
                    throw LogbookError(.invalid, "\(source): grew past the \(LegacySource.fileBytesMax) bytes import-legacy reads while it was copied")
                }
                hash.update(data: chunk)
                try output.write(contentsOf: chunk)
                bytes += chunk.count
            }
            try output.synchronize()
            try output.close()
        } catch {
            try? output.close()
            throw LogbookError(.invalid, "copying \(source) into the store: \(error)")
        }
        let sha = hash.finalize().map { String(format: "%02x", $0) }.joined()
        guard try hashOf(temp) == sha else {
            throw LogbookError(.invalid, "\(temp): the copy of \(source) does not read back as written (SHA-256 differs); nothing was imported")
        }
        return (sha, bytes)
    }

    static func hashOf(_ path: String) throws -> String {
        guard let h = FileHandle(forReadingAtPath: path) else { throw LogbookError(.notFound, "\(path): cannot be opened") }
        defer { try? h.close() }
        var hash = SHA256()
        while let chunk = try h.read(upToCount: 1 << 20), !chunk.isEmpty { hash.update(data: chunk) }
        return hash.finalize().map { String(format: "%02x", $0) }.joined()
    }

    /// Moves the checked copy to its name, unless an intact backup of the same bytes is there.
    static func keep(_ temp: String, as backup: String, sha: String) throws {
        if FileManager.default.fileExists(atPath: backup), (try? hashOf(backup)) == sha {
            try? FileManager.default.removeItem(atPath: temp)
            return
        }
        guard rename(temp, backup) == 0 else {
            throw LogbookError(.invalid, "\(backup): cannot keep the backup (\(String(cString: strerror(errno))))")
        }
        try DurableFile.syncDirectory(of: backup, op: "import-legacy")
    }
}
