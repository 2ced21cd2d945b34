// What `import Logbook` brings: the vocabulary the door speaks in, declaration by declaration
// (values, rows, changes, ids, cursors, peers, reports, errors), and nothing of the layers below
// (the appender, the projector, the transports). Code of this repository that works below the
// door imports those modules itself.

// The log's vocabulary: events and what they carry, ids, results and reports.
@_exported import struct EventLog.AppendResult
@_exported import struct EventLog.Entity
@_exported import struct EventLog.Event
@_exported import struct EventLog.Field
@_exported import enum EventLog.FieldValue
@_exported import struct EventLog.HLC

@_exported import struct EventLog.LogError
@_exported import struct EventLog.Mutation
@_exported import struct EventLog.Op
@_exported import struct EventLog.ReceiveResult
@_exported import struct EventLog.RecoveryReport
@_exported import struct EventLog.ReplicaID
@_exported import struct EventLog.ReplicaPublicKey
@_exported import struct EventLog.ShareID
@_exported import struct EventLog.MemberCard
@_exported import struct EventLog.Seq
@_exported import struct EventLog.StoreLayout
@_exported import struct EventLog.StoreStatus
@_exported import struct EventLog.VerifyReport

// Ids every replica derives alike.
@_exported import enum Domain.UUIDv5
@_exported import struct Domain.InputError

// Rows the projection answers with, and its change notifications.
@_exported import struct Projections.AnomalyRow
@_exported import struct Projections.ConflictRow
@_exported import enum Projections.LinkDirection
@_exported import struct Projections.LinkRow
@_exported import struct Projections.LinkedItem
@_exported import struct Projections.ProjectionChange
@_exported import struct Projections.UnreadEvents
@_exported import enum Projections.ProjectionError

// Peers, cursors and what an exchange reports.
@_exported import struct Replicator.PageLimits

@_exported import class Replicator.PeerState
@_exported import struct Replicator.BundleError
@_exported import struct Replicator.CursorTokenError
@_exported import struct Replicator.ReplicationCursor
@_exported import struct Replicator.RetryPolicy
@_exported import struct Replicator.TransferFailure
@_exported import struct Replicator.TransferProgress
@_exported import struct Replicator.TransferSummary
@_exported import struct Replicator.LiveSync
@_exported import enum Replicator.FrameBundle
@_exported import enum Replicator.Compactor

// What a legacy import reports.
@_exported import struct LegacyImport.LegacyImportReport
