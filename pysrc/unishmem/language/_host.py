"""Device functions under TRITON_INTERPRET=1: each one calls the host backend's C++ primitives.

The interpreter hands a device function Python values: pointers arrive here as (address, element
size) of this PE's mapping, and these implementations check them the way the host API does."""

from __future__ import annotations

import ctypes

import numpy as np

from ..enums import ATOMIC_OPS, DTYPE_CODES, REDUCE_OPS
from ..errors import NotSymmetricError, UnishmemError


class Ptr:
    """A pointer argument: its address, and the torch dtype of what it points to."""

    def __init__(self, addr: int, dtype, itemsize: int):
        self.addr, self.dtype, self.itemsize = addr, dtype, itemsize


def _runtime():
    from .. import runtime
    from ..triton_support import stop_if_aborted

    stop_if_aborted()  # every device call: a program looping on test() or atomics stops too
    rt = runtime()
    if rt.backend != "host":
        raise UnishmemError(
            f"device functions under TRITON_INTERPRET=1 need the host backend; this runtime's backend is {rt.backend!r}"
        )
    return rt


def _pe(rt, pe: int, what: str = "pe") -> int:
    if not 0 <= pe < rt.n_pes:
        raise ValueError(f"{what}={pe} is out of range: there are {rt.n_pes} PEs (0..{rt.n_pes - 1})")
    return pe


def _sym(rt, p: Ptr, nbytes: int, what: str) -> int:
    if nbytes < 0:
        raise ValueError(f"{what}: negative size {nbytes}")
    if not rt._in_heap(p.addr, nbytes):
        raise NotSymmetricError(f"{what} ({p.addr:#x}, {nbytes} bytes) is not in the symmetric heap")
    return p.addr


def _team(rt, team: int):
    for t in (rt.team_world, rt.team_node):
        if t.handle == team:
            return
    try:
        rt._native.team_n_pes(team)
    except ValueError as e:
        raise ValueError(f"team={team} is not a team handle of this PE ({e})") from None


def my_pe(rt):
    return rt.my_pe


def n_pes(rt):
    return rt.n_pes


def team_my_pe(rt, team):
    _team(rt, team)
    return rt._native.team_my_pe(team)


def team_n_pes(rt, team):
    _team(rt, team)
    return rt._native.team_n_pes(team)


def team_translate_pe(rt, src_team, pe, dst_team):
    _team(rt, src_team)
    _team(rt, dst_team)
    return rt._native.team_translate_pe(src_team, pe, dst_team)


def remote_ptr(rt, ptr, pe):
    if not isinstance(ptr.addr, int):  # a block of pointers: every one in the heap, all moved alike
        for addr in (int(ptr.addr.min()), int(ptr.addr.max())):
            _sym(rt, Ptr(addr, ptr.dtype, ptr.itemsize), 0, "remote_ptr: ptr")
        return ptr.addr.astype(np.int64) + (rt._native.peer_ptr(rt._base, _pe(rt, pe)) - rt._base)
    _sym(rt, ptr, 0, "remote_ptr: ptr")
    return rt._native.peer_ptr(ptr.addr, _pe(rt, pe))


def put(rt, dest, source, nbytes, pe):
    rt._native.put(_sym(rt, dest, nbytes, "dest"), source.addr, nbytes, _pe(rt, pe), 0)


def get(rt, dest, source, nbytes, pe):
    rt._native.get(dest.addr, _sym(rt, source, nbytes, "source"), nbytes, _pe(rt, pe), 0)


def put_elems(rt, dest, source, nelems, pe):
    put(rt, dest, source, nelems * dest.itemsize, pe)


def iput(rt, dest, source, dst_stride, src_stride, nelems, pe):
    for i in range(nelems):
        put(
            rt,
            Ptr(dest.addr + i * dst_stride * dest.itemsize, dest.dtype, dest.itemsize),
            Ptr(source.addr + i * src_stride * source.itemsize, source.dtype, source.itemsize),
            dest.itemsize,
            pe,
        )


def iget(rt, dest, source, dst_stride, src_stride, nelems, pe):
    for i in range(nelems):
        get(
            rt,
            Ptr(dest.addr + i * dst_stride * dest.itemsize, dest.dtype, dest.itemsize),
            Ptr(source.addr + i * src_stride * source.itemsize, source.dtype, source.itemsize),
            dest.itemsize,
            pe,
        )


def get_elems(rt, dest, source, nelems, pe):
    get(rt, dest, source, nelems * dest.itemsize, pe)


