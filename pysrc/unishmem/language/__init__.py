"""unishmem.language: the Triton device library. Kernels call NVSHMEM (CUDA targets) or rocSHMEM
(HIP targets) device functions as extern calls, and the host backend's primitives under
TRITON_INTERPRET=1. Every function is generated from one table (_table.py); the vendor
differences live in _vendor.py. Where a vendor has no device function for a row, the row is
written in Triton here (_triton_impl.py: team queries and collectives on rocSHMEM).
Launch kernels that use it with @unishmem.jit.

    @unishmem.jit
    def ring_put(buf, sig, N: tl.constexpr):
        peer = (shl.my_pe() + 1) % shl.n_pes()
        shl.putmem_signal_block(buf, buf, N * 4, sig, 1, shl.SIGNAL_SET, peer)
        shl.signal_wait_until(sig, shl.CMP_EQ, 1)
"""

# isort: off
from .. import _triton_compat  # noqa: F401 - first: Triton is there, and of a release unishmem supports
import triton.language as tl

# isort: on

from ..enums import CMP as _CMP
from ..enums import SIGNAL as _SIGNAL
from . import _externs, _triton_impl
from ._build import atomic_function, consume_token, device_function  # noqa: F401 (in FUNCTIONS)
from ._table import ATOMICS, ROWS

SIGNAL_SET = tl.constexpr(int(_SIGNAL.SET))
SIGNAL_ADD = tl.constexpr(int(_SIGNAL.ADD))
CMP_EQ = tl.constexpr(int(_CMP.EQ))
CMP_NE = tl.constexpr(int(_CMP.NE))
CMP_GT = tl.constexpr(int(_CMP.GT))
CMP_GE = tl.constexpr(int(_CMP.GE))
CMP_LT = tl.constexpr(int(_CMP.LT))
CMP_LE = tl.constexpr(int(_CMP.LE))

FUNCTIONS = [row.name for row in ROWS] + list(ATOMICS) + ["consume_token"]
# one object per function: the vendors' own from _externs, the others over them and _triton_impl
globals().update({row.name: getattr(_externs, row.name, None) or device_function(row, _triton_impl) for row in ROWS})
globals().update({name: atomic_function(name) for name in ATOMICS})

__all__ = FUNCTIONS + ["SIGNAL_SET", "SIGNAL_ADD", "CMP_EQ", "CMP_NE", "CMP_GT", "CMP_GE", "CMP_LT", "CMP_LE"]
