"""Team arenas: symmetric memory reserved for the kernel workspaces of a team smaller than the
world, at the split that makes it or, for a node team, at init (NOTE [workspaces] in
unishmem/_workspaces.py). Here, not in unishmem.kernels, because init, splits and finalize use
them and must not import Triton."""

from __future__ import annotations

import math

import torch

from . import _config
from .errors import HeapExhaustedError

AGREE_WIDTH = 10  # int64 words of the longest description kernels exchange (_workspaces.py)
ALIGN = 256  # of every buffer in an arena, as the heap's allocator aligns allocations


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


class Arena:
    """A team's symmetric bytes for its workspaces (NOTE [workspaces]): the agreement buffers,
    then workspaces from `low` upwards; arenas of teams split from this one are carved off the top."""

    def __init__(self, memory: torch.Tensor, n_pes: int, users: list):
        self.memory = memory  # uint8, symmetric
        self.users = users  # this PE's teams using the world allocation this arena lies in
        agree = memory[: 8 * (1 + n_pes) * AGREE_WIDTH].view(torch.int64)
        self.mine, self.everyone = agree[:AGREE_WIDTH], agree[AGREE_WIDTH:]
        self.base = self.low = _aligned(agree.nbytes)  # (_give checked that the memory holds them)
        self.high = memory.numel()

    def carve(self, nbytes: int) -> torch.Tensor:
        """nbytes (rounded down to ALIGN) off the top, for a nested team's arena."""
        self.high -= nbytes // ALIGN * ALIGN
        return self.memory[self.high : self.high + nbytes // ALIGN * ALIGN]

    def take(self, rt, team, what: str, buffers: dict) -> dict[str, torch.Tensor]:
        """Zeroed `buffers` (name -> (shape, dtype)) from the arena; every member calls it alike,
        after `exchange`, so the offsets agree and every member raises alike when they do not fit."""
        sizes = {name: _aligned(_nbytes(shape, dtype)) for name, (shape, dtype) in buffers.items()}
        need = sum(sizes.values())
        if need > self.high - self.low:
            raise ValueError(
                f"{what}: its workspace needs {need} bytes of symmetric memory, but the team arena of {team.name} "
                f"has {self.high - self.low} of its {self.memory.numel()} bytes free; raise UNISHMEM_TEAM_ARENA "
                f"(now {_config.team_arena(rt.heap_size)} bytes, reserved for each team smaller than the world "
                "when it is split; a team split from such a team gets half of its free arena) or call "
                "rt.free_workspaces()"
            )
        out = {}
        for name, (shape, dtype) in buffers.items():
            nbytes = _nbytes(shape, dtype)
            out[name] = self.memory[self.low : self.low + nbytes].view(dtype).view(shape)
            self.low += sizes[name]
        self.memory[self.low - need : self.low].zero_()
        rt.sync(team)  # no member writes into a copy that its owner has yet to zero
        return out


def _nbytes(shape, dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def reclaim_arenas(rt) -> None:
    """Collective over the world: frees the world allocations of team arenas that no PE's live team uses."""
    if not rt._arenas:
        return
    used = rt.zeros(len(rt._arenas), dtype=torch.int64)
    used.copy_(torch.tensor([any(not team._destroyed for team in users) for _, users in rt._arenas]))
    rt.reduce(used, used, op="max")
    keep = used.tolist()
    rt.free(used)
    for (memory, _), kept in zip(rt._arenas, keep):
        if not kept:
            rt.free(memory)
    rt._arenas[:] = [arena for arena, kept in zip(rt._arenas, keep) if kept]


def free_arenas(rt) -> None:
    """Collective over the world (finalize): frees the world allocation of every team arena."""
    for memory, _ in rt._arenas:
        rt.free(memory)
    rt._arenas.clear()


def split_arenas(rt, parent, teams: list, world_bytes: int | None) -> None:
    """Inside a split of `parent` (collective over it), after the backend's, or at init for the node
    team: gives each new team smaller than the world an arena (NOTE [workspaces]). `teams`: (the new team on this PE or None,
    whether that team is smaller than the world), the same list on every member of parent;
    `world_bytes`: UNISHMEM_TEAM_ARENA where parent is as big as the world, else None."""
    small = [team for team, smaller in teams if smaller]
    if not small:
        return
    if world_bytes is not None:
        reclaim_arenas(rt)
        for team in small:
            memory, why = None, "UNISHMEM_TEAM_ARENA=0"
            if world_bytes:
                try:
                    memory = rt.empty(world_bytes, dtype=torch.uint8)
                except HeapExhaustedError:  # on every PE alike: the allocator is deterministic
                    why = f"the heap had no room for its UNISHMEM_TEAM_ARENA={world_bytes} bytes when it was split"
            users = []
            if memory is not None:
                rt._arenas.append((memory, users))
            _give(team, memory, users, why)
        return
    arena = parent._arena
    share = (arena.high - arena.low) // (2 * len(small)) if arena is not None else 0
    for team in small:
        memory = arena.carve(share) if arena is not None else None
        _give(
            team,
            memory,
            arena.users if arena is not None else [],
            f"{parent.name}, which it was split from, has no team arena to carve one from",
        )


def _give(team, memory, users: list, why: str) -> None:
    if team is None:  # this PE is not a member: it only took part in the allocation
        return
    agree = _aligned(8 * (1 + team.n_pes) * AGREE_WIDTH)
    if memory is not None and memory.numel() < agree:
        memory, why = None, f"its {memory.numel()} bytes are fewer than the {agree} its agreement buffers need"
    if memory is None:
        team._no_arena = why
        return
    team._arena = Arena(memory, team.n_pes, users)
    users.append(team)


def forget_team(rt, team) -> None:
    """After `team` was destroyed on this PE: its arena's workspaces go (the arena's world
    allocation waits for reclaim_arenas)."""
    if team._arena is not None:
        for key in [k for k, ws in rt._workspaces.items() if ws.arena is team._arena]:
            rt._workspaces.pop(key).freed = True  # (NOTE [call plans] in kernels/collectives.py)
