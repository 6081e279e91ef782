#!/usr/bin/env bash
# The nvshmem backend on a lent NVIDIA GPU, in one prepared command. First run on an H200 on 2026-12-04:
# docs/nvidia.md#first-runs-on-a-gpu-2026-12-04 says what passed and what did not.
#
#   bash scripts/gpu_check.sh               # summary and logs under $OUT (default ./gpu-check-out)
#   bash scripts/gpu_check.sh --times-only  # build, info, then only the timing phase (a rerun: see below)
#   bash scripts/gpu_check.sh --sweep       # build, info, then only the collectives' sweep (scripts/gpu_sweep.py:
#                                           # every variant and knob, device time; resumes a cut run)
#   bash scripts/gpu_check.sh --no-gpu      # what runs without a GPU: build, info, every kernel compiled for
#                                           # sm_90, the timing script's compile plan and CPU mode, the sweep's CPU mode
#
# Expects the image of the lent H200 as it is: its python3 (torch 2.11 cu130, Triton 3.6, the NVSHMEM wheel
# torch pins, pybind11, scikit-build-core, cmake, ninja) and CUDA's compiler and headers; nothing is fetched.
# It builds and installs this checkout into that python, prints `unishmem info`, then runs 2 PEs on the one
# GPU (NVSHMEM's limited multi-PE-per-GPU mode, unique id on loopback): init, allocation, peer views,
# on-stream put/get, put_signal and signal_wait_until, barrier_all, put bandwidth beside torch's
# device-to-device copy, the Triton kernel check, the device-library examples (ring all-gather, signal
# ping-pong) and the five tutorials (which call unishmem.kernels) compiled for the GPU, a deliberately
# hung kernel under the hang watchdog, and last the timing phase (scripts/gpu_kernel_times.py): every
# kernel of unishmem.kernels from 8 KiB to 64 MiB, float16, eager and replayed from a CUDA graph, timed
# with CUDA events beside a device-to-device copy of the same bytes (and the GEMMs' GEMM part beside
# torch.matmul), each result checked against torch, compile time apart from run time.
# GPU_CHECK_EXAMPLES="ring_allgather tutorials/02_all_gather_gemm" runs only those examples (a rerun of what
# failed); GPU_CHECK_HANG=off skips the hung kernel. GPU_CHECK_MPS=1 runs the timing phase under CUDA MPS
# (each PE on half the SMs, NVSHMEM's full multi-PE-per-GPU mode: both PEs' kernels run at once instead of
# taking turns), where the image has nvidia-cuda-mps-control; without it the phase runs as before.
# GPU_CHECK_TIMES=full (default) | quick (4 sizes, 20 calls a loop) | off. It gets what is left of the
# budget, at most 240 s (480 s with --times-only), and starts no row it is unlikely to finish; its rows are
# written as they are made.
# --sweep writes $OUT/sweep-pe<N>.json row by row and $OUT/gpu-<date>.json (the rows for docs/benchmarks/) at
# the end; GPU_CHECK_MPS=1 runs it under MPS as the timing phase; it gets the budget's rest, at most 480 s
# (GPU_CHECK_SWEEP_LIMIT), and a rerun with the same $OUT runs only the rows the first did not finish.
# Triton's cache is build/triton-cache (unless TRITON_CACHE_DIR is set), kept by a warm machine between
# commands: a --times-only rerun after a full run compiles nothing the first run compiled.
#
# Time: the device tool runs one command for at most 10 minutes and lends 15 minutes in all. Every phase has
# its own limit and the whole run a budget (GPU_CHECK_BUDGET, default 540 s): a phase gets what is left of
# the budget if that is less than its limit, and one with under 15 s left is skipped and says so.
#
# --no-gpu (CI runs it in the stack the image has, NOTE [Triton releases]): the build with the image's pip
# flags, `unishmem info`, then `unishmem compile --target sm_90` of every module whose kernels the GPU phases
# launch, so that a GPU run fails only for reasons a GPU can show.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
NO_GPU=0
TIMES_ONLY=0
SWEEP=0
[ "${1:-}" = "--no-gpu" ] && NO_GPU=1
[ "${1:-}" = "--times-only" ] && TIMES_ONLY=1
[ "${1:-}" = "--sweep" ] && SWEEP=1 && TIMES_ONLY=1
TIMES="${GPU_CHECK_TIMES:-full}"
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
BUDGET="${GPU_CHECK_BUDGET:-540}"
START=$(date +%s)
status=0
phase() { echo "== $* ($(( $(date +%s) - START )) s)" | tee -a "$OUT/summary.txt"; }
# limit SECONDS (in $(...)): the phase's limit, or what is left of the budget if less; fails, saying so in
# the summary, when under 15 s are left (the caller then sets status=1: this runs in a subshell)
limit() {
  local left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 15 ]; then
    echo "SKIPPED: ${left} s left of the ${BUDGET} s budget" | tee -a "$OUT/summary.txt" >&2
    return 1
  fi
  echo $(( $1 < left ? $1 : left ))
}

