"""Put, get, signals, point-to-point waits, ordering."""
import torch

from unishmem import CMP, SIGNAL
from spmd import spmd


def ring(rt):
    return (rt.my_pe + 1) % rt.n_pes, (rt.my_pe - 1) % rt.n_pes


@spmd
def test_put_ring_every_dtype(rt):
    right, left = ring(rt)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int32,
                  torch.int64, torch.uint8, torch.uint64):
        dest = rt.zeros((3, 33), dtype=dtype)
        src = (torch.arange(99) % 100 + rt.my_pe).to(dtype).reshape(3, 33)
        rt.put(dest, src, right)
        rt.barrier_all()
        assert torch.equal(dest, (torch.arange(99) % 100 + left).to(dtype).reshape(3, 33)), dtype
        rt.free(dest)


@spmd
def test_get_ring_and_views(rt):
    right, left = ring(rt)
    x = rt.empty(1000, dtype=torch.float32)
    x.copy_(torch.arange(1000, dtype=torch.float32) * (rt.my_pe + 1))
    rt.barrier_all()
    out = torch.empty(1000)
    rt.get(out, x, right)
    assert torch.equal(out, torch.arange(1000, dtype=torch.float32) * (right + 1))
    part = torch.empty(10)
    rt.get(part, x[500:510], left)  # any contiguous view of a symmetric tensor
    assert torch.equal(part, torch.arange(500, 510, dtype=torch.float32) * (left + 1))
    rt.barrier_all()
    rt.put(x[:10], torch.full((10,), -1.0), right)
    rt.barrier_all()
    assert (x[:10] == -1).all() and x[10].item() == 10 * (rt.my_pe + 1)
    rt.free(x)


@spmd
def test_large_put_and_get(rt):
    right, left = ring(rt)
    n = 4 << 20  # 16 MiB of float32
    x = rt.empty(n)
    src = torch.full((n,), float(rt.my_pe))
    rt.put(x, src, right)
    rt.barrier_all()
    assert (x == left).all()
    back = torch.empty(n)
    rt.get(back, x, left)
    assert (back == (left - 1) % rt.n_pes).all()
    rt.free(x)


@spmd
def test_put_signal_set_and_add(rt):
    right, left = ring(rt)
    data = rt.zeros(64, dtype=torch.int64)
    sig = rt.signals(2)
    rt.put_signal(data, torch.arange(64) + 100 * rt.my_pe, sig[0], 7, right, SIGNAL.SET)
    assert rt.signal_wait_until(sig[0], CMP.EQ, 7) == 7
    assert torch.equal(data, torch.arange(64) + 100 * left)  # the data is there once the signal is
    # ADD from every PE to every PE: the count is exact
    slots = rt.zeros(rt.n_pes, dtype=torch.int64)
    for pe in range(rt.n_pes):
        rt.put_signal(slots[rt.my_pe:rt.my_pe + 1], torch.tensor([rt.my_pe + 1]), sig[1], 3, pe, SIGNAL.ADD)
    assert rt.signal_wait_until(sig[1], CMP.GE, 3 * rt.n_pes) == 3 * rt.n_pes
    rt.barrier_all()
    assert rt.signal_fetch(sig[1]) == 3 * rt.n_pes
    assert slots.tolist() == list(range(1, rt.n_pes + 1))
    rt.free(data)
    rt.free(slots)
    rt.free(sig)


@spmd
def test_signal_op_and_every_comparison(rt):
    right, left = ring(rt)
    sig = rt.signals(1)
    rt.signal_op(sig, 10, right, SIGNAL.SET)
    rt.signal_wait_until(sig, CMP.NE, 0)
    rt.signal_op(sig, 5, right, SIGNAL.ADD)  # may land before or after we look: waits hold either way
    seen = rt.signal_wait_until(sig, CMP.GE, 15)
    assert seen == 15
    for cmp, value in ((CMP.EQ, 15), (CMP.NE, 3), (CMP.GT, 14), (CMP.GE, 15), (CMP.LT, 16), (CMP.LE, 15)):
        assert rt.signal_wait_until(sig, cmp, value) == 15
    rt.barrier_all()
    rt.free(sig)


@spmd
def test_wait_until_and_test_every_dtype(rt):
    right, left = ring(rt)
    for dtype, value in ((torch.int32, -5), (torch.int64, -(2**40)), (torch.uint32, 2**31 + 3),
                         (torch.uint64, 2**63 + 1)):
        flag = rt.zeros(1, dtype=dtype)
        assert rt.test(flag, CMP.EQ, 0) and not rt.test(flag, CMP.NE, 0)
        rt.barrier_all()
        rt.atomic_set(flag, value, right)
        rt.wait_until(flag, CMP.EQ, value)
        for cmp, ok, bad in ((CMP.NE, 0, value), (CMP.GE, value, None), (CMP.LE, value, None)):
            assert rt.test(flag, cmp, ok)
            if bad is not None:
                assert not rt.test(flag, cmp, bad)
        rt.wait_until(flag, CMP.GT, value - 1)
        rt.wait_until(flag, CMP.LT, value + 1)
        assert not rt.test(flag, CMP.GT, value) and not rt.test(flag, CMP.LT, value)
        rt.barrier_all()
        rt.free(flag)


@spmd(sizes=(2, 4))
def test_fence_and_quiet_order_puts(rt):
    # data put, fence, flag put: a PE that sees the flag sees the data
    right, left = ring(rt)
    data = rt.zeros(1 << 16, dtype=torch.int32)
    flag = rt.zeros(1, dtype=torch.int64)
    for round_ in range(1, 6):
        rt.put(data, torch.full((1 << 16,), round_ * 10 + rt.my_pe, dtype=torch.int32), right)
        rt.fence()
        rt.atomic_set(flag, round_, right)
        rt.wait_until(flag, CMP.EQ, round_)
        assert (data == round_ * 10 + left).all()
        rt.quiet()
        rt.barrier_all()
    rt.free(data)
    rt.free(flag)
