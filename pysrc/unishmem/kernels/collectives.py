"""all_gather, reduce_scatter and all_reduce as Triton kernels in unishmem.language, over any team.

Every kernel pushes: a PE puts its data into each member's receive slot with putmem_signal (the
signal SET to the call's epoch, NOTE [workspaces]) and then waits for its own slots. The kernel
numbers its calls on the device (NOTE [call counter]) and writes the result into `out` itself, so
a call's launch arguments are the same every time: captured in a CUDA graph, it replays correctly.
x is read in place where it is a contiguous symmetric tensor, else staged into the workspace first
(a copy on torch's current stream), so x and out may be any tensors on the runtime's device; out
must be contiguous.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import jit
from .. import language as shl
from .._workspaces import Workspace, workspace
from ..enums import REDUCE_OPS
from ._calls import STATE_WORDS, begin_call, end_call

OPS = {"sum": 0, "min": 1, "max": 2, "prod": 3}
ALGORITHMS = ("auto", "one_shot", "two_shot")
ONE_SHOT_MAX_BYTES = 256 * 1024  # "auto": one-shot reads n full copies; two-shot moves 2x the data once


@triton.jit
def _combine(a, b, OP: tl.constexpr):
    if OP == 0:
        return a + b
    elif OP == 1:
        return tl.minimum(a, b)
    elif OP == 2:
        return tl.maximum(a, b)
    else:
        return a * b


@jit
def _all_gather(
    src, dst, sig, out, state, members, my_index, n, numel, piece, BLOCK: tl.constexpr, ITEMSIZE: tl.constexpr
):
    # program (i, b) sends piece b of this PE's block to member i, waits for piece b of member i's
    # block and copies it into out: each peer's data moves through PIECES = num_programs / n programs
    pieces = tl.num_programs(0) // n
    i = tl.program_id(0) // pieces
    first = tl.program_id(0) % pieces * piece
    size = tl.maximum(tl.minimum(piece, numel - first), 0)
    epoch = begin_call(state)
    parity = epoch % 2
    dst += parity * n * numel
    sig += parity * n * pieces
    word = tl.program_id(0) % pieces
    shl.putmem_signal_nbi_block(
        dst + my_index * numel + first,
        src + first,
        size * ITEMSIZE,
        sig + my_index * pieces + word,
        epoch,
        shl.SIGNAL_SET,
        tl.load(members + i),
    )
    shl.quiet()  # src (x or its staged copy) may change after the call: the put must have read it
    shl.signal_wait_until(sig + i * pieces + word, shl.CMP_GE, epoch)
    _copy(out + i * numel + first, dst + i * numel + first, size, BLOCK)
    end_call(state, epoch)


@triton.jit
def _copy(dest, source, numel, BLOCK: tl.constexpr):
    for start in range(0, numel, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(dest + offs, tl.load(source + offs, mask=offs < numel), mask=offs < numel)


@jit
def _reduce(
    src,
    recv,
    sig,
    red,
    gathered,
    sig2,
    out,
    state,
    members,
    my_index,
    n,
    chunk,
    numel,
    pieces,
    piece,
    SCATTER: tl.constexpr,
    GATHER: tl.constexpr,
    OP: tl.constexpr,
    BLOCK: tl.constexpr,
    ITEMSIZE: tl.constexpr,
):
    """Push chunk q of src (SCATTER; else all of it) to member q's slot my_index, each chunk in
    `pieces` pieces from as many programs; reduce this PE's n slots block by block into out (with
    GATHER into red, then push each reduced block to every member, whose blocks go into out as they
    come); numel: out's elements."""
    p = tl.program_id(0)
    epoch = begin_call(state)
    parity = epoch % 2
    recv += parity * n * chunk
    sig += parity * n * pieces
    if p < n * pieces:
        q = p // pieces
        first = p % pieces * piece
        shl.putmem_signal_nbi_block(
            recv + my_index * chunk + first,
            (src + q * chunk if SCATTER else src) + first,
            tl.maximum(tl.minimum(piece, chunk - first), 0) * ITEMSIZE,
            sig + my_index * pieces + p % pieces,
            epoch,
            shl.SIGNAL_SET,
            tl.load(members + q),
        )
        shl.quiet()  # src (x or its staged copy) may change after the call: the put must have read it
    shl.wait_until_all(sig, n * pieces, shl.CMP_GE, epoch)
    start = p * BLOCK
    if start < chunk:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < chunk
        acc = tl.load(recv + offs, mask=mask)
        for s in range(1, n):
            acc = _combine(acc, tl.load(recv + s * chunk + offs, mask=mask), OP)
        if GATHER:  # two-shot: every member gets this reduced block; signals per (block, sender)
            red += parity * chunk
            gathered += parity * n * chunk
            sig2 += parity * tl.cdiv(chunk, BLOCK) * n
            tl.store(red + offs, acc, mask=mask)
            size = tl.minimum(BLOCK, chunk - start) * ITEMSIZE
            for j in range(n):
                shl.putmem_signal_nbi_block(
                    gathered + my_index * chunk + start,
                    red + start,
                    size,
                    sig2 + p * n + my_index,
                    epoch,
                    shl.SIGNAL_SET,
                    tl.load(members + j),
                )
            shl.wait_until_all(sig2 + p * n, n, shl.CMP_GE, epoch)
            for j in range(n):
                where = j * chunk + offs
                tl.store(out + where, tl.load(gathered + where, mask=mask), mask=mask & (where < numel))
        else:
            tl.store(out + offs, acc, mask=mask)
    end_call(state, epoch)


