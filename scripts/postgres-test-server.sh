#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on loopback for kiln-tune's multi-worker tests: initdb into a
# fresh temporary directory, pg_ctl on a free port, a database `kiln_test` owned by the user
# `kiln` with a random password (password authentication over TCP, so that the tests see a
# real password to keep out of logs).
#
#   export KILN_TEST_POSTGRES_URL=$(scripts/postgres-test-server.sh start)
#   cargo test --release --workspace --test tune_postgres -- --include-ignored
#   scripts/postgres-test-server.sh stop
#
# PostgreSQL refuses to run as root: under root the cluster runs as the `postgres` user (the
# Debian package creates it). Needs the Debian package `postgresql` (scripts/setup.sh).
# Settings: KILN_PG_TEST_PORT (default: the first free port from 55432), KILN_CACHE_DIR
# (default ~/.cache/kiln; the state file sits there).
set -euo pipefail

cache="${KILN_CACHE_DIR:-$HOME/.cache/kiln}"
state="$cache/postgres-test-server.state"

log() { echo "postgres-test-server: $*" >&2; }

bindir() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
  if [ -z "$d" ] || [ ! -x "$d/initdb" ]; then
    log "PostgreSQL's server programs are missing: run scripts/setup.sh (Debian package postgresql)"
    exit 1
  fi
  echo "$d"
}

# Runs a command as the cluster's owner.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
  mkdir -p "$cache"
  if [ -f "$state" ]; then
    # shellcheck disable=SC1090
    . "$state"
    if as_owner "$(bindir)/pg_ctl" -D "$PGDIR" status >/dev/null 2>&1; then
      log "already running on port $PGPORT"
      echo "$URL"
      return 0
    fi
    rm -rf "$PGDIR"
    rm -f "$state"
  fi
  local bin dir port password
  bin="$(bindir)"
  port="${KILN_PG_TEST_PORT:-}"
  if [ -z "$port" ]; then
    for p in $(seq 55432 55532); do
      if port_free "$p"; then port="$p"; break; fi
    done
  fi
  if [ -z "$port" ] || ! port_free "$port"; then
    log "no free port (or KILN_PG_TEST_PORT=$port is taken)"
    exit 1
  fi
  dir="$(mktemp -d /tmp/kiln-pgtest.XXXXXX)"
  password="kiln-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
  printf '%s\n' "$password" >"$dir.pw"
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres "$dir" "$dir.pw"
  fi
  log "initdb in $dir"
  as_owner "$bin/initdb" -D "$dir" -U kiln --pwfile="$dir.pw" --auth-host=scram-sha-256 \
    --auth-local=trust -E UTF8 >"$dir.initdb.log" 2>&1 || {
    cat "$dir.initdb.log" >&2
    exit 1
  }
  rm -f "$dir.pw"
  log "starting on 127.0.0.1:$port"
  # 200 connections: kiln-tune's start-up test runs 80 workers at once, one connection each.
  as_owner "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" \
    start >&2
  PGPASSWORD="$password" "$bin/psql" -h 127.0.0.1 -p "$port" -U kiln -d postgres -q \
    -c "CREATE DATABASE kiln_test" >&2
  local url="postgresql://kiln:$password@127.0.0.1:$port/kiln_test"
  printf 'PGDIR=%q\nPGPORT=%q\nURL=%q\n' "$dir" "$port" "$url" >"$state"
  log "ready"
  echo "$url"
}

stop() {
  if [ ! -f "$state" ]; then
    log "not running"
    return 0
  fi
  # shellcheck disable=SC1090
  . "$state"
  as_owner "$(bindir)/pg_ctl" -D "$PGDIR" -m fast -w stop >&2 || true
  rm -rf "$PGDIR" "$PGDIR.initdb.log"
  rm -f "$state"
  log "stopped and removed"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
