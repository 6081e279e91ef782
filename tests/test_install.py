"""Installing unishmem keeps the Triton that torch brought (NOTE [Triton distributions] in vendor_libs.py),
the device library names the Triton it cannot use, and TRITON_INTERPRET means what Triton reads it as.

The resolution tests ask pip's own resolver, offline, in fresh virtual environments that hold what a
machine has before `pip install unishmem`: stand-in distributions made here (metadata only, plus the one
`triton/__init__.py` that the ROCm stand-in installs). unishmem's own metadata comes from its build
backend reading pyproject.toml, packed as a metadata-only wheel: pip resolves from that metadata alone.
"""

import json
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _dist_info(site: pathlib.Path, name: str, version: str, requires=(), files=()) -> None:
    """An installed distribution as pip sees one: METADATA, INSTALLER and RECORD (listing `files`, written
    with their text)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "INSTALLER").write_text("pip\n")
    record = [f"{info.name}/{f},," for f in ("METADATA", "INSTALLER", "RECORD")]
    for path, text in files:
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
        record.append(f"{path},,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


def _wheel(dest: pathlib.Path, name: str, version: str, metadata: dict[str, str]) -> pathlib.Path:
    """A wheel holding only a .dist-info (`metadata`: file name -> text)."""
    info = f"{name}-{version}.dist-info"
    path = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        wheel = "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        for file, text in {"WHEEL": wheel, **metadata}.items():
            whl.writestr(f"{info}/{file}", text)
        whl.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> pathlib.Path:
    """A --find-links directory: unishmem as its build backend describes it, and a PyPI-like `triton` that
    the resolver can pick wherever something asks for one."""
    pytest.importorskip("scikit_build_core", reason="the test extra's scikit-build-core reads the metadata")
    where = tmp_path_factory.mktemp("index")
    out = where / "metadata"
    code = "import sys; from scikit_build_core import build; print(build.prepare_metadata_for_build_wheel(sys.argv[1]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    info = out / proc.stdout.split()[-1]
    version = re.search(r"^Version: (\S+)$", (info / "METADATA").read_text(), re.M).group(1)
    files = {f.name: f.read_text() for f in info.iterdir() if f.is_file()}
    _wheel(where, "unishmem", version, files)
    _wheel(where, "triton", "3.9.0", {"METADATA": "Metadata-Version: 2.1\nName: triton\nVersion: 3.9.0\n"})
    return where


def _venv(path: pathlib.Path) -> pathlib.Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return next(path.glob("lib/python*/site-packages"))


def _resolve(venv: pathlib.Path, index: pathlib.Path, requirement: str, tmp_path) -> set[str]:
    """The distributions pip would install into `venv` for `requirement`, offline (pip's --python runs its
    resolver against that environment)."""
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--dry-run"]
    cmd += ["--no-index", "--find-links", str(index), "--report", str(report), "--quiet", requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {item["metadata"]["name"] for item in json.loads(report.read_text())["install"]}


def test_install_beside_rocm_torch_installs_no_triton(index, tmp_path):
    """ROCm's torch requires pytorch-triton-rocm, which installs the `triton` package under another name:
    pip must not be asked for the `triton` distribution on top of it."""
    site = _venv(tmp_path / "rocm")
    _dist_info(site, "torch", "2.13.0+rocm7.1", requires=["pytorch-triton-rocm==3.6.0"])
    triton_init = ("triton/__init__.py", '__version__ = "3.6.0"\n')
    _dist_info(site, "pytorch-triton-rocm", "3.6.0", files=[triton_init])
    _dist_info(site, "numpy", "2.3.0")
    assert _resolve(tmp_path / "rocm", index, "unishmem", tmp_path) == {"unishmem"}


def test_install_beside_nightly_torch_installs_no_triton(index, tmp_path):
    site = _venv(tmp_path / "nightly")
    _dist_info(site, "torch", "2.14.0.dev20261201+cu130", requires=["pytorch-triton==3.7.0+git1234abcd"])
    _dist_info(site, "pytorch-triton", "3.7.0+git1234abcd", files=[("triton/__init__.py", '__version__ = "3.7.0"\n')])
    _dist_info(site, "numpy", "2.3.0")
    assert _resolve(tmp_path / "nightly", index, "unishmem", tmp_path) == {"unishmem"}


def test_the_readme_install_brings_triton_beside_cpu_torch(index, tmp_path):
    """torch's CPU wheel brings no Triton: the extra the README's install names does, and the resolver can
    pick a `triton` from this index (so the tests above would see one if unishmem asked for it)."""
    readme = (ROOT / "README.md").read_text()
    extras = re.search(r'pip install "\.\[([\w,]+)\]"', readme).group(1).split(",")
    assert "triton" in extras, f"the README's install names the extras {extras}, not `triton`"
    site = _venv(tmp_path / "cpu")
    _dist_info(site, "torch", "2.13.0+cpu")
    _dist_info(site, "numpy", "2.3.0")
    assert _resolve(tmp_path / "cpu", index, "unishmem", tmp_path) == {"unishmem"}
    assert _resolve(tmp_path / "cpu", index, "unishmem[triton]", tmp_path) == {"unishmem", "triton"}


def _import(code: str, path: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    env = None
    if path is not None:
        import os

        env = dict(os.environ, PYTHONPATH=f"{path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("module", ["unishmem.language", "unishmem.kernels", "unishmem.triton_support"])
def test_no_triton_names_the_extra(module):
    proc = _import(f"import sys; sys.modules['triton'] = None; import {module}")
    assert proc.returncode != 0
    assert "ImportError: unishmem's device library and kernels need Triton (3.6 to 3.9)" in proc.stderr
    assert "pip install 'unishmem[triton]'" in proc.stderr


def test_host_api_needs_no_triton():
    code = "import sys; sys.modules['triton'] = None; import unishmem, unishmem._runtime; print(unishmem.__version__)"
    proc = _import(code)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("version", ["3.5.1", "3.10.0"])
def test_triton_outside_the_range_names_release_range_and_distribution(tmp_path, version):
    """A Triton first on the path, installed by a stand-in pytorch-triton-rocm distribution."""
    _dist_info(tmp_path, "pytorch-triton-rocm", version, files=[("triton/__init__.py", f'__version__ = "{version}"\n')])
    proc = _import("import unishmem.language", tmp_path)
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith(f"ImportError: unishmem supports Triton 3.6 to 3.9; the Triton here is {version}")
    assert f"installed by the pytorch-triton-rocm {version} distribution" in message
    assert str(tmp_path / "triton" / "__init__.py") in message


def test_triton_inside_the_range_imports(tmp_path):
    import triton

    proc = _import("import unishmem._triton_compat as c, triton; print(c.version(), triton.__file__)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == triton.__file__


@pytest.mark.parametrize(
    "value, expected",
    [("1", True), ("true", True), ("on", True), ("0", False), ("false", False), ("off", False), ("", False)],
)
def test_interpreting_reads_triton_interpret_as_triton_does(value, expected):
    """Without a runtime, kernels run interpreted exactly where Triton's own knob says so (not wherever the
    variable is set: TRITON_INTERPRET=false compiles)."""
    import os

    code = "import triton, unishmem.triton_support as s; print(s.interpreting(), bool(triton.knobs.runtime.interpret))"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TRITON_INTERPRET=value),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(expected)] * 2
