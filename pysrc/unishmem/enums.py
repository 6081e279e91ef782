"""Public enums and the internal op codes shared with the C++ backends (the dtype codes: _dtypes.py).
No torch here: the launcher and the CLI import the package without it.

NOTE [enum values]: the numbers here are this package's own and match csrc/backend.hpp;
each backend maps them to its vendor's numbering.
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
