"""The symmetric buffers of unishmem.kernels and the team arenas they come from on teams smaller than
the world: one store per runtime (its core's `workspaces`, a WorkspaceStore). Outside unishmem.kernels,
so that init, splits, `rt.free_workspaces()` and finalize never import Triton.

NOTE [workspaces]: the symmetric buffers a kernel needs (staging, receive slots, signals) come in
size classes: a workspace is keyed by (kernel, dtype, team, variant, size class), where the class is
the power of two at or above the elements (or rows) the call needs (`size_class`), and its buffers
are sized for the class, so every shape of that class shares it; the kernel takes the call's actual
sizes as run-time arguments and lays its buffers out by the class (each parity at a fixed offset),
never by the call. One workspace serves calls of several shapes safely because its call counter
(NOTE [call counter]) and signals belong to the workspace: every call on it is numbered in the
same order on every PE, and its signals only grow. A workspace is allocated collectively on the
first call of its class and reused after; `rt.free_workspaces()` and finalize free them, never
garbage collection (a free is collective, so it cannot happen at a moment one PE chooses). The
PEs compare a call's arguments (`exchange`) before anything is allocated: on the host backend at
every call, on GPU backends (and inside a capture, which like a CUDA graph cannot hold a host
collective) on the first call of each shape on each workspace, a new shape in an existing class
included.
The workspaces allocated from the heap (those of world-sized teams) hold at most
UNISHMEM_WORKSPACE_BYTES together (default half the heap): a call whose new workspace would pass
it raises a ValueError naming the cap, its need and what is held, on every PE alike (every PE holds
the same workspaces of world-sized teams, so the check is the same everywhere, and it is made before
the exchange, so a PE whose setting differs makes the others raise too). Nothing is evicted: a
workspace may be held by a captured graph. A team arena bounds its team's workspaces itself.

Each call numbers itself on the device (`epoch`, from 1; NOTE [call counter] in kernels/_calls.py):
signals are SET to the epoch (or ADDed to, a known count per call) and waited for with >=, so nothing is
ever reset between calls. Receive buffers come in two parities, alternating by
epoch: a peer may start call k+1 while this PE still reads call k's data, but not call k+2 (that
needs this PE's data of call k+1, sent after it finished reading call k).

Where they come from. A team of every PE allocates them zeroed (collective over the world,
checked across PEs on the host backend). A smaller team cannot: the PEs outside it never call. So
each team smaller than the world gets a team arena when it is split, while every PE that must take
part is calling anyway: a split of a world-sized team is collective over the world, so the arena is
a world allocation made inside the split (UNISHMEM_TEAM_ARENA bytes; PEs outside the new team
allocate it too, keeping the heap symmetric); a split of a smaller team carves its children's arenas
off the top of the parent's (every parent member calls that split), half of what the parent has free.
A node team smaller than the world (several hosts, or simulated nodes) gets its arena the same way at
init, the one point collective over the world before any kernel can run on it.
In an arena, the agreement buffers of `exchange` come first, then workspaces are bump-allocated by the
team's members only, after `exchange` has shown that every member asks for the same one: same order
on every member, hence the same offsets. A new workspace is zeroed and the team synchronised before
any member may write into it (an old workspace's signals may have held any epoch).
A team destroy is collective over its members only, so it cannot free a world allocation: the world
allocation of an arena goes back at the next world-collective point that finds every team using it
destroyed (a split of a world-sized team, rt.free_workspaces()), and at finalize.
rt.free_workspaces() also resets every arena's bump pointer; what was carved off the top for nested
teams stays carved until the world allocation it lies in goes.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch

from . import _config
from ._dtypes import DTYPE_CODES
from .errors import CaptureError, HeapExhaustedError

AGREE_WIDTH = 10  # int64 words of the longest description kernels exchange
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

    def take(self, core, team, what: str, buffers: dict) -> dict[str, torch.Tensor]:
        """Zeroed `buffers` (name -> (shape, dtype)) from the arena; every member calls it alike,
        after `exchange`, so the offsets agree and every member raises alike when they do not fit."""
        sizes = {name: _aligned(_nbytes(shape, dtype)) for name, (shape, dtype) in buffers.items()}
        need = sum(sizes.values())
        if need > self.high - self.low:
            raise ValueError(
                f"{what}: its workspace needs {need} bytes of symmetric memory, but the team arena of {team.name} "
                f"has {self.high - self.low} of its {self.memory.numel()} bytes free; raise UNISHMEM_TEAM_ARENA "
                f"(now {_config.team_arena(core.heap_size)} bytes, reserved for each team smaller than the world "
                "when it is split; a team split from such a team gets half of its free arena) or call "
                "rt.free_workspaces()"
            )
        out = {}
        for name, (shape, dtype) in buffers.items():
            nbytes = _nbytes(shape, dtype)
            out[name] = self.memory[self.low : self.low + nbytes].view(dtype).view(shape)
            self.low += sizes[name]
        self.memory[self.low - need : self.low].zero_()
        core.sync(team, None)  # no member writes into a copy that its owner has yet to zero
        return out


def _nbytes(shape, dtype) -> int:
    return math.prod(shape) * dtype.itemsize


# the numbers every PE's call is described by (a shape), compared across PEs, in a desc of
# (kind, dtype, ndim, *dims, variant): the longest any kernel exchanges, which a team arena has room for
DESC_DIMS = AGREE_WIDTH - 4


_capturing = False  # inside unishmem.testing.capture(): see capturing()
_allocating = True  # False inside a capture that stands for a CUDA graph: see capturing()


@contextlib.contextmanager
def capturing(graph: bool = True):
    """While a capture records: calls check their arguments once per shape, as on a GPU backend, and
    where the capture stands for a CUDA graph (`graph`), a workspace allocation raises CaptureError."""
    global _capturing, _allocating
    _capturing, _allocating = True, not graph
    try:
        yield
    finally:
        _capturing, _allocating = False, True


def checks_every_call(core) -> bool:
    """The host backend compares every call's arguments across PEs (a host collective); GPU backends,
    and a capture (unishmem.testing), only a shape's first call on a workspace."""
    return core.backend == "host" and not _capturing


