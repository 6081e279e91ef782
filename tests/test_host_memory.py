"""Runtime basics and the symmetric heap."""

import mmap

import pytest
import torch
from spmd import spmd

import unishmem
from unishmem import NotSymmetricError, _active

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
    free0 = _active.core().native.heap_free_bytes()
    ts = [rt.empty(1000 + 100 * i, dtype=torch.uint8) for i in range(5)]
    hole = ts[1].data_ptr()  # a freed tensor's data_ptr() is off the heap (NOTE [freed memory])
    rt.free(ts[1])
    rt.free(ts[3])
    again = rt.empty(1100, dtype=torch.uint8)  # first fit: the hole ts[1] left
    assert again.data_ptr() == hole
    for t in (ts[0], ts[2], ts[4], again):
        rt.free(t)
    assert _active.core().native.heap_free_bytes() == free0


@spmd
def test_zeroed_signals_are_ready_for_peers(rt):
    # zeros/signals synchronise after filling, so a peer's signal can never be wiped out
    sig = rt.signals(1)
    rt.signal_op(sig, 1, (rt.my_pe + 1) % rt.n_pes, unishmem.SIGNAL.ADD)
    assert rt.signal_wait_until(sig, unishmem.CMP.EQ, 1) == 1
    rt.free(sig)


@spmd
def test_torch_writes_through_a_freed_tensor_miss_the_allocation_that_reuses_its_bytes(rt):
    """NOTE [freed memory] (issue 44): after rt.free, torch's own operations on any tensor of the freed
    allocation (the tensor, a slice, a dtype view, detach(), .data) write into private memory, not into
    the heap, whose bytes the next allocation of the same size takes; the library still refuses those
    tensors. On a GPU only the refusal holds (docs/getting-started.md, Freed memory)."""
    for free_through_heap_view in (False, True):  # rt.free given a tensor it knows by address only
        a = rt.zeros(16)
        stale = {"a": a, "a[4:8]": a[4:8], "a.view(int32)": a.view(torch.int32), "a.detach()": a.detach()}
        stale["a.data[1:]"] = a.data[1:]
        heap_offset = a.data_ptr() - rt.heap_base
        rt.free(rt.peer(a, rt.my_pe) if free_through_heap_view else a)
        b = rt.full(16, 7.0)
        assert b.data_ptr() - rt.heap_base == heap_offset  # a's bytes, again
        for t in stale.values():
            offset = heap_offset + t.storage_offset() * 4
            with pytest.raises(NotSymmetricError, match=rf"dest \(heap offset {offset}, \d+ bytes\) was freed"):
                rt.put(t, t.clone(), 0)
            assert not rt.is_symmetric(t)
        with pytest.raises(ValueError, match=f"heap offset {heap_offset} is not a live symmetric allocation"):
            rt.free(a)
        if rt.device.type == "cpu":
            a.fill_(3)
            stale["a[4:8]"].add_(1)
            stale["a.view(int32)"][2] = 5
            stale["a.detach()"].copy_(torch.arange(16.0))
            stale["a.data[1:]"].mul_(2)
            with torch.inference_mode():
                stale["a[4:8]"].zero_()
            assert b.tolist() == [7.0] * 16
            assert a.tolist() == [0.0, 2.0, 4.0, 6.0] + [0.0] * 4 + [2.0 * i for i in range(8, 16)]
        rt.free(b)


@spmd
def test_freed_tensors_keep_no_memory(rt):
    """NOTE [freed memory]: the private memory of a freed allocation goes with its last tensor, and
    the heap's memory is never released through it."""
    if rt.device.type != "cpu":
        return  # a GPU runtime moves nothing off its heap

    def resident_bytes() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * mmap.PAGESIZE

    def mappings() -> int:
        with open("/proc/self/maps") as f:
            return len(f.readlines())

    free_before, rss_before, maps_before = _active.core().native.heap_free_bytes(), resident_bytes(), mappings()
    for _ in range(200):
        t = rt.empty(1 << 20, dtype=torch.uint8)
        rt.free(t)
        t.fill_(1)  # commits the private pages of all 1 MiB
        del t
    assert _active.core().native.heap_free_bytes() == free_before
    assert resident_bytes() - rss_before < 64 << 20, (rss_before, resident_bytes())  # 200 MiB if kept
    assert mappings() - maps_before < 10, (maps_before, mappings())
    x = rt.full(1 << 20, 5, dtype=torch.uint8)  # the heap is intact
    assert int(x.sum()) == 5 << 20
    rt.free(x)
