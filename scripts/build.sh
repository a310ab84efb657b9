#!/usr/bin/env bash
# Configures and builds cpbench into build/ (Release unless BUILD_TYPE says otherwise; BUILD_DIR
# names another build folder, anywhere: CI builds outside the checkout): every target, or only the
# targets named as arguments (scripts/run.sh builds `cpbench` alone).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_type=${BUILD_TYPE:-Release}
build=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
