import EventLog
import LogbookServer
import Foundation
import HTTPTypes
import Hummingbird
import Logbook
import Logging
import NIOCore
import Replicator
import ServiceLifecycle

/// Audit inspection in the browser: read-only pages under `/ui/` (docs/INSPECT.md).
///
/// | route | page |
/// |---|---|
/// | `GET /ui/` | origins, events over time, peers, the last verify |
/// | `GET /ui/log?origin=&entity=&id=&since=&until=&before=` | the timeline, newest first |
/// | `GET /ui/entity/ENTITY/ID?after=` | one entity: now, its conflicts, its events in merge order |
/// | `GET /ui/conflicts?after=`, `GET /ui/anomalies?after=` | what the merge settled or set aside |
/// | `GET /ui/search?q=` | items by full-text search |
/// | `GET`/`POST /ui/login`, `POST /ui/logout` | sign in with a token (kept as a session cookie), sign out |
/// | `POST /ui/conflicts/ID/resolve` | keep a conflict's winner or loser (push right and CSRF token) |
///
/// With a tokens file every page needs a token that may pull (and is not scoped to a user):
/// `Authorization: Bearer`, or the session cookie `/ui/login` sets. Without one (loopback only)
/// the pages are open. Any other method on a page is refused (405, `Allow: GET`).
public final class Inspector: Sendable {
    public let site: InspectorSite
    let policies: PolicySource
    let sessions = InspectorSessions()
    /// The CSRF token of a server without tokens (no sessions): a page's forms carry it, and a
    /// page of another site cannot read it.
    let openCSRF = InspectorSessions.randomToken()
    /// Cookies only over TLS when the server speaks it.
    let secureCookies: Bool
    let logger: Logger

    public static let cookieName = "logbook_ui"
    /// Bytes of a sign-in form; a token is at most 512.
    static let formBytesMax = 4096

    public init(site: InspectorSite, policies: PolicySource, secureCookies: Bool = false, logger: Logger = Logger(label: "evctl.inspect")) {
        self.site = site
        self.policies = policies
        self.secureCookies = secureCookies
        self.logger = logger
    }

    /// An inspector of the store `reader` reads: its audit index opened (or built) in the store.
    public static func open(reader: LogbookReader, policies: PolicySource, secureCookies: Bool = false,
                            logger: Logger = Logger(label: "evctl.inspect")) throws -> Inspector {
        let index = try AuditIndex(store: reader.book.store, logger: logger)
        return Inspector(site: try InspectorSite(reader: reader, index: index), policies: policies, secureCookies: secureCookies, logger: logger)
    }

    /// Keeps the audit index caught up with the log while the server runs.
    public var indexer: some Service { AuditIndexer(index: site.index, logger: logger) }

    // MARK: Responses

    static let securityHeaders: HTTPFields = [
        .contentSecurityPolicy: "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        .cacheControl: "no-store",
        HTTPField.Name("X-Content-Type-Options")!: "nosniff",
        HTTPField.Name("Referrer-Policy")!: "same-origin",
        HTTPField.Name("X-Frame-Options")!: "DENY",
    ]

