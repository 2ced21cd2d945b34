#!/usr/bin/env bash
# What a bare machine lacks, from Debian. `deps.sh core`: what `make check` needs (the libraries
# the code links, the tools its tests run). `deps.sh all`: also what `make test`, the demo and
# the benchmarks use (curl, python3, PostgreSQL, Chromium). As root it installs what is missing;
# otherwise it names the packages and fails.
set -u
lane=${1:-all}
missing=""
lib() { pkg-config --exists "$1" 2>/dev/null || missing="$missing $2"; }
tool() { command -v "$1" >/dev/null || missing="$missing $2"; }

lib liblz4 liblz4-dev
lib sqlite3 libsqlite3-dev
tool lz4 lz4
tool sqlite3 sqlite3
tool pkg-config pkg-config
tool openssl openssl  # a test certificate for TLS
if [ "$lane" = all ]; then
  tool curl curl        # the demo reads /metrics
  tool python3 python3
  # The hub's tests and demo start their own cluster (scripts/pg-cluster.sh).
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing="$missing postgresql"
  tool chromium chromium  # headless, for the inspector's browser tests
fi

[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "installing:$missing"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
else
  echo "missing system packages:$missing — run: sudo apt-get install -y$missing" >&2
  exit 1
fi
