"""The backend registry (NOTE [backend registry] in unishmem/backends.py), the ecosystem's parts it uses
(cuda-pathfinder for NVSHMEM, cuda-bindings and hip-python for `unishmem info`) and the packaging facts:
checked against what torch, Triton, the installed wheels and the driver say, not against the registry's
own tables."""

import ctypes
import importlib
import importlib.metadata
import importlib.resources
import inspect
import os
import re
import subprocess
import sys
import textwrap
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib
import torch
from nvshmem_wheel import WHEEL, needs_wheel, sm_90_bitcode, wheel_file

import unishmem
from unishmem import backends

ROOT = Path(__file__).resolve().parent.parent
# What `import cuda.bindings` / `import hip` / `import cuda.pathfinder` raises once its sys.modules entry is None
BLOCK = "import sys\nfor name in {names!r}: sys.modules[name] = None\n"


def run_python(code: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **(env or {})),
    )


# ---- the registry ------------------------------------------------------------------------------


def test_each_backend_is_found_by_its_name_and_names_its_module():
    assert list(backends.BACKENDS) == ["host", "nvshmem", "rocshmem"] == list(backends.NAMES)
    for name, backend in backends.BACKENDS.items():
        assert backends.get(name) is backend and backend.name == name
        assert backend.module == f"unishmem._{name}"
    host = importlib.import_module(backends.get("host").module)
    assert hasattr(host, "HostBackend")
    with pytest.raises(ValueError, match=r"backend='cuda' is not one of auto, host, nvshmem, rocshmem"):
        backends.get("cuda")


def test_torch_builds_and_triton_backends_are_the_real_names():
    """torch.version has the build attribute each GPU backend names; Triton has a compiler for its target."""
    from triton.backends import backends as triton_backends
    from triton.backends.compiler import GPUTarget

    gpu = [b for b in backends.BACKENDS.values() if b.triton_backend]
    assert [b.name for b in gpu] == ["nvshmem", "rocshmem"]
    for b, arch, warp in zip(gpu, (90, "gfx942"), (32, 64)):
        assert hasattr(torch.version, b.torch_build), b.torch_build
        assert backends.by_torch_build(b.torch_build) is b
        assert backends.by_triton_backend(b.triton_backend) is b
        target = GPUTarget(b.triton_backend, arch, warp)
        assert any(tb.compiler.supports_target(target) for tb in triton_backends.values()), b.triton_backend
    assert backends.by_torch_build(None) is None
    assert backends.get("host").triton_backend is None and backends.get("host").torch_build is None
    with pytest.raises(ValueError, match=r"not 'xpu'"):
        backends.by_triton_backend("xpu")


def test_device_library_tables_cover_the_registrys_vendors():
    from unishmem.language import _vendor

    assert _vendor.VENDOR_OF_BACKEND == {"cuda": "nvshmem", "hip": "rocshmem"}
    for table in (
        _vendor.SCOPES,
        _vendor.SIGNAL_VALUES,
        _vendor.CMP_VALUES,
        _vendor.WARP_SIZE,
        _vendor.TEAM_TYPE,
        _vendor.P_AS_BITS,
    ):
        assert set(table) == set(_vendor.VENDOR_OF_BACKEND.values())


@needs_wheel
def test_bitcode_for_a_device_is_the_wheels_file():
    from unishmem.triton_support import extern_libs

    nv = backends.get("nvshmem")
    arch = nv.device_arch(SimpleNamespace(major=9, minor=0))
    assert arch == 90
    expected = sm_90_bitcode()
    assert nv.bitcode(arch).resolve() == expected
    assert {k: Path(v).resolve() for k, v in extern_libs("cuda", 90).items()} == {nv.extern_lib_key: expected}
    roc = backends.get("rocshmem")
    assert roc.device_arch(SimpleNamespace(gcnArchName="gfx942:sramecc+:xnack-")) == "gfx942:sramecc+:xnack-"


