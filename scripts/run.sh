#!/usr/bin/env bash
# The main job: install dependencies, build (Release), run every registered experiment into
# results/, draw each experiment's figures, and regenerate the reproduction report in paper/.
# Extra arguments go to every `cpbench run` (e.g. --jobs 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
BUILD_TYPE=Release "$root/scripts/build.sh"
cd "$root"
status=0
while read -r name _; do
  [ -n "$name" ] || continue
  ./build/cpbench run "$name" --out results "$@" || status=1
done < <(./build/cpbench list)
python3 scripts/plot.py results
python3 scripts/report.py results --out paper
exit $status
