"""unishmem.kernels: distributed kernels written once in unishmem.language, called on torch
tensors on the runtime's device. Each call is collective over its team (default: the world).

The kernels, their custom ops (torch.ops.unishmem.*, which the kernels call under torch.compile) and
what `unishmem compile unishmem.kernels` compiles come from the kernel table (NOTE [kernel table] in
_table.py)."""

from typing import TYPE_CHECKING

from .. import _triton_compat  # noqa: F401 - first: Triton is there, and of a release unishmem supports
from ._ops import register
from ._table import KERNELS, compile_table

# What the loop below exports, named for type checkers, which cannot follow it (re-exports: `x as x`);
# tests/test_kernels_table.py holds the two equal.
if TYPE_CHECKING:
    from .collectives import all_gather as all_gather
    from .collectives import all_reduce as all_reduce
    from .collectives import all_to_all as all_to_all
    from .collectives import reduce_scatter as reduce_scatter
    from .gemm import ag_gemm as ag_gemm
    from .gemm import gemm_rs as gemm_rs
    from .moe import combine as combine
    from .moe import dispatch as dispatch

for _kernel in KERNELS:
    globals()[_kernel.name] = _kernel.function
    register(_kernel.name, _kernel.op)
del _kernel

__all__ = [k.name for k in KERNELS]
COMPILE = compile_table()  # NOTE [COMPILE table] in unishmem/compile.py
