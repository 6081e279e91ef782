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
        check_layer(rt, cls, True, torch.float32)  # (the GEMM kernels take float16, bfloat16 and float32)
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
    raises(lambda: ColumnParallelLinear(4, 8)(torch.ones(3, 5)), "x of shape [3, 5] must be [..., 4] (last dim")
    raises(lambda: RowParallelLinear(4 * n, 8, sequence_parallel=True)(torch.ones(4)), "at least 2-D")
    if n > 1:
        raises(lambda: ColumnParallelLinear(4, n + 1), f"out_features={n + 1} does not split into {n}")
        raises(lambda: RowParallelLinear(n + 1, 4), f"in_features={n + 1} does not split into {n}")
        raises(
            lambda: RowParallelLinear(4 * n, 8, sequence_parallel=True)(torch.ones(n + 1, 2, 4)),
            f"x of shape [{n + 1}, 2, 4] must be [s, ..., 4] (at least 2-D, last dim in_features / {n}, s a multiple",
        )


@spmd(sizes=(2, 4))
def test_errors_through_a_layer_name_it_and_x_on_every_pe_and_the_job_goes_on(rt):
    """x that differ between the PEs, or that is bad on PE 1 alone, raise on every PE, none left in
    the layer's collective kernel: PE 1 says what is wrong with its x, the others what every PE's x
    must be; then each layer's good call gives what it gave before, on every PE."""
    n, me = rt.n_pes, rt.my_pe
    ones = torch.ones
    column = ColumnParallelLinear(8, 4 * n, sequence_parallel=True)
    row = RowParallelLinear(8 * n, 4, sequence_parallel=True)
    summed = RowParallelLinear(8 * n, 4)
    described = {  # layer: (how its errors name it, what its x must be)
        column: (
            f"ColumnParallelLinear(in_features=8, out_features={4 * n}, sequence_parallel=True) over {n} PEs",
            f"[s / {n}, ..., 8] (its rows of dim 0; at least 2-D, last dim in_features)",
        ),
        row: (
            f"RowParallelLinear(in_features={8 * n}, out_features=4, sequence_parallel=True) over {n} PEs",
            f"[s, ..., 8] (at least 2-D, last dim in_features / {n}, s a multiple of {n})",
        ),
        summed: (
            f"RowParallelLinear(in_features={8 * n}, out_features=4, sequence_parallel=False) over {n} PEs",
            f"[..., 8] (last dim in_features / {n})",
        ),
    }
    cases = [  # (layer, PE 1's x, the others' x, PE 1's own error; None: the x differ)
        (column, ones(3, 8), ones(2, 8), None),  # the issue's: ag_gemm's error named neither layer nor x
        (column, ones(2, 5), ones(2, 8), "x of shape [2, 5] must be"),
        (column, ones(2, 8, dtype=torch.float64), ones(2, 8), "x is torch.float64 and the weight torch.float32"),
        (row, ones(4 * n, 8), ones(2 * n, 8), None),
        (row, ones(2 * n + 1, 8), ones(2 * n, 8), f"x of shape [{2 * n + 1}, 8] must be"),
        (summed, ones(3, 8), ones(2, 8), None),
        (summed, ones(2, 5), ones(2, 8), "x of shape [2, 5] must be"),
    ]
    before = {layer: layer(seeded((2 * n, 8), 3, torch.float32, me)) for layer in described}
    for layer, x1, x, own in cases:
        name, must = described[layer]
        if own and me == 1:
            raises(lambda: layer(x1), f"{name}: {own}" + (f" {must}" if own.endswith("must be") else ""))
        else:
            raises(lambda: layer(x1 if me == 1 else x), f"{name}: every PE must pass x {must}, of one shape and dtype")
    for layer, y in before.items():  # and the job goes on
        assert torch.equal(layer(seeded((2 * n, 8), 3, torch.float32, me)), y), described[layer][0]


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


@spmd
def test_a_fused_qkv_weight_laid_out_heads_first_gives_each_pe_whole_heads(rt):
    """docs/nn.md's recipe: a [q; k; v] weight laid out [heads, (q, k, v), head_dim] before the split."""
    n, me = rt.n_pes, rt.my_pe
    heads, head_dim, hidden = 2 * n, 3, 5

    def heads_first(t, heads):
        return t.unflatten(0, (3, heads, -1)).transpose(0, 1).flatten(0, 2)

    torch.manual_seed(5)
    single = nn.Linear(hidden, 3 * heads * head_dim)
    x = torch.randn(4, hidden)
    expected = single(x).unflatten(-1, (3, heads, head_dim)).unbind(-3)  # q, k, v: [4, heads, head_dim]
    qkv = nn.Linear(hidden, 3 * heads * head_dim)
    qkv.weight.data, qkv.bias.data = heads_first(single.weight.data, heads), heads_first(single.bias.data, heads)
    layer = ColumnParallelLinear.from_linear(qkv)
    got = layer(x).unflatten(-1, (heads // n, 3, -1)).unbind(-2)
    mine = slice(me * heads // n, (me + 1) * heads // n)
    for name, g, e in zip("qkv", got, expected):
        assert torch.allclose(g, e[:, mine], atol=1e-6), name
