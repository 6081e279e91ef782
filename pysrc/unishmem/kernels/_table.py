"""The kernel table: one row per kernel of unishmem.kernels, and every list of the kernels derived from it.

NOTE [kernel table]: a row names the kernel (`unishmem.kernels.<name>`, its custom op
`torch.ops.unishmem.<name>` and its section `### <name>` under "The kernels" in docs/kernels.md), its
public function, and the timings that run it; its op's four functions are _ops.py's, by the kernel's name
(Op.of). From the rows:
- the package's exports (`unishmem.kernels.__all__` and its names) and the op registrations (__init__.py);
- `unishmem compile unishmem.kernels`: the package's COMPILE, the union of the COMPILE tables of the
  modules the rows' functions live in (NOTE [COMPILE table] in unishmem/compile.py);
- TIMINGS: what `unishmem bench --kernels` and scripts/gpu_kernel_times.py time, in this order (a timing
  may run several kernels, and a kernel have several timings, one per variant);
- `unishmem bench --launch`: a warm call of every row.
tests/test_kernels_table.py compares every one of them, the docs' index and the kernel-module lists of
the scripts with the rows, and fails on a kernel found in a kernel module but missing here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from . import _ops, collectives, gemm, moe


@dataclass(frozen=True)
class Op:
    """A kernel's torch.library custom op: `run` is its body (its annotations are the op's schema), `fake`
    its output for torch.compile, `backward` and `context` its autograd formula: _ops.py's functions
    <name>, <name>_fake, <name>_backward and <name>_context."""

    run: Callable
    fake: Callable
    backward: Callable
    context: Callable

    @staticmethod
    def of(name: str) -> Op:
        return Op(*(getattr(_ops, name + suffix) for suffix in ("", "_fake", "_backward", "_context")))


@dataclass(frozen=True)
class Kernel:
    name: str
    function: Callable  # unishmem.kernels.<name>
    timings: tuple[str, ...]  # the timings that run it (TIMINGS)

    @property
    def op(self) -> Op:  # torch.ops.unishmem.<name>
        return Op.of(self.name)


KERNELS = (
    Kernel("all_gather", collectives.all_gather, ("all_gather",)),
    Kernel("all_to_all", collectives.all_to_all, ("all_to_all",)),
    Kernel("reduce_scatter", collectives.reduce_scatter, ("reduce_scatter",)),
    Kernel("all_reduce", collectives.all_reduce, ("all_reduce.one_shot", "all_reduce.two_shot")),
    Kernel("ag_gemm", gemm.ag_gemm, ("ag_gemm",)),
    Kernel("gemm_rs", gemm.gemm_rs, ("gemm_rs",)),
    # the ops of dispatch and combine are their capacity forms (max_tokens=); one timing runs both
    Kernel("dispatch", moe.dispatch, ("dispatch+combine",)),
    Kernel("combine", moe.combine, ("dispatch+combine",)),
)

NAMES = tuple(k.name for k in KERNELS)
TIMINGS = tuple(dict.fromkeys(t for k in KERNELS for t in k.timings))


def modules() -> list:
    """The modules the kernels live in, in the table's order."""
    return [sys.modules[name] for name in dict.fromkeys(k.function.__module__ for k in KERNELS)]


def compile_table() -> dict:
    """How `unishmem compile unishmem.kernels` compiles every kernel of the table: the kernel modules'
    COMPILE tables together (their keys are the @unishmem.jit kernels themselves)."""
    return {kernel: spec for module in modules() for kernel, spec in module.COMPILE.items()}
