#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build, test and plot cpbench. Idempotent:
# packages already present are not reinstalled, and apt-get update runs at most once.
set -euo pipefail

apt_pkgs=(cmake g++ make pkg-config
          nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
          libopenmpi-dev openmpi-bin libopenblas-dev libtrilinos-zoltan-dev)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# matplotlib draws the figures (scripts/plot.py); numpy comes with it.
if ! python3 -c "import matplotlib" 2>/dev/null; then
  echo "setup: installing matplotlib" >&2
  python3 -m pip install --quiet matplotlib
fi

# Hugging Face's tokenizers: scripts/measure_lengths.py counts a corpus's tokens with a model's own
# tokenizer.json (its test builds one locally; nothing is downloaded).
if ! python3 -c "import tokenizers" 2>/dev/null; then
  echo "setup: installing tokenizers" >&2
  python3 -m pip install --quiet tokenizers
fi

# cudnn-frontend (NVIDIA's header-only graph API for cuDNN: kernels/cudnn) when the CUDA toolkit is
# here; its PyPI wheel ships the headers (site-packages/include), which CMake finds.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  if ! python3 -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['purelib'], 'include', 'cudnn_frontend.h')))" 2>/dev/null; then
    echo "setup: installing nvidia-cudnn-frontend" >&2
    python3 -m pip install --quiet nvidia-cudnn-frontend==1.32.0 || echo "setup: cudnn-frontend not installed (kernels/cudnn is then not built)" >&2
  fi
fi

# Mt-KaHyPar, only for scripts/compare_partitioners.py (DCP's partitioner against it); cpbench
# itself partitions with Zoltan. Not fatal when PyPI cannot be reached.
if ! python3 -c "import mtkahypar" 2>/dev/null; then
  echo "setup: installing mtkahypar" >&2
  python3 -m pip install --quiet mtkahypar || echo "setup: mtkahypar not installed (scripts/compare_partitioners.py needs it)" >&2
fi
