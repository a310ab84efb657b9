#!/usr/bin/env bash
# device_check.sh — the one prepared script for a session with a GPU (issue 32): the device's
# environment, then every GPU test (CTest label gpu: built here with CUDA, run there), each with a
# time limit, in well under the 15 minutes a session has, so a second try fits.
#
#   here:  BUILD_TYPE=Release scripts/build.sh flash_simt_gpu_test cuda_tensor_ops_gpu_test cuda_attention_kernels_gpu_test
#          mkdir -p build/device_libs && cp -L /usr/local/cuda/lib64/libcudart.so.13 build/device_libs/
#   run (device tool): command "OUT=$OUT scripts/device_check.sh", carry ["build/flash_simt_gpu_test",
#          "build/cuda_tensor_ops_gpu_test", "build/cuda_attention_kernels_gpu_test", "build/device_libs"]
#   by hand on a GPU machine: the build line above, then scripts/device_check.sh
#
# The test binaries need only the CUDA runtime and the C++ runtime (CMakeLists.txt links them so),
# so they are built here and carried, with this machine's libcudart in build/device_libs (put on
# LD_LIBRARY_PATH) in case the device's differs; without them it builds them there when CMake and
# the dependencies are present. Then, where PyTorch has CUDA, the op measurements `cpbench calibrate`
# reads (scripts/measure_gpu_ops.py: GEMMs, FlashAttention-2, HBM copies, host time per call) and
# the training-size GEMMs again after 10 s of back-to-back load each, with the SM clock and power
# (the steady clock a training step sees; issue 30). Writes at most 7 files to $OUT (default
# /tmp/device_check): environment.txt, summary.txt (one line per test or measurement: exit code,
# milliseconds), tests.log, tests.json, ops.csv, sustained.csv, host_ops.txt.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${BUILD_DIR:-$root/build}"
out="${OUT:-/tmp/device_check}"
export LD_LIBRARY_PATH="$build/device_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$out"
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  nvcc --version 2>/dev/null | tail -2
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'nccl', torch.cuda.nccl.version())" 2>/dev/null
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt"

shopt -s nullglob
tests=("$build"/*_gpu_test)
if [ ${#tests[@]} -eq 0 ]; then
  echo "device_check: no *_gpu_test in $build; building them" >&2
  BUILD_TYPE=Release "$root/scripts/build.sh" flash_simt_gpu_test cuda_tensor_ops_gpu_test cuda_attention_kernels_gpu_test >"$out/tests.log" 2>&1 || true
  tests=("$build"/*_gpu_test)
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
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  start=$(date +%s%N)
  timeout 300 python3 "$root/scripts/measure_gpu_ops.py" --out "$out/ops.csv" --sustained 10 >> "$out/tests.log" 2>&1
  rc=$?
  echo "measure_gpu_ops rc=$rc ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$out/summary.txt"
  [ $rc -eq 0 ] || status=1
else
  echo "measure_gpu_ops: skipped (no PyTorch with CUDA)" | tee -a "$out/summary.txt"
fi
[ ${#tests[@]} -gt 0 ] || { echo "device_check: no GPU test could be built" | tee -a "$out/summary.txt"; status=1; }
exit $status
