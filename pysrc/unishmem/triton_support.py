"""Triton integration: @unishmem.jit, the vendor bitcode each target links, and module init.

NOTE [module init]: NVSHMEM (nvshmemx_cumodule_init) and rocSHMEM (rocshmem_hipmodule_init) must
initialise every loaded module that uses their device state before its first launch. A
kernel_load_end_hook entry (added to Triton's chain, never replacing another library's hook) calls
the active runtime's module init for kernels made with @unishmem.jit.

NOTE [concurrent interpreter]: under TRITON_INTERPRET=1 Triton's GridExecutor calls the kernel
once per program, one after another, and keeps the program id on its one builder. Here the
program id is per thread, and the function the executor calls only records each program; the
last call runs them all on threads, started in program-id order with at most `resident` alive at
once (as a GPU fills its SMs), so programs may wait on each other. The host backend counts them
(NOTE [programs] in csrc/host/host_backend.hpp) so that its deadlock check stays exact.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import threading

import triton

from . import _triton_compat
from .errors import UnishmemError

_KERNEL_NAMES: set[str] = set()
# unishmem.testing sets it while it records: called with each launch (kernel, args, grid, kwargs), it
# returns the context the launch runs in, which gives whether to launch (False: record only)
launch_recorder = None

_hook_added = False


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


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
    bitcode = vendor.bitcode(arch)  # BackendUnavailable is raised, not cached: the next call looks again
    _triton_compat.check_readable(bitcode)
    return (*((key, str(path)) for key, path in vendor.linked_first), (vendor.extern_lib_key, str(bitcode)))


@functools.cache
def _device_target(backend_name: str, device) -> tuple[str, object]:
    import torch

    from .backends import get

    backend = get(backend_name)
    if backend.triton_backend is None:
        raise UnishmemError(
            f"compiled Triton kernels need a GPU backend, and this runtime's is {backend_name!r}; "
            "run with TRITON_INTERPRET=1 to execute them on the host backend"
        )
    return backend.triton_backend, backend.device_arch(torch.cuda.get_device_properties(device))


def _capturing_cuda_graph() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _on_kernel_load(module, function, name, metadata_group, hash, **_):
    if name not in _KERNEL_NAMES:
        return
    from . import _current

    init = getattr(_current, "_module_init", None) if _current is not None else None
    if init is None:
        raise UnishmemError(
            f"kernel {name} uses unishmem device functions but no GPU runtime is active to "
            "initialise its module: call unishmem.init() first"
        )
    init(module)
    table = getattr(_current, "_wait_table", None)
    if table is not None:  # NOTE [debug waits]: a debug build finds its table through this global
        from .language._debug import set_module_global

        set_module_global(_current.backend, module, table.data_ptr())


def _add_hook() -> None:
    global _hook_added
    if not _hook_added:
        triton.knobs.runtime.kernel_load_end_hook.add(_on_kernel_load)
        _hook_added = True


_program = threading.local()  # on a program's thread: grid_idx, launch


class _ThreadGridIdx:
    """The interpreter builder's grid_idx, one per thread."""

    def __get__(self, builder, owner=None):
        return self if builder is None else getattr(_program, "grid_idx", None)

    def __set__(self, builder, value):
        _program.grid_idx = value


_REWRITE_LOCK = threading.RLock()


def _serialise_rewrites() -> None:
    """NOTE [concurrent interpreter]: the first call of a @triton.jit helper (tl.sum, say) rewrites
    it and copies the interpreter's globals into its module's globals, while another program's
    call of a helper of that module iterates the same dict in _patch_lang ("dictionary changed size
    during iteration", seen in 2 of 30 4-PE runs of dispatch here). One lock around both.
    Taken on every helper call, that lock queued a launch's programs, mostly for nothing: a helper's
    rewrite is made once, and a helper's _patch_lang only patches again (to equal wrappers) the
    triton.language modules that the launch, or an earlier helper of it, has patched. So a program
    skips both where they are done (a 4-PE interpreted ag_gemm of 1 MiB shards: 3.9 s, against
    4.7-5.4 s taking the lock every time)."""
    from triton.runtime import interpreter

    if getattr(interpreter._patch_lang, "_unishmem_locked", False):
        return
    patch_lang, rewrite = interpreter._patch_lang, interpreter.InterpretedFunction.rewrite
    langs_of: dict = {}  # function -> the triton.language modules in its globals (read under the lock)

    def langs(fn) -> frozenset:
        found = langs_of.get(fn)
        if found is None:
            with _REWRITE_LOCK:
                found = langs_of[fn] = frozenset(
                    id(v) for v in list(fn.__globals__.values()) if v is interpreter.tl or v is interpreter.tl.core
                )
        return found

    def locked_patch_lang(fn):
        if isinstance(fn, _Programs):  # the launch's own patch, undone when the launch ends
            launch, mine = fn.launch, langs(fn.fn)
        else:  # a helper's, never undone (Triton's way): once is enough for the rest of a launch
            launch, mine = getattr(_program, "launch", None), langs(fn)
        if launch is not None and mine and mine <= launch.patched_langs:
            return interpreter._LangPatchScope()  # nothing done, nothing to undo
        with _REWRITE_LOCK:
            scope = patch_lang(fn)
        if launch is not None:
            launch.patched_langs |= mine
        return scope

    def locked_rewrite(self):
        done = self.rewritten_fn.get(self.fn)
        if done is not None:
            return done
        with _REWRITE_LOCK:
            return rewrite(self)

    locked_patch_lang._unishmem_locked = True
    interpreter._patch_lang = locked_patch_lang
    interpreter.InterpretedFunction.rewrite = locked_rewrite


