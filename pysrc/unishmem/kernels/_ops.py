"""The kernels as torch.library custom ops (`torch.ops.unishmem.<name>`), with fake implementations and
autograd formulas, for the calls that need them: under torch.compile (Dynamo sees one opaque op and its
output's shape; the runtime's allocation and bookkeeping stay inside the op, untraced) and on inputs that
require grad. Eager calls without autograd skip the op's dispatch (several microseconds a call).

The kernel modules call these ops through `torch.ops.unishmem` (_routing.py says when), so they need
not import this module: unishmem.kernels imports it, after them, to register the ops.

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

# ---- the collectives -------------------------------------------------------------------------------
# Each op below repeats torch.library's pattern (custom_op, register_fake, register_autograd) on purpose:
# the op's schema comes from its own function's annotations, and each has its own shape and gradient.


@torch.library.custom_op("unishmem::all_reduce", mutates_args=())
def all_reduce(x: torch.Tensor, op: str, algorithm: str, pull: bool | None, team: int) -> torch.Tensor:
    return collectives.all_reduce(x.detach(), op=op, algorithm=algorithm, team=_team(team), pull=pull)


@all_reduce.register_fake
def _(x, op, algorithm, pull, team):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _all_reduce_backward(ctx, grad):
    if ctx.op != "sum":
        raise RuntimeError(f"unishmem.kernels.all_reduce: op={ctx.op!r} has no gradient here; only 'sum' does")
    return all_reduce(grad.contiguous(), "sum", ctx.algorithm, ctx.pull, ctx.team), None, None, None, None


def _all_reduce_context(ctx, inputs, output):
    _, ctx.op, ctx.algorithm, ctx.pull, ctx.team = inputs


all_reduce.register_autograd(_all_reduce_backward, setup_context=_all_reduce_context)


@torch.library.custom_op("unishmem::all_gather", mutates_args=())
def all_gather(x: torch.Tensor, team: int) -> torch.Tensor:
    return collectives.all_gather(x.detach(), team=_team(team))


@all_gather.register_fake
def _(x, team):
    n = _team(team).n_pes
    return x.new_empty((n * x.shape[0], *x.shape[1:]) if x.dim() else (n,))


def _all_gather_backward(ctx, grad):
    grad = reduce_scatter(grad.contiguous(), "sum", ctx.team)
    return grad.reshape(ctx.shape), None


def _all_gather_context(ctx, inputs, output):
    x, ctx.team = inputs
    ctx.shape = x.shape


all_gather.register_autograd(_all_gather_backward, setup_context=_all_gather_context)


@torch.library.custom_op("unishmem::reduce_scatter", mutates_args=())
def reduce_scatter(x: torch.Tensor, op: str, team: int) -> torch.Tensor:
    return collectives.reduce_scatter(x.detach(), op=op, team=_team(team))


@reduce_scatter.register_fake
def _(x, op, team):
    n = _team(team).n_pes
    return x.new_empty((x.shape[0] // n, *x.shape[1:]))


def _reduce_scatter_backward(ctx, grad):
    if ctx.op != "sum":
        raise RuntimeError(f"unishmem.kernels.reduce_scatter: op={ctx.op!r} has no gradient here; only 'sum' does")
    return all_gather(grad.contiguous(), ctx.team), None, None


def _reduce_scatter_context(ctx, inputs, output):
    _, ctx.op, ctx.team = inputs


reduce_scatter.register_autograd(_reduce_scatter_backward, setup_context=_reduce_scatter_context)


@torch.library.custom_op("unishmem::all_to_all", mutates_args=())
def all_to_all(x: torch.Tensor, team: int) -> torch.Tensor:
    return collectives.all_to_all(x.detach(), team=_team(team))


@all_to_all.register_fake
def _(x, team):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _all_to_all_backward(ctx, grad):
    return all_to_all(grad.contiguous(), ctx.team), None


def _all_to_all_context(ctx, inputs, output):
    ctx.team = inputs[1]


all_to_all.register_autograd(_all_to_all_backward, setup_context=_all_to_all_context)


# ---- the GEMMs ---------------------------------------------------------------------------------------


@torch.library.custom_op("unishmem::ag_gemm", mutates_args=())
def ag_gemm(a_shard: torch.Tensor, b: torch.Tensor, overlap: bool, blocks: list[int], team: int) -> torch.Tensor:
    block_m, block_n, block_k = (v or None for v in blocks)
    return gemm.ag_gemm(
        a_shard.detach(), b.detach(), overlap, block_m=block_m, block_n=block_n, block_k=block_k, team=_team(team)
    )


@ag_gemm.register_fake
def _(a_shard, b, overlap, blocks, team):
    return a_shard.new_empty((_team(team).n_pes * a_shard.shape[0], b.shape[1]))


def _ag_gemm_backward(ctx, grad):
    a_shard, b = ctx.saved_tensors
    grad = grad.contiguous()
    grad_a = gemm_rs(grad, b.t().contiguous(), [0, 0, 0], ctx.team) if ctx.needs_input_grad[0] else None
    grad_b = all_gather(a_shard, ctx.team).t() @ grad if ctx.needs_input_grad[1] else None
    return grad_a, grad_b, None, None, None


def _ag_gemm_context(ctx, inputs, output):
    a_shard, b, _, _, ctx.team = inputs  # the backward's GEMMs have other shapes: default tiles
    ctx.save_for_backward(a_shard, b)


ag_gemm.register_autograd(_ag_gemm_backward, setup_context=_ag_gemm_context)


@torch.library.custom_op("unishmem::gemm_rs", mutates_args=())
def gemm_rs(a: torch.Tensor, b_shard: torch.Tensor, blocks: list[int], team: int) -> torch.Tensor:
    block_m, block_n, block_k = (v or None for v in blocks)
    return gemm.gemm_rs(
        a.detach(), b_shard.detach(), block_m=block_m, block_n=block_n, block_k=block_k, team=_team(team)
    )


@gemm_rs.register_fake
def _(a, b_shard, blocks, team):
    return a.new_empty((a.shape[0] // _team(team).n_pes, b_shard.shape[1]))


def _gemm_rs_backward(ctx, grad):
    a, b_shard = ctx.saved_tensors
    grad = grad.contiguous()
    grad_a = ag_gemm(grad, b_shard.t().contiguous(), True, [0, 0, 0], ctx.team) if ctx.needs_input_grad[0] else None
    grad_b = a.t() @ all_gather(grad, ctx.team) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b, None, None


def _gemm_rs_context(ctx, inputs, output):
    a, b_shard, _, ctx.team = inputs
    ctx.save_for_backward(a, b_shard)


gemm_rs.register_autograd(_gemm_rs_backward, setup_context=_gemm_rs_context)


# ---- dispatch and combine with a capacity, as custom ops (torch.compile) ------------------------------
# With max_tokens every shape is known before the call, so under torch.compile dispatch and combine are
# ops Dynamo traces (moe.MoERouting carries the handle's tensors and numbers between them; the op finds
# the workspace again by its key). Their gradients are the same public calls as _Dispatch's and _Combine's.


@torch.library.custom_op("unishmem::dispatch", mutates_args=())
def dispatch_padded(
    tokens: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, n_experts: int, max_tokens: int, team: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    weights = topk_weights.detach().clone(memory_format=torch.contiguous_format)
    out, counts, h = moe._run_dispatch(tokens.detach(), topk_ids, weights, n_experts, max_tokens, _team(team), None)
    return out, counts, h.C, h.pos, h.ids


@dispatch_padded.register_fake
def _(tokens, topk_ids, topk_weights, n_experts, max_tokens, team):
    n = _team(team).n_pes
    T, K = topk_ids.shape
    index = {"dtype": torch.int64}
    return (
        tokens.new_empty((n * max_tokens * K, tokens.shape[-1])),
        tokens.new_empty((n_experts // n, n), **index),
        tokens.new_empty((n, n_experts), **index),
        tokens.new_empty((T, K), **index),
        tokens.new_empty((T, K), **index),
    )


def _dispatch_padded_context(ctx, inputs, output):
    tokens, _, topk_weights, ctx.n_experts, ctx.max_tokens, ctx.team = inputs
    ctx.per_copy, ctx.weights_dtype = tokens.dim() == 3, topk_weights.dtype
    ctx.save_for_backward(*output[2:])


def _dispatch_padded_backward(ctx, grad, *_):
    C, pos, ids = ctx.saved_tensors
    routing = (ctx.n_experts, ctx.max_tokens)
    if ctx.per_copy:  # copy (t, k) carried tokens[t, k]
        grad_tokens = combine_padded(grad.contiguous(), C, pos, ids, None, *routing, True, ctx.team)
    else:  # copy (t, k) carried tokens[t]: the sum of its copies' gradients
        ones = torch.ones(pos.shape, dtype=wide_dtype(grad.dtype, ctx.weights_dtype), device=grad.device)
        grad_tokens = combine_padded(grad.contiguous(), C, pos, ids, ones, *routing, False, ctx.team)
    return grad_tokens, None, None, None, None, None


dispatch_padded.register_autograd(_dispatch_padded_backward, setup_context=_dispatch_padded_context)


@torch.library.custom_op("unishmem::combine", mutates_args=())
def combine_padded(
    expert_out: torch.Tensor,
    C: torch.Tensor,
    pos: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor | None,
    n_experts: int,
    max_tokens: int,
    per_copy: bool,
    team: int,
) -> torch.Tensor:
    handle = moe._handle_of(expert_out, C, pos, ids, weights, n_experts, max_tokens, _team(team))
    w = None if weights is None else weights.detach()
    return moe._run_combine(expert_out.detach(), handle, w, per_copy, handle.team, None)


@combine_padded.register_fake
def _(expert_out, C, pos, ids, weights, n_experts, max_tokens, per_copy, team):
    T, K = pos.shape
    return expert_out.new_empty((T, K, expert_out.shape[1]) if per_copy else (T, expert_out.shape[1]))


def _combine_padded_context(ctx, inputs, output):
    expert_out, C, pos, ids, weights, ctx.n_experts, ctx.max_tokens, ctx.per_copy, ctx.team = inputs
    ctx.save_for_backward(expert_out, C, pos, ids, weights)


def _combine_padded_backward(ctx, grad):
    expert_out, C, pos, ids, weights = ctx.saved_tensors
    routing = (ctx.n_experts, ctx.max_tokens, ctx.team)
    grad = grad.contiguous()
    grad_rows = grad_weights = None
    if ctx.needs_input_grad[0]:  # row (t, k) of expert_out: w[t, k] * grad[t] (per_copy: grad[t, k])
        rows = grad if ctx.per_copy else copy_rows(weights, grad, expert_out.dtype)
        unit = torch.ones(pos.shape, dtype=torch.float32, device=grad.device)  # (never read: a routing only)
        grad_rows = dispatch_padded(rows, ids, unit, *routing)[0]
    if ctx.needs_input_grad[4]:  # w[t, k]: <grad[t], row (t, k) back on this PE>
        copies = combine_padded(expert_out, C, pos, ids, None, ctx.n_experts, ctx.max_tokens, True, ctx.team)
        grad_weights = weights_grad(copies, grad, weights.dtype)
    return grad_rows, None, None, None, grad_weights, None, None, None, None


combine_padded.register_autograd(_combine_padded_backward, setup_context=_combine_padded_context)
