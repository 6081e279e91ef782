"""Megatron-style tensor-parallel linear layers over unishmem.kernels.

Gradients follow the tensor-parallel convention: a replicated tensor (the column layer's input, the
row layer's output and bias) is one value that every PE holds alike and whose loss every PE computes
alike, so its gradient on every PE is the single-process model's. Two small autograd functions carry
that convention where the kernels' own (the gradient of the sum of every PE's loss) differs:
`_Replicated` (identity forward, all_reduce of the gradient backward: a replicated value used by
every PE's shard, Megatron's f) and `_Summed` (all_reduce forward, identity backward: partial sums
becoming one replicated value, Megatron's g). Everything else is the kernels' autograd: ag_gemm's and
gemm_rs's gradients go through each other.

Errors name the layer, its input x and what x must be. A forward whose kernel is collective (the row
layer's all_reduce, ag_gemm, gemm_rs; in moe.py dispatch) checks x on this PE and enters the kernel
even when x is bad, with an operand the kernel rejects, so that the kernel's cross-PE check raises on
every PE: a PE that raised before the call would leave the others waiting in it, or pair them with
its next call (`_collective`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import kernels
from ..kernels._routing import team_of
from ..kernels.gemm import DTYPES as GEMM_DTYPES


class _Replicated(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, team):
        ctx.team = team
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return kernels.all_reduce(grad.contiguous(), team=ctx.team), None


class _Summed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, partial, team):
        return kernels.all_reduce(partial.contiguous(), team=team)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _collective(call, problem: Exception | None, layer: str, x, must: str):
    """call(): a collective kernel's call, made on every PE, even where this PE found a `problem` with
    its input x (the call then passes the kernel an operand it rejects, `_rejected`), so that the
    kernel's cross-PE check raises on every PE; this PE then raises `problem`. On a PE whose x is fine
    (another PE's x was rejected, or the PEs' x differ) the kernel's error comes back in its class,
    naming the layer, what every PE's x `must` be and this PE's x, then the kernel's own words."""
    try:
        return call()
    except (ValueError, TypeError) as e:
        if problem is None:
            shown = f"{x.dtype} of shape {list(x.shape)}"
            raise type(e)(f"{layer}: every PE must pass x {must}; this PE passes {shown} ({e})") from e
    raise problem  # (outside the except, so the kernel's error about the rejected operand is not chained)


def _rejected(device) -> torch.Tensor:
    """An operand the layers' kernels all reject (1-D, empty, bool): what a PE whose input is bad
    passes them, so that their cross-PE check raises on every PE."""
    return torch.empty(0, dtype=torch.bool, device=device)


