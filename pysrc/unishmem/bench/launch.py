"""`unishmem bench --launch`: the host work of a warm kernel call, beside a plain Triton kernel's.

Measured on this machine's CPU, in one process (a 1-PE host-backend runtime), with no kernel run:
- unishmem: a warm call of every kernel of the kernel table (NOTE [kernel table] in
  unishmem/kernels/_table.py) at 8 KiB, up to the point where it hands its last launch to Triton; the
  launches are skipped (unishmem.triton_support's launch hook), and arguments are compared across PEs once
  per shape, as on a GPU backend. The collectives are given x and out, as a serving loop passes them;
  dispatch is given max_tokens (its form without a host sync) and combine that dispatch's rows and handle;
- Triton's own preparation of that launch for sm_90: binding the arguments and computing the key of its
  kernel cache, as JITFunction.run does before the driver call (_triton_compat.launch_cache_key);
- the vendor libraries' lookup a compiled launch adds (triton_support.extern_libs), where NVSHMEM's
  bitcode is installed;
- the reference: a plain @triton.jit kernel taking the same tensors, prepared the same way;
- the direct path (NOTE [direct launch] in unishmem/triton_support.py): the whole warm call as a GPU
  backend takes it once its variant has compiled, with what needs a GPU stood in: Triton's driver (the
  current device and stream: two calls, answered at once) and the compiled kernel (its launch
  metadata made as Triton makes it; its launcher, which parses the arguments and calls the driver, does
  nothing). A kernel whose warm call still takes Triton's whole path has no direct figure. Its
  reference: that plain kernel launched the same way from a compiled kernel kept by the caller.
The driver's launch (a few microseconds on a GPU) is in no figure. Each figure is the mean over
every timed call, and the best run's mean beside it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Callable

import torch
import triton
import triton.language as tl

CALLS = 2000
RUNS = 5
BYTES = 8 * 1024


@triton.jit
def _plain_copy(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


def _timed_together(groups: list, calls: int, runs: int) -> dict:
    """name -> figure of every op of groups, [(context, {name: op})]: each run times every op in turn,
    a group inside its context, so that a drift of the machine's speed (on the dev VM up to 1.7x over
    minutes) falls on every figure of a run alike, the references' included."""
    per_run: dict = {}
    for _ in range(runs):
        for context, ops in groups:
            with context():
                for name, op in ops.items():
                    op()
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        op()
                    per_run.setdefault(name, []).append((time.perf_counter() - t0) / calls)
    return {name: {"mean": sum(times) / runs, "best": min(times)} for name, times in per_run.items()}


@contextlib.contextmanager
def _launches_skipped(recorded: list):
    from .. import _workspaces, triton_support

    @contextlib.contextmanager
    def skip(kernel, args, grid, kwargs):
        recorded[:] = [(kernel, args, kwargs)]
        yield False

    triton_support.launch_recorder = skip
    try:
        with _workspaces.capturing(graph=False):  # the first call makes its workspace
            yield
    finally:
        triton_support.launch_recorder = None


