import Foundation
import TestSupport
@testable import EventLog
@testable import Projections

/// A projection in a fresh store directory.
func makeProjection(_ dir: TempDir, name: String = "s", schema: ProjectionSchema = .current) throws -> (Store, Projection) {
    let store = try Store.create(at: dir.path + "/" + name)
    return (store, try Projection(store: store, schema: schema))
}

/// Builds events by hand for several origins (as if received from other replicas).
struct EventFactory {
    var seqs: [ReplicaID: UInt64] = [:]

    mutating func make(_ origin: ReplicaID, hlc: UInt64, _ entity: Entity, _ op: Op, _ id: UUID, _ fields: [Field] = [], base: UInt64? = nil) -> Event {
        let seq = (seqs[origin] ?? 0) + 1
        seqs[origin] = seq
        let m = Mutation(entity: entity, op: op, entityID: id, fields: fields, base: base.map { HLC(rawValue: $0) })
        return Event(origin: origin, seq: Seq(seq), hlc: HLC(rawValue: hlc), mutation: m)
    }
}

func hlc(_ ms: UInt64, _ c: UInt16 = 0) -> UInt64 { HLC(wallMillis: 1_767_225_600_000 + ms, counter: c).rawValue }

let originA = ReplicaID("aaaaaaaa-0000-4000-8000-000000000001")!
let originB = ReplicaID("bbbbbbbb-0000-4000-8000-000000000002")!
let originC = ReplicaID("cccccccc-0000-4000-8000-000000000003")!

func text(_ s: String) -> FieldValue { .text(s) }
