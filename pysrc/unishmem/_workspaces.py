"""The symmetric buffers of unishmem.kernels, outside that package so that `rt.free_workspaces()` and
finalize never import Triton.

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

Where they come from. A team of every PE allocates them with rt.zeros (collective over the world,
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
from dataclasses import dataclass, field

import torch

from . import _config
from ._arena import AGREE_WIDTH, Arena, _aligned, _nbytes, reclaim_arenas
from ._dtypes import DTYPE_CODES
from .errors import CaptureError

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


def checks_every_call(rt) -> bool:
    """The host backend compares every call's arguments across PEs (a host collective); GPU backends,
    and a capture (unishmem.testing), only a shape's first call on a workspace."""
    return rt.backend == "host" and not _capturing


@dataclass
class Workspace:
    buffers: dict[str, torch.Tensor]  # symmetric
    members: torch.Tensor  # the team's world PE numbers, int32 on the runtime's device
    my_index: int
    arena: Arena | None = None  # where the buffers lie; None: world allocations (rt.zeros)
    epoch: int = 0  # the host's count of calls, compared across PEs only (never a kernel argument)
    extra: dict = field(default_factory=dict)
    nbytes: int = 0  # the buffers' bytes, each rounded up as the allocator aligns it
    agreed: set = field(default_factory=set)  # the descs of the calls compared across PEs on it
    freed: bool = False  # by rt.free_workspaces(): plans that hold it must not launch (NOTE [call plans])


def _members(rt, team) -> list[int]:
    return [team.translate_pe(i, rt.team_world) for i in range(team.n_pes)]


def size_class(count: int, minimum: int = 1) -> int:
    """The size class of `count` elements (or rows): the smallest power of two >= count, and >= minimum
    (NOTE [workspaces]). A kernel sizes its buffers for the class and keys its workspace on it."""
    return max(minimum, 1 << max(count - 1, 0).bit_length())


def buffer_bytes(buffers: dict) -> int:
    """The symmetric bytes `buffers` (name -> (shape, dtype)) take, each aligned as allocated."""
    return sum(_aligned(_nbytes(shape, dtype)) for shape, dtype in buffers.values())


def held_bytes(rt) -> int:
    """The bytes rt's workspaces hold on the heap (team arenas' workspaces not counted)."""
    return sum(ws.nbytes for ws in rt._workspaces.values() if ws.arena is None)


def room_problem(rt, team, what: str, buffers: dict) -> ValueError | None:
    """Why a new workspace of `buffers` for kernel `what` on `team` may not be allocated, or None:
    UNISHMEM_WORKSPACE_BYTES (NOTE [workspaces]). The same on every PE of a world-sized team; a
    team arena's workspaces are bounded by the arena instead (Arena.take)."""
    if team._arena is not None:
        return None
    need, held = buffer_bytes(buffers), held_bytes(rt)
    cap = _config.workspace_bytes(rt.heap_size)
    if held + need <= cap:
        return None
    unset = _config.get("UNISHMEM_WORKSPACE_BYTES") is None
    return ValueError(
        f"{what}: its workspace needs {need} bytes of symmetric memory and the kernel workspaces of this "
        f"runtime already hold {held} bytes, more together than UNISHMEM_WORKSPACE_BYTES={cap} allows"
        + (f" (unset: half the {rt.heap_size}-byte heap)" if unset else "")
        + "; call rt.free_workspaces() (collective) or raise UNISHMEM_WORKSPACE_BYTES"
    )


def new_workspace(rt, team, what: str, buffers: dict, **extra) -> Workspace:
    """A workspace of zeroed `buffers` (name -> (shape, dtype)) on `team`: from its arena if it has
    one, else world allocations. Every member calls it alike, after `exchange`. It does not check
    UNISHMEM_WORKSPACE_BYTES: keyed_workspace and workspace do."""
    if not _allocating:  # a CUDA graph cannot hold an allocation of symmetric memory (a collective)
        raise CaptureError(
            f"unishmem.testing.capture: {what} allocates its workspace (symmetric memory, a collective) inside "
            "the capture; make one call of the same shapes before capturing"
        )
    arena = team._arena
    tensors = (
        arena.take(rt, team, what, buffers)
        if arena is not None
        else {name: rt.zeros(shape, dtype=dtype) for name, (shape, dtype) in buffers.items()}
    )
    members = torch.tensor(_members(rt, team), dtype=torch.int32, device=rt.device)
    return Workspace(tensors, members, team.my_pe, arena, extra=extra, nbytes=buffer_bytes(buffers))


def keyed_workspace(rt, team, what: str, key: tuple, buffers, **extra) -> Workspace:
    """The workspace stored under `key` (made on first use, after the UNISHMEM_WORKSPACE_BYTES check,
    which raises on every PE alike): for kernels that compare their arguments across PEs themselves
    (`exchange`) and call this after, every member alike. `key` must hold the kernel's name, the team's
    `_id` and a size class (`size_class`) rather than an exact shape, so that shapes share it;
    `buffers`: name -> (shape, dtype), sized for the class, or a function returning that, called only
    on first use."""
    ws = rt._workspaces.get(key)
    if ws is None:
        spec = buffers() if callable(buffers) else buffers
        problem = room_problem(rt, team, what, spec)
        if problem is not None:
            raise problem
        ws = rt._workspaces[key] = new_workspace(rt, team, what, spec, **extra)
    return ws


