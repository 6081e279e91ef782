"""The torch dtypes each operation takes and their codes for the C++ backends (csrc/backend.hpp, enum class
DType); see NOTE [enum values] in enums.py."""

import torch

from .enums import DTYPES
from .enums import WAIT_DTYPES as _WAIT_NAMES

# torch dtype -> backend DType code (csrc/backend.hpp, enum class DType)
DTYPE_CODES = {getattr(torch, name): code for name, code in DTYPES.items()}
REDUCE_DTYPES = (
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
)
ATOMIC_DTYPES = WAIT_DTYPES = tuple(getattr(torch, name) for name in _WAIT_NAMES)
