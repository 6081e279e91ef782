"""NOTE [workspaces]: the symmetric buffers a kernel needs (staging, receive slots, signals) are
allocated collectively the first time a (kernel, shape, dtype, team) is called and reused after;
`rt.free_workspaces()` and finalize free them, never garbage collection (a free is collective, so it
cannot happen at a moment one PE chooses).

Each call numbers itself (`epoch`, from 1): signals are SET to the epoch and waited for with >=,
so nothing is ever reset between calls. Receive buffers come in two parities, alternating by
epoch: a peer may start call k+1 while this PE still reads call k's data, but not call k+2 (that
needs this PE's data of call k+1, sent after it finished reading call k).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..enums import DTYPE_CODES

DESC_DIMS = 6  # the numbers every PE's call is described by (a shape), compared across PEs


@dataclass
class Workspace:
    buffers: dict[str, torch.Tensor]  # symmetric
    members: torch.Tensor             # the team's world PE numbers, int32 on the runtime's device
    my_index: int
    epoch: int = 0
    extra: dict = field(default_factory=dict)

    def next_epoch(self) -> tuple[int, int]:
        """(epoch, parity) for a new call."""
        self.epoch += 1
        return self.epoch, self.epoch % 2


def _members(rt, team) -> list[int]:
    return [team.translate_pe(i, rt.team_world) for i in range(team.n_pes)]


def _describe(desc: list[int], label: str = "shape") -> str:
    kind, dtype_code, ndim, *dims = desc
    dtype = next((d for d, c in DTYPE_CODES.items() if c == dtype_code), dtype_code)
    return f"{dtype} of {label} {list(dims[:ndim])}"


def exchange(rt, team, what: str, desc: list[int], problem: Exception | None) -> list[list[int]]:
    """Every member's `desc` (a host fcollect), after which this PE raises its own `problem`, or a
    ValueError naming the members that found one (their desc starts with a negative number)."""
    key = ("agree", team._slot, len(desc))
    if key not in rt._workspaces:
        rt._workspaces[key] = (rt.zeros(len(desc), dtype=torch.int64),
                               rt.zeros(team.n_pes * len(desc), dtype=torch.int64))
    mine, everyone = rt._workspaces[key]
    mine.copy_(torch.tensor(desc, dtype=torch.int64))
    rt.fcollect(everyone, mine, team=team)
    if problem is not None:
        raise problem
    rows = everyone.view(team.n_pes, len(desc)).tolist()
    rejected = [i for i, row in enumerate(rows) if row[0] < 0]
    if rejected:
        raise ValueError(f"{what}: member(s) {rejected} of {team.name} rejected their arguments (see their error)")
    return rows


def _agree(rt, team, what: str, desc: list[int], problem: Exception | None, label: str = "shape") -> None:
    """Every member of `team` calls `what` with the same `desc` and no local `problem`, or every
    one raises (a mismatch would otherwise leave some PEs waiting for data that never comes)."""
    rows = exchange(rt, team, what, desc, problem)
    differ = [i for i, row in enumerate(rows) if row != rows[0]]
    if differ:
        raise ValueError(f"{what}: the PEs of {team.name} disagree: member 0 passes {_describe(rows[0], label)}, "
                         + ", ".join(f"member {i} {_describe(rows[i], label)}" for i in differ))


def workspace(rt, team, what: str, x: torch.Tensor, buffers, problem: Exception | None = None,
              key: tuple = (), shape: tuple | None = None, label: str = "shape") -> Workspace:
    """The workspace of kernel `what` for input `x` on `team` (made on first use), after checking
    that every member passes the same dtype and shape and that none found a `problem` with its
    arguments. `buffers`: name -> (shape, dtype), called only on first use. `shape` (at most
    DESC_DIMS numbers, named `label` in errors) replaces x's shape where a kernel's call is described by more
    than one tensor."""
    if problem:  # (x may not even be a tensor)
        shape = ()
    elif shape is None:
        shape = tuple(x.shape)
    if problem is None and (len(shape) > DESC_DIMS or x.dtype not in DTYPE_CODES):
        problem = ValueError(f"{what}: x must have at most {DESC_DIMS} dimensions and a dtype of the symmetric "
                             f"heap; got {x.dtype} of shape {list(shape)}")
    desc = ([-1] * (3 + DESC_DIMS) if problem else
            [0, DTYPE_CODES[x.dtype], len(shape), *shape, *[0] * (DESC_DIMS - len(shape))])
    full_key = (what, getattr(x, "dtype", None), shape, team._slot, *key)
    ws = rt._workspaces.get(full_key)
    if ws is None or problem or rt.backend == "host":  # GPU backends check once per shape: a host collective
        _agree(rt, team, what, desc, problem, label)
    if ws is None:
        ws = rt._workspaces[full_key] = Workspace(
            {name: rt.zeros(shape, dtype=dtype) for name, (shape, dtype) in buffers().items()},
            torch.tensor(_members(rt, team), dtype=torch.int32, device=rt.device), team.my_pe)
    return ws


def free_workspaces(rt) -> None:
    """Collective: frees every kernel workspace of this runtime."""
    for value in rt._workspaces.values():
        tensors = value.buffers.values() if isinstance(value, Workspace) else value
        for t in tensors:
            rt.free(t)
    rt._workspaces.clear()
