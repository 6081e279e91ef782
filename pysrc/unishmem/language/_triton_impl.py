"""Device functions that unishmem.language writes in Triton for a vendor whose bitcode lacks them.

NOTE [triton rows]: a row of the device table whose entry for some vendor is `Triton(...)` has,
here, (1) a public @triton.jit dispatcher with the row's name and parameters, which
unishmem.language exports in place of the row's builtin, and (2) its implementation, a @triton.jit
function over other rows' builtins (`_b.<name>`). Builtins cannot call @triton.jit functions, so
the branch lives in the dispatcher: `if _b.uses_triton("<row>"):` is a compile-time constant
(tl.constexpr) that is true when the compile target's vendor has `Triton` for the row, so only one
side is ever compiled; under TRITON_INTERPRET=1 it is false and the row's host implementation runs.
To give another row a Triton implementation: mark the vendor's entry `Triton(reason)` in _table.py,
write `<row>` (dispatcher) and its implementation here, and list the dispatcher in DISPATCHERS;
importing this module fails if a Triton row has no dispatcher, and tests/test_device_compile.py
checks that each dispatcher takes the row's parameters.

NOTE [team descriptor]: on rocSHMEM `team.handle` is the address of a descriptor that the runtime
keeps for each team in the symmetric heap (csrc/vendor: kTeamDescriptorBytes), at the same offset
on every member. Words (int64): START, STRIDE, SIZE (the members are world PEs START + i * STRIDE,
i < SIZE; every team unishmem makes, nested splits and 2-D splits included, is such a progression
of world PEs, so no parent chain is needed), SCRATCH_BYTES, EPOCH (this PE's count of
synchronisations on the team; only this PE writes it), then ROUNDS uint64 counters (written by peers,
one per dissemination round) and, from SCRATCH_OFFSET, SCRATCH_BYTES of reduction workspace.
The runtime writes the header when a team is made and zeroes the rest when it is destroyed.

Collectives (barrier, sync, broadcast, fcollect, alltoall, reduce on a team) follow the vendors'
rule: one program of the grid calls them, every member calls the same collectives on the team in
the same order. All threads of that program run them (block scope); every signal is issued once.
"""
from __future__ import annotations

import inspect

import triton
import triton.language as tl

from ..enums import CMP, SIGNAL
from . import _builtins as _b
from ._build import REDUCE_OPS, _BUILTIN, _constexpr
from ._table import ROWS, Triton

# descriptor layout (NOTE [team descriptor]); csrc/vendor/vendor_backend.cpp writes the same
START = tl.constexpr(0)
STRIDE = tl.constexpr(1)
SIZE = tl.constexpr(2)
SCRATCH_BYTES = tl.constexpr(3)
EPOCH = tl.constexpr(4)
ROUNDS_OFFSET = tl.constexpr(64)   # bytes: 32 uint64 round counters (teams of up to 2**32 PEs)
MAX_ROUNDS = 32
SCRATCH_OFFSET = tl.constexpr(512)  # bytes
HEADER_BYTES = 512
if not ROUNDS_OFFSET.value + 8 * MAX_ROUNDS <= SCRATCH_OFFSET.value == HEADER_BYTES:
    raise RuntimeError("team descriptor layout: the round counters overlap the scratch")

_ADD = tl.constexpr(int(SIGNAL.ADD))
_GE = tl.constexpr(int(CMP.GE))
_REDUCE_BLOCK = tl.constexpr(1024)


def descriptor_header(start: int, stride: int, size: int, scratch_bytes: int) -> list[int]:
    """The header words of a team's descriptor, in order (EPOCH and the counters start at 0)."""
    return [start, stride, size, scratch_bytes]


def _redop(op, _semantic=None):
    """The reduction op as a constexpr string, checked (a builtin: works compiled and interpreted)."""
    op = _constexpr(op, "reduce: op")
    if op not in REDUCE_OPS:
        raise ValueError(f"reduce: op={op!r} is not one of {', '.join(REDUCE_OPS)}")
    return tl.constexpr(op)


_redop.signature = inspect.signature(_redop)
setattr(_redop, _BUILTIN, True)


# ---- descriptor -------------------------------------------------------------------------------

@triton.jit
def _desc(team):
    return team.to(tl.int64).to(tl.pointer_type(tl.int64))


@triton.jit
def _index_of(d, world_pe):
    """The team index of world PE `world_pe`; -1 if it is not a member."""
    start = tl.load(d + START)
    stride = tl.load(d + STRIDE)
    size = tl.load(d + SIZE)
    off = tl.cast(world_pe, tl.int64) - start
    k = off // stride
    member = (off >= 0) & (off % stride == 0) & (k < size)
    return tl.where(member, k, -1).to(tl.int32)


