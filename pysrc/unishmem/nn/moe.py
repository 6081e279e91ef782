"""An expert-parallel mixture-of-experts layer over unishmem.kernels.dispatch/combine, and `MoE`, the
single-process layer it equals.

Routing (both layers): logits = router(x) (an nn.Linear(hidden, n_experts)); probabilities =
softmax(logits); each token goes to its top_k experts by probability, with weights the top_k
probabilities renormalised to sum to 1 (torch.topk's order; ties as torch.topk breaks them). Each
expert is a 2-layer MLP, Linear(hidden, ffn_hidden) -> GELU -> Linear(ffn_hidden, hidden); the output
is the weighted sum of the token's experts' outputs.

In ExpertParallelMoE each PE holds its own tokens, a replica of the router and L = n_experts / n_pes
experts (PE p owns experts p*L .. p*L+L-1). The job computes what MoE computes on all PEs' tokens at
once: every gradient is that of the sum of every PE's loss. The router's is summed over the PEs in
backward (an all_reduce), so the replicas stay equal under any optimizer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..kernels._routing import team_of
from ..kernels.collectives import all_gather
from ..kernels.moe import combine, dispatch
from .linear import _collective, _rejected, _Replicated


def _expert(hidden, ffn_hidden, dtype=None, device=None):
    factory = {"dtype": dtype, "device": device}
    return nn.Sequential(nn.Linear(hidden, ffn_hidden, **factory), nn.GELU(), nn.Linear(ffn_hidden, hidden, **factory))


def _route(logits, top_k):
    """(weights [T, top_k], expert ids [T, top_k]): the top_k probabilities, renormalised."""
    weights, ids = torch.softmax(logits, -1).topk(top_k, -1)
    return weights / weights.sum(-1, keepdim=True), ids


def _check_sizes(name, hidden, ffn_hidden, n_experts, top_k):
    for what, value in (("hidden", hidden), ("ffn_hidden", ffn_hidden), ("n_experts", n_experts), ("top_k", top_k)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: {what}={value!r} must be a positive int")
    if top_k > n_experts:
        raise ValueError(f"{name}: top_k={top_k} exceeds n_experts={n_experts}")


def _check_input(name, x, hidden):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: input must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 1 or x.shape[-1] != hidden:
        raise ValueError(f"{name}: input of shape {list(x.shape)} must be [..., hidden] with hidden={hidden}")


class MoE(nn.Module):
    """The single-process top-k MoE layer (see the module's docstring): `router` and all n_experts
    `experts`. x [..., hidden] -> [..., hidden]."""

    def __init__(self, hidden, ffn_hidden, n_experts, top_k=2, *, dtype=None, device=None):
        super().__init__()
        _check_sizes("MoE", hidden, ffn_hidden, n_experts, top_k)
        self.hidden, self.ffn_hidden, self.n_experts, self.top_k = hidden, ffn_hidden, n_experts, top_k
        self.router = nn.Linear(hidden, n_experts, dtype=dtype, device=device)
        self.experts = nn.ModuleList(_expert(hidden, ffn_hidden, dtype, device) for _ in range(n_experts))

    def forward(self, x):
        _check_input("MoE", x, self.hidden)
        flat = x.reshape(-1, self.hidden)
        weights, ids = _route(self.router(flat), self.top_k)
        # every expert on every token, weighted by its gate (zero where the token did not pick it)
        gates = torch.zeros(flat.shape[0], self.n_experts, dtype=weights.dtype, device=x.device)
        gates = gates.scatter(1, ids, weights)
        out = sum(gates[:, e : e + 1] * expert(flat) for e, expert in enumerate(self.experts))
        return out.reshape(x.shape)


class ExpertParallelMoE(nn.Module):
    """A top-k MoE layer with its experts split over the PEs of `team` (or of the torch.distributed
    ProcessGroup `group`; default the world): `router` (replicated), `experts` (this PE's L =
    n_experts / n_pes, experts my_pe*L .. my_pe*L+L-1). x [..., hidden] (this PE's tokens; T may
    differ across PEs, 0 included) -> [..., hidden]. Every PE calls forward (and backward) alike.

    Forward: route (the module's docstring), unishmem.kernels.dispatch each token's copies to their
    experts' PEs, run each local expert on its rows, combine. max_tokens: dispatch's capacity (no host
    sync; every PE's T at most this); each local expert then runs on every received row (the padded
    layout) and keeps its own, L times the expert work for no host read of the counts. Without it
    the rows are split by the counts, read on the host (the exact layout reads R anyway).

    Parameters are created on the runtime's device in `dtype` (default torch's), initialised as
    MoE(hidden, ffn_hidden, n_experts, top_k) drawn on the CPU from torch's default generator, this
    PE's experts kept: after the same torch.manual_seed on every PE (which the replicated router
    needs), the layer holds that MoE's weights. `reference()` builds the MoE of the current weights."""

    def __init__(self, hidden, ffn_hidden, n_experts, top_k=2, *, max_tokens=None, dtype=None, team=None, group=None):
        super().__init__()
        import unishmem

        rt = unishmem.runtime()
        _check_sizes("ExpertParallelMoE", hidden, ffn_hidden, n_experts, top_k)
        resolved = team_of(rt, team, group)
        resolved = rt.team_world if resolved is None else resolved
        if not isinstance(resolved, unishmem.Team):
            raise TypeError(f"ExpertParallelMoE: team must be a unishmem.Team or None, got {team!r}")
        if n_experts % resolved.n_pes:
            raise ValueError(
                f"ExpertParallelMoE: n_experts={n_experts} does not split evenly over the {resolved.n_pes} "
                f"PEs of {resolved.name}"
            )
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise ValueError(f"ExpertParallelMoE: max_tokens={max_tokens!r} must be a positive int or None")
        self.hidden, self.ffn_hidden, self.n_experts, self.top_k = hidden, ffn_hidden, n_experts, top_k
        self.max_tokens = max_tokens
        self.n_pes, self.rank = resolved.n_pes, resolved.my_pe
        self._team = None if resolved is rt.team_world else resolved  # the kernels' team= (None: the world)
        L = n_experts // self.n_pes
        full = MoE(hidden, ffn_hidden, n_experts, top_k, dtype=dtype)  # on the CPU, from the default generator
        self.router = full.router.to(rt.device)
        self.experts = nn.ModuleList(full.experts[self.rank * L : self.rank * L + L]).to(rt.device)

    def _name(self) -> str:
        """The layer as its errors name it."""
        return (
            f"ExpertParallelMoE(hidden={self.hidden}, ffn_hidden={self.ffn_hidden}, n_experts={self.n_experts}, "
            f"top_k={self.top_k}, max_tokens={self.max_tokens}) over {self.n_pes} PEs"
        )

    def _problem(self, x, must: str):
        """What is wrong with this PE's input x, which `must` be of that shape, or None; raised
        through `_collective` (linear.py), never before dispatch."""
        name, dtype = self._name(), self.router.weight.dtype
        if not isinstance(x, torch.Tensor):
            return TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 1 or x.shape[-1] != self.hidden:
            return ValueError(f"{name}: x of shape {list(x.shape)} must be {must}")
        if x.dtype != dtype and not torch.is_autocast_enabled(x.device.type):  # (autocast casts x)
            return TypeError(f"{name}: x is {x.dtype} and the parameters {dtype}: pass x in {dtype}")
        tokens = x.numel() // self.hidden
        if self.max_tokens is not None and tokens > self.max_tokens:
            return ValueError(
                f"{name}: x of shape {list(x.shape)} holds {tokens} tokens on this PE, more than max_tokens="
                f"{self.max_tokens}, dispatch's capacity for each PE's tokens: build the layer with max_tokens "
                "at least the most tokens any PE passes, or with max_tokens=None (the exact layout, which reads "
                "the counts on the host)"
            )
        return None

    def forward(self, x):
        must = f"[..., {self.hidden}] (last dim hidden)"
        if self.max_tokens is not None:
            must += f" with at most max_tokens={self.max_tokens} tokens (the product of its leading dims)"
        problem = self._problem(x, must)
        if problem is None:
            flat = x.reshape(-1, self.hidden)
            # the router is one value replicated on every PE: its gradient is the sum of every PE's
            weight, bias = (_Replicated.apply(p, self._team) for p in (self.router.weight, self.router.bias))
            weights, ids = _route(F.linear(flat, weight, bias), self.top_k)
        else:
            flat = ids = weights = _rejected(self.router.weight.device)
        expert_tokens, counts, handle = _collective(
            lambda: dispatch(flat, ids, weights, self.n_experts, max_tokens=self.max_tokens, team=self._team),
            problem,
            self._name(),
            x,
            f"{must}, in one dtype",
        )
        if self.max_tokens is None:
            pieces = expert_tokens.split(counts.sum(1).tolist())  # rows grouped by local expert
            rows = torch.cat([expert(piece) for expert, piece in zip(self.experts, pieces)])
        else:  # the padded layout: the local expert of each row from the counts, on the device
            ends = torch.cumsum(counts.sum(1), 0)
            which = torch.searchsorted(ends, torch.arange(len(expert_tokens), device=ends.device), right=True)
            rows = torch.zeros_like(expert_tokens)
            for j, expert in enumerate(self.experts):  # padding rows (which == L) stay zero
                rows = torch.where((which == j)[:, None], expert(expert_tokens), rows)
        return combine(rows, handle, team=self._team).reshape(x.shape)

    def reference(self) -> MoE:
        """The single-process MoE with this layer's current weights (every PE's experts), on the
        runtime's device. Collective over the layer's team: every PE calls it."""
        ref = MoE(self.hidden, self.ffn_hidden, self.n_experts, self.top_k, dtype=self.router.weight.dtype)
        ref = ref.to(self.router.weight.device)
        with torch.no_grad():
            ref.router.load_state_dict(self.router.state_dict())
            for name, _ in self.experts[0].named_parameters():
                mine = torch.stack([expert.get_parameter(name) for expert in self.experts])
                every = all_gather(mine.contiguous(), team=self._team)  # expert order: PE by PE
                for expert, value in zip(ref.experts, every):
                    expert.get_parameter(name).copy_(value)
        return ref

    def extra_repr(self) -> str:
        L = self.n_experts // self.n_pes
        return (
            f"hidden={self.hidden}, ffn_hidden={self.ffn_hidden}, n_experts={self.n_experts}, top_k={self.top_k}, "
            f"max_tokens={self.max_tokens}, experts {self.rank * L}..{self.rank * L + L - 1} of {self.n_pes} PEs"
        )
