"""torch.distributed's collective names and argument order over unishmem.kernels, for one-for-one swaps:

    dist.all_gather_single(out, x, group=g)       ->  functional.all_gather_single(out, x, group=g)
    dist.reduce_scatter_single(out, x, group=g)   ->  functional.reduce_scatter_single(out, x, group=g)
    dist.all_reduce(x, op=ReduceOp.MAX)           ->  functional.all_reduce(x, op=ReduceOp.MAX)
    dist.all_to_all_single(out, x, group=g)       ->  functional.all_to_all_single(out, x, group=g)

Like torch.distributed's (synchronous) calls they write their result into the tensor they are given
(output, or the tensor itself for all_reduce); unlike them they also return that tensor. They run
on torch's current stream, so there is no work handle to wait for: async_op=True is refused. op is
"sum", "min", "max" or "prod", or torch.distributed.ReduceOp.SUM, MIN, MAX or PRODUCT. group: a
torch.distributed ProcessGroup whose ranks map to a team of this runtime (None: the world), as the
kernels take it.

Autograd: torch.distributed's c10d calls record nothing (no gradient reaches the input), and its
differentiable forms (torch.distributed.nn.functional, torch.distributed._functional_collectives)
return new tensors. These write in place and are recorded as in-place ops: the written tensor's
history becomes the collective of the input, so a backward through it reaches the input with the
kernel's gradient (docs/kernels.md). The written tensor may not be a leaf that requires grad (as for
any in-place op). For a new tensor instead, call unishmem.kernels.all_gather, reduce_scatter,
all_reduce or all_to_all.

torch 2.13 renamed all_gather_into_tensor and reduce_scatter_tensor to all_gather_single and
reduce_scatter_single (same arguments; the old names are deprecated there): both names are here, the
old ones as aliases, so code written for either torch keeps working.
"""

from __future__ import annotations

from . import collectives

_REDUCE_OPS = {"SUM": "sum", "MIN": "min", "MAX": "max", "PRODUCT": "prod"}


def _op(op):
    """op as the kernels name it: a string passes through (the kernel checks it), a
    torch.distributed.ReduceOp maps to its name."""
    if isinstance(op, str):
        return op
    import torch.distributed as dist

    if dist.is_available():
        for name, ours in _REDUCE_OPS.items():
            if op == getattr(dist.ReduceOp, name):
                return ours
    raise ValueError(
        f"unishmem.kernels.functional: op={op!r} is not supported; use 'sum', 'min', 'max', 'prod' or "
        "torch.distributed.ReduceOp.SUM, MIN, MAX or PRODUCT"
    )


def _sync(async_op, what: str):
    if async_op:
        raise ValueError(
            f"{what}: async_op=True is not supported: the call is ordered on torch's current stream, "
            "so there is nothing to wait for; pass async_op=False"
        )


def all_gather_single(output_tensor, input_tensor, group=None, async_op=False):
    """Every member's input_tensor, concatenated along dim 0 in team order, into output_tensor: of
    shape [n * d0, ...] (a concatenation) or [n, *input_tensor.shape] (a stack), as
    torch.distributed.all_gather_single takes it. Returns output_tensor."""
    _sync(async_op, "all_gather_single")
    stacked = output_tensor.dim() == input_tensor.dim() + 1 and output_tensor.shape[1:] == input_tensor.shape
    x = input_tensor.unsqueeze(0) if stacked else input_tensor
    collectives.all_gather(x, out=output_tensor, group=group)
    return output_tensor


def reduce_scatter_single(output, input, op="sum", group=None, async_op=False):
    """Block i (along dim 0) of the elementwise reduction of every member's input, into member i's
    output; input is of shape [n * d0, ...] (a concatenation of the blocks) or [n, *output.shape] (a
    stack), as torch.distributed.reduce_scatter_single takes it. Returns output."""
    _sync(async_op, "reduce_scatter_single")
    stacked = input.dim() == output.dim() + 1 and input.shape[1:] == output.shape
    collectives.reduce_scatter(input, op=_op(op), out=output.unsqueeze(0) if stacked else output, group=group)
    return output


all_gather_into_tensor = all_gather_single  # torch's names before 2.13
reduce_scatter_tensor = reduce_scatter_single


def all_reduce(tensor, op="sum", group=None, async_op=False):
    """The elementwise reduction of every member's tensor, written back into tensor on every member
    (in place, as torch.distributed.all_reduce): one launch, which copies tensor in first since its
    peers read it while it is overwritten (NOTE [copy-in]). Returns tensor. Under autograd the write
    is recorded (see the module's docstring): the gradient of tensor's previous value is the
    all_reduce of the incoming gradient, for op="sum"."""
    _sync(async_op, "all_reduce")
    return collectives.all_reduce(tensor, op=_op(op), out=tensor, group=group)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
    """Block j (along dim 0) of input to member j, and member i's block for this PE into block i of
    output, as torch.distributed.all_to_all_single with equal splits; uneven splits (MoE's) are
    unishmem.kernels.dispatch and combine. Returns output."""
    _sync(async_op, "all_to_all_single")
    for name, sizes in (("output_split_sizes", output_split_sizes), ("input_split_sizes", input_split_sizes)):
        if sizes is not None and len(set(sizes)) > 1:
            raise ValueError(
                f"all_to_all_single: {name}={list(sizes)} is uneven; only equal splits are supported "
                "(for MoE routing, use unishmem.kernels.dispatch and combine)"
            )
    return collectives.all_to_all(input, out=output, group=group)
