#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer build of cpbench (build-asan/), then the fuzz corpus
# (scripts/fuzz.py: mutated specs, presets and results files), MPI exec runs of every CP layout
# and MPI re-shard runs through it. A sanitizer finding exits 86 (not a cpbench exit code), which fails the run.
# Leak detection is off: Open MPI's own allocations at exit would drown the report, and a leak in
# a process that exits is not what this guards against (out-of-bounds, use-after-free, UB).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-asan"
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCPBENCH_BUILD_TESTS=OFF -DCPBENCH_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$build" --target cpbench -j "$(nproc)"
export ASAN_OPTIONS=detect_leaks=0:exitcode=86:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:exitcode=86:print_stacktrace=1
export OMP_NUM_THREADS=1
python3 "$root/scripts/fuzz.py" "$build/cpbench" "$root/experiments" --mutants 300 --min-mutants 300 --seed 1 --seconds 900
mpi="mpirun --oversubscribe --allow-run-as-root -np 2"
for layout in ring zigzag all_gather a2a a2a+p2p; do
  $mpi "$build/cpbench" exec --layout "$layout" --mask causal --lengths 300,132,64 --heads 4 --kv-heads 2 \
    --head-dim 16 --backward --timeout 300 >/dev/null
done
$mpi "$build/cpbench" exec --dynamic-cp --lengths 700,300,129,64,33 --heads 4 --kv-heads 2 --head-dim 16 \
  --max-seqlen-per-rank 512 --backward --timeout 300 >/dev/null
# Tenplex's re-shard with real tensors: TP, PP and DP change into the distributed optimizer's
# shards, staged; and a failure recovered from a replica.
mpirun --oversubscribe --allow-run-as-root -np 4 "$build/cpbench" reshard --from 2,1,2 --to 1,4,1,dist-opt \
  --model tiny_llama --gpus-per-node 2 --staging-mib 0.5 --timeout 300 >/dev/null
mpirun --oversubscribe --allow-run-as-root -np 4 "$build/cpbench" reshard --from 2,1,2 --to 1,1,2 --lost 1 \
  --model tiny_gpt --gpus-per-node 2 --timeout 300 >/dev/null
echo "sanitize: fuzz corpus, MPI exec and re-shard runs clean under ASan + UBSan"
