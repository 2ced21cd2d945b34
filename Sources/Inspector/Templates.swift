import Mustache

/// The inspector's pages as Mustache templates. Every `{{value}}` is escaped by `HTMLEscape`
/// (`<`, `>`, `&`, `"`, `'`, per Unicode scalar), so text from the data (titles, actors, field
/// values) is shown as text wherever it appears, in an element or an attribute. The library's own
/// escaper compares grapheme clusters and is never used: `library()` puts the content-type
/// pragma naming ours at the head of every template, partials included (a partial starts over
/// with the library's default). No template uses the unescaped forms (`{{{…}}}`, `{{&…}}`); a
/// test checks that.
enum Templates {
    static let all: [String: String] = [
        "header": header, "footer": footer, "overview": overview, "log": log, "entity": entity,
        "conflicts": conflicts, "anomalies": anomalies, "search": search, "login": login, "problem": problem,
        "shareCell": shareCell,
    ]

    static func library() throws -> MustacheLibrary {
        MustacheContentTypes.register(HTMLEscape.ContentType(), named: HTMLEscape.contentTypeName)
        var library = MustacheLibrary()
        for (name, text) in all { try library.register(pragma + text, named: name) }
        return library
    }

    /// Selects `HTMLEscape` for the rest of a template (and must head each one: see above).
    static let pragma = "{{% CONTENT_TYPE: \(HTMLEscape.contentTypeName)}}"

