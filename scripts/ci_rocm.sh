#!/usr/bin/env bash
# The rocshmem backend on an AMD Instinct machine, in one command: ROCm's PyTorch (checked, not installed),
# the build tools, rocSHMEM >= 3.3 (the installed one, else built from a pinned rocm-systems commit), the
# build with ROCm's clang, `unishmem info`, `unishmem doctor --backend rocshmem`, a first 2-PE run of
# examples/demo.py, the SPMD suite with UNISHMEM_BACKEND=rocshmem, the device-library tests compiled for this
# machine's gfx arch, and the kernels compiled and linked against rocSHMEM's device bitcode. NOT RUN YET:
# this project has had no AMD hardware. Meant for the container of .github/workflows/rocm.yml; a user types
# the same commands from docs/getting-started.md#on-amd-instinct.
#
#   bash scripts/ci_rocm.sh            # logs and summary under $OUT (default ./rocm-out)
#   bash scripts/ci_rocm.sh --dry-run  # every step's commands and the pinned versions; runs and writes nothing
#
# Settings: ROCM_PATH (default /opt/rocm); UNISHMEM_ROCM_ARCHS (default: the arch of every visible GPU);
# ROCSHMEM_REF (the rocm-systems commit to build rocSHMEM from when the installed one will not do);
# ROCSHMEM_SRC and ROCSHMEM_PREFIX (that build's checkout and install, default $OUT/rocm-systems and
# $OUT/rocshmem); SIZES (PE counts of the SPMD suite, default 2); PYTHON (default python3).
#
# NOTE [one text per command]: every command is written once, as a user types it (`python`, `$ROCM_PATH`),
# in a here-document read by `run`, which prints it and, unless --dry-run, evaluates it in this shell.
# `python` in them is a function that calls $PYTHON. The guide's section shows the same texts, and
# tests/test_rocm_script.py checks that each of its commands is one that --dry-run prints.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: bash scripts/ci_rocm.sh [--dry-run]" >&2; exit 2 ;;
esac

PY="${PYTHON:-python3}"
python() { command "$PY" "$@"; }
OUT="${OUT:-$PWD/rocm-out}"
export ROCM_PATH="${ROCM_PATH:-/opt/rocm}"
# rocm-systems commit whose projects/rocshmem (3.5 line) the module-init notes were read from
ROCSHMEM_REF="${ROCSHMEM_REF:-fe14a430794f1fe5896a520aee5026b65cc9b5de}"
ROCSHMEM_SRC="${ROCSHMEM_SRC:-$OUT/rocm-systems}"
ROCSHMEM_PREFIX="${ROCSHMEM_PREFIX:-$OUT/rocshmem}"
ROCSHMEM_MIN=3.3  # cmake/gpu.cmake's UNISHMEM_ROCSHMEM_MIN_VERSION, vendor_libs.ROCSHMEM_FLOOR
SIZES="${SIZES:-2}"
SUMMARY="$OUT/summary.txt"
failed=0
nstep=0

say() {
  if [ $DRY -eq 1 ]; then echo "$*"; else echo "$*" | tee -a "$SUMMARY"; fi
}
step() {
  nstep=$((nstep + 1))
  say "== $nstep. $*"
}
# run LOG: the commands of a here-document in turn (one a line; a line ending in \ goes on to the next),
# each printed after "$ " and then evaluated in this shell, its output appended to $OUT/LOG, or with LOG "-"
# shown and kept in the summary. Stops at the first that fails, with its status. --dry-run prints only.
run() {
  local log="$1" line cmd="" rc
  while IFS= read -r line; do
    cmd+="$line"
    if [[ "$line" == *\\ ]]; then
      cmd+=$'\n'
      continue
    fi
    say "\$ $cmd"
    if [ $DRY -eq 0 ]; then
      if [ "$log" = - ]; then
        eval "$cmd" </dev/null >"$OUT/last.log" 2>&1
        rc=$?
        tee -a "$SUMMARY" <"$OUT/last.log"
      else
        echo "\$ $cmd" >>"$OUT/$log"
        eval "$cmd" </dev/null >>"$OUT/$log" 2>&1
        rc=$?
      fi
      [ $rc -eq 0 ] || return $rc
    fi
    cmd=""
  done
}
# show: commands printed after "$ " for a user to run; the script never runs them
show() {
  local line
  while IFS= read -r line; do say "\$ $line"; done
}
# stop LOG MESSAGE: the run ends here, with the last lines of $OUT/LOG
stop() {
  say "$2; last lines of $1:"
  tail -n 40 "$OUT/$1" | tee -a "$SUMMARY"
  exit 1
}

