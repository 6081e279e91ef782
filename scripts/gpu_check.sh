#!/usr/bin/env bash
# The nvshmem backend on a lent NVIDIA GPU, in one prepared command. NOT RUN YET on a GPU:
# docs/nvidia.md says so until it has.
#
#   bash scripts/gpu_check.sh            # summary and logs under $OUT (default ./gpu-check-out)
#
# Expects the image of the lent H200: python3 with torch (cu130), triton, nvidia-nvshmem-cu13, pybind11,
# scikit-build-core, cmake and ninja, CUDA's compiler and headers; nothing is fetched. It builds and installs
# this checkout into that python, prints `unishmem info`, then runs 2 PEs on the one GPU (NVSHMEM's limited
# multi-PE-per-GPU mode, unique id on loopback): init, allocation, peer views, on-stream put/get, put_signal
# and signal_wait_until, barrier_all, put bandwidth beside torch's device-to-device copy, the Triton kernel
# check, the device-library examples (ring all-gather, signal ping-pong) and the five tutorials (which call
# unishmem.kernels) compiled for the GPU, and a deliberately hung kernel under the hang watchdog. Every phase
# has a time limit; the whole is meant to stay under 9 minutes (the tutorials' compiles are not timed yet).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
START=$(date +%s)
status=0
phase() { echo "== $* ($(( $(date +%s) - START )) s)" | tee -a "$OUT/summary.txt"; }

phase "machine"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  "$PY" -m pip show nvidia-nvshmem-cu13 2>/dev/null | grep -E '^(Name|Version)'
} 2>&1 | tee -a "$OUT/summary.txt"

phase "build and install (log: build.log)"
if ! timeout 300 "$PY" -m pip install --no-build-isolation --no-deps --no-index -v . >"$OUT/build.log" 2>&1; then
  echo "BUILD FAILED (exit $?); last lines:" | tee -a "$OUT/summary.txt"
  tail -n 30 "$OUT/build.log" | tee -a "$OUT/summary.txt"
  exit 1
fi
grep -E "unishmem: (NVSHMEM|rocSHMEM) backend" "$OUT/build.log" | tee -a "$OUT/summary.txt"

phase "unishmem info"
timeout 60 "$PY" -m unishmem info 2>&1 | tee "$OUT/info.txt" | tee -a "$OUT/summary.txt"

phase "2 PEs on one GPU (log: run.log, per PE: pe0.json, pe1.json)"
export UNISHMEM_BACKEND=nvshmem UNISHMEM_SYMMETRIC_SIZE=1G UNISHMEM_WAIT_TIMEOUT=60 PYTHONUNBUFFERED=1
export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_DISABLE_NCCL=1
timeout 240 "$PY" -m unishmem run -n 2 scripts/gpu_check_pe.py "$OUT" >"$OUT/run.log" 2>&1
rc=$?
[ $rc -ne 0 ] && status=1
grep -E '^\[pe [0-9]\]' "$OUT/run.log" | tee -a "$OUT/summary.txt"
echo "job exit status $rc" | tee -a "$OUT/summary.txt"
[ $rc -ne 0 ] && tail -n 40 "$OUT/run.log" | tee -a "$OUT/summary.txt"

# ---- device library and unishmem.kernels, compiled: what limited mode allows (device RMA, signals,
# barrier_all; the kernels' cross-PE shape check goes through the bootstrap there: NOTE [limited-mode
# exchange] in pysrc/unishmem/kernels/_workspace.py). Each tutorial checks itself against torch.
phase "device-library examples and tutorials, compiled, 2 PEs (logs: <example>.log)"
for example in ring_allgather ping_pong tutorials/01_notify_wait tutorials/02_all_gather_gemm \
  tutorials/03_gemm_reduce_scatter tutorials/04_moe_all_to_all tutorials/05_one_shot_all_reduce; do
  log="$OUT/$(basename "$example").log"
  timeout 90 "$PY" -m unishmem run -n 2 "examples/$example.py" >"$log" 2>&1
  erc=$?
  [ $erc -ne 0 ] && status=1
  { echo "$example: exit status $erc"; tail -n 3 "$log"; } | tee -a "$OUT/summary.txt"
done

# ---- hang diagnostics: a deliberately hung kernel, compiled with debug waits -------------
# PE 0 waits for a signal nobody sends, PE 1 for PE 0 in barrier_all; the watchdog must print one report
# (PE 0's wait: signal, heap offset, == 1, it is 0) and end the job with status 124 within the timeout.
phase "hung kernel with the watchdog, 2 PEs (log: hung_kernel.log)"
UNISHMEM_DEBUG_WAITS=1 timeout 120 "$PY" -m unishmem run -n 2 --hang-timeout 10 tests/programs/hung_kernel.py \
  >"$OUT/hung_kernel.log" 2>&1
hrc=$?
{ echo "hung kernel: exit status $hrc (expected 124)"; sed -n '/\[unishmem\] hang:/,/^signals last/p' "$OUT/hung_kernel.log" | head -n 20
} | tee -a "$OUT/summary.txt"
if [ $hrc -ne 124 ] || ! grep -q "PE 0 waits for signal at heap offset" "$OUT/hung_kernel.log"; then
  status=1; tail -n 30 "$OUT/hung_kernel.log" | tee -a "$OUT/summary.txt"
fi

phase "done, exit status $status"
exit $status
