"""Triton's interpreter with the programs of a launch running concurrently, below the device library
(whose host side asks which program calls it) and the @unishmem.jit launcher (which runs launches here).

NOTE [concurrent interpreter]: under TRITON_INTERPRET=1 Triton's GridExecutor calls the kernel
once per program, one after another, and keeps the program id on its one builder. Here the
program id is per thread, and the function the executor calls only records each program; the
last call runs them all on threads, started in program-id order with at most `resident` alive at
once (as a GPU fills its SMs), so programs may wait on each other. The host backend counts them
(NOTE [programs] in csrc/host/host_backend.hpp) so that its deadlock check stays exact.

NOTE [import order]: triton.jit decides when it decorates a function whether it is interpreted, from
TRITON_INTERPRET at that moment, and triton.language's own helpers (tl.sum, tl.cdiv, ...) are
decorated when triton is imported. A program that imports triton before setting the variable
(importing torch._dynamo.utils is enough) has compiled-only JITFunctions, which raise "Cannot call
@triton.jit'd outside of the scope of a kernel" when an interpreted kernel calls them. So a launch
here interprets a JITFunction kernel as Triton would have (`_interpreted`), and on a program's thread
a JITFunction called by the kernel runs interpreted too (`_interpret_nested_jit_functions`); called
anywhere else it keeps Triton's error. With that, the host backend runs every @unishmem.jit kernel
under the interpreter whether or not TRITON_INTERPRET is set (triton_support.interpreting).

NOTE [schedule fuzzing]: threads started in program-id order, on a host whose cores are shared, run
a launch's programs in much the same order every time, so a bug that needs another order (a read
before the wait that should precede it, two programs racing for one buffer) can pass every run. With
UNISHMEM_RACE_SEED set, each program draws a wait of 0, 0.5 or 2 ms (or none) before each device call
from a generator seeded by (seed, PE, program id): programs and PEs then reach their device calls in
orders that differ from seed to seed. Every such order is one a GPU could take (a program may be
delayed anywhere), so correct code passes under every seed; unishmem.testing.under_seeds runs a test
under several. The order is not replayed exactly: the operating system still schedules the threads.

NOTE [interpreter numerics]: the interpreter computes two things differently from a GPU, and is made
to compute them as a GPU does: it converts float32 to bfloat16 by truncation (Triton 3.6 to 3.9, its
"rtne" too: it rounds half up and drops the carry), where a GPU rounds to nearest even (cvt.rn.bf16.f32,
Triton's default for a downcast); and tl.dot multiplies bfloat16 tiles as the integers that hold their
bits (numpy has no bfloat16), where a GPU multiplies their values (exactly in float32) and accumulates
in float32.
"""

from __future__ import annotations

import functools
import inspect
import math
import random
import threading
import time

import numpy as np

from . import _active, _config, _races, _triton_compat
from .errors import UnishmemError

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
        launch: _Launch | None
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

    locked_patch_lang._unishmem_locked = True  # type: ignore[attr-defined]  # a marker: installed once
    interpreter._patch_lang = locked_patch_lang
    interpreter.InterpretedFunction.rewrite = locked_rewrite


def _interpret_nested_jit_functions() -> None:
    """NOTE [import order]: a JITFunction called on a program's thread runs interpreted."""
    from triton.runtime.jit import JITFunction

    compiled_call = JITFunction.__call__
    if getattr(compiled_call, "_unishmem_interprets", False):
        return

    def call(self, *args, **kwargs):
        if getattr(_program, "launch", None) is None:  # not inside a kernel: Triton's own error
            return compiled_call(self, *args, **kwargs)
        return _interpreted(self.fn)(*args, **kwargs)

    call._unishmem_interprets = True  # type: ignore[attr-defined]  # a marker: installed once
    JITFunction.__call__ = call


@functools.cache
def _interpreted(fn):
    """The InterpretedFunction of a Python function that triton.jit made compiled-only (NOTE [import order])."""
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(fn)


def _round_like_a_gpu() -> None:
    """NOTE [interpreter numerics]: float32 to bfloat16 rounds to nearest even; tl.dot widens bfloat16
    tiles to float32 (exact) before it multiplies."""
    from triton.runtime import interpreter

    convert = interpreter._convert_float
    if getattr(convert, "_unishmem_rounds", False):
        return
    tl = interpreter.tl
    truncate = interpreter._ir.ROUNDING_MODE.RTZ

    def convert_float(input, input_dtype, output_dtype, rounding_mode):
        if input_dtype == tl.float32 and output_dtype == tl.bfloat16 and rounding_mode != truncate:
            return _float32_to_bfloat16_bits(input)
        return convert(input, input_dtype, output_dtype, rounding_mode)

    convert_float._unishmem_rounds = True  # type: ignore[attr-defined]  # a marker: installed once
    interpreter._convert_float = convert_float

    builder = interpreter.InterpreterBuilder
    dot = builder.create_dot

    def widened(x):
        if x.dtype.scalar != tl.bfloat16:
            return x
        bits = np.ascontiguousarray(x.data).view(np.uint16).astype(np.uint32) << 16
        return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

    def create_dot(self, a, b, d, *args, **kwargs):
        return dot(self, widened(a), widened(b), d, *args, **kwargs)

    builder.create_dot = create_dot


