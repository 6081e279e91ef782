#!/usr/bin/env bash
# The rocshmem backend on an AMD Instinct machine, in one command (issue 5): build against rocSHMEM,
# `unishmem info`, the SPMD test suite with UNISHMEM_BACKEND=rocshmem at 2 and 8 PEs, the vendor tests,
# the benchmarks where `unishmem bench` exists, and a summary. Meant for a rocm/pytorch container with
# the GPUs passed in (.github/workflows/rocm.yml). NOT RUN YET: this project has had no AMD hardware.
#
#   bash scripts/ci_rocm.sh          # logs and summary under $OUT (default ./rocm-out)
#
# Settings: ROCM_PATH (default /opt/rocm), UNISHMEM_ROCM_ARCHS (default gfx942;gfx950: MI300X/MI325X and
# MI350X), ROCSHMEM_BACKEND (rocSHMEM's own: IPC on one node), SIZES (default "2 8").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/rocm-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export ROCM_PATH="${ROCM_PATH:-/opt/rocm}"
SIZES="${SIZES:-2 8}"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
failed=0
say() { echo "$*" | tee -a "$SUMMARY"; }

say "== machine"
{ "$PY" -c "import torch; print('torch', torch.__version__, 'hip', torch.version.hip, 'devices', torch.cuda.device_count())"
  "$PY" -c "import torch; [print(i, torch.cuda.get_device_properties(i).gcnArchName) for i in range(torch.cuda.device_count())]"
  cat "$ROCM_PATH/.info/version" 2>/dev/null || true
} 2>&1 | tee -a "$SUMMARY"

say "== rocSHMEM"
if [ ! -d "$ROCM_PATH/lib/cmake/rocshmem" ] && command -v apt-get >/dev/null; then
  # ROCm's package repository is configured in the rocm/* images; the package name differs by release.
  (apt-get update -qq && (apt-get install -y -qq rocshmem-dev || apt-get install -y -qq rocshmem)) >"$OUT/apt.log" 2>&1 \
    || say "could not install rocSHMEM with apt-get (see apt.log)"
fi
ls -d "$ROCM_PATH/lib/cmake/rocshmem" "$ROCM_PATH/include/rocshmem" 2>&1 | tee -a "$SUMMARY"
ls "$ROCM_PATH"/lib/librocshmem_device_*.bc 2>&1 | tee -a "$SUMMARY"

say "== build (log: build.log)"
"$PY" -m pip install -q pybind11 scikit-build-core cmake ninja pytest numpy >"$OUT/pip.log" 2>&1
ARCHS="${UNISHMEM_ROCM_ARCHS:-gfx942;gfx950}"
if ! "$PY" -m pip install -v --no-build-isolation --no-deps \
     --config-settings=cmake.define.UNISHMEM_ROCM_ARCHS="$ARCHS" -e . >"$OUT/build.log" 2>&1; then
  say "BUILD FAILED; last lines:"
  tail -n 40 "$OUT/build.log" | tee -a "$SUMMARY"
  exit 1
fi
grep -E "unishmem: (NVSHMEM|rocSHMEM) backend" "$OUT/build.log" | tee -a "$SUMMARY"
if ! "$PY" -c "import unishmem._rocshmem" >>"$SUMMARY" 2>&1; then
  say "the rocshmem backend was not built or does not import: see build.log"
  exit 1
fi

say "== unishmem info"
"$PY" -m unishmem info 2>&1 | tee "$OUT/info.txt" | tee -a "$SUMMARY"

# The SPMD feature tests run unchanged with the backend picked from the environment.
SPMD_TESTS="tests/test_memory.py tests/test_rma.py tests/test_atomics.py tests/test_teams.py tests/test_collectives.py tests/test_errors.py"
for n in $SIZES; do
  say "== SPMD tests, rocshmem backend, $n PEs (log: tests_$n.log)"
  UNISHMEM_BACKEND=rocshmem UNISHMEM_TEST_SIZES="$n" "$PY" -m pytest -q -p no:cacheprovider \
    --junitxml="$OUT/tests_$n.xml" $SPMD_TESTS >"$OUT/tests_$n.log" 2>&1 || failed=1
  tail -n 1 "$OUT/tests_$n.log" | tee -a "$SUMMARY"
done

say "== vendor tests (log: vendor.log)"
"$PY" -m pytest -q -p no:cacheprovider tests/test_vendor.py >"$OUT/vendor.log" 2>&1 || failed=1
tail -n 1 "$OUT/vendor.log" | tee -a "$SUMMARY"

say "== benchmarks (log: bench.log)"
if "$PY" -m unishmem bench --help >/dev/null 2>&1; then
  UNISHMEM_BACKEND=rocshmem "$PY" -m unishmem bench >"$OUT/bench.log" 2>&1 || failed=1
  tail -n 30 "$OUT/bench.log" | tee -a "$SUMMARY"
else
  say "SKIPPED: this checkout has no \`unishmem bench\`"
fi

say "== done: $([ $failed -eq 0 ] && echo all passed || echo FAILURES, see the logs)"
exit $failed
