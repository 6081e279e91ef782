"""NOTE [Triton implementations]: device functions that unishmem.language writes in Triton itself,
over the table's other functions, where a vendor has no C-linkage symbol for them (a `Triton` entry
in _table.py) or where no vendor has one. A generated builtin calls them through the code generator
it is given (`_generator.call_JitFunction`) when compiling; a row whose `host` is "" also runs its
Triton implementation under TRITON_INTERPRET=1, on the host backend's functions.

NOTE [team descriptor]: on rocSHMEM `team.handle` is the address of a descriptor that the runtime
keeps for each team in the symmetric heap (csrc/gpu: kTeamDescriptorBytes), at the same offset
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
from . import _externs as shl
from ._build import BUILTIN, REDUCE_OPS, device_check, volatile_modifier, watch_spin
from ._ir import constexpr

# descriptor layout (NOTE [team descriptor]); csrc/gpu/gpu_backend.cpp writes the same
START = tl.constexpr(0)
STRIDE = tl.constexpr(1)
SIZE = tl.constexpr(2)
SCRATCH_BYTES = tl.constexpr(3)
EPOCH = tl.constexpr(4)
ROUNDS_OFFSET = tl.constexpr(64)  # bytes: 32 uint64 round counters (teams of up to 2**32 PEs)
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
    op = constexpr(op, "reduce: op")
    if op not in REDUCE_OPS:
        raise ValueError(f"reduce: op={op!r} is not one of {', '.join(REDUCE_OPS)}")
    return tl.constexpr(op)


_redop.signature = inspect.signature(_redop)  # type: ignore[attr-defined]  # Triton reads a builtin's signature there
setattr(_redop, BUILTIN, True)


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
    me = _index_of(d, shl.my_pe())
    device_check(me >= 0, "this PE is not a member of the team it called a team function on")
    return me


# ---- queries ----------------------------------------------------------------------------------


@triton.jit
def team_my_pe_impl(team):
    return _index_of(_desc(team), shl.my_pe())


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
        shl.signal_op(counters + r, 1, _ADD, _world_pe(d, (me + dist) % size))
        shl.signal_wait_until(counters + r, _GE, epoch.to(tl.uint64))
        dist = dist * 2
        r += 1


@triton.jit
def barrier_impl(team):
    shl.quiet()  # barrier = completion of this PE's puts, then sync
    sync_impl(team)


# ---- collectives ------------------------------------------------------------------------------
# Each starts with a sync (every member's dest is ready to be written) and ends with a barrier
# (every put has landed, so dest is complete and source reusable on return).


@triton.jit
def broadcast_impl(team, dest, source, nelems, root):
    d = _desc(team)
    size = tl.load(d + SIZE)
    me = _my_index(d)
    device_check((root >= 0) & (root < size), "broadcast: root is out of range for the team")
    nbytes = nelems * (dest.dtype.element_ty.primitive_bitwidth // 8)
    elsewhere = dest.to(tl.int64) != source.to(tl.int64)
    sync_impl(team)
    if me == root:
        for j in range(0, size):
            if (j != me) | elsewhere:  # the root's own copy, unless dest is source
                shl.putmem_block(dest, source, nbytes, _world_pe(d, j))
    barrier_impl(team)


@triton.jit
def _put_to_every_member(team, dest, source, nelems, SOURCE_PER_MEMBER: tl.constexpr):
    """Block `me` of every member's dest from this PE's source: all of it (fcollect), or its
    block j for member j (alltoall)."""
    d = _desc(team)
    size = tl.load(d + SIZE)
    me = _my_index(d)
    nbytes = nelems * (dest.dtype.element_ty.primitive_bitwidth // 8)
    sync_impl(team)
    for j in range(0, size):
        shl.putmem_block(dest + me * nelems, source + j * nelems * SOURCE_PER_MEMBER, nbytes, _world_pe(d, j))
    barrier_impl(team)


@triton.jit
def fcollect_impl(team, dest, source, nelems):
    _put_to_every_member(team, dest, source, nelems, 0)


@triton.jit
def alltoall_impl(team, dest, source, nelems):
    _put_to_every_member(team, dest, source, nelems, 1)


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
    device_check(chunk > 0, "reduce: the team descriptor's scratch is too small for one element per member")
    scratch = (team.to(tl.int64) + SCRATCH_OFFSET).to(dest.dtype)
    total = tl.cast(nelems, tl.int64)
    for c0 in range(0, total, chunk):
        n = tl.minimum(chunk, total - c0)
        sync_impl(team)  # every member has combined the previous chunk: its slots may be overwritten
        for j in range(0, size):
            shl.putmem_block(scratch + me * chunk, source + c0, n * ELEM, _world_pe(d, j))
        barrier_impl(team)  # every slot of this chunk has landed everywhere
        for t0 in range(0, n, _REDUCE_BLOCK):
            offs = t0 + tl.arange(0, _REDUCE_BLOCK)
            mask = offs < n
            acc = _widen(tl.load(scratch + offs, mask=mask, volatile=True))  # peers wrote it: no cached copy
            for j in range(1, size):
                acc = _combine(acc, _widen(tl.load(scratch + j * chunk + offs, mask=mask, volatile=True)), OP)
            tl.store(dest + c0 + offs, acc.to(dest.dtype.element_ty), mask=mask)


# ---- RMA, direct access and the grid barrier ---------------------------------------------------


@triton.jit
def iput(dest, source, dst_stride, src_stride, nelems, pe):
    # rocSHMEM has no strided put: one element at a time, each issued once per program (p)
    for i in range(nelems):
        shl.p(dest + i * dst_stride, tl.load(source + i * src_stride), pe)


@triton.jit
def iget(dest, source, dst_stride, src_stride, nelems, pe):
    for i in range(nelems):
        tl.store(dest + i * dst_stride, shl.g(source + i * src_stride, pe))


@triton.jit
def put_tile_block(dest, dest_ld, source, source_ld, rows, row_bytes, pe):
    for r in range(rows):  # one blocking row put each: the tile's rows need not be contiguous on either side
        shl.putmem_block(dest + r * dest_ld, source + r * source_ld, row_bytes, pe)


@triton.jit
def _reachable(remote):
    device_check(
        remote.to(tl.int64) != 0,
        "load_remote/store_remote: the peer is not reachable by load/store (remote_ptr is null); use get/put for it",
    )
    return remote


@triton.jit
def no_multicast(ptr):
    # mc_ptr where the vendor has no multicast: null, of ptr's type
    return (ptr.to(tl.int64) * 0).to(ptr.dtype)


@triton.jit
def load_remote(ptr, pe, mask=None, other=None):
    remote = _reachable(shl.remote_ptr(ptr, pe))
    return watch_spin(
        remote, tl.load(remote, mask=mask, other=other, volatile=True, cache_modifier=volatile_modifier())
    )


@triton.jit
def store_remote(ptr, value, pe, mask=None):
    tl.store(_reachable(shl.remote_ptr(ptr, pe)), value, mask=mask)


@triton.jit
def _grid_sync(counter):
    # every program adds 1; the launch has passed once the counter reaches the next multiple of
    # the program count (monotonic: no reset, so consecutive barriers cannot mix)
    # in the counter's type: a signal word (uint64) cannot be mixed with the int32 program count
    n = (tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2)).to(counter.dtype.element_ty)
    arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    shl.wait_until(counter, _GE, arrived - arrived % n + n)


@triton.jit
def barrier_all_grid(counter):
    _grid_sync(counter)
    if tl.program_id(0) + tl.program_id(1) + tl.program_id(2) == 0:
        shl.barrier_all()
    _grid_sync(counter)
