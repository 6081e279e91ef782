"""all_gather, all_to_all, reduce_scatter and all_reduce as Triton kernels in unishmem.language, over
any team.

Every collective pulls where every member is reachable by load/store (NOTE [pull one-shot], [pull
two-shot]; UNISHMEM_PULL=0: never; all_reduce's pull=False: not that call): each PE reads its
members' data where it lies. Else it pushes: a PE puts its data into each member's receive slot with
putmem_signal (the signal SET to the call's epoch, NOTE [workspaces]) and then waits for its own
slots. Each kernel numbers its calls on the device (NOTE [call counter]) and writes the result into
`out` itself, so a call's launch arguments are the same every time: captured in a CUDA graph, it
replays correctly. x is read in place where it is a contiguous symmetric tensor (and out does not
overlap it), else the kernel copies it into its workspace first, in the same launch (NOTE [copy-in];
a strided x is copied there by torch), so x and out may be any tensors on the runtime's device; out
must be contiguous. Workspaces come in size classes (NOTE [workspaces]): a slot holds `cap`
elements, the class, and a call uses its first numel (or chunk) of them.

The collectives launch on the capped grid (NOTE [persistent grid] in _frame.py). BLOCK is one
constant and every size argument but `cap` is do_not_specialize, so one binary serves every size of
a dtype (a compile with NVSHMEM's bitcode takes 20-30 s); `cap`, a power of two >= 16, is
specialised (always as a multiple of 16), so whole blocks of the receive slots load with 16-byte
accesses (seen in the sm_90 IR). Sizes from 2**31 elements on are 64-bit integers to Triton, and get
a second binary.

NOTE [16-byte copies]: Triton issues a 16-byte access only where it can prove the address 16-byte
aligned and the mask the same over those 16 bytes. The sizes being do_not_specialize, an offset such
as i * numel into out is not known to be a multiple of anything, and all_gather's copy out of its
slots, and two-shot's out of its gathered blocks, were 4-byte accesses at float32 (2-byte at
float16) for every element. all_gather tests whether numel is a multiple of 16 bytes (at run time,
the same in every thread) and if so says so with tl.multiple_of: its copy is compiled twice, with
16-byte accesses for those sizes, element by element for the rest. Two-shot's chunk is its own
choice, a member's share rounded up to 16 bytes, so its copy always says so. `cap` and `piece` are
multiples of 16 bytes by construction (_class, peer_pieces). A hint marks the operation that made
the value, for every use of it, so each hinted value is made where the hint is true (not before the
test), and never a helper's result or argument (inlining drops the mark).
tests/test_kernels_compile.py counts the 16-byte accesses in the sm_90 IR.

NOTE [pull one-shot]: every member reads every member's x where it lies (x in place when it is a
contiguous symmetric tensor, else its copy in the workspace's `src`) through its load/store address
(remote_ptr), so nothing is copied into receive slots and the workspace holds one copy, not 1 + 2n.
all_gather and all_to_all pull the same way (_pull_gather: each (member, block) a task, copied
straight into out), with the same words (_publish, _read_everywhere), and so does reduce_scatter
(_pull_reduce with SCATTER: each PE reads only its own block of every member's src). Per call (epoch
e, NOTE [call counter]): program 0 SETs this PE's `ready` word on every member to e (src holds call
e's data: the launch is stream-ordered after whatever wrote it); programs with blocks wait for every
member's ready >= e, then reduce (or copy) their blocks from the n members' src in member order; the
last program to finish reading (a local count) SETs this PE's `done` word on every member to e and
waits for every member's done >= e, so the call ends only when nobody still reads this PE's src: the
next call, or the caller, may then change it. One copy of each word and no parity are needed: a
member's ready for e + 1 comes after its call e ended, which needed this PE's done for e.

NOTE [pull two-shot]: the two-shot reads each byte of x once, not n times: PE i reduces share i
(chunk elements, a multiple of 16 bytes; the last shares shorter or empty) of every member's src
into its own symmetric `red` (and into out), then copies every other member's red into out. The
first half is the one-shot's protocol on a share; between the halves, the last of this PE's programs
to finish its part of red (a second count) SETs this PE's second ready word on every member to e,
after a fence; programs wait for every member's second ready >= e before they read. The done word
then covers both src and red: a member's red is written for e + 1 only after its call e ended, which
needed this PE's done for e, so one red and no parity are needed.

NOTE [copy engine]: with UNISHMEM_COPY_ENGINE=1 (or where the measured defaults say so) all_gather and
all_to_all, where they would pull, move the data with device copies instead of programs: a
one-program kernel SETs this PE's ready word on every member to the call's epoch and waits for every
member's (src holds its data: x in place, or x copied there by torch first); then one torch copy per
member from its view of src (rt.peer: on a GPU a copy-engine transfer, no SM moves it) into out; then
a second one-program kernel does the same with the done words and ends the call (NOTE [call
counter]), so nobody still reads a src when the call ends. Two launches and n copies a call, where
the pull makes one launch: it pays at large messages, or where the SMs have other work (the GEMMs).
Captured in a CUDA graph, the copies replay with the views they were made with; the handshakes
number the calls on the device."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import _active, _config, jit
from .. import language as shl
from .._workspaces import Workspace, size_class, workspace
from ..enums import REDUCE_OPS
from ..triton_support import PER_CALL
from . import _tuned
from ._calls import (
    STATE_WORDS,
    begin_call,
    copied_in,
    copy_block,
    copy_in,
    end_call,
    handshake,
    handshakes,
    last_to_count,
)
from ._frame import (
    MAX_PIECES,
    PeerViews,
    capped_grid,
    cdiv,
    check_out,
    check_tensor,
    into,
    kernel_team,
    peer_pieces,
    plan_and_launch,
    planned,
    reachable,
    run_plan,
)
from ._routing import needs_op, op_team_arg

ALGORITHMS = ("auto", "one_shot", "two_shot")
# all_reduce's forms with buffers of their own (compared across PEs)
VARIANTS = ("one_shot", "two_shot", "one_shot, push", "two_shot, push")
GATHER_VARIANTS = ("pull", "push", "copy")  # all_gather's and all_to_all's; reduce_scatter's the first two
BLOCK = 4096  # elements a program reduces or copies at a time, whatever the message's size
_MAX_PIECES = tl.constexpr(MAX_PIECES)  # (the frame's, for the kernels)
MIN_CLASS_BYTES = 4096  # the smallest size class of a workspace's slots


@triton.jit
def _combine(a, b, OP: tl.constexpr):
    if OP == 0:
        return a + b
    elif OP == 1:
        return tl.minimum(a, b)
    elif OP == 2:
        return tl.maximum(a, b)
    else:
        return a * b


@triton.jit
def _widen(x, WIDEN: tl.constexpr):
    if WIDEN:  # 16-bit floats are reduced in float32
        return x.to(tl.float32)
    else:
        return x


@triton.jit
def _clamp(value, most):
    return tl.minimum(tl.maximum(value, 0), most)


@jit(do_not_specialize=("stage", "numel", "pieces", "piece"))
def _all_gather(
    x,
    src,
    stage,
    dst,
    sig,
    out,
    state,
    members,
    my_index,
    n,
    numel,
    cap,
    pieces,
    piece,
    ALL_TO_ALL: tl.constexpr,
    BLOCK: tl.constexpr,
    ITEMSIZE: tl.constexpr,
):
    """Task t < n * pieces (NOTE [persistent grid]) sends piece t % pieces of this PE's numel
    elements (ALL_TO_ALL: of its block t // pieces of numel elements) to member t // pieces, then
    waits for that member's piece and copies it into out. stage: x is copied into src first (NOTE
    [copy-in]), else src is x."""
    p = tl.program_id(0)
    grid = tl.num_programs(0)
    epoch = begin_call(state)
    parity = epoch % 2
    dst += parity * n * cap
    sig += parity * n * _MAX_PIECES
    if stage:
        src = copied_in(x, src, n * numel if ALL_TO_ALL else numel, state, epoch)
    for t in range(p, n * pieces, grid):
        first = t % pieces * piece
        shl.putmem_signal_nbi_block(
            dst + my_index * cap + first,
            src + (t // pieces * numel if ALL_TO_ALL else 0) + first,
            _clamp(numel - first, piece) * ITEMSIZE,
            sig + my_index * pieces + t % pieces,
            epoch,
            shl.SIGNAL_SET,
            tl.load(members + t // pieces),
        )
    shl.quiet()  # src (x or its copy) may change after the call: the puts must have read it
    for t in range(p, n * pieces, grid):
        i = t // pieces
        first = t % pieces * piece
        token = shl.signal_wait_until(sig + i * pieces + t % pieces, shl.CMP_GE, epoch)
        # the loads come after the wait (rule 2)
        if numel % (16 // ITEMSIZE) == 0:  # NOTE [16-byte copies]: every value hinted is made here
            at = tl.multiple_of(shl.consume_token(i * cap + first, token), 16 // ITEMSIZE)
            count = tl.multiple_of(tl.minimum(tl.maximum(numel - first, 0), piece), 16 // ITEMSIZE)
            _copy(out + tl.multiple_of(i * numel + first, 16 // ITEMSIZE), dst + at, count, BLOCK)
        else:
            at = shl.consume_token(i * cap + first, token)
            _copy(out + i * numel + first, dst + at, _clamp(numel - first, piece), BLOCK)
    end_call(state, epoch)


@triton.jit
def _copy(dest, source, numel, BLOCK: tl.constexpr):
    for start in range(0, numel, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(dest + offs, tl.load(source + offs, mask=offs < numel), mask=offs < numel)


@triton.jit
def _reduce_block(recv, cap, dest, start, valid, n, OP: tl.constexpr, WIDEN: tl.constexpr, BLOCK: tl.constexpr):
    """dest[start.. start + BLOCK] (those below `valid`) = the reduction of the n slots of recv."""
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= valid:
        acc = _widen(tl.load(recv + offs), WIDEN)
        for s in range(1, n):
            acc = _combine(acc, _widen(tl.load(recv + s * cap + offs), WIDEN), OP)
        tl.store(dest + offs, acc.to(dest.dtype.element_ty))
    else:
        mask = offs < valid
        acc = _widen(tl.load(recv + offs, mask=mask), WIDEN)
        for s in range(1, n):
            acc = _combine(acc, _widen(tl.load(recv + s * cap + offs, mask=mask), WIDEN), OP)
        tl.store(dest + offs, acc.to(dest.dtype.element_ty), mask=mask)


@jit(do_not_specialize=("stage", "chunk", "numel", "pieces", "piece"))
def _reduce(
    x,
    src,
    stage,
    recv,
    sig,
    red,
    gathered,
    sig2,
    out,
    state,
    members,
    my_index,
    n,
    chunk,
    numel,
    cap,
    pieces,
    piece,
    SCATTER: tl.constexpr,
    GATHER: tl.constexpr,
    OP: tl.constexpr,
    WIDEN: tl.constexpr,
    BLOCK: tl.constexpr,
    ITEMSIZE: tl.constexpr,
):
    """Push chunk q of src (SCATTER; else all of it) to member q's slot my_index, each chunk in
    `pieces` pieces; reduce this PE's n slots block by block into out (with GATHER into red, then
    push each reduced block to every member, whose blocks go into out). numel: src's elements (with
    SCATTER the last chunks may hold fewer than chunk, or none; with GATHER chunk is a multiple of 16
    bytes, NOTE [16-byte copies]). Tasks go round the grid (NOTE [persistent grid]). stage: x is
    copied into src first (NOTE [copy-in]), else src is x."""
    # Opens as _all_gather does on purpose: each kernel moves its own buffers to the call's parity
    # (NOTE [workspaces]); a shared @triton.jit helper would have to take and hand back every one.
    p = tl.program_id(0)
    grid = tl.num_programs(0)
    epoch = begin_call(state)
    parity = epoch % 2
    recv += parity * n * cap
    sig += parity * n * _MAX_PIECES
    if stage:
        src = copied_in(x, src, numel, state, epoch)
    for t in range(p, n * pieces, grid):
        q = t // pieces
        first = t % pieces * piece
        base = q * chunk if SCATTER else 0
        shl.putmem_signal_nbi_block(
            recv + my_index * cap + first,
            src + base + first,
            _clamp(_clamp(numel - base, chunk) - first, piece) * ITEMSIZE,
            sig + my_index * pieces + t % pieces,
            epoch,
            shl.SIGNAL_SET,
            tl.load(members + q),
        )
    shl.quiet()  # src (x or its copy) may change after the call: the puts must have read it
    mine = _clamp(numel - my_index * chunk, chunk) if SCATTER else chunk  # the elements of this PE's chunk
    blocks = tl.cdiv(chunk, BLOCK)
    if p < blocks:
        shl.wait_until_all(sig, n * pieces, shl.CMP_GE, epoch)
    if GATHER:  # two-shot: every member gets each reduced block; signals per (block, sender)
        red += parity * cap
        gathered += parity * n * cap
        sig2 += parity * tl.cdiv(cap, BLOCK) * n
        for b in range(p, blocks, grid):
            _reduce_block(recv, cap, red, b * BLOCK, mine, n, OP, WIDEN, BLOCK)
            for j in range(n):
                shl.putmem_signal_nbi_block(
                    gathered + my_index * cap + b * BLOCK,
                    red + b * BLOCK,
                    _clamp(mine - b * BLOCK, BLOCK) * ITEMSIZE,
                    sig2 + b * n + my_index,
                    epoch,
                    shl.SIGNAL_SET,
                    tl.load(members + j),
                )
        shl.quiet()  # red is written again two calls on: these puts must have read it
        for b in range(p, blocks, grid):
            shl.wait_until_all(sig2 + b * n, n, shl.CMP_GE, epoch)
            token = shl.signal_fetch(sig2 + b * n)  # the loads below depend on it (rule 2)
            for j in range(n):  # (chunk and cap: multiples of 16 bytes, NOTE [16-byte copies])
                at = tl.multiple_of(shl.consume_token(j * cap, token), 16 // ITEMSIZE)
                dest = out + tl.multiple_of(j * chunk, 16 // ITEMSIZE)
                copy_block(dest, gathered + at, b * BLOCK, _clamp(numel - j * chunk, chunk), BLOCK)
    else:
        for b in range(p, blocks, grid):
            _reduce_block(recv, cap, out, b * BLOCK, mine, n, OP, WIDEN, BLOCK)
    end_call(state, epoch)


@triton.jit
def _pull_load(
    src, offset, members, token, s, offs, valid, WIDEN: tl.constexpr, ALIGNED: tl.constexpr, FULL: tl.constexpr
):
    """Member s's src at offset + offs (offs below `valid`), through its load/store address."""
    # the address depends on the readiness wait (rule 2); its alignment restated where it is true
    peer = shl.remote_ptr(shl.consume_token(src, token), tl.load(members + s))
    if ALIGNED:  # (each value marked: an offset of 0 leaves no addition to mark)
        peer = tl.multiple_of(tl.multiple_of(peer, 16) + offset, 16)
    else:
        peer += offset
    if FULL:
        return _widen(tl.load(peer + offs), WIDEN)
    else:
        return _widen(tl.load(peer + offs, mask=offs < valid), WIDEN)


