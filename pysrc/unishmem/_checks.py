"""The host API's argument checks, shared by Runtime's calls and the device library's host side
(language/_host.py), so that a device function under the interpreter refuses what the host call
refuses, with the same error. NOTE [hot paths] (_runtime.py): the common case of each check is a
test or a dict lookup; the slow path names what is wrong."""

from __future__ import annotations

import enum
import math
import operator
from collections.abc import Sequence

import torch

from ._dtypes import DTYPE_CODES, REDUCE_DTYPES
from .enums import CMP, REDUCE_OPS, SIGNAL

# Enum value -> code, for the enum's members and plain ints: no enum is built on the common path.


_SIGNAL_CODES = {int(m): int(m) for m in SIGNAL}


_CMP_CODES = {int(m): int(m) for m in CMP}
_REDUCE_DTYPE_SET = frozenset(REDUCE_DTYPES)
_MAX_BYTES = 2**63 - 1  # the most bytes a tensor can have (torch counts them in int64)


def as_index(value, what: str) -> int:
    """An int from anything int-like (numpy integers too), but not a bool, a float or a string."""
    if type(value) is int:
        return value
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{what} must be an int, got {value!r} ({type(value).__name__})")


def enum_code(value, kind: type[enum.IntEnum], what: str) -> int:
    # The other IntEnum (CMP for SIGNAL), a bool or a float would pass as an int: refuse them.
    if isinstance(value, (bool, enum.Enum)) or not hasattr(type(value), "__index__"):
        raise TypeError(
            f"{what} must be a unishmem.{kind.__name__} or its int value, got {value!r} ({type(value).__name__})"
        )
    try:
        return int(kind(operator.index(value)))
    except ValueError:  # a number that is none of its values
        raise ValueError(f"{what}={value!r} is not a valid {kind.__name__}") from None


def _code(value, kind: type[enum.IntEnum], codes: dict, what: str) -> int:
    if type(value) is kind or type(value) is int:
        code = codes.get(value)
        if code is not None:
            return code
    return enum_code(value, kind, what)


def signal_code(op) -> int:
    return _code(op, SIGNAL, _SIGNAL_CODES, "op")


def cmp_code(cmp) -> int:
    return _code(cmp, CMP, _CMP_CODES, "cmp")


_INT_RANGES = {
    torch.int32: (-(2**31), 2**31),
    torch.int64: (-(2**63), 2**63),
    torch.uint32: (0, 2**32),
    torch.uint64: (0, 2**64),
}


def to_bits(value, dtype: torch.dtype, name: str) -> int:
    """The two's-complement bit pattern of an integer that must fit `dtype`."""
    if type(value) is int:  # fast path (bool is not int here); the checks below name what is wrong
        lo, hi = _INT_RANGES[dtype]
        if lo <= value < hi:
            return value & (2**64 - 1)
    value = as_index(value, name)
    lo, hi = _INT_RANGES[dtype]
    if not lo <= value < hi:
        raise ValueError(f"{name}={value} does not fit {dtype} (range [{lo}, {hi - 1}])")
    return value & (2**64 - 1)


def from_bits(bits: int, dtype: torch.dtype) -> int:
    lo, hi = _INT_RANGES[dtype]
    bits &= hi - lo - 1
    return bits - (hi - lo) if lo < 0 and bits >= hi else bits


def check_pe(pe, n: int, what: str = "pe") -> int:
    if type(pe) is int and 0 <= pe < n:  # fast path
        return pe
    pe = as_index(pe, what)
    if not 0 <= pe < n:
        raise ValueError(f"{what}={pe} is out of range: there are {n} PEs (0..{n - 1})")
    return pe


def disjoint(d: int, dn: int, s: int, sn: int, what: str, in_place_ok: bool) -> int:
    """d, if a collective's dest (dn bytes at d) and source (sn at s) do not overlap; `in_place_ok`:
    dest may be source."""
    if d < s + sn and s < d + dn and not (in_place_ok and d == s):
        raise ValueError(f"{what}: dest and source overlap")
    return d


def reduce_codes(op, dtype: torch.dtype, what: str) -> tuple[int, int]:
    """(dtype code, op code) of a reduction of `dtype` by `op`, checked."""
    if op not in REDUCE_OPS:
        raise ValueError(f"{what}: op={op!r} is not one of {', '.join(REDUCE_OPS)}")
    if dtype not in _REDUCE_DTYPE_SET:
        raise TypeError(f"{what}: dtype {dtype} is not supported (supported: {', '.join(map(str, REDUCE_DTYPES))})")
    return DTYPE_CODES[dtype], REDUCE_OPS[op]


def address_of(t: torch.Tensor) -> int:
    """Where a tensor's first element lives; unlike data_ptr(), also right for empty tensors."""
    # ignore: torch's stubs allow a SymInt, which only a traced tensor gives; data_ptr() needs an eager one
    return t.data_ptr() or t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()  # type: ignore[return-value]


ITEMSIZE = {d: torch.empty((), dtype=d).element_size() for d in DTYPE_CODES}


def shape_of(shape) -> tuple[int, ...]:
    if hasattr(type(shape), "__index__") and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    dims = tuple(as_index(s, f"shape {shape!r}: a dimension") for s in dims)
    for s in dims:
        if s < 0:
            raise ValueError(f"shape {dims} has an invalid dimension {s}")
    return dims


Shape = int | Sequence[int]  # a tensor shape as torch takes it


def allocation_of(shape: Shape, dtype) -> tuple[tuple[int, ...], int]:
    """(shape, bytes) of an allocation, checked."""
    shape = shape_of(shape)
    if dtype not in DTYPE_CODES:
        raise TypeError(
            f"dtype {dtype} is not supported in the symmetric heap (supported: "
            f"{', '.join(str(d) for d in DTYPE_CODES)})"
        )
    nbytes = math.prod(shape) * ITEMSIZE[dtype]
    if nbytes > _MAX_BYTES:
        raise ValueError(f"shape {shape} of {dtype} is {nbytes} bytes, more than any tensor can hold ({_MAX_BYTES})")
    return shape, nbytes


def check_fill(value, dtype) -> None:
    """What fill_ would refuse, refused before anything is allocated."""
    try:
        torch.full((), value, dtype=dtype)
    except (RuntimeError, OverflowError) as e:
        raise ValueError(f"full: value={value!r} does not fit {dtype} ({e})") from None
    except TypeError:
        raise TypeError(f"full: value={value!r} ({type(value).__name__}) is not a number") from None


def dtype_code_of(t: torch.Tensor, what: str) -> int:
    code = DTYPE_CODES.get(t.dtype)
    if code is None:
        raise TypeError(f"{what}: dtype {t.dtype} is not supported in the symmetric heap")
    return code


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))
