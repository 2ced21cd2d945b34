import EventLog
import LogbookServer
import Foundation
import Logbook
import Mustache
import Projections
import Replicator

/// The inspector's pages: each reads the store (projection, audit index, log) and renders a
/// template. Read-only: nothing here writes to the store. Every page is bounded (paginated),
/// so its cost does not grow with the log.
public final class InspectorSite: @unchecked Sendable {
    package let book: Logbook
    public let index: AuditIndex
    let library: MustacheLibrary
    /// Who owns each origin of a served store, for events that name no actor (attributed by
    /// ownership); read again when the owners' file changes.
    private let owners = OwnersFile()

    /// Page sizes: rows per page of each listing.
    static let logEventsMax = Bounds.logEventsPerPage
    static let entityEventsMax = Bounds.entityEventsPerPage
    static let conflictsPageMax = Bounds.conflictsPerPage
    static let anomaliesPageMax = Bounds.conflictsPerPage
    static let subtreeMax = Bounds.subtreeShownMax
    static let linksMax = Bounds.linksShownMax
    static let searchResultsMax = Bounds.searchResultsPerPage
    /// Characters of a value shown in a table cell; the rest is cut with a note.
    static let valueCharactersMax = Bounds.valueCharactersMax

    public init(reader: LogbookReader, index: AuditIndex) throws {
        book = reader.book
        self.index = index
        library = try Templates.library()
    }

    /// What every page shows around its content.
    public struct Chrome: Sendable {
        public var session: (principal: String, csrf: String)?
        public var query = ""
        /// The CSRF token the page's forms carry (a session's, or the open server's).
        public var csrf: String?
        /// Whether the caller may resolve conflicts (push this replica's origin).
        public var mayResolve = false
        /// Whether the caller sent a bearer token (not a cookie): a browser never does so on its own.
        public var bearer = false
        public init(session: (principal: String, csrf: String)? = nil, query: String = "", csrf: String? = nil, mayResolve: Bool = false, bearer: Bool = false) {
            self.session = session
            self.query = query
            self.csrf = csrf
            self.mayResolve = mayResolve
            self.bearer = bearer
        }
    }

    func render(_ template: String, title: String, page: String, chrome: Chrome, _ values: [String: Any]) -> String {
        var context = values
        context["title"] = title
        context["page"] = page
        context["store"] = book.path
        context["replica"] = book.replicaID.description
        context["query"] = chrome.query
        if let s = chrome.session, s.principal != "" { context["session"] = ["principal": s.principal, "csrf": s.csrf] }
        if chrome.mayResolve, let csrf = chrome.csrf { context["resolve"] = ["csrf": csrf] }
        if !index.isCaughtUp {
            context["indexing"] = ["indexed": (try? index.indexedEvents()) ?? 0, "total": (try? book.status().log.totalEvents) ?? 0]
        }
        return library.render(context, withTemplate: template) ?? ""
    }

    // MARK: Links

