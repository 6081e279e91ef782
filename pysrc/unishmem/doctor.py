"""`unishmem doctor`: whether each backend can run on this machine and, where one cannot, every part that is
missing and how to get it, at once (the first failing call tells one problem at a time).

Each backend gets a list of findings; a finding is a fact found here, whether it lets the backend run, and
where it does not, the remedy. Nothing is initialised: libraries are found and loaded as `unishmem info`
finds them (vendor_libs), Triton is imported, no GPU memory is touched. The facts come from the same
functions init() and a launch use (backends, vendor_libs, _triton_compat), so the doctor and the first call
cannot disagree about what is missing.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import _config, backends, vendor_libs
from .compile import TARGETS
from .errors import BackendUnavailable

_GUIDE = "docs/getting-started.md#on-amd-instinct"


@dataclass
class Finding:
    ok: bool
    what: str
    remedy: str = ""
    needed: bool = True  # False: the backend runs without it (the host backend's Triton)


@dataclass
class Report:
    backend: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return all(f.ok for f in self.findings if f.needed)

    def add(self, ok: bool, what: str, remedy: str = "", needed: bool = True) -> None:
        self.findings.append(Finding(ok, what, "" if ok else remedy, needed))


def _extension(report: Report, name: str) -> bool:
    """Whether this installation has the backend's extension module (found, not imported: importing a GPU
    module needs its library loaded first)."""
    module = backends.get(name).module
    spec = importlib.util.find_spec(module)
    if spec is None:
        remedy = _VENDORS[name].rebuild if name in _VENDORS else "reinstall unishmem"
        report.add(False, f"the {name} backend is not built into this installation of unishmem ({module})", remedy)
        return False
    report.add(True, f"extension built: {spec.origin}")
    return True


def _triton(report: Report, triton_backend: str | None) -> None:
    """Triton: one distribution of it, a release unishmem supports, and (for a GPU backend) a compiler for
    that backend's targets."""
    needed = triton_backend is not None
    dists = vendor_libs.triton_distributions()
    if len(dists) > 1:
        required = _torch_requires()
        extra = [d.name for d in dists if _normalized(d.name) not in required]
        installed = " and ".join(f"{d.name} {d.version}" for d in dists)
        report.add(
            False,
            f"two Triton distributions are installed: {installed} both install the `triton` package "
            f"({dists[0].init.parent.parent}), their files mixed",
            f"pip uninstall {' '.join(extra) or dists[-1].name}, then reinstall the one torch requires "
            f"({', '.join(sorted(required & {_normalized(d.name) for d in dists})) or 'none of them'})",
            needed,
        )
    try:
        from . import _triton_compat
    except ImportError as e:
        report.add(False, str(e), _triton_remedy(), needed)
        return
    triton = _triton_compat.triton
    provider = vendor_libs.triton_provider(triton.__file__)
    if triton_backend is None:
        report.add(True, f"Triton {triton.__version__} ({provider}): kernels run under its interpreter", needed=False)
        return
    from triton.backends import backends as compilers
    from triton.backends.compiler import GPUTarget

    target = next(t for t in TARGETS.values() if t[0] == triton_backend)
    names = [n for n, b in compilers.items() if b.compiler.supports_target(GPUTarget(*target))]
    report.add(
        bool(names),
        f"Triton {triton.__version__} ({provider}) compiles for {triton_backend}"
        if names
        else f"Triton {triton.__version__} ({provider}) has no compiler for {triton_backend} targets "
        f"(its backends: {', '.join(compilers) or 'none'})",
        _triton_remedy(),
    )


def _triton_remedy() -> str:
    build = backends.torch_build()
    if build is None:
        return "pip install 'unishmem[triton]' (torch's CPU wheel brings no Triton)"
    return f"reinstall the Triton your torch {torch.__version__} requires: pip install --force-reinstall torch"


def _torch_requires() -> set[str]:
    """The distributions torch requires (lowercase names), from its metadata."""
    try:
        requires = importlib.metadata.requires("torch") or []
    except importlib.metadata.PackageNotFoundError:
        return set()
    return {_normalized(m.group(0)) for r in requires if (m := re.match(r"[A-Za-z0-9._-]+", r))}


