"""The process's active runtime: set by `unishmem.init()`, cleared when that runtime is finalized.

A leaf, so that what runs below the package's top (the device library's host side, the interpreter,
the module-load hook) finds the runtime without importing `unishmem` itself."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .errors import NotInitializedError

if TYPE_CHECKING:
    from ._runtime import Runtime

lock = threading.Lock()  # held by init() while it checks and makes the runtime
_runtime: Runtime | None = None
_init_args: tuple = ()  # what init() made it with: a second init() must ask for the same


def current() -> Runtime | None:
    return _runtime


def runtime() -> Runtime:
    """The active Runtime; NotInitializedError if there is none."""
    if _runtime is None:
        raise NotInitializedError("unishmem is not initialised: call unishmem.init() first")
    return _runtime


def init_args() -> tuple:
    return _init_args


def activate(rt: Runtime, args: tuple) -> None:
    global _runtime, _init_args
    _runtime, _init_args = rt, args


def forget(rt: Runtime) -> None:
    """rt is finalized: it is no longer the active runtime (a later one may already be)."""
    global _runtime
    with lock:
        if _runtime is rt:
            _runtime = None
