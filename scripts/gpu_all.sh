#!/usr/bin/env bash
# Every gpu-marked test and GPU benchmark, in ONE call (device time is scarce and starts can be refused).
# Usage on a CUDA host:   bash scripts/gpu_all.sh            (logs under ${OUT:-gpu-logs}/)
# From this repo's dev box: the `device` tool runs it on an H200; see README "GPU runs".
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-logs}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY="${PYTHON:-python3}"
# The device image has torch/transformers/pytest but no network: install the kit itself, offline, no deps.
$PY -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/install.log" 2>&1 \
  || { echo "install failed"; tail -20 "$OUT/install.log"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
rc=0
# 1. the kit's own gpu tests (real CUDA graphs, NCCL, hang regressions)
timeout 420 $PY -m pytest -m gpu -p no:cacheprovider -q -rA --junitxml="$OUT/junit-gpu.xml" tests 2>&1 \
  | tee "$OUT/pytest-gpu.log" | tail -40 || rc=1
# 2. the conformance suites on the torch reference models, real graphs
timeout 300 $PY -m fd_conformance.cli run --runtime torch --out "$OUT/run" 2>&1 | tee "$OUT/run.log" | tail -30 || rc=1
# 3. benchmarks
for b in bench/suite_time.py; do
  [ -f "$b" ] && timeout 300 $PY "$b" --gpu 2>&1 | tee "$OUT/$(basename "$b" .py).log" | tail -15
done
exit $rc
