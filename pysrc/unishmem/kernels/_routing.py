"""Which way a kernel call goes, and the team it runs on. A call goes through its custom op
(`torch.ops.unishmem.<name>`, registered in _ops.py) under torch.compile and where autograd must
record it; otherwise straight to the kernel (an op's dispatch costs several microseconds a call).

A team crosses the op boundary as its number (`Team.key`): custom ops take tensors, numbers and strings
only. `team_number` registers the team it numbers; the ops look it up with `op_team`.
"""

from __future__ import annotations

import weakref

import torch
import torch._dynamo

from .. import _active

_TEAMS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # Team.key -> Team


def team_number(team) -> int:
    """The number a custom op takes for `team` (a Team of the current runtime, already checked)."""
    _TEAMS[team.key] = team
    return team.key


def op_team(number: int):
    team = _TEAMS.get(number)
    if team is None:
        raise ValueError(f"unishmem: team number {number} names no live team of this process")
    return team


def team_of(core, team, group):
    """The Team a kernel runs on: `team`, or the team of this runtime whose members are the ranks of
    the torch.distributed ProcessGroup `group` in its order (the world, the node team or a team made
    by a split), or None for the world."""
    if group is None:
        return team
    if team is not None:
        raise ValueError("unishmem.kernels: pass team= or group=, not both")
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() != core.my_pe:
        raise ValueError(
            "unishmem.kernels: group= needs torch.distributed initialised with this runtime's PE numbers "
            "as its ranks (unishmem.init(group=...) or a launcher that sets both)"
        )
    ranks = dist.get_process_group_ranks(group)
    for candidate in core.kernel_teams():
        if [candidate.translate_pe(i, core.team_world) for i in range(candidate.n_pes)] == ranks:
            return candidate
    raise ValueError(
        f"unishmem.kernels: no team of this runtime has the ranks {ranks} of group {group!r}: make one "
        "with rt.team_world.split_strided(...) (collective over the world) first"
    )


@torch._dynamo.assume_constant_result  # read at trace time: Dynamo sees a number, not the runtime
def op_team_arg(team, group=None) -> int:
    """The number a custom op takes for the team of team=/group= (default: the world)."""
    core = _active.core()
    return team_number(core.checked_team(team_of(core, team, group)))


def needs_op(*tensors) -> bool:
    """Whether a kernel call must go through its custom op: under torch.compile, or when autograd
    must record it."""
    if torch.compiler.is_compiling():
        return True
    if torch.is_grad_enabled():
        for t in tensors:  # (a loop: a generator costs a warm call about a microsecond)
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return True
    return False
