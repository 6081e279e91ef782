"""The call counter every kernel of unishmem.kernels keeps on the device.

NOTE [call counter]: a kernel numbers its calls itself, so that its launch arguments are the same at
every call and a launch captured in a CUDA graph replays correctly any number of times. Each
workspace has a `state` word pair on the device: state[0] is the epoch of the last call that
finished, state[1] counts the programs of the running call that have finished. Every program of a
call reads the epoch as state[0] + 1 (`begin_call`); the last program to finish writes it back and
resets the count (`end_call`). No program of the call can read state[0] after that write: the
writer is the last of them, and launches on one stream do not overlap, so the next call reads the
new value. The epoch then does what the host's did (NOTE [workspaces]): signals are SET to it and
waited for with >=, and it picks the receive buffers' parity.
A kernel must call `end_call` on every path of every program, once, with the grid it was launched
with: the count is compared with the number of programs.

NOTE [copy-in]: a kernel whose input is not a symmetric tensor (peers must read it, or the vendor's
puts send from it) copies it into its workspace itself, in the same launch: every program copies
its share of blocks (grid-stride), then counts itself in state[2]; the last to do so resets the
count and goes on to publish the copy (`copied_in` SETs state[3] to the epoch for this PE's
programs, which wait for it before they read the copy; the pull one-shot signals its peers instead).
Programs copy before they wait for anything, so with the grid resident (NOTE [persistent grid]) the
count always completes. No program of the next call can count before this one's last reset: the
next launch starts after this one ends. The same count and word make `all_past`, a wait for every
program of the call to have reached it (dispatch stages its rows with it, NOTE [routing] in moe.py).
"""

import triton
import triton.language as tl

from .. import jit
from .. import language as shl

STATE_WORDS = 5  # epoch, programs finished, programs done copying in, the epoch copied in, the epoch routed


@triton.jit
def begin_call(state):
    """This call's epoch (int64, from 1)."""
    return tl.load(state, volatile=True) + 1


@triton.jit
def end_call(state, epoch):
    """Count this program as finished; the last one records the call as finished."""
    programs = tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2)
    finished = tl.atomic_add(state + 1, 1, sem="acq_rel", scope="gpu")
    if finished == programs - 1:
        tl.store(state + 1, 0)
        tl.atomic_xchg(state, epoch, sem="release", scope="gpu")


COPY_BLOCK = tl.constexpr(4096)  # elements a program copies in at a time


@triton.jit
def copy_block(dest, source, start, valid, BLOCK: tl.constexpr):
    """Elements start.. start + BLOCK of source into dest, those below `valid`."""
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= valid:  # a whole block: no mask, vectorised loads and stores where aligned
        tl.store(dest + offs, tl.load(source + offs))
    else:
        tl.store(dest + offs, tl.load(source + offs, mask=offs < valid), mask=offs < valid)


@triton.jit
def _copy_share(x, dest, numel):
    """This program's share of x's numel elements into dest, COPY_BLOCK at a time round the grid."""
    for b in range(tl.program_id(0), tl.cdiv(numel, COPY_BLOCK), tl.num_programs(0)):
        copy_block(dest, x, b * COPY_BLOCK, numel, COPY_BLOCK)


@triton.jit
def last_to_count(word):
    """Count this program in word; True in the last program of the grid, which resets the count,
    once every program's earlier loads and stores are done (stores visible at gpu scope)."""
    return last_to_count_of(word, tl.num_programs(0))


@triton.jit
def last_to_count_of(word, expected):
    """Count this program (or this task of it) in word; True in the one that counts `expected`, which
    resets the count, once every earlier counter's loads and stores are done (visible at gpu scope)."""
    tl.debug_barrier()  # every thread's accesses come before the count's release
    finished = tl.atomic_add(word, 1, sem="acq_rel", scope="gpu")
    last = finished == expected - 1
    if last:
        tl.store(word, 0)
    return last


@triton.jit
def copy_in(x, dest, numel, state):
    """Copy this program's share of x's numel elements into dest (NOTE [copy-in]); True in the last
    program of the grid to finish its share, once every program's copies are visible at gpu scope."""
    _copy_share(x, dest, numel)
    return last_to_count(state + 2)


@triton.jit
def all_past(state, epoch):
    """Wait until every program of this call (epoch) has called it; a token (for consume_token) that
    orders this program's later loads after every program's stores before its call."""
    if last_to_count(state + 2):
        tl.atomic_xchg(state + 3, epoch, sem="release", scope="gpu")
    shl.wait_until(state + 3, shl.CMP_GE, epoch)
    return tl.atomic_add(state + 3, 0, sem="acquire", scope="gpu")


@triton.jit
def copied_in(x, dest, numel, state, epoch):
    """dest, holding x's numel elements once every program of this call (epoch) has copied its share
    (NOTE [copy-in]), as a pointer that depends on that wait (so that nothing reads dest before it)."""
    _copy_share(x, dest, numel)
    return shl.consume_token(dest, all_past(state, epoch))


@jit
def handshake(ready, done, state, members, my_index, n, DONE: tl.constexpr):
    """One program: SET this PE's ready word (DONE: done word) on every member to the call's epoch and
    wait until every member's is; with DONE, the call ends. Around device copies that read the members'
    data in place (NOTE [copy engine] in collectives.py, NOTE [ag_gemm copy engine] in gemm.py): ready
    says a PE's source is whole, done that it has finished reading the others'."""
    epoch = begin_call(state)
    words = done if DONE else ready
    for j in range(n):
        shl.signal_op(words + my_index, epoch, shl.SIGNAL_SET, tl.load(members + j))
    shl.wait_until_all(words, n, shl.CMP_GE, epoch)
    if DONE:
        end_call(state, epoch)


def handshakes(ws, n: int):
    """(ready, done): the two handshake launches of a workspace with ready, done and state buffers, on its
    team of n members, bound once (one program each)."""
    b = ws.buffers
    args = (b["ready"], b["done"], b["state"], ws.members, ws.my_index, n)
    return tuple(handshake.bind((1,), *args, DONE=flag) for flag in (False, True))