@triton.jit
def _world_pe(d, index):
    return (tl.load(d + START) + tl.cast(index, tl.int64) * tl.load(d + STRIDE)).to(tl.int32)


@triton.jit
def _my_index(d):
    me = _index_of(d, _b.my_pe())
    tl.device_assert(me >= 0, "this PE is not a member of the team it called a team function on")
    return me


# ---- queries ----------------------------------------------------------------------------------

@triton.jit
def team_my_pe_impl(team):
    return _index_of(_desc(team), _b.my_pe())


@triton.jit
def team_n_pes_impl(team):
    return tl.load(_desc(team) + SIZE).to(tl.int32)


@triton.jit
def team_translate_pe_impl(src_team, pe, dst_team):
    src = _desc(src_team)
    index = tl.cast(pe, tl.int64)
    inside = (index >= 0) & (index < tl.load(src + SIZE))
    return tl.where(inside, _index_of(_desc(dst_team), _world_pe(src, index)), -1)


# ---- synchronisation --------------------------------------------------------------------------

@triton.jit
def sync_impl(team):
    """Dissemination barrier over the team's members: in round r, member i adds 1 to counter r of
    member (i + 2**r) % size and waits until its own counter r reaches this call's epoch. Counters
    only grow, so a fast peer already in a later call cannot undo a slower one's wait."""
    d = _desc(team)
    size = tl.load(d + SIZE)
    me = _my_index(d).to(tl.int64)
    tl.debug_barrier()  # every thread is done with what came before (scratch reads) before peers go on
    epoch = tl.load(d + EPOCH, volatile=True) + 1
    tl.debug_barrier()  # every thread read the old epoch before it is replaced
    tl.store(d + EPOCH, epoch)
    counters = (team.to(tl.int64) + ROUNDS_OFFSET).to(tl.pointer_type(tl.uint64))
    dist = size * 0 + 1
    r = size * 0
    while dist < size:
        _b.signal_op(counters + r, 1, _ADD, _world_pe(d, (me + dist) % size))
        _b.signal_wait_until(counters + r, _GE, epoch.to(tl.uint64))
        dist = dist * 2
        r += 1


@triton.jit
def barrier_impl(team):
    _b.quiet()  # barrier = completion of this PE's puts, then sync
    sync_impl(team)


# ---- collectives ------------------------------------------------------------------------------
# Each starts with a sync (every member's dest is ready to be written) and ends with a barrier
# (every put has landed, so dest is complete and source reusable on return).