    static func query(_ pairs: [(String, String?)]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~:")
        let parts = pairs.compactMap { k, v -> String? in
            guard let v, !v.isEmpty else { return nil }
            return k + "=" + (v.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")
        }
        return parts.isEmpty ? "" : "?" + parts.joined(separator: "&")
    }

    static func entityLink(_ entity: String, _ id: String) -> String { "/ui/entity/\(entity)/\(id)" }
    static func originLink(_ origin: String) -> String { "/ui/log" + query([("origin", origin)]) }

    static func shown(_ text: String) -> String {
        guard text.count > valueCharactersMax else { return text }
        return String(text.prefix(valueCharactersMax)) + "… (\(text.count) characters in all)"
    }

    // MARK: Shares

    /// What `origin`'s log is to the pages: private data, or a share's sealed or membership log
    /// (with the share's name where this replica holds its key). `names` is read once per page.
    static func shareValues(_ store: Store, _ origin: ReplicaID, names: () -> [ShareID: String]) -> [String: Any] {
        let scope = (try? ShareDirectory.scope(ofLog: store, origin: origin)) ?? nil
        let share: ShareID, kind: String
        switch scope {
        case .sealed(let s)?: (share, kind) = (s, "sealed")
        case .membership(let s)?: (share, kind) = (s, "membership")
        case .privateData?, nil: return ["inShare": false, "signed": origin.isKeyDerived]
        }
        let name = names()[share]
        return ["inShare": true, "share": share.description, "shareShort": String(share.description.prefix(8)), "shareKind": kind,
                "shareName": name.map { shown($0) } ?? "", "hasShareName": name != nil, "signed": origin.isKeyDerived]
    }

    /// The names of the shares this replica holds the key of (others show by id only), read
    /// once per page and only when it shows a share's log.
    func shareNames() -> () -> [ShareID: String] {
        var known: [ShareID: String]?
        let store = book.store
        return {
            if let known { return known }
            let shares = (try? ShareDirectory.shares(store)) ?? [:]
            let found = shares.reduce(into: [ShareID: String]()) { out, s in if !s.value.name.isEmpty { out[s.key] = s.value.name } }
            known = found
            return found
        }
    }

    // MARK: Event rows

    /// Table rows for indexed events, with the fields each holds now.
    func eventRows(_ list: [IndexedEvent]) throws -> [[String: Any]] {
        let held = try book.projection.heldFields(list.map { ($0.entity, $0.entityID) })
        let owners = list.contains { $0.actor == nil } ? self.owners.all(in: book.store) : [:]  // once per page
        let names = shareNames()
        var kinds: [ReplicaID: [String: Any]] = [:]
        return list.map { ie in
            let origin = ie.origin.description
            let id = ie.entityID.lowercasedString
            let kind = kinds[ie.origin] ?? Self.shareValues(book.store, ie.origin, names: names)
            kinds[ie.origin] = kind
            return kind.merging([
                "time": ISOTime.string(ie.hlc), "origin": origin, "originLink": Self.originLink(origin), "seq": String(ie.seq.rawValue),
                "entity": ie.entity.name, "entityLink": "/ui/log" + Self.query([("entity", ie.entity.name)]),
                "id": id, "pageLink": Self.entityLink(ie.entity.name, id), "op": ie.op.name, "actor": ie.actor ?? owners[ie.origin].map { "\($0) (owner)" } ?? "",
                "eventID": ie.eventID.lowercasedString,
                "fields": ie.fields.map { ["name": $0.name, "value": $0.value] },
                "holds": held[ie.eventID] ?? [],
            ] as [String: Any]) { _, new in new }
        }
    }

    // MARK: Pages

    public func overview(_ chrome: Chrome) throws -> String {
        let status = try book.status()
        let indexed = try index.originEvents()
        let me = book.replicaID
        let ours = try book.cursor()
        let names = shareNames()
        let origins: [[String: Any]] = status.log.origins.map { o in
            Self.shareValues(book.store, o.origin, names: names).merging([
                "origin": o.origin.description, "logLink": Self.originLink(o.origin.description), "isLocal": o.origin == me, "signed": o.origin.isKeyDerived,
                "lastSeq": String(o.lastSeq.rawValue), "lastClock": o.lastSeq.rawValue == 0 ? "" : ISOTime.string(o.lastHLC),
                "events": String(indexed[o.origin] ?? 0), "segments": String(o.segments), "bytes": String(o.bytes),
            ] as [String: Any]) { _, new in new }
        }
        let peers: [[String: Any]] = status.peers.map { p in
            [
                "name": p.name, "lag": p.cursor.map { String($0.lag(behind: ours)) } ?? "unknown",
                "lastSync": p.lastSyncAt ?? "never", "pulled": String(p.pulledEvents), "pushed": String(p.pushedEvents),
                "lastError": p.lastError ?? "",
            ]
        }
        let chart = ActivityChart(hourly: try index.hourly())
        let series: [[String: Any]] = chart.series.map { s in
            ["origin": s.origin, "totalText": "\(s.total) event\(s.total == 1 ? "" : "s")", "peak": String(s.peak), "color": s.color,
             "bars": s.bars.map { ["x": $0.x, "y": $0.y, "width": $0.width, "height": $0.height, "title": $0.title] }]
        }
        let counts = try book.projection.conflictCounts()
        var values: [String: Any] = [
            "origins": origins, "peers": peers,
            "chart": ["from": chart.from, "to": chart.to, "bucket": chart.bucket, "width": String(chart.width), "height": String(chart.height), "series": series,
                      "seriesLeftOut": chart.seriesLeftOut > 0 ? String(chart.seriesLeftOut) : false],
            "conflictsOpen": String(counts.open), "conflictsAll": String(counts.all), "anomalies": String(try book.projection.anomalyCount()),
        ]
        if let v = book.lastVerify() {
            values["verify"] = ["at": v.at, "status": v.clean ? "ok" : "error", "summary": (v.clean ? "clean" : "problems found") + (v.deep ? " (deep)" : "") + ": " + v.summary]
        }
        return render("overview", title: "Overview", page: "overview", chrome: chrome, values)
    }

    /// `/ui/log?origin=&entity=&id=&since=&until=&before=`.
    public func log(_ params: [String: String], _ chrome: Chrome) throws -> String {
        var filter = TimelineFilter()
        if let o = params["origin"], !o.isEmpty {
            guard let id = ReplicaID(o) else { throw InspectorError("origin=\(o) is not a replica id (a UUID)", status: 400) }
            filter.origin = id
        }
        if let e = params["entity"], !e.isEmpty {
            guard let kind = Entity(name: e) else {
                throw InspectorError("entity=\(e) is not one of \(Entity.allCases.map(\.name).joined(separator: ", "))", status: 400)
            }
            filter.entity = kind
        }
        if let i = params["id"], !i.isEmpty {
            guard let id = UUID(uuidString: i) else { throw InspectorError("id=\(i) is not an id (a UUID)", status: 400) }
            filter.id = id
        }
        filter.sinceMillis = try Self.time(params["since"], name: "since")
        filter.untilMillis = try Self.time(params["until"], name: "until")
        var before: MergeKey?
        if let b = params["before"], !b.isEmpty {
            guard let k = MergeKey(b) else { throw InspectorError("before=\(b) is not a place in the log (HLC-ORIGIN-SEQ)", status: 400) }
            before = k
        }
        let (list, more) = try index.timeline(filter, before: before, limit: Self.logEventsMax)
        let base: [(String, String?)] = [("origin", filter.origin?.description), ("entity", filter.entity?.name), ("id", filter.id?.lowercasedString),
                                         ("since", params["since"]), ("until", params["until"])]
        var values: [String: Any] = [
            "filter": ["origin": filter.origin?.description ?? "", "id": filter.id?.lowercasedString ?? "",
                       "since": params["since"] ?? "", "until": params["until"] ?? ""],
            "entities": Entity.allCases.map { ["name": $0.name, "selected": $0 == filter.entity] as [String: Any] },
            "events": try eventRows(list), "shown": String(list.count),
        ]
        if more, let last = list.last { values["older"] = "/ui/log" + Self.query(base + [("before", MergeKey(last).description)]) }
        if before != nil { values["newest"] = "/ui/log" + Self.query(base) }
        return render("log", title: "Log", page: "log", chrome: chrome, values)
    }

    /// A date (`2026-01-31`, UTC) or a time (`2026-01-31T12:00:00Z`, ISO 8601) as Unix milliseconds.
    static func time(_ text: String?, name: String) throws -> UInt64? {
        guard let text, !text.isEmpty else { return nil }
        guard text.utf8.count <= 40, let ms = ISOTime.parse(text), ms >= 0 else {
            throw InspectorError("\(name)=\(text) is not a date (2026-01-31) or an ISO 8601 time (2026-01-31T12:00:00Z)", status: 400)
        }
        return UInt64(ms)
    }

    /// `/ui/entity/ENTITY/ID?after=`.
    public func entity(_ kindName: String, _ idText: String, after afterText: String?, _ chrome: Chrome) throws -> String {
        guard let kind = Entity(name: kindName) else {
            throw InspectorError("\(kindName) is not one of \(Entity.allCases.map(\.name).joined(separator: ", "))", status: 404)
        }
        guard let id = UUID(uuidString: idText) else { throw InspectorError("\(idText) is not an id (a UUID)", status: 404) }
        var after: MergeKey?
        if let a = afterText, !a.isEmpty {
            guard let k = MergeKey(a) else { throw InspectorError("after=\(a) is not a place in the log (HLC-ORIGIN-SEQ)", status: 400) }
            after = k
        }
        let idString = id.lowercasedString
        let (list, more) = try index.entityEvents(kind, id, after: after, limit: Self.entityEventsMax)
        let total = try index.entityEventCount(kind, id)
        let sources = try book.projection.fieldSources(entity: kind, id: id)
        var values: [String: Any] = ["events": try eventRows(list), "total": String(total), "shown": String(list.count),
                                     "firstShown": after == nil ? "the first" : "after \(after!.description)"]
        if let row = try book.projection.currentRow(entity: kind, id: id) {
            values["current"] = ["columns": row.map { c -> [String: Any] in
                var out: [String: Any] = ["column": c.column, "value": c.value.map(Self.shown) ?? "null"]
                if let s = sources[c.column] {
                    out["source"] = ["eventID": s.eventID.lowercasedString,
                                     "link": "/ui/log" + Self.query([("origin", s.origin.description), ("before", MergeKey(hlc: HLC(rawValue: s.hlc.rawValue &+ 1), origin: s.origin, seq: s.seq).description)])]
                }
                return out
            }]
        }
        values["conflicts"] = try book.projection.conflicts(entity: kind, id: id).map(Self.conflictRow)
        if more, let last = list.last {
            values["later"] = Self.entityLink(kind.name, idString) + Self.query([("after", MergeKey(last).description)])
        }
        if after != nil { values["first"] = Self.entityLink(kind.name, idString) }
        if kind == .item { values["item"] = try itemSections(id) }
        var title = "\(kind.name) \(idString)"
        if kind == .item, let t = try book.item(id)?.title { title = "item “\(Self.shown(t))” \(idString)" }
        return render("entity", title: title, page: "entity", chrome: chrome, values)
    }

    private func itemSections(_ id: UUID) throws -> [String: Any] {
        let idString = id.lowercasedString
        func label(_ r: ItemRow) -> String { r.title.map(Self.shown) ?? "(untitled)" }
        // The walk up stops after `Bounds.walkDepthMax` ancestors: then the farthest shown is not a root.
        let up = try book.projection.pathToRoot(idString)
        let pathCut = up.count > Bounds.walkDepthMax && up.last?.parentID != nil
        let path = up.reversed().map { ["link": Self.entityLink("item", $0.id), "label": label($0)] }
        let allTags = try book.projection.tags(of: [idString])[idString] ?? []
        let tags = allTags.prefix(Bounds.tagsShownMax).map {
            ["link": Self.entityLink("tag", $0.id), "name": $0.name ?? "(unnamed)", "id": $0.id]
        }
        let found = try book.projection.links(of: idString, limit: Self.linksMax + 1)
        let links = found.prefix(Self.linksMax).map { l -> [String: Any] in
            let outgoing = l.fromID == idString
            let other = (outgoing ? l.toID : l.fromID) ?? ""
            var out: [String: Any] = ["direction": outgoing ? "to" : "from", "other": other, "link": Self.entityLink("item", other),
                                      "kind": l.kind ?? "", "id": l.id, "selfLink": Self.entityLink("link", l.id)]
            if let label = l.label { out["label"] = label }
            if let w = l.weight { out["weight"] = String(w) }
            return out
        }
        let under = try book.projection.subtree(of: idString, limit: Self.subtreeMax + 1)
        let subtree = under.prefix(Self.subtreeMax).map {
            ["link": Self.entityLink("item", $0.id), "label": label($0), "id": $0.id, "depth": String($0.depth),
             "indent": String(repeating: "· ", count: max(0, min($0.depth - 1, 20)))]
        }
        return ["path": path, "pathCut": pathCut, "walkDepthMax": String(Bounds.walkDepthMax),
                "tags": Array(tags), "tagsMore": allTags.count > Bounds.tagsShownMax ? String(allTags.count - Bounds.tagsShownMax) : false,
                "links": Array(links), "linksMore": found.count > Self.linksMax, "linksMax": String(Self.linksMax),
                "subtree": Array(subtree),
                "subtreeMore": under.count > Self.subtreeMax, "subtreeMax": String(Self.subtreeMax)]
    }

    static func conflictRow(_ c: ConflictRow) -> [String: Any] {
        [
            "id": String(c.id), "entity": c.entity, "entityID": c.entityID, "entityLink": entityLink(c.entity, c.entityID), "field": c.field,
            "winnerValue": shown(c.winnerValue), "loserValue": shown(c.loserValue), "winnerEventID": c.winnerEventID, "loserEventID": c.loserEventID,
            "winnerOrigin": c.winnerOrigin, "loserOrigin": c.loserOrigin,
            "winnerOriginLink": originLink(c.winnerOrigin), "loserOriginLink": originLink(c.loserOrigin),
            "detectedAt": c.detectedAt, "resolvedBy": c.resolvedBy ?? "", "resolved": c.resolvedBy != nil,
        ]
    }

    /// Settles conflict `id`, keeping its winner's or its loser's value: an update appended
    /// through this store's writer (this Logbook when it is one, else one opened for the call).
    /// - Returns: the entity the conflict is on.
    func resolve(conflict id: Int64, keepWinner: Bool) throws -> (String, String) {
        guard let c = try book.projection.conflict(id) else { throw LogbookError(.notFound, "no conflict #\(id)") }
        let me = book.replicaID.description
        let localIsWinner = c.winnerOrigin == me || c.loserOrigin != me
        let side: ConflictSide = keepWinner == localIsWinner ? .local : .remote
        if book.access == .readWrite {
            try book.resolve(conflict: id, keep: side)
        } else {
            let writer = try Logbook.open(at: book.path, access: .readWrite)
            defer { try? writer.close() }
            try writer.resolve(conflict: id, keep: side)
        }
        return (c.entity, c.entityID)
    }

    static func afterID(_ text: String?) throws -> Int64 {
        guard let text, !text.isEmpty else { return 0 }
        guard let n = Int64(text), n >= 0 else { throw InspectorError("after=\(text) is not a row number", status: 400) }
        return n
    }

    /// `/ui/conflicts?after=`.
    public func conflicts(after text: String?, _ chrome: Chrome) throws -> String {
        let after = try Self.afterID(text)
        let rows = try book.projection.conflicts(afterID: after, limit: Self.conflictsPageMax + 1)
        let page = rows.prefix(Self.conflictsPageMax)
        let counts = try book.projection.conflictCounts()
        var values: [String: Any] = ["conflicts": page.map(Self.conflictRow), "open": String(counts.open), "all": String(counts.all), "shown": String(page.count)]
        if rows.count > Self.conflictsPageMax, let last = page.last { values["next"] = "/ui/conflicts?after=\(last.id)" }
        if after > 0 { values["first"] = "/ui/conflicts" }
        return render("conflicts", title: "Conflicts", page: "conflicts", chrome: chrome, values)
    }

    /// `/ui/anomalies?after=`.
    public func anomalies(after text: String?, _ chrome: Chrome) throws -> String {
        let after = try Self.afterID(text)
        let rows = try book.projection.anomalies(afterID: after, limit: Self.anomaliesPageMax + 1)
        let page = rows.prefix(Self.anomaliesPageMax)
        var values: [String: Any] = [
            "anomalies": page.map { a -> [String: Any] in
                ["id": String(a.id), "kind": a.kind, "entity": a.entity, "entityID": a.entityID, "entityLink": Self.entityLink(a.entity, a.entityID),
                 "attemptedOp": a.attemptedOp, "eventID": a.eventID, "otherID": a.otherID ?? "", "detectedAt": a.detectedAt, "details": a.details.map(Self.shown) ?? ""]
            },
            "all": String(try book.projection.anomalyCount()), "shown": String(page.count),
        ]
        if rows.count > Self.anomaliesPageMax, let last = page.last { values["next"] = "/ui/anomalies?after=\(last.id)" }
        if after > 0 { values["first"] = "/ui/anomalies" }
        return render("anomalies", title: "Anomalies", page: "anomalies", chrome: chrome, values)
    }

    /// `/ui/search?q=`: items by full-text search of titles and notes; an id goes to its item.
    public func search(_ q: String?, _ chrome: Chrome) throws -> String {
        var chrome = chrome
        let text = String((q ?? "").prefix(200))
        chrome.query = text
        var values: [String: Any] = [:]
        if !text.trimmingCharacters(in: .whitespaces).isEmpty {
            let found = try book.projection.items(search: text, includeDeleted: true, limit: Self.searchResultsMax + 1)
            let page = found.prefix(Self.searchResultsMax)
            values["results"] = page.map { r -> [String: Any] in
                ["link": Self.entityLink("item", r.id), "title": r.title.map(Self.shown) ?? "(untitled)", "id": r.id,
                 "deleted": r.deletedAt != nil, "notes": r.notes.map { String($0.prefix(200)) } ?? ""]
            }
            values["asked"] = ["count": String(page.count), "more": found.count > Self.searchResultsMax, "query": text]
            if let id = UUID(uuidString: text.trimmingCharacters(in: .whitespaces)), let item = try book.item(id) {
                values["idMatch"] = ["link": Self.entityLink("item", item.id), "label": item.title.map(Self.shown) ?? item.id]
            }
        }
        return render("search", title: text.isEmpty ? "Search" : "Search: \(text)", page: "search", chrome: chrome, values)
    }

    public func login(error: String?, next: String) -> String {
        var values: [String: Any] = ["next": next]
        if let error { values["error"] = error }
        return render("login", title: "Sign in", page: "login", chrome: Chrome(), values)
    }

    public func problem(_ message: String, chrome: Chrome) -> String {
        render("problem", title: "Cannot show this page", page: "problem", chrome: chrome, ["message": message])
    }
}

/// `OriginOwners` of a store as pages read them: loaded when the file changes (size or time),
/// so a claim made by the server shows without reading the file on every page.
final class OwnersFile: @unchecked Sendable {
    private let lock = Lock()
    private var stamp: [Int]?
    private var owners: [ReplicaID: String] = [:]

    func all(in store: Store) -> [ReplicaID: String] {
        let path = store.layout.originOwners
        // The file and its WAL (a claim is committed to the WAL first).
        let now = [path, path + "-wal"].flatMap { p -> [Int] in
            let attrs = try? FileManager.default.attributesOfItem(atPath: p)
            // The time in microseconds, held (a file's time may be any `Double`).
            let us = ((attrs?[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0) * 1e6
            return [attrs?[.size] as? Int ?? -1, us.isNaN ? 0 : us >= 0x1p62 ? 1 << 62 : us <= -0x1p62 ? -(1 << 62) : Int(us)]
        }
        return lock.withLock {
            if stamp == nil || stamp! != now {
                // Read-only: a page never writes. A file that cannot be read shows no owner (the
                // event's actor cell stays empty, as it is for an origin nobody owns).
                owners = (try? OriginOwners.read(store: store)) ?? [:]
                stamp = now
            }
            return owners
        }
    }
}
