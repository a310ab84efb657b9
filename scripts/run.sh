#!/usr/bin/env bash
# The main job: install dependencies, build (Release), run every registered experiment into
# results/, draw each experiment's figures, and regenerate the reproduction report in paper/.
# Extra arguments go to every `cpbench run`; points run on one thread per core (--jobs), which
# changes nothing in the results (they are written in the spec's order).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
BUILD_TYPE=Release "$root/scripts/build.sh" cpbench  # only what the suite runs; tests build in test.sh
cd "$root"
status=0
while read -r name _; do
  [ -n "$name" ] || continue
  ./build/cpbench run "$name" --out results --jobs "$(nproc)" "$@" || status=1
done < <(./build/cpbench list)
python3 scripts/plot.py results
python3 scripts/report.py results --out paper
exit $status
