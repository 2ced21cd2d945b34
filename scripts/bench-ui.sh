#!/usr/bin/env bash
# The inspector's pages on a large store (docs/INSPECT.md, "Speed"): 1M events (a sample
# workload), 3,000 conflicts (two replicas editing the same items' notes at once, then syncing),
# and one item with 1,000 events spread over the whole log. `evctl inspect` serves it; the audit index is built first (its
# time is printed); then each page is requested 100 times in sequence over one keep-alive
# connection, and p50 / p99 / max are printed beside /healthz, the floor of a request.
set -euo pipefail
cd "$(dirname "$0")/.."
EVCTL=${EVCTL:-.build/release/evctl}
EVENTS=${UI_EVENTS:-1000000}
CONFLICTS=${UI_CONFLICTS:-3000}
HOT=${UI_HOT_EVENTS:-1000}
REQUESTS=${UI_REQUESTS:-100}
WORK=${KEEP:-$(mktemp -d)}
mkdir -p "$WORK"
trap 'kill $SERVER 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
SERVER=
A=$WORK/a B=$WORK/b
$EVCTL init --store "$A" > /dev/null
$EVCTL init --store "$B" > /dev/null
BULK=$((EVENTS - HOT - 2 * CONFLICTS))
t0=$(date +%s.%N)
$EVCTL sample --count "$BULK" --seed 7 > "$WORK/bulk.ndjson"
# The busy item's events are spread over the whole log, one among every BULK/HOT others, as a
# long-lived item's edits are: its page reads events from many frames.
python3 - "$HOT" "$WORK/bulk.ndjson" > "$WORK/all.ndjson" <<'PY'
import json, sys
hot, bulk = "00000000-0000-4000-8000-00000000b007", sys.argv[2]
n = int(sys.argv[1])
lines = sum(1 for _ in open(bulk))
every = max(1, lines // n)
print(json.dumps({"entity": "item", "op": "create", "id": hot, "fields": {"title": "the busy item", "notes": "v0"}}))
done = 1
for k, line in enumerate(open(bulk)):
    sys.stdout.write(line)
    if (k + 1) % every == 0 and done < n:
        print(json.dumps({"entity": "item", "op": "update", "id": hot, "fields": {"notes": f"v{done}", "sort_order": done}}))
        done += 1
while done < n:
    print(json.dumps({"entity": "item", "op": "update", "id": hot, "fields": {"notes": f"v{done}", "sort_order": done}}))
    done += 1
PY
$EVCTL append --store "$A" "$WORK/all.ndjson" > /dev/null
$EVCTL sync --store "$B" "$A" > /dev/null
$EVCTL items --store "$A" --limit "$CONFLICTS" --json | python3 -c '
import json, sys
ids = [json.loads(l)["id"] for l in sys.stdin if l.strip()]
for side in ("a", "b"):
    with open(sys.argv[1] + "/" + side + ".ndjson", "w") as f:
        for i, id in enumerate(ids):
            f.write(json.dumps({"entity": "item", "op": "update", "id": id, "fields": {"notes": f"edited on {side} #{i}"}}) + "\n")
' "$WORK"
$EVCTL append --store "$A" "$WORK/a.ndjson" > /dev/null
$EVCTL append --store "$B" "$WORK/b.ndjson" > /dev/null
$EVCTL sync --store "$A" "$B" > /dev/null
t1=$(date +%s.%N)
TOTAL=$($EVCTL status --store "$A" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["total_events"])')
OPEN=$($EVCTL conflicts --store "$A" --json | grep -c . || true)
echo "store: $TOTAL events, $OPEN open conflicts, one item with $HOT events (built in $(python3 -c "print(round($t1 - $t0, 1))") s)"

$EVCTL inspect --store "$A" --port-file "$WORK/port" > /dev/null 2>&1 &
SERVER=$!
for _ in $(seq 1 400); do [ -s "$WORK/port" ] && break; sleep 0.05; done
python3 - "$(cat "$WORK/port")" "$REQUESTS" <<'PY'
import http.client, re, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
def get(path):
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read().decode()
    return r.status, body
t0 = time.time()
while True:
    status, body = get("/ui/")
    if 'id="indexing"' not in body:
        break
    time.sleep(0.5)
print(f"audit index of the whole log built in {time.time() - t0:.1f} s")
hot = "00000000-0000-4000-8000-00000000b007"
_, log = get("/ui/log")
older = re.search(r'rel="next" href="([^"]+)"', log).group(1).replace("&amp;", "&")
_, entity = get(f"/ui/entity/item/{hot}")
later = re.search(r'rel="next" href="([^"]+)"', entity).group(1).replace("&amp;", "&")
origin = re.search(r'/ui/log\?origin=([0-9a-f-]+)', log).group(1)
_, conflicts = get("/ui/conflicts")
conflicted = re.search(r'/ui/entity/item/([0-9a-f-]+)', conflicts).group(1)
pages = [
    ("/healthz (floor)", "/healthz"),
    ("overview", "/ui/"),
    ("log", "/ui/log"),
    ("log, older page", older),
    ("log ?entity=tag", "/ui/log?entity=tag"),
    ("log ?origin=", f"/ui/log?origin={origin}"),
    ("log ?since=&until=", "/ui/log?since=2000-01-01&until=2100-01-01"),
    ("entity, 1,000 events", f"/ui/entity/item/{hot}"),  # spread over the log: 100 a page, from ~100 frames
    ("entity, later page", later),
    ("entity with a conflict", f"/ui/entity/item/{conflicted}"),
    ("conflicts", "/ui/conflicts"),
    ("conflicts, page 20", "/ui/conflicts?after=2000"),
    ("anomalies", "/ui/anomalies"),
    ("search", "/ui/search?q=milk"),
]
print(f"{'page':26} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}   ({n} sequential requests each, target p99 <= 200 ms)")
worst = 0.0
for name, path in pages:
    status, _ = get(path)
    assert status == 200, (path, status)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        status, _ = get(path)
        times.append((time.perf_counter() - t) * 1000)
        assert status == 200
    times.sort()
    p50, p99 = times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))]
    if not name.startswith("/healthz"):
        worst = max(worst, p99)
    print(f"{name:26} {p50:8.1f} {p99:8.1f} {times[-1]:8.1f}")
print(f"worst page p99: {worst:.1f} ms ({'met' if worst <= 200 else 'NOT met'}: target <= 200 ms)")
PY
