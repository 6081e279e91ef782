"""Vendor backends as far as a machine without a GPU can check them: the NVSHMEM module is built against
the real wheel and loads the real host library; `unishmem info` finds library and bitcode; selecting the
backend raises BackendUnavailable with the reason (in subprocesses: a failed NVSHMEM init may end the
process that made it); CMake says which rocSHMEM piece is missing. Nothing here mocks a vendor library."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from nvshmem_wheel import WHEEL, needs_wheel, sm_90_bitcode, wheel_bitcode
from spmd import launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


@needs_wheel
def test_nvshmem_module_is_built_against_the_wheel_and_loads_its_library():
    proc = run_python("""
        import unishmem._host, unishmem._nvshmem as m   # both backends in one process
        print(m.vendor, m.header_version, ".".join(map(str, m.library_version())))
    """)
    assert proc.returncode == 0, proc.stderr
    vendor, header, library = proc.stdout.split()
    assert vendor == "NVSHMEM"
    assert header == library == WHEEL.version, (header, library, WHEEL.version)


# The NVSHMEM host functions each of the module's library_calls stands for (NVSHMEM's host API docs).
NVSHMEM_CALLS = {
    "team_split_2d": ["nvshmem_team_split_2d"],
    "team barrier and sync on a stream": ["nvshmemx_barrier_on_stream", "nvshmemx_team_sync_on_stream"],
    "fcollect on a stream": ["nvshmemx_fcollectmem_on_stream"],
    "signal_op on a stream": ["nvshmemx_signal_op_on_stream"],
    "signal wait on a stream": ["nvshmemx_signal_wait_until_on_stream"],
    "reduce on a stream": ["nvshmemx_float_sum_reduce_on_stream"],
    "reduce-scatter": ["nvshmemx_float_sum_reducescatter_on_stream"],
}


@needs_wheel
def test_nvshmem_module_takes_from_the_library_what_its_headers_declare():
    """library_calls (what `unishmem info` prints) against the wheel's headers: every call the module says
    it takes from NVSHMEM is declared there (by name, or by the macro family that generates it)."""
    proc = run_python("import unishmem._nvshmem as m; print(sorted(k for k, v in m.library_calls.items() if v))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(sorted(NVSHMEM_CALLS)), proc.stdout
    include = next(p for p in (f.locate() for f in WHEEL.files) if p.name == "nvshmem_host.h").parent
    text = "".join(p.read_text(errors="replace") for p in include.rglob("*.h"))
    for call, names in NVSHMEM_CALLS.items():
        for name in names:
            typed = name.replace("_float_sum_", "_##NAME##_##OP##_")  # the typed families are macros
            assert name in text or typed in text, (call, name)


@needs_wheel
def test_info_reports_library_version_and_matching_bitcode():
    proc = subprocess.run([sys.executable, "-m", "unishmem", "info"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(r"^  nvshmem\s+built\s+\S+_nvshmem\S*\.so$", out, re.M), out
    assert re.search(
        rf"library\s+\S+/libnvshmem_host\.so\.3 \(pip: {WHEEL.metadata['Name']} {WHEEL.version}\), "
        rf"version {re.escape(WHEEL.version)}",
        out,
    ), out
    listed = dict(re.findall(r"^  bitcode\s+(\S+)\s+\S+/(libnvshmem_device\S*\.bc)\s+\[ok: same release", out, re.M))
    shipped = set(wheel_bitcode())  # one file per arch from NVSHMEM 3.7, one for every arch before
    if shipped == {"libnvshmem_device.bc"}:
        assert listed == {"any": "libnvshmem_device.bc"}, out
    else:
        assert set(listed.values()) == shipped and listed["sm_90"] == "libnvshmem_device_sm_90.bc", out
    assert re.search(r"^  triton\s+\S+ \(LLVM\S+\)\s+in the matrix", out, re.M), out
    assert re.search(rf"^  NVSHMEM\s+{re.escape(WHEEL.version)}\s+in the matrix", out, re.M), out


@needs_wheel
def test_bitcode_from_another_install_is_reported(tmp_path):
    """The release check compares files, not names: a prefix whose headers name another release fails."""
    real = os.path.join(WHEEL.locate_file("nvidia/nvshmem/lib"))
    other = "3.7.0" if WHEEL.version != "3.7.0" else "3.6.5"
    # both bitcode layouts, and the headers' version as 3.4.5 writes it (numeric macros, no version string)
    cases = [
        (WHEEL.version, "libnvshmem_device_sm_90.bc", "sm_90", True),
        (other, "libnvshmem_device.bc", "any", False),
    ]
    for version, bitcode, arch, expect in cases:
        prefix = tmp_path / version
        (prefix / "lib").mkdir(parents=True)
        (prefix / "include" / "non_abi").mkdir(parents=True)
        shutil.copy(os.path.join(real, "libnvshmem_host.so.3"), prefix / "lib")
        (prefix / "lib" / bitcode).write_bytes(b"BC\xc0\xde")
        major, minor, patch = version.split(".")
        (prefix / "include" / "non_abi" / "nvshmem_version.h").write_text(
            f"#define NVSHMEM_VENDOR_MAJOR_VERSION {major}\n#define NVSHMEM_VENDOR_MINOR_VERSION {minor}\n"
            f"#define NVSHMEM_VENDOR_PATCH_VERSION {patch}\n#define NVSHMEM_VENDOR_PACKAGE_VERSION 0\n"
        )
        proc = run_python(
            f"""
            from unishmem import vendor_libs
            inst = vendor_libs.find_nvshmem()
            print(inst.origin, inst.version, sorted(inst.bitcode))
            print(vendor_libs.check_bitcode(inst, inst.bitcode["{arch}"]))
            try:
                vendor_libs.nvshmem_bitcode((9, 0))
                print("ACCEPTED")
            except Exception as e:
                print("REFUSED", type(e).__name__, e)
        """,
            env={"NVSHMEM_HOME": str(prefix)},
        )
        assert proc.returncode == 0, proc.stderr
        assert f"NVSHMEM_HOME={prefix} {WHEEL.version} ['{arch}']" in proc.stdout, proc.stdout
        if expect:
            assert "(True, 'same install prefix" in proc.stdout and "ACCEPTED" in proc.stdout, proc.stdout
        else:
            assert "REFUSED BackendUnavailable" in proc.stdout, proc.stdout
            assert f"the host library is {WHEEL.version}, the headers beside it say {other}" in proc.stdout


@needs_wheel
@pytest.mark.skipif(shutil.which("llvm-bcanalyzer") is None, reason="no llvm-bcanalyzer (Debian's llvm)")
@pytest.mark.compile
def test_bitcode_producer_is_what_llvm_bcanalyzer_reads():
    """NOTE [bitcode producer]: the LLVM that wrote each of the wheel's bitcode files, as LLVM's own tool
    reads the identification block."""
    from unishmem.vendor_libs import bitcode_producer

    for name, path in wheel_bitcode().items():
        dump = subprocess.run(["llvm-bcanalyzer", "-dump", str(path)], capture_output=True, text=True, timeout=300)
        expected = re.search(r"<IDENTIFICATION_BLOCK.*?record string = '([^']+)'", dump.stdout, re.S).group(1)
        assert bitcode_producer(path) == expected, name
    standin = os.path.join(ROOT, "tests", "fixtures", "standin_rocshmem_device.ll")  # IR text: no producer
    assert bitcode_producer(Path(standin)) is None


@needs_wheel
def test_bitcode_newer_than_tritons_llvm_is_refused_before_linking(monkeypatch):
    """Triton 3.6 (LLVM 22.0) fails on NVSHMEM 3.8's bitcode (LLVM 22.1) with "Failed to parse library":
    the check names both releases first. The wheel's real bitcode, against a reader one minor release older."""
    pytest.importorskip("triton")
    from unishmem import BackendUnavailable, _triton_compat
    from unishmem.vendor_libs import bitcode_producer, llvm_release

    bitcode = sm_90_bitcode()
    writer = bitcode_producer(bitcode)
    major, minor = llvm_release(writer)
    _triton_compat.check_readable.cache_clear()
    monkeypatch.setattr(_triton_compat, "llvm_producer", lambda: f"LLVM{major}.{minor}.0")
    _triton_compat.check_readable(bitcode)  # the same release reads it
    older = f"LLVM{major}.0.0git" if minor else f"LLVM{major - 1}.1.0"
    monkeypatch.setattr(_triton_compat, "llvm_producer", lambda: older)
    _triton_compat.check_readable.cache_clear()
    with pytest.raises(BackendUnavailable, match=rf"written by {writer}, .* built with {older}, which cannot read"):
        _triton_compat.check_readable(bitcode)
    _triton_compat.check_readable.cache_clear()