def _describe(desc: list[int], label: str = "shape", variants: tuple = ()) -> str:
    kind, dtype_code, ndim, *dims, variant = desc
    dtype = next((d for d, c in DTYPE_CODES.items() if c == dtype_code), dtype_code)
    return f"{dtype} of {label} {list(dims[:ndim])}" + (f" ({variants[variant]})" if variants else "")


def _exchange_through_bootstrap(rt, team, desc: list[int]) -> list[list[int]]:
    """NOTE [limited-mode exchange]: NVSHMEM's limited multi-PE-per-GPU mode (PEs sharing a GPU without
    MPS) ends the process on a host collective, and refuses team splits for that reason, so its
    teams are the world and the node team, which there has the world's PEs. Their descs go through
    the bootstrap that started the job instead (JSON, over the launcher's rendezvous or torch.distributed)."""
    if team.n_pes != rt.n_pes:  # a sub-team's non-members would not take part
        raise ValueError(f"{team.name}: only world-sized teams can agree through the bootstrap")
    everyone = rt._bootstrap.allgather(list(desc))
    return [everyone[pe] for pe in _members(rt, team)]


def exchange(rt, team, what: str, desc: list[int], problem: Exception | None) -> list[list[int]]:
    """Every member's `desc` (a host fcollect; NOTE [limited-mode exchange]), after which this PE
    raises its own `problem`, or a ValueError naming the members that found one (their desc starts
    with a negative number)."""
    if getattr(rt.native, "limited_mode", False):
        return _agreed(what, team, _exchange_through_bootstrap(rt, team, desc), problem)
    width = len(desc)
    if team._arena is not None:
        mine, everyone = team._arena.mine[:width], team._arena.everyone[: team.n_pes * width]
    else:
        key = ("agree", team._id, width)
        if key not in rt._workspaces:
            rt._workspaces[key] = new_workspace(
                rt, team, what, {"mine": ((width,), torch.int64), "everyone": ((team.n_pes * width,), torch.int64)}
            )
        mine, everyone = rt._workspaces[key].buffers.values()
    mine.copy_(torch.tensor(desc, dtype=torch.int64))
    rt.fcollect(everyone, mine, team=team)
    return _agreed(what, team, everyone.view(team.n_pes, width).tolist(), problem)


def _agreed(what: str, team, rows: list[list[int]], problem: Exception | None) -> list[list[int]]:
    if problem is not None:
        raise problem
    rejected = [i for i, row in enumerate(rows) if row[0] < 0]
    if rejected:
        raise ValueError(f"{what}: member(s) {rejected} of {team.name} rejected their arguments (see their error)")
    return rows


def _agree(
    rt, team, what: str, desc: list[int], problem: Exception | None, label: str = "shape", variants: tuple = ()
) -> None:
    """Every member of `team` calls `what` with the same `desc` and no local `problem`, or every
    one raises (a mismatch would otherwise leave some PEs waiting for data that never comes)."""
    rows = exchange(rt, team, what, desc, problem)
    differ = [i for i, row in enumerate(rows) if row != rows[0]]
    if differ:
        raise ValueError(
            f"{what}: the PEs of {team.name} disagree: member 0 passes "
            f"{_describe(rows[0], label, variants)}, "
            + ", ".join(f"member {i} {_describe(rows[i], label, variants)}" for i in differ)
        )


def workspace(
    rt,
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
    if problem is None and (len(shape) > DESC_DIMS or x.dtype not in DTYPE_CODES):
        problem = ValueError(
            f"{what}: x must have at most {DESC_DIMS} dimensions and a dtype of the symmetric "
            f"heap; got {x.dtype} of shape {list(shape)}"
        )
    full_key = (what, getattr(x, "dtype", None), team._id, *key)
    ws = rt._workspaces.get(full_key)
    spec = None
    if ws is None and problem is None:
        spec = buffers()
        problem = room_problem(rt, team, what, spec)  # before the exchange: every member hears of it
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
    if ws is None or problem or desc not in ws.agreed or checks_every_call(rt):
        _agree(rt, team, what, list(desc), problem, label, variants)
    if ws is None:
        ws = rt._workspaces[full_key] = new_workspace(rt, team, what, spec)
    ws.agreed.add(desc)
    return ws


def free_workspaces(rt) -> None:
    """Collective over the world: frees every kernel workspace of this runtime, empties every team
    arena and frees the world allocations of arenas whose teams were all destroyed."""
    for ws in rt._workspaces.values():
        ws.freed = True
        if ws.arena is None:
            for t in ws.buffers.values():
                rt.free(t)
    rt._workspaces.clear()
    for _, users in rt._arenas:
        for team in users:
            team._arena.low = team._arena.base
    reclaim_arenas(rt)
