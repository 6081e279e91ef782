"""Put, get, signals, point-to-point waits, ordering."""

import gc
import inspect
import sys
import weakref

import torch
from spmd import spmd

from unishmem import CMP, SIGNAL, _active


def ring(rt):
    return (rt.my_pe + 1) % rt.n_pes, (rt.my_pe - 1) % rt.n_pes


@spmd
def test_put_ring_every_dtype(rt):
    right, left = ring(rt)
    for dtype in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.uint64,
    ):
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
        rt.put_signal(slots[rt.my_pe : rt.my_pe + 1], torch.tensor([rt.my_pe + 1]), sig[1], 3, pe, SIGNAL.ADD)
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
    for dtype, value in (
        (torch.int32, -5),
        (torch.int64, -(2**40)),
        (torch.uint32, 2**31 + 3),
        (torch.uint64, 2**63 + 1),
    ):
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


class _Tagged(torch.Tensor):
    """A tensor subclass: it may override what the checks read, so it never takes a hot call."""


@spmd
def test_hot_calls_see_every_change_to_a_tensor(rt):
    """NOTE [hot calls]: after a first checked call, put/get/put_signal/waits trust what they
    found; every way of changing a tensor (or freeing it) must still reach the full checks."""
    import pytest

    from unishmem import NotSymmetricError

    right, left = ring(rt)
    dest, sig = rt.zeros((4, 4), dtype=torch.float32), rt.signals(2)
    s0, s1 = sig[0], sig[1]  # views kept: indexing makes a new tensor, which is checked afresh
    src = torch.zeros(4, 4)
    for i in range(1, 4):  # writing into the source bumps its version: the data must still be current
        src.fill_(i * 10 + rt.my_pe)
        rt.put_signal(dest, src, s0, i, right)
        assert rt.signal_wait_until(s0, CMP.GE, i) == i
        assert torch.equal(dest, torch.full((4, 4), float(i * 10 + left)))
        rt.barrier_all()
    # The hot call really is taken for tensors that passed (else this whole path is dead code).
    hot = sys.modules[type(_active.core().native).__module__]
    assert hot.hot_put_signal(_active.core().hot_path.table.address, dest, src, s0, 4, right, SIGNAL.SET, None) is None
    assert hot.hot_signal_wait_until(_active.core().hot_path.table.address, s0, CMP.GE, 4, None) == 4
    rt.barrier_all()

    src.t_()  # in place, now not contiguous
    with pytest.raises(ValueError, match="must be contiguous"):
        rt.put(dest, src, right)
    src.t_()
    src.data = torch.full((4, 4), -1.0)  # new storage, same version: the data pointer tells
    rt.put(dest, src, right)
    rt.barrier_all()
    assert (dest == -1).all()
    rt.barrier_all()  # every PE has looked before any writes into its dest again
    src.resize_(2, 2)  # fewer bytes than dest
    with pytest.raises(ValueError, match="dest has 16 elements"):
        rt.put(dest, src, right)
    with pytest.raises(TypeError, match="dest is torch.float32 but source is torch.float64"):
        rt.put(dest, torch.zeros(4, 4, dtype=torch.float64), right)
    got = torch.empty(4, 4)
    rt.get(got, dest, right)
    got.data = torch.empty(16)  # the destination of a get moved: the copy must follow it
    rt.get(got, dest.view(-1), right)
    assert (got == -1).all()
    tagged = torch.full((4, 4), 7.0).as_subclass(_Tagged)
    rt.put(dest, tagged, right)
    rt.barrier_all()
    assert (dest == 7).all()
    with pytest.raises(TypeError, match="1-element torch.uint64"):
        rt.signal_wait_until(sig.view(torch.int64)[:1], CMP.GE, 0)
    with pytest.raises(TypeError, match="1-element torch.uint64"):
        rt.signal_wait_until(sig, CMP.GE, 0)  # two words
    with pytest.raises(ValueError, match="pe=-1"):
        rt.put(dest, got, -1)

    rt.free(dest)  # collective; afterwards no call may trust what it found before
    with pytest.raises(NotSymmetricError, match="freed"):
        rt.put(dest, got, right)
    with pytest.raises(NotSymmetricError, match="freed"):
        rt.get(got, dest, right)
    rt.barrier_all()
    rt.signal_op(s1, 1, right)
    assert rt.signal_wait_until(s1, CMP.EQ, 1) == 1
    rt.barrier_all()
    rt.free(sig)
    with pytest.raises(NotSymmetricError, match="freed"):
        rt.signal_wait_until(s1, CMP.EQ, 1)
    with pytest.raises(NotSymmetricError, match="freed"):
        rt.signal_op(s1, 2, right)