phase "machine"
{ [ $NO_GPU -eq 0 ] && nvidia-smi -L && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  "$PY" -m pip show nvidia-nvshmem-cu13 2>/dev/null | grep -E '^(Name|Version)'
} 2>&1 | tee -a "$OUT/summary.txt"

phase "build and install (log: build.log)"
if ! t=$(limit 240) || ! timeout "$t" "$PY" -m pip install --no-build-isolation --no-deps --no-index -v . \
  >"$OUT/build.log" 2>&1; then
  echo "BUILD FAILED; last lines:" | tee -a "$OUT/summary.txt"
  tail -n 30 "$OUT/build.log" | tee -a "$OUT/summary.txt"
  exit 1
fi
grep -E "unishmem: (NVSHMEM|rocSHMEM) backend" "$OUT/build.log" | tee -a "$OUT/summary.txt"

phase "unishmem info"
if t=$(limit 60); then
  timeout "$t" "$PY" -m unishmem info 2>&1 | tee "$OUT/info.txt" | tee -a "$OUT/summary.txt"
else
  status=1
fi
grep -q "NOT in the matrix\|NOT readable" "$OUT/info.txt" 2>/dev/null && status=1

if [ $NO_GPU -eq 1 ]; then
  # Every module whose kernels the GPU phases launch, compiled as a launch there would (sm_90, this stack's
  # NVSHMEM bitcode linked), in one Triton cache so that a kernel two modules share compiles once.
  phase "kernels compiled for sm_90 (logs: compile-<module>.log)"
  export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$OUT/triton-cache}"
  for module in examples/ring_allgather.py examples/ping_pong.py examples/tutorials/01_notify_wait.py \
    examples/tutorials/02_all_gather_gemm.py examples/tutorials/03_gemm_reduce_scatter.py \
    examples/tutorials/05_one_shot_all_reduce.py unishmem.kernels.collectives unishmem.kernels.gemm \
    unishmem.kernels.moe; do
    log="$OUT/compile-$(basename "$module" .py).log"
    t=$(limit 180) || { status=1; break; }
    timeout "$t" "$PY" -m unishmem compile "$module" --target sm_90 --fast >"$log" 2>&1
    crc=$?
    [ $crc -ne 0 ] && status=1
    { echo "$module: exit status $crc"; tail -n 1 "$log"; } | tee -a "$OUT/summary.txt"
    [ $crc -ne 0 ] && tail -n 20 "$log" | tee -a "$OUT/summary.txt"
  done
  # The timing script without a GPU: the sm_90 binaries its GPU run compiles (launches recorded, nothing
  # run), then its CPU mode (host backend, interpreter, 8 KiB: every kernel eager and replayed through
  # unishmem.testing.capture(), checked against torch). 12-19 s and 13-20 s on the development machine
  # (Triton 3.6).
  phase "timing script: GPU compile plan and CPU mode, 2 PEs (log: kernel_times_cpu.log)"
  if t=$(limit 120); then
    { timeout "$t" "$PY" -m unishmem run -n 2 scripts/gpu_kernel_times.py "$OUT/kernel-times-plan" --plan &&
      timeout "$t" "$PY" -m unishmem run -n 2 scripts/gpu_kernel_times.py "$OUT/kernel-times-cpu" --cpu --quick
    } >"$OUT/kernel_times_cpu.log" 2>&1
    crc=$?
    [ $crc -ne 0 ] && status=1
    { echo "timing script (plan, CPU mode): exit status $crc"
      sed -n '/^sm_90 binaries/,/total per PE/p' "$OUT/kernel_times_cpu.log"
      grep -E "^(every result matched torch|FAILED)" "$OUT/kernel_times_cpu.log"
    } | tee -a "$OUT/summary.txt"
    [ $crc -ne 0 ] && tail -n 20 "$OUT/kernel_times_cpu.log" | tee -a "$OUT/summary.txt"
  else
    status=1
  fi
  # The sweep without a GPU: every configuration at 8 KiB on the host backend, checked against torch, its
  # rows merged into the JSON a GPU run writes (10-25 s on the development machine).
  phase "the collectives' sweep, CPU mode, 2 PEs (log: sweep_cpu.log)"
  if t=$(limit 120); then
    rm -rf "$OUT/sweep-cpu"
    timeout "$t" "$PY" -m unishmem run -n 2 scripts/gpu_sweep.py "$OUT/sweep-cpu" --cpu >"$OUT/sweep_cpu.log" 2>&1
    src=$?
    [ $src -ne 0 ] && status=1
    { echo "sweep (CPU mode): exit status $src, $(grep -c '^\[pe 0\]' "$OUT/sweep_cpu.log") rows on PE 0"
      grep -E "^wrote" "$OUT/sweep_cpu.log"
    } | tee -a "$OUT/summary.txt"
    [ $src -ne 0 ] && tail -n 20 "$OUT/sweep_cpu.log" | tee -a "$OUT/summary.txt"
  else
    status=1
  fi
  phase "done (--no-gpu), exit status $status"
  exit $status
