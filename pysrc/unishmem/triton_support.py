"""Triton integration: @unishmem.jit, the vendor bitcode each target links, and module init.

NOTE [module init]: NVSHMEM (nvshmemx_cumodule_init) and rocSHMEM (rocshmem_hipmodule_init) must
initialise every loaded module that uses their device state before its first launch. A
kernel_load_end_hook entry (added to Triton's chain, never replacing another library's hook) calls
the active runtime's module init for kernels made with @unishmem.jit.

NOTE [direct launch]: Triton's JITFunction.run binds every argument, computes its cache key (formatting
the options) and checks the globals its kernel read, at every call: about 1-1.5 us an argument. A
BoundLaunch (Kernel.bind), which a kernel's call plan holds (NOTE [call plans] in kernels/_frame.py),
fixes every argument but the PER_CALL ones; once a call of a variant has taken Triton's whole path and
got its compiled kernel back, later calls of that variant launch it themselves: the launcher that
JITFunction.run calls (CompiledKernel.run, called alike in Triton 3.6 to 3.9 and for both vendors),
with the same grid, stream, hooks and launch metadata, and the kernel's parameters in order, tensors as
their addresses (an int pointer is passed as it is: no data_ptr() call, no driver query). A variant is
the current device, knobs.runtime.debug and, for each PER_CALL value, its dtype and whether its address
is a multiple of 16 (a tensor) or its type and value (anything else). That is sound because the fixed
arguments are those of the first call, and Triton specialises a tensor on its dtype and 16-byte
alignment only and an integer on its value: two calls of one variant have one key in Triton's cache
(tests/test_kernel_launch.py checks that against Triton's own key). Not seen by a direct launch: a
change of Triton's other compile knobs, of a global a kernel reads (unishmem's kernels read
constants) or of UNISHMEM_DEBUG_WAITS once a variant has compiled: rt.free_workspaces() ends every plan.
Under Triton's interpreter (the host backend) and while unishmem.testing records launches, every call
takes the whole path: there a plan skips only unishmem's own work.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable

# isort: off
from . import _triton_compat  # first: Triton is there, and of a release unishmem supports
import triton

# isort: on
from . import _active, _config, _interpreter
from .errors import UnishmemError

_KERNEL_NAMES: set[str] = set()
# unishmem.testing sets it while it records: called with each launch (kernel, args, grid, kwargs), it
# returns the context the launch runs in, which gives whether to launch (False: record only)
launch_recorder: Callable[..., contextlib.AbstractContextManager[bool]] | None = None

_hook_added = False


def interpreting() -> bool:
    """Whether @unishmem.jit kernels launch under Triton's interpreter: wherever Triton's knob says so
    (TRITON_INTERPRET as Triton reads it: 1, true, on or yes), and on the host backend whatever it says
    (its only way to run them; NOTE [import order])."""
    if triton.knobs.runtime.interpret:
        return True
    core = _active.current_core()
    return core is not None and core.backend == "host"


def extern_libs(backend: str, arch) -> dict[str, str]:
    """extern_libs for a Triton compile target ('cuda', 90) or ('hip', 'gfx942'). Finding the library
    scans the installed distributions (tens of milliseconds): it is done once per target and values of
    the variables that choose the library, never per launch."""
    from .backends import by_triton_backend

    vendor = by_triton_backend(backend)
    return dict(_resolved_libs(backend, arch, tuple(os.environ.get(v) for v in vendor.library_env)))


@functools.cache
def _resolved_libs(backend: str, arch, environment: tuple) -> tuple[tuple[str, str], ...]:
    from .backends import by_triton_backend

    vendor = by_triton_backend(backend)
    assert vendor.bitcode is not None and vendor.extern_lib_key is not None  # so has every backend with a target
    bitcode = vendor.bitcode(arch)  # BackendUnavailable is raised, not cached: the next call looks again
    _triton_compat.check_readable(bitcode)
    return (*((key, str(path)) for key, path in vendor.linked_first), (vendor.extern_lib_key, str(bitcode)))


@functools.cache
def _device_target(backend_name: str, device) -> tuple[str, object]:
    import torch

    from .backends import get

    backend = get(backend_name)  # a GPU backend's: the host backend's kernels are interpreted (interpreting())
    assert backend.triton_backend is not None and backend.device_arch is not None  # (a GPU backend's)
    return backend.triton_backend, backend.device_arch(torch.cuda.get_device_properties(device))


def _capturing_cuda_graph() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _on_kernel_load(module, function, name, metadata_group, hash, **_):
    if name not in _KERNEL_NAMES:
        return
    core = _active.current_core()
    if core is None or core.module_init is None:
        raise UnishmemError(
            f"kernel {name} uses unishmem device functions but no GPU runtime is active to "
            "initialise its module: call unishmem.init() first"
        )
    core.module_init(module)
    table = core.diagnostics.table
    if table is not None:  # NOTE [debug waits]: a debug build finds its table through this global
        _set_module_global(core.backend, module, table.data_ptr())


def _set_module_global(backend: str, module: int, address: int) -> None:
    """Write `address` into the module's unishmem_wait_table; modules built without debug waits
    have no such global and are left alone."""
    import ctypes

    from ._wait_table import GLOBAL
    from .backends import get

    globals_calls = get(backend).module_global
    assert globals_calls is not None  # every backend whose modules are loaded has them
    library, get_global, copy = globals_calls
    lib = ctypes.CDLL(library)
    dptr, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    if getattr(lib, get_global)(ctypes.byref(dptr), ctypes.byref(size), ctypes.c_void_p(module), GLOBAL.encode()) != 0:
        return  # not found: a module compiled without debug waits
    value = ctypes.c_int64(address)
    status = getattr(lib, copy)(dptr, ctypes.byref(value), ctypes.c_size_t(8))
    if status != 0:
        raise UnishmemError(f"{copy} could not set {GLOBAL} in a loaded module (status {status})")


def _add_hook() -> None:
    global _hook_added
    if not _hook_added:
        triton.knobs.runtime.kernel_load_end_hook.add(_on_kernel_load)
        _hook_added = True


class Kernel:
    """A Triton kernel that uses unishmem.language. Launch it as kernel[grid](args...)."""

    wraps_jit_function = True  # the hang report finds kernels by this class attribute (hang.py)

    def __init__(self, jit_function, resident: int | None = None, debug_waits: bool | None = None):
        self.jit_function = jit_function
        self.resident = resident
        self.debug_waits = debug_waits  # None: UNISHMEM_DEBUG_WAITS decides (NOTE [debug waits])
        self.fn = jit_function.fn
        functools.update_wrapper(self, self.fn)  # type: ignore[arg-type]  # a callable object, not a function
        _KERNEL_NAMES.add(self.fn.__name__)

    def __getitem__(self, grid):
        return functools.partial(self.run, grid=grid)

    @functools.cached_property
    def signature(self):
        import inspect

        return inspect.signature(self.fn)

    def bind(self, grid, *args, **kwargs) -> BoundLaunch:
        """This kernel's launch on grid with its arguments fixed, but those given as PER_CALL, which
        each call of the result passes, in order (NOTE [direct launch])."""
        return BoundLaunch(self, grid, args, kwargs)

    def __getattr__(self, name):  # everything else is the underlying triton.jit function's
        if name == "jit_function":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.jit_function, name)

    def run(self, *args, grid, **kwargs):
        if launch_recorder is not None:
            with launch_recorder(self, args, grid, dict(kwargs)) as launch:
                return self._launch(args, grid, kwargs) if launch else None
        return self._launch(args, grid, kwargs)

    def _launch(self, args, grid, kwargs):
        if interpreting():
            return self._run_interpreted(args, grid, kwargs)
        from .language import _debug

        core = _active.core()
        libs = extern_libs(*_device_target(core.backend, core.device))
        if self.debug_waits or (self.debug_waits is None and _debug.env_enabled()):
            libs[_debug.LIB_KEY] = _debug.LIBRARY
            core.diagnostics.wait_table()
        kwargs["extern_libs"] = {**libs, **dict(kwargs.get("extern_libs") or {})}
        _add_hook()
        result = self.jit_function.run(*args, grid=grid, warmup=False, **kwargs)
        self._watch(core)
        return result

    def _watch(self, core) -> None:
        """NOTE [hang report]: an event after a compiled launch says when it has finished; not while a
        CUDA graph captures (the launch runs at each replay, which the watchdog does not see)."""
        watchdog = core.diagnostics.watchdog()
        if watchdog is not None and not _capturing_cuda_graph():
            import torch

            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(core.device))
            watchdog.launched(self.fn.__name__, done.query)

    def _run_interpreted(self, args, grid, kwargs):
        watchdog = _active.core().diagnostics.watchdog()
        token = watchdog.launched(self.fn.__name__, None) if watchdog is not None else None
        try:
            resident = self.resident if self.resident is not None else _config.get("UNISHMEM_INTERPRET_RESIDENT")
            _interpreter.run(self.jit_function, args, grid, kwargs, resident, self.fn.__name__)
        finally:
            if watchdog is not None and token is not None:
                watchdog.finished(token)


class _PerCall:
    def __repr__(self):
        return "unishmem.triton_support.PER_CALL"


PER_CALL = _PerCall()  # in Kernel.bind: an argument each call of the bound launch passes


class BoundLaunch:
    """A Kernel's launch with most arguments fixed (Kernel.bind). Called with the PER_CALL values, it
    launches the compiled kernel that an earlier call of the same variant got from Triton, itself
    (NOTE [direct launch]); any other call takes Triton's whole path and keeps what it compiled."""

    def __init__(self, kernel: Kernel, grid, args: tuple, kwargs: dict):
        self.kernel, self.grid = kernel, tuple(grid)
        self.dims = (self.grid + (1, 1))[:3]
        self.args, self.kwargs = list(args), dict(kwargs)
        self.slots = [i for i, a in enumerate(args) if a is PER_CALL]
        self.slots += [name for name, a in kwargs.items() if a is PER_CALL]
        # the direct launch's arguments: the kernel's parameters in order, defaults filled in, fixed
        # tensors as their addresses (the launcher takes an int as a pointer and asks the driver nothing)
        signature = kernel.signature
        params = signature.parameters
        bound = signature.bind(*args, **{k: v for k, v in kwargs.items() if k in params})
        bound.apply_defaults()
        self.direct = [_address(a) for a in bound.arguments.values()]
        names = list(bound.arguments)
        self.direct_slots = [s if isinstance(s, int) else names.index(s) for s in self.slots]
        self.compiled: dict = {}  # variant -> what Triton compiled for it

    def __call__(self, *values):
        if launch_recorder is not None or interpreting():
            args, kwargs = self.filled(values)
            return self.kernel.run(*args, grid=self.grid, **kwargs)
        driver = triton.runtime.driver.active
        device = driver.get_current_device()
        direct = self.direct.copy()
        variant = [device, triton.knobs.runtime.debug]
        add = variant.append  # two entries per value (a flat list hashes faster than one of pairs)
        for slot, value in zip(self.direct_slots, values):
            try:
                address = direct[slot] = value.data_ptr()
            except AttributeError:  # not a tensor
                direct[slot] = value
                add(type(value))
                add(value)
                continue
            add(value.dtype)
            add(not address & 15)  # what Triton specialises a pointer on
        key = tuple(variant)
        compiled = self.compiled.get(key)
        if compiled is None:
            args, kwargs = self.filled(values)
            compiled = self.kernel.run(*args, grid=self.grid, **kwargs)
            if compiled is not None:
                self.compiled[key] = compiled
            return compiled
        stream = driver.get_current_stream(device)
        knobs = triton.knobs.runtime
        enter, leave = knobs.launch_enter_hook, knobs.launch_exit_hook
        compiled.run(
            *self.dims,
            stream,
            compiled.function,
            compiled.packed_metadata,
            compiled.launch_metadata(self.grid, stream, *direct) if hooked(enter, leave) else None,
            enter,
            leave,
            *direct,
        )
        self.kernel._watch(_active.core())
        return compiled

    def filled(self, values) -> tuple[list, dict]:
        """(args, kwargs) of the kernel's launch with `values` in the PER_CALL places."""
        args, kwargs = self.args.copy(), self.kwargs.copy()
        for slot, value in zip(self.slots, values):
            if isinstance(slot, int):
                args[slot] = value
            else:
                kwargs[slot] = value
        return args, kwargs