def test_rocm_bitcode_that_is_missing_names_the_arch(tmp_path):
    proc = run_python(
        """
        from unishmem import backends
        try:
            backends.get("rocshmem").bitcode("gfx942:sramecc+:xnack-")
        except backends.BackendUnavailable as e:
            print("UNAVAILABLE", e)
    """,
        env={"ROCM_PATH": str(tmp_path), "ROCSHMEM_LIB_DIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    # the arch without its feature suffix, and every path searched
    searched = f"{tmp_path}/librocshmem_device_gfx942.bc, {tmp_path}/lib/librocshmem_device_gfx942.bc"
    assert f"UNAVAILABLE rocSHMEM: no device bitcode for gfx942: none of {searched} exists" in proc.stdout


def test_the_runtime_is_made_from_the_opened_backend():
    proc = run_python(
        """
        import unishmem
        with unishmem.init(backend="host") as rt:
            print("RUNTIME", rt.backend, rt.device, rt.my_pe, rt.n_pes, sorted(rt.version))
    """,
        env={"UNISHMEM_SYMMETRIC_SIZE": "16M"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "RUNTIME host cpu 0 1 ['backend', 'torch', 'unishmem']" in proc.stdout, proc.stdout


# ---- cuda-pathfinder finds NVSHMEM -----------------------------------------------------------------


@needs_wheel
def test_pathfinder_finds_the_wheels_library_and_headers():
    env = {k: v for k, v in os.environ.items() if k != "NVSHMEM_HOME"}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from unishmem import vendor_libs; i = vendor_libs.find_nvshmem(); "
            "print(i.library); print(i.include); print(i.origin); print(i.problems)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    library, include, origin, problems = proc.stdout.splitlines()
    assert Path(library) == wheel_file("libnvshmem_host.so.3")
    assert Path(include) == wheel_file("nvshmem.h").parent
    assert origin == f"pip: {WHEEL.metadata['Name']} {WHEEL.version}"
    assert problems == "[]"


@needs_wheel
def test_without_pathfinder_nvshmem_is_unavailable_unless_nvshmem_home_names_it():
    """cuda-pathfinder is what searches; NVSHMEM_HOME needs no search."""
    code = BLOCK.format(names=["cuda.pathfinder"]) + textwrap.dedent("""
        from unishmem import vendor_libs
        try:
            vendor_libs.find_nvshmem().require()
            print("FOUND")
        except vendor_libs.BackendUnavailable as e:
            print("UNAVAILABLE", e)
    """)
    env = {k: v for k, v in os.environ.items() if k != "NVSHMEM_HOME"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "UNAVAILABLE NVSHMEM: not searched: cuda-pathfinder is not installed; set NVSHMEM_HOME" in proc.stdout
    home = wheel_file("libnvshmem_host.so.3").parent.parent
    env["NVSHMEM_HOME"] = str(home)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "FOUND", proc.stdout


def test_nvshmem_home_without_the_library_says_where_it_looked(tmp_path):
    proc = run_python(
        """
        from unishmem import vendor_libs
        print(vendor_libs.find_nvshmem().problems)
    """,
        env={"NVSHMEM_HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    assert f"libnvshmem_host.so.3 not found in {tmp_path}/lib or {tmp_path}/lib64 (NVSHMEM_HOME={tmp_path})" in (
        proc.stdout
    ), proc.stdout


# ---- cuda-bindings and hip-python in `unishmem info` -------------------------------------------


def _info(block=()) -> str:
    code = BLOCK.format(names=list(block)) + "from unishmem.cli import main\nsys.exit(main(['info']))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _section(out: str, title: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rest = lines[start + 1 :]
    end = next((i for i, line in enumerate(rest) if not line.startswith("  ")), len(rest))
    return rest[:end]


def test_info_says_when_the_device_bindings_are_absent():
    out = _info(block=("cuda.bindings", "hip"))
    nvidia, amd = _section(out, "NVIDIA GPUs"), _section(out, "AMD GPUs")
    assert len(nvidia) == 1 and nvidia[0].startswith("  cuda-bindings is not installed"), out
    assert "pip install 'unishmem[cuda]'" in nvidia[0]
    assert len(amd) == 1 and amd[0].startswith("  hip-python is not installed"), out
    assert "pip install 'unishmem[rocm]'" in amd[0]


def _driver_device_count() -> int:
    """What the CUDA driver itself says, through ctypes: 0 without a driver or a device."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def test_info_lists_the_nvidia_devices_the_driver_sees():
    pytest.importorskip("cuda.bindings", reason="cuda-bindings (the `cuda` extra) is not installed")
    out = _info()
    title = next(line for line in out.splitlines() if line.startswith("NVIDIA GPUs"))
    assert title == f"NVIDIA GPUs (cuda-bindings {importlib.metadata.version('cuda-bindings')}):", out
    section = _section(out, "NVIDIA GPUs")
    count = _driver_device_count()
    gpus = [line for line in section if re.match(r"  GPU \d+: .+, sm_\d+, PCI [0-9a-fA-F:.]+$", line)]
    assert len(gpus) == count, out
    if count == 0:
        assert len(section) == 1 and section[0].startswith("  no NVIDIA device: "), out
    else:
        matrix = section[section.index("  peer access (row GPU reads column GPU's memory):") + 2 :][:count]
        assert [row.split()[1:][i] for i, row in enumerate(matrix)] == ["-"] * count, out
        assert len([line for line in section if line.startswith("  NVLink")]) in (1, count), out


def test_the_launcher_starts_without_torch():
    """torch's import is most of a Python start-up here; `unishmem run` (the CLI's entry, then the
    launcher) would pay it before any PE starts."""
    proc = run_python("""
        import sys
        import unishmem, unishmem.cli, unishmem.launcher
        print("TORCH", "torch" in sys.modules)
        print("RUNTIME", unishmem.Runtime.__name__, "torch" in sys.modules)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "TORCH False" in proc.stdout and "RUNTIME Runtime True" in proc.stdout, proc.stdout


def test_import_needs_none_of_the_device_bindings():
    """`import unishmem` imports no binding itself (torch may), and works and runs with all of them absent."""
    proc = run_python("""
        import sys, torch
        before = set(sys.modules)
        import unishmem
        print("NEW", sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("cuda", "hip")
                            or m == "unishmem._devices"))
    """)
    assert proc.returncode == 0, proc.stderr
    assert "NEW []" in proc.stdout, proc.stdout
    proc = run_python(
        BLOCK.format(names=["cuda.bindings", "cuda.pathfinder", "hip"])
        + textwrap.dedent("""
        import unishmem
        with unishmem.init(backend="host") as rt:
            print("HOST", rt.n_pes)
    """),
        env={"UNISHMEM_SYMMETRIC_SIZE": "16M"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "HOST 1" in proc.stdout, proc.stdout


# ---- packaging ---------------------------------------------------------------------------------


def test_the_version_is_written_once():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert unishmem.__version__ == importlib.metadata.version("unishmem") == declared
    sources = [
        p for p in (ROOT / "pysrc").rglob("*.py") if re.search(rf"['\"]{re.escape(declared)}['\"]", p.read_text())
    ]
    assert sources == [], sources


def test_the_package_says_it_is_typed_and_its_public_api_is_annotated():
    assert (importlib.resources.files("unishmem") / "py.typed").is_file()
    functions = [getattr(unishmem, n) for n in unishmem.__all__ if inspect.isfunction(getattr(unishmem, n))]
    assert {f.__name__ for f in functions} == {"init", "runtime", "parse_size", "jit"}
    methods = [
        f
        for cls in (unishmem.Runtime, unishmem.Team)
        for name, f in vars(cls).items()
        if inspect.isfunction(f) and not name.startswith("_")
    ]
    # the package imports torch, Runtime and Team on first use (the launcher never needs them): the
    # annotations that name them resolve against a namespace that has them
    deferred = {"torch": torch, "Runtime": unishmem.Runtime, "Team": unishmem.Team}
    missing = []
    for f in functions + methods:
        hints = typing.get_type_hints(f, globalns={**f.__globals__, **deferred})
        params = [p for p in inspect.signature(f).parameters.values() if p.name != "self"]
        missing += [f"{f.__qualname__}({p.name})" for p in params if p.name not in hints]
        missing += [f"{f.__qualname__} -> ?"] if "return" not in hints else []
    assert missing == [], missing


def test_the_host_api_runs_and_finalizes_without_triton():
    """Without the `triton` package a host-API program runs to its end: finalize frees kernel workspaces
    without importing unishmem.kernels (which needs Triton)."""
    proc = run_python(
        BLOCK.format(names=["triton"])
        + textwrap.dedent("""
        import unishmem
        rt = unishmem.init(backend="host", heap_size="16M")
        x = rt.zeros(4)
        rt.reduce(x, x, "sum")
        rt.free(x)
        rt.free_workspaces()
        rt.finalize()
        print("FINALIZED", "triton" in sys.modules and sys.modules["triton"] is not None)
    """)
    )
    assert proc.returncode == 0, proc.stderr
    assert "FINALIZED False" in proc.stdout, proc.stdout