@spmd
def test_hot_methods_take_the_methods_arguments(rt):
    """NOTE [hot methods]: a CPU Runtime's put/get/put_signal/... are C callables that stand in
    for the Python methods; they must bind arguments exactly as the methods do."""
    import pytest

    from unishmem import Runtime

    right, left = ring(rt)
    dest, src, sig = rt.zeros(4, dtype=torch.int32), torch.arange(4, dtype=torch.int32), rt.signals(1)
    s0 = sig[0]
    assert type(rt.put_signal).__name__ == "HotMethod"
    for name in ("put", "get", "put_signal", "signal_op", "signal_wait_until", "barrier_all", "sync_all"):
        bound = getattr(Runtime, name).__get__(rt)
        assert inspect.signature(getattr(rt, name)) == inspect.signature(bound), name
        assert getattr(rt, name).__doc__ == bound.__doc__, name
    for round_ in range(1, 3):  # first checked, then hot: keywords and defaults alike
        rt.put_signal(dest, src + round_, s0, pe=right, value=2 * round_ - 1)
        assert rt.signal_wait_until(value=2 * round_ - 1, cmp=CMP.GE, signal=s0) == 2 * round_ - 1
        rt.barrier_all(stream=None)  # every PE has seen its put before the adds come
        rt.signal_op(s0, 1, right, op=SIGNAL.ADD, stream=None)
        assert rt.signal_wait_until(s0, CMP.EQ, 2 * round_) == 2 * round_
        assert torch.equal(dest, torch.arange(4, dtype=torch.int32) + round_)
        rt.sync_all()
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'pe'"):
        rt.put(dest, src)
    with pytest.raises(TypeError, match="multiple values for argument 'pe'"):
        rt.put(dest, src, right, pe=right)
    with pytest.raises(TypeError, match="unexpected keyword argument 'peer'"):
        rt.put(dest, src, peer=right)
    with pytest.raises(TypeError, match="takes from 4 to 5 positional arguments but 6 were given"):
        rt.put(dest, src, right, None, None)
    rt.barrier_all()
    # NOTE [hot calls]: an entry goes with its tensor, so a loop that indexes afresh each time (sig[0]: a
    # new view per call) does not grow the table.
    before = _active.core().hot_path.table.entries
    for _ in range(200):
        rt.signal_op(sig[0], 0, right, op=SIGNAL.ADD)
    assert _active.core().hot_path.table.entries <= before + 1, (before, _active.core().hot_path.table.entries)
    rt.barrier_all()
    rt.free(dest)
    rt.free(sig)

    class Mine(Runtime):  # a subclass's own method is never shadowed by a hot method
        def put(self, dest, source, pe, stream=None):
            return "mine"

    sub = object.__new__(Mine)
    _active.core().hot_path.install(sub, Runtime)
    assert "put" not in vars(sub) and type(vars(sub)["get"]).__name__ == "HotMethod"
    assert sub.put(None, None, 0) == "mine"
    del sub

    class Owner:  # a hot method's fallback is bound to what holds it: the cycle must be collectable
        def call(self, dest, source, pe, stream=None):
            return "fallback"

    owner = Owner()
    owner.put = sys.modules[type(_active.core().native).__module__].make_hot_method(
        "put", _active.core().hot_path.table.address, owner.call, ("dest", "source", "pe", "stream"), (None,)
    )
    assert owner.put(dest, src, right) == "fallback"  # dest is freed: no hot call trusts it
    gone = weakref.ref(owner)
    del owner
    gc.collect()
    assert gone() is None


