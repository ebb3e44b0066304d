#!/usr/bin/env bash
# kiln's whole test suite, slow end-to-end tests included (the CNN example trains to 0.91),
# the s3:// tests against a local S3 server (scripts/s3-test-server.sh, started here), then the
# interop tests against real TensorFlow / TensorBoard (scripts/interop.sh).
# For a quick loop while developing: cargo test --release
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# kiln-data's s3:// tests read from a real S3-compatible server on loopback (moto, from PyPI):
# start one unless the caller points at theirs.
if [ -z "${KILN_TEST_S3_ENDPOINT:-}" ]; then
  KILN_TEST_S3_ENDPOINT="$(scripts/s3-test-server.sh start)"
  export KILN_TEST_S3_ENDPOINT
  trap 'scripts/s3-test-server.sh stop' EXIT
fi
cargo test --release --workspace -- --include-ignored
scripts/interop.sh