def p(rt, dest, value, pe):
    import torch

    local = torch.tensor([value], dtype=dest.dtype)
    rt._native.put(_sym(rt, dest, dest.itemsize, "dest"), local.data_ptr(), dest.itemsize, _pe(rt, pe), 0)


def g(rt, source, pe):
    import torch

    local = torch.empty(1, dtype=source.dtype)
    rt._native.get(local.data_ptr(), _sym(rt, source, source.itemsize, "source"), source.itemsize, _pe(rt, pe), 0)
    return local.item()


def _aligned(rt, p: Ptr, what: str) -> int:
    if p.addr % p.itemsize:  # atomics need a naturally aligned word
        raise ValueError(f"{what} at heap offset {p.addr - rt._base} is not {p.itemsize}-byte aligned")
    return p.addr


def _signal(rt, sig: Ptr) -> int:
    if sig.itemsize != 8:
        raise TypeError(f"sig must point to a uint64 signal word, not {sig.dtype}")
    _sym(rt, sig, 8, "sig")
    return _aligned(rt, sig, "sig")


def put_signal(rt, dest, source, nbytes, sig, value, op, pe):
    rt._native.put_signal(
        _sym(rt, dest, nbytes, "dest"), source.addr, nbytes, _signal(rt, sig), value, op, _pe(rt, pe), 0
    )


def put_signal_elems(rt, dest, source, nelems, sig, value, op, pe):
    put_signal(rt, dest, source, nelems * dest.itemsize, sig, value, op, pe)


def signal_op(rt, sig, value, op, pe):
    rt._native.signal_op(_signal(rt, sig), value, op, _pe(rt, pe), 0)


def signal_wait_until(rt, sig, cmp, value):
    return rt._native.signal_wait_until(_signal(rt, sig), cmp, value, 0)


def signal_fetch(rt, sig):
    return rt._native.signal_fetch(_signal(rt, sig))


def _word(rt, ptr: Ptr) -> tuple[int, int]:
    if ptr.dtype not in DTYPE_CODES or ptr.itemsize not in (4, 8) or ptr.dtype.is_floating_point:
        raise TypeError(f"point-to-point waits and atomics take int32, int64, uint32 or uint64 words, not {ptr.dtype}")
    _sym(rt, ptr, ptr.itemsize, "ptr")
    return _aligned(rt, ptr, "ptr"), DTYPE_CODES[ptr.dtype]


def _bits(value: int) -> int:
    return int(value) & (2**64 - 1)


def wait_until(rt, ptr, cmp, value):
    addr, code = _word(rt, ptr)
    rt._native.wait_until(addr, code, cmp, _bits(value))


def test(rt, ptr, cmp, value):
    addr, code = _word(rt, ptr)
    return int(rt._native.test(addr, code, cmp, _bits(value)))


def atomic(rt, name: str, dest: Ptr, pe: int, value: int = 0, cond: int = 0):
    from ..runtime import _from_bits

    addr, code = _word(rt, dest)
    op = ATOMIC_OPS[name[len("atomic_") :]]
    return _from_bits(rt._native.atomic(op, code, addr, _bits(value), _bits(cond), _pe(rt, pe)), dest.dtype)


def _words(rt, ivars: Ptr, nelems: int, what: str, values: Ptr | None = None, value: int = 0):
    """(address, dtype code, one value's bits per word) for a wait on nelems words at ivars."""
    import torch

    addr, code = _word(rt, ivars)
    if nelems < 1:
        raise ValueError(f"{what}: nelems={nelems} must be >= 1")
    _sym(rt, ivars, nelems * ivars.itemsize, f"{what}: ivars")
    if values is None:
        return addr, code, [_bits(value)] * nelems
    if values.dtype != ivars.dtype:
        raise TypeError(f"{what}: values points to {values.dtype} but ivars to {ivars.dtype}")
    local = torch.empty(nelems, dtype=values.dtype)
    ctypes.memmove(local.data_ptr(), values.addr, nelems * values.itemsize)  # any local memory, as on a GPU
    return addr, code, [_bits(v) for v in local.tolist()]


def _wait_all(rt, ivars, nelems, cmp, what, **target):
    addr, code, bits = _words(rt, ivars, nelems, what, **target)
    for i, b in enumerate(bits):
        rt._native.wait_until(addr + i * ivars.itemsize, code, cmp, b)


def _wait_any(rt, ivars, nelems, cmp, what, **target):
    addr, code, bits = _words(rt, ivars, nelems, what, **target)
    return rt._native.wait_until_any(addr, ivars.itemsize, code, cmp, bits)


