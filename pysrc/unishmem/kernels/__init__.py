"""unishmem.kernels: distributed kernels written once in unishmem.language, called on torch
tensors on the runtime's device. Each call is collective over its team (default: the world).

The kernels, their custom ops (torch.ops.unishmem.*, which the kernels call under torch.compile) and
what `unishmem compile unishmem.kernels` compiles come from the kernel table (NOTE [kernel table] in
_table.py)."""

from .. import _triton_compat  # noqa: F401 - first: Triton is there, and of a release unishmem supports
from ._ops import register
from ._table import KERNELS, compile_table

for _kernel in KERNELS:
    globals()[_kernel.name] = _kernel.function
    register(_kernel.name, _kernel.op)
del _kernel

__all__ = [k.name for k in KERNELS]
COMPILE = compile_table()  # NOTE [COMPILE table] in unishmem/compile.py
