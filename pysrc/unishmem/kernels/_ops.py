"""The kernels as torch.library custom ops (`torch.ops.unishmem.<name>`), with fake implementations and
autograd formulas, for the calls that need them: under torch.compile (Dynamo sees one opaque op and its
output's shape; the runtime's allocation and bookkeeping stay inside the op, untraced) and on inputs that
require grad. Eager calls without autograd skip the op's dispatch (several microseconds a call).

Each op is four functions here: <name> (the body; its annotations are the op's schema), <name>_fake (its
output's shape and dtype), <name>_backward and <name>_context (its gradient). The kernel table's row names
them (NOTE [kernel table] in _table.py) and unishmem.kernels registers every row's with `register`. The
kernel modules and the backward functions call the ops through `torch.ops.unishmem` (_routing.py says
when), so nothing here needs an op object.

Gradients (docs/kernels.md, "Gradients"):
- all_reduce(x) (sum): all_reduce(grad) on every PE; other ops are not differentiable;
- all_gather(x): reduce_scatter(grad) (sum), and reduce_scatter(x) (sum): all_gather(grad);
- all_to_all(x): all_to_all(grad) (block j of x became block my_pe of member j's output);
- ag_gemm(a_shard, b) = all_gather(a_shard) @ b (b: this PE's): grad a_shard = gemm_rs(grad, b^T),
  grad b = all_gather(a_shard)^T @ grad;
- gemm_rs(a, b_shard) = block my_pe of sum_p a_p @ b_shard_p: grad a = ag_gemm(grad, b_shard^T),
  grad b_shard = a^T @ all_gather(grad).
"""

from __future__ import annotations

import torch

from . import collectives, gemm, moe
from ._routing import op_team as _team
from .moe import copy_rows, weights_grad, wide_dtype

ops = torch.ops.unishmem


def register(name: str, op) -> None:
    """Make `op` (the table's Op: run, fake, backward, context) the custom op torch.ops.unishmem.<name>."""
    defined = torch.library.custom_op(f"unishmem::{name}", op.run, mutates_args=())
    defined.register_fake(op.fake)
    defined.register_autograd(op.backward, setup_context=op.context)


# ---- the collectives -------------------------------------------------------------------------------


def all_reduce(x: torch.Tensor, op: str, algorithm: str, pull: bool | None, team: int) -> torch.Tensor:
    return collectives.all_reduce(x.detach(), op=op, algorithm=algorithm, team=_team(team), pull=pull)


def all_reduce_fake(x, op, algorithm, pull, team):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def all_reduce_backward(ctx, grad):
    if ctx.op != "sum":
        raise RuntimeError(f"unishmem.kernels.all_reduce: op={ctx.op!r} has no gradient here; only 'sum' does")
    return ops.all_reduce(grad.contiguous(), "sum", ctx.algorithm, ctx.pull, ctx.team), None, None, None, None


def all_reduce_context(ctx, inputs, output):
    _, ctx.op, ctx.algorithm, ctx.pull, ctx.team = inputs


def all_gather(x: torch.Tensor, team: int) -> torch.Tensor:
    return collectives.all_gather(x.detach(), team=_team(team))


def all_gather_fake(x, team):
    n = _team(team).n_pes
    return x.new_empty((n * x.shape[0], *x.shape[1:]) if x.dim() else (n,))


def all_gather_backward(ctx, grad):
    grad = ops.reduce_scatter(grad.contiguous(), "sum", ctx.team)
    return grad.reshape(ctx.shape), None


def all_gather_context(ctx, inputs, output):
    x, ctx.team = inputs
    ctx.shape = x.shape


def reduce_scatter(x: torch.Tensor, op: str, team: int) -> torch.Tensor:
    return collectives.reduce_scatter(x.detach(), op=op, team=_team(team))


