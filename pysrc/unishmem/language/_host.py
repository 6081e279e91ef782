"""Device functions under TRITON_INTERPRET=1: each one calls the host backend's C++ primitives.

The interpreter hands a device function Python values: pointers arrive here as (address, element
size) of this PE's mapping. Addresses, PEs, codes and collective arguments go through the host API's
own checks (NOTE [address checks] in _heap.py), so a device function refuses what the host API
refuses with the same error; only what pointers alone have (their element type) is checked here.
Values are converted to the word they go to, as a compiled call converts them, not range-checked."""

from __future__ import annotations

import ctypes
import threading
import time
import warnings

import numpy as np

from .. import _active, _config, _interpreter, _races, hang
from .._checks import check_pe, cmp_code, disjoint, from_bits, reduce_codes
from .._dtypes import DTYPE_CODES, WAIT_DTYPES
from ..enums import ATOMIC_OPS
from ..errors import UnishmemError, UnishmemWarning, WaitTimeout


class Ptr:
    """A pointer argument: its address, and the torch dtype of what it points to."""

    def __init__(self, addr: int, dtype, itemsize: int):
        self.addr, self.dtype, self.itemsize = addr, dtype, itemsize


def _core():
    _interpreter.stop_if_aborted()  # every device call: a program looping on test() or atomics stops too
    core = _active.core()
    if core.backend != "host":
        raise UnishmemError(
            f"device functions under TRITON_INTERPRET=1 need the host backend; this runtime's backend is {core.backend!r}"
        )
    return core


def _team(core, team: int):
    for t in (core.team_world, core.team_node):
        if t.handle == team:
            return
    try:
        core.native.team_n_pes(team)
    except ValueError as e:
        raise ValueError(f"team={team} is not a team handle of this PE ({e})") from None


def my_pe(core):
    return core.my_pe


def n_pes(core):
    return core.n_pes


def team_my_pe(core, team):
    _team(core, team)
    return core.native.team_my_pe(team)


def team_n_pes(core, team):
    _team(core, team)
    return core.native.team_n_pes(team)


def team_translate_pe(core, src_team, pe, dst_team):
    _team(core, src_team)
    _team(core, dst_team)
    return core.native.team_translate_pe(src_team, pe, dst_team)


def remote_ptr(core, ptr, pe):
    # Only in the heap, not in a live allocation: a block's masked-off lanes may point past its end.
    if not isinstance(ptr.addr, int):  # a block of pointers: every one in the heap, all moved alike
        for addr in (int(ptr.addr.min()), int(ptr.addr.max())):
            core.heap.check_in_heap(addr, 0, "remote_ptr: ptr")
        base = core.native.peer_ptr(core.heap_base, check_pe(pe, core.n_pes))
        return (
            np.zeros_like(ptr.addr, dtype=np.int64) if not base else ptr.addr.astype(np.int64) + (base - core.heap_base)
        )
    return core.native.peer_ptr(core.heap.check_in_heap(ptr.addr, 0, "remote_ptr: ptr"), check_pe(pe, core.n_pes))


# NOTE [spins]: a loop that spins on load_remote waits as surely as signal_wait_until does, but with plain
# loads, which the host backend's waits (and their stall, timeout and deadlock reports) never see. Under the
# interpreter each program's reads of one scalar word are watched instead: the same word read with the same
# value for UNISHMEM_STALL_WARN seconds warns once, as a slow wait does, naming the word and the kernel's
# line; for UNISHMEM_WAIT_TIMEOUT seconds, it raises WaitTimeout. Any other read, or a new launch, starts
# over. Compiled, nothing is added.
_spin = threading.local()  # one program's last read: (launch, address, value, since, warned)