class _ParallelLinear(nn.Module):
    """What both layers share: the team, the sizes and their checks, the parameters and their init."""

    def __init__(self, in_features, out_features, bias, sequence_parallel, dtype, team, group, split):
        super().__init__()
        import unishmem

        rt = unishmem.runtime()
        resolved = team_of(rt, team, group)
        resolved = rt.team_world if resolved is None else resolved
        if not isinstance(resolved, unishmem.Team):
            raise TypeError(f"{type(self).__name__}: team must be a unishmem.Team or None, got {team!r}")
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{type(self).__name__}: {name}={value!r} must be a positive int")
        size = in_features if split == "in_features" else out_features
        if size % resolved.n_pes:
            raise ValueError(
                f"{type(self).__name__}: {split}={size} does not split into {resolved.n_pes} equal shards "
                f"(the PEs of {resolved.name})"
            )
        self.in_features, self.out_features = in_features, out_features
        self.sequence_parallel = bool(sequence_parallel)
        self.n_pes, self.rank = resolved.n_pes, resolved.my_pe
        # the kernels' team= (None for the world, the form torch.compile traces most simply)
        self._team = None if resolved is rt.team_world else resolved
        self._split = split
        factory = {"device": rt.device, "dtype": dtype}
        rows = out_features // self.n_pes if split == "out_features" else out_features
        cols = in_features // self.n_pes if split == "in_features" else in_features
        self.weight = nn.Parameter(torch.empty(rows, cols, **factory))
        bias_size = rows if split == "out_features" else out_features
        self.bias = nn.Parameter(torch.empty(bias_size, **factory)) if bias else None
        self.reset_parameters()

    def _shard(self, full: torch.Tensor, dim: int) -> torch.Tensor:
        return full.chunk(self.n_pes, dim)[self.rank]

    def shard_of(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        """(this PE's weight shard, its bias shard or None) of a full [out_features, in_features]
        weight and [out_features] bias, in this layer's layout."""
        dim = 0 if self._split == "out_features" else 1
        if tuple(weight.shape) != (self.out_features, self.in_features):
            raise ValueError(
                f"{type(self).__name__}: the full weight must be of shape {[self.out_features, self.in_features]}, "
                f"got {list(weight.shape)}"
            )
        if bias is None:
            return self._shard(weight, dim), None
        return self._shard(weight, dim), self._shard(bias, 0) if dim == 0 else bias

    def reset_parameters(self) -> None:
        """torch.nn.Linear's initialisation of the full layer, drawn on the CPU from torch's default
        generator, then this PE's shard kept: after the same torch.manual_seed on every PE (which
        the replicated bias of a row-parallel layer needs anyway), the layer holds the shards of
        the nn.Linear(in_features, out_features) that seed builds on the CPU."""
        full = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, dtype=self.weight.dtype)
        with torch.no_grad():
            weight, bias = self.shard_of(full.weight, full.bias)
            self.weight.copy_(weight)
            if self.bias is not None:
                self.bias.copy_(bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear, sequence_parallel: bool = False, *, team=None, group=None):
        """This PE's shard of a full torch.nn.Linear (in its dtype; torch's RNG is left as it was)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"{cls.__name__}.from_linear: expected a torch.nn.Linear, got {type(linear).__name__}")
        with torch.random.fork_rng(devices=[]):  # the layer's own init draws, then is overwritten
            layer = cls(  # type: ignore[call-arg]  # cls is one of the two layers, whose __init__ gives split
                linear.in_features,
                linear.out_features,
                bias=linear.bias is not None,
                sequence_parallel=sequence_parallel,
                dtype=linear.weight.dtype,
                team=team,
                group=group,
            )
        with torch.no_grad():
            weight, bias = layer.shard_of(linear.weight.detach(), None if linear.bias is None else linear.bias.detach())
            layer.weight.copy_(weight)
            if layer.bias is not None:
                layer.bias.copy_(bias)
        return layer

    def _name(self) -> str:
        """The layer as its errors name it."""
        return (
            f"{type(self).__name__}(in_features={self.in_features}, out_features={self.out_features}, "
            f"sequence_parallel={self.sequence_parallel}) over {self.n_pes} PEs"
        )

    def _problem(self, x, must: str):
        """What is wrong with this PE's input x, which `must` be of that shape, or None. Where a
        collective kernel follows, it is raised through `_collective`, never before the call."""
        name, features = self._name(), self.weight.shape[1]
        if not isinstance(x, torch.Tensor):
            return TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
        bad = x.dim() < (2 if self.sequence_parallel else 1) or x.shape[-1] != features
        if not bad and self.sequence_parallel and self._split == "in_features":
            bad = x.shape[0] % self.n_pes != 0  # (the row layer's output: this PE's block of dim 0)
        if bad:
            return ValueError(f"{name}: x of shape {list(x.shape)} must be {must}")
        # (under autocast F.linear casts x; the GEMM kernels never do)
        if x.dtype != self.weight.dtype and (self.sequence_parallel or not torch.is_autocast_enabled(x.device.type)):
            return TypeError(
                f"{name}: x is {x.dtype} and the weight {self.weight.dtype}: pass x in {self.weight.dtype}"
            )
        if self.sequence_parallel and x.dtype not in GEMM_DTYPES:
            return TypeError(
                f"{name}: with sequence_parallel x and the weight must be float16, bfloat16 or float32 (the GEMM "
                f"kernels' dtypes), not {x.dtype}: convert the layer (layer.to(torch.float32)) and x"
            )
        return None

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"sequence_parallel={self.sequence_parallel}, shard {self.rank} of {self.n_pes}"
        )


class ColumnParallelLinear(_ParallelLinear):
    """y = x @ W.T + b with W's output features split over the PEs: `weight` is this PE's rows of W,
    [out_features / n, in_features], `bias` its [out_features / n]; the output is this PE's features,
    [..., out_features / n] (the input of a RowParallelLinear).

    sequence_parallel=False: x [..., in_features] is replicated (the same on every PE); a local GEMM,
    and the input's gradient is all-reduced (it is the same on every PE, the full model's).
    sequence_parallel=True: x [s / n, ..., in_features] is this PE's rows of dim 0 (the sequence, in
    Megatron's [s, b, h] layout; a 2-D [tokens / n, in_features] is the same), every PE with the same
    shape; unishmem.kernels.ag_gemm gathers the rows inside the GEMM, or first where that is
    faster at the size (NOTE [fuse or not] in unishmem/kernels/gemm.py), and the output is
    [s, ..., out_features / n] (all rows). Its gradients are ag_gemm's: the input's by gemm_rs.
    The GEMM kernels take float16, bfloat16 and float32 (x in the weight's dtype).

    team / group: the PEs the layer is split over (a unishmem.Team, or a torch.distributed
    ProcessGroup whose ranks map to one; default the world). Parameters are created on the
    runtime's device, in `dtype` (default torch's)."""

    def __init__(
        self, in_features, out_features, bias=True, sequence_parallel=False, *, dtype=None, team=None, group=None
    ):
        super().__init__(in_features, out_features, bias, sequence_parallel, dtype, team, group, "out_features")

    def forward(self, x):
        if not self.sequence_parallel:  # no collective in forward: a bad x raises here
            problem = self._problem(x, f"[..., {self.in_features}] (last dim in_features)")
            if problem:
                raise problem
            return F.linear(_Replicated.apply(x, self._team), self.weight, self.bias)
        must = f"[s / {self.n_pes}, ..., {self.in_features}] (its rows of dim 0; at least 2-D, last dim in_features)"
        problem = self._problem(x, must)
        a = _rejected(self.weight.device) if problem else x.reshape(-1, self.in_features)
        y = _collective(
            lambda: kernels.ag_gemm(a, self.weight.t(), team=self._team),
            problem,
            self._name(),
            x,
            must + ", of one shape and dtype",
        )
        y = y.view(self.n_pes * x.shape[0], *x.shape[1:-1], self.weight.shape[0])
        return y if self.bias is None else y + self.bias


class RowParallelLinear(_ParallelLinear):
    """y = x @ W.T + b with W's input features split over the PEs: `weight` is this PE's columns of W,
    [out_features, in_features / n], `bias` [out_features] is replicated; the input is this PE's
    features, [..., in_features / n] (the output of a ColumnParallelLinear).

    sequence_parallel=False: the partial products are summed by unishmem.kernels.all_reduce and the
    bias added once after it; the output [..., out_features] is replicated, and its gradient passes
    to every PE's partial product unchanged.
    sequence_parallel=True: x [s, ..., in_features / n] (all rows; s a multiple of n); the sum is
    reduce-scattered along dim 0 inside the GEMM, or after it where that is faster at the size
    (unishmem.kernels.gemm_rs, NOTE [fuse or not]), so the output is this
    PE's rows, [s / n, ..., out_features]; its gradients are gemm_rs's (the input's by ag_gemm), and
    the replicated bias's gradient is all-reduced over the PEs' rows. The GEMM kernels take float16,
    bfloat16 and float32 (x in the weight's dtype).

    team / group / dtype: as for ColumnParallelLinear."""

    def __init__(
        self, in_features, out_features, bias=True, sequence_parallel=False, *, dtype=None, team=None, group=None
    ):
        super().__init__(in_features, out_features, bias, sequence_parallel, dtype, team, group, "in_features")

    def forward(self, x):
        features = self.weight.shape[1]
        if not self.sequence_parallel:
            must = f"[..., {features}] (last dim in_features / {self.n_pes})"
            problem = self._problem(x, must)
            partial = _rejected(self.weight.device) if problem else F.linear(x, self.weight)
            y = _collective(
                lambda: _Summed.apply(partial, self._team), problem, self._name(), x, must + ", of one shape and dtype"
            )
            return y if self.bias is None else y + self.bias
        must = f"[s, ..., {features}] (at least 2-D, last dim in_features / {self.n_pes}, s a multiple of {self.n_pes})"
        problem = self._problem(x, must)
        a = _rejected(self.weight.device) if problem else x.reshape(-1, features)
        y = _collective(
            lambda: kernels.gemm_rs(a, self.weight.t(), team=self._team),
            problem,
            self._name(),
            x,
            must + ", of one shape and dtype",
        )
        y = y.view(x.shape[0] // self.n_pes, *x.shape[1:-1], self.out_features)
        return y if self.bias is None else y + _Replicated.apply(self.bias, self._team)
