"""unishmem.kernels under TRITON_INTERPRET=1 on the host backend at 1, 2 and 4 PEs, against torch
references built from what every PE passed (torch.distributed's all_gather_into_tensor,
reduce_scatter_tensor and all_reduce semantics). Values are small integers, so float sums are exact
in any order."""
import torch

import unishmem
import unishmem.kernels as K
from spmd import raises, spmd

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "5"}
REFERENCE = {"sum": lambda xs: xs.sum(0), "prod": lambda xs: xs.prod(0), "min": lambda xs: xs.min(0).values,
             "max": lambda xs: xs.max(0).values}


def data(pe: int, shape, dtype, seed: int = 0):
    """PE pe's input: integers in [-3, 3] (exact products and sums), the same on every PE's reference."""
    g = torch.Generator().manual_seed(1000 * seed + pe)
    return torch.randint(-3, 4, shape, generator=g).to(dtype)


def members(team):
    rt = unishmem.runtime()
    return [team.translate_pe(i, rt.team_world) for i in range(team.n_pes)]


@spmd
def test_all_gather_sizes_dtypes_and_teams(rt):
    cases = [(rt.team_world, dtype, (7,)) for dtype in (torch.float16, torch.bfloat16, torch.int64)]
    cases += [(rt.team_world, torch.float32, (1,)), (rt.team_world, torch.float32, (5, 3)),
              (rt.team_node, torch.float32, (1000,))]  # (one host: the node team is every PE)
    for team, dtype, shape in cases:
        x = data(rt.my_pe, shape, dtype)
        out = K.all_gather(x, team=team)
        assert torch.equal(out, torch.cat([data(pe, shape, dtype) for pe in members(team)])), (dtype, shape)
    if rt.n_pes == 4:
        odd = rt.team_world.split_strided(1, 2, 2)
        if odd is not None:
            try:
                K.all_gather(torch.zeros(2), team=odd)
            except ValueError as e:
                assert "unishmem.kernels run on teams of every PE for now" in str(e), e
            else:
                raise AssertionError("a sub-team was accepted")
            odd.destroy()
    given = torch.empty(rt.n_pes * 4, dtype=torch.float32)
    assert K.all_gather(data(rt.my_pe, (4,), torch.float32), out=given) is given
    assert torch.equal(given, torch.cat([data(pe, (4,), torch.float32) for pe in range(rt.n_pes)]))


@spmd
def test_all_reduce_both_algorithms_every_op(rt):
    cases = [(op, torch.float32, (1001,)) for op in ("sum", "prod", "min", "max")]
    cases += [("sum", torch.float32, (1,)), ("sum", torch.float16, (3, 5)), ("max", torch.int32, (64,))]
    for algorithm in ("one_shot", "two_shot"):
        for op, dtype, shape in cases:
            x = data(rt.my_pe, shape, dtype, seed=1)
            ref = REFERENCE[op](torch.stack([data(pe, shape, dtype, seed=1) for pe in range(rt.n_pes)]))
            out = K.all_reduce(x, op=op, algorithm=algorithm)
            assert out.shape == x.shape and torch.equal(out, ref), (algorithm, op, dtype, shape)
    big = data(rt.my_pe, (70000,), torch.float32, seed=2)  # > 256 KiB: "auto" takes two-shot
    ref = torch.stack([data(pe, (70000,), torch.float32, seed=2) for pe in range(rt.n_pes)]).sum(0)
    assert torch.equal(K.all_reduce(big), ref)


@spmd
def test_reduce_scatter(rt):
    n = rt.n_pes
    for op, dtype, shape in (("sum", torch.float32, (n * 3,)), ("max", torch.float16, (n * 2, 5)),
                             ("sum", torch.int64, (n,))):
        x = data(rt.my_pe, shape, dtype, seed=3)
        full = REFERENCE[op](torch.stack([data(pe, shape, dtype, seed=3) for pe in range(n)]))
        rows = shape[0] // n
        assert torch.equal(K.reduce_scatter(x, op=op), full[rt.my_pe * rows:(rt.my_pe + 1) * rows]), (op, dtype)


@spmd(sizes=(2, 4))
def test_bad_arguments_raise_on_every_pe_and_the_job_goes_on(rt):
    # one PE passes another shape: every PE raises, naming both
    shape = (4,) if rt.my_pe else (5,)
    raises(lambda: K.all_gather(torch.zeros(shape)),
           "all_gather: the PEs of world disagree: member 0 passes torch.float32 of shape [5], member 1")
    # one PE's bad op: it raises its own error, the others say who rejected
    op = "mean" if rt.my_pe == 1 else "sum"
    raises(lambda: K.all_reduce(torch.zeros(3), op=op),
           "op='mean' is not one of" if rt.my_pe == 1 else "member(s) [1] of world rejected their arguments")
    raises(lambda: K.reduce_scatter(torch.zeros(rt.n_pes + 1)), "does not split into")
    raises(lambda: K.all_reduce(torch.zeros(3), algorithm="ring"), "algorithm='ring' is not one of")
    raises(lambda: K.all_gather(torch.zeros(3), out=torch.zeros(2)), "out must be torch.float32 of shape")
    x = data(rt.my_pe, (6,), torch.float32)
    assert torch.equal(K.all_reduce(x), torch.stack([data(pe, (6,), torch.float32) for pe in range(rt.n_pes)]).sum(0))


@spmd(sizes=(2,))
def test_workspaces_are_reused_and_freed(rt):
    x = torch.ones(100)
    K.all_reduce(x)
    free = rt._native.heap_free_bytes()
    for _ in range(5):
        assert torch.equal(K.all_reduce(x), x * rt.n_pes)
    assert rt._native.heap_free_bytes() == free  # the same workspace each call
    rt.free_workspaces()
    assert rt._native.heap_free_bytes() > free and not rt._workspaces
    assert torch.equal(K.all_reduce(x), x * rt.n_pes)  # made again on the next call
