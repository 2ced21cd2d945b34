#!/usr/bin/env bash
# A throwaway PostgreSQL cluster in a folder, on loopback, for the hub's tests and demo.
#
#   scripts/pg-cluster.sh start DIR   creates DIR/data (once) and starts it; prints the hub's address
#   scripts/pg-cluster.sh stop DIR    stops it (the folder stays; delete it to start afresh)
#
# The server listens on 127.0.0.1 on a free port and on a socket in DIR. The hub connects as the
# role `logbook`, an ordinary role (no superuser, no CREATEROLE, no CREATEDB) that owns the
# database `logbook`, with a password (scram-sha-256); the cluster's superuser is only used here,
# to create them. PostgreSQL refuses to run as root: when run as root, the server runs as the
# `postgres` system user (Debian's package creates it). Debian's PostgreSQL is installed when
# missing (as root; `make deps` does the same).
set -euo pipefail

# The server started below would inherit every descriptor this script was given, and a caller
# that waits for them to close (a pipe read to its end; Foundation's Process watches a socket)
# would wait for as long as the server runs: keep only stdin, stdout and stderr.
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if [[ $fd -gt 2 ]]; then eval "exec $fd>&-" 2>/dev/null || true; fi
done

cmd=${1:-}
dir=${2:-}
if [[ -z "$cmd" || -z "$dir" ]]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi

bindir=""
for d in /usr/lib/postgresql/*/bin; do [[ -x "$d/initdb" ]] && bindir=$d; done
if [[ -z "$bindir" ]]; then
  if [[ $(id -u) == 0 ]]; then
    echo "installing postgresql" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    for d in /usr/lib/postgresql/*/bin; do [[ -x "$d/initdb" ]] && bindir=$d; done
  fi
  [[ -n "$bindir" ]] || { echo "PostgreSQL is not installed: sudo apt-get install -y postgresql" >&2; exit 1; }
fi

as_server() {
  if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
data=$dir/data
password=logbook-test

case "$cmd" in
start)
  if [[ $(id -u) == 0 ]]; then
    # The server's user must reach the folder (mktemp makes it 0700) and own what it writes.
    id postgres >/dev/null 2>&1 || { echo "no postgres system user (install Debian's postgresql)" >&2; exit 1; }
    chmod 755 "$dir"
    chown postgres "$dir"
  fi
  if [[ ! -f "$data/PG_VERSION" ]]; then
    printf '%s\n' "$password" > "$dir/.superpw"
    [[ $(id -u) == 0 ]] && chown postgres "$dir/.superpw"
    as_server "$bindir/initdb" -D "$data" -U postgres --pwfile="$dir/.superpw" -A scram-sha-256 -E UTF8 --no-instructions >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    rm -f "$dir/.superpw"
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_server "$bindir/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=on -c max_connections=200" start </dev/null >"$dir/pg_ctl.log" 2>&1 \
    || { cat "$dir/pg_ctl.log" "$dir/server.log" >&2; exit 1; }
  echo "$port" > "$dir/port"
  export PGPASSWORD=$password
  psql_super() { "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres "$@"; }
  if [[ -z $(psql_super -d postgres -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'logbook'") ]]; then
    psql_super -d postgres -c "CREATE ROLE logbook LOGIN PASSWORD '$password' NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS"
    psql_super -d postgres -c "CREATE DATABASE logbook OWNER logbook"
    psql_super -d logbook -c "REVOKE CREATE ON SCHEMA public FROM PUBLIC; ALTER SCHEMA public OWNER TO logbook"
  fi
  echo "postgres://logbook:$password@127.0.0.1:$port/logbook"
  ;;
stop)
  [[ -f "$data/PG_VERSION" ]] || exit 0
  as_server "$bindir/pg_ctl" -D "$data" -m fast -w stop </dev/null >/dev/null 2>&1 || true
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac
