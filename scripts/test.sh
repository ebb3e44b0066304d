#!/usr/bin/env bash
# kiln's whole test suite, slow end-to-end tests included (the CNN example trains to 0.91),
# the s3:// tests against a local S3 server (scripts/s3-test-server.sh, started here), kiln-tune's
# multi-worker tests against a throwaway PostgreSQL cluster (scripts/postgres-test-server.sh,
# started here), then the interop tests against real TensorFlow / TensorBoard (scripts/interop.sh).
# For a quick loop while developing: cargo test --release
set -euo pipefail
cd "$(dirname "$0")/.."
# One build for the tests and the interop scripts (scripts/interop.sh builds here too).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${KILN_CACHE_DIR:-$HOME/.cache/kiln}/target}"
scripts/setup.sh
# kiln-data's s3:// tests read from a real S3-compatible server on loopback (moto, from PyPI):
# start one unless the caller points at theirs.
stop_servers=()
cleanup() {
  for s in "${stop_servers[@]}"; do "$s" stop || true; done
}
trap cleanup EXIT
if [ -z "${KILN_TEST_S3_ENDPOINT:-}" ]; then
  KILN_TEST_S3_ENDPOINT="$(scripts/s3-test-server.sh start)"
  export KILN_TEST_S3_ENDPOINT
  stop_servers+=(scripts/s3-test-server.sh)
fi
# kiln-tune's PostgreSQL tests (two workers on one study): a throwaway cluster, unless the
# caller points at theirs.
if [ -z "${KILN_TEST_POSTGRES_URL:-}" ]; then
  KILN_TEST_POSTGRES_URL="$(scripts/postgres-test-server.sh start)"
  export KILN_TEST_POSTGRES_URL
  stop_servers+=(scripts/postgres-test-server.sh)
fi
cargo test --release --workspace -- --include-ignored
scripts/interop.sh
