#!/usr/bin/env bash
# Installs what kiln needs on a fresh Debian machine that has the Rust toolchain:
#   - Fashion-MNIST, Debian's package dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
#   - OpenMPI (openmpi-bin: mpirun; libopenmpi-dev: the library kiln links for
#     strategy = "multi_worker_mirrored") and libclang-dev (the `mpi` crate's bindgen reads
#     mpi.h with it). kiln-cli builds with MPI by default, so these are needed to build it.
#   - The UCR archive's ItalyPowerDemand time series (scripts/ucr-data.sh: from the PyPI wheel
#     aeon, as NPY files in /usr/local/share/datasets/ucr/ItalyPowerDemand).
#   - PostgreSQL, Debian's package postgresql: kiln-tune's multi-worker tests start a throwaway
#     cluster (scripts/postgres-test-server.sh).
# Safe to run again: it installs only what is missing.
set -euo pipefail

need_apt=()
if ! ls /usr/share/datasets/fashion-mnist/*.gz >/dev/null 2>&1; then
  need_apt+=(dataset-fashion-mnist)
fi
for pkg in openmpi-bin libopenmpi-dev libclang-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need_apt+=(postgresql)
fi

if ((${#need_apt[@]})); then
  echo "setup: installing ${need_apt[*]} (Debian packages)"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
fi

UCR_DIR=/usr/local/share/datasets/ucr "$(dirname "$0")/ucr-data.sh"

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install the Rust toolchain (https://rustup.rs), then run this again" >&2
  exit 1
fi
echo "setup: ok (Fashion-MNIST in /usr/share/datasets/fashion-mnist, $(mpirun --version | head -1), $(cargo --version))"
