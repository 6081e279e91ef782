"""A tour of unishmem on any number of PEs:  unishmem run -n 4 examples/demo.py

Each PE owns a block of a vector. A ring of put_signal calls gathers every block on every PE,
an atomic ticket counter on PE 0 hands out turns, and reduce / reducescatter finish the job.
Runs on the host backend when no GPU is present (the same code runs on NVSHMEM and rocSHMEM).
"""

import sys

import torch

import unishmem
from unishmem import CMP, SIGNAL


def log(rt, text: str) -> None:
    sys.stdout.write(f"[PE {rt.my_pe}/{rt.n_pes}] {text}\n")
    sys.stdout.flush()


def main() -> None:
    with unishmem.init(heap_size="64M") as rt:
        me, n, block = rt.my_pe, rt.n_pes, 4
        if me == 0:
            log(rt, f"backend={rt.backend} device={rt.device} launcher={rt.launcher}")

        # 1. Ring all-gather with put_signal: at step s, forward the block received at step s-1.
        gathered = rt.zeros(n * block)
        arrived = rt.signals(n)
        gathered[me * block : (me + 1) * block] = torch.arange(block) + 10 * me
        right = (me + 1) % n
        for step in range(n - 1):
            owner = (me - step) % n
            chunk = gathered[owner * block : (owner + 1) * block]
            rt.put_signal(chunk, chunk.clone(), arrived[owner : owner + 1], 1, right, SIGNAL.SET)
            incoming = (me - step - 1) % n
            rt.signal_wait_until(arrived[incoming : incoming + 1], CMP.EQ, 1)
        expected = torch.cat([torch.arange(block) + 10 * pe for pe in range(n)]).float().to(rt.device)
        assert torch.equal(gathered, expected), gathered
        log(rt, f"ring all-gather: {gathered.int().tolist()}")

        # 2. Atomic tickets: every PE draws from one counter on PE 0.
        counter = rt.zeros(1, dtype=torch.int64)
        ticket = rt.atomic_fetch_add(counter, 1, 0)
        rt.barrier_all()
        assert rt.atomic_fetch(counter, 0) == n
        log(rt, f"drew ticket {ticket} of {n}")

        # 3. Collectives: all-reduce and reduce-scatter of the gathered vector.
        total = rt.empty_like(gathered)
        rt.reduce(total, gathered, "sum")
        assert torch.equal(total, expected * n)
        part = rt.empty(block)
        rt.reducescatter(part, gathered, "max")
        assert torch.equal(part, expected[me * block : (me + 1) * block])
        if me == 0:
            log(rt, f"all-reduce sum: {total.int().tolist()}")

        for t in (gathered, arrived, counter, total, part):
            rt.free(t)
        rt.barrier_all()
        if me == 0:
            log(rt, f"demo passed on {n} PEs")


if __name__ == "__main__":
    main()
