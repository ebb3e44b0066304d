#!/usr/bin/env bash
# A throwaway S3-compatible server on loopback for kiln-data's s3:// tests: moto's server mode
# (PyPI package moto[server]), in a virtual environment under the kiln cache directory.
#
#   scripts/s3-test-server.sh start   # creates the venv if missing, starts the server, waits
#                                     # until it answers, prints the endpoint on stdout:
#   export KILN_TEST_S3_ENDPOINT=$(scripts/s3-test-server.sh start)
#   cargo test --release -p kiln-data -- --include-ignored
#   scripts/s3-test-server.sh stop
#
# Settings: KILN_S3_TEST_PORT (default 5555), KILN_CACHE_DIR (default ~/.cache/kiln; the venv
# is $KILN_CACHE_DIR/motovenv, the pid and log files sit beside it). moto keeps objects in
# memory: a restart starts empty. It accepts any credentials (the tests use "testing").
set -euo pipefail

cache="${KILN_CACHE_DIR:-$HOME/.cache/kiln}"
venv="$cache/motovenv"
port="${KILN_S3_TEST_PORT:-5555}"
endpoint="http://127.0.0.1:$port"
pidfile="$cache/s3-test-server-$port.pid"
log="$cache/s3-test-server-$port.log"

log() { echo "s3-test-server: $*" >&2; }

# True when something answers HTTP on the port.
answers() {
  "$venv/bin/python" - "$endpoint" <<'EOF' >/dev/null 2>&1
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1] + "/moto-api/", timeout=2)
except urllib.error.HTTPError:
    pass  # an HTTP answer of any status means the server is up
EOF
}

running_pid() {
  [ -f "$pidfile" ] || return 1
  local pid
  pid="$(cat "$pidfile")"
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

start() {
  mkdir -p "$cache"
  if [ ! -x "$venv/bin/moto_server" ]; then
    log "creating $venv with moto[server] (PyPI)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'moto[server]>=5,<6' >&2
  fi
  if running_pid >/dev/null && answers; then
    log "already running (pid $(cat "$pidfile"))"
    echo "$endpoint"
    return 0
  fi
  if answers; then
    log "port $port is taken by another process: set KILN_S3_TEST_PORT to a free port"
    exit 1
  fi
  log "starting moto on $endpoint (log: $log)"
  nohup "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 1 150); do
    if answers; then
      log "ready (pid $(cat "$pidfile"))"
      echo "$endpoint"
      return 0
    fi
    if ! running_pid >/dev/null; then
      log "moto exited; its log:"
      cat "$log" >&2
      rm -f "$pidfile"
      exit 1
    fi
    sleep 0.2
  done
  log "moto did not answer within 30 s; its log:"
  cat "$log" >&2
  exit 1
}

stop() {
  local pid
  if pid="$(running_pid)"; then
    kill "$pid"
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    log "stopped (pid $pid)"
  else
    log "not running"
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