def test_pyproject_declares_the_support_matrix():
    """pyproject's requirements are the matrix that unishmem info checks (docs/nvidia.md#support-matrix)."""
    tomllib = pytest.importorskip("tomllib")
    from unishmem import vendor_libs

    project = tomllib.loads(open(os.path.join(ROOT, "pyproject.toml")).read())["project"]
    assert project["requires-python"] == ">=3.10,<3.13"
    extras = project["optional-dependencies"]
    lo, hi = vendor_libs.NVSHMEM_SUPPORTED
    nvshmem = f"nvidia-nvshmem-cu13>={'.'.join(map(str, lo))},<{hi[0]}.{hi[1] + 1}"
    assert nvshmem in extras["cuda"] and nvshmem in extras["test"]
    triton = pytest.importorskip("triton")
    from unishmem import _triton_compat

    (lo_major, lo_minor), (hi_major, hi_minor) = _triton_compat.SUPPORTED
    spec = f"triton>={lo_major}.{lo_minor},<{hi_major}.{hi_minor + 1}"
    # the `triton` extra brings it beside torch's CPU wheel; nothing else requires the `triton` distribution,
    # which would go over the Triton a GPU build of torch brought (tests/test_install.py asks pip's resolver)
    assert extras["triton"] == [f"{spec}; sys_platform == 'linux'"]
    everything = project["dependencies"] + [r for name, reqs in extras.items() if name != "triton" for r in reqs]
    assert not [r for r in everything if r.startswith("triton")]
    assert _triton_compat.in_matrix(), triton.__version__  # what this test run uses is in it


