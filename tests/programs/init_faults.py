"""PE programs for faults around init. argv[1] picks the case:
kill_in_init   the last PE SIGKILLs itself in the middle of init (after its second exchange)
exit_early     the last PE exits without ever calling init
cycles         20 init/finalize cycles with heap sizes that change every time
rank0_kill     (srun-style ranks) rank 0 SIGKILLs itself after writing its rendezvous file, before
               the first exchange that every rank must reach
rank0_raise    the same, but rank 0 raises instead
raise_after_init  (srun-style ranks) every rank raises once init has returned, finalizing nothing
"""

import os
import signal
import sys
import time

import torch

import unishmem
from unishmem import PeerFailure, bootstrap


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


mode = sys.argv[1]
if mode.startswith("rank0_"):
    me = int(os.environ["SLURM_PROCID"])
    if me == 0:
        gather = bootstrap.Bootstrap.allgather

        def dying_gather(self, obj, kinds=None):
            if mode == "rank0_kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("rank 0 fails on purpose before the first exchange")

        bootstrap.Bootstrap.allgather = dying_gather
    try:
        unishmem.init(heap_size="4M")
    except Exception as e:
        say(f"INIT FAILED rank={me}: {type(e).__name__}: {e}")
        sys.exit(3)
    sys.exit(0)  # must not happen
if mode == "raise_after_init":
    rt = unishmem.init(heap_size="4M")
    say(f"INIT RETURNED rank={rt.my_pe}")
    raise RuntimeError("this program fails after init")
me, n = int(os.environ["UNISHMEM_RANK"]), int(os.environ["UNISHMEM_WORLD_SIZE"])
victim = n - 1
if mode == "exit_early" and me == victim:
    sys.exit(0)
if mode == "kill_in_init" and me == victim:
    gather = bootstrap.Bootstrap.allgather

    def dying_gather(self, obj, kinds=None):
        if self._step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return gather(self, obj, kinds)

    bootstrap.Bootstrap.allgather = dying_gather
if mode in ("kill_in_init", "exit_early"):
    start = time.monotonic()
    try:
        unishmem.init(heap_size="4M")
    except PeerFailure as e:
        say(f"PEERFAILURE pe={me} after={time.monotonic() - start:.2f}s: {e}")
        sys.exit(3)
    say(f"INIT RETURNED pe={me}")  # must not happen
    sys.exit(0)
if mode == "cycles":
    for cycle in range(20):
        heap = (1 + cycle % 5) << 20
        with unishmem.init(heap_size=heap) as rt:
            assert rt.heap_size == heap, (rt.heap_size, heap)
            x = rt.empty(4, dtype=torch.int64)
            x.fill_(rt.my_pe + cycle)
            out = rt.empty(4 * rt.n_pes, dtype=torch.int64)
            rt.fcollect(out, x)
            assert out.tolist() == [pe + cycle for pe in range(rt.n_pes) for _ in range(4)], out
            rt.free(x)
            rt.free(out)
    say(f"CYCLES OK pe={me}")
