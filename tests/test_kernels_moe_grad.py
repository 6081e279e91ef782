"""Gradients of unishmem.kernels.dispatch/combine and the expert-parallel MoE layer (unishmem.nn.moe), at
1, 2 and 4 PEs on the host backend under TRITON_INTERPRET=1. Every PE rebuilds every PE's inputs from
seeds and differentiates the job's total loss (the sum of every PE's loss) through a single-process
reference written with plain torch ops from the documented semantics; the distributed gradients of its
own inputs must equal the reference's."""

import torch
from spmd import raises, spmd

import unishmem.kernels as K

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "5"}
H, TOPK = 4, 2
TOKENS = (3, 0, 4, 2)  # T of PE s is TOKENS[s % 4]: PE 1 has none
CAPACITY = 4
TOL = 1e-4  # the layer in float32: its sums run in other orders than the reference's


def n_experts(n):
    return 2 * n


def inputs(pe, n, seed, dtype, T=None):
    """PE pe's (tokens, topk_ids, topk_weights, c): the loss is (out * c).sum(). Copy (0, 1) of each PE
    that has tokens is routed nowhere (-1)."""
    g = torch.Generator().manual_seed(1000 * seed + pe)
    T = TOKENS[pe % 4] if T is None else T
    tokens = torch.randn(T, H, generator=g).to(dtype)
    ids = torch.randint(0, n_experts(n), (T, TOPK), generator=g)
    if T:
        ids[0, 1] = -1
    weights = torch.rand(T, TOPK, generator=g).to(dtype)
    c = torch.randn(T, H, generator=g).to(dtype)
    return tokens, ids, weights, c


def expert(x, experts):
    """A stand-in expert, nonlinear and different for each expert: sin(x) * (1 + expert / 2)."""
    return torch.sin(x) * (1 + 0.5 * experts.to(x.dtype))[..., None]


def row_experts(counts, me, rows):
    """The expert of each of `rows` received rows, from the counts (the layout of the module's doc);
    padding rows get expert me * L (their rows are zero)."""
    L = counts.shape[0]
    ends = torch.cumsum(counts.sum(1), 0)
    j = torch.searchsorted(ends, torch.arange(rows), right=True)
    return me * L + torch.where(j < L, j, 0)


def reference_out(tokens, ids, weights):
    """out[t] = sum over routed k of weights[t, k] * expert(tokens[t], ids[t, k])."""
    terms = [
        torch.where(ids[:, k : k + 1] >= 0, weights[:, k : k + 1] * expert(tokens, ids[:, k]), 0)
        for k in range(ids.shape[1])
    ]
    return sum(terms) if terms else torch.zeros_like(tokens)


def reference_expert_grad(everyone, d, L, rows):
    """The gradient of PE d's expert outputs: the row of copy (t, k) of PE s is weights[t, k] * c[t],
    in the packed layout (expert, then source PE, then (t, k)), zeros up to `rows`."""
    parts = []
    for j in range(L):
        for _, ids, weights, c in everyone:
            t, k = torch.nonzero(ids == d * L + j).unbind(1)
            parts.append(weights[t, k][:, None] * c[t])
    grad = torch.cat(parts)
    return torch.cat([grad, grad.new_zeros(rows - len(grad), H)])