fi

export UNISHMEM_BACKEND=nvshmem UNISHMEM_SYMMETRIC_SIZE=1G UNISHMEM_WAIT_TIMEOUT=60 PYTHONUNBUFFERED=1
export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_DISABLE_NCCL=1
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$PWD/build/triton-cache}"

if [ $TIMES_ONLY -eq 0 ]; then
phase "2 PEs on one GPU (log: run.log, per PE: pe0.json, pe1.json)"
if t=$(limit 150); then
  timeout "$t" "$PY" -m unishmem run -n 2 scripts/gpu_check_pe.py "$OUT" >"$OUT/run.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  grep -E '^\[pe [0-9]\]' "$OUT/run.log" | tee -a "$OUT/summary.txt"
  echo "job exit status $rc" | tee -a "$OUT/summary.txt"
  [ $rc -ne 0 ] && tail -n 40 "$OUT/run.log" | tee -a "$OUT/summary.txt"
else
  status=1
fi

# ---- device library and unishmem.kernels, compiled: what limited mode allows (device RMA, signals,
# barrier_all; the kernels' cross-PE shape check goes through the bootstrap there: NOTE [limited-mode
# exchange] in pysrc/unishmem/_workspaces.py). Each tutorial checks itself against torch.
phase "device-library examples and tutorials, compiled, 2 PEs (logs: <example>.log)"
for example in ${GPU_CHECK_EXAMPLES:-ring_allgather ping_pong tutorials/01_notify_wait tutorials/02_all_gather_gemm \
  tutorials/03_gemm_reduce_scatter tutorials/04_moe_all_to_all tutorials/05_one_shot_all_reduce}; do
  log="$OUT/$(basename "$example").log"
  t=$(limit 90) || { status=1; break; }
  timeout "$t" "$PY" -m unishmem run -n 2 "examples/$example.py" >"$log" 2>&1
  erc=$?
  [ $erc -ne 0 ] && status=1
  { echo "$example: exit status $erc"; tail -n 3 "$log"; } | tee -a "$OUT/summary.txt"
done

# ---- hang diagnostics: a deliberately hung kernel, compiled with debug waits -------------
# PE 0 waits for a signal nobody sends, PE 1 for PE 0 in barrier_all; the watchdog must print one report
# (PE 0's wait: signal, heap offset, == 1, it is 0) and end the job with status 124 within the timeout.
phase "hung kernel with the watchdog, 2 PEs (log: hung_kernel.log)"
if [ "${GPU_CHECK_HANG:-on}" = "off" ]; then
  echo "skipped (GPU_CHECK_HANG=off)" | tee -a "$OUT/summary.txt"
elif t=$(limit 90); then
  UNISHMEM_DEBUG_WAITS=1 timeout "$t" "$PY" -m unishmem run -n 2 --hang-timeout 10 tests/programs/hung_kernel.py \
    >"$OUT/hung_kernel.log" 2>&1
  hrc=$?
  { echo "hung kernel: exit status $hrc (expected 124)"; sed -n '/\[unishmem\] hang:/,/^signals last/p' "$OUT/hung_kernel.log" | head -n 20
  } | tee -a "$OUT/summary.txt"
  if [ $hrc -ne 124 ] || ! grep -q "PE 0 waits for signal at heap offset" "$OUT/hung_kernel.log"; then
    status=1; tail -n 30 "$OUT/hung_kernel.log" | tee -a "$OUT/summary.txt"
  fi