def watch_spin(core, addr: int, value) -> None:
    launch, now = _interpreter.current_program()[0], time.monotonic()
    last = getattr(_spin, "last", None)
    if last is None or last[:3] != (launch, addr, value):
        _spin.last = (launch, addr, value, now, False)
        return
    since, warned = last[3:]
    waited = now - since
    if waited < 0.1:  # (the settings are read from the environment: not at every read)
        return
    timeout, stall = _config.seconds("UNISHMEM_WAIT_TIMEOUT"), _config.seconds("UNISHMEM_STALL_WARN")
    if waited >= timeout or (stall > 0 and waited >= stall and not warned):
        what = f"{_peer_word(core, addr)} ({hang.wait_site()}), which has read {value} all along"
        if waited >= timeout:
            raise WaitTimeout(
                f"gave up after {int(waited)} s spinning on load_remote of {what} (UNISHMEM_WAIT_TIMEOUT sets "
                "the limit)"
            )
        warnings.warn(f"still spinning after {waited:.0f} s on load_remote of {what}", UnishmemWarning, 2)
        _spin.last = (*last[:4], True)


def _peer_word(core, addr: int) -> str:
    """The word at `addr` of a peer's mapping (remote_ptr's), as the PE and heap offset it belongs to."""
    owner = _owner(core, addr, 1)
    return f"the word at {addr:#x}" if owner is None else f"the word at heap offset {owner[1]:#x} of PE {owner[0]}"


def _owner(core, addr: int, nbytes: int) -> tuple[int, int] | None:
    """(PE, heap offset) of the nbytes at `addr` in a PE's heap as this process maps it, or None."""
    for pe in range(core.n_pes):
        base = core.native.peer_ptr(core.heap_base, pe)
        if base and base <= addr and addr + nbytes <= base + core.heap.size:
            return pe, addr - base
    return None


def put(core, dest, source, nbytes, pe):
    d, pe = core.heap.check_range(dest.addr, nbytes, "dest"), check_pe(pe, core.n_pes)
    races = _races.checker()
    if races is not None:
        races.put(d, source.addr, nbytes, pe)
    core.native.put(d, source.addr, nbytes, pe, 0)


def get(core, dest, source, nbytes, pe):
    s, pe = core.heap.check_range(source.addr, nbytes, "source"), check_pe(pe, core.n_pes)
    races = _races.checker()
    if races is not None:
        races.get(dest.addr, s, nbytes, pe)
    core.native.get(dest.addr, s, nbytes, pe, 0)


def put_elems(core, dest, source, nelems, pe):
    put(core, dest, source, nelems * dest.itemsize, pe)


def iput(core, dest, source, dst_stride, src_stride, nelems, pe):
    for i in range(nelems):
        put(
            core,
            Ptr(dest.addr + i * dst_stride * dest.itemsize, dest.dtype, dest.itemsize),
            Ptr(source.addr + i * src_stride * source.itemsize, source.dtype, source.itemsize),
            dest.itemsize,
            pe,
        )


def iget(core, dest, source, dst_stride, src_stride, nelems, pe):
    for i in range(nelems):
        get(
            core,
            Ptr(dest.addr + i * dst_stride * dest.itemsize, dest.dtype, dest.itemsize),
            Ptr(source.addr + i * src_stride * source.itemsize, source.dtype, source.itemsize),
            dest.itemsize,
            pe,
        )


def get_elems(core, dest, source, nelems, pe):
    get(core, dest, source, nelems * dest.itemsize, pe)


def p(core, dest, value, pe):
    import torch

    local = torch.tensor([value], dtype=dest.dtype)
    put(core, dest, Ptr(local.data_ptr(), dest.dtype, dest.itemsize), dest.itemsize, pe)


def g(core, source, pe):
    import torch

    local = torch.empty(1, dtype=source.dtype)
    get(core, Ptr(local.data_ptr(), source.dtype, source.itemsize), source, source.itemsize, pe)
    return local.item()


def _located(core, addr: int, nbytes: int, align: int, name: str, peers: bool = False) -> int:
    """addr, if nbytes from it lie in one live allocation, align-aligned. peers: a wait or a fetch, which may
    also read a peer's memory as remote_ptr maps it (compiled, a wait loads from any address the GPU reaches),
    checked as this PE's copy of the same bytes is."""
    local = addr
    if peers and not core.heap.holds(addr, nbytes):
        owner = _owner(core, addr, nbytes)
        local = addr if owner is None else core.heap_base + owner[1]
    core.heap.check_aligned(core.heap.check_range(local, nbytes, name), align, name)
    return addr