def _team(rt, team):
    team = rt._team(team)
    if team.n_pes != rt.n_pes and team._arena is None:  # every member raises alike: none is left waiting
        raise ValueError(
            f"unishmem.kernels: {team.name} ({team.n_pes} of {rt.n_pes} PEs) has no team arena for "
            f"its workspaces (NOTE [workspaces]): {team._no_arena}"
        )
    return team


# On the host, plain integer arithmetic: triton.cdiv and next_power_of_2 cost microseconds a call there
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _block(n: int) -> int:
    return min(4096, _next_power_of_2(max(n, 1)))


MAX_PIECES = 16


def _pieces(numel: int, itemsize: int) -> tuple[int, int]:
    """(programs, elements per program) for the data sent to one peer: one program per
    UNISHMEM_COMM_BLOCK_BYTES, at most MAX_PIECES, each piece a multiple of 16 bytes but the last."""
    from .. import _config

    count = max(1, min(MAX_PIECES, _cdiv(numel * itemsize, _config.get("UNISHMEM_COMM_BLOCK_BYTES"))))
    align = max(1, 16 // itemsize)
    piece = _cdiv(_cdiv(max(numel, 1), count), align) * align
    return _cdiv(max(numel, 1), piece), piece


def _check_tensor(rt, x, name: str, what: str):
    if not isinstance(x, torch.Tensor):
        return TypeError(f"{what}: {name} must be a torch.Tensor, got {type(x).__name__}")
    if x.device != rt.device:
        return ValueError(f"{what}: {name} is on {x.device}, not the runtime's device {rt.device}")
    return None


def _check_out(out, shape, dtype, what: str):
    if out is None:
        return None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(shape) or out.dtype != dtype:
        got = f"{out.dtype} of shape {list(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        return ValueError(f"{what}: out must be {dtype} of shape {list(shape)}, got {got}")
    if not out.is_contiguous():  # the kernel writes it as one run of elements
        return ValueError(f"{what}: out must be contiguous, got strides {list(out.stride())}")
    return None


def _output(rt, out, shape, dtype):
    return torch.empty(shape, dtype=dtype, device=rt.device) if out is None else out


def _source(rt, ws: Workspace, x, readable: int):
    """What the kernel sends from: x itself where it is a contiguous symmetric tensor and the kernel
    reads no more than its `readable` elements, else x staged into the workspace (a copy on torch's
    current stream)."""
    if x.is_contiguous() and x.numel() >= readable and rt.is_symmetric(x):
        return x
    src = ws.buffers["src"]
    src.view(-1)[: x.numel()].copy_(x.reshape(-1))
    return src


def all_gather(x, out=None, team=None):
    """Every member's x, concatenated along dim 0 in team order (all_gather_into_tensor). Runs on
    torch's current stream; safe to capture in a CUDA graph once a call of the same shape has run."""
    from .. import runtime

    rt = runtime()
    team = _team(rt, team)
    n = team.n_pes
    problem = _check_tensor(rt, x, "x", "all_gather")
    shape = (n * x.shape[0], *x.shape[1:]) if problem is None and x.dim() else (n,)
    problem = problem or _check_out(out, shape, x.dtype, "all_gather")
    numel = x.numel() if problem is None else 0
    pieces, piece = _pieces(numel, x.element_size()) if problem is None else (1, 1)
    ws = workspace(
        rt,
        team,
        "all_gather",
        x,
        lambda: {
            "src": ((numel,), x.dtype),
            "dst": ((2, n * numel), x.dtype),
            "sig": ((2, n * pieces), torch.uint64),
            "state": ((STATE_WORDS,), torch.int64),
        },
        problem,
    )
    src = _source(rt, ws, x, numel)
    out = _output(rt, out, shape, x.dtype)
    b = ws.buffers
    _all_gather[(n * pieces,)](
        src,
        b["dst"],
        b["sig"],
        out,
        b["state"],
        ws.members,
        ws.my_index,
        n,
        numel,
        piece,
        BLOCK=_block(piece),
        ITEMSIZE=x.element_size(),
    )
    return out


def _reduction_args(rt, x, op, out, team, what: str, out_shape):
    """(team, the problem with the arguments or None, the output's shape)."""
    team = _team(rt, team)
    problem = _check_tensor(rt, x, "x", what)
    if problem is None and op not in REDUCE_OPS:
        problem = ValueError(f"{what}: op={op!r} is not one of {', '.join(REDUCE_OPS)}")
    if problem is None and x.dtype in (torch.bool, torch.complex64, torch.complex128):
        problem = TypeError(f"{what}: dtype {x.dtype} cannot be reduced")
    shape = ()
    if problem is None:
        try:
            shape = out_shape(team.n_pes)
        except ValueError as e:
            problem = e
    return team, problem or _check_out(out, shape, x.dtype, what), shape


def reduce_scatter(x, op: str = "sum", out=None, team=None):
    """Member i gets block i (along dim 0) of the elementwise reduction of every member's x
    (reduce_scatter_tensor); x.shape[0] must split into team.n_pes equal blocks. Runs on torch's
    current stream; safe to capture in a CUDA graph once a call of the same shape has run."""
    from .. import runtime

    rt = runtime()

    def out_shape(n):
        if x.dim() == 0 or x.shape[0] % n:
            raise ValueError(
                f"reduce_scatter: x of shape {list(x.shape)} does not split into {n} equal blocks along dim 0"
            )
        return (x.shape[0] // n, *x.shape[1:])

    team, problem, shape = _reduction_args(rt, x, op, out, team, "reduce_scatter", out_shape)
    n = team.n_pes
    chunk = x.numel() // n if problem is None else 0
    ws = workspace(rt, team, "reduce_scatter", x, lambda: _reduce_buffers(x, n, chunk, gather=False), problem)
    return _run_reduce(ws, x, op, out, shape, n, chunk, scatter=True, gather=False)


def all_reduce(x, op: str = "sum", algorithm: str = "auto", out=None, team=None):
    """The elementwise reduction of every member's x, on every member. "one_shot": each PE reads
    all n copies; "two_shot": reduce-scatter then all-gather in one launch; "auto": one-shot up to
    256 KiB. Runs on torch's current stream; safe to capture in a CUDA graph once a call of the same
    shape has run."""
    from .. import runtime

    rt = runtime()
    team, problem, shape = _reduction_args(rt, x, op, out, team, "all_reduce", lambda n: tuple(x.shape))
    if problem is None and algorithm not in ALGORITHMS:
        problem = ValueError(f"all_reduce: algorithm={algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    n = team.n_pes
    if algorithm == "auto":
        algorithm = "one_shot" if problem or x.numel() * x.element_size() <= ONE_SHOT_MAX_BYTES else "two_shot"
    two_shot = algorithm == "two_shot"
    chunk = 0 if problem else -(-x.numel() // n) if two_shot else x.numel()
    ws = workspace(
        rt,
        team,
        "all_reduce",
        x,
        lambda: _reduce_buffers(x, n, chunk, gather=two_shot),
        problem,
        key=(algorithm,),
        variants=ALGORITHMS[1:],
    )
    return _run_reduce(ws, x, op, out, shape, n, chunk, scatter=two_shot, gather=two_shot)


def _reduce_buffers(x, n: int, chunk: int, gather: bool) -> dict:
    nblocks = -(-chunk // _block(chunk)) if chunk else 0
    buffers = {
        "src": ((max(n * chunk if gather else x.numel(), 1),), x.dtype),
        "recv": ((2, n * chunk), x.dtype),
        "sig": ((2, n * _pieces(chunk, x.element_size())[0]), torch.uint64),
        "state": ((STATE_WORDS,), torch.int64),
    }
    if gather:
        buffers |= {
            "red": ((2, chunk), x.dtype),
            "gathered": ((2, n * chunk), x.dtype),
            "sig2": ((2, nblocks * n), torch.uint64),
        }
    return buffers


def _run_reduce(ws: Workspace, x, op, out, shape, n, chunk, scatter: bool, gather: bool):
    from .. import runtime

    rt = runtime()
    src = _source(rt, ws, x, n * chunk if scatter else x.numel())  # two-shot pads x to n chunks
    out = _output(rt, out, shape, x.dtype)
    b = ws.buffers
    # one-shot and reduce-scatter have no second exchange: those arguments are never read
    red, gathered, sig2 = (b["red"], b["gathered"], b["sig2"]) if gather else (out, out, b["sig"])
    block = _block(chunk)
    pieces, piece = _pieces(chunk, x.element_size())
    grid = (max(n * pieces, _cdiv(chunk, block)),)
    _reduce[grid](
        src,
        b["recv"],
        b["sig"],
        red,
        gathered,
        sig2,
        out,
        b["state"],
        ws.members,
        ws.my_index,
        n,
        chunk,
        out.numel(),
        pieces,
        piece,
        SCATTER=scatter,
        GATHER=gather,
        OP=OPS[op],
        BLOCK=block,
        ITEMSIZE=x.element_size(),
    )
    return out


# How `unishmem compile` builds these kernels with no GPU (float32 data, 1024-element blocks).
_SIG = {"sig": "*u64", "out": "*fp32", "state": "*i64", "members": "*i32", "my_index": "i32"}
COMPILE = {
    _all_gather: {
        "signature": {"src": "*fp32", "dst": "*fp32", **_SIG, "n": "i32", "numel": "i64", "piece": "i64"},
        "constexprs": {"BLOCK": 1024, "ITEMSIZE": 4},
    },
    _reduce: [
        {
            "signature": {
                "src": "*fp32",
                "recv": "*fp32",
                "red": "*fp32",
                "gathered": "*fp32",
                "sig2": "*u64",
                **_SIG,
                "n": "i32",
                "chunk": "i64",
                "numel": "i64",
                "pieces": "i32",
                "piece": "i64",
            },
            "constexprs": {"SCATTER": scatter, "GATHER": scatter, "OP": 0, "BLOCK": 1024, "ITEMSIZE": 4},
        }
        for scatter in (False, True)
    ],
}
