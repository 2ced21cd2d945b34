#!/usr/bin/env bash
# Part of `make demo`: serve the first replica over loopback HTTP, sync a third replica with it,
# show both projections agree, and show a few of the server's metrics.
set -euo pipefail
EVCTL=$1
STORE=$2
THIRD=$STORE-3
PORTFILE=$(mktemp)
rm -f "$PORTFILE"
TOKENS=$(mktemp)
rm -rf "$THIRD"
"$EVCTL" init --store "$THIRD" >/dev/null
ID=$("$EVCTL" status --store "$THIRD" --json | sed -E 's/.*"replica_id":"([^"]+)".*/\1/')
TOKEN=demo-token-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
printf '{"principals":[{"name":"third","token":"%s","push":["%s"],"pull":true}]}\n' "$TOKEN" "$ID" > "$TOKENS"
"$EVCTL" serve --store "$STORE" --listen 127.0.0.1:0 --tokens "$TOKENS" --port-file "$PORTFILE" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -f "$PORTFILE" "$TOKENS"' EXIT
for _ in $(seq 1 200); do [ -s "$PORTFILE" ] && break; sleep 0.05; done
[ -s "$PORTFILE" ] || { echo "evctl serve did not start" >&2; exit 1; }
URL=http://127.0.0.1:$(cat "$PORTFILE")
echo "== a third replica: its own edits, then evctl sync $URL (bearer token from a tokens file)"
"$EVCTL" sample --count 200 --seed 11 | "$EVCTL" append --store "$THIRD"
EVCTL_TOKEN=$TOKEN "$EVCTL" sync --store "$THIRD" "$URL"
echo "== a wrong token is refused"
"$EVCTL" pull --store "$THIRD" "$URL" --token wrong-token-0123456789 || true
echo "== served and third replica: same cursor, same projection"
"$EVCTL" cursor --store "$STORE"; "$EVCTL" cursor --store "$THIRD"
a=$("$EVCTL" items --store "$STORE" --json --include-deleted --limit 1000000 | md5sum | cut -c1-16)
b=$("$EVCTL" items --store "$THIRD" --json --include-deleted --limit 1000000 | md5sum | cut -c1-16)
echo "items digest: $a / $b"
[ "$a" = "$b" ] && echo "projections agree"
echo "== curl $URL/metrics (excerpt)"
curl -s -H "Authorization: Bearer $TOKEN" "$URL/metrics" | grep -E '^logbook_(events_received_total|frames_served_total|http_requests_total|peer_lag_events)'
