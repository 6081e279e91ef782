"""Public enums and every numbering the package shares with its C++ backends, its debug wait table
and its Triton device library: each is defined here once and the others derive from it.
No torch here: the launcher and the CLI import the package without it.

NOTE [enum values]: the numbers here are this package's own and match csrc/backend.hpp (and the host
backend's WaitKind in csrc/host/host_backend.hpp); the extension exports the C++ values
(`enum_values`) and tests/test_registry.py compares every copy with these. Each backend maps them to
its vendor's numbering.
"""

import enum


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


# dtype name (torch's and triton.language's) -> backend DType code; unishmem._dtypes keys it by torch dtype
DTYPES = {
    "float16": 0,
    "bfloat16": 1,
    "float32": 2,
    "float64": 3,
    "int8": 4,
    "int16": 5,
    "int32": 6,
    "int64": 7,
    "uint8": 8,
    "uint16": 9,
    "uint32": 10,
    "uint64": 11,
}
WAIT_DTYPES = ("int32", "int64", "uint32", "uint64")  # what waits, signals and atomics take


class WAIT(enum.IntEnum):
    """What a wait is for: the host backend's WaitKind, and the debug wait table's slot state."""

    TURN = 0
    SIGNAL = 1
    VALUE = 2
    ANY = 3
    BARRIER = 4


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