    static let header = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>{{title}} · Logbook</title>
        <link rel="stylesheet" href="/ui/style.css">
        </head>
        <body data-page="{{page}}">
        <header>
        <nav>
        <a class="brand" href="/ui/">Logbook</a>
        <a href="/ui/">Overview</a>
        <a href="/ui/log">Log</a>
        <a href="/ui/conflicts">Conflicts</a>
        <a href="/ui/anomalies">Anomalies</a>
        <form class="search" method="get" action="/ui/search"><input type="search" name="q" value="{{query}}" placeholder="Search items" aria-label="Search items"><button type="submit">Search</button></form>
        {{#session}}<form class="logout" method="post" action="/ui/logout"><input type="hidden" name="csrf" value="{{csrf}}"><button type="submit">Sign out {{principal}}</button></form>{{/session}}
        </nav>
        <p class="store">Store <code>{{store}}</code>, replica <code>{{replica}}</code></p>
        {{#indexing}}<p class="notice" id="indexing">Indexing the log: {{indexed}} of {{total}} events so far; the log, entity and overview pages show what is indexed.</p>{{/indexing}}
        </header>
        <main>
        <h1>{{title}}</h1>

        """

    static let footer = """
        </main>
        </body>
        </html>

        """

    static let overview = """
        {{> header}}
        <section id="origins">
        <h2>Origins</h2>
        <table>
        <thead><tr><th>Origin</th><th>Frames</th><th>Share</th><th>Last seq</th><th>Last clock</th><th>Events indexed</th><th>Segments</th><th>Bytes</th></tr></thead>
        <tbody>
        {{#origins}}<tr><td><a class="origin" href="{{logLink}}"><code>{{origin}}</code></a>{{#isLocal}} <span class="tag">this replica</span>{{/isLocal}}</td><td>{{#signed}}<span class="tag signed" title="its id derives from its Ed25519 key: every frame was verified against it on arrival">signed</span>{{/signed}}{{^signed}}<span class="tag unsigned" title="made before signed logs: frames checked by CRC and hash chain only">unsigned</span>{{/signed}}</td><td>{{> shareCell}}</td><td>{{lastSeq}}</td><td><time>{{lastClock}}</time></td><td>{{events}}</td><td>{{segments}}</td><td>{{bytes}}</td></tr>
        {{/origins}}
        {{^origins}}<tr><td colspan="8">The log is empty.</td></tr>{{/origins}}
        </tbody>
        </table>
        </section>
        <section id="activity">
        <h2>Events over time</h2>
        {{#chart}}
        <p class="axis">{{from}} to {{to}}, one bar per {{bucket}}.</p>
        {{#series}}
        <figure class="chart">
        <figcaption><code>{{origin}}</code>: {{totalText}}, at most {{peak}} per bar</figcaption>
        <svg xmlns="http://www.w3.org/2000/svg" width="{{width}}" height="{{height}}" viewBox="0 0 {{width}} {{height}}" role="img" aria-label="Events over time of origin {{origin}}">
        <rect class="frame" x="0" y="0" width="{{width}}" height="{{height}}" fill="none"/>
        {{#bars}}<rect x="{{x}}" y="{{y}}" width="{{width}}" height="{{height}}" fill="{{color}}"><title>{{title}}</title></rect>{{/bars}}
        </svg>
        </figure>
        {{/series}}
        {{^series}}<p>No events yet.</p>{{/series}}
        {{#seriesLeftOut}}<p class="axis">… {{seriesLeftOut}} more origins, with fewer events, are not drawn.</p>{{/seriesLeftOut}}
        {{/chart}}
        </section>
        <section id="peers">
        <h2>Peers</h2>
        <table>
        <thead><tr><th>Peer</th><th>Lag (events)</th><th>Last sync</th><th>Pulled</th><th>Pushed</th><th>Last error</th></tr></thead>
        <tbody>
        {{#peers}}<tr><td>{{name}}</td><td>{{lag}}</td><td><time>{{lastSync}}</time></td><td>{{pulled}}</td><td>{{pushed}}</td><td class="error">{{lastError}}</td></tr>
        {{/peers}}
        {{^peers}}<tr><td colspan="6">This store has not synced with a peer.</td></tr>{{/peers}}
        </tbody>
        </table>
        </section>
        <section id="verify">
        <h2>Last verify</h2>
        {{#verify}}<p class="{{status}}">{{at}}: {{summary}}</p>{{/verify}}
        {{^verify}}<p>No verify recorded (run <code>evctl verify</code>).</p>{{/verify}}
        </section>
        <section id="counts">
        <h2>Settled by the merge</h2>
        <p><a href="/ui/conflicts">{{conflictsOpen}} open conflicts</a> ({{conflictsAll}} in all), <a href="/ui/anomalies">{{anomalies}} anomalies</a>.</p>
        </section>
        {{> footer}}
        """

    /// Which share a log (and so an event) belongs to: its id, its name where this replica holds
    /// the share's key, and whether the log is a member's sealed log or the membership log.
    static let shareCell = #"{{#inShare}}<span class="share" title="{{shareKind}} of share {{share}}"><code>{{shareShort}}</code>{{#hasShareName}} {{shareName}}{{/hasShareName}} <span class="tag">{{shareKind}}</span></span>{{/inShare}}{{^inShare}}<span class="private">private</span>{{/inShare}}"#

    static let eventRows = """
        {{#events}}<tr id="e-{{origin}}-{{seq}}"><td><time>{{time}}</time></td><td><a class="origin" href="{{originLink}}"><code>{{origin}}</code></a></td><td>{{> shareCell}}</td><td>{{#signed}}<span class="tag signed" title="its frame was signed by its origin's Ed25519 key, verified on arrival">verified</span>{{/signed}}{{^signed}}<span class="tag unsigned" title="made before signed logs: checked by CRC and hash chain only">unsigned</span>{{/signed}}</td><td>{{seq}}</td><td><a href="{{entityLink}}">{{entity}}</a></td><td><a class="entity-id" href="{{pageLink}}"><code>{{id}}</code></a></td><td>{{op}}</td><td>{{actor}}</td><td><code class="event-id">{{eventID}}</code></td><td class="fields">{{#fields}}<span class="field"><b>{{name}}</b>=<span class="value">{{value}}</span></span> {{/fields}}</td><td class="holds">{{#holds}}<span class="held">{{.}}</span> {{/holds}}{{^holds}}—{{/holds}}</td></tr>
        {{/events}}
        """

    static let eventHead = "<thead><tr><th>Time</th><th>Origin</th><th>Share</th><th>Signature</th><th>Seq</th><th>Entity</th><th>Id</th><th>Op</th><th>Actor</th><th>Event id</th><th>Fields set</th><th>Holds now</th></tr></thead>"

    static let log = """
        {{> header}}
        <form class="filters" method="get" action="/ui/log">
        <label>Origin <input name="origin" value="{{filter.origin}}" size="36"></label>
        <label>Entity <select name="entity"><option value="">any</option>{{#entities}}<option value="{{name}}"{{#selected}} selected{{/selected}}>{{name}}</option>{{/entities}}</select></label>
        <label>Id <input name="id" value="{{filter.id}}" size="36"></label>
        <label>Since <input name="since" value="{{filter.since}}" placeholder="2026-01-31 or 2026-01-31T12:00:00Z"></label>
        <label>Until <input name="until" value="{{filter.until}}"></label>
        <button type="submit">Filter</button>
        </form>
        <p class="count">{{shown}} events shown, newest first.</p>
        <table class="events">
        \(eventHead)
        <tbody>
        \(eventRows)
        {{^events}}<tr><td colspan="12">No event matches.</td></tr>{{/events}}
        </tbody>
        </table>
        <p class="pages">{{#newest}}<a href="{{newest}}">Newest</a> {{/newest}}{{#older}}<a rel="next" href="{{older}}">Older events</a>{{/older}}</p>
        {{> footer}}
        """

    static let entity = """
        {{> header}}
        <section id="current">
        <h2>Now</h2>
        {{#current}}<table class="row"><tbody>{{#columns}}<tr><th>{{column}}</th><td>{{value}}</td><td class="source">{{#source}}set by <a href="{{link}}"><code>{{eventID}}</code></a>{{/source}}</td></tr>{{/columns}}</tbody></table>{{/current}}
        {{^current}}<p>The projection holds no row for it (never created, or purged).</p>{{/current}}
        </section>
        {{#item}}
        <section id="path"><h2>Path</h2><p>{{#pathCut}}… (more than {{walkDepthMax}} ancestors: the farthest are not shown) / {{/pathCut}}{{#path}}<a href="{{link}}">{{label}}</a> / {{/path}}</p></section>
        <section id="tags"><h2>Tags</h2><ul>{{#tags}}<li><a href="{{link}}">{{name}}</a> <code>{{id}}</code></li>{{/tags}}{{^tags}}<li>No tags.</li>{{/tags}}</ul>{{#tagsMore}}<p>… {{tagsMore}} more tags are not shown.</p>{{/tagsMore}}</section>
        <section id="links"><h2>Links</h2><ul>{{#links}}<li>{{direction}} <a href="{{link}}"><code>{{other}}</code></a> {{kind}}{{#label}} “{{label}}”{{/label}}{{#weight}} weight {{weight}}{{/weight}} (<a href="{{selfLink}}">link <code>{{id}}</code></a>)</li>{{/links}}{{^links}}<li>No links.</li>{{/links}}</ul>{{#linksMore}}<p>Only the first {{linksMax}} are shown.</p>{{/linksMore}}</section>
        <section id="subtree"><h2>Subtree</h2><ul>{{#subtree}}<li class="depth-{{depth}}">{{indent}}<a href="{{link}}">{{label}}</a> <code>{{id}}</code></li>{{/subtree}}{{^subtree}}<li>No items under it.</li>{{/subtree}}</ul>{{#subtreeMore}}<p>Only the first {{subtreeMax}} are shown.</p>{{/subtreeMore}}</section>
        {{/item}}
        <section id="conflicts">
        <h2>Conflicts</h2>
        <table class="conflicts">
        <thead><tr><th>#</th><th>Field</th><th>Winner</th><th>Loser</th><th>Detected</th><th>Resolved by</th></tr></thead>
        <tbody>
        {{#conflicts}}<tr id="c-{{id}}"><td>{{id}}</td><td>{{field}}</td><td class="winner"><span class="label">winner</span> <span class="value">{{winnerValue}}</span><br>event <code>{{winnerEventID}}</code><br>origin <a href="{{winnerOriginLink}}"><code>{{winnerOrigin}}</code></a></td><td class="loser"><span class="label">loser</span> <span class="value">{{loserValue}}</span><br>event <code>{{loserEventID}}</code><br>origin <a href="{{loserOriginLink}}"><code>{{loserOrigin}}</code></a></td><td><time>{{detectedAt}}</time></td><td>{{resolvedBy}}{{^resolved}}{{#resolve}}<form class="resolve" method="post" action="/ui/conflicts/{{id}}/resolve"><input type="hidden" name="csrf" value="{{csrf}}"><button name="keep" value="winner">Keep winner</button> <button name="keep" value="loser">Keep loser</button></form>{{/resolve}}{{/resolved}}</td></tr>
        {{/conflicts}}
        {{^conflicts}}<tr><td colspan="6">No conflicts.</td></tr>{{/conflicts}}
        </tbody>
        </table>
        </section>
        <section id="history">
        <h2>Events in merge order</h2>
        <p class="count">{{total}} events; {{shown}} shown from {{firstShown}}.</p>
        <table class="events">
        \(eventHead)
        <tbody>
        \(eventRows)
        {{^events}}<tr><td colspan="12">No events.</td></tr>{{/events}}
        </tbody>
        </table>
        <p class="pages">{{#first}}<a href="{{first}}">First events</a> {{/first}}{{#later}}<a rel="next" href="{{later}}">Later events</a>{{/later}}</p>
        </section>
        {{> footer}}
        """

    static let conflictRows = """
        {{#conflicts}}<tr id="c-{{id}}"><td>{{id}}</td><td><a href="{{entityLink}}">{{entity}} <code>{{entityID}}</code></a></td><td>{{field}}</td><td class="winner"><span class="label">winner</span> <span class="value">{{winnerValue}}</span><br>event <code>{{winnerEventID}}</code><br>origin <a href="{{winnerOriginLink}}"><code>{{winnerOrigin}}</code></a></td><td class="loser"><span class="label">loser</span> <span class="value">{{loserValue}}</span><br>event <code>{{loserEventID}}</code><br>origin <a href="{{loserOriginLink}}"><code>{{loserOrigin}}</code></a></td><td><time>{{detectedAt}}</time></td><td>{{resolvedBy}}{{^resolved}}{{#resolve}}<form class="resolve" method="post" action="/ui/conflicts/{{id}}/resolve"><input type="hidden" name="csrf" value="{{csrf}}"><button name="keep" value="winner">Keep winner</button> <button name="keep" value="loser">Keep loser</button></form>{{/resolve}}{{/resolved}}</td></tr>
        {{/conflicts}}
        """

    static let conflicts = """
        {{> header}}
        <p class="count">{{open}} open, {{all}} in all; {{shown}} shown.</p>
        <table class="conflicts">
        <thead><tr><th>#</th><th>Entity</th><th>Field</th><th>Winner</th><th>Loser</th><th>Detected</th><th>Resolved by</th></tr></thead>
        <tbody>
        \(conflictRows)
        {{^conflicts}}<tr><td colspan="7">No conflicts.</td></tr>{{/conflicts}}
        </tbody>
        </table>
        <p class="pages">{{#first}}<a href="{{first}}">First</a> {{/first}}{{#next}}<a rel="next" href="{{next}}">Next</a>{{/next}}</p>
        {{> footer}}
        """

    static let anomalies = """
        {{> header}}
        <p class="count">{{all}} in all; {{shown}} shown.</p>
        <table class="anomalies">
        <thead><tr><th>#</th><th>Kind</th><th>Entity</th><th>Attempted</th><th>Event</th><th>Other event</th><th>Detected</th><th>Details</th></tr></thead>
        <tbody>
        {{#anomalies}}<tr id="a-{{id}}"><td>{{id}}</td><td>{{kind}}</td><td><a href="{{entityLink}}">{{entity}} <code>{{entityID}}</code></a></td><td>{{attemptedOp}}</td><td><code>{{eventID}}</code></td><td><code>{{otherID}}</code></td><td><time>{{detectedAt}}</time></td><td>{{details}}</td></tr>
        {{/anomalies}}
        {{^anomalies}}<tr><td colspan="8">No anomalies.</td></tr>{{/anomalies}}
        </tbody>
        </table>
        <p class="pages">{{#first}}<a href="{{first}}">First</a> {{/first}}{{#next}}<a rel="next" href="{{next}}">Next</a>{{/next}}</p>
        {{> footer}}
        """

    static let search = """
        {{> header}}
        {{#asked}}<p class="count">{{count}} items match “{{query}}”{{#more}} (the first {{count}} are shown){{/more}}.</p>{{/asked}}
        {{#idMatch}}<p>That is an id: <a href="{{link}}">{{label}}</a></p>{{/idMatch}}
        <ul class="results">
        {{#results}}<li><a href="{{link}}">{{title}}</a> <code>{{id}}</code> {{#deleted}}<span class="tag">deleted</span>{{/deleted}}<br><span class="notes">{{notes}}</span></li>
        {{/results}}
        </ul>
        {{> footer}}
        """

    static let login = """
        {{> header}}
        {{#error}}<p class="error" id="login-error">{{error}}</p>{{/error}}
        <form method="post" action="/ui/login" class="login">
        <input type="hidden" name="next" value="{{next}}">
        <label>Token <input type="password" name="token" autocomplete="current-password" required></label>
        <button type="submit">Sign in</button>
        </form>
        <p>A token from this server's tokens file that may pull. It is sent once; the browser keeps a session cookie.</p>
        {{> footer}}
        """

    static let problem = """
        {{> header}}
        <p class="error" id="problem">{{message}}</p>
        {{> footer}}
        """

    static let style = """
        body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d1d1f; background: #fafafa; }
        header { background: #20252b; color: #eee; padding: 0.5em 1em; }
        header a { color: #cfe3ff; margin-right: 1em; }
        header .brand { font-weight: bold; color: #fff; }
        header .store { margin: 0.3em 0 0; font-size: 12px; color: #bbb; }
        nav { display: flex; align-items: center; flex-wrap: wrap; gap: 0.3em; }
        nav form { display: inline; margin-left: 1em; }
        main { padding: 1em; }
        table { border-collapse: collapse; margin: 0.5em 0 1em; background: #fff; }
        th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
        th { background: #f0f0f0; }
        code { font: 12px ui-monospace, monospace; word-break: break-all; }
        .notice { background: #fff3c4; color: #4a3b00; padding: 0.3em 0.6em; }
        .error { color: #a00000; }
        .ok { color: #006b21; }
        .winner .label { background: #d9f2de; color: #0b5a1f; padding: 0 0.3em; }
        .loser .label { background: #f8dada; color: #7a0b0b; padding: 0 0.3em; }
        .held { background: #e6effa; padding: 0 0.2em; }
        .tag { background: #eee; padding: 0 0.3em; font-size: 11px; }
        .filters label { margin-right: 0.8em; }
        figure.chart { margin: 0.5em 0 1em; }
        figure.chart .frame { stroke: #ccc; }
        .notes { color: #555; }

        """
}
