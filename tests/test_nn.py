"""unishmem.nn's tensor-parallel layers and unishmem.kernels.functional, at 1, 2 and 4 PEs on the host
backend under TRITON_INTERPRET=1, against single-process torch references: every PE builds the full
nn.Linear and the full inputs from the same seeds, runs the reference, and compares its own shard of
the output and of every gradient with the layer's."""

import torch
import torch.distributed as dist
from spmd import raises, spmd
from torch import nn

import unishmem.kernels.functional as F
from unishmem.nn import ColumnParallelLinear, RowParallelLinear

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "5"}


def seeded(shape, seed, dtype, pe=0):
    g = torch.Generator().manual_seed(100 * seed + pe)
    return torch.randn(shape, generator=g).to(dtype)


def check_layer(rt, cls, sequence_parallel, dtype, seq=4, batch=2, in_features=8, out_features=12):
    """The layer's output and gradients (input, weight, bias) against nn.Linear's, on [seq * n, batch,
    features] inputs (the layers flatten the leading dims)."""
    n, me = rt.n_pes, rt.my_pe
    torch.manual_seed(7)
    full = nn.Linear(n * in_features, n * out_features, dtype=dtype)
    x_full = seeded((seq * n, batch, n * in_features), 1, dtype).requires_grad_()
    c = seeded((seq * n, batch, n * out_features), 2, dtype)  # the loss is (y * c).sum()
    (full(x_full) * c).sum().backward()
    ref_y = full(x_full).detach()
    layer = cls.from_linear(full, sequence_parallel)
    column = cls is ColumnParallelLinear
    assert layer.weight.shape == ((out_features, n * in_features) if column else (n * out_features, in_features))
    # what this PE holds of the input, of the output (and of c) and of each gradient
    x_dim = 0 if column and sequence_parallel else None if column else 2
    y_dim = 2 if column else 0 if sequence_parallel else None
    mine = lambda t, dim: t if dim is None else t.chunk(n, dim)[me]  # noqa: E731
    x = mine(x_full.detach(), x_dim).clone().requires_grad_()
    y = layer(x)
    what = (cls.__name__, sequence_parallel, dtype)
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 1e-10, "rtol": 1e-10}
    assert y.shape == mine(ref_y, y_dim).shape, (what, y.shape)
    assert torch.allclose(y.detach(), mine(ref_y, y_dim), **tol), what
    (y * mine(c, y_dim)).sum().backward()
    assert torch.allclose(x.grad, mine(x_full.grad, x_dim), **tol), (what, "input")
    assert torch.allclose(layer.weight.grad, mine(full.weight.grad, 0 if column else 1), **tol), (what, "weight")
    assert torch.allclose(layer.bias.grad, mine(full.bias.grad, 0 if column else None), **tol), (what, "bias")


@spmd
def test_layers_equal_nn_linear_forward_and_every_gradient(rt):
    for cls in (ColumnParallelLinear, RowParallelLinear):
        for dtype in (torch.float32, torch.float64):
            check_layer(rt, cls, False, dtype)
        check_layer(rt, cls, True, torch.float32)  # (the GEMM kernels take float16 and float32)
    # built after the same seed, a layer holds the shards of the nn.Linear that seed builds
    torch.manual_seed(3)
    full = nn.Linear(8, 4 * rt.n_pes)
    torch.manual_seed(3)
    layer = ColumnParallelLinear(8, 4 * rt.n_pes)
    assert torch.equal(layer.weight, full.weight.chunk(rt.n_pes)[rt.my_pe])
    assert torch.equal(layer.bias, full.bias.chunk(rt.n_pes)[rt.my_pe])