def _calls() -> dict:
    """kernel name -> a warm call of it on 8 KiB of float32 (the first call, made here where it is needed,
    allocates its workspace)."""
    import unishmem.kernels as K

    x, out = torch.ones(BYTES // 4), torch.empty(BYTES // 4)
    a, b = torch.ones(32, 64), torch.ones(64, 64)  # A's rows: 8 KiB
    T, H, k, experts = BYTES // 4 // (2 * 128), 128, 2, 2  # the token copies: 8 KiB
    tokens, weights = torch.ones(T, H), torch.ones(T, k)
    ids = torch.arange(T * k).reshape(T, k) % experts
    rows, _, handle = K.dispatch(tokens, ids, weights, experts, max_tokens=T)
    return {
        "all_gather": lambda: K.all_gather(x, out=out),
        "all_to_all": lambda: K.all_to_all(x, out=out),
        "reduce_scatter": lambda: K.reduce_scatter(x, out=out),
        "all_reduce": lambda: K.all_reduce(x, out=out),
        "ag_gemm": lambda: K.ag_gemm(a, b),
        "gemm_rs": lambda: K.gemm_rs(a, b),
        "dispatch": lambda: K.dispatch(tokens, ids, weights, experts, max_tokens=T),
        "combine": lambda: K.combine(rows, handle),
    }


class _Driver:
    """Triton's active driver on a GPU, as far as a launch asks it."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device):
        return 0


class _Compiled:
    """A compiled kernel whose launcher does nothing (the driver's part is in no figure)."""

    function, packed_metadata = 0, ()

    def __init__(self, name: str):
        self.name = name

    def launch_metadata(self, grid, stream, *args):  # as CompiledKernel makes it
        from triton.compiler.compiler import LazyDict

        return LazyDict({"name": self.name, "function": self.function, "stream": stream})

    def run(self, *launch):
        pass


@contextlib.contextmanager
def _gpu_stood_in(whole: list):
    """Kernels launch as on a GPU backend, their first call of a variant (Triton's whole path: compile
    and launch) appended to `whole` and answered with a _Compiled."""
    from unittest import mock

    from .. import _workspaces, triton_support

    def whole_path(kernel, *args, grid, **kwargs):
        whole.append(kernel.fn.__name__)
        return _Compiled(kernel.fn.__name__)

    with (
        mock.patch.object(triton_support, "interpreting", lambda: False),
        mock.patch.object(triton.runtime.driver, "_active", _Driver()),
        mock.patch.object(triton_support.Kernel, "run", whole_path),
        _workspaces.capturing(graph=False),  # arguments compared across PEs once per shape
    ):
        yield


def _takes_direct_path(call, whole: list) -> bool:
    """Whether call()'s warm call launches directly (in _gpu_stood_in(whole))."""
    call()
    call()  # the first call of each variant has compiled
    whole.clear()
    call()
    return not whole


def _plain_direct(x, out):
    """The plain kernel launched from a compiled kernel its caller keeps: the stream asked of the
    driver, the launch metadata made for a launch hook (none here) and the launcher called, as the
    direct path does."""
    from ..triton_support import hooked

    driver, compiled = _Driver(), _Compiled("_plain_copy")
    knobs = triton.knobs.runtime

    def launch():
        stream = driver.get_current_stream(driver.get_current_device())
        args = (x.data_ptr(), out.data_ptr(), x.numel(), 1024)
        enter, leave = knobs.launch_enter_hook, knobs.launch_exit_hook
        metadata = compiled.launch_metadata((8,), stream, *args) if hooked(enter, leave) else None
        compiled.run(8, 1, 1, stream, compiled.function, compiled.packed_metadata, metadata, enter, leave, *args)

    return launch


def measure(calls: int = CALLS, runs: int = RUNS) -> dict:
    from triton.backends.compiler import GPUTarget

    import unishmem

    from .. import BackendUnavailable, _triton_compat
    from ..compile import TARGETS
    from ..kernels._table import KERNELS
    from ..triton_support import extern_libs

    target = GPUTarget(*TARGETS["sm_90"])
    libs: Callable[[], dict[str, str]] | None
    libs = functools.partial(extern_libs, "cuda", 90)
    try:
        libs()
    except BackendUnavailable:
        libs = None
    with unishmem.init(backend="host", heap_size="64M"):
        x, out = torch.ones(BYTES // 4), torch.empty(BYTES // 4)
        plain = functools.partial(
            _triton_compat.launch_cache_key, _plain_copy, target, (x, out, x.numel()), {"BLOCK": 1024}
        )
        whole_path: dict[str | tuple[str, str], Callable[[], object]] = {
            "plain": plain,
            **({"libs": libs} if libs else {}),
        }
        recorded: list = []
        with _launches_skipped(recorded):
            calls_of = _calls()
            for kernel in KERNELS:
                call = calls_of[kernel.name]
                call()
                jit, args, kwargs = recorded[0]
                whole_path[kernel.name] = call
                whole_path[kernel.name, "triton"] = functools.partial(
                    _triton_compat.launch_cache_key, jit.jit_function, target, args, kwargs
                )
        whole: list = []
        with _gpu_stood_in(whole):
            direct = {"plain": _plain_direct(x, out)}
            direct.update((k.name, calls_of[k.name]) for k in KERNELS if _takes_direct_path(calls_of[k.name], whole))
        groups = [
            (functools.partial(_launches_skipped, []), whole_path),
            (functools.partial(_gpu_stood_in, whole), {(name, "direct"): op for name, op in direct.items()}),
        ]
        figures = _timed_together(groups, calls, runs)
    rows = [
        {
            "kernel": k.name,
            "bytes": BYTES,
            "host": figures[k.name],
            "triton": figures[k.name, "triton"],
            "direct": figures.get((k.name, "direct")),
        }
        for k in KERNELS
    ]
    return {
        "calls": calls,
        "runs": runs,
        "plain_triton": figures["plain"],
        "plain_direct": figures["plain", "direct"],
        "extern_libs": figures.get("libs"),
        "rows": rows,
    }


def text(report: dict) -> str:
    us = lambda f: f"{f['mean'] * 1e6:7.1f} ({f['best'] * 1e6:5.1f})"  # noqa: E731
    plain, libs = report["plain_triton"], report["extern_libs"]
    extra = libs["mean"] if libs else 0.0
    lines = [
        "host work per warm call, microseconds: mean over every call (best run's mean); measured on this CPU,",
        "no kernel run, the driver's launch in no figure; the direct path with Triton's driver and the",
        "compiled kernel stood in (NOTE [direct launch]); ratios to the plain kernel's Triton prep",
        f"{'kernel':15s} {'unishmem':>15s} {'+ Triton prep':>15s} {'+ vendor libs':>14s} {'total':>8s} "
        f"{'vs plain':>9s} {'direct path':>15s} {'vs plain':>9s}",
    ]
    for r in report["rows"]:
        total = r["host"]["mean"] + r["triton"]["mean"] + extra
        direct = r["direct"]
        lines.append(
            f"{r['kernel']:15s} {us(r['host']):>15s} {us(r['triton']):>15s} "
            f"{(us(libs) if libs else 'n/a'):>14s} {total * 1e6:8.1f} {total / plain['mean']:8.1f}x "
            + (f"{us(direct):>15s} {direct['mean'] / plain['mean']:8.1f}x" if direct else f"{'whole path':>15s}")
        )
    lines.append(f"plain @triton.jit kernel, Triton prep only: {us(plain)}")
    lines.append(f"plain kernel launched from its compiled kernel: {us(report['plain_direct'])}")
    if libs is None:
        lines.append(
            "vendor libs: NVSHMEM's bitcode is not installed here, so a compiled launch's lookup is not measured"
        )
    return "\n".join(lines)


def run(json_path: str | None, quick: bool = False) -> int:
    report = measure(calls=200, runs=2) if quick else measure()
    print(text(report))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
        print(f"\nunishmem bench: wrote {json_path}")
    return 0
