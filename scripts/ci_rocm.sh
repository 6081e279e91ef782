#!/usr/bin/env bash
# The rocshmem backend on an AMD Instinct machine, in one command: rocSHMEM >= 3.3 (the
# installed one, else built from source), the build with ROCm's clang, `unishmem info`, the SPMD suite
# with UNISHMEM_BACKEND=rocshmem at 2 PEs, the device-library tests compiled for this machine's gfx arch,
# and the kernels compiled and linked against rocSHMEM's device bitcode. NOT RUN YET: this project has
# had no AMD hardware. Meant for the container of .github/workflows/rocm.yml.
#
#   bash scripts/ci_rocm.sh          # logs and summary under $OUT (default ./rocm-out)
#
# Settings: ROCM_PATH (default /opt/rocm); UNISHMEM_ROCM_ARCHS (default: the arch of every visible GPU);
# ROCSHMEM_REF (the rocm-systems commit to build rocSHMEM from when the installed one will not do);
# ROCSHMEM_PREFIX (where that build is installed, default $OUT/rocshmem); SIZES (default 2).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/rocm-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export ROCM_PATH="${ROCM_PATH:-/opt/rocm}"
SIZES="${SIZES:-2}"
# rocm-systems commit whose projects/rocshmem (3.5 line) the module-init notes were read from
ROCSHMEM_REF="${ROCSHMEM_REF:-fe14a430794f1fe5896a520aee5026b65cc9b5de}"
ROCSHMEM_PREFIX="${ROCSHMEM_PREFIX:-$OUT/rocshmem}"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
failed=0
say() { echo "$*" | tee -a "$SUMMARY"; }

# One toolchain for rocSHMEM and unishmem: ROCm's clang (cmake/gpu.cmake, NOTE [rocSHMEM build]).
CLANG="$ROCM_PATH/llvm/bin/clang++"
if [ ! -x "$CLANG" ]; then
  say "no ROCm clang at $CLANG: set ROCM_PATH"
  exit 1
fi
export HIPCXX="$CLANG" CMAKE_HIP_COMPILER="$CLANG"

say "== machine"
{ "$PY" -c "import torch; print('torch', torch.__version__, 'hip', torch.version.hip, 'devices', torch.cuda.device_count())"
  cat "$ROCM_PATH/.info/version" 2>/dev/null || true
} 2>&1 | tee -a "$SUMMARY"
if [ -z "${UNISHMEM_ROCM_ARCHS:-}" ]; then
  UNISHMEM_ROCM_ARCHS="$("$PY" -c "import torch; print(';'.join(sorted({torch.cuda.get_device_properties(i).gcnArchName.split(':')[0] for i in range(torch.cuda.device_count())})))")"
fi
if [ -z "$UNISHMEM_ROCM_ARCHS" ]; then
  say "no AMD GPU visible to torch: nothing to build for"
  exit 1
fi
say "gfx arch(s): $UNISHMEM_ROCM_ARCHS"