def check_round_trip(rt, dtype, seed, tol, **kw):
    n, me = rt.n_pes, rt.my_pe
    E = n_experts(n)
    everyone = [inputs(pe, n, seed, dtype) for pe in range(n)]
    leaves = [(x.clone().requires_grad_(), w.clone().requires_grad_()) for x, _, w, _ in everyone]
    total = sum((reference_out(x, ids, w) * c).sum() for (x, w), (_, ids, _, c) in zip(leaves, everyone))
    total.backward()
    ref_tokens, ref_weights = leaves[me]

    x, ids, w, c = everyone[me]
    tokens, weights = x.clone().requires_grad_(), w.clone().requires_grad_()
    expert_tokens, counts, handle = K.dispatch(tokens, ids, weights, E, **kw)
    y = expert(expert_tokens, row_experts(counts, me, len(expert_tokens)))
    y.retain_grad()
    out = K.combine(y, handle)
    (out * c).sum().backward()
    what = (dtype, kw)
    assert torch.allclose(out, reference_out(x, ids, w), atol=tol), what
    assert torch.allclose(tokens.grad, ref_tokens.grad, atol=tol), (what, tokens.grad, ref_tokens.grad)
    assert torch.allclose(weights.grad, ref_weights.grad, atol=tol), (what, weights.grad, ref_weights.grad)
    assert not weights.grad[0, 1:].any() if len(x) else True  # the copy routed nowhere
    ref_y = reference_expert_grad(everyone, me, E // n, len(expert_tokens))
    assert torch.allclose(y.grad, ref_y, atol=tol), (what, y.grad, ref_y)


@spmd
def test_dispatch_and_combine_have_the_gradients_of_a_single_process_reference(rt):
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        check_round_trip(rt, dtype, seed=1, tol=tol)
        check_round_trip(rt, dtype, seed=2, tol=tol, max_tokens=CAPACITY)  # padding rows get zero gradient
    # without grad, the plain call: nothing records a graph
    x, ids, w, _ = inputs(rt.my_pe, rt.n_pes, 3, torch.float32)
    expert_tokens, _, handle = K.dispatch(x, ids, w, n_experts(rt.n_pes))
    assert expert_tokens.grad_fn is None and K.combine(expert_tokens, handle).grad_fn is None
    raises(lambda: K.combine(expert_tokens, handle, weights=w[:, :1]), "combine: weights must be float32")
    raises(lambda: K.combine(expert_tokens, handle, weights=w, per_copy=True), "pass no weights= with it")


@spmd
def test_rows_per_copy_other_weights_and_gradcheck(rt):
    n, me = rt.n_pes, rt.my_pe
    E, dtype = n_experts(n), torch.float64
    everyone = [inputs(pe, n, 4, dtype) for pe in range(n)]
    # a row per copy in, each copy's row back (per_copy), other weights in combine: every gradient
    per_copy = [torch.stack([x, 2 * x], 1).requires_grad_() for x, *_ in everyone]  # [T, K, H]
    others = [(w + 1).requires_grad_() for _, _, w, _ in everyone]
    total = 0
    for rows, other, (_, ids, _, c) in zip(per_copy, others, everyone):
        copies = torch.where(ids[:, :, None] >= 0, expert(rows, ids), 0)
        total = total + (copies.sum(1) * c).sum() + (reference_out(rows[:, 0], ids, other) * c).sum()
    total.backward()
    x, ids, w, c = everyone[me]
    rows, other = torch.stack([x, 2 * x], 1).requires_grad_(), (w + 1).requires_grad_()
    weights = w.clone().requires_grad_()
    expert_rows, counts, handle = K.dispatch(rows, ids, weights, E)
    back = K.combine(expert(expert_rows, row_experts(counts, me, len(expert_rows))), handle, per_copy=True)
    assert back.shape == (len(x), TOPK, H)
    expert_tokens, counts, handle = K.dispatch(rows[:, 0], ids, weights, E, max_tokens=CAPACITY)
    y = expert(expert_tokens, row_experts(counts, me, len(expert_tokens)))
    ((back.sum(1) * c).sum() + (K.combine(y, handle, weights=other) * c).sum()).backward()
    assert torch.allclose(rows.grad, per_copy[me].grad), (rows.grad, per_copy[me].grad)
    assert torch.allclose(other.grad, others[me].grad), (other.grad, others[me].grad)
    assert weights.grad is None  # combine used the other weights

    # gradcheck perturbs every PE's inputs at once: the round trip's out depends on this PE's inputs
    # alone, and every PE has the same T, so every PE makes the same calls
    x, ids, w, _ = inputs(me, n, 5, dtype, T=2)
    for kw in ({}, {"max_tokens": 2}):

        def round_trip(tokens, weights, kw=kw):
            expert_tokens, counts, handle = K.dispatch(tokens, ids, weights, E, **kw)
            return K.combine(expert(expert_tokens, row_experts(counts, me, len(expert_tokens))), handle)

        assert torch.autograd.gradcheck(round_trip, (x.requires_grad_(), w.requires_grad_()), fast_mode=True)
        x, w = x.detach(), w.detach()


def check_layer(rt, seed, **kw):
    from unishmem.nn.moe import ExpertParallelMoE, MoE

    n, me = rt.n_pes, rt.my_pe
    E, ffn = n_experts(n), 6
    L = E // n
    torch.manual_seed(seed)  # the same on every PE: the replicated router's init
    layer = ExpertParallelMoE(H, ffn, E, TOPK, **kw)
    torch.manual_seed(seed)
    drawn = MoE(H, ffn, E, TOPK)  # what the layer's init documents it holds
    ref = layer.reference()
    for name, value in drawn.state_dict().items():
        assert torch.equal(ref.state_dict()[name], value), name
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(TOKENS[pe % 4], H, generator=g) for pe in range(n)]
    cs = [torch.randn(TOKENS[pe % 4], H, generator=g) for pe in range(n)]
    first = sum(len(x) for x in xs[:me])
    mine = slice(first, first + len(xs[me]))
    opt, ref_opt = torch.optim.SGD(layer.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):  # gradients at the start, then after each of 2 optimizer steps
        ref_x = torch.cat(xs).requires_grad_()
        ref_out = ref(ref_x)
        (ref_out * torch.cat(cs)).sum().backward()
        x = xs[me].clone().requires_grad_()
        out = layer(x)
        (out * cs[me]).sum().backward()
        what = (kw, step)
        assert torch.allclose(out, ref_out[mine], atol=TOL), (what, out, ref_out[mine])
        assert torch.allclose(x.grad, ref_x.grad[mine], atol=TOL), (what, x.grad, ref_x.grad[mine])
        expected = dict(ref.router.named_parameters(prefix="router"))
        for j in range(L):
            expected.update(ref.experts[me * L + j].named_parameters(prefix=f"experts.{j}"))
        params = dict(layer.named_parameters())
        assert params.keys() == expected.keys(), (params.keys(), expected.keys())
        for name, p in params.items():
            assert torch.allclose(p, expected[name], atol=TOL), (what, name)
            assert torch.allclose(p.grad, expected[name].grad, atol=TOL), (what, name, p.grad, expected[name].grad)
        opt.step(), ref_opt.step()
        opt.zero_grad(), ref_opt.zero_grad()


