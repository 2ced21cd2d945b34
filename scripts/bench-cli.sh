#!/usr/bin/env bash
# End-to-end: `evctl append` of a 500K-line NDJSON file (parse, validate, encode, compress, fsync)
# against the sqlite3 shell importing the same file into a one-column table in one transaction.
# Both run here, in the same run, best of 3 each.
set -euo pipefail
cd "$(dirname "$0")/.."
EVCTL=.build/release/evctl
LINES=${LINES_COUNT:-500000}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
$EVCTL sample --count "$LINES" --seed 1 > "$WORK/in.ndjson"
BYTES=$(stat -c %s "$WORK/in.ndjson")

best() {  # best wall time in seconds of a command run 3 times, with a setup before each run
  local setup=$1; shift
  local best=999999
  for _ in 1 2 3; do
    eval "$setup"
    local t0 t1
    t0=$(date +%s.%N)
    "$@" > /dev/null
    t1=$(date +%s.%N)
    best=$(python3 -c "print(min($best, $t1 - $t0))")
  done
  echo "$best"
}

EV=$(best "rm -rf '$WORK/store'; $EVCTL init --store '$WORK/store' > /dev/null" $EVCTL append --no-project --store "$WORK/store" "$WORK/in.ndjson")
LOG=$(du -sb "$WORK/store/log" | cut -f1)
EP=$(best "rm -rf '$WORK/store'; $EVCTL init --store '$WORK/store' > /dev/null" $EVCTL append --store "$WORK/store" "$WORK/in.ndjson")
SQ=$(best "rm -f '$WORK/import.db'" sqlite3 "$WORK/import.db" -cmd ".mode tabs" "CREATE TABLE t(line TEXT);" ".import $WORK/in.ndjson t")
python3 - "$LINES" "$BYTES" "$EV" "$SQ" "$LOG" "$EP" <<'PY'
import sys
lines, size, ev, sq, log, ep = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
print(f"evctl append, {lines} lines ({size/1e6:.1f} MB NDJSON), best of 3")
print(f"  evctl append --no-project: {ev:.3f} s  {lines/ev/1e3:8.0f}K lines/s  (parse, validate, encode, compress, fsync)")
print(f"  sqlite3 .import (1 txn):  {sq:.3f} s  {lines/sq/1e3:8.0f}K lines/s")
print(f"  evctl append (projected): {ep:.3f} s  {lines/ep/1e3:8.0f}K lines/s  (the above, then the projection catches up)")
print(f"  ratio evctl / sqlite3:   {sq/ev:.2f}x   (target >= 1.00)")
print(f"  log bytes / input bytes: {log/size:.3f}    (target <= 0.333)")
PY
