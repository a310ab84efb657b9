#!/usr/bin/env bash
# device_check.sh — the one prepared script for a session with a GPU (issue 32): the device's
# environment, then every GPU test (CTest label gpu: built here with CUDA, run there), each with a
# time limit, in well under the 15 minutes a session has, so a second try fits.
#
#   here:  scripts/device_check.sh --prepare   (builds the GPU tests, fills build/device_libs)
#   run (device tool): command "OUT=$OUT scripts/device_check.sh", carry ["build/device_bin"]
#          (--prepare puts the GPU tests, the GPU bench and their libraries there)
#   by hand on a GPU machine: scripts/device_check.sh --prepare, then scripts/device_check.sh
#
# --prepare builds the GPU tests and bench (Release), copies them to build/device_bin and puts
# beside them, in build/device_bin/lib (put on LD_LIBRARY_PATH), the shared libraries they need
# that a bare machine with a CUDA driver may lack:
# this machine's libcudart and libgomp, and, for OpenBLAS (which executed_plans_gpu_test links
# through the CPU kernels but never calls: its references are the naive kernels at the tests'
# sizes, its kernels the GPU's), Debian's 0.2 MB reference BLAS under OpenBLAS's file name, so that
# the carried folder stays far below the device tool's 64 MiB (OpenBLAS is 35 MB). A BLAS call
# there would fail loudly, naming the missing openblas_* symbol. The tests need no MPI and no
# Zoltan (the GPU tests link with --as-needed; DCP's planner, which needs both, is not in them:
# its plans travel as build/dcp_test_plans.json, which the build writes and --prepare carries).
# cuDNN, NVRTC and NCCL are too large to carry (0.5 GB, 110 MB, 250 MB): they are taken from the
# device's PyTorch wheels (nvidia.* packages), whose versions environment.txt records.
# Without the binaries it builds them there when CMake and the dependencies are present. After the
# tests, attention_gpu_bench (our tensor-core and SIMT forwards beside cuDNN's forward and backward
# through SdpaRunner) and torch's cuDNN and FlashAttention SDPA backends on the same shapes
# (measure_gpu_ops.py --sdpa) go to attention.txt: issue 32's speed targets, whose verdicts
# (scripts/attention_table.py) end summary.txt's test lines. Then,
# where PyTorch has CUDA, the op measurements `cpbench calibrate` reads (scripts/measure_gpu_ops.py:
# GEMMs, FlashAttention-2, HBM copies, host time per call) and the training-size GEMMs again after
# 10 s of back-to-back load each, with the SM clock and power (the steady clock a training step
# sees; issue 30), and the layer replays (experiments/replay: one layer's kernels of published
# configurations, as the simulator lowers them). Writes at most 8 files to $OUT (default
# /tmp/device_check): environment.txt, summary.txt (one line per test or measurement: exit code,
# milliseconds; then the host time per eager call), tests.log, tests.json, attention.txt, ops.csv,
# sustained.csv, replay.csv.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${BUILD_DIR:-$root/build}"
bin="$build/device_bin"
out="${OUT:-/tmp/device_check}"
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The DCP plans executed_plans_gpu_test runs, planned here by --prepare (the build's file else).
[ -f "$bin/dcp_test_plans.json" ] && export CPBENCH_DCP_TEST_PLANS="$bin/dcp_test_plans.json"
# NCCL, cuDNN and NVRTC: the machine's own, else the ones PyTorch's wheels ship (nvidia.*/lib).
wheel_libs=$(python3 -c "
import glob, os, nvidia
dirs = {os.path.dirname(f) for p in nvidia.__path__ for pat in ('libnccl.so*', 'libcudnn.so*', 'libnvrtc.so*')
        for f in glob.glob(os.path.join(p, '**', pat), recursive=True)}
print(':'.join(sorted(dirs)))" 2>/dev/null)
[ -n "$wheel_libs" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$wheel_libs"
gpu_tests=(flash_simt_gpu_test flash_mma_gpu_test cuda_tensor_ops_gpu_test cuda_attention_kernels_gpu_test
           executed_plans_gpu_test sdpa_runner_gpu_test nccl_communicator_gpu_test)
gpu_bench=attention_gpu_bench

if [ "${1:-}" = "--prepare" ]; then
  BUILD_TYPE=Release "$root/scripts/build.sh" "${gpu_tests[@]}" "$gpu_bench" || exit 1
  rm -rf "$bin" && mkdir -p "$bin/lib"
  for t in "${gpu_tests[@]}" "$gpu_bench"; do cp "$build/$t" "$bin/"; done
  cp "$build/dcp_test_plans.json" "$bin/" || exit 1  # DCP's plans, made here (Zoltan needs MPI)
  libs="$bin/lib"
  for t in "${gpu_tests[@]}" "$gpu_bench"; do
    ldd "$build/$t" | awk '/=> \//{print $1, $3}'
  done | sort -u | while read -r name path; do
    case "$name" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*) ;;  # every Linux has them
      libopenblas.so*) cp -L /usr/lib/x86_64-linux-gnu/blas/libblas.so.3 "$libs/$name" ;;
      libgfortran.so*|libquadmath.so*) ;;  # OpenBLAS's, not the reference BLAS's
      libnccl.so*|libcudnn*.so*|libnvrtc*.so*) ;;  # too large to carry: the device's PyTorch wheels have them
      *) cp -L "$path" "$libs/$name" ;;
    esac
  done
  du -sh "$bin" "$libs"
  exit 0