class LaunchAborted(UnishmemError):
    """A program stopped because another program of its launch failed (never reaches the user)."""


class _Launch:
    def __init__(self, resident: int, cooperative: bool = False, kernel_name: str = ""):
        self.resident = resident
        self.kernel_name = kernel_name  # for the hang report's call sites
        self.cooperative = cooperative
        self.n_programs = 0
        self.aborted = False
        self._native = None
        self._collective_caller = None  # the program that called a once-per-grid collective
        self._lock = threading.Lock()
        self.patched_langs = (
            frozenset()
        )  # ids of the triton.language modules patched for it (NOTE [concurrent interpreter])

    def programs(self, fn):
        """fn as GridExecutor calls it, once per program: the last call runs them all."""
        return _Programs(fn, self)

    def abort(self):
        self.aborted = True
        if self._native is not None:
            self._native.abort_programs()

    def run(self, fn, args, order):
        from . import _current

        native = self._native = _current._native if _current is not None and _current.backend == "host" else None
        self.n_programs = len(order)
        if self.cooperative and self.n_programs > self.resident:
            raise UnishmemError(
                f"a cooperative launch of {self.n_programs} programs needs them all resident, and "
                f"at most {self.resident} are here: raise @unishmem.jit(resident=...) or "
                "UNISHMEM_INTERPRET_RESIDENT (on a GPU the grid must fit the device at once too)"
            )
        slots = threading.Semaphore(self.resident)
        errors = []

        def program(idx):
            _program.grid_idx, _program.launch = idx, self
            if native is not None:
                native.program_begin(f"program {idx}")
            try:
                fn(**args)
            except BaseException as e:
                errors.append(e)
                self.abort()
            finally:
                if native is not None:
                    native.program_end()
                slots.release()

        threads = []
        if native is not None:
            native.begin_programs()
        try:
            for idx in order:
                slots.acquire()
                if self.aborted:
                    break
                if native is not None:
                    native.add_program()  # live before it starts: no moment looks like every program waiting
                thread = threading.Thread(target=program, args=(idx,), name=f"unishmem program {idx}", daemon=True)
                try:
                    thread.start()
                except BaseException:
                    if native is not None:
                        native.program_end()
                    raise
                threads.append(thread)
            for thread in threads:
                thread.join()
        except BaseException:  # Ctrl-C in the launching thread: stop the programs first
            self.abort()
            for thread in threads:
                thread.join()
            raise
        finally:
            if native is not None:
                native.end_programs()
        if errors:
            raise errors[0]  # the first failure; the others only stopped because of it


class _Programs:
    """Stands in for the kernel in GridExecutor, which reads its signature, annotations and globals."""

    def __init__(self, fn, launch: _Launch):
        self.fn, self.launch, self.seen = fn, launch, []
        self.__signature__ = inspect.signature(fn)
        self.__annotations__ = fn.__annotations__
        self.__globals__ = fn.__globals__
        self.__name__ = fn.__name__

    def __call__(self, **args):
        from triton.runtime.interpreter import interpreter_builder

        self.seen.append(interpreter_builder.grid_idx)
        if len(self.seen) == math.prod(interpreter_builder.grid_dim):
            self.launch.run(self.fn, args, sorted(self.seen, key=lambda idx: idx[::-1]))  # x fastest, as on a GPU


def current_program():
    """(launch, program id) on a program's thread of a concurrent launch, else (None, None)."""
    return getattr(_program, "launch", None), getattr(_program, "grid_idx", None)


def claim_collective(name: str) -> None:
    """Device barriers and collectives are issued by one program of a launch per PE (the vendors
    require it; a second program's call would pair with the next call of the peers)."""
    launch, idx = current_program()
    if launch is None:
        return
    with launch._lock:
        if launch._collective_caller is None:
            launch._collective_caller = idx
        first = launch._collective_caller
    if first != idx:
        raise UnishmemError(
            f"{name} called by program {idx} of a launch whose program {first} called a device collective: "
            "NVSHMEM and rocSHMEM allow barriers and collectives from one program of a launch per PE. Call them "
            "from one program (if tl.program_id(0) == 0: ...), or synchronise every program with barrier_all_grid"
        )


