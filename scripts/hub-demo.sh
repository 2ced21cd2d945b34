#!/usr/bin/env bash
# `make hub-demo`: a hub on PostgreSQL as a user would set it up. A local cluster in a folder
# (Debian's PostgreSQL, installed when missing), two `evctl serve --hub` nodes on it, and three
# users' replicas syncing through them: alice on two machines, bob, and carol who may also read
# alice's. Pushes go through one node and pulls through the other.
set -euo pipefail
EVCTL=${1:-.build/debug/evctl}
DIR=${2:-./demo/hub}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$DIR"
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

echo "== a PostgreSQL cluster in $DIR/pg (scripts/pg-cluster.sh)"
URL=$("$here/pg-cluster.sh" start "$DIR/pg")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  "$here/pg-cluster.sh" stop "$DIR/pg" || true
}
trap cleanup EXIT
# The password goes through the environment, not the command line.
export PGPASSWORD=${URL#postgres://logbook:}
PGPASSWORD=${PGPASSWORD%%@*}
HUB=postgres://logbook@${URL#*@}

for r in alice-laptop alice-phone bob carol; do "$EVCTL" init --store "$DIR/$r" >/dev/null; done
id() { "$EVCTL" status --store "$DIR/$1" --json | sed -E 's/.*"replica_id":"([^"]+)".*/\1/'; }
tok() { echo "$1-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"; }
T_AL=$(tok alice-laptop); T_AP=$(tok alice-phone); T_B=$(tok bob); T_C=$(tok carol)
cat > "$DIR/tokens.json" <<EOF
{"principals":[
  {"name":"alice-laptop","token":"$T_AL","user":"alice","push":["$(id alice-laptop)"],"pull":true},
  {"name":"alice-phone","token":"$T_AP","user":"alice","push":["$(id alice-phone)"],"pull":true},
  {"name":"bob","token":"$T_B","user":"bob","push":["$(id bob)"],"pull":true},
  {"name":"carol","token":"$T_C","user":"carol","read_users":["alice"],"push":["$(id carol)"],"pull":true}
]}
EOF
chmod 600 "$DIR/tokens.json"

echo "== two nodes on one database: evctl serve --hub $HUB"
for n in 1 2; do
  "$EVCTL" serve --hub "$HUB" --tokens "$DIR/tokens.json" --listen 127.0.0.1:0 --port-file "$DIR/node$n.port" &
  PIDS+=($!)
done
for n in 1 2; do
  for _ in $(seq 1 400); do [ -s "$DIR/node$n.port" ] && break; sleep 0.05; done
  [ -s "$DIR/node$n.port" ] || { echo "node $n did not start" >&2; exit 1; }
done
N1=http://127.0.0.1:$(cat "$DIR/node1.port")
N2=http://127.0.0.1:$(cat "$DIR/node2.port")
echo "node 1: $N1   node 2: $N2"

edit() { "$EVCTL" sample --count "$2" --seed "$3" | "$EVCTL" append --store "$DIR/$1" --actor "$4" >/dev/null; }
edit alice-laptop 300 1 alice
edit alice-phone 200 2 alice
edit bob 250 3 bob
edit carol 100 4 carol

sync() {  # replica token push-node pull-node
  EVCTL_TOKEN=$2 "$EVCTL" push --store "$DIR/$1" "$3" >/dev/null
  EVCTL_TOKEN=$2 "$EVCTL" pull --store "$DIR/$1" "$4" >/dev/null
}
echo "== each replica pushes through one node and pulls through the other"
sync alice-laptop "$T_AL" "$N1" "$N2"
sync bob "$T_B" "$N2" "$N1"
sync alice-phone "$T_AP" "$N2" "$N1"
sync carol "$T_C" "$N1" "$N2"
sync alice-laptop "$T_AL" "$N2" "$N1"

for r in alice-laptop alice-phone bob carol; do
  printf '%-13s origins held: %s\n' "$r" "$("$EVCTL" cursor --store "$DIR/$r" --json | grep -o '"[0-9a-f-]\{36\}"' | wc -l)"
done
a=$("$EVCTL" items --store "$DIR/alice-laptop" --json --include-deleted --limit 1000000 | md5sum | cut -c1-16)
b=$("$EVCTL" items --store "$DIR/alice-phone" --json --include-deleted --limit 1000000 | md5sum | cut -c1-16)
echo "alice's two machines, items digest: $a / $b"
[ "$a" = "$b" ] || { echo "alice's replicas disagree" >&2; exit 1; }
echo "== bob's cursor on the hub names his own origin only ($(id bob))"
curl -s -H "Authorization: Bearer $T_B" "$N1/v1/cursor"; echo
echo "== what PostgreSQL holds (as the hub's role, which row-level security binds too)"
psql -X -q -h "$DIR/pg" -p "$(cat "$DIR/pg/port")" -U logbook -d logbook -c \
  "BEGIN; SET LOCAL logbook.readers = 'alice,bob,carol'; SELECT owner, count(*) AS frames, sum(length(frame)) AS bytes FROM logbook_frames GROUP BY owner ORDER BY owner; COMMIT;"
echo "without a user set, the same query sees:"
psql -X -q -h "$DIR/pg" -p "$(cat "$DIR/pg/port")" -U logbook -d logbook -tAc "SELECT count(*) FROM logbook_frames"
