"""Helpers for testing code that calls unishmem.kernels, on the host backend as on a GPU.

`capture()` records what a call does, its torch operations and its kernel launches, the way a CUDA
graph captures them; `Capture.replay()` runs them again with the very same arguments, as a graph
replays. A call whose result is right after the inputs were changed in place and the capture replayed
keeps no per-call state on the host (NOTE [call counter] in unishmem/kernels/_calls.py):

    out = K.all_reduce(x)                 # warm: workspaces are made outside the capture
    with unishmem.testing.capture() as graph:
        out = K.all_reduce(x)
    x.copy_(new)
    graph.replay()                        # out is now the sum of every PE's new x

Unlike a CUDA graph, the capture also runs the call once (every PE records the same call, so the
PEs stay in step). Inside it, calls compare their arguments across PEs only on a shape's first call,
as on a GPU backend: the host backend's check of every call is a host collective, which no graph holds. What a capture cannot hold fails in it with `CaptureError`: an operation that
reads a device value on the host (`.item()`, `nonzero`, ...) or whose result's shape depends on data,
and a kernel call that would allocate its workspace (symmetric memory: a collective), which a dry capture allows.
"""

from __future__ import annotations

import contextlib
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten

from . import _config
from .errors import CaptureError as CaptureError

# operations that need device values on the host: a host synchronisation, not capturable
HOST_SYNCS = frozenset(
    {
        "_local_scalar_dense",
        "item",
        "is_nonzero",
        "equal",
        "nonzero",
        "masked_select",
        "unique",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "bincount",
        "repeat_interleave",
    }
)
# factory operations whose result is only memory: replaying them would change nothing a kernel reads
MEMORY_ONLY = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})


class Capture:
    """What one `capture()` recorded: steps to run again, in order."""

    def __init__(self):
        self.steps: list = []
        self.ops: list[str] = []  # the torch operations among the steps (aten names), in order
        self.launches: list[tuple] = []  # (kernel, args, grid, kwargs) of each kernel launch, in order

    def replay(self, times: int = 1) -> None:
        for _ in range(times):
            for step in self.steps:
                step()

    def compiled_variants(self, target: str = "sm_90") -> dict[str, int]:
        """Per kernel, how many binaries Triton would compile for the recorded launches on `target`
        (a name of unishmem.compile.TARGETS): one per distinct key of Triton's kernel cache."""
        from triton.backends.compiler import GPUTarget

        from . import _triton_compat
        from .compile import TARGETS

        gpu = GPUTarget(*TARGETS[target])
        keys: dict[str, set] = {}
        for kernel, args, _, kwargs in self.launches:
            key = _triton_compat.launch_cache_key(kernel.jit_function, gpu, args, kwargs)
            keys.setdefault(kernel.fn.__name__, set()).add(key)
        return {name: len(found) for name, found in keys.items()}


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: Capture):
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in HOST_SYNCS:
            raise CaptureError(
                f"unishmem.testing.capture: aten.{name} reads device values on the host (a host "
                "synchronisation), which a CUDA graph cannot capture"
            )
        result = func(*args, **kwargs)
        step = None if name in MEMORY_ONLY else _replayed(func, args, kwargs, result)
        if step is not None:
            self.graph.steps.append(step)
            self.graph.ops.append(name)
        return result


def _replayed(func, args, kwargs, result):
    """The step that runs `func` again: in place where it writes its inputs, into the tensors it
    returned where it made new ones; None where it only made a view (the view already sees the memory)."""
    if any(r.alias_info is not None for r in func._schema.returns):
        return (lambda: func(*args, **kwargs)) if func._schema.is_mutable else None
    outputs = [t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)]

    def step():
        for recorded, fresh in zip(
            outputs, [t for t in tree_flatten(func(*args, **kwargs))[0] if isinstance(t, torch.Tensor)]
        ):
            recorded.copy_(fresh)

    return step


@contextlib.contextmanager
def capture(dry: bool = False):
    """Record the torch operations and unishmem kernel launches of the enclosed calls (see the module).
    dry=True records the launches without running them (nor the compile a first launch makes): for
    counting launches and compiled variants, or timing the host work of a call, where no data must move;
    it stands for no CUDA graph, so a call may make its workspace in it."""
    from . import _workspaces, triton_support

    if triton_support.launch_recorder is not None:
        raise CaptureError("unishmem.testing.capture: a capture is already recording")
    graph = Capture()

    @contextlib.contextmanager
    def record_launch(kernel, args, grid, kwargs):
        graph.steps.append(lambda: kernel.run(*args, grid=grid, **dict(kwargs)))
        graph.launches.append((kernel, args, grid, kwargs))
        with _disable_current_modes():  # the launch is one step: not the torch work inside it
            yield not dry

    triton_support.launch_recorder = record_launch
    try:
        with _workspaces.capturing(graph=not dry), _Recorder(graph):
            yield graph
    finally:
        triton_support.launch_recorder = None


def under_seeds(fn, seeds=range(1, 5)) -> list:
    """fn() once under each UNISHMEM_RACE_SEED of `seeds` (NOTE [schedule fuzzing] in
    unishmem/_interpreter.py: the interpreter's programs and PEs reach their device calls in another
    order under each), its results in a list. Every PE of the job calls it with the same seeds. An
    exception is raised again with a note naming the seed it came under."""
    results = []
    for seed in seeds:
        with _config.setting("UNISHMEM_RACE_SEED", str(seed)):
            try:
                results.append(fn())
            except Exception as e:
                note = f"under UNISHMEM_RACE_SEED={seed} (unishmem.testing.under_seeds)"
                if sys.version_info >= (3, 11):
                    e.add_note(note)
                else:  # add_note is 3.11's: PEP 678's notes by hand (typeshed has no __notes__ before 3.11)
                    e.__notes__ = [*getattr(e, "__notes__", ()), note]  # type: ignore[attr-defined]
                raise
    return results
