"""`unishmem doctor`: one test per diagnosis, against stand-in prefixes, drivers and distributions made here
(no GPU, no ROCm, no second NVSHMEM on this machine), and the command's exit status and JSON."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from unishmem import doctor

GPU_BACKENDS = ("nvshmem", "rocshmem")


def _missing(report) -> list[str]:
    return [f.what for f in report.findings if not f.ok and f.needed]


def _one(report, words: str) -> doctor.Finding:
    found = [f for f in report.findings if words in f.what]
    assert len(found) == 1, f"{words!r} in {[f.what for f in report.findings]}"
    return found[0]


def _doctor(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "unishmem", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **(env or {})),
    )


@pytest.fixture
def no_driver(monkeypatch, tmp_path):
    """A machine whose kernel drivers list no GPU."""
    monkeypatch.setattr(doctor, "_NVIDIA_GPUS", tmp_path / "proc-nvidia-gpus")
    monkeypatch.setattr(doctor, "_KFD_NODES", tmp_path / "kfd-nodes")
    return tmp_path


@pytest.fixture
def rocm_prefix(monkeypatch, tmp_path):
    """A stand-in ROCm install (ROCM_PATH): rocSHMEM's generated config header and device bitcode, empty."""
    prefix = tmp_path / "rocm"

    def make(version=None, archs=()):
        (prefix / "lib").mkdir(parents=True, exist_ok=True)
        if version is not None:
            (prefix / "include" / "rocshmem").mkdir(parents=True, exist_ok=True)
            config = f'#define ROCSHMEM_VERSION "{version}"\n'
            (prefix / "include" / "rocshmem" / "rocshmem_config.h").write_text(config)
        for arch in archs:
            (prefix / "lib" / f"librocshmem_device_{arch}.bc").write_bytes(b"")
        monkeypatch.setenv("ROCM_PATH", str(prefix))
        monkeypatch.delenv("ROCSHMEM_LIB_DIR", raising=False)
        return prefix

    return make


def test_this_machine_host_ready_each_gpu_backend_says_what_is_missing():
    js, text = _doctor("--json"), _doctor()
    assert js.returncode == 0 and text.returncode == 0, js.stderr + text.stderr  # auto: host, which runs here
    out = json.loads(js.stdout)
    assert out["backends"]["host"]["ready"] and out["chosen"] == "host"
    assert text.stdout.rstrip().endswith("asked for: auto (picks host): ready")
    for name in GPU_BACKENDS:
        report = out["backends"][name]
        if not torch.cuda.is_available():
            assert not report["ready"]
        for f in report["findings"]:
            assert f["ok"] or f["remedy"], f"{name}: {f['what']} has no remedy"
    # the text says what the JSON says
    findings = [f for b in out["backends"].values() for f in b["findings"]]
    assert findings
    for f in findings:
        assert f["what"] in text.stdout and f["remedy"] in text.stdout


@pytest.mark.skipif(torch.version.cuda is not None or torch.version.hip is not None, reason="a GPU build of torch")
@pytest.mark.parametrize("name, kind, index", [("nvshmem", "CUDA", "whl/cu"), ("rocshmem", "ROCm", "whl/rocm")])
def test_torch_built_for_the_cpu(name, kind, index):
    f = _one(doctor.diagnose(name), "is built for the CPU")
    assert f.what == f"torch {torch.__version__} is built for the CPU; the {name} backend needs a {kind} build"
    assert f"pip install torch --index-url https://download.pytorch.org/{index}" in f.remedy


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU")
@pytest.mark.parametrize("name", GPU_BACKENDS)
def test_no_gpu(no_driver, name):
    f = _one(doctor.diagnose(name), "no GPU:")
    assert not f.ok and "CUDA_VISIBLE_DEVICES" in f.remedy


@pytest.mark.skipif(torch.version.hip is not None, reason="a ROCm build of torch asks torch, not the driver")
def test_the_driver_names_the_gpus_archs(no_driver, rocm_prefix):
    """AMD's KFD lists a node per agent; gfx_target_version is major*10000 + minor*100 + stepping, and the arch
    name spells minor and stepping in hex (gfx90a is 9.0.10): the bitcode looked for is that arch's."""
    for node, version in (("0", 0), ("1", 90402), ("2", 90010)):  # a CPU node, gfx942, gfx90a
        (no_driver / "kfd-nodes" / node).mkdir(parents=True)
        (no_driver / "kfd-nodes" / node / "properties").write_text(f"cpu_cores_count 0\ngfx_target_version {version}\n")
    prefix = rocm_prefix("3.5.0", archs=["gfx942"])
    report = doctor.diagnose("rocshmem")
    assert _one(report, "GPU(s) listed by the driver").what.startswith("2 ROCm GPU(s)")
    assert "(gfx942, gfx90a)" in _one(report, "listed by the driver").what
    assert _one(report, "device bitcode for gfx942").ok
    gfx90a = _one(report, "no device bitcode for gfx90a")
    assert str(prefix / "lib" / "librocshmem_device_gfx90a.bc") in gfx90a.what


