#!/usr/bin/env bash
# Configures and builds tandem. Usage: scripts/build.sh [build-dir] [extra cmake args...]
# TANDEM_TARGETS (space-separated) builds only those targets (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > /dev/null
# ccache (when installed) may reuse objects built with precompiled headers.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros}
targets=()
for t in ${TANDEM_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
