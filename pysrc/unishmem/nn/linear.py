"""Megatron-style tensor-parallel linear layers over unishmem.kernels.

Gradients follow the tensor-parallel convention: a replicated tensor (the column layer's input, the
row layer's output and bias) is one value that every PE holds alike and whose loss every PE computes
alike, so its gradient on every PE is the single-process model's. Two small autograd functions carry
that convention where the kernels' own (the gradient of the sum of every PE's loss) differs:
`_Replicated` (identity forward, all_reduce of the gradient backward: a replicated value used by
every PE's shard, Megatron's f) and `_Summed` (all_reduce forward, identity backward: partial sums
becoming one replicated value, Megatron's g). Everything else is the kernels' autograd: ag_gemm's and
gemm_rs's gradients go through each other.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import kernels
from ..kernels._routing import team_of


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
            layer = cls(
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
            if bias is not None:
                layer.bias.copy_(bias)
        return layer

    def _check_input(self, x, features: int, what: str) -> None:
        name = type(self).__name__
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: input must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() < (2 if self.sequence_parallel else 1) or x.shape[-1] != features:
            raise ValueError(
                f"{name}: input of shape {list(x.shape)} must be {what} (last dim {features}"
                + (", at least 2-D with sequence_parallel)" if self.sequence_parallel else ")")
            )

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
    shape; unishmem.kernels.ag_gemm gathers the rows inside the GEMM, and the output is
    [s, ..., out_features / n] (all rows). Its gradients are ag_gemm's: the input's by gemm_rs.
    The GEMM kernels take float16 and float32.

    team / group: the PEs the layer is split over (a unishmem.Team, or a torch.distributed
    ProcessGroup whose ranks map to one; default the world). Parameters are created on the
    runtime's device, in `dtype` (default torch's)."""

    def __init__(
        self, in_features, out_features, bias=True, sequence_parallel=False, *, dtype=None, team=None, group=None
    ):
        super().__init__(in_features, out_features, bias, sequence_parallel, dtype, team, group, "out_features")

    def forward(self, x):
        if not self.sequence_parallel:
            self._check_input(x, self.in_features, "[..., in_features]")
            return F.linear(_Replicated.apply(x, self._team), self.weight, self.bias)
        self._check_input(x, self.in_features, "[s / n_pes, ..., in_features]")
        y = kernels.ag_gemm(x.reshape(-1, self.in_features), self.weight.t(), team=self._team)
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
    reduce-scattered along dim 0 inside the GEMM (unishmem.kernels.gemm_rs), so the output is this
    PE's rows, [s / n, ..., out_features]; its gradients are gemm_rs's (the input's by ag_gemm), and
    the replicated bias's gradient is all-reduced over the PEs' rows. The GEMM kernels take float16
    and float32.

    team / group / dtype: as for ColumnParallelLinear."""

    def __init__(
        self, in_features, out_features, bias=True, sequence_parallel=False, *, dtype=None, team=None, group=None
    ):
        super().__init__(in_features, out_features, bias, sequence_parallel, dtype, team, group, "in_features")

    def forward(self, x):
        features = self.weight.shape[1]
        if not self.sequence_parallel:
            self._check_input(x, features, "[..., in_features / n_pes]")
            y = _Summed.apply(F.linear(x, self.weight), self._team)
            return y if self.bias is None else y + self.bias
        self._check_input(x, features, "[s, ..., in_features / n_pes]")
        if x.shape[0] % self.n_pes:
            raise ValueError(
                f"RowParallelLinear: with sequence_parallel, dim 0 of the input ({x.shape[0]}, of shape "
                f"{list(x.shape)}) must split into {self.n_pes} equal shards"
            )
        y = kernels.gemm_rs(x.reshape(-1, features), self.weight.t(), team=self._team)
        y = y.view(x.shape[0] // self.n_pes, *x.shape[1:-1], self.out_features)
        return y if self.bias is None else y + _Replicated.apply(self.bias, self._team)
