#ifndef LOGBOOK_SQLITE_GUARD_H
#define LOGBOOK_SQLITE_GUARD_H

/// Sets the options of an open SQLite connection (a `sqlite3 *`) that keep a database file from
/// running code of its author's choosing: defensive mode (no writable schema, no shadow-table
/// writes, no fts3_tokenizer pointers) and no extension loading; and, when `allow_triggers` is 0
/// (a file from elsewhere), untrusted schema and no triggers and no views at all. Logbook's own
/// projection keeps its search index with triggers on an FTS5 table, which SQLite allows only
/// with a trusted schema. Returns 0 on success, else the SQLite result code of the failing call.
/// sqlite3_db_config is variadic, which Swift cannot call directly; this is why the shim exists.
int logbook_sqlite_guard(void *connection, int allow_triggers);

/// Lowers the connection's run-time limits: the largest string or blob (`length_max` bytes),
/// the longest SQL statement (`sql_length_max` bytes), and no attached database at all (ATTACH
/// fails until `logbook_sqlite_allow_attach` raises the limit for one named internal use).
/// Returns 0 on success.
int logbook_sqlite_limits(void *connection, int length_max, int sql_length_max);

/// Sets how many databases may be attached (0 or 1); returns the previous limit.
int logbook_sqlite_allow_attach(void *connection, int count);

#endif
