import Domain
import EventLog
import GRDB

/// A projected table: which entity fills it and which fields become columns.
/// Every table also has `id`, `version`, `created_at`, `modified_at`, `deleted_at` and `_clocks`.
public struct ProjectedTable: Sendable {
    public var name: String
    public var entity: Entity
    /// Field names that are columns, in column order.
    public var columns: [String]

    public init(name: String, entity: Entity, columns: [String]) {
        self.name = name
        self.entity = entity
        self.columns = columns
    }
}

/// The projection's tables and migrations. A newer schema may add columns for fields the log
/// already holds: they appear after `rebuild`.
public struct ProjectionSchema: Sendable {
    public var tables: [ProjectedTable]
    /// Named migrations, applied in order; never edited once shipped.
    public var migrations: [(name: String, sql: String)]

    public func table(for entity: Entity) -> ProjectedTable? { tables.first { $0.entity == entity } }

    /// The schema this build ships: the named migrations below, then one migration per column
    /// DomainSchema declares that they do not create (`columnMigrations`), so a new field is one
    /// line in DomainSchema.
    public static let current: ProjectionSchema = {
        let tables = DomainSchema.entities.map { ProjectedTable(name: $0.table, entity: $0.entity, columns: $0.columns) }
        // Column migrations come last. Before a named migration is added after one of them has
        // shipped, copy the shipped column migrations (name and SQL) into `named`, in place: a
        // snapshot is matched to a build by its prefix of migrations.
        return ProjectionSchema(tables: tables, migrations: named + columnMigrations(tables, after: named))
    }()

    /// The prefix of the migrations made from DomainSchema (`column items.energy`).
    public static let columnMigrationPrefix = "column "

    /// For each declared column the named migrations leave out (found by running them in a
    /// private in-memory database), `ALTER TABLE … ADD COLUMN`, named `column <table>.<column>`.
    /// Its values fill in when the projection is rebuilt: applied to a projection that has
    /// applied events, the migration notes a rebuild owed (`projection_owed_rebuild`), which the
    /// next writer to open the store makes.
    public static func columnMigrations(_ tables: [ProjectedTable], after named: [(name: String, sql: String)]) -> [(name: String, sql: String)] {
        do {
            let q = try SQLiteFactory.queue(nil, .ours)
            defer { try? q.close() }
            var m = DatabaseMigrator()
            for (name, sql) in named { m.registerMigration(name) { db in try db.execute(sql: sql) } }
            try m.migrate(q)
            return try q.read { db in
                var out: [(name: String, sql: String)] = []
                for t in tables where try db.tableExists(t.name) {
                    let have = Set(try db.columns(in: t.name).map(\.name))
                    for c in t.columns where !have.contains(c) {
                        let type: String
                        switch DomainSchema.fieldRules[c]?.kind {
                        case .number?, .integer?: type = "NUMERIC"
                        case .boolean?: type = "INTEGER"
                        default: type = "TEXT"
                        }
                        let name = "\(columnMigrationPrefix)\(t.name).\(c)"
                        // A projection that has applied events owes a rebuild to fill the column.
                        out.append((name, """
                            ALTER TABLE \(SQLiteFactory.quote(t.name)) ADD COLUMN \(SQLiteFactory.quote(c)) \(type);
                            CREATE TABLE IF NOT EXISTS projection_owed_rebuild (reason TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID;
                            INSERT OR IGNORE INTO projection_owed_rebuild SELECT '\(name.replacingOccurrences(of: "'", with: "''"))' WHERE EXISTS (SELECT 1 FROM projection_cursor);
                            """))
                    }
                }
                return out
            }
        } catch {
            // Only this build's own SQL in memory. Should it fail (no memory), no column is added
            // here, and the projector names the missing column when it writes one.
            return []
        }
    }

    /// The migration that added share scopes, also the reason of the rebuild it may owe.
    public static let shareScopesMigration = "v5 share scopes"