@spmd
def test_views_made_in_the_call(rt):
    """NOTE [view checks]: a view made in the call takes the hot call, checked from its storage
    against the live allocations; what the full checks refuse, and views of freed or reallocated
    memory, still reach them."""
    import pytest

    from unishmem import NotSymmetricError

    right, left = ring(rt)
    hot, addr = sys.modules[type(_active.core().native).__module__], _active.core().hot_path.table.address
    n = 4
    buf, sig = rt.zeros((2, 3 * n), dtype=torch.int32), rt.signals(3)
    flat = buf.view(-1)
    src = torch.arange(6 * n, dtype=torch.int32) + 100 * rt.my_pe
    views = [  # (dest view made in the call, its elements in `flat`)
        (lambda: flat[n : 2 * n], slice(n, 2 * n)),
        (lambda: buf[1], slice(3 * n, 6 * n)),
        (lambda: buf[0, 2 * n :], slice(2 * n, 3 * n)),
        (lambda: buf.view(torch.int16)[1, : 2 * n].view(torch.int32), slice(3 * n, 4 * n)),  # dtype views
        (lambda: buf.detach().narrow(1, 0, n)[1:], slice(3 * n, 4 * n)),
        (lambda: buf.data[0].unsqueeze(0)[:, :n], slice(0, n)),
        (lambda: flat.as_strided((2, n), (n, 1), 2 * n), slice(2 * n, 4 * n)),
    ]
    for round_, (view, where) in enumerate(views, 1):
        count = where.stop - where.start
        part = src[:count] + round_
        # the hot call itself takes every view (NotImplemented would mean: the full checks)
        assert hot.hot_put_signal(addr, view(), part, sig[0], round_, right, SIGNAL.SET, None) is None
        assert hot.hot_signal_wait_until(addr, sig[0:1], CMP.GE, round_, None) == round_
        assert torch.equal(flat[where], torch.arange(count, dtype=torch.int32) + 100 * left + round_), round_
        got = torch.empty(count, dtype=torch.int32)
        assert hot.hot_get(addr, got.view(view().shape), view(), right, None) is None
        rt.barrier_all()  # every PE has read its dest before the next round writes it
        assert torch.equal(got, torch.arange(count, dtype=torch.int32) + 100 * rt.my_pe + round_), round_
        rt.put(view(), part - round_, right)  # and through the method, as a user calls it
        rt.barrier_all()
        assert torch.equal(flat[where], torch.arange(count, dtype=torch.int32) + 100 * left), round_
        rt.barrier_all()
    for k in range(3):  # every word of the signals, indexed or sliced afresh
        rt.signal_op(sig[k], 0, right, op=SIGNAL.SET)
        rt.barrier_all()
        rt.signal_op(sig[k : k + 1], k + 1, right, op=SIGNAL.ADD)
        assert rt.signal_wait_until(sig[k], CMP.EQ, k + 1) == k + 1
        rt.barrier_all()
    entries = _active.core().hot_path.table.entries
    for k in range(50):
        rt.put(flat[k % n : k % n + n], src[:n], right)
    assert _active.core().hot_path.table.entries == entries, "views made in the call are not remembered"
    assert _active.core().hot_path.table.allocations >= 2
    rt.barrier_all()

    # what the full checks refuse misses the hot call, and the checks say why
    assert hot.hot_put(addr, buf[:, 0], src[:2], right, None) is NotImplemented
    with pytest.raises(ValueError, match="must be contiguous"):
        rt.put(buf[:, 0], src[:2], right)
    with pytest.raises(TypeError, match="1-element torch.uint64"):
        rt.signal_op(sig.view(torch.int64)[0], 1, right)
    with pytest.raises(TypeError, match="1-element torch.uint64"):
        rt.signal_wait_until(sig[0:2], CMP.GE, 0)
    with pytest.raises(NotSymmetricError, match="not in the symmetric heap"):
        rt.put(src[:n], src[n : 2 * n], right)
    heap = rt.peer(flat, rt.my_pe)  # the heap's own storage, not the allocation's: by address
    assert hot.hot_put(addr, heap[:n], src[:n], right, None) is NotImplemented
    rt.barrier_all()

    # freed, and its bytes reallocated: views made afterwards from the old tensor miss, and raise
    old, where = flat, flat.data_ptr()  # freed, it lies off the heap (NOTE [freed memory])
    rt.free(buf)
    again = rt.zeros(6 * n, dtype=torch.int32)
    assert again.data_ptr() == where  # same bytes, new allocation (the allocator reuses them)
    assert hot.hot_put(addr, old[:n], src[:n], right, None) is NotImplemented
    with pytest.raises(NotSymmetricError, match="freed"):
        rt.put(old[:n], src[:n], right)
    with pytest.raises(NotSymmetricError, match="freed"):
        rt.get(src[:n], old[n : 2 * n], right)
    assert hot.hot_put(addr, again[:n], src[:n], right, None) is None  # the new one's views are hot
    rt.barrier_all()
    assert torch.equal(again[:n], torch.arange(n, dtype=torch.int32) + 100 * left)
    rt.free(sig)
    with pytest.raises(NotSymmetricError, match="freed"):
        rt.signal_op(sig[1], 1, right)
    rt.barrier_all()
    rt.free(again)