def _float32_to_bfloat16_bits(values) -> np.ndarray:
    """The bfloat16 bits nearest each float32 value, ties to even (NaN stays NaN, quiet)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return np.where(np.isnan(values), (bits >> 16) | 0x40, rounded).astype(np.uint16)


class LaunchAborted(UnishmemError):
    """A program stopped because another program of its launch failed (never reaches the user)."""


class _Launch:
    def __init__(self, resident: int, cooperative: bool = False, kernel_name: str = ""):
        self.resident = resident
        self.kernel_name = kernel_name  # for the hang report's call sites
        self.cooperative = cooperative
        self.n_programs = 0
        self.aborted = False
        self.native = None
        self._collective_caller = None  # the program that called a once-per-grid collective
        self._lock = threading.Lock()
        # ids of the triton.language modules patched for it (NOTE [concurrent interpreter])
        self.patched_langs: frozenset[int] = frozenset()
        self.seed = _config.get("UNISHMEM_RACE_SEED")  # NOTE [schedule fuzzing]

    def programs(self, fn):
        """fn as GridExecutor calls it, once per program: the last call runs them all."""
        return _Programs(fn, self)

    def abort(self):
        self.aborted = True
        if self.native is not None:
            self.native.abort_programs()

    def run(self, fn, args, order):
        core = _active.current_core()
        native = self.native = core.native if core is not None and core.backend == "host" else None
        self.n_programs = len(order)
        if self.cooperative and self.n_programs > self.resident:
            raise UnishmemError(
                f"a cooperative launch of {self.n_programs} programs needs them all resident, and "
                f"at most {self.resident} are here: raise @unishmem.jit(resident=...) or "
                "UNISHMEM_INTERPRET_RESIDENT (on a GPU the grid must fit the device at once too)"
            )
        slots = threading.Semaphore(self.resident)
        errors = []

        pe = core.my_pe if core is not None else 0
        races = _races.checker()  # NOTE [race check]: the programs start from the host's clock
        forked = races.launch_begin() if races is not None else None
        ended = []  # the programs' clocks, which the host joins when the launch ends

        def program(idx, ordinal):
            _program.grid_idx, _program.launch = idx, self
            _program.fuzz = None if self.seed is None else random.Random(f"{self.seed}/{pe}/{idx}")
            if native is not None:
                native.program_begin(f"program {idx}")
            try:
                if races is not None:
                    assert forked is not None  # the launch's clock, taken with races
                    races.program_begin(
                        forked, ordinal, f"program {idx[0] if idx[1:] == (0, 0) else idx}", self.kernel_name
                    )
                fn(**args)
            except BaseException as e:
                errors.append(e)
                self.abort()
            finally:
                if races is not None:
                    ended.append(races.program_end())
                if native is not None:
                    native.program_end()
                slots.release()

        threads = []
        if native is not None:
            native.begin_programs()
        try:
            for ordinal, idx in enumerate(order):
                slots.acquire()
                if self.aborted:
                    break
                if native is not None:
                    native.add_program()  # live before it starts: no moment looks like every program waiting
                thread = threading.Thread(
                    target=program, args=(idx, ordinal), name=f"unishmem program {idx}", daemon=True
                )
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
            if races is not None:
                races.launch_end(ended)
        if errors:
            raise errors[0]  # the first failure; the others only stopped because of it


class _Programs:
    """Stands in for the kernel in GridExecutor, which reads its signature, annotations and globals."""

    def __init__(self, fn, launch: _Launch):
        self.fn, self.launch = fn, launch
        self.seen: list[tuple[int, int, int]] = []  # the grid indices GridExecutor has called
        self.__signature__ = inspect.signature(fn)
        self.__annotations__ = fn.__annotations__
        self.__globals__ = fn.__globals__
        self.__name__ = fn.__name__

    def __call__(self, **args):
        from triton.runtime.interpreter import interpreter_builder

        self.seen.append(interpreter_builder.grid_idx)
        if len(self.seen) == math.prod(interpreter_builder.grid_dim):
            self.launch.run(self.fn, args, sorted(self.seen, key=lambda idx: idx[::-1]))  # x fastest, as on a GPU


SCHEDULE_WAITS = (0.0, 0.0, 0.0005, 0.002)  # seconds a program may wait before a device call (NOTE [schedule fuzzing])


def schedule_point() -> None:
    """Before a device call on a program's thread: under UNISHMEM_RACE_SEED, wait a while drawn from the
    program's seeded generator (NOTE [schedule fuzzing])."""
    fuzz = getattr(_program, "fuzz", None)
    if fuzz is not None:
        time.sleep(fuzz.choice(SCHEDULE_WAITS))


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


def run(jit_function, args, grid, kwargs, resident: int, kernel_name: str) -> None:
    """Triton's InterpretedFunction.run, with the programs of the launch run concurrently, at most
    `resident` at once (NOTE [concurrent interpreter])."""
    from triton.runtime.interpreter import GridExecutor, InterpreterError, interpreter_builder

    if not isinstance(type(interpreter_builder).__dict__.get("grid_idx"), _ThreadGridIdx):
        type(interpreter_builder).grid_idx = _ThreadGridIdx()
    _serialise_rewrites()
    _triton_compat.patch_interpreter()
    _interpret_nested_jit_functions()
    _round_like_a_gpu()
    fn = jit_function if hasattr(jit_function, "rewrite") else _interpreted(jit_function.fn)  # NOTE [import order]
    launch = _Launch(resident, bool(kwargs.get("launch_cooperative_grid")), kernel_name)
    try:
        GridExecutor(launch.programs(fn.rewrite()), fn.arg_names, grid, jit_function.pre_run_hooks)(*args, **kwargs)
    except InterpreterError as e:
        # Re-raise what a device function raised (PeerFailure, SymmetryError, bad arguments...)
        # as itself, not as the interpreter's wrapper.
        cause = _innermost(e)
        if isinstance(cause, (UnishmemError, ValueError, TypeError)):
            raise cause.with_traceback(cause.__traceback__) from None
        raise
