"""Runtime basics and the symmetric heap."""

import torch
from spmd import spmd

import unishmem

ALL_DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
]


@spmd
def test_runtime_properties(rt):
    assert rt.backend == "host"
    assert rt.device == torch.device("cpu")
    assert 0 <= rt.my_pe < rt.n_pes
    assert unishmem.runtime() is rt
    assert unishmem.init() is rt  # same arguments: same runtime
    assert rt.version["backend"] == "host" and rt.version["unishmem"] == unishmem.__version__
    assert rt.launcher == "unishmem run"
    assert (rt.team_world.my_pe, rt.team_world.n_pes) == (rt.my_pe, rt.n_pes)
    assert (rt.team_node.my_pe, rt.team_node.n_pes) == (rt.my_pe, rt.n_pes)


@spmd
def test_allocations_are_symmetric_views(rt):
    a = rt.empty((3, 5), dtype=torch.float32)
    b = rt.zeros(7, dtype=torch.int64)
    c = rt.full((2, 2), 2.5, dtype=torch.float64)
    d = rt.empty_like(c)
    s = rt.signals(3)
    assert a.shape == (3, 5) and a.dtype == torch.float32 and a.is_contiguous()
    assert b.tolist() == [0] * 7
    assert c.tolist() == [[2.5, 2.5], [2.5, 2.5]]
    assert d.shape == c.shape and d.dtype == c.dtype
    assert s.dtype == torch.uint64 and s.tolist() == [0, 0, 0]
    for t in (a, b, c, d, s, a[1:, 2:], b[3]):
        assert rt.is_symmetric(t)
    assert not rt.is_symmetric(torch.zeros(4))
    # the same calls give the same heap offsets on every PE
    offsets = rt.empty(len([a, b, c, d, s]), dtype=torch.int64)
    offsets.copy_(torch.tensor([t.data_ptr() - rt.heap_base for t in (a, b, c, d, s)]))
    everyone = rt.empty((rt.n_pes, offsets.numel()), dtype=torch.int64)
    rt.fcollect(everyone, offsets)
    assert (everyone == offsets).all(), everyone
    for t in (a, b, c, d, s, offsets, everyone):
        rt.free(t)


@spmd
def test_every_dtype_allocates(rt):
    for dtype in ALL_DTYPES:
        t = rt.zeros(5, dtype=dtype)
        t.fill_(1)
        assert t.dtype == dtype and int(t.sum().item()) == 5
        rt.free(t)
    empty = rt.empty(0)
    assert empty.numel() == 0
    rt.free(empty)


@spmd(sizes=(2, 4))
def test_peer_views_load_and_store(rt):
    x = rt.zeros((4, 4), dtype=torch.int32)
    right = (rt.my_pe + 1) % rt.n_pes
    view = rt.peer(x[1:3, 1:3], right)
    assert view.shape == (2, 2) and view.stride() == (4, 1)
    view.fill_(rt.my_pe + 1)  # a store into the right neighbour's copy
    rt.barrier_all()
    left = (rt.my_pe - 1) % rt.n_pes
    assert x[1:3, 1:3].tolist() == [[left + 1] * 2] * 2
    assert x.sum().item() == 4 * (left + 1)
    assert rt.peer(x, rt.my_pe).data_ptr() == x.data_ptr()
    rt.free(x)


@spmd
def test_free_returns_space_deterministically(rt):
    free0 = rt.native.heap_free_bytes()
    ts = [rt.empty(1000 + 100 * i, dtype=torch.uint8) for i in range(5)]
    rt.free(ts[1])
    rt.free(ts[3])
    again = rt.empty(1100, dtype=torch.uint8)  # first fit: the hole ts[1] left
    assert again.data_ptr() == ts[1].data_ptr()
    for t in (ts[0], ts[2], ts[4], again):
        rt.free(t)
    assert rt.native.heap_free_bytes() == free0


@spmd
def test_zeroed_signals_are_ready_for_peers(rt):
    # zeros/signals synchronise after filling, so a peer's signal can never be wiped out
    sig = rt.signals(1)
    rt.signal_op(sig, 1, (rt.my_pe + 1) % rt.n_pes, unishmem.SIGNAL.ADD)
    assert rt.signal_wait_until(sig, unishmem.CMP.EQ, 1) == 1
    rt.free(sig)
