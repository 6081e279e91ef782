"""unishmem: GPU symmetric memory (NVSHMEM, rocSHMEM) and a host shared-memory backend behind one API."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _active, _config
from ._config import parse_size as parse_size
from ._version import __version__ as __version__
from .enums import CMP, SIGNAL
from .errors import (
    BackendUnavailable,
    DeadlockError,
    HeapExhaustedError,
    NotInitializedError,
    NotSymmetricError,
    PeerFailure,
    RaceError,
    SymmetryError,
    UnishmemError,
    UnishmemWarning,
    WaitTimeout,
)

if TYPE_CHECKING:
    import torch

    from ._runtime import Runtime
    from ._team import Team
    from .bootstrap import Bootstrap


def __getattr__(name: str) -> Any:
    """Runtime and Team on first use: they import torch, which `unishmem run` and the CLI never need
    (torch's import is most of a launcher's start-up, and a job pays it before any PE starts)."""
    if name == "Runtime":
        from ._runtime import Runtime

        return Runtime
    if name == "Team":
        from ._team import Team

        return Team
    raise AttributeError(f"module 'unishmem' has no attribute {name!r}")


def jit(fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """@unishmem.jit: triton.jit plus vendor bitcode linking and module init (see triton_support)."""
    from .triton_support import jit as _jit

    return _jit(fn, **kwargs)


__all__ = [
    "init",
    "runtime",
    "Runtime",
    "Team",
    "SIGNAL",
    "CMP",
    "UnishmemError",
    "NotInitializedError",
    "SymmetryError",
    "NotSymmetricError",
    "PeerFailure",
    "BackendUnavailable",
    "HeapExhaustedError",
    "WaitTimeout",
    "DeadlockError",
    "RaceError",
    "UnishmemWarning",
    "parse_size",
    "jit",
]


def init(
    backend: str = "auto",
    heap_size: int | str | None = None,
    device: torch.device | str | int | None = None,
    group: torch.distributed.ProcessGroup | None = None,
) -> Runtime:
    """Collective: join the job and map the symmetric heap. Returns the process's Runtime.
    Calling it again with the same arguments returns the same Runtime."""
    from . import backends, bootstrap
    from ._core import Core
    from ._runtime import Runtime

    if backend == "auto":
        backend = _config.get("UNISHMEM_BACKEND")
    heap_size = parse_size(_config.get("UNISHMEM_SYMMETRIC_SIZE") if heap_size is None else heap_size)
    args = (backend, heap_size, None if device is None else str(device), id(group) if group is not None else None)
    with _active.lock:
        current = _active.current()
        if current is not None:
            if _active.init_args() != args:
                raise UnishmemError(
                    f"unishmem.init() was already called with (backend, heap_size, device, group) = "
                    f"{_active.init_args()[:3]}; now asked for {args[:3]}. Finalize the runtime "
                    "first to change them"
                )
            return current
        boot = bootstrap.discover(group)
        try:
            name = backends.choose(backend)
            opened = backends.open_backend(name, boot, heap_size, device)
        except BaseException:
            boot.close()
            raise
        # The runtime keeps the bootstrap until finalize: rank 0 may be serving its store to slower peers.
        core = Core(opened, boot, _hang_dir(boot), on_end=_active.forget)
        rt = Runtime(core)
        _active.activate(rt, core, args)
        return rt


def _hang_dir(boot: Bootstrap) -> str | None:
    """Where the PEs of this job leave their hang reports (NOTE [hang report]), if the watchdog is on:
    `unishmem run`'s private directory, else one that every rank agrees on in this user's own."""
    import secrets

    from .rendezvous import private_dir

    if not _config.seconds("UNISHMEM_HANG_TIMEOUT"):
        return None
    path = _config.protocol("UNISHMEM_HANG_DIR") or os.path.join(
        private_dir(), f"hang-{boot.broadcast(secrets.token_hex(8))}"
    )
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def runtime() -> Runtime:
    """The current Runtime; NotInitializedError if there is none."""
    return _active.runtime()