def reduce_scatter_fake(x, op, team):
    n = _team(team).n_pes
    return x.new_empty((x.shape[0] // n, *x.shape[1:]))


def reduce_scatter_backward(ctx, grad):
    if ctx.op != "sum":
        raise RuntimeError(f"unishmem.kernels.reduce_scatter: op={ctx.op!r} has no gradient here; only 'sum' does")
    return ops.all_gather(grad.contiguous(), ctx.team), None, None


def reduce_scatter_context(ctx, inputs, output):
    _, ctx.op, ctx.team = inputs


def all_to_all(x: torch.Tensor, team: int) -> torch.Tensor:
    return collectives.all_to_all(x.detach(), team=_team(team))


def all_to_all_fake(x, team):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def all_to_all_backward(ctx, grad):
    return ops.all_to_all(grad.contiguous(), ctx.team), None


def all_to_all_context(ctx, inputs, output):
    ctx.team = inputs[1]


# ---- the GEMMs ---------------------------------------------------------------------------------------


def ag_gemm(a_shard: torch.Tensor, b: torch.Tensor, overlap: bool | None, blocks: list[int], team: int) -> torch.Tensor:
    block_m, block_n, block_k = (v or None for v in blocks)
    return gemm.ag_gemm(
        a_shard.detach(), b.detach(), overlap, block_m=block_m, block_n=block_n, block_k=block_k, team=_team(team)
    )


def ag_gemm_fake(a_shard, b, overlap, blocks, team):
    return a_shard.new_empty((_team(team).n_pes * a_shard.shape[0], b.shape[1]))


def ag_gemm_backward(ctx, grad):
    a_shard, b = ctx.saved_tensors
    grad = grad.contiguous()
    grad_a = ops.gemm_rs(grad, b.t().contiguous(), None, [0, 0, 0], ctx.team) if ctx.needs_input_grad[0] else None
    grad_b = ops.all_gather(a_shard, ctx.team).t() @ grad if ctx.needs_input_grad[1] else None
    return grad_a, grad_b, None, None, None


def ag_gemm_context(ctx, inputs, output):
    a_shard, b, _, _, ctx.team = inputs  # the backward's GEMMs have other shapes: default tiles
    ctx.save_for_backward(a_shard, b)


def gemm_rs(a: torch.Tensor, b_shard: torch.Tensor, overlap: bool | None, blocks: list[int], team: int) -> torch.Tensor:
    block_m, block_n, block_k = (v or None for v in blocks)
    return gemm.gemm_rs(
        a.detach(), b_shard.detach(), overlap, block_m=block_m, block_n=block_n, block_k=block_k, team=_team(team)
    )


def gemm_rs_fake(a, b_shard, overlap, blocks, team):
    return a.new_empty((a.shape[0] // _team(team).n_pes, b_shard.shape[1]))


def gemm_rs_backward(ctx, grad):
    a, b_shard = ctx.saved_tensors
    grad = grad.contiguous()
    grad_a = ops.ag_gemm(grad, b_shard.t().contiguous(), None, [0, 0, 0], ctx.team) if ctx.needs_input_grad[0] else None
    grad_b = a.t() @ ops.all_gather(grad, ctx.team) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b, None, None, None


def gemm_rs_context(ctx, inputs, output):
    a, b_shard, _, _, ctx.team = inputs
    ctx.save_for_backward(a, b_shard)


# ---- dispatch and combine with a capacity, as custom ops (torch.compile) ------------------------------
# With max_tokens every shape is known before the call, so under torch.compile dispatch and combine are
# ops Dynamo traces (moe.MoERouting carries the handle's tensors and numbers between them; the op finds
# the workspace again by its key). Their gradients are the same public calls as _Dispatch's and _Combine's.


def dispatch(
    tokens: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, n_experts: int, max_tokens: int, team: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    out, counts, h = moe._run_dispatch(
        tokens.detach(), topk_ids, topk_weights.detach(), n_experts, max_tokens, _team(team), None
    )
    return out, counts, h.route


def dispatch_fake(tokens, topk_ids, topk_weights, n_experts, max_tokens, team):
    n = _team(team).n_pes
    T, K = topk_ids.shape
    index = {"dtype": torch.int64}
    return (
        tokens.new_empty((n * max_tokens * K, tokens.shape[-1])),
        tokens.new_empty((n_experts // n, n), **index),
        tokens.new_empty((2 * T * K + n * n_experts,), **index),  # NOTE [route] in moe.py
    )


def dispatch_context(ctx, inputs, output):
    tokens, topk_ids, topk_weights, ctx.n_experts, ctx.max_tokens, ctx.team = inputs
    ctx.per_copy, ctx.weights_dtype, ctx.shape = tokens.dim() == 3, topk_weights.dtype, tuple(topk_ids.shape)
    ctx.save_for_backward(output[2])


def dispatch_backward(ctx, grad, *_):
    (route,) = ctx.saved_tensors
    routing = (ctx.n_experts, ctx.max_tokens)
    if ctx.per_copy:  # copy (t, k) carried tokens[t, k]
        grad_tokens = ops.combine(grad.contiguous(), route, None, *routing, True, ctx.team)
    else:  # copy (t, k) carried tokens[t]: the sum of its copies' gradients
        ones = torch.ones(ctx.shape, dtype=wide_dtype(grad.dtype, ctx.weights_dtype), device=grad.device)
        grad_tokens = ops.combine(grad.contiguous(), route, ones, *routing, False, ctx.team)
    return grad_tokens, None, None, None, None, None


def combine(
    expert_out: torch.Tensor,
    route: torch.Tensor,
    weights: torch.Tensor | None,
    n_experts: int,
    max_tokens: int,
    per_copy: bool,
    team: int,
) -> torch.Tensor:
    handle = moe._handle_of(expert_out, route, weights, n_experts, max_tokens, _team(team))
    w = None if weights is None else weights.detach()
    return moe._run_combine(expert_out.detach(), handle, w, per_copy, handle.team, None)


def combine_fake(expert_out, route, weights, n_experts, max_tokens, per_copy, team):
    T, K = moe.route_shape(route, expert_out.shape[0], _team(team).n_pes, n_experts, max_tokens)
    return expert_out.new_empty((T, K, expert_out.shape[1]) if per_copy else (T, expert_out.shape[1]))


def combine_context(ctx, inputs, output):
    expert_out, route, weights, ctx.n_experts, ctx.max_tokens, ctx.per_copy, ctx.team = inputs
    ctx.save_for_backward(expert_out, route, weights)


def combine_backward(ctx, grad):
    expert_out, route, weights = ctx.saved_tensors
    routing = (ctx.n_experts, ctx.max_tokens, ctx.team)
    grad = grad.contiguous()
    grad_rows = grad_weights = None
    if ctx.needs_input_grad[0]:  # row (t, k) of expert_out: w[t, k] * grad[t] (per_copy: grad[t, k])
        rows = grad if ctx.per_copy else copy_rows(weights, grad, expert_out.dtype)
        T, K = moe.route_shape(route, expert_out.shape[0], _team(ctx.team).n_pes, ctx.n_experts, ctx.max_tokens)
        ids = moe.route_parts(route, T, K)[1]
        unit = torch.ones(T, K, dtype=torch.float32, device=grad.device)  # (never read: a routing only)
        grad_rows = ops.dispatch(rows, ids, unit, *routing)[0]
    if ctx.needs_input_grad[2]:  # w[t, k]: <grad[t], row (t, k) back on this PE>
        copies = ops.combine(expert_out, route, None, ctx.n_experts, ctx.max_tokens, True, ctx.team)
        grad_weights = weights_grad(copies, grad, weights.dtype)
    return grad_rows, None, grad_weights, None, None, None, None