fi

mkdir -p "$out"
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  nvcc --version 2>/dev/null | tail -2
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'nccl', torch.cuda.nccl.version())" 2>/dev/null
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt"

shopt -s nullglob
tests=("$bin"/*_gpu_test)
if [ ${#tests[@]} -eq 0 ]; then
  echo "device_check: no *_gpu_test in $bin; building them" >&2
  BUILD_TYPE=Release "$root/scripts/build.sh" "${gpu_tests[@]}" "$gpu_bench" >"$out/tests.log" 2>&1 || true
  mkdir -p "$bin" && cp "$build"/*_gpu_test "$build/$gpu_bench" "$bin/" 2>/dev/null
  tests=("$bin"/*_gpu_test)
fi
: > "$out/summary.txt"
echo "[" > "$out/tests.json"
first=1
status=0
for t in "${tests[@]}"; do
  name=$(basename "$t")
  start=$(date +%s%N)
  timeout 240 "$t" --gtest_output="json:$out/$name.json" >> "$out/tests.log" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "$name rc=$rc ms=$ms" | tee -a "$out/summary.txt"
  if [ -f "$out/$name.json" ]; then
    [ $first -eq 1 ] || echo "," >> "$out/tests.json"
    cat "$out/$name.json" >> "$out/tests.json"
    rm -f "$out/$name.json"
    first=0
  fi
  [ $rc -eq 0 ] || status=1
done
echo "]" >> "$out/tests.json"
# Speeds: our kernels beside cuDNN (Google Benchmark CSV), then torch's SDPA backends.
if [ -x "$bin/$gpu_bench" ]; then
  start=$(date +%s%N)
  timeout 180 "$bin/$gpu_bench" --benchmark_format=csv > "$out/attention.txt" 2>> "$out/tests.log"
  rc=$?
  echo "$gpu_bench rc=$rc ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/summary.txt"
  [ $rc -eq 0 ] || status=1
fi
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  start=$(date +%s%N)
  timeout 120 python3 "$root/scripts/measure_gpu_ops.py" --sdpa --out "$out/sdpa.csv" >> "$out/tests.log" 2>&1
  rc=$?
  echo "measure_gpu_ops --sdpa rc=$rc ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/summary.txt"
  { echo; cat "$out/sdpa.csv"; } >> "$out/attention.txt" 2>/dev/null
  rm -f "$out/sdpa.csv"
  [ $rc -eq 0 ] || status=1
  start=$(date +%s%N)
  timeout 300 python3 "$root/scripts/measure_gpu_ops.py" --out "$out/ops.csv" --sustained 10 \
    --host-out "$out/host_ops.txt" >> "$out/tests.log" 2>&1
  rc=$?
  echo "measure_gpu_ops rc=$rc ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/summary.txt"
  cat "$out/host_ops.txt" >> "$out/summary.txt" 2>/dev/null
  rm -f "$out/host_ops.txt"
  [ $rc -eq 0 ] || status=1
  # Layer replays: each committed layer's kernels (experiments/replay/*.layer_ops.csv, written by
  # `cpbench run --trace`) measured on this device into one file, a "# layer NAME" line before
  # each; `cpbench calibrate FILE --preset ... --check` compares them with the model per op family.
  : > "$out/replay.csv"
  for f in "$root"/experiments/replay/*.layer_ops.csv; do
    name=$(basename "$f" .layer_ops.csv)
    start=$(date +%s%N)
    timeout 120 python3 "$root/scripts/measure_gpu_ops.py" --replay "$f" --out "$out/replay_one.csv" --iters 10 >> "$out/tests.log" 2>&1
    rc=$?
    echo "replay $name rc=$rc ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/summary.txt"
    if [ $rc -eq 0 ]; then
      { echo "# layer $name"; cat "$out/replay_one.csv"; } >> "$out/replay.csv"
    else
      status=1
    fi
    rm -f "$out/replay_one.csv"
  done
else
  echo "measure_gpu_ops: skipped (no PyTorch with CUDA)" | tee -a "$out/summary.txt"
fi
# Issue 32's two speed targets with their verdicts, read from attention.txt (the bench's rows, and
# torch's where PyTorch has CUDA).
{ echo; python3 "$root/scripts/attention_table.py" "$out/attention.txt"; } 2>&1 | tee -a "$out/summary.txt"
[ ${#tests[@]} -gt 0 ] || { echo "device_check: no GPU test could be built" | tee -a "$out/summary.txt"; status=1; }
exit $status