    static func html(_ status: HTTPResponse.Status, _ text: String) -> Response {
        var headers = securityHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func redirect(_ location: String) -> Response {
        var headers = securityHeaders
        headers[.location] = location
        return Response(status: .seeOther, headers: headers)
    }

    // MARK: Who is asking

    enum Caller {
        case allowed(InspectorSite.Chrome)
        case refused(Response)
    }

    /// The caller of a page: open, a bearer token, or a session cookie; anyone else is sent to sign in.
    func caller(_ request: Request) -> Caller {
        let policy = policies.current
        if policy.isOpen { return .allowed(InspectorSite.Chrome(csrf: openCSRF, mayResolve: true)) }
        var header = request.headers[.authorization]
        var session: (id: String, InspectorSessions.Session)?
        if header == nil, let id = request.cookies[Self.cookieName]?.value, let s = sessions.session(id) {
            header = "Bearer " + s.token
            session = (id, s)
        }
        guard header != nil else {
            if request.method == .get {
                let next = request.uri.path + (request.uri.query.map { "?" + $0 } ?? "")
                return .refused(Self.redirect("/ui/login" + InspectorSite.query([("next", Self.safeNext(next))])))
            }
            return .refused(Self.html(.unauthorized, site.login(error: "Sign in first.", next: "/ui/")))
        }
        switch policy.authenticate(authorization: header) {
        case .failure(let denied):
            if let session { sessions.close(session.id) }
            var r = Self.html(HTTPResponse.Status(code: denied.status), site.login(error: session == nil ? denied.message : "Your session's token is no longer valid; sign in again.", next: "/ui/"))
            r.headers[.wwwAuthenticate] = "Bearer realm=\"logbook\""
            return .refused(r)
        case .success(let p):
            if let d = AccessPolicy.checkPull(p) { return .refused(Self.html(.forbidden, site.problem(d.message, chrome: .init()))) }
            if p.user != nil {
                return .refused(Self.html(.forbidden, site.problem("principal \"\(p.name)\" is scoped to user \(p.user!); the inspector shows the whole store, so it needs a principal without a user", chrome: .init())))
            }
            // Resolving a conflict appends an event of this replica: it needs the right to push it.
            let mayResolve = p.push.allows(site.book.replicaID)
            return .allowed(InspectorSite.Chrome(session: session.map { (p.name, $0.1.csrf) }, csrf: session?.1.csrf,
                                                 mayResolve: mayResolve, bearer: session == nil))
        }
    }

    /// Where to go after signing in: a page of the inspector, never another site.
    static func safeNext(_ next: String?) -> String {
        guard let next, next.hasPrefix("/ui/") || next == "/ui", !next.hasPrefix("//"), !next.contains("\\"),
              next.utf8.count <= 2048, next.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f }) else { return "/ui/" }
        return next
    }

    /// A page: the caller checked, the index caught up with what arrived since (a little at a
    /// time; the indexer does the rest), the page rendered, its errors shown as pages.
    func page(_ request: Request, _ body: @escaping (InspectorSite.Chrome) throws -> String) async -> Response {
        switch caller(request) {
        case .refused(let r): return r
        case .allowed(let chrome):
            do {
                _ = try site.index.catchUp(limit: AuditIndexer.requestEventsMax, wait: false)
                return Self.html(.ok, try body(chrome))
            } catch let e as InspectorError {
                return Self.html(HTTPResponse.Status(code: e.status), site.problem(e.message, chrome: chrome))
            } catch {
                logger.error("inspector page \(request.uri.path) failed: \(error)")
                return Self.html(.internalServerError, site.problem("This page could not be read from the store: \(error)", chrome: chrome))
            }
        }
    }

    static func parameters(_ request: Request) throws -> [String: String] {
        guard (request.uri.query?.utf8.count ?? 0) <= 4096 else { throw InspectorError("the query is longer than 4096 bytes", status: 414) }
        var out: [String: String] = [:]
        for (k, v) in request.uri.queryParameters {
            // A NUL would end the text SQLite is given (GRDB binds strings up to it).
            guard !k.utf8.contains(0), !v.utf8.contains(0) else {
                throw InspectorError("the query parameter \(printable(String(k), limit: 40)) contains a NUL character (U+0000)", status: 400)
            }
            out[String(k)] = String(v)
        }
        return out
    }

    // MARK: Routes

    /// Adds the pages to `router`.
    public func install<Context: RequestContext>(on router: Router<Context>) {
        let pages = ["ui", "ui/log", "ui/entity/{entity}/{id}", "ui/conflicts", "ui/anomalies", "ui/search", "ui/style.css"]
        // "/ui" and "/ui/" are one path to the router.
        router.get("ui/") { request, _ in await self.page(request) { try self.site.overview($0) } }
        router.get("ui/log") { request, _ in
            await self.page(request) { try self.site.log(try Self.parameters(request), $0) }
        }
        router.get("ui/entity/{entity}/{id}") { request, context in
            let entity = context.parameters.get("entity") ?? ""
            let id = context.parameters.get("id") ?? ""
            return await self.page(request) { try self.site.entity(entity, id, after: try Self.parameters(request)["after"], $0) }
        }
        router.get("ui/conflicts") { request, _ in
            await self.page(request) { try self.site.conflicts(after: try Self.parameters(request)["after"], $0) }
        }
        router.get("ui/anomalies") { request, _ in
            await self.page(request) { try self.site.anomalies(after: try Self.parameters(request)["after"], $0) }
        }
        router.get("ui/search") { request, _ in
            await self.page(request) { try self.site.search(try Self.parameters(request)["q"], $0) }
        }
        router.get("ui/style.css") { _, _ in
            var headers = Self.securityHeaders
            headers[.contentType] = "text/css; charset=utf-8"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: Templates.style)))
        }
        router.get("ui/login") { request, _ in
            if self.policies.current.isOpen { return Self.redirect("/ui/") }
            return Self.html(.ok, self.site.login(error: nil, next: Self.safeNext(request.uri.queryParameters.get("next"))))
        }
        router.post("ui/conflicts/{id}/resolve") { request, context in
            await self.resolve(request, id: context.parameters.get("id") ?? "")
        }
        router.post("ui/login") { request, _ in await self.signIn(request) }
        router.post("ui/logout") { request, _ in await self.signOut(request) }
        // The pages are read-only: any other method is refused.
        for path in pages {
            for method in [HTTPRequest.Method.post, .put, .patch, .delete, .head, .options] {
                router.on(RouterPath(path), method: method) { _, _ in
                    var r = Self.html(.methodNotAllowed, self.site.problem("The inspector's pages are read-only: \(method) is refused.", chrome: .init()))
                    r.headers[.allow] = "GET"
                    return r
                }
            }
        }
    }

    /// Reads a small urlencoded form.
    static func form(_ request: Request) async throws -> [String: String] {
        let type = request.headers[.contentType]?.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        guard type == "application/x-www-form-urlencoded" else { throw InspectorError("a form is sent as application/x-www-form-urlencoded", status: 415) }
        var body = ByteBuffer()
        for try await var chunk in request.body {
            guard body.readableBytes + chunk.readableBytes <= formBytesMax else { throw InspectorError("the form is larger than \(formBytesMax) bytes", status: 413) }
            body.writeBuffer(&chunk)
        }
        return InspectorInput.form(String(buffer: body))
    }

    /// A form must come from the inspector's own pages: an `Origin` header, when the browser
    /// sends one, names this server.
    static func sameOrigin(_ request: Request) -> Bool {
        guard let origin = request.headers[.origin] else { return true }
        let host = request.head.authority ?? ""
        return ["http://" + host, "https://" + host].contains(origin.lowercased())
    }

    func signIn(_ request: Request) async -> Response {
        guard !policies.current.isOpen else { return Self.redirect("/ui/") }
        guard Self.sameOrigin(request) else { return Self.html(.forbidden, site.problem("Sign-in forms from other sites are refused.", chrome: .init())) }
        let fields: [String: String]
        do { fields = try await Self.form(request) } catch let e as InspectorError {
            return Self.html(HTTPResponse.Status(code: e.status), site.login(error: e.message, next: "/ui/"))
        } catch {
            return Self.html(.badRequest, site.login(error: "the form could not be read", next: "/ui/"))
        }
        let next = Self.safeNext(fields["next"])
        let token = fields["token"] ?? ""
        switch policies.current.authenticate(authorization: "Bearer " + token) {
        case .failure:
            return Self.html(.unauthorized, site.login(error: "That token is not valid for this server.", next: next))
        case .success(let p):
            if let d = AccessPolicy.checkPull(p) { return Self.html(.forbidden, site.login(error: d.message, next: next)) }
            if p.user != nil { return Self.html(.forbidden, site.login(error: "principal \"\(p.name)\" is scoped to a user; the inspector needs a principal without one", next: next)) }
            let (id, _) = sessions.open(token: token)
            var r = Self.redirect(next)
            r.setCookie(Cookie(name: Self.cookieName, value: id, maxAge: Int(InspectorSessions.lifetimeSeconds), path: "/ui",
                               secure: secureCookies, httpOnly: true, sameSite: .strict))
            return r
        }
    }

    /// `POST /ui/conflicts/ID/resolve` (`keep=winner|loser`, `csrf=`): the one action of the
    /// pages. It needs the right to push this replica's origin, the page's CSRF token (a bearer
    /// token is not sent by a browser on its own, so a request with one needs none), a form from
    /// this server; it appends the update that settles the conflict, then goes back to the entity.
    func resolve(_ request: Request, id idText: String) async -> Response {
        let chrome: InspectorSite.Chrome
        switch caller(request) {
        case .refused(let r): return r
        case .allowed(let c): chrome = c
        }
        guard chrome.mayResolve else {
            return Self.html(.forbidden, site.problem("Resolving a conflict appends an event of replica \(site.book.replicaID); this token may not push it.", chrome: chrome))
        }
        let fields: [String: String]
        do { fields = try await Self.form(request) } catch let e as InspectorError {
            return Self.html(HTTPResponse.Status(code: e.status), site.problem(e.message, chrome: chrome))
        } catch {
            return Self.html(.badRequest, site.problem("the form could not be read", chrome: chrome))
        }
        guard Self.sameOrigin(request), chrome.bearer || InspectorSessions.same(fields["csrf"] ?? "", chrome.csrf ?? "") else {
            return Self.html(.forbidden, site.problem("This form's CSRF token does not match; reload the page and try again.", chrome: chrome))
        }
        guard let id = Int64(idText), id > 0 else { return Self.html(.notFound, site.problem("\(idText) is not a conflict number", chrome: chrome)) }
        guard let keep = fields["keep"], keep == "winner" || keep == "loser" else {
            return Self.html(.badRequest, site.problem("keep= must be winner or loser", chrome: chrome))
        }
        do {
            let (entity, entityID) = try site.resolve(conflict: id, keepWinner: keep == "winner")
            return Self.redirect(InspectorSite.entityLink(entity, entityID) + "#c-\(id)")
        } catch let e as LogbookError {
            let status: HTTPResponse.Status = e.kind == .notFound ? .notFound : e.kind == .invalid ? .conflict : .serviceUnavailable
            return Self.html(status, site.problem(e.message, chrome: chrome))
        } catch {
            logger.error("resolving conflict \(id) failed: \(error)")
            return Self.html(.serviceUnavailable, site.problem("The conflict could not be resolved now: \(error)", chrome: chrome))
        }
    }

    func signOut(_ request: Request) async -> Response {
        guard let id = request.cookies[Self.cookieName]?.value, let s = sessions.session(id) else { return Self.redirect("/ui/login") }
        let fields = (try? await Self.form(request)) ?? [:]
        guard Self.sameOrigin(request), InspectorSessions.same(fields["csrf"] ?? "", s.csrf) else {
            return Self.html(.forbidden, site.problem("This form's CSRF token does not match your session; reload the page and try again.", chrome: .init()))
        }
        sessions.close(id)
        var r = Self.redirect("/ui/login")
        r.setCookie(Cookie(name: Self.cookieName, value: "", maxAge: 0, path: "/ui", secure: secureCookies, httpOnly: true, sameSite: .strict))
        return r
    }
}

/// Catches the audit index up with the log while a server runs: all of it at start (a large
/// log takes a while; pages say how far it got), then whatever arrives.
struct AuditIndexer: Service {
    let index: AuditIndex
    let logger: Logger
    /// Events a page request indexes itself before answering; the indexer does the rest.
    static let requestEventsMax = 2_000
    static let idleSeconds = 0.5

    /// Ends when the server shuts down (SIGTERM, Ctrl-C), without an error.
    func run() async throws {
        let (index, logger) = (self.index, self.logger)
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let n = try index.catchUp(limit: 50_000, wait: true)
                    if n > 0 { continue }
                } catch {
                    logger.error("the audit index could not be caught up: \(error)")
                }
                try? await Task.sleep(nanoseconds: UInt64(Self.idleSeconds * 1e9))
            }
        }
    }
}
