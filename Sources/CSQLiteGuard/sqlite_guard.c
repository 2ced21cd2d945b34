#include <sqlite3.h>
#include "sqlite_guard.h"

int logbook_sqlite_guard(void *connection, int allow_triggers) {
    sqlite3 *db = (sqlite3 *)connection;
    int on = 0, rc;
    if ((rc = sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, &on)) != SQLITE_OK || on != 1) return rc ? rc : SQLITE_ERROR;
    if ((rc = sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, &on)) != SQLITE_OK || on != 0) return rc ? rc : SQLITE_ERROR;
    if (!allow_triggers) {
        if ((rc = sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, &on)) != SQLITE_OK || on != 0) return rc ? rc : SQLITE_ERROR;
        if ((rc = sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, &on)) != SQLITE_OK || on != 0) return rc ? rc : SQLITE_ERROR;
        if ((rc = sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, &on)) != SQLITE_OK || on != 0) return rc ? rc : SQLITE_ERROR;
    }
    return SQLITE_OK;
}

int logbook_sqlite_limits(void *connection, int length_max, int sql_length_max) {
    sqlite3 *db = (sqlite3 *)connection;
    sqlite3_limit(db, SQLITE_LIMIT_LENGTH, length_max);
    sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, sql_length_max);
    sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
    if (sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1) != length_max) return SQLITE_ERROR;
    if (sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, -1) != sql_length_max) return SQLITE_ERROR;
    if (sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, -1) != 0) return SQLITE_ERROR;
    return SQLITE_OK;
}

int logbook_sqlite_allow_attach(void *connection, int count) {
    return sqlite3_limit((sqlite3 *)connection, SQLITE_LIMIT_ATTACHED, count);
}