@dataclass
class Workspace:
    buffers: dict[str, torch.Tensor]  # symmetric
    members: torch.Tensor  # the team's world PE numbers, int32 on the runtime's device
    my_index: int
    arena: Arena | None = None  # where the buffers lie; None: world allocations (zeroed by the core)
    epoch: int = 0  # the host's count of calls, compared across PEs only (never a kernel argument)
    extra: dict = field(default_factory=dict)
    nbytes: int = 0  # the buffers' bytes, each rounded up as the allocator aligns it
    agreed: set = field(default_factory=set)  # the descs of the calls compared across PEs on it
    freed: bool = False  # by rt.free_workspaces(): plans that hold it must not launch (NOTE [call plans])


def _members(core, team) -> list[int]:
    return [team.translate_pe(i, core.team_world) for i in range(team.n_pes)]


def size_class(count: int, minimum: int = 1) -> int:
    """The size class of `count` elements (or rows): the smallest power of two >= count, and >= minimum
    (NOTE [workspaces]). A kernel sizes its buffers for the class and keys its workspace on it."""
    return max(minimum, 1 << max(count - 1, 0).bit_length())


def buffer_bytes(buffers: dict) -> int:
    """The symmetric bytes `buffers` (name -> (shape, dtype)) take, each aligned as allocated."""
    return sum(_aligned(_nbytes(shape, dtype)) for shape, dtype in buffers.values())


def held_bytes(core) -> int:
    """The bytes core's workspaces hold on the heap (team arenas' workspaces not counted)."""
    return sum(ws.nbytes for ws in core.workspaces._by_key.values() if ws.arena is None)


def room_problem(core, team, what: str, buffers: dict) -> ValueError | None:
    """Why a new workspace of `buffers` for kernel `what` on `team` may not be allocated, or None:
    UNISHMEM_WORKSPACE_BYTES (NOTE [workspaces]). The same on every PE of a world-sized team; a
    team arena's workspaces are bounded by the arena instead (Arena.take)."""
    if core.workspaces.arena_of(team) is not None:
        return None
    need, held = buffer_bytes(buffers), held_bytes(core)
    cap = _config.workspace_bytes(core.heap_size)
    if held + need <= cap:
        return None
    unset = _config.get("UNISHMEM_WORKSPACE_BYTES") is None
    return ValueError(
        f"{what}: its workspace needs {need} bytes of symmetric memory and the kernel workspaces of this "
        f"runtime already hold {held} bytes, more together than UNISHMEM_WORKSPACE_BYTES={cap} allows"
        + (f" (unset: half the {core.heap_size}-byte heap)" if unset else "")
        + "; call rt.free_workspaces() (collective) or raise UNISHMEM_WORKSPACE_BYTES"
    )