@triton.jit
def _pull_sum(
    src,
    offset,
    members,
    token,
    offs,
    valid,
    n,
    OP: tl.constexpr,
    WIDEN: tl.constexpr,
    ALIGNED: tl.constexpr,
    FULL: tl.constexpr,
):
    """The reduction of every member's src at offset + offs (offs below `valid`), read in place, in
    member order (the same on every PE)."""
    acc = _pull_load(src, offset, members, token, 0, offs, valid, WIDEN, ALIGNED, FULL)
    for s in range(1, n):
        acc = _combine(acc, _pull_load(src, offset, members, token, s, offs, valid, WIDEN, ALIGNED, FULL), OP)
    return acc


@triton.jit
def _pull_blocks(
    src,
    offset,
    members,
    token,
    out,
    numel,
    n,
    OP: tl.constexpr,
    WIDEN: tl.constexpr,
    BLOCK: tl.constexpr,
    ALIGNED: tl.constexpr,
):
    """out[:numel] = the reduction of every member's src[offset: offset + numel], BLOCK elements at a
    time round the grid. ALIGNED: src + offset is 16-byte aligned."""
    for b in range(tl.program_id(0), tl.cdiv(numel, BLOCK), tl.num_programs(0)):
        offs = b * BLOCK + tl.arange(0, BLOCK)
        if b * BLOCK + BLOCK <= numel:  # a whole block: no mask
            acc = _pull_sum(src, offset, members, token, offs, numel, n, OP, WIDEN, ALIGNED, True)
            tl.store(out + offs, acc.to(out.dtype.element_ty))
        else:
            acc = _pull_sum(src, offset, members, token, offs, numel, n, OP, WIDEN, ALIGNED, False)
            tl.store(out + offs, acc.to(out.dtype.element_ty), mask=offs < numel)


