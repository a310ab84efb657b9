#!/usr/bin/env bash
# The tests: install dependencies, build, and run every CTest test (unit, mpi and slow labels; not
# gpu, which needs a device).
# Extra arguments go to ctest (e.g. -L unit). BUILD_DIR: the build folder (default build/; the
# tests find the checkout's experiments/ wherever it is). Then scripts/sanitize.sh: the ASan + UBSan build and
# its fuzz and MPI runs (CPBENCH_SKIP_SANITIZE=1 skips it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
BUILD_TYPE=${BUILD_TYPE:-Release} "$root/scripts/build.sh"
cd "${BUILD_DIR:-$root/build}"
# Label gpu needs a device (scripts/device_check.sh runs it there).
ctest --output-on-failure -j "$(nproc)" -LE gpu "$@"
# The fuzz corpus and MPI exec runs again under AddressSanitizer + UBSan (build-asan/).
[ -n "${CPBENCH_SKIP_SANITIZE:-}" ] || "$root/scripts/sanitize.sh"
