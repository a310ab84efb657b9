#!/usr/bin/env bash
# Configures and builds cpbench into build/ (Release unless BUILD_TYPE says otherwise): every
# target, or only the targets named as arguments (scripts/run.sh builds `cpbench` alone).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_type=${BUILD_TYPE:-Release}
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$root/build" -j "$(nproc)" "${targets[@]}"