def new_workspace(core, team, what: str, buffers: dict, **extra) -> Workspace:
    """A workspace of zeroed `buffers` (name -> (shape, dtype)) on `team`: from its arena if it has
    one, else world allocations. Every member calls it alike, after `exchange`. It does not check
    UNISHMEM_WORKSPACE_BYTES: keyed_workspace and workspace do."""
    if not _allocating:  # a CUDA graph cannot hold an allocation of symmetric memory (a collective)
        raise CaptureError(
            f"unishmem.testing.capture: {what} allocates its workspace (symmetric memory, a collective) inside "
            "the capture; make one call of the same shapes before capturing"
        )
    arena = core.workspaces.arena_of(team)
    tensors = (
        arena.take(core, team, what, buffers)
        if arena is not None
        else {name: core.zeros(shape, dtype) for name, (shape, dtype) in buffers.items()}
    )
    members = torch.tensor(_members(core, team), dtype=torch.int32, device=core.device)
    return Workspace(tensors, members, team.my_pe, arena, extra=extra, nbytes=buffer_bytes(buffers))


def keyed_workspace(core, team, what: str, key: tuple, buffers, **extra) -> Workspace:
    """The workspace stored under `key` (made on first use, after the UNISHMEM_WORKSPACE_BYTES check,
    which raises on every PE alike): for kernels that compare their arguments across PEs themselves
    (`exchange`) and call this after, every member alike. `key` must hold the kernel's name, the team's
    `_id` and a size class (`size_class`) rather than an exact shape, so that shapes share it;
    `buffers`: name -> (shape, dtype), sized for the class, or a function returning that, called only
    on first use."""
    store = core.workspaces
    ws = store.get(key)
    if ws is None:
        spec = buffers() if callable(buffers) else buffers
        problem = room_problem(core, team, what, spec)
        if problem is not None:
            raise problem
        ws = store._by_key[key] = new_workspace(core, team, what, spec, **extra)
    return ws


def _describe(desc: list[int], label: str = "shape", variants: tuple = ()) -> str:
    kind, dtype_code, ndim, *dims, variant = desc
    dtype = next((d for d, c in DTYPE_CODES.items() if c == dtype_code), dtype_code)
    return f"{dtype} of {label} {list(dims[:ndim])}" + (f" ({variants[variant]})" if variants else "")


def _exchange_through_bootstrap(core, team, desc: list[int]) -> list[list[int]]:
    """NOTE [limited-mode exchange]: NVSHMEM's limited multi-PE-per-GPU mode (PEs sharing a GPU without
    MPS) ends the process on a host collective, and refuses team splits for that reason, so its
    teams are the world and the node team, which there has the world's PEs. Their descs go through
    the bootstrap that started the job instead (JSON, over the launcher's rendezvous or torch.distributed)."""
    if team.n_pes != core.n_pes:  # a sub-team's non-members would not take part
        raise ValueError(f"{team.name}: only world-sized teams can agree through the bootstrap")
    everyone = core.bootstrap.allgather(list(desc))
    return [everyone[pe] for pe in _members(core, team)]


def exchange(core, team, what: str, desc: list[int], problem: Exception | None) -> list[list[int]]:
    """Every member's `desc` (a host fcollect; NOTE [limited-mode exchange]), after which this PE
    raises its own `problem`, or a ValueError naming the members that found one (their desc starts
    with a negative number)."""
    if getattr(core.native, "limited_mode", False):
        return _agreed(what, team, _exchange_through_bootstrap(core, team, desc), problem)
    width, store, arena = len(desc), core.workspaces, core.workspaces.arena_of(team)
    if arena is not None:
        mine, everyone = arena.mine[:width], arena.everyone[: team.n_pes * width]
    else:
        key = ("agree", team.key, width)
        if key not in store._by_key:
            store._by_key[key] = new_workspace(
                core, team, what, {"mine": ((width,), torch.int64), "everyone": ((team.n_pes * width,), torch.int64)}
            )
        mine, everyone = store._by_key[key].buffers.values()
    mine.copy_(torch.tensor(desc, dtype=torch.int64))
    core.fcollect(everyone, mine, team, None)
    return _agreed(what, team, everyone.view(team.n_pes, width).tolist(), problem)


