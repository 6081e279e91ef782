"""Public enums and the internal codes shared with the C++ backends.

NOTE [enum values]: the numbers here are this package's own and match csrc/backend.hpp;
each backend maps them to its vendor's numbering.
"""

import enum

import torch


class SIGNAL(enum.IntEnum):
    SET = 0
    ADD = 1


class CMP(enum.IntEnum):
    EQ = 0
    NE = 1
    GT = 2
    GE = 3
    LT = 4
    LE = 5


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

REDUCE_OPS = {"sum": 0, "min": 1, "max": 2, "prod": 3}

# name -> (backend AtomicOp code, fetches a value)
ATOMIC_OPS = {
    "fetch": 0,
    "set": 1,
    "swap": 2,
    "compare_swap": 3,
    "fetch_add": 4,
    "add": 5,
    "fetch_inc": 6,
    "inc": 7,
    "fetch_and": 8,
    "and": 9,
    "fetch_or": 10,
    "or": 11,
    "fetch_xor": 12,
    "xor": 13,
}