def stop_if_aborted():
    launch = getattr(_program, "launch", None)
    if launch is not None and launch.aborted:
        raise LaunchAborted(f"program {_program.grid_idx} stopped: another program of its launch failed")


def _innermost(e: BaseException) -> BaseException:
    """What an InterpreterError wraps, through every nested @triton.jit helper's layer."""
    from triton.runtime.interpreter import InterpreterError

    while isinstance(e, InterpreterError) and e.__cause__ is not None:
        e = e.__cause__
    return e


class Kernel:
    """A Triton kernel that uses unishmem.language. Launch it as kernel[grid](args...)."""

    def __init__(self, jit_function, resident: int | None = None, debug_waits: bool | None = None):
        self.jit_function = jit_function
        self.resident = resident
        self.debug_waits = debug_waits  # None: UNISHMEM_DEBUG_WAITS decides (NOTE [debug waits])
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
        if launch_recorder is not None:
            with launch_recorder(self, args, grid, dict(kwargs)) as launch:
                return self._launch(args, grid, kwargs) if launch else None
        return self._launch(args, grid, kwargs)

    def _launch(self, args, grid, kwargs):
        if interpreting():
            return self._run_interpreted(args, grid, kwargs)
        from . import hang, runtime
        from .language import _debug

        rt = runtime()
        libs = extern_libs(*_device_target(rt.backend, rt.device))
        if self.debug_waits or (self.debug_waits is None and _debug.env_enabled()):
            libs[_debug.LIB_KEY] = _debug.LIBRARY
            _debug.table(rt)
        kwargs["extern_libs"] = {**libs, **dict(kwargs.get("extern_libs") or {})}
        _add_hook()
        result = self.jit_function.run(*args, grid=grid, warmup=False, **kwargs)
        watchdog = hang.watchdog(rt)
        # NOTE [hang report]: an event after the launch says when it has finished; not while a CUDA
        # graph captures (the launch runs at each replay, which the watchdog does not see)
        if watchdog is not None and not _capturing_cuda_graph():
            import torch

            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(rt.device))
            watchdog.launched(self.fn.__name__, done.query)
        return result

    def _run_interpreted(self, args, grid, kwargs):
        from triton.runtime.interpreter import interpreter_builder

        if not isinstance(type(interpreter_builder).__dict__.get("grid_idx"), _ThreadGridIdx):
            type(interpreter_builder).grid_idx = _ThreadGridIdx()
        _serialise_rewrites()
        _triton_compat.patch_interpreter()
        from . import hang, runtime

        watchdog = hang.watchdog(runtime())
        token = watchdog.launched(self.fn.__name__, None) if watchdog is not None else None
        try:
            self._run_programs(args, grid, kwargs)
        finally:
            if token is not None:
                watchdog.finished(token)

    def _run_programs(self, args, grid, kwargs):
        from triton.runtime.interpreter import GridExecutor, InterpreterError

        from . import _config

        fn = self.jit_function
        launch = _Launch(
            self.resident if self.resident is not None else _config.get("UNISHMEM_INTERPRET_RESIDENT"),
            bool(kwargs.get("launch_cooperative_grid")),
            self.fn.__name__,
        )
        try:
            # InterpretedFunction.run, with the concurrent programs in place of the kernel
            GridExecutor(launch.programs(fn.rewrite()), fn.arg_names, grid, fn.pre_run_hooks)(*args, **kwargs)
        except InterpreterError as e:
            # Re-raise what a device function raised (PeerFailure, SymmetryError, bad arguments...)
            # as itself, not as the interpreter's wrapper.
            cause = _innermost(e)
            if isinstance(cause, (UnishmemError, ValueError, TypeError)):
                raise cause.with_traceback(cause.__traceback__) from None
            raise


def jit(fn=None, *, resident: int | None = None, debug_waits: bool | None = None, **kwargs):
    """triton.jit for kernels that call unishmem.language: links the vendor bitcode of the active
    runtime's device and initialises each loaded module. Under TRITON_INTERPRET=1 the programs of a
    launch run concurrently, at most `resident` at once (default UNISHMEM_INTERPRET_RESIDENT, else 64).
    debug_waits=True compiles every device wait to record itself for the hang report (NOTE [debug
    waits]); None leaves it to UNISHMEM_DEBUG_WAITS."""
    if resident is not None:
        from ._config import resident as check_resident

        resident = check_resident(resident, "resident")
    if fn is None:
        return functools.partial(jit, resident=resident, debug_waits=debug_waits, **kwargs)
    return Kernel(triton.jit(fn, **kwargs), resident, debug_waits)