# rocSHMEM's version from the generated rocshmem_config.h (ROCSHMEM_VERSION "x.y.z").
version_at() { sed -n 's/^#define ROCSHMEM_VERSION *"\([0-9.]*\)".*/\1/p' "$1/include/rocshmem/rocshmem_config.h" 2>/dev/null; }
usable() {  # $1: prefix. rocSHMEM >= 3.3 with device bitcode for every arch
  local v; v="$(version_at "$1")"
  [ -n "$v" ] || return 1
  [ "$(printf '%s\n' 3.3 "$v" | sort -V | head -n 1)" = 3.3 ] || return 1
  local a
  for a in ${UNISHMEM_ROCM_ARCHS//;/ }; do [ -f "$1/lib/librocshmem_device_$a.bc" ] || return 1; done
}

say "== rocSHMEM"
if usable "$ROCM_PATH"; then
  ROCSHMEM_HOME="$ROCM_PATH"
  say "installed rocSHMEM $(version_at "$ROCM_PATH") with device bitcode for $UNISHMEM_ROCM_ARCHS"
else
  say "installed rocSHMEM: '$(version_at "$ROCM_PATH")' (needs >= 3.3 and librocshmem_device_<gfx>.bc):" \
      "building rocm-systems $ROCSHMEM_REF (log: rocshmem.log)"
  src="$OUT/rocm-systems"
  {
    set -e
    rm -rf "$src"
    git init -q "$src"
    git -C "$src" remote add origin https://github.com/ROCm/rocm-systems.git
    git -C "$src" sparse-checkout set projects/rocshmem
    git -C "$src" fetch -q --depth 1 --filter=blob:none origin "$ROCSHMEM_REF"
    git -C "$src" checkout -q FETCH_HEAD
    # IPC backend only (one node), position-independent (it is linked into a Python module), device
    # bitcode for each arch (cmake/DeviceBitcode.cmake needs GPU_TARGETS and ROCm's clang++/llvm-link/opt).
    cmake -S "$src/projects/rocshmem" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$ROCSHMEM_PREFIX" -DCMAKE_CXX_COMPILER="$CLANG" -DROCM_PATH="$ROCM_PATH" \
      -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DUSE_IPC=ON -DUSE_RO=OFF -DUSE_GDA=OFF \
      -DGPU_TARGETS="$UNISHMEM_ROCM_ARCHS" -DBUILD_TESTING=OFF
    cmake --build "$src/build" -j "$(nproc)"
    cmake --install "$src/build"
  } >"$OUT/rocshmem.log" 2>&1
  if ! usable "$ROCSHMEM_PREFIX"; then
    say "the rocSHMEM build did not give >= 3.3 with device bitcode for $UNISHMEM_ROCM_ARCHS; last lines:"
    tail -n 40 "$OUT/rocshmem.log" | tee -a "$SUMMARY"
    exit 1
  fi
  ROCSHMEM_HOME="$ROCSHMEM_PREFIX"
  say "built rocSHMEM $(version_at "$ROCSHMEM_PREFIX") into $ROCSHMEM_PREFIX"
fi
export ROCSHMEM_LIB_DIR="$ROCSHMEM_HOME/lib"  # where unishmem takes the device bitcode from

say "== build (log: build.log)"
"$PY" -m pip install -q pybind11 scikit-build-core cmake ninja pytest numpy >"$OUT/pip.log" 2>&1
if ! "$PY" -m pip install -v --no-build-isolation --no-deps \
     --config-settings=cmake.define.UNISHMEM_ROCM_ARCHS="$UNISHMEM_ROCM_ARCHS" \
     --config-settings=cmake.define.rocshmem_DIR="$ROCSHMEM_HOME/lib/cmake/rocshmem" \
     --config-settings=cmake.define.CMAKE_HIP_COMPILER="$CLANG" -e . >"$OUT/build.log" 2>&1; then
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

# The SPMD feature and kernel tests run unchanged with the backend picked from the environment.
SPMD_TESTS="tests/test_memory.py tests/test_rma.py tests/test_atomics.py tests/test_teams.py tests/test_collectives.py
            tests/test_errors.py tests/test_kernels.py tests/test_moe.py tests/test_gemm.py"
for n in $SIZES; do
  say "== SPMD tests, rocshmem backend, $n PEs (log: tests_$n.log)"
  # shellcheck disable=SC2086  # a list of files
  UNISHMEM_BACKEND=rocshmem UNISHMEM_TEST_SIZES="$n" "$PY" -m pytest -q -p no:cacheprovider -m "" \
    --junitxml="$OUT/tests_$n.xml" $SPMD_TESTS >"$OUT/tests_$n.log" 2>&1 || failed=1
  tail -n 1 "$OUT/tests_$n.log" | tee -a "$SUMMARY"
done

say "== device library compiled for $UNISHMEM_ROCM_ARCHS, vendor tests (log: device.log)"
UNISHMEM_TEST_HIP_ARCHS="${UNISHMEM_ROCM_ARCHS//;/,}" "$PY" -m pytest -q -p no:cacheprovider -m "" \
  tests/test_device_compile.py tests/test_vendor.py >"$OUT/device.log" 2>&1 || failed=1
tail -n 1 "$OUT/device.log" | tee -a "$SUMMARY"

say "== kernels compiled and linked against rocSHMEM's bitcode (log: compile.log)"
for m in collectives gemm moe; do
  "$PY" -m unishmem compile "unishmem.kernels.$m" --target "${UNISHMEM_ROCM_ARCHS//;/,}" >>"$OUT/compile.log" 2>&1 \
    || failed=1
done
tail -n 20 "$OUT/compile.log" | tee -a "$SUMMARY"

say "== done: $([ $failed -eq 0 ] && echo all passed || echo FAILURES, see the logs)"
exit $failed