def test_init_nvshmem_without_gpu_raises_backend_unavailable_with_the_reason():
    proc = run_python("""
        import unishmem
        try:
            unishmem.init(backend="nvshmem")
            print("INITIALISED")
        except unishmem.BackendUnavailable as e:
            print("UNAVAILABLE", e)
        print("STILL ALIVE")
    """)
    assert proc.returncode == 0, proc.stderr
    assert "UNAVAILABLE" in proc.stdout and "STILL ALIVE" in proc.stdout, proc.stdout + proc.stderr
    reason = proc.stdout.split("UNAVAILABLE", 1)[1]
    assert re.search(r"CPU-only build|no CUDA device|not built into this installation|NVSHMEM: ", reason), reason


def test_every_pe_of_a_job_gets_the_reason(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(
        textwrap.dedent("""
        import os, unishmem
        try:
            unishmem.init(backend="nvshmem")
        except unishmem.BackendUnavailable as e:
            print(f"UNAVAILABLE pe={os.environ['UNISHMEM_RANK']}: {e}", flush=True)
    """)
    )
    proc = launch([str(prog)], 2, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(re.findall(r"^UNAVAILABLE pe=(\d)", proc.stdout, re.M)) == ["0", "1"], proc.stdout + proc.stderr


@needs_wheel
def test_native_init_without_a_device_fails_cleanly_and_the_process_goes_on():
    """The real module and library, bypassing the Python checks: the device runtime is asked first, so
    NVSHMEM's init (which would leave the library unusable) is never reached without a device."""
    proc = run_python("""
        import unishmem
        from unishmem import backends
        mod, inst = backends._load_vendor_module("nvshmem")
        uid = mod.unique_id()
        assert len(uid) == 128
        try:
            mod.GpuBackend(uid, 0, 1, 0, 1 << 20, 30.0, 60.0)
            print("INITIALISED")
        except unishmem.BackendUnavailable as e:
            print("UNAVAILABLE", e)
            print("CODE", e.code)
        print("LIBRARY", ".".join(map(str, mod.library_version())), len(mod.unique_id()))
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"UNAVAILABLE CUDA cannot use device 0: (cuda\w+): ", proc.stdout)
    assert m, proc.stdout
    # NOTE [status check]: the exception carries CUDA's own code for the error it names (cudaError_t values
    # from the CUDA runtime API reference).
    codes = {"cudaErrorInsufficientDriver": 35, "cudaErrorNoDevice": 100}
    assert m.group(1) in codes, proc.stdout
    assert f"CODE {codes[m.group(1)]}\n" in proc.stdout, proc.stdout
    assert f"LIBRARY {WHEEL.version} 128" in proc.stdout, proc.stdout


def test_host_runtime_has_no_module_init():
    proc = run_python(
        """
        import unishmem
        from unishmem import _active
        rt = unishmem.init(backend="host")
        print("MODULE_INIT", _active.core().module_init, rt.team_world.handle, rt.team_node.handle)
        rt.finalize()
    """,
        env={"UNISHMEM_SYMMETRIC_SIZE": "16M"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "MODULE_INIT None 0 1" in proc.stdout, proc.stdout


def _configure(build_dir, env, *defines) -> str:
    import pybind11

    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not on PATH")
    proc = subprocess.run(
        [
            cmake,
            "-S",
            ROOT,
            "-B",
            str(build_dir),
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DPython_EXECUTABLE={sys.executable}",
            *defines,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, **env),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


# NOTE [rocSHMEM build] (cmake/gpu.cmake): a STAND-IN ROCm prefix holding CMake package files only.
STANDIN_ROCM = os.path.join(ROOT, "tests", "fixtures", "standin_rocm")


def _copy_standin(tmp_path, rocshmem_version=None):
    rocm = tmp_path / "standin_rocm"
    shutil.copytree(STANDIN_ROCM, rocm)
    if rocshmem_version:
        version_file = rocm / "lib" / "cmake" / "rocshmem" / "rocshmem-config-version.cmake"
        version_file.write_text(version_file.read_text().replace("3.5.0", rocshmem_version))
    return rocm


@pytest.mark.skipif(os.path.exists("/opt/rocm/llvm/bin/clang++"), reason="this machine has ROCm's clang")
def test_cmake_says_which_rocshmem_piece_is_missing(tmp_path):
    empty = tmp_path / "rocm"
    empty.mkdir()
    out = _configure(tmp_path / "no-clang", {"ROCM_PATH": str(empty)})
    assert (
        "unishmem: rocSHMEM backend not built: missing ROCm's clang (looked for "
        f"{empty}/llvm/bin/clang++; set ROCM_PATH, HIPCXX or CMAKE_HIP_COMPILER)"
    ) in out, out
    if WHEEL is not None:
        assert "unishmem: NVSHMEM backend: headers " in out, out
    # a compiler named (never run: the packages are looked for first), no hip package
    out = _configure(tmp_path / "no-hip", {"ROCM_PATH": str(empty)}, "-DCMAKE_HIP_COMPILER=/bin/false")
    assert (
        "unishmem: rocSHMEM backend not built: missing HIP's CMake package "
        f"(find_package(hip CONFIG) found none under ROCM_PATH={empty})"
    ) in out, out
    # hip present, rocSHMEM older than the floor: the message names the version found
    rocm = _copy_standin(tmp_path, rocshmem_version="3.2.1")
    out = _configure(tmp_path / "old", {"ROCM_PATH": str(rocm)}, "-DCMAKE_HIP_COMPILER=/bin/false")
    assert re.search(
        r"unishmem: rocSHMEM backend not built: missing rocSHMEM >= 3\.3 \(found version 3\.2\.1 at "
        rf"{re.escape(str(rocm))}/lib/cmake/rocshmem/rocshmem-config\.cmake; ROCm 7\.2 ships 3\.2\.x",
        out,
    ), out


def _hip_clangs():
    """The clangs that might stand in for ROCm's as a HIP compiler for configuring (host-only)."""
    names = [os.environ.get("UNISHMEM_TEST_HIP_CLANG"), "clang++"] + [f"clang++-{v}" for v in range(22, 13, -1)]
    return list(dict.fromkeys(p for p in (shutil.which(n) for n in names if n) if p))


@pytest.fixture(scope="module")
def standin_configure(tmp_path_factory):
    """The whole project configured with the stand-in rocSHMEM/hip packages: the rocSHMEM branch is taken.
    CMake compiles nothing of ours; its HIP compiler checks run host-only (--cuda-host-only). The stand-in
    has no HIP headers, and some clangs (19 does) then fail CMake's compiler identification; the first
    clang that CMake identifies is used."""
    tried = []
    for clang in _hip_clangs():
        build = tmp_path_factory.mktemp("standin") / "build"
        out = _configure(
            build,
            {"ROCM_PATH": STANDIN_ROCM},
            f"-DCMAKE_HIP_COMPILER={clang}",
            f"-DCMAKE_HIP_COMPILER_ROCM_ROOT={STANDIN_ROCM}",
            "-DCMAKE_HIP_FLAGS=--cuda-host-only -nogpulib -nogpuinc",
            "-DUNISHMEM_ROCM_ARCHS=gfx90a",
            "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
        )
        if "The HIP compiler identification is Clang" in out:
            break
        tried.append(clang)
    else:
        pytest.skip(
            f"no clang++ that CMake identifies as a HIP compiler here (tried {tried or 'none'}; "
            "set UNISHMEM_TEST_HIP_CLANG)"
        )
    import json

    commands = json.loads((build / "compile_commands.json").read_text())
    link = (build / "CMakeFiles" / "_rocshmem.dir" / "link.txt").read_text()
    return out, clang, commands, link


def _commands_of(commands, target):
    return [c for c in commands if f"CMakeFiles/{target}.dir/" in c["output"]]


# Every backend module's sources beyond its own (UNISHMEM_COMMON_SOURCES in CMakeLists.txt).
COMMON_SOURCES = (
    "csrc/bindings.cpp",
    "csrc/fast_calls.cpp",
    "csrc/common/dtype.cpp",
    "csrc/common/collective.cpp",
    "csrc/common/backend_base.cpp",
    "csrc/common/allocator.cpp",
    "csrc/common/wait.cpp",
)

HIP_FLAGS = re.compile(r"(^|\s)(-x\s+hip|--offload-arch=\S+|-fgpu-rdc|--hip-link|--cuda-host-only)(\s|$)")


def test_rocm_branch_leaves_host_and_nvshmem_sources_plain_cxx(standin_configure):
    out, clang, commands, _ = standin_configure
    assert "unishmem: rocSHMEM backend: rocSHMEM 3.5.0 (" in out and "architectures gfx90a" in out, out
    host = _commands_of(commands, "_host")
    host_files = sorted(os.path.relpath(c["file"], ROOT) for c in host)
    assert host_files == sorted(
        [
            *COMMON_SOURCES,
            "csrc/host/host_backend.cpp",
            "csrc/host/segment.cpp",
            "csrc/host/reduce.cpp",
            "csrc/host/bench.cpp",
        ]
    ), host_files
    groups = [host] + ([_commands_of(commands, "_nvshmem")] if WHEEL is not None else [])
    for group in groups:
        for c in group:
            cmd = c["command"]
            assert not cmd.startswith(clang), cmd  # the C++ compiler, not the HIP one
            assert not HIP_FLAGS.search(cmd), f"HIP flag reached a C++ source: {cmd}"
            assert "-DUNISHMEM_ROCSHMEM" not in cmd and "standin_rocm" not in cmd, cmd


def test_rocshmem_module_is_one_hip_toolchain_without_lto(standin_configure):
    _, clang, commands, link = standin_configure
    roc = _commands_of(commands, "_rocshmem")
    wrapped = sorted(open(c["file"]).read().split('"')[1] for c in roc)
    assert wrapped == sorted(os.path.join(ROOT, f) for f in (*COMMON_SOURCES, "csrc/gpu/gpu_backend.cpp")), wrapped
    for c in roc:
        cmd = c["command"]
        assert cmd.startswith(clang) and c["file"].endswith(".hip"), cmd
        assert re.search(r"\s-x hip\s", cmd) and "--offload-arch=gfx90a" in cmd and "-fgpu-rdc" in cmd, cmd
        assert "-DUNISHMEM_ROCSHMEM" in cmd and "-fPIC" in cmd and "-flto" not in cmd, cmd
    assert link.startswith(clang) and "--hip-link" in link and "-fgpu-rdc" in link and "-flto" not in link, link


AMO_BY_COMPARE_SWAP = r"""
#include "gpu/amo_table.hpp"
#include <cstdio>
using namespace unishmem;
int main() {
  for (AtomicOp op : {AtomicOp::set, AtomicOp::swap, AtomicOp::fetch_and, AtomicOp::and_, AtomicOp::fetch_or,
                      AtomicOp::or_, AtomicOp::fetch_xor, AtomicOp::xor_}) {
    std::uint64_t word = 0xF0F0, tries = 0;
    // another PE writes 0x0FF0 right after this PE's first reading: the first compare-swap must fail
    auto cas = [&](std::uint64_t cond, std::uint64_t value) {
      if (tries++ == 0) word = 0x0FF0;
      const std::uint64_t was = word;
      if (was == cond) word = value;
      return was;
    };
    const std::uint64_t old = gpu::lib::amo_by_compare_swap<std::uint64_t>(op, 0x3C3C, word, cas);
    std::printf("%d %llu %llu %llu\n", int(op), (unsigned long long)old, (unsigned long long)word,
                (unsigned long long)tries);
  }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_host_atomics_rocshmem_lacks_are_compare_swap_loops_with_openshmem_results(tmp_path):
    """NOTE [rocSHMEM host atomics]: set, swap and and/or/xor (and their fetch forms) are built from
    compare-swap on rocSHMEM. Each must leave what OpenSHMEM 1.5 (sec. 9.8) says and return the value it
    replaced, also when another write lands between the reading and the first compare-swap."""
    src = tmp_path / "amo.cpp"
    src.write_text(AMO_BY_COMPARE_SWAP)
    subprocess.run(
        ["g++", "-std=c++20", "-I", os.path.join(ROOT, "csrc"), str(src), "-o", str(tmp_path / "amo")],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = subprocess.run([str(tmp_path / "amo")], capture_output=True, text=True, check=True).stdout.split("\n")
    x, other = 0x3C3C, 0x0FF0
    expected = {1: x, 2: x, 8: other & x, 9: other & x, 10: other | x, 11: other | x, 12: other ^ x, 13: other ^ x}
    got = {
        int(op): (int(old), int(word), int(tries)) for op, old, word, tries in (line.split() for line in out if line)
    }
    assert got == {op: (other, result, 2) for op, result in expected.items()}


def test_info_says_which_rocshmem_release_enables_what(tmp_path):
    """NOTE [rocSHMEM features], against rocSHMEM's CHANGELOG.md (rocm-systems projects/rocshmem): unique-id
    init came in 3.0.0, quiet/sync_all on a stream and ROCSHMEM_TEAM_SHARED with the ROCm 7.13 release
    (3.3.0 in early revisions), reduce_on_stream, team_split_2D and the IPC backend's host atomics under
    non-MPI init in 3.5.0 (ROCm 7.14)."""
    from unishmem import vendor_libs

    include = tmp_path / "include" / "rocshmem"
    include.mkdir(parents=True)
    (include / "rocshmem_config.h").write_text('#define ROCSHMEM_VERSION              "3.4.0"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "unishmem", "info"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, ROCM_PATH=str(tmp_path)),
    )
    assert "version  3.4.0 (rocshmem_config.h)" in proc.stdout, proc.stdout + proc.stderr
    lines = {line.split(": ")[0].split()[-1]: line for line in vendor_libs.rocshmem_features("3.4.0")}
    assert lines["3.0"].startswith("yes") and "rocshmem_get_uniqueid" in lines["3.0"]
    assert lines["3.3"].startswith("yes") and "rocshmem_quiet_on_stream" in lines["3.3"]
    assert "ROCSHMEM_TEAM_SHARED" in lines["3.3"]
    assert lines["3.5"].startswith("no") and "rocshmem_reduce_on_stream" in lines["3.5"]
    assert all(line.startswith("yes") for line in vendor_libs.rocshmem_features("3.5.0"))
    old = vendor_libs.rocshmem_features("3.2.1")
    assert old[-1] == "rocSHMEM 3.2.1 is older than 3.3: unishmem's rocshmem backend is not built against it"
    with pytest.raises(ValueError, match="'unknown'"):
        vendor_libs.rocshmem_features("unknown")


def test_cxx_reads_no_unishmem_setting_from_the_environment():
    """C++ receives every UNISHMEM_* setting as a value from Python (read in one place there); it may read only
    a vendor library's own variables. Every getenv names its variable literally, so the scan below sees them all."""
    calls = []
    for folder, _, files in os.walk(os.path.join(ROOT, "csrc")):
        for name in files:
            text = open(os.path.join(folder, name)).read()
            assert "environ" not in text, name
            calls += [(name, arg) for arg in re.findall(r"getenv\s*\(([^)]*)\)", text)]
    for name, arg in calls:
        assert re.fullmatch(r'"[A-Z0-9_]+"', arg.strip()), (name, arg)
        assert not arg.strip('" ').startswith("UNISHMEM_"), (name, arg)