@jit(do_not_specialize=("stage", "numel"))
def _pull_reduce(
    x,
    src,
    stage,
    ready,
    done,
    count,
    out,
    state,
    members,
    my_index,
    n,
    numel,
    OP: tl.constexpr,
    WIDEN: tl.constexpr,
    BLOCK: tl.constexpr,
    ITEMSIZE: tl.constexpr,
    ALIGNED: tl.constexpr,
    SCATTER: tl.constexpr,
):
    """One-shot all_reduce by pulling (NOTE [pull one-shot]); SCATTER: reduce_scatter, out the
    reduction of block my_index (numel elements) of every member's src. src (x in place, or with
    stage x's copy, NOTE [copy-in]) is symmetric and read by every member; ready and done: a word per
    member; count: this PE's count of programs that have finished reading. ALIGNED: src is
    16-byte aligned (the same on every member)."""
    epoch = begin_call(state)
    _publish(x, src, stage, ready, n * numel if SCATTER else numel, state, members, my_index, n, epoch)
    if tl.program_id(0) < tl.cdiv(numel, BLOCK):
        shl.wait_until_all(ready, n, shl.CMP_GE, epoch)
    token = shl.signal_fetch(ready)
    if SCATTER:  # NOTE [16-byte copies]: block my_index's offset, a multiple of 16 bytes or not
        if ALIGNED and numel % (16 // ITEMSIZE) == 0:
            _pull_blocks(src, my_index * numel, members, token, out, numel, n, OP, WIDEN, BLOCK, True)
        else:
            _pull_blocks(src, my_index * numel, members, token, out, numel, n, OP, WIDEN, BLOCK, False)
    else:
        _pull_blocks(src, 0, members, token, out, numel, n, OP, WIDEN, BLOCK, ALIGNED)
    _read_everywhere(count, done, members, my_index, n, epoch)
    end_call(state, epoch)


@jit(do_not_specialize=("stage", "numel", "chunk"))
def _pull_two_shot(
    x,
    src,
    stage,
    ready,
    done,
    count,
    out,
    state,
    members,
    my_index,
    n,
    numel,
    red,
    chunk,
    OP: tl.constexpr,
    WIDEN: tl.constexpr,
    BLOCK: tl.constexpr,
    ITEMSIZE: tl.constexpr,
    ALIGNED: tl.constexpr,
):
    """Two-shot all_reduce by pulling (NOTE [pull two-shot]): reduce this PE's chunk of every
    member's src into red (and out), then copy every other member's red into out. ready: two words
    per member (src, then red ready); count: two words (programs done reading, done reducing).
    chunk: a multiple of 16 bytes (NOTE [16-byte copies]); ALIGNED: src is 16-byte aligned."""
    p = tl.program_id(0)
    grid = tl.num_programs(0)
    epoch = begin_call(state)
    _publish(x, src, stage, ready, numel, state, members, my_index, n, epoch)
    mine = _clamp(numel - my_index * chunk, chunk)
    blocks = tl.cdiv(mine, BLOCK)
    if p < blocks:
        shl.wait_until_all(ready, n, shl.CMP_GE, epoch)
    token = shl.signal_fetch(ready)
    at = tl.multiple_of(my_index * chunk, 16 // ITEMSIZE)
    for b in range(p, blocks, grid):
        offs = b * BLOCK + tl.arange(0, BLOCK)
        if b * BLOCK + BLOCK <= mine:  # a whole block: no mask
            acc = _pull_sum(src, at, members, token, offs, mine, n, OP, WIDEN, ALIGNED, True)
            tl.store(red + offs, acc.to(red.dtype.element_ty))
            tl.store(out + at + offs, acc.to(out.dtype.element_ty))
        else:
            acc = _pull_sum(src, at, members, token, offs, mine, n, OP, WIDEN, ALIGNED, False)
            tl.store(red + offs, acc.to(red.dtype.element_ty), mask=offs < mine)
            tl.store(out + at + offs, acc.to(out.dtype.element_ty), mask=offs < mine)
    if last_to_count(count + 1):  # every program's part of red is written: publish it
        shl.fence()
        for j in range(n):
            shl.signal_op(ready + n + my_index, epoch, shl.SIGNAL_SET, tl.load(members + j))
    tasks = n * tl.cdiv(chunk, BLOCK)
    if p < tasks:
        shl.wait_until_all(ready + n, n, shl.CMP_GE, epoch)
    token = shl.signal_fetch(ready + n)  # the loads below depend on it (rule 2)
    for t in range(p, tasks, grid):
        j = t % n
        if j != my_index:
            peer = tl.multiple_of(shl.remote_ptr(shl.consume_token(red, token), tl.load(members + j)), 16)
            copy_block(
                out + tl.multiple_of(j * chunk, 16 // ITEMSIZE),
                peer,
                t // n * BLOCK,
                _clamp(numel - j * chunk, chunk),
                BLOCK,
            )
    _read_everywhere(count, done, members, my_index, n, epoch)
    end_call(state, epoch)


@triton.jit
def _publish(x, src, stage, ready, numel, state, members, my_index, n, epoch):
    """SET this PE's ready word on every member to epoch once src holds this call's data (NOTE [pull
    one-shot]): x in place (the launch is stream-ordered after what wrote it), from program 0; or
    with stage x's numel elements copied in by every program, from the last to finish its share."""
    publish = tl.program_id(0) == 0
    if stage:
        publish = copy_in(x, src, numel, state)
    if publish:
        if stage:
            shl.fence()  # the copies, made by every program, reach the peers before the signals
        for j in range(n):
            shl.signal_op(ready + my_index, epoch, shl.SIGNAL_SET, tl.load(members + j))


@triton.jit
def _read_everywhere(count, done, members, my_index, n, epoch):
    """Count this program as done reading (count: this PE's); the last one SETs this PE's done word on
    every member to epoch and waits until every member has read this PE's src: only then may the
    call end, and src change (NOTE [pull one-shot])."""
    if last_to_count(count):
        for j in range(n):
            shl.signal_op(done + my_index, epoch, shl.SIGNAL_SET, tl.load(members + j))
        shl.wait_until_all(done, n, shl.CMP_GE, epoch)


@jit(do_not_specialize=("stage", "numel"))
def _pull_gather(
    x,
    src,
    stage,
    ready,
    done,
    count,
    out,
    state,
    members,
    my_index,
    n,
    numel,
    ALL_TO_ALL: tl.constexpr,
    BLOCK: tl.constexpr,
    ITEMSIZE: tl.constexpr,
    ALIGNED: tl.constexpr,
):
    """all_gather (ALL_TO_ALL: all_to_all) by pulling (NOTE [pull one-shot]): task (j, b) = t % n,
    t // n copies block b of member j's numel elements (ALL_TO_ALL: of its block my_index) from its
    src, read where it lies, into out at j * numel; consecutive programs read different members.
    ALIGNED: src is 16-byte aligned (the same on every member)."""
    p = tl.program_id(0)
    grid = tl.num_programs(0)
    epoch = begin_call(state)
    _publish(x, src, stage, ready, n * numel if ALL_TO_ALL else numel, state, members, my_index, n, epoch)
    tasks = n * tl.cdiv(numel, BLOCK)
    if p < tasks:
        shl.wait_until_all(ready, n, shl.CMP_GE, epoch)
    token = shl.signal_fetch(ready)  # the loads below depend on it (docs/device-library.md, rule 2)
    for t in range(p, tasks, grid):
        j = t % n
        start = t // n * BLOCK
        if ALIGNED and numel % (16 // ITEMSIZE) == 0:  # NOTE [16-byte copies]: every value hinted is made here
            peer = tl.multiple_of(shl.remote_ptr(shl.consume_token(src, token), tl.load(members + j)), 16)
            if ALL_TO_ALL:
                peer += tl.multiple_of(my_index * numel, 16 // ITEMSIZE)
            copy_block(out + tl.multiple_of(j * numel, 16 // ITEMSIZE), peer, start, numel, BLOCK)
        else:
            peer = shl.remote_ptr(shl.consume_token(src, token), tl.load(members + j))
            if ALL_TO_ALL:
                peer += my_index * numel
            copy_block(out + j * numel, peer, start, numel, BLOCK)
    _read_everywhere(count, done, members, my_index, n, epoch)
    end_call(state, epoch)


def _class(numel: int, itemsize: int) -> int:
    """The elements of a workspace slot for a message of numel elements (NOTE [workspaces]): a power of
    two, at least MIN_CLASS_BYTES and 16 elements (so that every slot starts 16-byte aligned)."""
    return size_class(numel, max(16, MIN_CLASS_BYTES // itemsize))


def all_gather(x, out=None, team=None, group=None):
    """Every member's x, concatenated along dim 0 in team order (all_gather_into_tensor). Runs on
    torch's current stream; safe to capture in a CUDA graph once a call of the same shape has run.
    group: a torch.distributed ProcessGroup naming the team instead. Differentiable (the gradient is
    the reduce_scatter of the output's) and traceable by torch.compile (torch.ops.unishmem.all_gather)."""
    if needs_op(x):
        return into(out, torch.ops.unishmem.all_gather(x, op_team_arg(team, group)), "all_gather")
    return _gather(x, out, team, group, "all_gather")


def all_to_all(x, out=None, team=None, group=None):
    """x's dim 0 in team.n_pes equal blocks: block j goes to member j, and block i of the result
    came from member i (all_to_all_single with equal splits). Runs on torch's current stream; safe to
    capture in a CUDA graph once a call of the same shape has run. group: a torch.distributed
    ProcessGroup naming the team instead. Differentiable (the gradient is the all_to_all of the
    output's) and traceable by torch.compile (torch.ops.unishmem.all_to_all)."""
    if needs_op(x):
        return into(out, torch.ops.unishmem.all_to_all(x, op_team_arg(team, group)), "all_to_all")
    return _gather(x, out, team, group, "all_to_all")


def _gather(x, out, team, group, what: str):
    """all_gather, or with what="all_to_all" the exchange of x's blocks: one kernel for both."""
    core = _active.core()
    key = (what, x.dtype, x.shape, x.device, team) if group is None and type(x) is torch.Tensor else None
    plan = planned(core, key)
    if plan is not None:
        return run_plan(core, plan, x, out, what)
    team = kernel_team(core, team, group)
    n = team.n_pes
    to_all = what == "all_to_all"
    problem = check_tensor(core, x, "x", what)
    if problem is None and to_all and (x.dim() == 0 or x.shape[0] % n):
        problem = ValueError(f"all_to_all: x of shape {list(x.shape)} does not split into {n} equal blocks along dim 0")
    if problem is None and x.dim():
        shape = tuple(x.shape) if to_all else (n * x.shape[0], *x.shape[1:])
    else:
        shape = (n,)
    problem = problem or check_out(out, shape, x.dtype, what)
    numel = 0 if problem else x.numel() // n if to_all else x.numel()  # what goes to one member
    itemsize = x.element_size() if problem is None else 1
    cap = _class(numel, itemsize)
    row = {} if problem else _tuned.row_of(core.device, n, what, x.numel() * x.element_size())
    variant = "push" if problem else _gather_variant(core, team, row)
    knobs = _knobs(row, variant)
    if variant != "push":  # (the copy engine's handshakes use the pull's words)
        buffers = lambda: _pull_buffers(x, n, n * cap if to_all else cap)  # noqa: E731
    else:
        buffers = lambda: {  # noqa: E731
            "src": ((n * cap if to_all else cap,), x.dtype),
            "dst": ((2, n * cap), x.dtype),
            "sig": ((2, n * MAX_PIECES), torch.uint64),
            "state": ((STATE_WORDS,), torch.int64),
        }
    ws = workspace(core, team, what, x, buffers, problem, key=(variant, cap), variants=GATHER_VARIANTS)
    b = ws.buffers
    if variant == "copy":
        return plan_and_launch(core, key, ws, shape, _copy_engine_launch(core, ws, team, numel, to_all), x, out)
    if variant == "pull":
        tasks = n * cdiv(numel, BLOCK)
        pull = _pull_launch(_pull_gather, tasks, ws, n, numel, knobs=knobs, ALL_TO_ALL=to_all, ITEMSIZE=itemsize)
        return plan_and_launch(core, key, ws, shape, pull, x, out)
    pieces, piece = peer_pieces(numel, itemsize, knobs["block_bytes"])
    launch = _all_gather.bind(
        capped_grid(_all_gather, n * pieces, knobs["programs"]),
        PER_CALL,  # x
        PER_CALL,  # src
        PER_CALL,  # stage
        b["dst"],
        b["sig"],
        PER_CALL,  # out
        b["state"],
        ws.members,
        ws.my_index,
        n,
        numel,
        cap,
        pieces,
        piece,
        ALL_TO_ALL=to_all,
        BLOCK=BLOCK,
        ITEMSIZE=itemsize,
        num_warps=knobs["warps"],
    )
    return plan_and_launch(core, key, ws, shape, launch, x, out)


def _reduction_args(core, x, op, out, team, what: str, out_shape):
    """(the problem with the arguments or None, the output's shape); team: the call's, checked."""
    problem = check_tensor(core, x, "x", what)
    if problem is None and op not in REDUCE_OPS:
        problem = ValueError(f"{what}: op={op!r} is not one of {', '.join(REDUCE_OPS)}")
    if problem is None and x.dtype in (torch.bool, torch.complex64, torch.complex128):
        problem = TypeError(f"{what}: dtype {x.dtype} cannot be reduced")
    shape = ()
    if problem is None:
        try:
            shape = out_shape(team.n_pes)
        except ValueError as e:
            problem = e
    return problem or check_out(out, shape, x.dtype, what), shape


def reduce_scatter(x, op: str = "sum", out=None, team=None, group=None):
    """Member i gets block i (along dim 0) of the elementwise reduction of every member's x
    (reduce_scatter_tensor); x.shape[0] must split into team.n_pes equal blocks. Runs on torch's
    current stream; safe to capture in a CUDA graph once a call of the same shape has run. group: a
    torch.distributed ProcessGroup naming the team instead. Differentiable for op="sum" (the
    gradient is the all_gather of the output's); traceable by torch.compile."""
    if needs_op(x):
        return into(out, torch.ops.unishmem.reduce_scatter(x, op, op_team_arg(team, group)), "reduce_scatter")
    core = _active.core()
    key = (
        ("reduce_scatter", x.dtype, x.shape, x.device, op, team) if group is None and type(x) is torch.Tensor else None
    )
    plan = planned(core, key)
    if plan is not None:
        return run_plan(core, plan, x, out, "reduce_scatter")
    team = kernel_team(core, team, group)

    def out_shape(n):
        if x.dim() == 0 or x.shape[0] % n:
            raise ValueError(
                f"reduce_scatter: x of shape {list(x.shape)} does not split into {n} equal blocks along dim 0"
            )
        return (x.shape[0] // n, *x.shape[1:])

    problem, shape = _reduction_args(core, x, op, out, team, "reduce_scatter", out_shape)
    n = team.n_pes
    chunk = x.numel() // n if problem is None else 0
    cap = _class(chunk, x.element_size() if problem is None else 1)
    row = {} if problem else _tuned.row_of(core.device, n, "reduce_scatter", x.numel() * x.element_size())
    pulls = problem is None and _pulls(core, team, row)
    knobs = _knobs(row, "pull" if pulls else "push")
    ws = workspace(
        core,
        team,
        "reduce_scatter",
        x,
        (lambda: _pull_buffers(x, n, n * cap)) if pulls else (lambda: _reduce_buffers(x, n, cap, True, False)),
        problem,
        key=("pull" if pulls else "push", cap),
        variants=GATHER_VARIANTS,
    )
    if pulls:
        return plan_and_launch(core, key, ws, shape, _pull_reduce_launch(ws, x, op, n, chunk, True, knobs), x, out)
    return _run_reduce(ws, x, op, out, shape, n, chunk, cap, True, False, knobs, key)


def all_reduce(
    x, op: str = "sum", algorithm: str = "auto", out=None, team=None, group=None, *, pull: bool | None = None
):
    """The elementwise reduction of every member's x, on every member. "one_shot": each PE reads
    all n copies; "two_shot": reduce-scatter then all-gather in one launch; "auto": the measured default
    (NOTE [measured defaults] in _tuned.py), else one-shot up to 256 KiB. Both read the members' data in place where every member is reachable by load/store
    (pull; pull=False pushes it instead, into receive slots). Runs on torch's current stream; safe to capture in a CUDA graph
    once a call of the same shape has run. group: a torch.distributed ProcessGroup naming the team
    instead. Differentiable for op="sum" (its own gradient); traceable by torch.compile."""
    if needs_op(x):
        result = torch.ops.unishmem.all_reduce(x, op, algorithm, pull, op_team_arg(team, group))
        return into(out, result, "all_reduce")
    core = _active.core()
    plain = group is None and type(x) is torch.Tensor
    key = ("all_reduce", x.dtype, x.shape, x.device, op, algorithm, pull, team) if plain else None
    plan = planned(core, key)
    if plan is not None:
        return run_plan(core, plan, x, out, "all_reduce")
    team = kernel_team(core, team, group)
    problem, shape = _reduction_args(core, x, op, out, team, "all_reduce", lambda n: tuple(x.shape))
    if problem is None and algorithm not in ALGORITHMS:
        problem = ValueError(f"all_reduce: algorithm={algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    if problem is None and pull not in (None, True, False):
        problem = TypeError(f"all_reduce: pull must be None, True or False, got {pull!r}")
    n = team.n_pes
    nbytes = 0 if problem else x.numel() * x.element_size()
    row = {} if problem else _tuned.row_of(core.device, n, "all_reduce", nbytes)  # NOTE [measured defaults]
    if algorithm == "auto" and row:
        algorithm = row["variant"].split(",")[0]
    elif algorithm == "auto":
        algorithm = "one_shot" if nbytes <= _tuned.ONE_SHOT_MAX_BYTES else "two_shot"
    if row and row["variant"].split(",")[0] != algorithm:
        row = {}  # (measured for the other algorithm)
    two_shot = algorithm == "two_shot"
    pulls = False
    if problem is None:
        if pull and not reachable(core, team):
            problem = ValueError(
                f"all_reduce: pull=True needs every member of {team.name} reachable by load/store, and some "
                "are not (another node)"
            )
        pulls = _pulls(core, team, row) if pull is None else pull
    variant = algorithm if pulls else f"{algorithm}, push"
    knobs = _knobs(row, variant)
    itemsize = 1 if problem else x.element_size()
    if problem:
        chunk = 0
    elif two_shot:  # a member's share, rounded up to 16 bytes (NOTE [16-byte copies]); the last ones shorter
        chunk = _share(x.numel(), n, itemsize)
    else:
        chunk = x.numel()
    if pulls and two_shot:  # (src holds all of x, red one share of any size of its class)
        cap = _class(x.numel(), itemsize)
        buffers = lambda: _pull_buffers(x, n, cap, red=_share(cap, n, itemsize))  # noqa: E731
    elif pulls:
        cap = _class(chunk, itemsize)
        buffers = lambda: _pull_buffers(x, n, cap)  # noqa: E731
    else:
        cap = _class(chunk, itemsize)
        buffers = lambda: _reduce_buffers(x, n, cap, two_shot, two_shot)  # noqa: E731
    ws = workspace(core, team, "all_reduce", x, buffers, problem, key=(variant, cap), variants=VARIANTS)
    if pulls and two_shot:
        red = ws.buffers["red"]
        tasks = n * cdiv(chunk, BLOCK)
        launch = _pull_launch(
            _pull_two_shot, tasks, ws, n, x.numel(), red, chunk, knobs=knobs, **_reduction_constexprs(x, op)
        )
    elif pulls:
        launch = _pull_reduce_launch(ws, x, op, n, chunk, False, knobs)
    else:
        return _run_reduce(ws, x, op, out, shape, n, chunk, cap, two_shot, two_shot, knobs, key)
    return plan_and_launch(core, key, ws, shape, launch, x, out)


def _share(numel: int, n: int, itemsize: int) -> int:
    """A member's share of numel elements in a two-shot, rounded up to 16 bytes (NOTE [16-byte copies])."""
    return cdiv(cdiv(numel, n), 16 // itemsize) * (16 // itemsize)


def _reduction_constexprs(x, op: str) -> dict:
    """OP, WIDEN (16-bit floats are reduced in float32) and ITEMSIZE of a reduction of x by op."""
    return {"OP": REDUCE_OPS[op], "WIDEN": x.dtype in (torch.float16, torch.bfloat16), "ITEMSIZE": x.element_size()}


def _pull_reduce_launch(ws: Workspace, x, op: str, n: int, numel: int, scatter: bool, knobs: dict):
    """The one-shot's launch (scatter: reduce_scatter's, numel its block's elements) by pulling."""
    constexprs = _reduction_constexprs(x, op)
    return _pull_launch(_pull_reduce, cdiv(numel, BLOCK), ws, n, numel, knobs=knobs, SCATTER=scatter, **constexprs)


def _pulls(core, team, row: dict) -> bool:
    """Whether a collective that can pull (reduce_scatter; all_reduce given pull=None) does on team:
    where every member is reachable by load/store, unless UNISHMEM_PULL=0 (NOTE [pull one-shot]) or,
    UNISHMEM_PULL unset, its measured default `row` pushes (NOTE [measured defaults])."""
    if not (_config.get("UNISHMEM_PULL") and reachable(core, team)):
        return False
    return _config.given("UNISHMEM_PULL") or not row.get("variant", "").endswith("push")


def _gather_variant(core, team, row: dict) -> str:
    """How all_gather or all_to_all moves its data on team: "push" unless every member is reachable by
    load/store and UNISHMEM_PULL is not 0; else, unless UNISHMEM_PULL or UNISHMEM_COPY_ENGINE is set,
    its measured default `row` (NOTE [measured defaults]); else "copy" with UNISHMEM_COPY_ENGINE=1
    (NOTE [copy engine]), "pull" without."""
    if not (_config.get("UNISHMEM_PULL") and reachable(core, team)):
        return "push"
    if row and not (_config.given("UNISHMEM_PULL") or _config.given("UNISHMEM_COPY_ENGINE")):
        return row["variant"]
    return "copy" if _config.get("UNISHMEM_COPY_ENGINE") else "pull"


KNOB_SETTINGS = {
    "programs": "UNISHMEM_MAX_PROGRAMS",
    "block_bytes": "UNISHMEM_COMM_BLOCK_BYTES",
    "warps": "UNISHMEM_COMM_WARPS",
}


def _knobs(row: dict, variant: str) -> dict:
    """The grid's cap (None: max_programs), a push's bytes per program and peer, and the warps of a call
    that runs `variant` (NOTE [measured defaults]): each setting that is set, else the value of the
    measured default `row` where the row is for this variant, else the setting's default."""
    mine = row if row.get("variant") == variant else {}
    return {
        knob: _config.get(name) if _config.given(name) or mine.get(knob) is None else mine[knob]
        for knob, name in KNOB_SETTINGS.items()
    }


def _copy_engine_launch(core, ws: Workspace, team, numel: int, to_all: bool):
    """launch(x, src, stage, out) of all_gather (to_all: all_to_all) by the copy engine (NOTE [copy
    engine]): the ready handshake, a device copy from each member's view of src, the done handshake."""
    ready, done = handshakes(ws, team.n_pes)
    pes = [team.translate_pe(i, core.team_world) for i in range(team.n_pes)]
    first = team.my_pe * numel if to_all else 0  # where this PE's part of a member's src starts
    views = PeerViews(core, pes, first, numel)

    def launch(x, src, stage, out):
        if stage:
            src.view(-1)[: x.numel()].copy_(x.view(-1))
        ready()
        flat = out.view(-1)
        for j, part in enumerate(views.of(src)):
            flat[j * numel : (j + 1) * numel].copy_(part)
        done()

    return launch


def _pull_buffers(x, n: int, elements: int, red: int = 0) -> dict:
    """For a pull (NOTE [pull one-shot]) of x of at most `elements` elements: the staging copy of x
    (read by the peers), a readiness and a done word per member, the count of programs done
    reading, and the call counter; with red (a two-shot, NOTE [pull two-shot]) elements of the
    reduced share, a second readiness word per member and a second count."""
    buffers = {
        "src": ((elements,), x.dtype),
        "ready": ((2 * n if red else n,), torch.uint64),
        "done": ((n,), torch.uint64),
        "count": ((2 if red else 1,), torch.int64),
        "state": ((STATE_WORDS,), torch.int64),
    }
    if red:
        buffers["red"] = ((red,), x.dtype)
    return buffers


def _pull_launch(kernel, tasks: int, ws: Workspace, n: int, numel: int, *args, knobs: dict, **constexprs):
    """launch(x, src, stage, out) of a pull kernel (NOTE [pull one-shot]) on ws for `tasks` tasks, with
    its own args after numel; src's 16-byte alignment passed as ALIGNED (the same on every member:
    the heap's offsets are)."""
    b = ws.buffers
    bound = kernel.bind(
        capped_grid(kernel, tasks, knobs["programs"]),
        PER_CALL,  # x
        PER_CALL,  # src
        PER_CALL,  # stage
        b["ready"],
        b["done"],
        b["count"],
        PER_CALL,  # out
        b["state"],
        ws.members,
        ws.my_index,
        n,
        numel,
        *args,
        BLOCK=BLOCK,
        ALIGNED=PER_CALL,
        num_warps=knobs["warps"],
        **constexprs,
    )

    def launch(x, src, stage, out):
        bound(x, src, stage, out, src.data_ptr() % 16 == 0)

    return launch


def _reduce_buffers(x, n: int, cap: int, scatter: bool, gather: bool) -> dict:
    """For chunks of at most cap elements (a size class): the staging copy of x, two parities of n
    receive slots, their signals (a word per sender and piece) and the call counter; with gather, two
    parities of the reduced chunk, of n gathered slots and of their signals (a word per block and sender)."""
    buffers = {
        "src": ((n * cap if scatter else cap,), x.dtype),
        "recv": ((2, n * cap), x.dtype),
        "sig": ((2, n * MAX_PIECES), torch.uint64),
        "state": ((STATE_WORDS,), torch.int64),
    }
    if gather:
        buffers |= {
            "red": ((2, cap), x.dtype),
            "gathered": ((2, n * cap), x.dtype),
            "sig2": ((2, cdiv(cap, BLOCK) * n), torch.uint64),
        }
    return buffers


def _run_reduce(ws: Workspace, x, op, out, shape, n, chunk, cap, scatter: bool, gather: bool, knobs: dict, key=None):
    core = _active.core()
    b = ws.buffers
    numel, itemsize = x.numel(), x.element_size()
    # one-shot and reduce-scatter have no second exchange: those arguments are never read
    red, gathered, sig2 = (b["red"], b["gathered"], b["sig2"]) if gather else (b["recv"], b["recv"], b["sig"])
    pieces, piece = peer_pieces(chunk, itemsize, knobs["block_bytes"])
    launch = _reduce.bind(
        capped_grid(_reduce, max(n * pieces, cdiv(chunk, BLOCK)), knobs["programs"]),
        PER_CALL,  # x
        PER_CALL,  # src
        PER_CALL,  # stage
        b["recv"],
        b["sig"],
        red,
        gathered,
        sig2,
        PER_CALL,  # out
        b["state"],
        ws.members,
        ws.my_index,
        n,
        chunk,
        numel,
        cap,
        pieces,
        piece,
        SCATTER=scatter,
        GATHER=gather,
        BLOCK=BLOCK,
        num_warps=knobs["warps"],
        **_reduction_constexprs(x, op),
    )
    return plan_and_launch(core, key, ws, shape, launch, x, out)


# How `unishmem compile` builds these kernels with no GPU: float32 data, aligned as torch's and the heap's
# allocations are, sizes typed as a launch of a message under 2**31 elements types them, and `cap` (a
# power of two >= 16, specialised) a multiple of 16, as every launch has it.
_SIG = {"sig": "*u64", "out": "*fp32", "state": "*i64", "members": "*i32", "my_index": "i32", "n": "i32"}
_SIZES = {"numel": "i32", "cap": "i32", "pieces": "i32", "piece": "i32"}


def _aligned(signature: dict) -> list[str]:
    return [name for name, ty in signature.items() if ty.startswith("*")] + ["cap"]


_GATHER_SIG = {"x": "*fp32", "src": "*fp32", "stage": "i32", "dst": "*fp32", **_SIG, **_SIZES}
_REDUCE_SIG = {
    "x": "*fp32",
    "src": "*fp32",
    "stage": "i32",
    "recv": "*fp32",
    "red": "*fp32",
    "gathered": "*fp32",
    "sig2": "*u64",
    **_SIG,
    "chunk": "i32",
    **_SIZES,
}
_PULL_SIG = {
    "x": "*fp32",
    "src": "*fp32",
    "stage": "i32",
    "ready": "*u64",
    "done": "*u64",
    "count": "*i64",
    "out": "*fp32",
    "state": "*i64",
    "members": "*i32",
    "my_index": "i32",
    "n": "i32",
    "numel": "i32",
}
_TWO_SHOT_SIG = {**_PULL_SIG, "red": "*fp32", "chunk": "i32"}
_HANDSHAKE_SIG = {"ready": "*u64", "done": "*u64", "state": "*i64", "members": "*i32", "my_index": "i32", "n": "i32"}
COMPILE = {
    _all_gather: {
        "signature": _GATHER_SIG,
        "constexprs": {"ALL_TO_ALL": False, "BLOCK": BLOCK, "ITEMSIZE": 4},
        "aligned": _aligned(_GATHER_SIG),
    },
    _reduce: [
        {
            "signature": _REDUCE_SIG,
            "constexprs": {
                "SCATTER": scatter,
                "GATHER": scatter,
                "OP": 0,
                "WIDEN": False,
                "BLOCK": BLOCK,
                "ITEMSIZE": 4,
            },
            "aligned": _aligned(_REDUCE_SIG),
        }
        for scatter in (False, True)
    ],
    _pull_reduce: [
        {
            "signature": _PULL_SIG,
            "constexprs": {"OP": 0, "WIDEN": False, "BLOCK": BLOCK, "ITEMSIZE": 4, "ALIGNED": True, "SCATTER": scatter},
            "aligned": _aligned(_PULL_SIG)[:-1],  # (no cap)
        }
        for scatter in (False, True)
    ],
    _pull_two_shot: {
        "signature": _TWO_SHOT_SIG,
        "constexprs": {"OP": 0, "WIDEN": False, "BLOCK": BLOCK, "ITEMSIZE": 4, "ALIGNED": True},
        "aligned": _aligned(_TWO_SHOT_SIG)[:-1],
    },
    handshake: [
        {"signature": _HANDSHAKE_SIG, "constexprs": {"DONE": done}, "aligned": _aligned(_HANDSHAKE_SIG)[:-1]}
        for done in (False, True)
    ],
    _pull_gather: {
        "signature": _PULL_SIG,
        "constexprs": {"ALL_TO_ALL": False, "BLOCK": BLOCK, "ITEMSIZE": 4, "ALIGNED": True},
        "aligned": _aligned(_PULL_SIG)[:-1],
    },
}
