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
"""

import triton
import triton.language as tl

STATE_WORDS = 2


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
