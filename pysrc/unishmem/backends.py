"""The backend registry and opening a backend by name.

NOTE [backend registry]: every fact that differs between backends lives in one `Backend` entry of
BACKENDS below: its extension module, library discovery, device kind, torch build, Triton backend
name, device arch and bitcode naming. Everything else looks them up here (`get`, `by_torch_build`,
`by_triton_backend`). What the device library's symbols and constants differ in is
language/_vendor.py's (NOTE [vendor mapping]).

Each backend is a thin adapter: its native module implements the C++ Backend interface
(csrc/backend.hpp); this file only brings it up through the bootstrap."""

from __future__ import annotations

import importlib
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from . import _config, vendor_libs
from ._config import seconds
from .bootstrap import Bootstrap, hostname
from .errors import BackendUnavailable, SymmetryError, UnishmemError


@dataclass(frozen=True)
class Backend:
    """One backend's facts (NOTE [backend registry])."""

    name: str  # what init(backend=...) takes
    library: str  # what implements it, for messages
    device_kind: str  # its devices, for messages
    opener: Callable[[Backend, Bootstrap, int, Any], Opened]  # brings it up: (self, bootstrap, heap_size, device)
    torch_build: str | None = None  # the torch build that runs it (torch.version.<build> is set); None: any
    load: Callable[[], vendor_libs.Install] | None = None  # finds the library, ready to load the extension against
    heap_env: str | None = None  # the environment variable of the library's own heap size
    single_host_env: tuple[tuple[str, str], ...] = ()  # (variable, value) defaults for a job on one host
    triton_backend: str | None = None  # Triton's name for its compile targets; None: interpreter only
    triton_binary: str | None = None  # the key of a compiled kernel's loadable binary in Triton's asm
    device_arch: Callable[[Any], Any] | None = None  # torch device properties -> arch as its bitcode names it
    bitcode: Callable[[Any], Path] | None = None  # arch -> the device bitcode, BackendUnavailable if none
    # the environment variables that choose the library and its bitcode: a launch resolves the bitcode
    # once per (target, their values), not per call (triton_support.extern_libs)
    library_env: tuple[str, ...] = ()
    # Key under which Triton's extern_libs names the bitcode. Triton's AMD backend links a library only
    # when an undefined function's name contains the key, hence "rocshmem".
    extern_lib_key: str | None = None
    # (extern_libs key, file) linked before the bitcode wherever it is linked (a key matching the same
    # functions' names as extern_lib_key).
    linked_first: tuple[tuple[str, Path], ...] = ()
    # NOTE [debug waits]: the driver calls that set a loaded module's global: (library, get the global's
    # device address and size, copy host bytes there).
    module_global: tuple[str, str, str] | None = None

    @property
    def module(self) -> str:
        """The extension module that implements it."""
        return f"unishmem._{self.name}"


@dataclass
class Opened:
    """A backend brought up on this PE: what its Runtime is made from."""

    backend: Backend
    native: Any
    device: torch.device
    heap_of: Callable[[int], torch.Tensor]
    stream_of: Callable[[Any], int]
    # Initialises the vendor's device state in a freshly loaded GPU module (CUmodule / hipModule_t
    # handle as an int); None where kernels need none (host backend).
    module_init: Callable[[int], None] | None = None
    version: dict[str, Any] = field(default_factory=dict)
    # Host-initiated atomics, with native.atomic's arguments; None: native.atomic itself
    # (NOTE [peer atomics] in _peer_atomics.py says why GPU runtimes differ)
    atomic: Callable[..., int] | None = None
    # host: the token of this init's shared-memory names (/dev/shm/unishmem-<token>-...), all of which the
    # launcher removes however the job ends
    segments: str | None = None


def get(name: str) -> Backend:
    """The registry entry of a backend; ValueError naming `name` if there is none."""
    if name not in BACKENDS:
        raise ValueError(f"backend={name!r} is not one of auto, {', '.join(BACKENDS)}")
    return BACKENDS[name]


def by_torch_build(build: str | None) -> Backend | None:
    """The GPU backend that a torch build ('cuda', 'hip') runs; None for a CPU-only build."""
    return next((b for b in BACKENDS.values() if build is not None and b.torch_build == build), None)


