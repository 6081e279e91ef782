"""Where the vendor libraries are: NVSHMEM's host library and headers (NVSHMEM_HOME, else where NVIDIA's
cuda-pathfinder finds them: the nvidia-nvshmem-cu12/-cu13 wheel, conda, the system's loader path) and its
per-arch device bitcode beside the host library (which cuda-pathfinder does not cover); rocSHMEM's
device bitcode (ROCSHMEM_LIB_DIR, $ROCM_PATH/lib).

Nothing here initialises a library. Loading NVSHMEM's host library and asking its version is safe on a
machine without a GPU (checked); `unishmem info` and the backend opener both use this module, and the
device library (`@unishmem.jit`) takes its bitcode from `nvshmem_bitcode` / `rocshmem_bitcode`.

NOTE [bitcode release]: the bitcode linked into a kernel must come from the same release as the host
library that initialises the module (nvshmemx_cumodule_init refuses other releases at load time). Where a
pip distribution owns the host library, the bitcode must be a file of that same distribution whose sha256
matches its RECORD; for an install prefix (NVSHMEM_HOME) it must sit beside the host library and the
prefix's header version must equal the library's own version.
"""

from __future__ import annotations

import base64
import ctypes
import functools
import glob
import hashlib
import importlib.metadata
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import BackendUnavailable

NVSHMEM_LIBRARY = "libnvshmem_host.so.3"


@dataclass
class Install:
    vendor: str  # "NVSHMEM" / "rocSHMEM"
    prefix: Path | None = None
    library: Path | None = None  # NVSHMEM's host library (rocSHMEM's is linked statically)
    include: Path | None = None  # NVSHMEM's headers
    version: str | None = None  # the host library's own release, where it can be asked
    origin: str = ""  # how it was found
    bitcode: dict[str, Path] = field(default_factory=dict)  # arch ("sm_90", "gfx942") -> file
    problems: list[str] = field(default_factory=list)

    def require(self) -> Install:
        if self.problems:
            raise BackendUnavailable(f"{self.vendor}: " + "; ".join(self.problems))
        return self


# ---- NVSHMEM ------------------------------------------------------------------------------------


def _header_version(include: Path) -> str | None:
    header = include / "non_abi" / "nvshmem_version.h"
    try:
        m = re.search(r'NVSHMEM_VENDOR_BASE_VERSION_STRING\s+"([^"]+)"', header.read_text())
    except OSError:
        return None
    return m.group(1) if m else None


@functools.cache
def _load_library(path: str):
    """dlopen the host library (global symbols, so the extension module binds to this copy)."""
    return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def library_version(path: Path) -> str:
    lib = _load_library(str(path))
    v = [ctypes.c_int() for _ in range(3)]
    lib.nvshmemx_vendor_get_version_info(*(ctypes.byref(x) for x in v))
    return ".".join(str(x.value) for x in v)


_NVSHMEM_REMEDY = "set NVSHMEM_HOME or `pip install 'unishmem[cuda]'` (nvidia-nvshmem-cu13 and cuda-pathfinder)"


def _find_in_home(home: str) -> Install:
    """An install prefix named by NVSHMEM_HOME: it wins over any search, as the build's CMake has it."""
    prefix = Path(home)
    dirs = [prefix / d for d in ("lib", "lib64")]
    lib = next((d / NVSHMEM_LIBRARY for d in dirs if (d / NVSHMEM_LIBRARY).exists()), None)
    if lib is None:
        where = " or ".join(map(str, dirs))
        return Install("NVSHMEM", problems=[f"{NVSHMEM_LIBRARY} not found in {where} (NVSHMEM_HOME={home})"])
    return Install("NVSHMEM", prefix=prefix, library=lib, include=prefix / "include", origin=f"NVSHMEM_HOME={home}")


def _find_with_pathfinder() -> Install:
    """The host library as cuda-pathfinder loads it (global symbols), and the headers it finds."""
    try:
        from cuda import pathfinder
    except ImportError:
        return Install("NVSHMEM", problems=[f"not searched: cuda-pathfinder is not installed; {_NVSHMEM_REMEDY}"])
    try:
        loaded = pathfinder.load_nvidia_dynamic_lib("nvshmem_host")
    except RuntimeError as e:  # not found (DynamicLibNotFoundError), or found and not loadable
        reason = str(e).splitlines()[0]
        return Install("NVSHMEM", problems=[f"{NVSHMEM_LIBRARY}: cuda-pathfinder: {reason}; {_NVSHMEM_REMEDY}"])
    if loaded.abs_path is None:
        return Install("NVSHMEM", problems=[f"{NVSHMEM_LIBRARY} is loaded, but cuda-pathfinder cannot say from where"])
    lib = Path(loaded.abs_path).resolve()  # as loaded: may be relative to an extension's $ORIGIN
    include = pathfinder.find_nvidia_header_directory("nvshmem")
    return Install(
        "NVSHMEM",
        prefix=lib.parent.parent,
        library=lib,
        include=None if include is None else Path(include),
        origin=f"cuda-pathfinder: {loaded.found_via}",
    )