    /// Named migrations, applied in order; never edited once shipped.
    static let named: [(name: String, sql: String)] = [
            ("v1 entity tables", """
                CREATE TABLE items (
                    id TEXT PRIMARY KEY NOT NULL, parent_id TEXT, title TEXT, notes TEXT, status TEXT, item_type TEXT,
                    sort_order NUMERIC, due_at TEXT, earliest_start_at TEXT, completed_at TEXT, recurrence_rule TEXT,
                    version INTEGER NOT NULL, created_at TEXT, modified_at TEXT NOT NULL, deleted_at TEXT, _clocks BLOB NOT NULL);
                CREATE INDEX items_parent ON items(parent_id) WHERE parent_id IS NOT NULL;
                CREATE TABLE tags (
                    id TEXT PRIMARY KEY NOT NULL, name TEXT, color TEXT,
                    version INTEGER NOT NULL, created_at TEXT, modified_at TEXT NOT NULL, deleted_at TEXT, _clocks BLOB NOT NULL) WITHOUT ROWID;
                CREATE TABLE item_tags (
                    id TEXT PRIMARY KEY NOT NULL, item_id TEXT, tag_id TEXT,
                    version INTEGER NOT NULL, created_at TEXT, modified_at TEXT NOT NULL, deleted_at TEXT, _clocks BLOB NOT NULL) WITHOUT ROWID;
                CREATE INDEX item_tags_pair ON item_tags(item_id, tag_id);
                CREATE TABLE time_entries (
                    id TEXT PRIMARY KEY NOT NULL, item_id TEXT, started_at TEXT, ended_at TEXT, duration_seconds NUMERIC,
                    version INTEGER NOT NULL, created_at TEXT, modified_at TEXT NOT NULL, deleted_at TEXT, _clocks BLOB NOT NULL) WITHOUT ROWID;
                CREATE INDEX time_entries_item ON time_entries(item_id);
                CREATE TABLE saved_searches (
                    id TEXT PRIMARY KEY NOT NULL, name TEXT, query TEXT, sort_order NUMERIC,
                    version INTEGER NOT NULL, created_at TEXT, modified_at TEXT NOT NULL, deleted_at TEXT, _clocks BLOB NOT NULL) WITHOUT ROWID;
                CREATE TABLE completion_history (
                    id TEXT PRIMARY KEY NOT NULL, item_id TEXT, original_occurrence_date TEXT, occurrence_date TEXT,
                    completed_at TEXT, notes TEXT,
                    version INTEGER NOT NULL, created_at TEXT, modified_at TEXT NOT NULL, deleted_at TEXT, _clocks BLOB NOT NULL) WITHOUT ROWID;
                CREATE INDEX completion_occurrence ON completion_history(item_id, original_occurrence_date);
                CREATE TABLE recurrence_exceptions (
                    id TEXT PRIMARY KEY NOT NULL, item_id TEXT, original_occurrence_date TEXT, kind TEXT,
                    rescheduled_to TEXT, due_at TEXT, notes TEXT,
                    version INTEGER NOT NULL, created_at TEXT, modified_at TEXT NOT NULL, deleted_at TEXT, _clocks BLOB NOT NULL) WITHOUT ROWID;
                CREATE INDEX exception_occurrence ON recurrence_exceptions(item_id, original_occurrence_date);
                """),
            ("v1 bookkeeping", """
                CREATE TABLE projection_cursor (origin TEXT PRIMARY KEY NOT NULL, last_seq INTEGER NOT NULL);
                CREATE TABLE projection_origins (idx INTEGER PRIMARY KEY, origin TEXT NOT NULL UNIQUE);
                CREATE TABLE conflicts (
                    id INTEGER PRIMARY KEY, entity TEXT NOT NULL, entity_id TEXT NOT NULL, field TEXT NOT NULL,
                    winner_value TEXT, loser_value TEXT, winner_event_id TEXT NOT NULL, loser_event_id TEXT NOT NULL,
                    winner_origin TEXT NOT NULL, loser_origin TEXT NOT NULL, winner_hlc INTEGER NOT NULL, loser_hlc INTEGER NOT NULL,
                    detected_at TEXT NOT NULL, resolved_by TEXT,
                    UNIQUE (winner_event_id, loser_event_id, field));
                CREATE INDEX conflicts_entity ON conflicts(entity, entity_id, field);
                CREATE TABLE sync_anomalies (
                    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, entity TEXT NOT NULL, entity_id TEXT NOT NULL,
                    item_id TEXT, original_occurrence_date TEXT, attempted_op TEXT NOT NULL,
                    event_id TEXT NOT NULL, other_event_id TEXT, correlation_id TEXT NOT NULL, detected_at TEXT NOT NULL, details TEXT,
                    UNIQUE (kind, entity_id, other_event_id));
                CREATE TABLE app_settings (key TEXT PRIMARY KEY NOT NULL, value TEXT);
                """),
            ("v1 item search", """
                CREATE VIRTUAL TABLE items_fts USING fts5(
                    title, notes, content='items', content_rowid='rowid',
                    tokenize='unicode61 remove_diacritics 2', detail=column);
                CREATE TRIGGER items_fts_insert AFTER INSERT ON items BEGIN
                    INSERT INTO items_fts(rowid, title, notes) VALUES (new.rowid, new.title, new.notes);
                END;
                CREATE TRIGGER items_fts_delete AFTER DELETE ON items BEGIN
                    INSERT INTO items_fts(items_fts, rowid, title, notes) VALUES ('delete', old.rowid, old.title, old.notes);
                END;
                CREATE TRIGGER items_fts_update AFTER UPDATE OF title, notes ON items
                WHEN old.title IS NOT new.title OR old.notes IS NOT new.notes BEGIN
                    INSERT INTO items_fts(items_fts, rowid, title, notes) VALUES ('delete', old.rowid, old.title, old.notes);
                    INSERT INTO items_fts(rowid, title, notes) VALUES (new.rowid, new.title, new.notes);
                END;
                """),
            // The order commits applied events in, for watchers in other processes (ProjectionWatcher):
            // one row per run of consecutive seqs of one origin, in the order applied. Local to this
            // file (never carried by a snapshot), pruned to the last `Projector.journalRowsMax` rows.
            ("v2 commit journal", """
                CREATE TABLE projection_commits (
                    id INTEGER PRIMARY KEY, origin TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL);
                """),
            // Seed 001's item fields (priority, importance, a place) and indexes for the seeds'
            // common queries: what is due, what was completed, what changed since.
            ("v3 priority, place, query indexes", """
                ALTER TABLE items ADD COLUMN priority NUMERIC;
                ALTER TABLE items ADD COLUMN importance NUMERIC;
                ALTER TABLE items ADD COLUMN location_name TEXT;
                ALTER TABLE items ADD COLUMN location_address TEXT;
                ALTER TABLE items ADD COLUMN latitude NUMERIC;
                ALTER TABLE items ADD COLUMN longitude NUMERIC;
                CREATE INDEX items_due ON items(due_at) WHERE due_at IS NOT NULL AND deleted_at IS NULL;
                CREATE INDEX items_completed ON items(completed_at) WHERE completed_at IS NOT NULL;
                CREATE INDEX items_modified ON items(modified_at);
                """),
            // Event schema version 2: links between items, with an index for each direction (the
            // traversal reads links that are not deleted); the count of events this build did not
            // understand entirely (a newer build's), so an upgraded build rebuilds; and which
            // position holds each writer-supplied event id, so one id carried by two different
            // events is recorded as a sync anomaly (docs/PROJECTION.md, "Anomalies").
            ("v4 links, unread events, event ids, purged rows", """
                CREATE TABLE links (
                    id TEXT PRIMARY KEY NOT NULL, from_id TEXT, to_id TEXT, kind TEXT, weight NUMERIC, label TEXT,
                    version INTEGER NOT NULL, created_at TEXT, modified_at TEXT NOT NULL, deleted_at TEXT, _clocks BLOB NOT NULL) WITHOUT ROWID;
                CREATE INDEX links_from ON links(from_id, kind, to_id) WHERE deleted_at IS NULL;
                CREATE INDEX links_to ON links(to_id, kind, from_id) WHERE deleted_at IS NULL;
                CREATE TABLE projection_unread (
                    entity INTEGER NOT NULL, op INTEGER NOT NULL, schema_version INTEGER NOT NULL, events INTEGER NOT NULL,
                    PRIMARY KEY (entity, op, schema_version)) WITHOUT ROWID;
                CREATE TABLE projection_event_ids (
                    event_id TEXT NOT NULL, origin TEXT NOT NULL, seq INTEGER NOT NULL, hlc INTEGER NOT NULL,
                    digest INTEGER NOT NULL, entity INTEGER NOT NULL, entity_id TEXT NOT NULL, op INTEGER NOT NULL,
                    PRIMARY KEY (event_id, origin, seq)) WITHOUT ROWID;
                CREATE TABLE projection_purged (
                    tbl TEXT NOT NULL, id TEXT NOT NULL, version INTEGER NOT NULL, deleted_at TEXT NOT NULL, _clocks BLOB NOT NULL,
                    PRIMARY KEY (tbl, id)) WITHOUT ROWID;
                """),
            // Which share each row of a share's events belongs to (docs/PROJECTION.md, "Shares"): a
            // row it does not name is private. A projection that applied events was filled before
            // the scope rule: it owes a rebuild, unless its store never held a share's frame (a
            // writer that opens it then drops the debt, `ProjectedStore`).
            ("v5 share scopes", """
                CREATE TABLE projection_scopes (
                    tbl TEXT NOT NULL, id TEXT NOT NULL, share TEXT NOT NULL, PRIMARY KEY (tbl, id)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS projection_owed_rebuild (reason TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID;
                INSERT OR IGNORE INTO projection_owed_rebuild SELECT '\(shareScopesMigration)' WHERE EXISTS (SELECT 1 FROM projection_cursor);
                """),
        ]

    /// A migrator with every migration of this schema.
    public func migrator() -> DatabaseMigrator { migrator(upTo: migrations.count) }

    /// A migrator with the first `count` migrations: the schema an older build made.
    public func migrator(upTo count: Int) -> DatabaseMigrator {
        var m = DatabaseMigrator()
        for (name, sql) in migrations.prefix(count) {
            m.registerMigration(name) { db in try db.execute(sql: sql) }
        }
        return m
    }
}
