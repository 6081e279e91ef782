"""A small job for launcher tests: ring put, all-gather, all-reduce; prints one OK line per PE."""

import sys

import torch

import unishmem


def say(line: str) -> None:
    sys.stdout.write(line + "\n")  # one write per line: PEs share the terminal
    sys.stdout.flush()


group = None
if "--group" in sys.argv:  # reuse an existing torch.distributed process group
    import torch.distributed as dist

    dist.init_process_group("gloo")
    group = dist.group.WORLD

with unishmem.init(heap_size="16M", group=group) as rt:
    me, n = rt.my_pe, rt.n_pes
    x = rt.zeros(4, dtype=torch.int64)
    rt.put(x, torch.full((4,), me), (me + 1) % n)
    rt.barrier_all()
    assert (x == (me - 1) % n).all(), x
    everyone = rt.empty(n, dtype=torch.int64)
    rt.fcollect(everyone, x[:1])
    assert everyone.tolist() == [(pe - 1) % n for pe in range(n)], everyone
    rt.reduce(x, x, "sum")
    assert (x == n * (n - 1) // 2).all(), x
    for t in (x, everyone):
        rt.free(t)
    if group is not None:  # the kernels take the torch.distributed group for their team (TRITON_INTERPRET=1)
        import unishmem.kernels as K
        from unishmem.kernels import functional

        y = K.all_reduce(torch.full((3,), float(me + 1)), group=group)
        assert y.tolist() == [n * (n + 1) / 2] * 3, y
        out = torch.empty(n, 2)
        functional.all_gather_into_tensor(out, torch.full((2,), float(me)), group=group)
        assert out[:, 0].tolist() == list(range(n)), out
    say(f"OK pe={me} n={n} launcher={rt.launcher}")
if group is not None:
    dist.destroy_process_group()