def _signal(core, sig: Ptr, peers: bool = False) -> int:
    if sig.itemsize != 8:  # as compiled: any 8-byte word is a signal's uint64
        raise TypeError(f"sig must point to a uint64 signal word, not {sig.dtype}")
    return _located(core, sig.addr, 8, 8, "sig", peers)


def put_signal(core, dest, source, nbytes, sig, value, op, pe):
    d, s = core.heap.check_range(dest.addr, nbytes, "dest"), _signal(core, sig)
    value, code, pe = core.signal_args(_bits(value), op, pe)
    races = _races.checker()
    if races is not None:
        races.put_signal(d, source.addr, nbytes, s, pe)
    core.native.put_signal(d, source.addr, nbytes, s, value, code, pe, 0)


def put_signal_elems(core, dest, source, nelems, sig, value, op, pe):
    put_signal(core, dest, source, nelems * dest.itemsize, sig, value, op, pe)


def signal_op(core, sig, value, op, pe):
    s, (value, code, pe) = _signal(core, sig), core.signal_args(_bits(value), op, pe)
    races = _races.checker()
    if races is not None:
        races.signal(s, pe)
    core.native.signal_op(s, value, code, pe, 0)


def signal_wait_until(core, sig, cmp, value):
    s = _signal(core, sig, peers=True)
    out = core.native.signal_wait_until(s, cmp_code(cmp), _bits(value), 0)
    _races.waited(s, 8)
    return out


def signal_fetch(core, sig):
    s = _signal(core, sig, peers=True)
    out = core.native.signal_fetch(s)
    _races.waited(s, 8)
    return out


def _word(core, ptr: Ptr, nelems: int = 1, name: str = "ptr", peers: bool = False) -> tuple[int, int]:
    """(address, dtype code) of nelems words at ptr; peers: for a wait or a test (_located)."""
    if ptr.dtype not in WAIT_DTYPES:  # the atomics' too (enums.ATOMIC_DTYPES)
        raise TypeError(f"point-to-point waits and atomics take int32, int64, uint32 or uint64 words, not {ptr.dtype}")
    return _located(core, ptr.addr, nelems * ptr.itemsize, ptr.itemsize, name, peers), DTYPE_CODES[ptr.dtype]


def _bits(value: int) -> int:
    """value's low 64 bits: a compiled call converts it to the word's type, and the backend takes the low bytes."""
    return int(value) & (2**64 - 1)


def wait_until(core, ptr, cmp, value):
    addr, code = _word(core, ptr, peers=True)
    core.native.wait_until(addr, code, cmp_code(cmp), _bits(value))
    _races.waited(addr, ptr.itemsize)
    return 1


def test(core, ptr, cmp, value):
    addr, code = _word(core, ptr, peers=True)
    true = int(core.native.test(addr, code, cmp_code(cmp), _bits(value)))
    if true:
        _races.waited(addr, ptr.itemsize)
    return true


def atomic(core, name: str, dest: Ptr, pe: int, value: int = 0, cond: int = 0):
    addr, code = _word(core, dest)
    op, pe = ATOMIC_OPS[name[len("atomic_") :]], check_pe(pe, core.n_pes)
    races = _races.checker()
    key = races.amo(addr, dest.itemsize, pe) if races is not None else None
    out = core.native.atomic(op, code, addr, _bits(value), _bits(cond), pe)
    if races is not None and key is not None:
        races.acquire(races.current(), key)
    return from_bits(out, dest.dtype)


