"""Opening a backend by name. Each backend is a thin adapter: its native module implements the
C++ Backend interface (csrc/backend.hpp); this file only brings it up through the bootstrap."""
from __future__ import annotations

import importlib
import os
import secrets
from dataclasses import dataclass
from typing import Callable

import torch

from .bootstrap import Bootstrap, hostname
from .errors import BackendUnavailable, SymmetryError, UnishmemError

NAMES = ("host", "nvshmem", "rocshmem")


@dataclass
class Opened:
    native: object
    device: torch.device
    heap_of: Callable[[int], torch.Tensor]
    stream_of: Callable


def native_module(name: str):
    """The extension module of a backend, or BackendUnavailable saying why it is missing."""
    try:
        return importlib.import_module(f"unishmem._{name}")
    except ImportError as e:
        raise BackendUnavailable(f"the {name} backend is not built into this installation of unishmem "
                                 f"({e}); `unishmem info` lists what is") from e


def choose(name: str) -> str:
    """Resolve 'auto': a vendor backend where its device and library are present, else host."""
    if name != "auto":
        return name
    if torch.cuda.is_available():
        vendor = "rocshmem" if torch.version.hip else "nvshmem"
        try:
            native_module(vendor)
            return vendor
        except BackendUnavailable:
            pass
    return "host"


def agree(boot: Bootstrap, what: str, fn: Callable):
    """Run fn on every rank; if it fails anywhere, raise on every rank (naming where and why)."""
    try:
        result, error = fn(), None
    except Exception as e:  # noqa: BLE001 - reported to every rank, then re-raised here
        result, error = None, e
    outcomes = boot.allgather(None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    failed = [(r, msg) for r, msg in enumerate(outcomes) if msg is not None]
    if failed:
        r, msg = failed[0]
        raise UnishmemError(f"{what} failed on rank {r}: {msg}")
    return result


def open_host(boot: Bootstrap, heap_size: int, device) -> Opened:
    if device is not None and torch.device(device) != torch.device("cpu"):
        raise ValueError(f"the host backend keeps its heap in CPU memory; device={device!r} is not 'cpu'")
    hosts = boot.allgather(hostname())
    if len(set(hosts)) > 1:
        raise BackendUnavailable(f"the host backend needs every PE on one host; PEs run on {sorted(set(hosts))}")
    sizes = boot.allgather(heap_size)
    if len(set(sizes)) > 1:
        raise SymmetryError(f"PEs asked for different heap sizes: {sizes} (by rank)")
    _host = native_module("host")
    token = os.environ.get("UNISHMEM_JOB_TOKEN") or boot.broadcast(secrets.token_hex(8))
    wait_timeout = float(os.environ.get("UNISHMEM_WAIT_TIMEOUT", "300"))
    stall_warn = float(os.environ.get("UNISHMEM_STALL_WARN", "30"))
    deadlock = float(os.environ.get("UNISHMEM_DEADLOCK_TIMEOUT", "5"))
    try:
        native = agree(boot, "creating the shared-memory segment", lambda: _host.HostBackend(
            token, boot.rank, boot.size, heap_size, stall_warn, wait_timeout, deadlock))
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

    return Opened(native, torch.device("cpu"), heap_of, lambda stream: 0)


OPENERS = {"host": open_host}


def open_backend(name: str, boot: Bootstrap, heap_size: int, device) -> Opened:
    if name not in NAMES:
        raise ValueError(f"backend={name!r} is not one of auto, {', '.join(NAMES)}")
    if name not in OPENERS:
        native_module(name)  # raises BackendUnavailable with the reason
    return OPENERS[name](boot, heap_size, device)