def hooked(enter, leave) -> bool:
    """Whether a launch hook (a profiler's) is registered: Triton's launcher hands a launch's metadata
    to the hooks and to nothing else, so without one a direct launch need not make it (about 1.5 us).
    Triton 3.6 to 3.9 keep the hooks in HookChains; a hook set as a plain function counts."""
    return bool(getattr(enter, "calls", enter is not None) or getattr(leave, "calls", leave is not None))


def _address(argument):
    return argument.data_ptr() if hasattr(argument, "data_ptr") else argument


def jit(fn=None, *, resident: int | None = None, debug_waits: bool | None = None, **kwargs):
    """triton.jit for kernels that call unishmem.language: links the vendor bitcode of the active
    runtime's device and initialises each loaded module. Under TRITON_INTERPRET=1 the programs of a
    launch run concurrently, at most `resident` at once (default UNISHMEM_INTERPRET_RESIDENT, else 64).
    debug_waits=True compiles every device wait to record itself for the hang report (NOTE [debug
    waits]); None leaves it to UNISHMEM_DEBUG_WAITS."""
    if resident is not None:
        resident = _config.resident(resident, "resident")
    if fn is None:
        return functools.partial(jit, resident=resident, debug_waits=debug_waits, **kwargs)
    return Kernel(triton.jit(fn, **kwargs), resident, debug_waits)