def test_nvshmem_absent(monkeypatch, tmp_path):
    monkeypatch.setenv("NVSHMEM_HOME", str(tmp_path))
    f = _one(doctor.diagnose("nvshmem"), "libnvshmem_host.so.3 not found")
    assert f"{tmp_path}/lib or {tmp_path}/lib64" in f.what
    assert "pip install 'nvidia-nvshmem-cu13>=3.4.5,<3.9'" in f.remedy


def test_nvshmem_outside_the_supported_range(tmp_path):
    """A stand-in host library (built here) that reports release 3.2.0, as NVSHMEM's own version call does."""
    (tmp_path / "lib").mkdir()
    source = tmp_path / "version.c"
    source.write_text("void nvshmemx_vendor_get_version_info(int *a, int *b, int *c) { *a = 3; *b = 2; *c = 0; }\n")
    library = tmp_path / "lib" / "libnvshmem_host.so.3"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True, timeout=60)
    (tmp_path / "lib" / "libnvshmem_device.bc").write_bytes(b"")
    proc = _doctor("--json", "--backend", "nvshmem", env={"NVSHMEM_HOME": str(tmp_path)})
    assert proc.returncode == 1
    findings = json.loads(proc.stdout)["backends"]["nvshmem"]["findings"]
    (f,) = [f for f in findings if "NVSHMEM 3.2.0" in f["what"]]
    assert not f["ok"] and "is NOT in the supported range 3.4.5 to 3.8.x" in f["what"]
    assert f"NVSHMEM_HOME={tmp_path}" in f["what"]


@pytest.mark.skipif(importlib.util.find_spec("unishmem._rocshmem") is not None, reason="built: its headers say")
def test_rocshmem_older_than_the_floor(rocm_prefix):
    prefix = rocm_prefix("3.2.0")
    f = _one(doctor.diagnose("rocshmem"), "rocSHMEM 3.2.0")
    assert not f.ok
    assert f.what == f"rocSHMEM 3.2.0 ({prefix}/include/rocshmem/rocshmem_config.h) is older than 3.3"
    assert "ROCm 7.13 or later" in f.remedy


@pytest.mark.skipif(importlib.util.find_spec("unishmem._rocshmem") is not None, reason="built: its headers say")
def test_rocshmem_not_found(rocm_prefix):
    prefix = rocm_prefix()
    f = _one(doctor.diagnose("rocshmem"), "no rocSHMEM found")
    assert f"{prefix}" in f.what and not f.ok


def test_no_device_bitcode_for_the_arch(rocm_prefix, tmp_path, monkeypatch):
    prefix = rocm_prefix("3.5.0", archs=["gfx90a"])
    libdir = tmp_path / "built-rocshmem" / "lib"
    libdir.mkdir(parents=True)
    monkeypatch.setenv("ROCSHMEM_LIB_DIR", str(libdir))
    f = _one(doctor.diagnose("rocshmem", ["gfx942"]), "no device bitcode for gfx942")
    # the arch and every path searched, in order, and what was found instead
    searched = f"{libdir}/librocshmem_device_gfx942.bc, {prefix}/lib/librocshmem_device_gfx942.bc"
    assert searched in f.what and "found for: gfx90a" in f.what
    assert "ROCSHMEM_LIB_DIR" in f.remedy


@pytest.mark.parametrize("variable", ["ROCM_PATH", "ROCSHMEM_LIB_DIR"])
def test_rocm_variables_pointing_nowhere(monkeypatch, tmp_path, variable):
    nowhere = tmp_path / "no-such-dir"
    monkeypatch.setenv(variable, str(nowhere))
    f = _one(doctor.diagnose("rocshmem"), f"{variable}={nowhere}")
    assert f.what == f"{variable}={nowhere} is not a directory" and not f.ok