@triton.jit
def broadcast_impl(team, dest, source, nelems, root):
    d = _desc(team)
    size = tl.load(d + SIZE)
    me = _my_index(d)
    tl.device_assert((root >= 0) & (root < size), "broadcast: root is out of range for the team")
    nbytes = nelems * (dest.dtype.element_ty.primitive_bitwidth // 8)
    elsewhere = dest.to(tl.int64) != source.to(tl.int64)
    sync_impl(team)
    if me == root:
        for j in range(0, size):
            if (j != me) | elsewhere:  # the root's own copy, unless dest is source
                _b.putmem_block(dest, source, nbytes, _world_pe(d, j))
    barrier_impl(team)


@triton.jit
def fcollect_impl(team, dest, source, nelems):
    d = _desc(team)
    size = tl.load(d + SIZE)
    me = _my_index(d)
    nbytes = nelems * (dest.dtype.element_ty.primitive_bitwidth // 8)
    sync_impl(team)
    for j in range(0, size):
        _b.putmem_block(dest + me * nelems, source, nbytes, _world_pe(d, j))
    barrier_impl(team)


@triton.jit
def alltoall_impl(team, dest, source, nelems):
    d = _desc(team)
    size = tl.load(d + SIZE)
    me = _my_index(d)
    nbytes = nelems * (dest.dtype.element_ty.primitive_bitwidth // 8)
    sync_impl(team)
    for j in range(0, size):
        _b.putmem_block(dest + me * nelems, source + j * nelems, nbytes, _world_pe(d, j))
    barrier_impl(team)


@triton.jit
def _combine(a, b, op: tl.constexpr):
    if op == "sum":
        out = a + b
    elif op == "prod":
        out = a * b
    elif op == "min":
        out = tl.minimum(a, b)
    else:
        out = tl.maximum(a, b)
    return out


@triton.jit
def _widen(x):
    """Floats narrower than 32 bits combine in float32 (rounded once, at the store)."""
    if x.dtype.is_floating() and x.dtype.primitive_bitwidth < 32:
        y = x.to(tl.float32)
    else:
        y = x
    return y


@triton.jit
def reduce_impl(team, dest, source, nelems, op: tl.constexpr):
    """All-reduce in chunks through the descriptor's scratch, which holds one slot per member:
    per chunk, every member puts its part of `source` into its slot on every member, then each
    combines the slots in team order (the same order everywhere, so every member gets the same
    bits; 16-bit floats in float32) into `dest`. `source` is read only by its own PE, before any
    of `dest` is written, so dest may be source."""
    OP: tl.constexpr = _redop(op)
    d = _desc(team)
    size = tl.load(d + SIZE)
    me = _my_index(d).to(tl.int64)
    ELEM: tl.constexpr = dest.dtype.element_ty.primitive_bitwidth // 8
    chunk = tl.load(d + SCRATCH_BYTES) // (size * ELEM)  # elements per member slot
    tl.device_assert(chunk > 0, "reduce: the team descriptor's scratch is too small for one element per member")
    scratch = (team.to(tl.int64) + SCRATCH_OFFSET).to(dest.dtype)
    total = tl.cast(nelems, tl.int64)
    for c0 in range(0, total, chunk):
        n = tl.minimum(chunk, total - c0)
        sync_impl(team)  # every member has combined the previous chunk: its slots may be overwritten
        for j in range(0, size):
            _b.putmem_block(scratch + me * chunk, source + c0, n * ELEM, _world_pe(d, j))
        barrier_impl(team)  # every slot of this chunk has landed everywhere
        for t0 in range(0, n, _REDUCE_BLOCK):
            offs = t0 + tl.arange(0, _REDUCE_BLOCK)
            mask = offs < n
            acc = _widen(tl.load(scratch + offs, mask=mask, volatile=True))  # peers wrote it: no cached copy
            for j in range(1, size):
                acc = _combine(acc, _widen(tl.load(scratch + j * chunk + offs, mask=mask, volatile=True)), OP)
            tl.store(dest + c0 + offs, acc.to(dest.dtype.element_ty), mask=mask)


# ---- dispatchers (NOTE [triton rows]) ---------------------------------------------------------

@triton.jit
def team_my_pe(team):
    if _b.uses_triton("team_my_pe"):
        return team_my_pe_impl(team)
    else:
        return _b.team_my_pe(team)


@triton.jit
def team_n_pes(team):
    if _b.uses_triton("team_n_pes"):
        return team_n_pes_impl(team)
    else:
        return _b.team_n_pes(team)


@triton.jit
def team_translate_pe(src_team, pe, dst_team):
    if _b.uses_triton("team_translate_pe"):
        return team_translate_pe_impl(src_team, pe, dst_team)
    else:
        return _b.team_translate_pe(src_team, pe, dst_team)


@triton.jit
def barrier(team):
    if _b.uses_triton("barrier"):
        barrier_impl(team)
    else:
        _b.barrier(team)


@triton.jit
def sync(team):
    if _b.uses_triton("sync"):
        sync_impl(team)
    else:
        _b.sync(team)


@triton.jit
def broadcast(team, dest, source, nelems, root):
    if _b.uses_triton("broadcast"):
        broadcast_impl(team, dest, source, nelems, root)
    else:
        _b.broadcast(team, dest, source, nelems, root)


@triton.jit
def fcollect(team, dest, source, nelems):
    if _b.uses_triton("fcollect"):
        fcollect_impl(team, dest, source, nelems)
    else:
        _b.fcollect(team, dest, source, nelems)


@triton.jit
def alltoall(team, dest, source, nelems):
    if _b.uses_triton("alltoall"):
        alltoall_impl(team, dest, source, nelems)
    else:
        _b.alltoall(team, dest, source, nelems)


@triton.jit
def reduce(team, dest, source, nelems, op: tl.constexpr):
    if _b.uses_triton("reduce"):
        reduce_impl(team, dest, source, nelems, op)
    else:
        _b.reduce(team, dest, source, nelems, op)


DISPATCHERS = {"team_my_pe": team_my_pe, "team_n_pes": team_n_pes, "team_translate_pe": team_translate_pe,
               "barrier": barrier, "sync": sync, "broadcast": broadcast, "fcollect": fcollect, "alltoall": alltoall,
               "reduce": reduce}
IMPLEMENTATIONS = {name: globals()[name + "_impl"] for name in DISPATCHERS}

_without = [row.name for row in ROWS
            if any(isinstance(s, Triton) for s in row.symbols.values()) and row.name not in DISPATCHERS]
if _without:
    raise RuntimeError(f"device table: rows marked Triton without a dispatcher in _triton_impl.py: {_without}")
