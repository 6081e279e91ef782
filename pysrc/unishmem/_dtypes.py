"""The torch dtypes each operation takes and their codes for the C++ backends (csrc/backend.hpp, enum class
DType); see NOTE [enum values] in enums.py."""

import torch

# torch dtype -> backend DType code (csrc/backend.hpp, enum class DType)
DTYPE_CODES = {
    torch.float16: 0,
    torch.bfloat16: 1,
    torch.float32: 2,
    torch.float64: 3,
    torch.int8: 4,
    torch.int16: 5,
    torch.int32: 6,
    torch.int64: 7,
    torch.uint8: 8,
    torch.uint16: 9,
    torch.uint32: 10,
    torch.uint64: 11,
}
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
ATOMIC_DTYPES = (torch.int32, torch.int64, torch.uint32, torch.uint64)
WAIT_DTYPES = ATOMIC_DTYPES
