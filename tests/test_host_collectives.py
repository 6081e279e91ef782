"""broadcast, fcollect, alltoall, reduce and reducescatter over dtypes and ops."""

import torch
from spmd import spmd

REDUCE_DTYPES = (
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
)


def contribution(pe: int, n: int, dtype) -> torch.Tensor:
    # small values, so sums and products are exact in every dtype (also int8 and float16)
    return ((torch.arange(n) + pe) % 3 + 1).to(dtype)


def expected(op: str, n_pes: int, n: int, dtype) -> torch.Tensor:
    parts = torch.stack([contribution(pe, n, torch.float64) for pe in range(n_pes)])
    ref = {"sum": parts.sum(0), "prod": parts.prod(0), "min": parts.min(0).values, "max": parts.max(0).values}[op]
    return ref.to(dtype)


@spmd
def test_broadcast_from_every_root(rt):
    for root in range(rt.n_pes):
        src = rt.full(1000, rt.my_pe * 10 + 1, dtype=torch.int32)
        dst = rt.zeros(1000, dtype=torch.int32)
        rt.broadcast(dst, src, root)
        assert (dst == root * 10 + 1).all()
        rt.free(src)
        rt.free(dst)


@spmd
def test_fcollect(rt):
    for dtype in (torch.float32, torch.bfloat16, torch.int8):
        src = rt.full((3, 7), rt.my_pe, dtype=dtype)
        dst = rt.empty((rt.n_pes * 3, 7), dtype=dtype)
        rt.fcollect(dst, src)
        for pe in range(rt.n_pes):
            assert (dst[pe * 3 : (pe + 1) * 3] == pe).all()
        rt.free(src)
        rt.free(dst)


@spmd
def test_alltoall(rt):
    n = rt.n_pes
    block = 5
    src = rt.empty(n * block, dtype=torch.int64)
    for j in range(n):  # block j goes to PE j
        src[j * block : (j + 1) * block] = 100 * rt.my_pe + j
    dst = rt.zeros(n * block, dtype=torch.int64)
    rt.alltoall(dst, src)
    for i in range(n):  # block i came from PE i
        assert (dst[i * block : (i + 1) * block] == 100 * i + rt.my_pe).all(), dst
    rt.free(src)
    rt.free(dst)


@spmd
def test_reduce_every_op_and_dtype(rt):
    n = 1000 + rt.n_pes * 3  # chunks of unequal size
    for dtype in REDUCE_DTYPES:
        for op in ("sum", "min", "max", "prod"):
            src = rt.empty(n, dtype=dtype)
            src.copy_(contribution(rt.my_pe, n, dtype))
            dst = rt.empty(n, dtype=dtype)
            rt.reduce(dst, src, op)
            assert torch.equal(dst, expected(op, rt.n_pes, n, dtype)), (dtype, op)
            rt.reduce(src, src, op)  # in place
            assert torch.equal(src, expected(op, rt.n_pes, n, dtype)), (dtype, op, "in place")
            rt.free(src)
            rt.free(dst)


@spmd
def test_reduce_float_accuracy_and_large(rt):
    n = 1 << 20
    src = rt.empty(n)
    src.copy_(torch.linspace(0, 1, n) * (rt.my_pe + 1))
    dst = rt.empty(n)
    rt.reduce(dst, src, "sum")
    ref = torch.linspace(0, 1, n) * sum(range(1, rt.n_pes + 1))
    torch.testing.assert_close(dst, ref)
    rt.free(src)
    rt.free(dst)


@spmd
def test_reducescatter(rt):
    block = 17
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.uint8):
        for op in ("sum", "max"):
            src = rt.empty(block * rt.n_pes, dtype=dtype)
            src.copy_(contribution(rt.my_pe, block * rt.n_pes, dtype))
            dst = rt.empty(block, dtype=dtype)
            rt.reducescatter(dst, src, op)
            ref = expected(op, rt.n_pes, block * rt.n_pes, dtype)[rt.my_pe * block : (rt.my_pe + 1) * block]
            assert torch.equal(dst, ref), (dtype, op)
            rt.free(src)
            rt.free(dst)


@spmd(sizes=(4,))
def test_collectives_on_a_strided_team(rt):
    odd = rt.team_world.split_strided(1, 2, 2)
    even = rt.team_world.split_strided(0, 2, 2)
    team = odd or even
    src = rt.full(4, rt.my_pe, dtype=torch.float64)
    dst = rt.empty(4, dtype=torch.float64)
    rt.reduce(dst, src, "sum", team=team)
    assert (dst == (4 if rt.my_pe % 2 else 2)).all()
    rt.broadcast(dst, src, 1, team=team)
    assert (dst == team.translate_pe(1, rt.team_world)).all()
    rt.free(src)
    rt.free(dst)
    team.destroy()