def _agreed(what: str, team, rows: list[list[int]], problem: Exception | None) -> list[list[int]]:
    if problem is not None:
        raise problem
    rejected = [i for i, row in enumerate(rows) if row[0] < 0]
    if rejected:
        raise ValueError(f"{what}: member(s) {rejected} of {team.name} rejected their arguments (see their error)")
    return rows


def _agree(
    core, team, what: str, desc: list[int], problem: Exception | None, label: str = "shape", variants: tuple = ()
) -> None:
    """Every member of `team` calls `what` with the same `desc` and no local `problem`, or every
    one raises (a mismatch would otherwise leave some PEs waiting for data that never comes)."""
    rows = exchange(core, team, what, desc, problem)
    differ = [i for i, row in enumerate(rows) if row != rows[0]]
    if differ:
        raise ValueError(
            f"{what}: the PEs of {team.name} disagree: member 0 passes "
            f"{_describe(rows[0], label, variants)}, "
            + ", ".join(f"member {i} {_describe(rows[i], label, variants)}" for i in differ)
        )


def workspace(
    core,
    team,
    what: str,
    x: torch.Tensor,
    buffers,
    problem: Exception | None = None,
    key: tuple = (),
    shape: tuple | None = None,
    label: str = "shape",
    variants: tuple = (),
) -> Workspace:
    """The workspace of kernel `what` for input `x` on `team` under `key` (its size class, and what
    else its buffers depend on; made on first use), after checking that every member passes the same
    dtype and shape and that none found a `problem` with its arguments or with the room a new
    workspace needs (NOTE [workspaces]). `buffers`: name -> (shape, dtype), called only on first use.
    `shape` (at most DESC_DIMS numbers, named `label` in errors) replaces x's shape where a kernel's
    call is described by more than one tensor. `variants`: the kernel's forms with buffers of their
    own, key[0] one of them (every member must pick the same)."""
    if problem:  # (x may not even be a tensor)
        shape = ()
    elif shape is None:
        shape = tuple(x.shape)
    if problem is None and x.dtype not in DTYPE_CODES:  # a TypeError, as torch's for a dtype
        names = ", ".join(str(dtype).removeprefix("torch.") for dtype in DTYPE_CODES)
        problem = TypeError(f"{what}: x is {x.dtype}, which the symmetric heap does not hold (it holds {names})")
    elif problem is None and len(shape) > DESC_DIMS:  # the cross-PE descriptor's room
        problem = ValueError(
            f"{what}: x of shape {list(shape)} has {len(shape)} dimensions, more than the {DESC_DIMS} a "
            "kernel takes: reshape it to fewer"
        )
    full_key = (what, getattr(x, "dtype", None), team.key, *key)
    ws = core.workspaces.get(full_key)
    spec = None
    if ws is None and problem is None:
        spec = buffers()
        problem = room_problem(core, team, what, spec)  # before the exchange: every member hears of it
    desc = (
        (-1,) * AGREE_WIDTH
        if problem
        else (
            0,
            DTYPE_CODES[x.dtype],
            len(shape),
            *shape,
            *[0] * (DESC_DIMS - len(shape)),
            variants.index(key[0]) if variants else 0,
        )
    )
    # GPU backends check once per shape and workspace (a host collective), and so does a capture
    # (unishmem.testing), which, like a CUDA graph, cannot hold one
    if ws is None or problem or desc not in ws.agreed or checks_every_call(core):
        _agree(core, team, what, list(desc), problem, label, variants)
    if ws is None:
        assert spec is not None  # made above, or there was a problem, which _agree raised
        ws = core.workspaces._by_key[full_key] = new_workspace(core, team, what, spec)
    ws.agreed.add(desc)
    return ws