def _wait_some(rt, ivars, nelems, indices, cmp, what, **target):
    import torch

    addr, code, bits = _words(rt, ivars, nelems, what, **target)
    if indices.itemsize != 8 or indices.dtype.is_floating_point:
        raise TypeError(f"{what}: indices must point to int64 (size_t) words, not {indices.dtype}")
    first = rt._native.wait_until_any(addr, ivars.itemsize, code, cmp, bits)
    found = torch.tensor(
        [i for i, b in enumerate(bits) if i == first or rt._native.test(addr + i * ivars.itemsize, code, cmp, b)]
    )
    ctypes.memmove(indices.addr, found.data_ptr(), found.numel() * 8)
    return found.numel()


def wait_until_all(rt, ivars, nelems, cmp, value):
    _wait_all(rt, ivars, nelems, cmp, "wait_until_all", value=value)


def wait_until_any(rt, ivars, nelems, cmp, value):
    return _wait_any(rt, ivars, nelems, cmp, "wait_until_any", value=value)


def wait_until_some(rt, ivars, nelems, indices, cmp, value):
    return _wait_some(rt, ivars, nelems, indices, cmp, "wait_until_some", value=value)


def wait_until_all_vector(rt, ivars, nelems, cmp, values):
    _wait_all(rt, ivars, nelems, cmp, "wait_until_all_vector", values=values)


def wait_until_any_vector(rt, ivars, nelems, cmp, values):
    return _wait_any(rt, ivars, nelems, cmp, "wait_until_any_vector", values=values)


def wait_until_some_vector(rt, ivars, nelems, indices, cmp, values):
    return _wait_some(rt, ivars, nelems, indices, cmp, "wait_until_some_vector", values=values)


def fence(rt):
    rt._native.fence()


def quiet(rt):
    rt._native.quiet(0)


def barrier_all(rt):
    rt._native.barrier(0, 0)


def sync_all(rt):
    rt._native.sync(0, 0)


def _collective(rt, team: int, check):
    """check()'s result. As in the host API, a PE whose check fails still enters the collective
    (rejected), so that the other members raise too instead of waiting for it."""
    try:
        _team(rt, team)
    except ValueError:
        rt._native.reject_collective(0)  # no team to enter: the others are likely in the world
        raise
    try:
        return check()
    except (TypeError, ValueError):
        rt._native.reject_collective(team)
        raise


def barrier(rt, team):
    _collective(rt, team, lambda: None)
    rt._native.barrier(team, 0)


def sync(rt, team):
    _collective(rt, team, lambda: None)
    rt._native.sync(team, 0)


def _pair(rt, dest: Ptr, source: Ptr, dest_bytes: int, source_bytes: int, what: str):
    if dest.dtype != source.dtype:
        raise TypeError(f"{what}: dest points to {dest.dtype} but source to {source.dtype}")
    if dest.dtype not in DTYPE_CODES:
        raise TypeError(f"{what}: {dest.dtype} is not a dtype of the symmetric heap")
    return (
        _sym(rt, dest, dest_bytes, f"{what}: dest"),
        _sym(rt, source, source_bytes, f"{what}: source"),
        DTYPE_CODES[dest.dtype],
    )


def broadcast(rt, team, dest, source, nelems, root):
    def check():
        n = nelems * dest.itemsize
        d, s, code = _pair(rt, dest, source, n, n, "broadcast")
        n_pes = rt._native.team_n_pes(team)
        if not 0 <= root < n_pes:
            raise ValueError(f"broadcast: root={root} is out of range for a team of {n_pes} PEs")
        return d, s, n, code, root

    rt._native.broadcast(team, *_collective(rt, team, check), 0)


def fcollect(rt, team, dest, source, nelems):
    def check():
        n = nelems * dest.itemsize
        d, s, code = _pair(rt, dest, source, n * rt._native.team_n_pes(team), n, "fcollect")
        return d, s, n, code

    rt._native.fcollect(team, *_collective(rt, team, check), 0)


def alltoall(rt, team, dest, source, nelems):
    def check():
        n = nelems * dest.itemsize
        total = n * rt._native.team_n_pes(team)
        d, s, code = _pair(rt, dest, source, total, total, "alltoall")
        return d, s, n, code

    rt._native.alltoall(team, *_collective(rt, team, check), 0)


def reduce(rt, team, dest, source, nelems, op):
    def check():
        n = nelems * dest.itemsize
        d, s, code = _pair(rt, dest, source, n, n, "reduce")
        return d, s, nelems, code, REDUCE_OPS[op]

    rt._native.reduce(team, *_collective(rt, team, check), 0)