def test_functional_takes_torch_distributeds_parameters():
    """Each name of unishmem.kernels.functional takes torch.distributed's parameters of that name, in
    its order (torch 2.13 added all_gather_single and reduce_scatter_single)."""
    import inspect

    names = ["all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "all_to_all_single"]
    names += [name for name in ("all_gather_single", "reduce_scatter_single") if hasattr(dist, name)]  # torch >= 2.13
    for name in names:
        ours, theirs = (inspect.signature(getattr(module, name)).parameters for module in (F, dist))
        assert list(ours) == list(theirs), name


@spmd
def test_functional_equals_torch_and_bad_sizes_are_named(rt):
    n, me = rt.n_pes, rt.my_pe
    xs = [seeded((2, 3), 4, torch.float32, pe) for pe in range(n)]
    out = torch.empty(2 * n, 3)
    # torch 2.13's names, and the names they replaced
    for all_gather in (F.all_gather_single, F.all_gather_into_tensor):
        out.zero_()
        assert all_gather(out, xs[me]) is out and torch.equal(out, torch.cat(xs))
        stacked = torch.empty(n, 2, 3)  # torch.distributed's other output form
        all_gather(stacked, xs[me], group=None)
        assert torch.equal(stacked, torch.stack(xs))
    big = [seeded((2 * n, 3), 5, torch.float32, pe) for pe in range(n)]
    for op, reference in (("sum", torch.sum), (dist.ReduceOp.MAX, torch.amax), (dist.ReduceOp.PRODUCT, torch.prod)):
        expected = reference(torch.stack(big), 0).chunk(n)[me]
        for reduce_scatter in (F.reduce_scatter_single, F.reduce_scatter_tensor):
            got = torch.empty(2, 3)
            assert reduce_scatter(got, big[me], op=op) is got
            assert torch.allclose(got, expected), op
            got.zero_()
            reduce_scatter(got, big[me].view(n, 2, 3), op)  # the stacked input form
            assert torch.allclose(got, expected), op
    for op, reference in ((dist.ReduceOp.SUM, torch.sum), (dist.ReduceOp.MIN, torch.amin), ("max", torch.amax)):
        t = xs[me].clone()
        assert F.all_reduce(t, op=op) is t and torch.allclose(t, reference(torch.stack(xs), 0)), op
    # in place under autograd: the written tensor's history is the all_reduce of its previous value
    # (the gradient of the sum of every PE's loss (t * c_pe).sum() reaches x as the sum of the c's)
    x = xs[me].clone().requires_grad_()
    t = x * 1
    F.all_reduce(t)
    cs = [seeded((2, 3), 6, torch.float32, pe) for pe in range(n)]
    (t * cs[me]).sum().backward()
    assert torch.allclose(t.detach(), torch.stack(xs).sum(0)) and torch.allclose(x.grad, torch.stack(cs).sum(0))
    got = torch.empty(2 * n, 3)  # block i of it: block me of PE i's input
    assert F.all_to_all_single(got, big[me], [2] * n, [2] * n) is got
    assert torch.equal(got, torch.cat([b.chunk(n)[me] for b in big]))
    if n > 1:
        raises(lambda: F.all_to_all_single(got, big[me], input_split_sizes=[1] + [2] * n), "is uneven")
    raises(lambda: F.all_reduce(xs[me].clone(), op=dist.ReduceOp.AVG), "op=")
    raises(lambda: F.all_reduce(xs[me].clone(), async_op=True), "async_op=True is not supported")
    raises(lambda: F.reduce_scatter_tensor(torch.empty(2, 3), xs[me], op="mean"), "op='mean'")
    # the layers name what does not split, and what does not fit
    raises(lambda: ColumnParallelLinear(4, 8)(torch.ones(3, 5)), "last dim 4")
    raises(lambda: RowParallelLinear(4 * n, 8, sequence_parallel=True)(torch.ones(4)), "at least 2-D")
    if n > 1:
        raises(lambda: ColumnParallelLinear(4, n + 1), f"out_features={n + 1} does not split into {n}")
        raises(lambda: RowParallelLinear(n + 1, 4), f"in_features={n + 1} does not split into {n}")
        raises(
            lambda: RowParallelLinear(4 * n, 8, sequence_parallel=True)(torch.ones(n + 1, 2, 4)),
            f"dim 0 of the input ({n + 1}",
        )


@spmd(sizes=(2,))
def test_a_compiled_block_has_no_graph_break_and_the_eager_gradients(rt):
    import torch._dynamo
    from torch._dynamo.utils import counters

    n = rt.n_pes

    for sequence_parallel in (False, True):
        torch.manual_seed(11)
        up = ColumnParallelLinear(8, 4 * n, sequence_parallel=sequence_parallel)
        down = RowParallelLinear(4 * n, 8, sequence_parallel=sequence_parallel)
        x = seeded((2 * n, 8), 9, torch.float32, rt.my_pe if sequence_parallel else 0)

        def block(x):
            return down(torch.relu(up(x))).square().sum()

        block(x).backward()
        expected = [p.grad.clone() for p in (*up.parameters(), *down.parameters())]
        for p in (*up.parameters(), *down.parameters()):
            p.grad = None
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
        for _ in range(2):
            compiled(x).backward()
        assert not counters["graph_break"], dict(counters["graph_break"])
        got = [p.grad / 2 for p in (*up.parameters(), *down.parameters())]
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got, expected)), sequence_parallel