def by_triton_backend(triton_backend: str) -> Backend:
    """The backend whose device library a Triton compile target ('cuda', 'hip') links."""
    found = next((b for b in BACKENDS.values() if b.triton_backend == triton_backend), None)
    if found is None:
        targets = ", ".join(f"{b.triton_backend} ({b.library})" for b in BACKENDS.values() if b.triton_backend)
        raise ValueError(f"unishmem.language compiles for {targets} targets, not {triton_backend!r}")
    return found


def native_module(name: str) -> ModuleType:
    """The extension module of a backend, or BackendUnavailable saying why it is missing."""
    try:
        return importlib.import_module(get(name).module)
    except ImportError as e:
        raise BackendUnavailable(
            f"the {name} backend is not built into this installation of unishmem ({e}); `unishmem info` lists what is"
        ) from e


def choose(name: str) -> str:
    """Resolve 'auto': a vendor backend where its device and library are present, else host."""
    if name != "auto":
        return name
    vendor = by_torch_build(torch_build())
    if vendor is not None and torch.cuda.is_available():
        try:
            _load_vendor_module(vendor.name)
            return vendor.name
        except BackendUnavailable:
            pass
    return "host"


def agree(boot: Bootstrap, what: str, fn: Callable[[], Any]) -> Any:
    """Run fn on every rank; if it fails anywhere, raise on every rank (naming where and why)."""
    try:
        result, error = fn(), None
    except Exception as e:  # noqa: BLE001 - reported to every rank, then re-raised here
        result, error = None, e
    outcomes = boot.allgather(None if error is None else f"{type(error).__name__}: {error}", kinds=(type(None), str))
    if error is not None:
        raise error
    failed = [(r, msg) for r, msg in enumerate(outcomes) if msg is not None]
    if failed:
        r, msg = failed[0]
        raise UnishmemError(f"{what} failed on rank {r}: {msg}")
    return result


def open_host(backend: Backend, boot: Bootstrap, heap_size: int, device: Any) -> Opened:
    if device is not None and torch.device(device) != torch.device("cpu"):
        raise ValueError(f"the host backend keeps its heap in CPU memory; device={device!r} is not 'cpu'")
    hosts = boot.allgather(hostname())
    if len(set(hosts)) > 1:
        raise BackendUnavailable(f"the host backend needs every PE on one host; PEs run on {sorted(set(hosts))}")
    sizes = boot.allgather(heap_size)
    if len(set(sizes)) > 1:
        raise SymmetryError(f"PEs asked for different heap sizes: {sizes} (by rank)")
    node_size = agree(
        boot, "reading UNISHMEM_HOST_NODE_SIZE", lambda: _config.get("UNISHMEM_HOST_NODE_SIZE") or boot.size
    )
    node_sizes = boot.allgather(node_size)
    if len(set(node_sizes)) > 1:
        raise SymmetryError(f"PEs have different UNISHMEM_HOST_NODE_SIZE: {node_sizes} (by rank)")
    _host = native_module("host")
    # Each init of the job has segments of its own (a re-init must not meet the last one's names); the
    # launcher removes every segment under its job token.
    job = _config.protocol("UNISHMEM_JOB_TOKEN") or boot.broadcast(secrets.token_hex(8))
    token = f"{job}-{boot.init}"
    wait_timeout, stall_warn = seconds("UNISHMEM_WAIT_TIMEOUT"), seconds("UNISHMEM_STALL_WARN")
    deadlock = seconds("UNISHMEM_DEADLOCK_TIMEOUT")
    try:
        native = agree(
            boot,
            "creating the shared-memory segment",
            lambda: _host.HostBackend(
                token, boot.rank, boot.size, heap_size, node_size, stall_warn, wait_timeout, deadlock
            ),
        )
        agree(boot, "mapping the peers' segments", native.attach_peers)
        native.unlink_own_segment()  # every PE holds every mapping: the names have done their job
    except BaseException:
        _host.HostBackend.unlink_job(token, boot.size)
        raise
    heaps = {}

    def heap_of(pe: int) -> torch.Tensor:
        if pe not in heaps:
            heaps[pe] = torch.frombuffer(native.heap_view(pe), dtype=torch.uint8)
        return heaps[pe]

    return Opened(backend, native, torch.device("cpu"), heap_of, lambda stream: 0, segments=token)