class WorkspaceStore:
    """A runtime's kernel workspaces, by key, and its team arenas (NOTE [workspaces]). The core
    makes one; its splits, team destroys, free_workspaces and finalize call it, and the kernels reach
    it through this module's functions."""

    def __init__(self, core):
        self._core = core  # its Core, for allocations and collectives (untyped: _core.py imports this module)
        self._by_key: dict[tuple, Workspace] = {}
        self._arenas: list = []  # (world allocation, this PE's teams using it) per team arena, in split order
        self._team_arenas: dict[int, Arena] = {}  # Team.key -> its arena
        self._no_arena: dict[int, str] = {}  # Team.key -> why it has none (teams made by a split)
        self.plans: dict = {}  # the kernels' call plans by key (NOTE [call plans] in kernels/_frame.py)

    def get(self, key: tuple) -> Workspace | None:
        return self._by_key.get(key)

    def __len__(self) -> int:
        return len(self._by_key)

    def holds(self, ws: Workspace) -> bool:
        """Whether ws is still one of this runtime's workspaces (not freed since it was made)."""
        return any(v is ws for v in self._by_key.values())

    def arena_of(self, team) -> Arena | None:
        return self._team_arenas.get(team.key)

    def why_no_arena(self, team) -> str:
        return self._no_arena.get(
            team.key, "only teams made by a split, and a node team smaller than the world, get a team arena"
        )

    def arena_teams(self):
        """This PE's live teams that have a team arena, in split order."""
        for _, users in self._arenas:
            yield from (team for team in users if not team.destroyed)

    def split(self, parent, teams: list, world_bytes: int | None) -> None:
        """Inside a split of `parent` (collective over it), after the backend's, or at init for the node
        team: gives each new team smaller than the world an arena. `teams`: (the new team on this PE or
        None, whether that team is smaller than the world), the same list on every member of parent;
        `world_bytes`: UNISHMEM_TEAM_ARENA where parent is as big as the world, else None."""
        small = [team for team, smaller in teams if smaller]
        if not small:
            return
        if world_bytes is not None:
            self._reclaim()
            for team in small:
                memory, why = None, "UNISHMEM_TEAM_ARENA=0"
                if world_bytes:
                    try:
                        memory = self._core.empty(world_bytes, torch.uint8)
                    except HeapExhaustedError:  # on every PE alike: the allocator is deterministic
                        why = f"the heap had no room for its UNISHMEM_TEAM_ARENA={world_bytes} bytes when it was split"
                users: list = []  # the teams that carve from it
                if memory is not None:
                    self._arenas.append((memory, users))
                self._give(team, memory, users, why)
            return
        arena = self.arena_of(parent)
        share = (arena.high - arena.low) // (2 * len(small)) if arena is not None else 0
        for team in small:
            memory = arena.carve(share) if arena is not None else None
            self._give(
                team,
                memory,
                arena.users if arena is not None else [],
                f"{parent.name}, which it was split from, has no team arena to carve one from",
            )

    def _give(self, team, memory, users: list, why: str) -> None:
        if team is None:  # this PE is not a member: it only took part in the allocation
            return
        agree = _aligned(8 * (1 + team.n_pes) * AGREE_WIDTH)
        if memory is not None and memory.numel() < agree:
            memory, why = None, f"its {memory.numel()} bytes are fewer than the {agree} its agreement buffers need"
        if memory is None:
            self._no_arena[team.key] = why
            return
        self._team_arenas[team.key] = Arena(memory, team.n_pes, users)
        users.append(team)

    def forget_team(self, team) -> None:
        """After `team` was destroyed on this PE: its arena's workspaces go (the arena's world
        allocation waits for _reclaim)."""
        arena = self._team_arenas.get(team.key)
        if arena is not None:
            for key in [k for k, ws in self._by_key.items() if ws.arena is arena]:
                self._by_key.pop(key).freed = True  # (NOTE [call plans] in kernels/_frame.py)

    def _reclaim(self) -> None:
        """Collective over the world: frees the world allocations of team arenas that no PE's live team uses."""
        if not self._arenas:
            return
        core = self._core
        used = core.zeros(len(self._arenas), torch.int64)
        used.copy_(torch.tensor([any(not team.destroyed for team in users) for _, users in self._arenas]))
        core.reduce(used, used, "max", None, None)
        keep = used.tolist()
        core.free(used)
        for (memory, users), kept in zip(self._arenas, keep):
            if not kept:
                core.free(memory)
                for team in users:
                    self._team_arenas.pop(team.key, None)
        self._arenas[:] = [arena for arena, kept in zip(self._arenas, keep) if kept]

    def free_workspaces(self) -> None:
        """Collective over the world: frees every kernel workspace, empties every team arena and frees
        the world allocations of arenas whose teams were all destroyed."""
        for ws in self._by_key.values():
            ws.freed = True
            if ws.arena is None:
                for t in ws.buffers.values():
                    self._core.free(t)
        self._by_key.clear()
        self.plans.clear()
        for arena in self._team_arenas.values():
            arena.low = arena.base
        self._reclaim()

    def free_arenas(self) -> None:
        """Collective over the world (finalize): frees the world allocation of every team arena."""
        for memory, _ in self._arenas:
            self._core.free(memory)
        self._arenas.clear()
        self._team_arenas.clear()
