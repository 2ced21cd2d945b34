import CSQLiteGuard
import Foundation
import GRDB

/// Settings that keep an SQLite file from running code its author chose. Every connection
/// Logbook opens gets them; a connection to a file that came from elsewhere (a peer's
/// snapshot) also runs without triggers and views. See docs/SECURITY.md.
public enum SQLiteGuard {
    /// Hardens `db`: defensive mode and no extension loading; and, unless `allowTriggers` (for
    /// a file from elsewhere), untrusted schema, no triggers and no views.
    /// - Throws: `DatabaseError` when SQLite refuses one of the settings.
    public static func harden(_ db: Database, allowTriggers: Bool) throws {
        guard let connection = db.sqliteConnection else { return }
        let rc = logbook_sqlite_guard(UnsafeMutableRawPointer(connection), allowTriggers ? 1 : 0)
        guard rc == 0 else {
            throw DatabaseError(resultCode: ResultCode(rawValue: rc), message: "cannot harden the SQLite connection (defensive mode, untrusted schema)")
        }
    }

    /// A configuration whose connections are hardened (`harden`), for files Logbook itself writes.
    public static func configuration(_ base: Configuration = Configuration()) -> Configuration {
        var c = base
        c.prepareDatabase { db in try harden(db, allowTriggers: true) }
        return c
    }
}
