#!/usr/bin/env bash
# kiln's whole test suite, slow end-to-end tests included (the CNN example trains to 0.91),
# then the interop tests against real TensorFlow / TensorBoard (scripts/interop.sh).
# For a quick loop while developing: cargo test --release
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --release --workspace -- --include-ignored
scripts/interop.sh