# ---- vendor backends (NVSHMEM, rocSHMEM) ---------------------------------------------------------
# Vendor specifics stay here and in csrc/gpu/; the Runtime sees the same Opened as for host.


def _load_nvshmem() -> vendor_libs.Install:
    # Finding it loads it from where it was found (global symbols), so that the extension binds to that copy.
    return vendor_libs.find_nvshmem().require()


def torch_build() -> str | None:
    """'cuda' or 'hip' for a GPU build of torch (the torch.version attribute it sets), None for a CPU-only one."""
    builds = (b.torch_build for b in BACKENDS.values() if b.torch_build)
    return next((build for build in builds if getattr(torch.version, build, None)), None)


def device_kind() -> str:
    """'CUDA' or 'ROCm': what this torch build calls its devices (CUDA for a CPU-only build, as torch does)."""
    gpu = by_torch_build(torch_build())
    return "CUDA" if gpu is None else gpu.device_kind


def _load_vendor_module(name: str) -> tuple[ModuleType, vendor_libs.Install]:
    """Find the library and load it, then import the extension."""
    load = get(name).load
    assert load is not None  # a vendor backend's entry says how to find its library
    inst = load()
    return native_module(name), inst


def _gpu_device(name: str, boot: Bootstrap, device: Any) -> torch.device:
    kind = get(name).device_kind
    if torch_build() != get(name).torch_build:
        what = "a CPU-only build" if torch_build() is None else f"built for {device_kind()}"
        raise BackendUnavailable(
            f"the {name} backend needs a {kind} build of torch; torch {torch.__version__} is {what}"
        )
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise BackendUnavailable(f"no {kind} device: torch {torch.__version__} sees none on {hostname()}")
    if device is None:
        index = boot.placement.local_rank % count
    else:
        dev = torch.device(device)
        if dev.type != "cuda":
            raise ValueError(f"the {name} backend keeps its heap on a GPU; device={device!r} is not a cuda device")
        index = boot.placement.local_rank % count if dev.index is None else dev.index
        if not 0 <= index < count:
            raise ValueError(f"device={device!r}: there are {count} {kind} devices (0..{count - 1})")
    torch.cuda.set_device(index)
    torch.empty(1, device=f"cuda:{index}")  # the runtime and its context on this device before the library
    return torch.device("cuda", index)


def open_vendor(vendor: Backend, boot: Bootstrap, heap_size: int, device: Any) -> Opened:
    import warnings

    from .errors import UnishmemWarning

    name, library, kind, heap_env = vendor.name, vendor.library, vendor.device_kind, vendor.heap_env
    # a vendor backend's entry names its heap variable and how to find its device bitcode
    assert heap_env is not None and vendor.device_arch is not None and vendor.bitcode is not None
    mod, inst = agree(boot, f"loading {library}", lambda: _load_vendor_module(name))
    dev = agree(boot, f"choosing a {kind} device", lambda: _gpu_device(name, boot, device))
    sizes = boot.allgather(heap_size)
    if len(set(sizes)) > 1:
        raise SymmetryError(f"PEs asked for different heap sizes: {sizes} (by rank)")
    one_host = len(set(boot.allgather(hostname()))) == 1
    # The library's own symmetric heap must hold unishmem's heap (NOTE [vendor heap] in csrc/gpu).
    need = heap_size + _config.LIBRARY_HEAP_MARGIN
    if heap_env in os.environ:
        if _config.parse_size(os.environ[heap_env]) < need:
            raise BackendUnavailable(
                f"{heap_env}={os.environ[heap_env]} is smaller than the {need} bytes a heap of "
                f"{heap_size} bytes needs; unset it or raise it"
            )
    else:
        os.environ[heap_env] = str(need)
    if one_host:
        for variable, value in vendor.single_host_env:
            os.environ.setdefault(variable, value)
    uid = agree(boot, f"making the {library} unique id", lambda: mod.unique_id() if boot.rank == 0 else None)
    uid = boot.broadcast(uid)
    wait_timeout, stall_warn = seconds("UNISHMEM_WAIT_TIMEOUT"), seconds("UNISHMEM_STALL_WARN")
    native = agree(
        boot,
        f"initialising {library}",
        lambda: mod.GpuBackend(uid, boot.rank, boot.size, dev.index, heap_size, stall_warn, wait_timeout),
    )

    version = {
        name: ".".join(map(str, mod.library_version())),
        f"{name}_mode": native.init_mode,
        f"{name}_library": str(inst.library or inst.prefix),
    }
    props = torch.cuda.get_device_properties(dev)
    try:
        version[f"{name}_bitcode"] = str(vendor.bitcode(vendor.device_arch(props)))
    except BackendUnavailable as e:  # host-initiated operations work without it; kernels will not
        warnings.warn(
            f"PE {boot.rank}: {e}; Triton kernels calling {library} cannot be linked", UnishmemWarning, stacklevel=2
        )
        version[f"{name}_bitcode"] = None

    heaps: dict[int, torch.Tensor] = {}

    def heap_of(pe: int) -> torch.Tensor:
        if pe not in heaps:
            capsule = native.heap_view(pe)
            if capsule is None:
                raise ValueError(f"PE {pe}'s heap is not reachable by load/store from PE {boot.rank}")
            heaps[pe] = torch.from_dlpack(capsule)
        return heaps[pe]

    def stream_of(stream: Any) -> int:
        if stream is None:
            return torch.cuda.current_stream(dev).cuda_stream
        if isinstance(stream, torch.cuda.Stream):
            if stream.device != dev:
                raise ValueError(f"stream {stream!r} is on {stream.device}, this runtime's device is {dev}")
            return stream.cuda_stream
        raise TypeError(f"stream must be a torch.cuda.Stream on {dev} or None, got {stream!r}")

    def module_init(module: int) -> None:
        native.module_init(int(module), stream_of(None))

    from . import _peer_atomics

    return Opened(
        vendor, native, dev, heap_of, stream_of, module_init, version, _peer_atomics.make(native, heap_of, dev)
    )