def find_nvshmem() -> Install:
    home = os.environ.get("NVSHMEM_HOME")
    inst = _find_in_home(home) if home else _find_with_pathfinder()
    if inst.library is None:
        return inst
    lib = inst.library
    dist = _owning_distribution(lib)
    if dist is not None:
        inst.origin = f"pip: {dist.metadata['Name']} {dist.version}"
    for bc in sorted(glob.glob(str(lib.parent / "libnvshmem_device_sm_*.bc"))):
        arch = re.search(r"_(sm_\d+)\.bc$", bc).group(1)
        inst.bitcode[arch] = Path(bc)
    try:
        inst.version = library_version(lib)
    except (OSError, AttributeError) as e:
        inst.problems.append(f"{lib} does not load here: {e}")
    if not inst.bitcode:
        inst.problems.append(f"no device bitcode (libnvshmem_device_sm_*.bc) beside {lib}")
    return inst


def _owning_distribution(path: Path):
    """The installed distribution whose RECORD lists `path`, if any."""
    resolved = path.resolve()
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if not name.startswith("nvidia-nvshmem"):
            continue
        for f in dist.files or ():
            if f.name == path.name and Path(dist.locate_file(f)).resolve() == resolved:
                return dist
    return None


@functools.cache
def _sha256(path: str, size: int, mtime: float) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def check_bitcode(inst: Install, bitcode: Path) -> tuple[bool, str]:
    """Whether `bitcode` comes from the same release as the install's host library, and how that is known."""
    if inst.library is None:
        return False, "no host library to compare with"
    dist = _owning_distribution(inst.library)
    if dist is not None:
        label = f"{dist.metadata['Name']} {dist.version}"
        entry = next((f for f in dist.files or () if Path(dist.locate_file(f)).resolve() == bitcode.resolve()), None)
        if entry is None or entry.hash is None:
            return False, f"{bitcode} is not a file of {label}, which provides {inst.library}"
        st = bitcode.stat()
        if _sha256(str(bitcode), st.st_size, st.st_mtime) != entry.hash.value:
            return False, f"{bitcode} differs from the file {label} installed (sha256 mismatch): another release?"
        return True, f"same release as the host library: {label} (sha256 checked against its RECORD)"
    if bitcode.parent != inst.library.parent:
        return False, f"{bitcode} is not beside the host library {inst.library}"
    # The headers tell the prefix's release only where they are the prefix's own.
    header = _header_version(inst.include) if inst.include and inst.include.parent == inst.prefix else None
    if header is None or header != inst.version:
        return False, (f"cannot tell: the host library is {inst.version}, the headers beside it say {header}")
    return True, f"same install prefix {inst.prefix} as the host library, headers and library both {header}"


def bitcode_arch(capability: tuple[int, int], available) -> str | None:
    """The newest sm_XX bitcode not newer than the device's compute capability."""
    cc = capability[0] * 10 + capability[1]
    fitting = sorted((int(a[3:]), a) for a in available if int(a[3:]) <= cc)
    return fitting[-1][1] if fitting else None


def nvshmem_bitcode(capability: tuple[int, int]) -> Path:
    """The NVSHMEM device bitcode for a device of this compute capability, checked against the host library
    (NOTE [bitcode release]); BackendUnavailable saying why if there is none."""
    inst = find_nvshmem().require()
    arch = bitcode_arch(capability, inst.bitcode)
    if arch is None:
        raise BackendUnavailable(
            f"NVSHMEM: no device bitcode for sm_{capability[0]}{capability[1]} among "
            f"{sorted(inst.bitcode)} in {inst.library.parent}"
        )
    ok, why = check_bitcode(inst, inst.bitcode[arch])
    if not ok:
        raise BackendUnavailable(
            f"NVSHMEM bitcode {inst.bitcode[arch]} does not match the host library "
            f"{inst.library} ({inst.version}): {why}"
        )
    return inst.bitcode[arch]