def _normalized(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# Where the kernel driver lists each vendor's GPUs, for a torch that cannot see them (a CPU build, or the
# other vendor's): NVIDIA's driver makes a directory per GPU; AMD's KFD a topology node per agent, whose
# gfx_target_version (major * 10000 + minor * 100 + stepping; 0 for a CPU) names the arch.
_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
_KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")


def _nvidia_gpus() -> tuple[list[str | None], Path]:
    """One entry per GPU NVIDIA's driver lists (it does not say the arch there), and where it lists them."""
    return ([None] * len(list(_NVIDIA_GPUS.iterdir())) if _NVIDIA_GPUS.is_dir() else []), _NVIDIA_GPUS


def _amd_gpus() -> tuple[list[str | None], Path]:
    """The gfx arch of each GPU AMD's KFD lists, and where it lists them."""
    archs: list[str | None] = []
    for props in sorted(_KFD_NODES.glob("*/properties")):
        m = re.search(r"^gfx_target_version (\d+)$", props.read_text(), re.M)
        if m and int(m.group(1)):
            major, minor, stepping = int(m.group(1)) // 10000, int(m.group(1)) // 100 % 100, int(m.group(1)) % 100
            archs.append(f"gfx{major}{minor:x}{stepping:x}")
    return archs, _KFD_NODES


def _devices(report: Report, name: str) -> list[str]:
    """torch's build for this backend's devices, the GPUs it (else the driver) sees, and their archs."""
    backend = backends.get(name)
    kind = backend.device_kind
    vendor = _VENDORS[name]
    if backends.torch_build() == backend.torch_build:
        report.add(True, f"torch {torch.__version__} is a {kind} build")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        seen = f"{count} {kind} device(s) visible to torch" if count else f"no GPU: torch sees no {kind} device"
        report.add(count > 0, seen, _NO_GPU)
        assert backend.device_arch is not None  # a GPU backend's entry says its devices' archs
        return [str(backend.device_arch(torch.cuda.get_device_properties(i))) for i in range(count)]
    what = "the CPU" if backends.torch_build() is None else backends.device_kind()
    report.add(
        False,
        f"torch {torch.__version__} is built for {what}; the {name} backend needs a {kind} build",
        vendor.torch_install,
    )
    found, where = vendor.driver_gpus()
    archs = [a for a in found if a is not None]
    listed = f" ({', '.join(archs)})" if archs else ""
    report.add(
        bool(found),
        f"{len(found)} {kind} GPU(s) listed by the driver in {where}{listed}"
        if found
        else f"no GPU: the driver lists no {kind} device ({where})",
        _NO_GPU,
    )
    return archs


_NO_GPU = (
    "run on a machine with the GPUs, and check that this process may use them (CUDA_VISIBLE_DEVICES, "
    "HIP_VISIBLE_DEVICES; in a container the devices passed in)"
)


def _archs(name: str, seen: list[str], asked: list[str]) -> list[str]:
    """The GPU archs to find bitcode for: the GPUs' seen here, and those asked for with --arch (as the
    backend's registry names them: NVSHMEM's by compute capability)."""
    prefix = _VENDORS[name].arch_prefix
    seen += [arch.removeprefix("sm_") for arch in asked if arch.startswith(prefix)]
    return list(dict.fromkeys(seen))


def _nvshmem(report: Report, archs: list[str], built: bool) -> None:
    inst = vendor_libs.find_nvshmem()
    oldest, (major, minor) = vendor_libs.NVSHMEM_SUPPORTED
    lo, hi = ".".join(map(str, oldest)), f"{major}.{minor}"
    remedy = f"pip install 'nvidia-nvshmem-cu13>={lo},<{major}.{minor + 1}' (the `cuda` extra), or set NVSHMEM_HOME"
    for problem in inst.problems:
        report.add(False, f"NVSHMEM: {problem}", remedy)
    if inst.library is None:
        return
    if inst.version is not None:
        ok = vendor_libs.nvshmem_in_matrix(inst.version)
        report.add(
            ok,
            f"NVSHMEM {inst.version} ({inst.origin}) {'is' if ok else 'is NOT'} in the supported range {lo} to {hi}.x",
            remedy,
        )
    if not archs and inst.bitcode:
        found = ", ".join(sorted(inst.bitcode, key=lambda arch: (len(arch), arch)))  # sm_75 before sm_100
        report.add(True, f"NVSHMEM device bitcode for {found} (no GPU to take the arch from; --arch sm_90 checks one)")
    for arch in archs:
        try:
            bitcode = vendor_libs.nvshmem_bitcode(divmod(int(arch), 10))
        except BackendUnavailable as e:
            report.add(False, str(e), remedy)
            continue
        report.add(True, f"NVSHMEM device bitcode for sm_{arch}: {bitcode}")
        _readable(report, bitcode)


def _readable(report: Report, bitcode: Path) -> None:
    """Whether Triton's LLVM reads the bitcode (NOTE [bitcode producer])."""
    try:
        from . import _triton_compat

        _triton_compat.check_readable(bitcode)
    except ImportError:
        return  # Triton's own finding says why
    except BackendUnavailable as e:
        report.add(False, str(e), "the pair of releases the support matrix names (docs/nvidia.md#support-matrix)")


_ROCSHMEM_DIRS = {"ROCM_PATH": "the ROCm install", "ROCSHMEM_LIB_DIR": "the directory of librocshmem_device_<gfx>.bc"}


def _rocshmem(report: Report, archs: list[str], built: bool) -> None:
    for variable in vendor_libs.ROCSHMEM_ENV:
        value = os.environ.get(variable)
        if value is not None and not Path(value).is_dir():
            report.add(
                False,
                f"{variable}={value} is not a directory",
                f"set {variable} to {_ROCSHMEM_DIRS[variable]}, or unset it",
            )
    version, where = _rocshmem_version(built)
    floor = ".".join(map(str, vendor_libs.ROCSHMEM_FLOOR))
    build_it = f"ROCm 7.13 or later ships rocSHMEM >= {floor}; else build it as {_GUIDE} shows (scripts/ci_rocm.sh)"
    if version is None:
        report.add(False, f"no rocSHMEM found: {where}", build_it)
    else:
        ok = vendor_libs.rocshmem_release(version) >= vendor_libs.ROCSHMEM_FLOOR
        report.add(
            ok,
            f"rocSHMEM {version} ({where})" if ok else f"rocSHMEM {version} ({where}) is older than {floor}",
            build_it,
        )
    dirs = vendor_libs.rocshmem_bitcode_dirs()
    found = sorted(vendor_libs.find_rocshmem().bitcode)
    searched = ", ".join(map(str, dirs))
    remedy = f"build rocSHMEM with GPU_TARGETS naming the arch and set ROCSHMEM_LIB_DIR to its lib: {_GUIDE}"
    if not archs:
        report.add(
            bool(found),
            f"device bitcode for {', '.join(found)} in {searched} (no GPU to take the arch from; --arch gfx942 checks one)"
            if found
            else f"no device bitcode (librocshmem_device_<gfx>.bc) in {searched}",
            remedy,
        )
    for arch in archs:
        try:
            report.add(True, f"rocSHMEM device bitcode for {arch}: {vendor_libs.rocshmem_bitcode(arch)}")
        except BackendUnavailable as e:
            report.add(False, str(e), remedy)


def _rocshmem_version(built: bool) -> tuple[str | None, str]:
    """rocSHMEM's release and where it was read: the headers a built module was compiled against, else the
    first install found (the prefix above ROCSHMEM_LIB_DIR, then ROCM_PATH)."""
    if built:
        try:
            module = importlib.import_module(backends.get("rocshmem").module)
            return module.header_version, "the headers the rocshmem backend was built against"
        except ImportError as e:
            return None, f"the rocshmem backend does not import: {e}"
    prefixes = vendor_libs.rocshmem_prefixes()
    for prefix in prefixes:
        version = vendor_libs.rocshmem_header_version(prefix)
        if version is not None:
            return version, f"{prefix}/include/rocshmem/rocshmem_config.h"
    return None, "no include/rocshmem/rocshmem_config.h under " + ", ".join(map(str, prefixes))


def _host(report: Report) -> None:
    _extension(report, "host")
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        usage = shutil.disk_usage(shm)
        report.add(True, f"/dev/shm is writable, {usage.free / 2**30:.1f} GiB free")
    else:
        report.add(
            False, "/dev/shm is missing or not writable", "mount a tmpfs there (containers: --shm-size, --ipc=host)"
        )
    _triton(report, None)


def diagnose(name: str, archs: Sequence[str] = ()) -> Report:
    """Every finding for one backend."""
    report = Report(name)
    if name == "host":
        _host(report)
        return report
    built = _extension(report, name)
    seen = _devices(report, name)
    _triton(report, backends.get(name).triton_backend)
    _VENDORS[name].library(report, _archs(name, seen, list(archs)), built)
    return report


@dataclass(frozen=True)
class _Vendor:
    """What the doctor needs to know of a GPU backend beyond its registry entry (backends.py)."""

    torch_install: str  # how to get a torch built for its devices
    driver_gpus: Callable[[], tuple[list[str | None], Path]]  # the GPUs its kernel driver lists, and where
    arch_prefix: str  # how --arch names its GPUs
    rebuild: str  # how to get the backend into unishmem's extension
    library: Callable[[Report, list[str], bool], None]  # the library's findings: (report, archs, built)


_VENDORS = {
    "nvshmem": _Vendor(
        "pip install torch --index-url https://download.pytorch.org/whl/cu130 (or the CUDA release pytorch.org "
        "lists for your driver)",
        _nvidia_gpus,
        "sm_",
        "install nvidia-nvshmem-cu13 before unishmem, then reinstall unishmem so that its build finds the headers "
        "(docs/nvidia.md)",
        _nvshmem,
    ),
    "rocshmem": _Vendor(
        "pip install torch --index-url https://download.pytorch.org/whl/rocm<X.Y> for the ROCm release this "
        "machine has (pytorch.org lists them)",
        _amd_gpus,
        "gfx",
        f"rebuild unishmem where rocSHMEM >= 3.3 and ROCm's clang are found: {_GUIDE}",
        _rocshmem,
    ),
}


def run(asked: str | None, archs: list[str], as_json: bool) -> int:
    """Print the findings of every backend; 1 when the backend asked for (else UNISHMEM_BACKEND) cannot run."""
    import json

    from . import __version__

    try:
        asked = asked or _config.get("UNISHMEM_BACKEND")
    except ValueError as e:
        print(f"unishmem doctor: {e}")
        return 2
    reports = [diagnose(name, archs) for name in backends.NAMES]
    ready = {r.backend: r.ready for r in reports}
    if asked == "auto":  # as init() picks: the GPU backend of torch's build where it can run, else host
        vendor = backends.by_torch_build(backends.torch_build())
        chosen = vendor.name if vendor is not None and ready[vendor.name] else "host"
    else:
        chosen = asked
    status = 0 if ready[chosen] else 1
    if as_json:
        out = {
            "unishmem": __version__,
            "torch": torch.__version__,
            "asked": asked,
            "chosen": chosen,
            "ready": status == 0,
            "backends": {r.backend: {"ready": r.ready, "findings": [asdict(f) for f in r.findings]} for r in reports},
        }
        print(json.dumps(out, indent=2))
        return status
    print(f"unishmem {__version__}, torch {torch.__version__}")
    for r in reports:
        print(f"{r.backend:9s} {'ready' if r.ready else 'cannot run here'}")
        for f in r.findings:
            mark = "ok" if f.ok else ("missing" if f.needed else "optional")
            print(f"  {mark:8s} {f.what}")
            if f.remedy:
                print(f"  {'':8s} -> {f.remedy}")
    verdict = "ready" if status == 0 else "cannot run here"
    print(f"asked for: {asked}" + (f" (picks {chosen})" if asked == "auto" and chosen else "") + f": {verdict}")
    return status