BACKENDS: dict[str, Backend] = {
    "host": Backend("host", "unishmem's POSIX shared-memory heap", "CPU", open_host),
    # NVSHMEM's unique-id bootstrap listens on loopback for a one-host job unless told otherwise.
    "nvshmem": Backend(
        "nvshmem",
        "NVSHMEM",
        "CUDA",
        open_vendor,
        torch_build="cuda",
        load=_load_nvshmem,
        heap_env="NVSHMEM_SYMMETRIC_SIZE",
        single_host_env=(("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", _config.LOOPBACK),),
        triton_backend="cuda",
        triton_binary="cubin",
        device_arch=lambda props: props.major * 10 + props.minor,  # compute capability, e.g. 90
        bitcode=lambda arch: vendor_libs.nvshmem_bitcode(divmod(int(arch), 10)),
        library_env=vendor_libs.NVSHMEM_ENV,
        extern_lib_key="libnvshmem_device",
        module_global=("libcuda.so.1", "cuModuleGetGlobal_v2", "cuMemcpyHtoD_v2"),
    ),
    # rocSHMEM is linked into the extension statically: nothing to preload.
    "rocshmem": Backend(
        "rocshmem",
        "rocSHMEM",
        "ROCm",
        open_vendor,
        torch_build="hip",
        load=vendor_libs.find_rocshmem,
        heap_env="ROCSHMEM_HEAP_SIZE",
        triton_backend="hip",
        triton_binary="hsaco",
        device_arch=lambda props: props.gcnArchName,  # e.g. 'gfx942:sramecc+:xnack-'
        bitcode=lambda arch: vendor_libs.rocshmem_bitcode(str(arch)),
        library_env=vendor_libs.ROCSHMEM_ENV,
        extern_lib_key="rocshmem",
        # NOTE [rocSHMEM module globals] (in the file): every rocSHMEM symbol is rocshmem_*, so Triton
        # links this file, keyed "rocshmem_", with the bitcode.
        linked_first=(("rocshmem_", Path(__file__).parent / "language" / "rocshmem_module_globals.ll"),),
        module_global=("libamdhip64.so", "hipModuleGetGlobal", "hipMemcpyHtoD"),
    ),
}
NAMES = tuple(BACKENDS)


def open_backend(name: str, boot: Bootstrap, heap_size: int, device: Any) -> Opened:
    backend = get(name)
    return backend.opener(backend, boot, heap_size, device)
