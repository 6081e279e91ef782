"""Remote atomics on int32, int64, uint32, uint64."""

import time

import torch
from spmd import spmd

DTYPES = (torch.int32, torch.int64, torch.uint32, torch.uint64)


@spmd
def test_every_atomic_op(rt):
    check_every_atomic_op(rt)


def check_every_atomic_op(rt):
    """Every host atomic on the right neighbour's word, for each dtype, against the arithmetic."""
    right = (rt.my_pe + 1) % rt.n_pes
    for dtype in DTYPES:
        x = rt.zeros(1, dtype=dtype)
        signed = dtype in (torch.int32, torch.int64)
        rt.atomic_set(x, 5, right)
        rt.barrier_all()
        assert rt.atomic_fetch(x, right) == 5
        rt.barrier_all()
        assert rt.atomic_fetch_add(x, 10, right) == 5
        rt.atomic_add(x, 1, right)
        assert rt.atomic_fetch_inc(x, right) == 16
        rt.atomic_inc(x, right)
        assert rt.atomic_swap(x, 0b1100, right) == 18
        assert rt.atomic_compare_swap(x, 999, 1, right) == 0b1100  # no match: unchanged
        assert rt.atomic_compare_swap(x, 0b1100, 0b1010, right) == 0b1100
        assert rt.atomic_fetch_and(x, 0b0110, right) == 0b1010
        rt.atomic_or(x, 0b1000, right)
        assert rt.atomic_fetch_or(x, 0b0001, right) == 0b1010
        rt.atomic_and(x, 0b1111, right)
        assert rt.atomic_fetch_xor(x, 0b0011, right) == 0b1011
        rt.atomic_xor(x, 0b1000, right)
        assert rt.atomic_fetch(x, right) == 0b0000
        if signed:
            assert rt.atomic_fetch_add(x, -3, right) == 0
            assert rt.atomic_fetch(x, right) == -3
        else:  # unsigned arithmetic wraps
            top = 2**32 - 1 if dtype == torch.uint32 else 2**64 - 1
            rt.atomic_set(x, top, right)
            assert rt.atomic_fetch_add(x, 2, right) == top
            assert rt.atomic_fetch(x, right) == 1
        rt.barrier_all()
        rt.free(x)


@spmd
def test_fetch_add_under_contention_is_exact(rt):
    check_fetch_add_under_contention(rt, 2000)


def check_fetch_add_under_contention(rt, rounds: int):
    counter = rt.zeros(1, dtype=torch.int64)
    seen = set()
    for _ in range(rounds):
        seen.add(rt.atomic_fetch_add(counter, 1, 0))
    rt.barrier_all()
    assert len(seen) == rounds  # every ticket this PE drew is distinct
    if rt.my_pe == 0:
        assert counter.item() == rounds * rt.n_pes
    rt.free(counter)


@spmd
def test_compare_swap_lock_protects_a_counter(rt):
    lock = rt.zeros(1, dtype=torch.int32)
    total = rt.zeros(1, dtype=torch.int64)
    for _ in range(200):
        pause = 1e-5
        while rt.atomic_compare_swap(lock, 0, rt.my_pe + 1, 0) != 0:
            time.sleep(pause)  # back off: with more PEs than cores the holder needs a core to let go
            pause = min(2 * pause, 1e-3)
        value = rt.atomic_fetch(total, 0)  # a plain read-modify-write, made safe by the lock
        rt.atomic_set(total, value + 1, 0)
        assert rt.atomic_swap(lock, 0, 0) == rt.my_pe + 1
    rt.barrier_all()
    if rt.my_pe == 0:
        assert total.item() == 200 * rt.n_pes
    rt.free(lock)
    rt.free(total)