# ---- rocSHMEM -----------------------------------------------------------------------------------


def rocm_path() -> Path:
    return Path(os.environ.get("ROCM_PATH") or "/opt/rocm")


def find_rocshmem() -> Install:
    inst = Install("rocSHMEM", prefix=rocm_path(), origin=f"ROCM_PATH={rocm_path()}")
    dirs = [Path(d) for d in (os.environ.get("ROCSHMEM_LIB_DIR"), str(rocm_path() / "lib")) if d]
    for d in dirs:
        for bc in sorted(glob.glob(str(d / "librocshmem_device_*.bc"))):
            arch = re.search(r"librocshmem_device_(.+)\.bc$", bc).group(1)
            inst.bitcode.setdefault(arch, Path(bc))
    if not (rocm_path() / "include" / "rocshmem" / "rocshmem.hpp").exists():
        inst.problems.append(f"no rocSHMEM headers under {rocm_path()}/include/rocshmem")
    if not inst.bitcode:
        inst.problems.append("no device bitcode (librocshmem_device_<gfx>.bc) in " + ", ".join(map(str, dirs)))
    return inst


# NOTE [rocSHMEM features]: the rocSHMEM release that brings each thing unishmem uses, from rocSHMEM's
# CHANGELOG.md (rocm-systems projects/rocshmem, the revision that lists 3.5.0 for ROCm 7.14). The ROCm 7.13
# release is "3.3.0" in early revisions of that file and "3.4.0" in later ones; (3, 3) is this project's floor.
# rocshmem_hipmodule_init is in no CHANGELOG entry: the 3.3 headers that the floor rests on declare it.
ROCSHMEM_FLOOR = (3, 3)
ROCSHMEM_FEATURES = (
    ((3, 0), "unique-id init (rocshmem_get_uniqueid, rocshmem_set_attr_uniqueid_args, rocshmem_init_attr)"),
    ((3, 2), "device and/or/xor/swap atomics in the IPC backend"),
    ((3, 3), "rocshmem_quiet_on_stream, rocshmem_sync_all_on_stream, device ROCSHMEM_TEAM_WORLD, ROCSHMEM_TEAM_SHARED"),
    (
        (3, 5),
        "rocshmem_reduce_on_stream, rocshmem_team_split_2d, host-initiated atomics in the IPC backend "
        "under unique-id init (unishmem's host atomics and signal_op)",
    ),
)


def rocshmem_header_version(prefix: Path) -> str | None:
    """ROCSHMEM_VERSION from the install's generated rocshmem_config.h."""
    try:
        text = (prefix / "include" / "rocshmem" / "rocshmem_config.h").read_text()
    except OSError:
        return None
    m = re.search(r'#define\s+ROCSHMEM_VERSION\s+"([^"]+)"', text)
    return m.group(1) if m else None


def rocshmem_features(version: str) -> list[str]:
    """One line per rocSHMEM feature unishmem uses: the release that brings it, and whether `version` has it."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None:
        raise ValueError(f"rocSHMEM version {version!r} is not MAJOR.MINOR[.PATCH]")
    have = (int(m.group(1)), int(m.group(2)))
    lines = [
        f"{'yes' if have >= since else 'no ':3s} {since[0]}.{since[1]}: {what}" for since, what in ROCSHMEM_FEATURES
    ]
    if have < ROCSHMEM_FLOOR:
        lines.append(
            f"rocSHMEM {version} is older than {ROCSHMEM_FLOOR[0]}.{ROCSHMEM_FLOOR[1]}: unishmem's rocshmem "
            "backend is not built against it"
        )
    return lines


def gfx_arch(gcn_arch_name: str) -> str:
    """'gfx942:sramecc+:xnack-' -> 'gfx942'."""
    return gcn_arch_name.split(":")[0]


def rocshmem_bitcode(gcn_arch_name: str) -> Path:
    """The rocSHMEM device bitcode for a device whose gcnArchName is given (feature suffix ignored)."""
    inst = find_rocshmem()
    arch = gfx_arch(gcn_arch_name)
    if arch not in inst.bitcode:
        raise BackendUnavailable(
            f"rocSHMEM: no device bitcode for {arch} (found {sorted(inst.bitcode) or 'none'}; "
            "set ROCSHMEM_LIB_DIR or ROCM_PATH)"
        )
    return inst.bitcode[arch]
