"""unishmem.kernels under autograd and torch.compile, at 1, 2 and 4 PEs on the host backend under
TRITON_INTERPRET=1. Gradients are checked against a single-process reference: every PE rebuilds every
PE's inputs and weights from seeds, computes the job's total loss (the sum of every PE's loss) with
plain torch ops, and compares its autograd gradient for its own inputs with the distributed one."""

import torch
from spmd import raises, spmd

import unishmem.kernels as K

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "5"}


def seeded(pe, shape, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(100 * seed + pe)
    return torch.randn(shape, generator=g).to(dtype)


def distributed_and_reference(rt, shape, seed, kernel, reference, dtype=torch.float64, out_shape=None):
    """(x.grad from the kernel on this PE, the reference's gradient for this PE's x, the kernel's output,
    the reference's output for this PE). Each PE's loss is (output * c_pe).sum()."""
    n, me = rt.n_pes, rt.my_pe
    xs = [seeded(pe, shape, seed, dtype).requires_grad_() for pe in range(n)]
    outs = reference(xs)
    cs = [seeded(pe, outs[pe].shape, seed + 1, dtype) for pe in range(n)]
    sum((o * c).sum() for o, c in zip(outs, cs)).backward()
    x = seeded(me, shape, seed, dtype).requires_grad_()
    y = kernel(x)
    (y * cs[me]).sum().backward()
    return x.grad, xs[me].grad, y.detach(), outs[me].detach()


@spmd
def test_collectives_have_the_gradients_of_their_single_process_references(rt):
    n, me = rt.n_pes, rt.my_pe
    cases = {
        "all_reduce": (K.all_reduce, lambda xs: [torch.stack(xs).sum(0)] * n, (5, 3)),
        "all_gather": (K.all_gather, lambda xs: [torch.cat(xs)] * n, (2, 3)),
        "reduce_scatter": (K.reduce_scatter, lambda xs: list(torch.stack(xs).sum(0).chunk(n)), (2 * n, 3)),
        "all_to_all": (
            K.all_to_all,
            lambda xs: [torch.cat([x.chunk(n)[pe] for x in xs]) for pe in range(n)],
            (2 * n, 3),
        ),
    }
    for name, (kernel, reference, shape) in cases.items():
        for dtype in (torch.float32, torch.float64):
            grad, ref_grad, y, ref_y = distributed_and_reference(rt, shape, 1, kernel, reference, dtype)
            assert torch.allclose(y, ref_y), (name, dtype)
            assert torch.allclose(grad, ref_grad), (name, dtype, grad, ref_grad)
    # gradcheck perturbs the same element on every PE at once, so its numerical Jacobian is the job's
    # only where every PE computes the same function of the reduction
    x = seeded(me, (3,), 2).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: K.all_reduce(t).sin(), (x,))


@spmd(sizes=(2, 4))
def test_gemms_have_the_gradients_of_their_single_process_references(rt):
    n, me = rt.n_pes, rt.my_pe
    M, Kd, N = 4 * n, 6, 5
    # ag_gemm: A's rows are sharded, b is each PE's own (a column-parallel layer's weight shard)
    a_shards = [seeded(pe, (M // n, Kd), 3, torch.float32).requires_grad_() for pe in range(n)]
    bs = [seeded(pe, (Kd, N), 4, torch.float32).requires_grad_() for pe in range(n)]
    cs = [seeded(pe, (M, N), 5, torch.float32) for pe in range(n)]
    sum(((torch.cat(a_shards) @ b) * c).sum() for b, c in zip(bs, cs)).backward()
    a, b = a_shards[me].detach().clone().requires_grad_(), bs[me].detach().clone().requires_grad_()
    (K.ag_gemm(a, b) * cs[me]).sum().backward()
    assert torch.allclose(a.grad, a_shards[me].grad, atol=1e-4), (a.grad, a_shards[me].grad)
    assert torch.allclose(b.grad, bs[me].grad, atol=1e-4), (b.grad, bs[me].grad)
    # gemm_rs: K is sharded (a row-parallel layer), each PE gets its rows of the sum
    a_s = [seeded(pe, (M, Kd), 6, torch.float32).requires_grad_() for pe in range(n)]
    b_s = [seeded(pe, (Kd, N), 7, torch.float32).requires_grad_() for pe in range(n)]
    cs = [seeded(pe, (M // n, N), 8, torch.float32) for pe in range(n)]
    total = sum(a @ b for a, b in zip(a_s, b_s))
    sum((block * c).sum() for block, c in zip(total.chunk(n), cs)).backward()
    a, b = a_s[me].detach().clone().requires_grad_(), b_s[me].detach().clone().requires_grad_()
    (K.gemm_rs(a, b) * cs[me]).sum().backward()
    assert torch.allclose(a.grad, a_s[me].grad, atol=1e-4), (a.grad, a_s[me].grad)
    assert torch.allclose(b.grad, b_s[me].grad, atol=1e-4), (b.grad, b_s[me].grad)


@spmd(sizes=(2,))
def test_modes_leave_later_calls_and_the_heap_working(rt):
    x = seeded(rt.my_pe, (4,), 9, torch.float32)
    with torch.inference_mode():
        first = K.all_reduce(x)
    with torch.no_grad():
        K.all_gather(x)
    y = K.all_reduce(x.clone().requires_grad_())
    assert y.requires_grad and torch.equal(K.all_reduce(x), first)
    out = torch.empty(4)  # out= through the op: filled, and checked with the kernels' own message
    assert K.all_reduce(x.clone().requires_grad_(), out=out) is out and torch.equal(out.detach(), first)
    raises(
        lambda: K.all_reduce(x.clone().requires_grad_(), out=torch.empty(5)), "out must be torch.float32 of shape [4]"
    )
    raises(lambda: K.all_reduce(x, group=object()), "group= needs torch.distributed initialised")
    raises(lambda: K.all_gather(x, team=rt.team_world, group=object()), "pass team= or group=, not both")
    z = rt.zeros(3)
    assert not z.requires_grad and z.grad_fn is None and not z.is_inference()
    rt.free(z)


@spmd(sizes=(2,))
def test_torch_compile_traces_the_kernels_without_a_graph_break(rt):
    import torch._dynamo

    me = rt.my_pe

    def block(x, w):
        h = K.all_gather(x @ w)
        return K.reduce_scatter(K.all_reduce(h.relu()) * 2)

    x, w = seeded(me, (2, 3), 10, torch.float32), seeded(me, (3, 3), 11, torch.float32)
    expected = block(x, w)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(block)(x, w)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained
    for backend in ("eager", "aot_eager", "inductor"):
        torch._dynamo.reset()
        compiled = torch.compile(block, backend=backend, fullgraph=True)
        for _ in range(3):  # no recompile across calls of the same shapes (fullgraph would fail on a break)
            assert torch.allclose(compiled(x, w), expected), backend
