#!/usr/bin/env bash
# Runs every fuzz target for FUZZ_SECONDS each (libFuzzer), from corpora seeded from fixtures/
# and the crash fixtures kept in fixtures/fuzz/<target>/; prints executions and coverage per
# target. A crash stops the run with a nonzero status; its input is kept in .build-fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
bin=.build-fuzz/debug
corpus=.build-fuzz/corpus
mkdir -p .build-fuzz/artifacts
python3 scripts/fuzz-corpus.py "$corpus" "${EVCTL:-.build/debug/evctl}"
status=0
passed=0
failed=0
printf '%-16s %12s %10s %10s %s\n' target executions exec/s coverage result
for t in FuzzFrame FuzzPageReceive FuzzCursor FuzzBundle FuzzSnapshot FuzzStore FuzzEventStream FuzzLegacyImport FuzzInspectorInput FuzzNDJSON; do
  mkdir -p "$corpus/$t" "fixtures/fuzz/$t"
  log=".build-fuzz/$t.log"
  maxlen=65536
  [ "$t" = FuzzSnapshot ] && maxlen=1048576
  if "$bin/$t" "$corpus/$t" "fixtures/fuzz/$t" -max_total_time="$seconds" -max_len="$maxlen" -timeout=20 -rss_limit_mb=4096 \
       -print_final_stats=1 -artifact_prefix=".build-fuzz/artifacts/$t-" >"$log" 2>&1; then result=ok; else result=CRASH; status=1; fi
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
  rate=$(grep 'stat::average_exec_per_sec:' "$log" | awk '{print $2}' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  printf '%-16s %12s %10s %10s %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$result"
  if [ "$result" = CRASH ]; then failed=$((failed + 1)); grep -E 'Fatal error|ERROR: libFuzzer|SUMMARY|Test unit written' "$log" | head -5; else passed=$((passed + 1)); fi
done
# The targets' scratch stores and files under the temp directory.
rm -rf "${TMPDIR:-/tmp}"/logbook-fuzz-*
echo "fuzz: $passed passed, $failed failed"
exit $status