if [ $DRY -eq 1 ]; then
  echo "bash scripts/ci_rocm.sh --dry-run: the steps of a real run, in order; nothing is run or written."
  echo "Each command follows \"\$ \", as a user types it (docs/getting-started.md#on-amd-instinct)."
  echo "settings (the environment's, else the defaults; the commands use them as variables):"
  echo "  ROCM_PATH=$ROCM_PATH"
  echo "  UNISHMEM_ROCM_ARCHS=${UNISHMEM_ROCM_ARCHS:-<gfx>}  (unset: found in step 3 from the visible GPUs)"
  echo "  ROCSHMEM_REF=$ROCSHMEM_REF  (pinned: the rocm-systems commit rocSHMEM is built from)"
  echo "  ROCSHMEM_SRC=$ROCSHMEM_SRC"
  echo "  ROCSHMEM_PREFIX=$ROCSHMEM_PREFIX"
  echo "  OUT=$OUT  (logs and summary)"
  echo "  SIZES=$SIZES  (PE counts of the SPMD suite)"
  echo "  PYTHON=$PY  (the \`python\` of the commands)"
  echo "pinned: rocSHMEM >= $ROCSHMEM_MIN from rocm-systems $ROCSHMEM_REF when the installed one will not do"
else
  mkdir -p "$OUT"
  rm -f "$OUT"/*.log "$OUT"/tests_*.xml  # this run's logs only: run appends
  : >"$SUMMARY"
fi

step "ROCm's PyTorch"
torch_line() {
  run - <<'EOF'
python -c "import torch; print('torch', torch.__version__, 'hip', torch.version.hip, 'GPUs', torch.cuda.device_count())"
EOF
}
if [ $DRY -eq 1 ] || [ -z "$(python -c "import torch; print(torch.version.hip or '')" 2>/dev/null)" ]; then
  [ $DRY -eq 1 ] || torch_line
  say "  torch must be ROCm's build, else the run stops here: install it from torch's index for the machine's"
  say "  ROCm release X.Y (\$ROCM_PATH/.info/version):"
  show <<'EOF'
python -m pip install torch --index-url https://download.pytorch.org/whl/rocmX.Y
EOF
  [ $DRY -eq 1 ] || exit 1
fi
torch_line
[ $DRY -eq 1 ] || { tee -a "$SUMMARY" <"$ROCM_PATH/.info/version"; } 2>/dev/null

step "build tools (log: pip.log)"
run pip.log <<'EOF' || stop pip.log "the build tools did not install"
python -m pip install pybind11 scikit-build-core cmake ninja numpy
EOF

# One toolchain for rocSHMEM and unishmem: ROCm's clang (cmake/gpu.cmake, NOTE [rocSHMEM build]).
step "ROCm's clang and the GPUs' gfx arch"
if [ $DRY -eq 0 ] && [ ! -x "$ROCM_PATH/llvm/bin/clang++" ]; then
  say "no ROCm clang at $ROCM_PATH/llvm/bin/clang++: set ROCM_PATH"
  exit 1
fi
run - <<'EOF'
export HIPCXX="$ROCM_PATH/llvm/bin/clang++"
EOF
if [ -z "${UNISHMEM_ROCM_ARCHS:-}" ]; then
  run - <<'EOF'
export UNISHMEM_ROCM_ARCHS="$(python -c "import torch; print(';'.join(sorted({torch.cuda.get_device_properties(i).gcnArchName.split(':')[0] for i in range(torch.cuda.device_count())})))")"
EOF
fi
if [ $DRY -eq 0 ]; then
  if [ -z "${UNISHMEM_ROCM_ARCHS:-}" ]; then
    say "no AMD GPU visible to torch: nothing to build for"
    exit 1
  fi
  say "gfx arch(s): $UNISHMEM_ROCM_ARCHS"
fi

# rocSHMEM's version from the generated rocshmem_config.h (ROCSHMEM_VERSION "x.y.z").
version_at() { sed -n 's/^#define ROCSHMEM_VERSION *"\([0-9.]*\)".*/\1/p' "$1/include/rocshmem/rocshmem_config.h" 2>/dev/null; }
usable() {  # $1: prefix. rocSHMEM >= ROCSHMEM_MIN with device bitcode for every arch
  local v a
  v="$(version_at "$1")"
  [ -n "$v" ] || return 1
  [ "$(printf '%s\n' "$ROCSHMEM_MIN" "$v" | sort -V | head -n 1)" = "$ROCSHMEM_MIN" ] || return 1
  for a in ${UNISHMEM_ROCM_ARCHS//;/ }; do [ -f "$1/lib/librocshmem_device_$a.bc" ] || return 1; done
}

step "rocSHMEM >= $ROCSHMEM_MIN with device bitcode librocshmem_device_<gfx>.bc for every arch"
run - <<'EOF'
grep -s ROCSHMEM_VERSION "$ROCM_PATH/include/rocshmem/rocshmem_config.h"
EOF
run - <<'EOF'
ls "$ROCM_PATH"/lib/librocshmem_device_*.bc
EOF
if [ $DRY -eq 1 ] || usable "$ROCM_PATH"; then
  say "  ROCm's rocSHMEM will do:"
  run - <<'EOF'
export ROCSHMEM_LIB_DIR="$ROCM_PATH/lib"
EOF
fi
if [ $DRY -eq 1 ] || ! usable "$ROCM_PATH"; then
  say "  else built from rocm-systems at ROCSHMEM_REF (log: rocshmem.log): the IPC backend only (one node),"
  say "  position-independent (it is linked into a Python module), device bitcode for each arch"
  say "  (its cmake/DeviceBitcode.cmake needs GPU_TARGETS and ROCm's clang++, llvm-link and opt):"
  run rocshmem.log <<'EOF' || stop rocshmem.log "the rocSHMEM build failed"
rm -rf "$ROCSHMEM_SRC"
git init -q "$ROCSHMEM_SRC"
git -C "$ROCSHMEM_SRC" remote add origin https://github.com/ROCm/rocm-systems.git
git -C "$ROCSHMEM_SRC" sparse-checkout set projects/rocshmem
git -C "$ROCSHMEM_SRC" fetch -q --depth 1 --filter=blob:none origin "$ROCSHMEM_REF"
git -C "$ROCSHMEM_SRC" checkout -q FETCH_HEAD
cmake -S "$ROCSHMEM_SRC/projects/rocshmem" -B "$ROCSHMEM_SRC/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$ROCSHMEM_PREFIX" -DCMAKE_CXX_COMPILER="$ROCM_PATH/llvm/bin/clang++" \
  -DROCM_PATH="$ROCM_PATH" -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DUSE_IPC=ON -DUSE_RO=OFF -DUSE_GDA=OFF \
  -DGPU_TARGETS="$UNISHMEM_ROCM_ARCHS" -DBUILD_TESTING=OFF
cmake --build "$ROCSHMEM_SRC/build" -j "$(nproc)"
cmake --install "$ROCSHMEM_SRC/build"
export ROCSHMEM_LIB_DIR="$ROCSHMEM_PREFIX/lib"
EOF
  if [ $DRY -eq 0 ]; then
    usable "$ROCSHMEM_PREFIX" || stop rocshmem.log \
      "the rocSHMEM build did not give >= $ROCSHMEM_MIN with device bitcode for $UNISHMEM_ROCM_ARCHS"
    say "built rocSHMEM $(version_at "$ROCSHMEM_PREFIX") into $ROCSHMEM_PREFIX"
  fi
fi

step "unishmem, built with ROCm's clang (log: build.log)"
run build.log <<'EOF' || stop build.log "BUILD FAILED"
python -m pip install -v --no-build-isolation --no-deps \
  --config-settings=cmake.define.UNISHMEM_ROCM_ARCHS="$UNISHMEM_ROCM_ARCHS" \
  --config-settings=cmake.define.rocshmem_DIR="$ROCSHMEM_LIB_DIR/cmake/rocshmem" \
  --config-settings=cmake.define.CMAKE_HIP_COMPILER="$ROCM_PATH/llvm/bin/clang++" -e .
EOF
[ $DRY -eq 1 ] || grep -E "unishmem: (NVSHMEM|rocSHMEM) backend" "$OUT/build.log" | tee -a "$SUMMARY"
run - <<'EOF' || stop build.log "the rocshmem backend was not built or does not import"
python -c "import unishmem._rocshmem"
EOF

step "unishmem info"
run - <<'EOF'
python -m unishmem info
EOF

step "unishmem doctor: can the rocshmem backend run here"
run - <<'EOF' || failed=1
python -m unishmem doctor --backend rocshmem
EOF

step "a first 2-PE run: examples/demo.py on two GPUs"
run - <<'EOF' || failed=1
UNISHMEM_BACKEND=rocshmem python -m unishmem run -n 2 examples/demo.py
EOF

# The SPMD feature and kernel tests run unchanged with the backend picked from the environment.
SPMD_TESTS="tests/test_host_memory.py tests/test_host_rma.py tests/test_host_atomics.py tests/test_host_teams.py"
SPMD_TESTS+=" tests/test_host_collectives.py tests/test_errors.py tests/test_kernels_collectives.py"
SPMD_TESTS+=" tests/test_kernels_moe.py tests/test_kernels_gemm.py"
step "the tests' runner (log: pip.log)"
run pip.log <<'EOF' || stop pip.log "pytest did not install"
python -m pip install pytest
EOF
for n in $SIZES; do
  step "SPMD tests, rocshmem backend, $n PEs (log: tests_$n.log)"
  run "tests_$n.log" <<EOF || failed=1
UNISHMEM_BACKEND=rocshmem UNISHMEM_TEST_SIZES=$n python -m pytest -q -p no:cacheprovider -m "" \\
  --junitxml="\$OUT/tests_$n.xml" $SPMD_TESTS
EOF
  [ $DRY -eq 1 ] || tail -n 1 "$OUT/tests_$n.log" | tee -a "$SUMMARY"
done

step "the device library compiled for the GPUs' arch, vendor tests (log: device.log)"
run device.log <<'EOF' || failed=1
UNISHMEM_TEST_HIP_ARCHS="${UNISHMEM_ROCM_ARCHS//;/,}" python -m pytest -q -p no:cacheprovider -m "" \
  tests/test_device_compile.py tests/test_vendor.py
EOF
[ $DRY -eq 1 ] || tail -n 1 "$OUT/device.log" | tee -a "$SUMMARY"

step "the kernels compiled and linked against rocSHMEM's bitcode (log: compile.log)"
for m in collectives gemm moe; do
  run compile.log <<EOF || failed=1
python -m unishmem compile unishmem.kernels.$m --target "\${UNISHMEM_ROCM_ARCHS//;/,}"
EOF
done
[ $DRY -eq 1 ] || tail -n 20 "$OUT/compile.log" | tee -a "$SUMMARY"

if [ $DRY -eq 1 ]; then
  say "== done: $nstep steps (dry run)"
  exit 0
fi
say "== done: $([ $failed -eq 0 ] && echo all passed || echo FAILURES, see the logs)"
exit $failed