else
  status=1
fi
fi  # TIMES_ONLY

# MPS for the timed phases (GPU_CHECK_MPS=1): start_mps sets mps=1 where the daemon started; stop_mps ends it
mps=0
start_mps() {
  [ "${GPU_CHECK_MPS:-0}" = "1" ] || return 0
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/unishmem-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/unishmem-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d; then
    mps=1
    export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
    echo "MPS started: each PE on 50% of the SMs" | tee -a "$OUT/summary.txt"
  else
    echo "MPS could not be started (nvidia-cuda-mps-control: $(command -v nvidia-cuda-mps-control || echo none)); timing without it" | tee -a "$OUT/summary.txt"
  fi
}
stop_mps() {
  if [ $mps -eq 1 ]; then
    echo quit | nvidia-cuda-mps-control
    unset CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
    mps=0
  fi
}

# ---- the collectives' sweep (scripts/gpu_sweep.py), --sweep only --------------------------------
if [ $SWEEP -eq 1 ]; then
  phase "the collectives' sweep, 2 PEs (log: sweep.log, per PE: sweep-pe0.json, sweep-pe1.json)"
  start_mps
  if t=$(limit "${GPU_CHECK_SWEEP_LIMIT:-480}"); then
    GPU_CHECK_COMMIT="${GPU_CHECK_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}" timeout "$t" "$PY" -m unishmem run -n 2 \
      scripts/gpu_sweep.py "$OUT" --deadline-s $((t - 25)) >"$OUT/sweep.log" 2>&1
    src=$?
    [ $src -ne 0 ] && status=1
    [ $src -ne 0 ] && "$PY" scripts/gpu_sweep.py --merge "$OUT" >>"$OUT/sweep.log" 2>&1  # the rows so far
    { echo "sweep job exit status $src, $(grep -c '^\[pe 0\]' "$OUT/sweep.log") rows on PE 0 this run"
      grep -E "^(wrote|/)" "$OUT/sweep.log" | tail -n 1
    } | tee -a "$OUT/summary.txt"
    [ $src -ne 0 ] && tail -n 30 "$OUT/sweep.log" | tee -a "$OUT/summary.txt"
  else
    status=1
  fi
  stop_mps
  phase "done (--sweep), exit status $status"
  exit $status
fi

# ---- unishmem.kernels timed (scripts/gpu_kernel_times.py) ------------------------------------
# Last, so that it takes no time from the checks above: what is left of the budget, at most 240 s (480 s
# with --times-only; GPU_CHECK_TIMES_LIMIT sets it). Its deadline leaves 25 s for finalize and the
# launcher; the summary is made from the rows written so far, also when the job was cut short.
if [ "$TIMES" = "off" ]; then
  echo "== kernel times: off (GPU_CHECK_TIMES=off)" | tee -a "$OUT/summary.txt"
else
  phase "unishmem.kernels timed ($TIMES), 2 PEs (log: kernel_times.log, per PE: times-pe0.json, times-pe1.json)"
  start_mps
  if t=$(limit "${GPU_CHECK_TIMES_LIMIT:-$([ $TIMES_ONLY -eq 1 ] && echo 480 || echo 240)}"); then
    rm -f "$OUT"/times-pe*.json  # a summary of this run only
    quick=()
    [ "$TIMES" = "quick" ] && quick=(--quick)
    timeout "$t" "$PY" -m unishmem run -n 2 scripts/gpu_kernel_times.py "$OUT" --deadline-s $((t - 25)) \
      ${quick[@]+"${quick[@]}"} >"$OUT/kernel_times.log" 2>&1
    trc=$?
    [ $trc -ne 0 ] && status=1
    "$PY" scripts/gpu_kernel_times.py --summary "$OUT" | tee -a "$OUT/summary.txt"
    echo "timing job exit status $trc" | tee -a "$OUT/summary.txt"
    [ $trc -ne 0 ] && tail -n 30 "$OUT/kernel_times.log" | tee -a "$OUT/summary.txt"
  else
    status=1
  fi
  stop_mps
fi

phase "done, exit status $status"
exit $status