def test_extension_built_without_the_backend():
    """This installation's truth: a backend whose extension module the package lacks is reported as such."""
    for name in ("host", *GPU_BACKENDS):
        built = importlib.util.find_spec(f"unishmem._{name}") is not None
        report = doctor.diagnose(name)
        missing = [w for w in _missing(report) if "is not built into this installation" in w]
        assert bool(missing) == (not built), name
        if built:
            assert any(f.what.startswith("extension built: ") for f in report.findings)


def _standin_triton(root, version="3.6.0", compilers=("nvidia",)):
    """A `triton` package with Triton's backend interface (each compiler's supports_target), nothing else."""
    pkg = root / "triton"
    (pkg / "backends").mkdir(parents=True)
    (pkg / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (pkg / "backends" / "compiler.py").write_text(
        "import collections\nGPUTarget = collections.namedtuple('GPUTarget', 'backend arch warp_size')\n"
    )
    targets = {"nvidia": "cuda", "amd": "hip"}
    lines = ["import collections", "Backend = collections.namedtuple('Backend', 'compiler driver')", "backends = {}"]
    for name in compilers:
        lines += [
            f"class _{name}:",
            f"    supports_target = staticmethod(lambda target: target.backend == {targets[name]!r})",
            f"backends[{name!r}] = Backend(_{name}, None)",
        ]
    (pkg / "backends" / "__init__.py").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("backend, target, has", [("rocshmem", "hip", "nvidia"), ("nvshmem", "cuda", "amd")])
def test_triton_without_the_needed_backend(tmp_path, backend, target, has):
    _standin_triton(tmp_path, compilers=(has,))
    proc = _doctor("--json", "--backend", backend, env={"PYTHONPATH": str(tmp_path)})
    findings = json.loads(proc.stdout)["backends"][backend]["findings"]
    (f,) = [f for f in findings if "has no compiler" in f["what"]]
    assert (
        f["what"].startswith(f"Triton 3.6.0 ({tmp_path}/triton/__init__.py")
        or "Triton 3.6.0 (no installed" in f["what"]
    )
    assert f"has no compiler for {target} targets (its backends: {has})" in f["what"]
    assert proc.returncode == 1


def test_two_triton_distributions(tmp_path):
    """A second distribution that installed the `triton` package (its RECORD says so) beside the real one."""
    pytest.importorskip("triton")
    info = tmp_path / "pytorch_triton_rocm-3.6.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pytorch-triton-rocm\nVersion: 3.6.0\n")
    (info / "RECORD").write_text("triton/__init__.py,,\n")
    proc = _doctor("--json", env={"PYTHONPATH": str(tmp_path)})
    out = json.loads(proc.stdout)
    for name in ("host", *GPU_BACKENDS):
        (f,) = [f for f in out["backends"][name]["findings"] if "two Triton distributions" in f["what"]]
        assert "pytorch-triton-rocm 3.6.0 and triton" in f["what"] and f["remedy"].startswith("pip uninstall")
    host = [f for f in out["backends"]["host"]["findings"] if "two Triton" in f["what"]][0]
    assert not host["needed"] and out["backends"]["host"]["ready"]  # the host API runs without Triton


def test_triton_outside_the_range(tmp_path):
    _standin_triton(tmp_path, version="3.5.1", compilers=("nvidia", "amd"))
    proc = _doctor("--json", "--backend", "nvshmem", env={"PYTHONPATH": str(tmp_path)})
    findings = json.loads(proc.stdout)["backends"]["nvshmem"]["findings"]
    (f,) = [f for f in findings if "unishmem supports Triton 3.6 to 3.9" in f["what"]]
    assert "the Triton here is 3.5.1" in f["what"] and not f["ok"]


def test_exit_status_follows_the_backend_asked_for(monkeypatch, capsys):
    monkeypatch.delenv("UNISHMEM_BACKEND", raising=False)
    assert doctor.run("host", [], False) == 0
    if not torch.cuda.is_available():
        assert doctor.run("nvshmem", [], False) == 1
        assert capsys.readouterr().out.rstrip().endswith("asked for: nvshmem: cannot run here")
        monkeypatch.setenv("UNISHMEM_BACKEND", "rocshmem")  # asked for through the environment
        assert doctor.run(None, [], True) == 1
        assert json.loads(capsys.readouterr().out)["chosen"] == "rocshmem"
    monkeypatch.setenv("UNISHMEM_BACKEND", "cuda")
    assert doctor.run(None, [], False) == 2
    assert "UNISHMEM_BACKEND" in capsys.readouterr().out
