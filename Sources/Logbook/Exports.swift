// An app imports one module: the types the Logbook API speaks in (events, ids, cursors, rows,
// transfer summaries) come with it.
@_exported import Domain
@_exported import EventLog
@_exported import Projections
@_exported import Replicator
@_exported import LegacyImport
