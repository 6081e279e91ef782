"""The process's active runtime and its core: set by `unishmem.init()`, cleared when that runtime is
finalized.

Imported at run time by nothing it names (init hands the core `forget` to call), so that what runs
below the package's top (the device library's host side, the interpreter, the module-load hook, the
kernels) finds the core without importing `unishmem` itself, and no import goes round a circle."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .errors import NotInitializedError

if TYPE_CHECKING:
    from ._core import Core
    from ._runtime import Runtime

lock = threading.Lock()  # held by init() while it checks and makes the runtime
_runtime: Runtime | None = None
_core: Core | None = None
_init_args: tuple = ()  # what init() made it with: a second init() must ask for the same

_NOT_INITIALISED = "unishmem is not initialised: call unishmem.init() first"


def current() -> Runtime | None:
    return _runtime


def runtime() -> Runtime:
    """The active Runtime; NotInitializedError if there is none."""
    if _runtime is None:
        raise NotInitializedError(_NOT_INITIALISED)
    return _runtime


def current_core() -> Core | None:
    return _core


def core() -> Core:
    """The active runtime's Core (NOTE [private core]); NotInitializedError if there is none."""
    if _core is None:
        raise NotInitializedError(_NOT_INITIALISED)
    return _core


def init_args() -> tuple:
    return _init_args


def activate(rt: Runtime, made_of: Core, args: tuple) -> None:
    global _runtime, _core, _init_args
    _runtime, _core, _init_args = rt, made_of, args


def forget(ended: Core) -> None:
    """`ended` is finalized: it is no longer the active core (a later one may already be)."""
    global _runtime, _core
    with lock:
        if _core is ended:
            _runtime, _core = None, None
