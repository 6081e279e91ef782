"""Vendor backends as far as a machine without a GPU can check them: the NVSHMEM module is built against
the real wheel and loads the real host library; `unishmem info` finds library and bitcode; selecting the
backend raises BackendUnavailable with the reason (in subprocesses: a failed NVSHMEM init may end the
process that made it); CMake says which rocSHMEM piece is missing. Nothing here mocks a vendor library."""
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from spmd import launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _nvshmem_wheel():
    for dist in importlib.metadata.distributions():
        if (dist.metadata["Name"] or "").lower().startswith("nvidia-nvshmem"):
            return dist
    return None


WHEEL = _nvshmem_wheel()
needs_wheel = pytest.mark.skipif(WHEEL is None, reason="no nvidia-nvshmem wheel installed (the `cuda` extra)")


def run_python(code: str, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, **(env or {})))


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


@needs_wheel
def test_info_reports_library_version_and_matching_bitcode():
    proc = subprocess.run([sys.executable, "-m", "unishmem", "info"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(r"^  nvshmem\s+built\s+\S+_nvshmem\S*\.so$", out, re.M), out
    assert re.search(rf"library\s+\S+/libnvshmem_host\.so\.3 \(pip: {WHEEL.metadata['Name']} {WHEEL.version}\), "
                     rf"version {re.escape(WHEEL.version)}", out), out
    bitcode = re.findall(r"^  bitcode\s+(sm_\d+)\s+\S+libnvshmem_device_\1\.bc\s+\[ok: same release", out, re.M)
    assert "sm_90" in bitcode and "sm_80" in bitcode, out


@needs_wheel
def test_bitcode_from_another_install_is_reported(tmp_path):
    """The release check compares files, not names: a prefix whose headers name another release fails."""
    real = os.path.join(WHEEL.locate_file("nvidia/nvshmem/lib"))
    for version, expect in (("3.8.0", True), ("3.7.0", False)):
        prefix = tmp_path / version
        (prefix / "lib").mkdir(parents=True)
        (prefix / "include" / "non_abi").mkdir(parents=True)
        shutil.copy(os.path.join(real, "libnvshmem_host.so.3"), prefix / "lib")
        (prefix / "lib" / "libnvshmem_device_sm_90.bc").write_bytes(b"BC\xc0\xde")
        (prefix / "include" / "non_abi" / "nvshmem_version.h").write_text(
            f'#define NVSHMEM_VENDOR_BASE_VERSION_STRING "{version}"\n')
        proc = run_python("""
            from unishmem import vendor_libs
            inst = vendor_libs.find_nvshmem()
            print(inst.origin, inst.version, sorted(inst.bitcode))
            print(vendor_libs.check_bitcode(inst, inst.bitcode["sm_90"]))
            try:
                vendor_libs.nvshmem_bitcode((9, 0))
                print("ACCEPTED")
            except Exception as e:
                print("REFUSED", type(e).__name__, e)
        """, env={"NVSHMEM_HOME": str(prefix)})
        assert proc.returncode == 0, proc.stderr
        assert f"NVSHMEM_HOME={prefix} {WHEEL.version} ['sm_90']" in proc.stdout, proc.stdout
        if expect:
            assert "(True, 'same install prefix" in proc.stdout and "ACCEPTED" in proc.stdout, proc.stdout
        else:
            assert "REFUSED BackendUnavailable" in proc.stdout, proc.stdout
            assert f"the host library is {WHEEL.version}, the headers beside it say 3.7.0" in proc.stdout


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
    prog.write_text(textwrap.dedent("""
        import os, unishmem
        try:
            unishmem.init(backend="nvshmem")
        except unishmem.BackendUnavailable as e:
            print(f"UNAVAILABLE pe={os.environ['UNISHMEM_RANK']}: {e}", flush=True)
    """))
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
            mod.VendorBackend(uid, 0, 1, 0, 1 << 20, 30.0, 60.0, [(0, 1)])
            print("INITIALISED")
        except unishmem.BackendUnavailable as e:
            print("UNAVAILABLE", e)
        print("LIBRARY", ".".join(map(str, mod.library_version())), len(mod.unique_id()))
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"UNAVAILABLE CUDA cannot use device 0: cuda\w+: ", proc.stdout), proc.stdout
    assert f"LIBRARY {WHEEL.version} 128" in proc.stdout, proc.stdout


def test_host_runtime_has_no_module_init():
    proc = run_python("""
        import unishmem
        rt = unishmem.init(backend="host")
        print("MODULE_INIT", rt._module_init, rt.team_world.handle, rt.team_node.handle)
        rt.finalize()
    """, env={"UNISHMEM_SYMMETRIC_SIZE": "16M"})
    assert proc.returncode == 0, proc.stderr
    assert "MODULE_INIT None 0 1" in proc.stdout, proc.stdout


def _configure(build_dir, env) -> str:
    import pybind11

    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not on PATH")
    proc = subprocess.run([cmake, "-S", ROOT, "-B", str(build_dir), f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                           f"-DPython_EXECUTABLE={sys.executable}"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.skipif(shutil.which("hipcc") is not None, reason="this machine has hipcc")
def test_cmake_says_which_rocshmem_piece_is_missing(tmp_path):
    rocm = tmp_path / "rocm"
    (rocm / "bin").mkdir(parents=True)
    out = _configure(tmp_path / "no-hipcc", {"ROCM_PATH": str(rocm)})
    assert f"unishmem: rocSHMEM backend not built: missing hipcc (looked in ROCM_PATH={rocm}/bin and PATH)" in out, out
    if WHEEL is not None:
        assert "unishmem: NVSHMEM backend: headers " in out, out
    # hipcc present (a stand-in that is never run), rocSHMEM's CMake package absent.
    hipcc = rocm / "bin" / "hipcc"
    hipcc.write_text("#!/bin/sh\nexit 1\n")
    hipcc.chmod(0o755)
    out = _configure(tmp_path / "no-package", {"ROCM_PATH": str(rocm)})
    assert ("unishmem: rocSHMEM backend not built: missing the rocSHMEM CMake package "
            f"(find_package(rocshmem CONFIG) found none under ROCM_PATH={rocm})") in out, out
