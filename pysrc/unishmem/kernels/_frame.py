"""The frame every kernel of unishmem.kernels is called through, written once: the team, the argument
checks, the capped grid and the pieces of a peer's data, the inputs a kernel reads (in place or copied
in) and the call plans. A kernel module takes these from here and nothing private from another kernel
module (tests/test_layout.py). A kernel function, after _routing's needs_op (the custom op's way,
its result copied into out= by `into`), uses them in this order: a warm call's plan (`planned`, then
`run_plan`), where the kernel keeps plans; its team (`kernel_team`); its arguments' checks
(`check_tensor`, `check_out`, returning the problem instead of raising it, so that workspace() in
unishmem._workspaces raises it on every member alike); its workspace; its grid (`capped_grid`,
`peer_pieces`); its launch on its inputs (`inputs`, `output`), or `plan_and_launch`, which records
the plan first.

NOTE [persistent grid]: a kernel on the capped grid launches at most max_programs() programs (the
GPU's multiprocessors; under TRITON_INTERPRET=1 the programs resident at once; UNISHMEM_MAX_PROGRAMS
overrides), never one per block, and each phase's tasks (pieces to send, blocks to reduce, blocks
to gather, tiles) go round the grid: program p takes tasks p, p + G, p + 2G, ... (G: the grid). In every
phase a program issues all of its puts before it waits, and the puts of a phase wait only for
earlier phases (the pull one-shot: program 0 signals before it waits), so as long as every program
of the grid is resident (which the cap is for) every wait is for work that has started or can
start. Nothing depends on G being the same on every PE: slots, signals and blocks are numbered by
task, never by program.

NOTE [call plans]: a warm call skips what its first call of the same shape worked out. After a
call's full checks, its kernel records a plan under a key of everything those checks read but the
data: the kernel, each tensor argument's dtype, shape and device, the call's other arguments (the
collectives' keys in collectives.py, the GEMMs' _plan_key, moe's _combine_key, which also holds the
handle's workspace and team, and _dispatch_key). That is sound because a call whose key matches would
pass the same checks, but for those a warm call makes again (out's, and where x is read from) and the
workspace's, whose plans end when it is freed; no key is made where it could not hold what the checks
read (group=, a tensor subclass, an argument of another type than the checks take). A plan holds its
workspace, its output's shape and its launch, bound to every argument but the call's tensors, grid
included (Kernel.bind: on a GPU backend a warm launch skips Triton's own preparation too, NOTE [direct
launch] in triton_support.py). Where arguments are compared across PEs only on a shape's first call
(GPU backends, a capture: workspace()), a call that finds a plan whose workspace is still live checks
only out, picks its source (x in place or copied in) and launches: a few microseconds of host work
instead of tens. Settings that shape a launch (UNISHMEM_COMM_BLOCK_BYTES, UNISHMEM_MAX_PROGRAMS,
UNISHMEM_PULL) are read when a shape is planned: after changing them, rt.free_workspaces() (which
ends every plan) makes the next call plan anew.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._workspaces import Workspace, checks_every_call
from ..triton_support import interpreting
from ._routing import team_of

MAX_PIECES = 16  # programs (at most) that send the data for one peer


def kernel_team(core, team, group):
    """The Team a kernel call runs on (team=, or group= through team_of; None: the world), checked,
    with the team arena its workspaces need."""
    team = core.checked_team(team_of(core, team, group))
    if team.n_pes != core.n_pes and core.workspaces.arena_of(team) is None:  # every member raises alike
        raise ValueError(
            f"unishmem.kernels: {team.name} ({team.n_pes} of {core.n_pes} PEs) has no team arena for "
            f"its workspaces (NOTE [workspaces]): {core.workspaces.why_no_arena(team)}"
        )
    return team


# On the host, plain integer arithmetic: triton.cdiv and next_power_of_2 cost microseconds a call there
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def max_programs(kernel) -> int:
    """The most programs a kernel on the capped grid launches (NOTE [persistent grid]):
    UNISHMEM_MAX_PROGRAMS, else the GPU's multiprocessors; under TRITON_INTERPRET=1 never more than
    `kernel` keeps resident."""
    from .. import _active, _config

    most = _config.get("UNISHMEM_MAX_PROGRAMS")
    device = _active.core().device
    if interpreting() or device.type != "cuda":  # (the host backend's kernels always run interpreted)
        resident = kernel.resident if kernel.resident is not None else _config.get("UNISHMEM_INTERPRET_RESIDENT")
        return resident if most is None else min(most, resident)
    return most if most is not None else _multiprocessors(device)


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    """SMs (NVIDIA) or compute units (AMD) of a GPU, read once per device."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def capped_grid(kernel, tasks: int, most: int | None = None) -> tuple[int]:
    """The grid of `kernel` for `tasks` tasks (NOTE [persistent grid]): one program per task, at most
    max_programs(kernel) (and `most`), at least one."""
    cap = max_programs(kernel) if most is None else min(most, max_programs(kernel))
    return (max(1, min(tasks, cap)),)