def _words(core, ivars: Ptr, nelems: int, what: str, values: Ptr | None = None, value: int = 0):
    """(address, dtype code, one value's bits per word) for a wait on nelems words at ivars."""
    import torch

    if nelems < 1:
        raise ValueError(f"{what}: nelems={nelems} must be >= 1")
    addr, code = _word(core, ivars, nelems, f"{what}: ivars", peers=True)
    if values is None:
        return addr, code, [_bits(value)] * nelems
    if values.dtype != ivars.dtype:
        raise TypeError(f"{what}: values points to {values.dtype} but ivars to {ivars.dtype}")
    local = torch.empty(nelems, dtype=values.dtype)
    ctypes.memmove(local.data_ptr(), values.addr, nelems * values.itemsize)  # any local memory, as on a GPU
    return addr, code, [_bits(v) for v in local.tolist()]


def _wait_all(core, ivars, nelems, cmp, what, **target):
    addr, code, bits = _words(core, ivars, nelems, what, **target)
    cmp = cmp_code(cmp)
    for i, b in enumerate(bits):
        core.native.wait_until(addr + i * ivars.itemsize, code, cmp, b)
    _races.waited(addr, ivars.itemsize, nelems)
    return nelems


def _wait_any(core, ivars, nelems, cmp, what, **target):
    addr, code, bits = _words(core, ivars, nelems, what, **target)
    found = core.native.wait_until_any(addr, ivars.itemsize, code, cmp_code(cmp), bits)
    _races.waited(addr + found * ivars.itemsize, ivars.itemsize)
    return found


def _wait_some(core, ivars, nelems, indices, cmp, what, **target):
    import torch

    addr, code, bits = _words(core, ivars, nelems, what, **target)
    if indices.itemsize != 8 or indices.dtype.is_floating_point:
        raise TypeError(f"{what}: indices must point to int64 (size_t) words, not {indices.dtype}")
    cmp = cmp_code(cmp)
    first = core.native.wait_until_any(addr, ivars.itemsize, code, cmp, bits)
    found = torch.tensor(
        [i for i, b in enumerate(bits) if i == first or core.native.test(addr + i * ivars.itemsize, code, cmp, b)]
    )
    ctypes.memmove(indices.addr, found.data_ptr(), found.numel() * 8)
    for i in found.tolist():
        _races.waited(addr + i * ivars.itemsize, ivars.itemsize)
    return found.numel()


# One host function per device function (its row's `host`): the table names each, so the forms of a
# wait stand side by side, alike on purpose.
def wait_until_all(core, ivars, nelems, cmp, value):
    return _wait_all(core, ivars, nelems, cmp, "wait_until_all", value=value)


def wait_until_any(core, ivars, nelems, cmp, value):
    return _wait_any(core, ivars, nelems, cmp, "wait_until_any", value=value)


def wait_until_some(core, ivars, nelems, indices, cmp, value):
    return _wait_some(core, ivars, nelems, indices, cmp, "wait_until_some", value=value)


def wait_until_all_vector(core, ivars, nelems, cmp, values):
    return _wait_all(core, ivars, nelems, cmp, "wait_until_all_vector", values=values)


def wait_until_any_vector(core, ivars, nelems, cmp, values):
    return _wait_any(core, ivars, nelems, cmp, "wait_until_any_vector", values=values)


def wait_until_some_vector(core, ivars, nelems, indices, cmp, values):
    return _wait_some(core, ivars, nelems, indices, cmp, "wait_until_some_vector", values=values)


def _completed() -> None:
    races = _races.checker()
    if races is not None:
        races.complete(races.current())


def fence(core):
    core.native.fence()
    _completed()


def quiet(core):
    core.native.quiet(0)
    _completed()


def quiet_pe(core, pe):
    check_pe(pe, core.n_pes, "quiet_pe: pe")
    core.native.quiet(0)
    _completed()


def mc_ptr(core, ptr):
    core.heap.check_in_heap(ptr.addr, 0, "mc_ptr: ptr")
    return 0  # the host backend has no multicast


def _ordered(team: int, run, quiet: bool):
    """run(), a barrier or sync of `team`, as the race check orders it (NOTE [happens-before])."""
    races = _races.checker()
    return run() if races is None else races.barrier(team, run, quiet)


