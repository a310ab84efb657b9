#!/usr/bin/env bash
# cli_interrupt_test.sh — SIGINT and SIGTERM in the middle of `cpbench run` (CTest cli_interrupted_run):
# the run exits 130 / 143, says how many points it kept and the exact command to continue, has
# written them to results.json, and that command finishes the sweep with the same results as a run
# never interrupted.
# Usage: cli_interrupt_test.sh CPBENCH SOURCE_DIR WORK_DIR PYTHON
set -uo pipefail
cpbench=$1 src=$2 work=$3 python=$4
spec=$src/apps/testdata/sweep_4000.json
points=1500
rm -rf "$work" && mkdir -p "$work"
# Job control on: a background job of a non-interactive shell would otherwise ignore SIGINT.
set -m
status=0

for signal in INT TERM; do
  out=$work/$signal
  journal=$out/sweep_4000/results.journal.jsonl
  "$cpbench" run "$spec" --first $points --out "$out" 2>"$work/$signal.err" &
  pid=$!
  # Interrupt once some points are finished (the journal's first line is its header).
  for _ in $(seq 1 1000); do
    [ -f "$journal" ] && [ "$(wc -l <"$journal")" -gt 20 ] && break
    sleep 0.01
  done
  kill -s $signal $pid
  wait $pid
  rc=$?
  expected=$([ $signal = INT ] && echo 130 || echo 143)
  tail -3 "$work/$signal.err"
  if [ $rc -ne "$expected" ]; then echo "SIG$signal: exit $rc, expected $expected"; status=1; fi
  message=$(grep "interrupted by SIG$signal" "$work/$signal.err")
  kept=$(echo "$message" | sed -n 's/.*: \([0-9]*\) of [0-9]* points kept.*/\1/p')
  # The kept points are in results.json (the journal is gone), and fewer than all.
  written=$("$python" -c "import json,sys; print(len(json.load(open(sys.argv[1]))['points']))" \
    "$out/sweep_4000/results.json")
  if [ -z "$kept" ] || [ "$kept" != "$written" ] || [ "$kept" -ge $points ] || [ -f "$journal" ]; then
    echo "SIG$signal: message '$message', results.json holds $written points"; status=1
  fi
  # The printed command, run as printed, finishes the sweep.
  resume=$(grep -A1 "to run the rest:" "$work/$signal.err" | tail -1)
  case "$resume" in *"--out $out"*"--resume") ;; *) echo "SIG$signal: resume command '$resume'"; status=1 ;; esac
  eval "$resume" 2>/dev/null || { echo "SIG$signal: '$resume' failed"; status=1; }
done

"$cpbench" run "$spec" --first $points --out "$work/whole" 2>/dev/null || status=1
for signal in INT TERM; do
  "$python" "$src/scripts/same_results.py" --points $points "$work/$signal/sweep_4000/results.json" \
    "$work/whole/sweep_4000/results.json" || { echo "SIG$signal: resumed results differ"; status=1; }
done
exit $status