def peer_pieces(numel: int, itemsize: int, block_bytes: int | None = None) -> tuple[int, int]:
    """(programs, elements per program) for the data sent to one peer: one program per block_bytes
    (None: UNISHMEM_COMM_BLOCK_BYTES), at most MAX_PIECES, each piece a multiple of 16 bytes but the last."""
    from .. import _config

    block_bytes = block_bytes or _config.get("UNISHMEM_COMM_BLOCK_BYTES")
    count = max(1, min(MAX_PIECES, cdiv(numel * itemsize, block_bytes)))
    align = max(1, 16 // itemsize)
    piece = cdiv(cdiv(max(numel, 1), count), align) * align
    return cdiv(max(numel, 1), piece), piece


def check_tensor(core, x, name: str, what: str):
    """The problem with x as tensor argument `name` of kernel `what` (not a tensor, or not on the
    runtime's device), or None."""
    if not isinstance(x, torch.Tensor):
        return TypeError(f"{what}: {name} must be a torch.Tensor, got {type(x).__name__}")
    if x.device != core.device:
        return ValueError(f"{what}: {name} is on {x.device}, not the runtime's device {core.device}")
    return None


def check_out(out, shape, dtype, what: str):
    """The problem with out (None: the kernel makes it) as the output of kernel `what`, or None."""
    if out is None:
        return None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(shape) or out.dtype != dtype:
        got = f"{out.dtype} of shape {list(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        return ValueError(f"{what}: out must be {dtype} of shape {list(shape)}, got {got}")
    if not out.is_contiguous():  # the kernel writes it as one run of elements
        return ValueError(f"{what}: out must be contiguous, got strides {list(out.stride())}")
    return None


def into(out, result, what: str):
    """result, or result copied into out (the ops take no out=), checked as the kernels check it."""
    if out is None:
        return result
    problem = check_out(out, result.shape, result.dtype, what)
    if problem:
        raise problem
    out.copy_(result)
    return out


def empty(shape, dtype, device) -> torch.Tensor:
    """torch.empty(shape): the sizes passed one by one, which torch's argument parser takes about
    0.5 us sooner than a tuple (a warm call's outputs)."""
    return torch.empty(*shape, dtype=dtype, device=device) if shape else torch.empty((), dtype=dtype, device=device)


def output(core, out, shape, dtype):
    return empty(shape, dtype, core.device) if out is None else out


def inputs(core, ws: Workspace, x, out):
    """(x, src, stage) for a kernel that reads all of x: a contiguous symmetric x is read in place
    (src is x) unless out overlaps it (programs write out while others, and peers, still read src);
    any other contiguous x the kernel copies into the workspace's src itself (stage=1, NOTE
    [copy-in]); a strided x is copied there by torch first (one more launch)."""
    if x.is_contiguous():
        in_place = core.is_symmetric(x) and not overlap(x, out)
        return (x, x, 0) if in_place else (x, ws.buffers["src"], 1)
    src = ws.buffers["src"]
    src.view(-1)[: x.numel()].view(x.shape).copy_(x)
    return src, src, 0


def overlap(a, b) -> bool:
    """Whether contiguous tensors a and b share a byte."""
    start, end = a.data_ptr(), a.data_ptr() + a.nbytes
    return b.data_ptr() < end and start < b.data_ptr() + b.nbytes


@dataclass
class Plan:
    ws: Workspace
    shape: tuple  # out's
    launch: Callable[..., None]  # launch(x, src, stage, out)


def planned(core, key):
    """The plan recorded under key, where a call may use it (NOTE [call plans]), or None."""
    plan = core.workspaces.plans.get(key)
    if plan is None or plan.ws.freed or checks_every_call(core):
        return None
    return plan


def record(core, key, plan: Plan) -> None:
    """Keep a call's plan (NOTE [call plans]) under key; None: the call has none."""
    if key is not None:
        core.workspaces.plans[key] = plan


def plan_and_launch(core, key, ws: Workspace, shape, launch, x, out, *more):
    """Record the plan of a call (NOTE [call plans]; its kernel reads all of x), then launch it on x
    into out (a new tensor where out is None), with the call's `more` tensors after out: a call's
    first launch, its arguments checked."""
    record(core, key, Plan(ws, tuple(shape), launch))
    out = output(core, out, shape, x.dtype)
    launch(*inputs(core, ws, x, out), out, *more)
    return out


def run_plan(core, plan: Plan, x, out, what: str, *more):
    """A warm call (NOTE [call plans]): check out, pick x's source, launch."""
    if out is None:
        out = empty(plan.shape, x.dtype, core.device)
    else:
        problem = check_out(out, plan.shape, x.dtype, what)
        if problem:
            raise problem
    plan.launch(*inputs(core, plan.ws, x, out), out, *more)
    return out


class PeerViews:
    """Members' views (rt.peer) of elements first .. first + numel of a source buffer, for device copies
    that read it in place (NOTE [copy engine] in collectives.py): made once per source address and kept
    (x read in place comes at a few addresses in turn, so at most 8 are kept), as a CUDA graph keeps the
    copies it captured with them."""

    def __init__(self, core, pes: list[int], first: int, numel: int):
        self.core, self.pes, self.first, self.numel = core, pes, first, numel
        self.made: dict[int, list[torch.Tensor]] = {}  # source address -> a view per PE of pes, in order

    def of(self, src: torch.Tensor) -> list[torch.Tensor]:
        views = self.made.get(src.data_ptr())
        if views is None:
            if len(self.made) >= 8:
                self.made.clear()
            span = slice(self.first, self.first + self.numel)
            views = self.made[src.data_ptr()] = [self.core.peer(src, pe).view(-1)[span] for pe in self.pes]
        return views


class SideStream:
    """A second stream of a GPU, for device copies that overlap work on torch's current stream (NOTE
    [ag_gemm copy engine], NOTE [ag_gemm chunked] in gemm.py): work enqueued under `fork()` starts after
    what the current stream holds; `mark(i)` records event i of `marks` there, which `wait_for(i)` makes
    the current stream's later work wait for; `join()` makes it wait for all of it. Captured in a CUDA
    graph, these are the graph's edges. The host backend has no streams: there the work runs in the order
    issued."""

    def __init__(self, device: torch.device, marks: int = 0):
        self.stream = _side_stream(device) if device.type == "cuda" else None
        self.marks = [torch.cuda.Event() for _ in range(marks)] if self.stream is not None else []

    @contextlib.contextmanager
    def fork(self):
        if self.stream is None:
            yield
            return
        self.stream.wait_stream(torch.cuda.current_stream(self.stream.device))
        with torch.cuda.stream(self.stream):
            yield

    def mark(self, i: int) -> None:
        if self.stream is not None:
            self.marks[i].record(self.stream)

    def wait_for(self, i: int) -> None:
        if self.stream is not None:
            torch.cuda.current_stream(self.stream.device).wait_event(self.marks[i])

    def join(self) -> None:
        if self.stream is not None:
            torch.cuda.current_stream(self.stream.device).wait_stream(self.stream)


@functools.cache
def _side_stream(device: torch.device) -> torch.cuda.Stream:
    """One side stream per GPU, made on first use."""
    return torch.cuda.Stream(device)


_REACHABLE: dict[int, bool] = {}  # team id (never reused) -> every member reachable by load/store


def reachable(core, team) -> bool:
    """Whether this PE reaches every member of team by load/store (rt.peer is not None): the same on
    every member, as PEs reach each other by node. Asked once per team."""
    found = _REACHABLE.get(team.key)
    if found is None:
        found = _REACHABLE[team.key] = all(
            core.native.peer_ptr(core.heap_base, team.translate_pe(i, core.team_world)) != 0 for i in range(team.n_pes)
        )
    return found