def barrier_all(core):
    _ordered(0, lambda: core.native.barrier(0, 0), quiet=True)


def sync_all(core):
    _ordered(0, lambda: core.native.sync(0, 0), quiet=False)


def _collective(core, team: int, check):
    """check()'s result. As in the host API, a PE whose check fails still enters the collective
    (rejected), so that the other members raise too instead of waiting for it."""
    try:
        _team(core, team)
    except ValueError:
        core.native.reject_collective(0)  # no team to enter: the others are likely in the world
        raise
    return core.reject_on_error(team, check)  # on the host backend a team's handle is its slot


def barrier(core, team):
    _collective(core, team, lambda: None)
    _ordered(team, lambda: core.native.barrier(team, 0), quiet=True)


def sync(core, team):
    _collective(core, team, lambda: None)
    _ordered(team, lambda: core.native.sync(team, 0), quiet=False)


def _run_collective(team: int, run, source: int, source_bytes: int, dest: int, dest_bytes: int) -> None:
    races = _races.checker()
    if races is None:
        run()
    else:
        races.collective(team, run, source, source_bytes, dest, dest_bytes)


def _pair(core, dest: Ptr, source: Ptr, dest_bytes: int, source_bytes: int, what: str, in_place_ok: bool = False):
    """(dest, source, dtype code) of a collective, checked as the host API checks them."""
    d = core.heap.check_range(dest.addr, dest_bytes, "dest")
    s = core.heap.check_range(source.addr, source_bytes, "source")
    if dest.dtype != source.dtype:
        raise TypeError(f"{what}: dest points to {dest.dtype} but source to {source.dtype}")
    if dest.dtype not in DTYPE_CODES:
        raise TypeError(f"{what}: {dest.dtype} is not a dtype of the symmetric heap")
    return disjoint(d, dest_bytes, s, source_bytes, what, in_place_ok), s, DTYPE_CODES[dest.dtype]


def broadcast(core, team, dest, source, nelems, root):
    def check():
        n = nelems * dest.itemsize
        d, s, code = _pair(core, dest, source, n, n, "broadcast", in_place_ok=True)
        n_pes = core.native.team_n_pes(team)
        if not 0 <= root < n_pes:
            raise ValueError(f"broadcast: root={root} is out of range for a team of {n_pes} PEs")
        return d, s, n, code, root

    d, s, n, code, root = _collective(core, team, check)
    _run_collective(team, lambda: core.native.broadcast(team, d, s, n, code, root, 0), s, n, d, n)


def fcollect(core, team, dest, source, nelems):
    def check():
        n = nelems * dest.itemsize
        d, s, code = _pair(core, dest, source, n * core.native.team_n_pes(team), n, "fcollect")
        return d, s, n, code

    d, s, n, code = _collective(core, team, check)
    total = n * core.native.team_n_pes(team)
    _run_collective(team, lambda: core.native.fcollect(team, d, s, n, code, 0), s, n, d, total)


def alltoall(core, team, dest, source, nelems):
    def check():
        n = nelems * dest.itemsize
        total = n * core.native.team_n_pes(team)
        d, s, code = _pair(core, dest, source, total, total, "alltoall")
        return d, s, n, code

    d, s, n, code = _collective(core, team, check)
    total = n * core.native.team_n_pes(team)
    _run_collective(team, lambda: core.native.alltoall(team, d, s, n, code, 0), s, total, d, total)


def reduce(core, team, dest, source, nelems, op):
    def check():
        dtype_code, op_code = reduce_codes(op, source.dtype, "reduce")
        n = nelems * dest.itemsize
        d, s, _ = _pair(core, dest, source, n, n, "reduce", in_place_ok=True)
        return d, s, nelems, dtype_code, op_code

    d, s, nelems, dtype_code, op_code = _collective(core, team, check)
    n = nelems * dest.itemsize
    _run_collective(team, lambda: core.native.reduce(team, d, s, nelems, dtype_code, op_code, 0), s, n, d, n)
