#!/usr/bin/env bash
# The tests: install dependencies, build, and run every CTest test (unit, mpi and slow labels).
# Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
BUILD_TYPE=${BUILD_TYPE:-Release} "$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure -j "$(nproc)" "$@"
