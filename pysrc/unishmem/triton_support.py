"""Triton integration: @unishmem.jit, the vendor bitcode each target links, and module init.

NOTE [module init]: NVSHMEM (nvshmemx_cumodule_init) and rocSHMEM (rocshmem_hipmodule_init) must
initialise every loaded module that uses their device state before its first launch. A
kernel_load_end_hook entry (added to Triton's chain, never replacing another library's hook) calls
the active runtime's module init for kernels made with @unishmem.jit.
"""
from __future__ import annotations

import functools
import os

import triton

from .errors import UnishmemError

_KERNEL_NAMES: set[str] = set()
_hook_added = False


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def extern_libs(backend: str, arch) -> dict[str, str]:
    """extern_libs for a Triton compile target ('cuda', 90) or ('hip', 'gfx942')."""
    from .language._vendor import EXTERN_LIB_KEY, VENDOR_OF_BACKEND
    from .vendor_libs import bitcode

    vendor = VENDOR_OF_BACKEND[backend]
    return {EXTERN_LIB_KEY[vendor]: str(bitcode(vendor, arch))}


def _runtime_target(rt) -> tuple[str, object]:
    import torch

    from .language._vendor import VENDOR_OF_BACKEND
    from .vendor_libs import DEVICE_ARCH

    if rt.backend not in DEVICE_ARCH:
        raise UnishmemError(f"compiled Triton kernels need a GPU backend, and this runtime's is {rt.backend!r}; "
                            "run with TRITON_INTERPRET=1 to execute them on the host backend")
    backend = next(b for b, v in VENDOR_OF_BACKEND.items() if v == rt.backend)
    return backend, DEVICE_ARCH[rt.backend](torch.cuda.get_device_properties(rt.device))


def _on_kernel_load(module, function, name, metadata_group, hash, **_):
    if name not in _KERNEL_NAMES:
        return
    from . import _current

    init = getattr(_current, "_module_init", None) if _current is not None else None
    if init is None:
        raise UnishmemError(f"kernel {name} uses unishmem device functions but no GPU runtime is active to "
                            "initialise its module: call unishmem.init() first")
    init(module)


def _add_hook() -> None:
    global _hook_added
    if not _hook_added:
        triton.knobs.runtime.kernel_load_end_hook.add(_on_kernel_load)
        _hook_added = True


class Kernel:
    """A Triton kernel that uses unishmem.language. Launch it as kernel[grid](args...)."""

    def __init__(self, jit_function):
        self.jit_function = jit_function
        self.fn = jit_function.fn
        functools.update_wrapper(self, self.fn)
        _KERNEL_NAMES.add(self.fn.__name__)

    def __getitem__(self, grid):
        return functools.partial(self.run, grid=grid)

    def __getattr__(self, name):  # everything else is the underlying triton.jit function's
        if name == "jit_function":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.jit_function, name)

    def run(self, *args, grid, **kwargs):
        if interpreting():
            return self._run_interpreted(args, grid, kwargs)
        from . import runtime

        libs = extern_libs(*_runtime_target(runtime()))
        kwargs["extern_libs"] = {**libs, **dict(kwargs.get("extern_libs") or {})}
        _add_hook()
        return self.jit_function.run(*args, grid=grid, warmup=False, **kwargs)

    def _run_interpreted(self, args, grid, kwargs):
        from triton.runtime.interpreter import InterpreterError

        try:
            return self.jit_function.run(*args, grid=grid, warmup=False, **kwargs)
        except InterpreterError as e:
            # Re-raise what a device function raised (PeerFailure, SymmetryError, bad arguments...)
            # as itself, not as the interpreter's wrapper.
            cause = e.__cause__
            if isinstance(cause, (UnishmemError, ValueError, TypeError)):
                raise cause.with_traceback(cause.__traceback__) from None
            raise


def jit(fn=None, **kwargs):
    """triton.jit for kernels that call unishmem.language: links the vendor bitcode of the active
    runtime's device and initialises each loaded module; plain interpreter under TRITON_INTERPRET=1."""
    if fn is None:
        return functools.partial(jit, **kwargs)
    return Kernel(triton.jit(fn, **kwargs))