@spmd
def test_the_expert_parallel_layer_equals_its_single_process_reference(rt):
    check_layer(rt, 7)
    check_layer(rt, 8, max_tokens=CAPACITY)


@spmd(sizes=(2,))
def test_torch_compile_traces_dispatch_and_combine_with_a_capacity_whole(rt):
    # with max_tokens both are custom ops (torch.ops.unishmem.dispatch/combine): fullgraph=True, no
    # graph break, one graph for two calls, the eager forward and gradients; the exact layout breaks
    import torch._dynamo
    from torch._dynamo.utils import counters

    n, me = rt.n_pes, rt.my_pe
    x, ids, w, c = inputs(me, n, 9, torch.float32)

    def step(tokens, weights, max_tokens=CAPACITY):
        expert_tokens, counts, handle = K.dispatch(tokens, ids, weights, n_experts(n), max_tokens=max_tokens)
        return K.combine(expert(expert_tokens, row_experts(counts, me, len(expert_tokens))), handle)

    leaves = [(x.clone().requires_grad_(), w.clone().requires_grad_()) for _ in range(3)]
    expected = step(*leaves[0])
    (expected * c).sum().backward()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    for traced in leaves[1:]:
        out = compiled(*traced)
        assert torch.allclose(out, expected, atol=1e-6), (out, expected)
        (out * c).sum().backward()
        for eager, grad in zip(leaves[0], traced):
            assert torch.allclose(eager.grad, grad.grad, atol=1e-6), (eager.grad, grad.grad)
    assert not counters["graph_break"] and counters["stats"]["unique_graphs"] == 1, dict(counters["graph_break"])
    exact = torch.compile(lambda t, v: step(t, v, None), backend="aot_eager")  # rows known after the call
    assert torch.allclose(exact(x, w), step(x, w, None), atol=1e-6)
    assert counters["graph_break"], "the exact layout should break the graph"
    # and the layer with a capacity: one graph, the eager gradients
    from unishmem.nn import ExpertParallelMoE

    torch.manual_seed(0)
    layer = ExpertParallelMoE(4, 6, n_experts(n), max_tokens=CAPACITY)
    grads = []
    for run in (
        lambda t: (layer(t) ** 2).sum(),
        torch.compile(lambda t: (layer(t) ** 2).sum(), fullgraph=True, backend="aot_eager"),
    ):
        layer.zero_grad()
        t = x.clone().requires_grad_()
        run(t).backward()
        grads.append([t.grad, *(p.grad.clone() for p in layer.parameters())])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads))


@spmd(sizes=(2, 4))
def test_the_layers_errors_name_it_x_and_max_tokens_on_every_pe_and_the_job_goes_on(rt):
    """More tokens than max_tokens, or a bad x, on PE 1 alone raise on every PE, none left in dispatch:
    PE 1 says what is wrong with its x and what to change, the others what every PE's x must be; then
    the layer's good call gives what it gave before, on every PE."""
    from unishmem.nn import ExpertParallelMoE

    n, me = rt.n_pes, rt.my_pe
    for max_tokens in (CAPACITY, None):
        torch.manual_seed(0)  # the same on every PE: the replicated router's init
        layer = ExpertParallelMoE(H, 6, n_experts(n), TOPK, max_tokens=max_tokens)
        name = f"ExpertParallelMoE(hidden={H}, ffn_hidden=6, n_experts={n_experts(n)}, top_k={TOPK}, max_tokens="
        name += f"{max_tokens}) over {n} PEs"
        must = f"[..., {H}] (last dim hidden)"
        if max_tokens:
            must += f" with at most max_tokens={CAPACITY} tokens (the product of its leading dims)"
        x = torch.randn(2, H)
        before = layer(x)
        cases = []  # (PE 1's x, its own error)
        if max_tokens:  # the issue's: dispatch's error named neither the layer nor max_tokens
            more = CAPACITY + 1
            cases.append((torch.randn(more, H), f"x of shape [{more}, {H}] holds {more} tokens on this PE, more than"))
        cases.append((torch.randn(2, H + 1), f"x of shape [2, {H + 1}] must be {must}"))
        for x1, own in cases:
            raises(lambda: layer(x1 if me == 1 else x), f"{name}: {own if me == 1 else 'every PE must pass x ' + must}")
        if max_tokens:  # every PE over: each says what to change (tokens count all the leading dims)
            raises(
                lambda: layer(torch.randn(CAPACITY, 2, H)),
                f"holds {2 * CAPACITY} tokens on this PE, more than max_tokens={CAPACITY}, dispatch's capacity for "
                "each PE's tokens: build the layer with max_tokens at least the most tokens any PE passes, or with "
                "max_tokens=None",
            )
        assert torch.equal(layer(x), before), max_tokens  # and the job goes on
