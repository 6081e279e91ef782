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
# NVSHMEM's two bitcode layouts: from 3.7 one file per arch (libnvshmem_device_sm_90.bc...), before that
# one file for every arch, which Install.bitcode keys ANY_ARCH.
NVSHMEM_SINGLE_BITCODE = "libnvshmem_device.bc"
# the environment variables that choose where each library and its bitcode are found
NVSHMEM_ENV = ("NVSHMEM_HOME",)
ROCSHMEM_ENV = ("ROCM_PATH", "ROCSHMEM_LIB_DIR")
ANY_ARCH = "any"


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
    """MAJOR.MINOR.PATCH from the numeric macros, which every release defines (3.4.5 has no version string)."""
    header = include / "non_abi" / "nvshmem_version.h"
    try:
        text = header.read_text()
    except OSError:
        return None
    parts = [re.search(rf"#define\s+NVSHMEM_VENDOR_{p}_VERSION\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    found = [m.group(1) for m in parts if m is not None]
    return ".".join(found) if len(found) == len(parts) else None


@functools.cache
def _load_library(path: str):
    """dlopen the host library (global symbols, so the extension module binds to this copy)."""
    return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def library_version(path: Path) -> str:
    lib = _load_library(str(path))
    v = [ctypes.c_int() for _ in range(3)]
    lib.nvshmemx_vendor_get_version_info(*(ctypes.byref(x) for x in v))
    return ".".join(str(x.value) for x in v)


# The NVSHMEM releases of the support matrix (docs/nvidia.md#support-matrix), as pyproject's `cuda` extra
# declares them: from what torch 2.11 pins to the newest checked.
NVSHMEM_SUPPORTED = ((3, 4, 5), (3, 8))


def nvshmem_in_matrix(version: str) -> bool:
    have = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
    return NVSHMEM_SUPPORTED[0] <= have and have[:2] <= NVSHMEM_SUPPORTED[1]


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
    home = os.environ.get(NVSHMEM_ENV[0])
    inst = _find_in_home(home) if home else _find_with_pathfinder()
    if inst.library is None:
        return inst
    lib = inst.library
    dist = _owning_distribution(lib)
    if dist is not None:
        inst.origin = f"pip: {dist.metadata['Name']} {dist.version}"
    for bc in sorted(glob.glob(str(lib.parent / "libnvshmem_device_sm_*.bc"))):
        m = re.search(r"_(sm_\d+)\.bc$", bc)
        if m is None:
            continue  # not sm_<number>: no target bitcode_arch knows
        inst.bitcode[m.group(1)] = Path(bc)
    if not inst.bitcode and (lib.parent / NVSHMEM_SINGLE_BITCODE).exists():
        inst.bitcode[ANY_ARCH] = lib.parent / NVSHMEM_SINGLE_BITCODE
    try:
        inst.version = library_version(lib)
    except (OSError, AttributeError) as e:
        inst.problems.append(f"{lib} does not load here: {e}")
    if not inst.bitcode:
        inst.problems.append(f"no device bitcode (libnvshmem_device_sm_*.bc or {NVSHMEM_SINGLE_BITCODE}) beside {lib}")
    return inst


def _owning_distribution(path: Path):
    """The installed distribution whose RECORD lists `path`, if any."""
    resolved = path.resolve()
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if not name.startswith("nvidia-nvshmem"):
            continue
        for f in dist.files or ():
            # ignore: typeshed's SimplePath lacks __fspath__; an installed distribution's is a pathlib.Path
            if f.name == path.name and Path(dist.locate_file(f)).resolve() == resolved:  # type: ignore[arg-type]
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
    """The newest sm_XX bitcode not newer than the device's compute capability (the one file of a release
    with a single bitcode)."""
    if ANY_ARCH in available:
        return ANY_ARCH
    cc = capability[0] * 10 + capability[1]
    fitting = sorted((int(a[3:]), a) for a in available if int(a[3:]) <= cc)
    return fitting[-1][1] if fitting else None


def nvshmem_bitcode(capability: tuple[int, int]) -> Path:
    """The NVSHMEM device bitcode for a device of this compute capability, checked against the host library
    (NOTE [bitcode release]); BackendUnavailable saying why if there is none."""
    inst = find_nvshmem().require()
    assert inst.library is not None  # NVSHMEM found without problems: its host library is known
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


# ---- bitcode -------------------------------------------------------------------------------------
# NOTE [bitcode producer]: LLVM reads bitcode that its own or an older release wrote, not a newer one's
# (Triton 3.6, LLVM 22.0, fails on NVSHMEM 3.8's bitcode from LLVM 22.1: "Failed to parse library").
# Which LLVM wrote a file is the STRING record of its IDENTIFICATION block, the first block after the
# magic (LLVM's docs/BitCodeFormat.rst); the few lines below read only that block.

_BITCODE_MAGIC = b"BC\xc0\xde"
_WRAPPER_MAGIC = 0x0B17C0DE
_IDENTIFICATION_BLOCK = 13
_CHAR6 = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._"


class _Bits:
    """An LLVM bitstream: fields are read least significant bit first."""

    def __init__(self, data: bytes, start: int):
        self.data, self.pos = data, start * 8

    def fixed(self, width: int) -> int:
        value = 0
        for i in range(width):
            byte = self.data[self.pos >> 3]  # IndexError past the end: the caller reports a bad file
            value |= ((byte >> (self.pos & 7)) & 1) << i
            self.pos += 1
        return value

    def vbr(self, width: int) -> int:
        value, shift, high = 0, 0, 1 << (width - 1)
        while True:
            chunk = self.fixed(width)
            value |= (chunk & (high - 1)) << shift
            if not chunk & high:
                return value
            shift += width - 1

    def align32(self) -> None:
        self.pos = (self.pos + 31) & ~31


def _abbreviated(bits: _Bits, ops: list) -> list[int]:
    """The fields of one record written with an abbreviation (a list of (encoding, value) operands)."""

    def scalar(op):
        kind, value = op
        if kind == "literal":
            return value
        if kind == "fixed":
            return bits.fixed(value)
        if kind == "vbr":
            return bits.vbr(value)
        if kind == "char6":
            return ord(_CHAR6[bits.fixed(6)])
        raise ValueError(f"unexpected operand {kind} in an identification record")

    fields, i = [], 0
    while i < len(ops):
        if ops[i][0] == "array":  # its element's encoding is the next operand
            fields += [scalar(ops[i + 1]) for _ in range(bits.vbr(6))]
            i += 2
        else:
            fields.append(scalar(ops[i]))
            i += 1
    return fields


def _define_abbrev(bits: _Bits) -> list:
    kinds = {1: "fixed", 2: "vbr", 3: "array", 4: "char6", 5: "blob"}
    ops: list[tuple[str, int | None]] = []
    for _ in range(bits.vbr(5)):
        if bits.fixed(1):
            ops.append(("literal", bits.vbr(8)))
        else:
            kind = kinds[bits.fixed(3)]
            ops.append((kind, bits.vbr(5) if kind in ("fixed", "vbr") else None))
    return ops


@functools.cache
def _producer(path: str, size: int, mtime: float) -> str | None:
    with open(path, "rb") as f:
        head = f.read(4096)  # the identification block is a few dozen bytes
    start = 0
    if int.from_bytes(head[:4], "little") == _WRAPPER_MAGIC:  # the Darwin-style wrapper header
        start = int.from_bytes(head[8:12], "little")
    if head[start : start + 4] != _BITCODE_MAGIC:
        return None
    bits = _Bits(head, start + 4)
    try:
        if bits.fixed(2) != 1 or bits.vbr(8) != _IDENTIFICATION_BLOCK:  # ENTER_SUBBLOCK of that block
            return None
        width = bits.vbr(4)
        bits.align32()
        bits.fixed(32)  # the block's length in words
        abbrevs = []
        while True:
            abbrev = bits.fixed(width)
            if abbrev == 0:  # END_BLOCK
                return None
            if abbrev == 2:  # DEFINE_ABBREV
                abbrevs.append(_define_abbrev(bits))
                continue
            if abbrev == 3:  # UNABBREV_RECORD: code, count, fields
                code, n = bits.vbr(6), bits.vbr(6)
                fields = [code] + [bits.vbr(6) for _ in range(n)]
            else:
                fields = _abbreviated(bits, abbrevs[abbrev - 4])
            if fields[0] == 1:  # IDENTIFICATION_CODE_STRING
                return "".join(map(chr, fields[1:]))
    except (IndexError, KeyError, ValueError):
        return None


def bitcode_producer(path: Path) -> str | None:
    """The LLVM release that wrote a bitcode file ('LLVM22.1.8'), None where the file does not say (or is
    not bitcode: a stand-in in IR text, say). NOTE [bitcode producer]."""
    st = path.stat()
    return _producer(str(path), st.st_size, st.st_mtime)


def llvm_release(producer: str | None) -> tuple[int, int] | None:
    """'LLVM22.1.8' -> (22, 1); 'LLVM22.0.0git' -> (22, 0); None for None or another producer."""
    m = re.match(r"LLVM(\d+)\.(\d+)", producer or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


# ---- Triton --------------------------------------------------------------------------------------
# NOTE [Triton distributions]: three distributions install the one `triton` package: `triton` (PyPI; what
# torch's CUDA wheels require), `pytorch-triton-rocm` (what ROCm's torch wheels require) and `pytorch-triton`
# (torch's nightlies). pip treats them as unrelated, so two of them can be installed over each other in the
# same directory, files mixed; unishmem requires none of them (pyproject.toml) and names the one it finds.


@dataclass
class TritonDistribution:
    name: str
    version: str
    init: Path  # the triton/__init__.py it installed


def triton_distributions() -> list[TritonDistribution]:
    """Every installed distribution that installs the `triton` package, found without importing it."""
    found = []
    for name in sorted(set(importlib.metadata.packages_distributions().get("triton", ()))):
        dist = importlib.metadata.distribution(name)
        found.append(
            # ignore: typeshed's SimplePath lacks __fspath__; an installed distribution's is a pathlib.Path
            TritonDistribution(dist.metadata["Name"], dist.version, Path(dist.locate_file("triton/__init__.py")))  # type: ignore[arg-type]
        )
    return found


def triton_provider(init_file: str) -> str:
    """Which distribution installed the `triton` package whose __init__.py is `init_file`, for messages."""
    here = Path(init_file).resolve()
    owners = [d for d in triton_distributions() if d.init.resolve() == here]
    if not owners:
        return "no installed distribution (a source tree or a copy on the path?)"
    return " and ".join(f"the {d.name} {d.version} distribution" for d in owners)


# ---- rocSHMEM -----------------------------------------------------------------------------------


def rocm_path() -> Path:
    return Path(os.environ.get(ROCSHMEM_ENV[0]) or "/opt/rocm")


def rocshmem_bitcode_dirs() -> list[Path]:
    """Where librocshmem_device_<gfx>.bc is looked for, first match wins: ROCSHMEM_LIB_DIR, $ROCM_PATH/lib."""
    return [Path(d) for d in (os.environ.get(ROCSHMEM_ENV[1]), str(rocm_path() / "lib")) if d]


def rocshmem_prefixes() -> list[Path]:
    """The rocSHMEM installs whose headers say its release: the prefix above ROCSHMEM_LIB_DIR, ROCM_PATH."""
    return list(dict.fromkeys(d.parent for d in rocshmem_bitcode_dirs()))


def find_rocshmem() -> Install:
    inst = Install("rocSHMEM", prefix=rocm_path(), origin=f"ROCM_PATH={rocm_path()}")
    dirs = rocshmem_bitcode_dirs()
    for d in dirs:
        for bc in sorted(glob.glob(str(d / "librocshmem_device_*.bc"))):
            m = re.search(r"librocshmem_device_(.+)\.bc$", bc)
            if m is None:
                continue  # librocshmem_device_.bc: no target's
            inst.bitcode.setdefault(m.group(1), Path(bc))
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


def rocshmem_release(version: str) -> tuple[int, int]:
    """'3.2.0' -> (3, 2)."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None:
        raise ValueError(f"rocSHMEM version {version!r} is not MAJOR.MINOR[.PATCH]")
    return int(m.group(1)), int(m.group(2))


def rocshmem_features(version: str) -> list[str]:
    """One line per rocSHMEM feature unishmem uses: the release that brings it, and whether `version` has it."""
    have = rocshmem_release(version)
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
        searched = ", ".join(str(d / f"librocshmem_device_{arch}.bc") for d in rocshmem_bitcode_dirs())
        raise BackendUnavailable(
            f"rocSHMEM: no device bitcode for {arch}: none of {searched} exists (found for: "
            f"{', '.join(sorted(inst.bitcode)) or 'no arch'}; set ROCSHMEM_LIB_DIR or ROCM_PATH)"
        )
    return inst.bitcode[arch]
