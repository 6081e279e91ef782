"""The host API's hot path, in one place (NOTE [hot paths] in _runtime.py). Its layers, all keyed by
the one table below:

- the checked Runtime methods, which call a FASTCALL function of the backend's module taking
  addresses (NOTE [fast calls], fast_calls.cpp) once their checks pass, and remember the tensors
  that passed (`remember`);
- on CPU runtimes, the hot calls `hot_<method>` (NOTE [hot calls]), which take the method's own
  arguments and trust tensors remembered in the same role, and a HotMethod per method on the
  instance (NOTE [hot methods]) that tries the hot call first and calls the method on a miss.

A hot call takes (HotPath.address, the method's parameters in the method's order):
tests/test_layout.py calls each with one argument too many and checks the count it names.
"""

from __future__ import annotations

import inspect
import itertools
import sys
from collections.abc import Callable

import torch

from ._checks import ITEMSIZE

# method -> its FASTCALL function (addresses, checked), or None where the method has none
HOT_METHODS = {
    "put": "fast_put",
    "get": "fast_get",
    "put_signal": "fast_put_signal",
    "signal_op": "fast_signal_op",
    "signal_wait_until": "fast_signal_wait_until",
    "barrier_all": None,
    "sync_all": None,
}
_EPOCHS = itertools.count()  # NOTE [hot calls]: unique in the process


class HotPath:
    """A runtime's hot path: the backend's fast calls, and on CPU runtimes its table of tensors
    that passed the checks (NOTE [hot calls], [view checks])."""

    # the FASTCALL functions of HOT_METHODS, set from it in __init__ (named here for type checkers)
    fast_put: Callable[..., None]
    fast_get: Callable[..., None]
    fast_put_signal: Callable[..., None]
    fast_signal_op: Callable[..., None]
    fast_signal_wait_until: Callable[..., int]

    def __init__(self, native, on_cpu: bool):
        self.module = sys.modules[type(native).__module__]
        self.backend = native.address  # what the fast calls take first
        for fast in filter(None, HOT_METHODS.values()):  # self.fast_put = module.fast_put, ...
            setattr(self, fast, getattr(self.module, fast))
        # GPU calls need the current stream, which torch must be asked for: no hot calls there
        self.on_cpu = on_cpu
        self.table = self.module.HotPath(native.address, native.n_pes, torch, ITEMSIZE)
        self.table.epoch = next(_EPOCHS) if on_cpu else -1

    def install(self, rt, cls) -> None:
        """NOTE [hot methods]: each hot method of `cls`, unless a subclass of it overrides it, is
        shadowed on `rt` by a C callable that tries the method's hot call first and calls the method
        itself, which runs the full checks, otherwise."""
        if not self.on_cpu:
            return
        for name in HOT_METHODS:
            method = getattr(type(rt), name)
            if method is not getattr(cls, name):
                continue
            params = list(inspect.signature(method).parameters.values())[1:]  # self excluded
            names = tuple(p.name for p in params)
            defaults = tuple(p.default for p in params if p.default is not inspect.Parameter.empty)
            setattr(
                rt, name, self.module.make_hot_method(name, self.table.address, method.__get__(rt), names, defaults)
            )

    def remember(self, t, addr: int, nbytes: int, symmetric: bool) -> None:
        """`t` passed the checks of its role; hot calls may trust it."""
        if self.on_cpu and nbytes:
            self.table.remember(t, addr, nbytes, symmetric)

    def add_allocation(self, storage, addr: int, nbytes: int) -> None:
        if self.on_cpu:
            self.table.add_allocation(storage, addr, nbytes)  # NOTE [view checks]

    def drop_allocation(self, addr: int) -> None:
        """A free: its views miss, and no hot call trusts a tensor remembered before it."""
        self.table.drop_allocation(addr)
        self.table.epoch = next(_EPOCHS) if self.on_cpu else -1

    def end(self) -> None:
        self.table.epoch = -1
        self.table.drop_allocations()
