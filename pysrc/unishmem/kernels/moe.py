"""MoE all-to-all: dispatch token copies to the PEs owning their experts, combine the experts'
outputs back, as Triton kernels in unishmem.language over any team (default: the world; combine
must be given dispatch's team).

Semantics (every PE of the team calls both, in the same order; on a team, "PE d" below is its
member d and n its size):

- `n_experts` experts split evenly over the n PEs: PE d owns experts d*L .. d*L+L-1, with
  L = n_experts // n local experts (n_experts % n != 0 is an error on every PE).
- `dispatch(tokens [T, H], topk_ids [T, K] int, topk_weights [T, K] float, n_experts)`: each copy
  (t, k) of token row t goes to the PE owning expert e = topk_ids[t, k]; a copy whose id is -1 goes
  nowhere (a padding token's) and adds nothing in combine. T may differ per PE (0 included); H, K,
  n_experts and the tokens' dtype must agree. A token may pick one expert twice: each copy is sent.
  Returns
  - `expert_tokens` (tokens' dtype): every row this PE received, packed: grouped by local expert j,
    then by source PE in PE order, then in (t, k) order (t-major) at the source; [R, H], or with a
    capacity [n * max_tokens * K, H], the same rows first and zeros after;
  - `counts [L, n]` int64: counts[j, s] rows came from PE s for local expert j (zeros included),
    so R = counts.sum() and the group (j, s) starts at the sum of the counts before it in
    row-major order;
  - `handle`: what combine needs (the count matrix of every PE, where each (t, k) went, the weights).
- `combine(expert_out, handle) -> out [T, H]`: each row of expert_out goes back to the
  (t, k) it came from, and out[t] = sum over k of topk_weights[t, k] * that row, computed in
  float32 as w0*x0 + w1*x1 + ... added left to right in k order (no fused multiply-add), then
  cast to the tokens' dtype (round to nearest even). expert_out must have expert_tokens' dtype and
  shape (with a capacity, its rows past R are never read). float64 rows are summed in float64.
- Variants the gradients use, public: dispatch's tokens may be [T, K, H], a row per copy (copy
  (t, k) carries tokens[t, k]); `handle.dispatch(rows)` sends rows along a handle's routing (a new
  dispatch call with the same ids, hence the same layout); `combine(..., weights=w)` applies w
  [T, K] instead of topk_weights; `combine(..., per_copy=True)` returns [T, K, H], each copy's row
  as it came back, unweighted.

Gradients (dispatch and combine are torch.autograd.Functions, at the end of this file, where autograd
must record them, the plain calls otherwise): with row(t, k) the copy's row in the packed layout,
- dispatch: grad tokens[t] = sum_k grad expert_tokens row(t, k) = combine(grad, handle, weights=ones)
  (per copy: grad tokens[t, k] = combine(grad, handle, per_copy=True)[t, k]);
- combine: grad expert_out row(t, k) = w[t, k] * grad out[t] = handle.dispatch(w[:, :, None] *
  grad[:, None, :]); grad w[t, k] = <grad out[t], combine(expert_out, handle, per_copy=True)[t, k]>,
  the weights being the handle's copy of topk_weights (which carries their autograd history) or
  combine's weights=.
A copy routed nowhere and a padding row of the capacity layout get zero gradient (neither is sent).
Both modes keep their host syncs: none with a capacity. Every PE must run the backward calls, in
the same order (as for the collectives): each is a dispatch or combine call on the handle's team.

NOTE [routing]: dispatch is one launch and no torch operation. Program 0 of the kernel routes this PE's
T * K copies: it counts them per expert and gives each its place among them sorted by expert, stably
((t, k) order within an expert), in two passes over the ids, BLOCK_C copies at a time (a cumulative sum
of one-hot tiles), writing the handle's ids, places and copy of the weights as it goes; then it releases
the epoch in state[4]. Every program waits for that, stages its share of the rows at their places
(16-byte accesses where H and the tensors are aligned) and counts itself (`all_past`, NOTE [copy-in]);
the rows are put from the stage only once every program has staged. One program routes: its passes
cost about T * K * n_experts / (its threads) steps, fine for a serving batch (thousands of copies); a
prefill-sized batch would want the routing spread over the grid (not done).

NOTE [route]: the routing a dispatch call leaves for combine is one int64 tensor of 2 * T * K +
n * n_experts words, written by the kernel: pos [T, K] (where copy (t, k) sits among this PE's copies
sorted by expert; -1: nowhere), then ids [T, K] (its expert; -1: nowhere), then C [n, n_experts] (the
rows PE s sent to expert e in this call). One tensor rather than three because a warm eager call pays
about a microsecond of host work for each tensor it allocates and passes to its launch; the kernels
find the parts at fixed offsets, and route_parts gives them as views.

Counts are exchanged in the dispatch kernel: every PE puts its per-expert count row (n_experts int64
words, counted on the device) into every PE's slot for it, with a signal; after waiting for all n
rows every PE knows the whole count matrix C[s, e], from which each sender computes where its rows
land in the receiver's packed buffer and puts them there directly (one put per (receiver, local
expert), zero-row puts included, each with its own signal), so nothing is repacked. The kernel
writes C and counts itself.

Capacity: each PE's receive buffer holds n * max_tokens * K rows (every copy of every PE sent to
it: the worst case). With `max_tokens=` (every PE passes the same; a PE with more tokens is an
error) nothing is read on the host: the call's outputs have static shapes, the ids are not checked
(any id outside 0..n_experts-1 routes nowhere, as -1 does), and the PEs compare their arguments
only on a workspace's first call (on the host backend outside `unishmem.testing.capture()`, every
call), so the call can be captured in a CUDA graph. Without it, every call exchanges a small
descriptor on the host (checking the arguments across PEs and giving the largest T, rounded up to a
power of two for the capacity), checks the ids, and reads R from the device to size expert_tokens:
an exact layout for the price of host syncs. One workspace per (dtype, H, K, n_experts, size class of the capacity)
is kept (NOTE [workspaces]) until rt.free_workspaces(); a handle stays usable until then (combine
may use it more than once).

Buffer reuse: dispatch and combine number their calls on the device, each with its own counter
(NOTE [call counter]), so their launch arguments are the same at every call. A sender puts rows of
dispatch call k+1 only after it has every PE's counts of call k+1, sent when that PE has started it,
hence finished everything before it on its stream (combine k and whatever read expert_tokens), so
the receive buffer needs one copy; the count slots, written before that wait, have two parities.
combine's return buffer has two parities: its puts wait for nothing. Both launch from the capped
grid (NOTE [persistent grid]: dispatch's count rows, then its pieces; combine's pieces, then its
token blocks; each round the grid), and combine copies a non-symmetric expert_out into its workspace
in the same launch (NOTE [copy-in]).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
import triton
import triton.language as tl

from .. import _active, jit
from .. import language as shl
from .._dtypes import DTYPE_CODES
from .._workspaces import Workspace, checks_every_call, exchange, keyed_workspace, room_problem, size_class
from ..triton_support import PER_CALL, interpreting
from ._calls import STATE_WORDS, all_past, begin_call, copied_in, end_call
from ._frame import (
    Plan,
    capped_grid,
    cdiv,
    check_tensor,
    kernel_team,
    next_power_of_2,
    peer_pieces,
    plan_and_launch,
    planned,
    record,
    run_plan,
)
from ._routing import needs_op, op_team_arg

if TYPE_CHECKING:
    from .._team import Team

FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)  # routing weights' dtypes


@triton.jit
def _put_piece(dest, source, rows, H, q, P, sig, pe, ITEMSIZE: tl.constexpr):
    """Piece q of `rows` rows from source to dest at PE pe, split over P programs in 16-byte multiples
    (the last shorter, some empty), adding 1 to sig there."""
    nbytes = rows * H * ITEMSIZE
    piece = tl.cdiv(tl.cdiv(nbytes, P), 16) * 16
    first = q * piece
    size = tl.maximum(tl.minimum(piece, nbytes - first), 0)
    offset = first // ITEMSIZE
    shl.putmem_signal_block(dest + offset, source + offset, size, sig, 1, shl.SIGNAL_ADD, pe)


@triton.jit
def _route(ids, weights, TK, my_counts, pos_out, ids_out, weights_out, E, E_BLOCK: tl.constexpr, BLOCK_C: tl.constexpr):
    """Route this PE's TK copies (NOTE [routing]): my_counts[e] = copies for expert e; pos_out[i] =
    where copy i sits among the copies sorted by expert, stably (-1: routed nowhere); ids_out[i] its
    expert (-1: nowhere); weights_out[i] = weights[i]. Two passes over the ids, BLOCK_C copies at a time."""
    e = tl.arange(0, E_BLOCK)[None, :]
    counts = tl.zeros((E_BLOCK,), dtype=tl.int64)
    for c0 in range(0, TK, BLOCK_C):
        i = c0 + tl.arange(0, BLOCK_C)
        expert = tl.load(ids + i, mask=i < TK, other=-1).to(tl.int64)
        counts += tl.sum(((expert[:, None] == e) & (e < E)).to(tl.int64), 0)  # outside 0..E-1: nowhere
    tl.store(my_counts + tl.arange(0, E_BLOCK), counts, mask=tl.arange(0, E_BLOCK) < E)
    before = tl.cumsum(counts, 0) - counts  # copies of every lower expert
    for c0 in range(0, TK, BLOCK_C):
        i = c0 + tl.arange(0, BLOCK_C)
        expert = tl.load(ids + i, mask=i < TK, other=-1).to(tl.int64)
        hit = ((expert[:, None] == e) & (e < E)).to(tl.int64)
        rank = tl.cumsum(hit, 0) - 1  # among this block's copies of the same expert
        place = tl.sum(hit * (before[None, :] + rank), 1)
        routed = tl.sum(hit, 1) > 0
        tl.store(pos_out + i, tl.where(routed, place, -1), mask=i < TK)
        tl.store(ids_out + i, tl.where(routed, expert, -1), mask=i < TK)
        tl.store(weights_out + i, tl.load(weights + i, mask=i < TK), mask=i < TK)
        before += tl.sum(hit, 0)


@triton.jit
def _stage_rows(tokens, pos, stage, TK, K, H, ROW_PER_COPY: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr):
    """This program's share of the copies' rows into stage, each at its place pos[i] (a copy routed
    nowhere is not staged): copy i carries tokens row i // K, or row i with ROW_PER_COPY."""
    for r0 in range(tl.program_id(0) * BLOCK_R, TK, tl.num_programs(0) * BLOCK_R):
        i = r0 + tl.arange(0, BLOCK_R)
        place = tl.load(pos + i, mask=i < TK, other=-1)
        if ROW_PER_COPY:
            row = i.to(tl.int64)
        else:
            row = (i // K).to(tl.int64)
        for h0 in range(0, H, BLOCK_H):
            h = h0 + tl.arange(0, BLOCK_H)
            mask = (place >= 0)[:, None] & (h < H)[None, :]
            tl.store(
                stage + place[:, None] * H + h[None, :],
                tl.load(tokens + row[:, None] * H + h[None, :], mask=mask),
                mask=mask,
            )


@jit(do_not_specialize=["me", "rows", "TK", "P"])  # one binary for every PE, batch and capacity
def _dispatch(
    tokens,
    topk_ids,
    weights,
    route,
    weights_out,
    stage,
    my_counts,
    cnt,
    cnt_sig,
    recv,
    recv_sig,
    counts_out,
    out,
    state,
    members,
    me,
    n,
    H,
    K,
    TK,
    rows,
    P,
    L: tl.constexpr,
    N_BLOCK: tl.constexpr,
    E_BLOCK: tl.constexpr,
    ITEMSIZE: tl.constexpr,
    COPY_OUT: tl.constexpr,
    ROW_PER_COPY: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Program 0 routes this PE's copies (_route: counts, places, ids); then every program stages its
    share of the rows in place order (_stage_rows), after putting this PE's count row to PE p for each
    p = g, g + G, ... < n (G: the grid, capped: NOTE [persistent grid]). Then (once every count row is
    here and every row is staged) task t = g, g + G, ... < n * P puts piece q = t // n of P of this PE's
    rows for each of PE p = t % n's L experts to their packed place there, adding 1 to PE p's signal
    word of this PE. route is the handle's (NOTE [route]): program 0 writes the places and ids there, and then
    the count matrix, and this PE's counts (counts_out [L, n]); with COPY_OUT every program copies its
    share of the received rows into out ([rows, H]), zeros after."""
    g = tl.program_id(0)
    G = tl.num_programs(0)
    E = n * L
    pos_out, ids_out, C_out = route, route + TK, route + 2 * TK  # NOTE [route]
    epoch = begin_call(state)
    parity = epoch % 2
    cnt += parity * n * E
    cnt_sig += parity * n
    if g == 0:
        _route(topk_ids, weights, TK, my_counts, pos_out, ids_out, weights_out, E, E_BLOCK, BLOCK_C)
        tl.debug_barrier()  # every thread's stores come before the release
        tl.atomic_xchg(state + 4, epoch, sem="release", scope="gpu")
    shl.wait_until(state + 4, shl.CMP_GE, epoch)  # routed (NOTE [routing])
    token = tl.atomic_add(state + 4, 0, sem="acquire", scope="gpu")
    for p in range(g, n, G):  # the count rows first, from the first programs to start
        shl.putmem_signal_block(
            cnt + me * E,
            shl.consume_token(my_counts, token),
            E * 8,
            cnt_sig + me,
            epoch,
            shl.SIGNAL_SET,
            tl.load(members + p),
        )
    _stage_rows(tokens, shl.consume_token(pos_out, token), stage, TK, K, H, ROW_PER_COPY, BLOCK_R, BLOCK_H)
    staged = all_past(state, epoch)  # every program's rows are staged
    shl.wait_until_all(cnt_sig, n, shl.CMP_GE, epoch)
    s = tl.arange(0, N_BLOCK)[:, None]
    e = tl.arange(0, E_BLOCK)[None, :]
    in_C = (s < n) & (e < E)
    C = tl.load(cnt + s * E + e, mask=in_C, other=0)  # C[s, e]: rows PE s sends to expert e
    for task in range(g, n * P, G):  # tasks round the grid (NOTE [persistent grid])
        p = task % n
        q = task // n
        pe = tl.load(members + p)
        for j in range(L):
            ex = p * L + j
            sent = tl.sum(tl.sum(tl.where((s == me) & (e == ex), C, 0), 1), 0)
            # my rows for expert ex follow my rows for every lower expert in stage
            src = tl.sum(tl.sum(tl.where((s == me) & (e < ex), C, 0), 1), 0)
            # at PE p: after every source's rows for its lower experts, then lower sources' for ex
            dst = tl.sum(tl.sum(tl.where(((e >= p * L) & (e < ex)) | ((e == ex) & (s < me)), C, 0), 1), 0)
            rows_at = shl.consume_token(stage, staged) + src * H
            _put_piece(recv + dst * H, rows_at, sent, H, q, P, recv_sig + me, pe, ITEMSIZE)
    mine = (e >= me * L) & (e < me * L + L)
    if g == 0:
        tl.store(C_out + s * E + e, C, mask=in_C)
        tl.store(counts_out + (e - me * L) * n + s, C, mask=in_C & mine)  # counts[j, s] = C[s, me*L + j]
    # every source adds L * P per call: after call k its word holds k * L * P
    shl.wait_until_all(recv_sig, n, shl.CMP_GE, epoch * L * P)
    if COPY_OUT:
        token = shl.signal_fetch(recv_sig)  # the loads below depend on it (docs/device-library.md, rule 2)
        received = shl.consume_token(recv, token)
        filled = tl.sum(tl.sum(tl.where(mine, C, 0), 1), 0) * H
        total = rows * H
        span = tl.cdiv(tl.cdiv(total, tl.num_programs(0)), BLOCK) * BLOCK
        first = g * span
        last = tl.minimum(first + span, total)
        for start in range(first, last, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            tl.store(out + offs, tl.load(received + offs, mask=offs < filled, other=0), mask=offs < last)
    end_call(state, epoch)


@jit(do_not_specialize=["stage", "me", "T", "slot", "pieces", "numel"])  # one binary for every PE, batch and capacity
def _combine(
    x,
    src,
    stage,
    route,
    ret,
    ret_sig,
    state,
    members,
    weights,
    out,
    me,
    n,
    T,
    H,
    slot,
    pieces,
    numel,
    L: tl.constexpr,
    K: tl.constexpr,
    N_BLOCK: tl.constexpr,
    E_BLOCK: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    ITEMSIZE: tl.constexpr,
    WIDE: tl.constexpr,
    PER_COPY: tl.constexpr,
):
    """Programs g < n * pieces: piece g // n of the rows PE p = g % n sent here, back to where PE p
    staged them (its rows sorted by expert), adding 1 to PE p's return word of this PE. Then program
    g sums the weighted returned copies of tokens g*BLOCK_T.. of this PE (in float64 with WIDE, else
    float32), or with PER_COPY stores each copy's row as it came back (out [T, K, H]); a copy whose pos
    is -1 was routed nowhere: it adds nothing (PER_COPY: its row is zero). route: the handle's (NOTE
    [route])."""
    g = tl.program_id(0)
    grid = tl.num_programs(0)
    E = n * L
    pos, C = route, route + 2 * T * K
    epoch = begin_call(state)
    parity = epoch % 2
    ret += parity * slot * H  # slot: rows of one parity, the same on every PE (T is not)
    ret_sig += parity * n
    if stage:  # expert_out (x, numel elements) is not symmetric: copied into src first (NOTE [copy-in])
        src = copied_in(x, src, numel, state, epoch)
    for task in range(g, n * pieces, grid):  # tasks round the grid (NOTE [persistent grid])
        p = task % n
        q = task // n
        pe = tl.load(members + p)
        s = tl.arange(0, N_BLOCK)[:, None]
        e = tl.arange(0, E_BLOCK)[None, :]
        Cm = tl.load(C + s * E + e, mask=(s < n) & (e < E), other=0)
        for j in range(L):
            ex = me * L + j
            sent = tl.sum(tl.sum(tl.where((s == p) & (e == ex), Cm, 0), 1), 0)
            start = tl.sum(tl.sum(tl.where(((e >= me * L) & (e < ex)) | ((e == ex) & (s < p)), Cm, 0), 1), 0)
            dst = tl.sum(tl.sum(tl.where((s == p) & (e < ex), Cm, 0), 1), 0)
            _put_piece(ret + dst * H, src + start * H, sent, H, q, pieces, ret_sig + me, pe, ITEMSIZE)
    if g * BLOCK_T < T or g == 0:
        # program 0 waits even with no tokens: a PE leaves combine k only once every PE has started
        # it, hence finished reading its return buffer of combine k-1 (the parity NOTE [workspaces]).
        # Each PE adds L * pieces to a word per call of its parity: (epoch + 1) // 2 of them so far
        shl.wait_until_all(ret_sig, n, shl.CMP_GE, (epoch + 1) // 2 * L * pieces)
    token = shl.signal_fetch(ret_sig)  # the loads below depend on it (docs/device-library.md, rule 2)
    back = shl.consume_token(ret, token)
    for t0 in range(g * BLOCK_T, T, grid * BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        tmask = t < T
        for h0 in range(0, H, BLOCK_H):
            h = h0 + tl.arange(0, BLOCK_H)
            mask = tmask[:, None] & (h < H)[None, :]
            for k in tl.static_range(K):
                row = tl.load(pos + t * K + k, mask=tmask, other=-1)
                routed = row >= 0
                back_row = tl.load(back + row[:, None] * H + h[None, :], mask=mask & routed[:, None], other=0)
                if PER_COPY:
                    tl.store(out + (t[:, None] * K + k) * H + h[None, :], back_row, mask=mask)
                else:
                    w = tl.load(weights + t * K + k, mask=routed, other=0).to(tl.float64 if WIDE else tl.float32)
                    if k == 0:
                        acc = w[:, None] * back_row.to(tl.float64 if WIDE else tl.float32)
                    else:
                        acc = acc + w[:, None] * back_row.to(tl.float64 if WIDE else tl.float32)
            if not PER_COPY:
                tl.store(out + t[:, None] * H + h[None, :], acc.to(out.dtype.element_ty), mask=mask)
    end_call(state, epoch)


# What `unishmem compile` builds (NOTE [COMPILE table] in unishmem/compile.py on main; and
# tests/test_kernels_compile.py): run-time argument types, constexprs, the options it is launched with.
COMPILE = {
    _dispatch: {
        "signature": {
            "tokens": "*fp16",
            "topk_ids": "*i64",
            "weights": "*fp32",
            "route": "*i64",
            "weights_out": "*fp32",
            "stage": "*fp16",
            "my_counts": "*i64",
            "cnt": "*i64",
            "cnt_sig": "*u64",
            "recv": "*fp16",
            "recv_sig": "*u64",
            "counts_out": "*i64",
            "out": "*fp16",
            "state": "*i64",
            "members": "*i32",
            "me": "i32",
            "n": "i32",
            "H": "i32",
            "K": "i32",
            "TK": "i32",
            "rows": "i64",
            "P": "i32",
        },
        "constexprs": {
            "L": 2,
            "N_BLOCK": 8,
            "E_BLOCK": 16,
            "ITEMSIZE": 2,
            "COPY_OUT": True,
            "ROW_PER_COPY": False,
            "BLOCK_C": 256,
            "BLOCK_R": 4,
            "BLOCK_H": 1024,
            "BLOCK": 4096,
        },
        # as a launch specialises 16-byte aligned tensors and an H divisible by 16 (a model's hidden size)
        "aligned": [
            "tokens",
            "topk_ids",
            "weights",
            "route",
            "weights_out",
            "stage",
            "my_counts",
            "cnt",
            "cnt_sig",
            "recv",
        ]
        + ["recv_sig", "counts_out", "out", "state", "members", "H"],
    },
    _combine: {
        "signature": {
            "x": "*fp16",
            "src": "*fp16",
            "stage": "i32",
            "route": "*i64",
            "ret": "*fp16",
            "ret_sig": "*u64",
            "state": "*i64",
            "members": "*i32",
            "weights": "*fp32",
            "out": "*fp16",
            "me": "i32",
            "n": "i32",
            "T": "i32",
            "H": "i32",
            "slot": "i64",
            "pieces": "i32",
            "numel": "i32",
        },
        "constexprs": {
            "L": 2,
            "K": 2,
            "N_BLOCK": 8,
            "E_BLOCK": 16,
            "BLOCK_T": 4,
            "BLOCK_H": 128,
            "ITEMSIZE": 2,
            "WIDE": False,
            "PER_COPY": False,
        },
        "options": {"enable_fp_fusion": False},  # as launched: w*x then +, never an fma
        # as a launch specialises 16-byte aligned tensors and an H divisible by 16 (a model's hidden size)
        "aligned": ["x", "src", "route", "ret", "ret_sig", "state", "members", "weights", "out", "H"],
    },
}


def route_parts(route, T: int, K: int):
    """(pos [T, K], ids [T, K], C [n, n_experts]): views of a dispatch call's route (NOTE [route])."""
    TK = T * K
    return route[:TK].view(T, K), route[TK : 2 * TK].view(T, K), route[2 * TK :]


def route_shape(route, rows: int, n: int, n_experts: int, max_tokens: int) -> tuple[int, int]:
    """(T, K) of a dispatch call with max_tokens, from its route's length and expert_tokens' rows."""
    K = rows // (n * max_tokens)
    return (route.shape[0] - n * n_experts) // (2 * K), K


@dataclass(slots=True)
class MoEHandle:
    """What combine needs from one dispatch call of this PE (see the module's docstring)."""

    ws: Workspace
    team: Team  # the dispatch call's: combine runs on it
    call: int  # the dispatch call's number on the host: every PE must combine the same call (checked)
    route: torch.Tensor  # pos, ids and C, written by the kernel (NOTE [route])
    weights: torch.Tensor  # [T, K] a copy of topk_weights as passed to dispatch (with their autograd history)
    T: int
    K: int
    rows: int  # expert_tokens' rows: R, or the capacity's n * max_tokens * K when padded
    dtype: torch.dtype
    H: int
    L: int
    capacity: int  # max_tokens of the workspace
    padded: bool  # dispatch was given max_tokens: no host sync, expert_tokens padded to the capacity

    def dispatch(self, rows):
        """Send `rows` of this PE along this handle's routing: rows [T, H] (copy (t, k) carries rows[t])
        or [T, K, H] (copy (t, k) carries rows[t, k]), in expert_tokens' dtype; returns them in the
        layout and shape of this handle's expert_tokens. A dispatch call on the handle's team (every PE
        calls it), differentiable as dispatch is; the gradient of combine's expert_out is one."""
        max_tokens = self.capacity if self.padded else None
        n_experts = self.L * self.team.n_pes
        return dispatch(rows, self.ids, self.weights.detach(), n_experts, max_tokens=max_tokens, team=self.team)[0]

    @property
    def pos(self) -> torch.Tensor:  # [T, K] int64: where copy (t, k) sits among this PE's rows sorted by expert
        return route_parts(self.route, self.T, self.K)[0]

    @property
    def ids(self) -> torch.Tensor:  # [T, K] int64: the expert of copy (t, k), -1 where it went nowhere
        return route_parts(self.route, self.T, self.K)[1]

    def expert_out(self) -> torch.Tensor:
        """A tensor of expert_tokens' layout, shape and dtype for the experts' output, in this handle's
        workspace: combine reads it where it lies, with no copy-in (NOTE [copy-in]). Every handle of one
        workspace (dispatch calls of the same dtype, H, K, n_experts and capacity class) gets the same
        memory: write it and combine it before the experts of another such handle write theirs."""
        return self.ws.buffers["src"][: self.rows]


class MoERouting(NamedTuple):
    """dispatch's handle under torch.compile, with max_tokens: tensors and numbers, which Dynamo
    traces; combine takes it as it takes a MoEHandle, and finds the workspace again by its key."""

    route: torch.Tensor  # NOTE [route]
    weights: torch.Tensor  # topk_weights as passed to dispatch
    n_experts: int
    max_tokens: int
    team: int  # the team's number (what custom ops take)


def _handle_of(expert_out, route, weights, n_experts: int, max_tokens: int, team) -> MoEHandle:
    """The MoEHandle of a dispatch with max_tokens, from what a MoERouting holds: the workspace is the
    one such a dispatch uses (its key), the call the workspace's last."""
    core = _active.core()
    n, H = team.n_pes, expert_out.shape[-1]
    T, K = route_shape(route, expert_out.shape[0], n, n_experts, max_tokens)
    ws = core.workspaces.get(("moe", expert_out.dtype, H, K, n_experts, size_class(max_tokens), team.key))
    if ws is None:
        raise ValueError("combine: no dispatch with these shapes and max_tokens has run (or its workspace was freed)")
    if weights is None:  # (per_copy: never read)
        weights = torch.ones(T, K, dtype=torch.float32, device=route.device)
    L = n_experts // n
    rows = n * max_tokens * K
    return MoEHandle(ws, team, ws.epoch, route, weights, T, K, rows, expert_out.dtype, H, L, max_tokens, True)


def _dispatch_problem(core, tokens, topk_ids, topk_weights, n_experts, max_tokens, n):
    for name, x in (("tokens", tokens), ("topk_ids", topk_ids), ("topk_weights", topk_weights)):
        problem = check_tensor(core, x, name, "dispatch")
        if problem:
            return problem
    if tokens.dim() not in (2, 3) or tokens.shape[-1] < 1 or tokens.dtype not in DTYPE_CODES:
        return ValueError(
            f"dispatch: tokens must be [T, H] (or [T, K, H]: a row per copy) with H >= 1 and a dtype of "
            f"the symmetric heap; got {tokens.dtype} of shape {list(tokens.shape)}"
        )
    if topk_ids.dim() != 2 or topk_ids.shape[0] != tokens.shape[0] or topk_ids.shape[1] < 1:
        return ValueError(
            f"dispatch: topk_ids must be [T, K] with T = {tokens.shape[0]} (tokens' rows) and "
            f"K >= 1; got shape {list(topk_ids.shape)}"
        )
    if topk_ids.dtype not in (torch.int32, torch.int64):
        return TypeError(f"dispatch: topk_ids must be int32 or int64, not {topk_ids.dtype}")
    if tokens.dim() == 3 and tokens.shape[1] != topk_ids.shape[1]:
        return ValueError(
            f"dispatch: tokens with a row per copy must be [T, K, H] with K = {topk_ids.shape[1]} "
            f"(topk_ids' columns); got shape {list(tokens.shape)}"
        )
    if tuple(topk_weights.shape) != tuple(topk_ids.shape) or topk_weights.dtype not in FLOATS:
        return ValueError(
            f"dispatch: topk_weights must be float32, float16 or bfloat16 of shape "
            f"{list(topk_ids.shape)} (topk_ids' shape), or float64; got {topk_weights.dtype} of shape "
            f"{list(topk_weights.shape)}"
        )
    if not isinstance(n_experts, int) or isinstance(n_experts, bool) or n_experts < 1 or n_experts % n:
        return ValueError(
            f"dispatch: n_experts={n_experts!r} must be a positive multiple of the number of PEs "
            f"({n}): the experts split evenly over the PEs"
        )
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < max(1, tokens.shape[0])
    ):
        return ValueError(
            f"dispatch: max_tokens={max_tokens!r} must be an int >= 1 and >= this PE's T = {tokens.shape[0]}"
        )
    if max_tokens is None and topk_ids.numel():  # with a capacity this check would be a host sync
        lo, hi = torch.stack([topk_ids.min(), topk_ids.max()]).tolist()
        if lo < -1 or hi >= n_experts:
            bad = lo if lo < -1 else hi
            return ValueError(
                f"dispatch: topk_ids holds expert {bad}, outside 0..{n_experts - 1} (n_experts={n_experts}; "
                "-1 routes a copy nowhere)"
            )
    return None


FIELDS = ("tokens' dtype", "H", "K", "n_experts", "max_tokens")


def _disagreement(what: str, rows, fields, names) -> ValueError | None:
    """A ValueError naming each field in which some PE differs from PE 0, or None."""
    parts = []
    for f, name in zip(fields, names):
        values = [row[f] for row in rows]
        if any(v != values[0] for v in values):
            if name.endswith("dtype"):
                values = [next((d for d, c in DTYPE_CODES.items() if c == v), v) for v in values]
            parts.append(f"{name}: " + ", ".join(f"PE {i} passes {v}" for i, v in enumerate(values)))
    return ValueError(f"{what}: the PEs disagree on " + "; ".join(parts)) if parts else None


def _blocks(n: int) -> int:
    return next_power_of_2(max(n, 1))


def _tile() -> int:
    """Elements a program moves or sums at a time: 4096 on a GPU; the interpreter's cost is per
    program and per op, not per element, so it takes 16x larger tiles."""
    return 4096 * (16 if interpreting() else 1)


def _buffers(n, dtype, H, K, n_experts, rows):
    """A workspace for `rows` tokens a PE (a size class), name -> (shape, dtype)."""
    return {
        "stage": ((rows * K, H), dtype),
        "my_counts": ((n_experts,), torch.int64),  # copies per expert (written by the kernel)
        "cnt": ((2, n, n_experts), torch.int64),
        "cnt_sig": ((2, n), torch.uint64),
        "recv": ((n * rows * K, H), dtype),
        "recv_sig": ((n,), torch.uint64),  # a word per source PE (NOTE in _dispatch)
        "src": ((n * rows * K, H), dtype),  # combine's staged expert_out, or the experts' own (expert_out())
        "ret": ((2, rows * K, H), dtype),
        "ret_sig": ((2, n), torch.uint64),
        "state": ((STATE_WORDS,), torch.int64),  # dispatch's call counter (NOTE [call counter])
        "cstate": ((STATE_WORDS,), torch.int64),  # combine's
    }


def dispatch(tokens, topk_ids, topk_weights, n_experts, *, max_tokens: int | None = None, team=None, group=None):
    """Send each copy (t, k) of this PE's token rows to the PE owning expert topk_ids[t, k] (-1: to
    none). Returns (expert_tokens, counts [L, n_pes] int64, handle); see the module's docstring for
    the packed layout. With max_tokens (the capacity, the same on every PE) the call has no host sync
    and expert_tokens is [n_pes * max_tokens * K, H], zero past the received rows: safe to capture in
    a CUDA graph once a call of the same shapes has run. Without it expert_tokens is [R, H], sized on
    the host. tokens may also be [T, K, H], a row per copy. Runs on torch's current stream.
    Differentiable in tokens (and, through combine, in topk_weights). Under torch.compile, with
    max_tokens a custom op (torch.ops.unishmem.dispatch) whose handle is a MoERouting; without it a
    graph break."""
    if torch.compiler.is_compiling():
        if max_tokens is None:  # the exact layout's rows are known only after the call: a graph break
            return _eager_dispatch(tokens, topk_ids, topk_weights, n_experts, team=team, group=group)
        number = op_team_arg(team, group)
        out, counts, route = torch.ops.unishmem.dispatch(tokens, topk_ids, topk_weights, n_experts, max_tokens, number)
        return out, counts, MoERouting(route, topk_weights, n_experts, max_tokens, number)
    # The handle keeps its own copy of the weights (combine uses them as they are now): made by the
    # kernel, or here where it must record the weights' autograd history for combine's gradient
    history = isinstance(topk_weights, torch.Tensor) and topk_weights.requires_grad and torch.is_grad_enabled()
    if needs_op(tokens):
        out, counts, handle = _dispatch_with_grad(tokens, topk_ids, topk_weights, n_experts, max_tokens, team, group)
    else:
        out, counts, handle = _run_dispatch(tokens, topk_ids, topk_weights, n_experts, max_tokens, team, group)
    if history:
        handle.weights = topk_weights.clone(memory_format=torch.contiguous_format)
    return out, counts, handle


def _run_dispatch(tokens, topk_ids, topk_weights, n_experts, max_tokens, team, group):
    """dispatch's kernel call (the handle's weights: the kernel's copy of topk_weights)."""
    core = _active.core()
    plan_key = _dispatch_key(tokens, topk_ids, topk_weights, n_experts, max_tokens, team, group)
    plan = planned(core, plan_key)
    if plan is not None:  # NOTE [call plans]
        return plan.launch(tokens, topk_ids, topk_weights)
    team = kernel_team(core, team, group)
    n = team.n_pes
    problem = _dispatch_problem(core, tokens, topk_ids, topk_weights, n_experts, max_tokens, n)
    padded = max_tokens is not None
    T, H, K = (tokens.shape[0], tokens.shape[-1], topk_ids.shape[1]) if problem is None else (0, 0, 0)
    # NOTE [workspaces]: one workspace per size class of the capacity (a power of two of tokens a PE)
    key = ("moe", getattr(tokens, "dtype", None), H, K, n_experts, size_class(max_tokens or 1), team.key)
    agreed = (H, K, n_experts, max_tokens)  # what every PE must pass alike (T may differ)
    ws = core.workspaces.get(key) if padded and problem is None else None
    cap = max_tokens
    if not padded or problem or ws is None or agreed not in ws.agreed or checks_every_call(core):
        if padded and problem is None and ws is None:
            problem = room_problem(core, team, "dispatch", _buffers(n, tokens.dtype, H, K, n_experts, key[5]))
        desc = [-1] * 7 if problem else [0, DTYPE_CODES[tokens.dtype], H, K, n_experts, max_tokens or 0, T]
        rows = exchange(core, team, "dispatch", desc, problem)
        mismatch = _disagreement("dispatch", rows, range(1, 6), FIELDS)
        if mismatch:
            raise mismatch
        cap = max_tokens or _blocks(max(row[6] for row in rows))
        key = key[:5] + (size_class(cap), team.key)
        cls = key[5]
        # the programs per peer: by the most bytes one PE can send another (all of its copies)
        pieces = peer_pieces(cls * K * H, tokens.element_size())[0]
        buffers = lambda: _buffers(n, tokens.dtype, H, K, n_experts, cls)  # noqa: E731
        ws = keyed_workspace(core, team, "dispatch", key, buffers, pieces=pieces, slot=cls * K)
        ws.agreed.add(agreed)
    launch = _dispatch_launch(core, ws, team, tokens, topk_ids, topk_weights, n_experts, cap, padded)
    record(core, plan_key, Plan(ws, (n * cap * K, H), launch))
    return launch(tokens, topk_ids, topk_weights)


def _dispatch_key(tokens, topk_ids, topk_weights, n_experts, max_tokens, team, group):
    """The key of a dispatch call's plan (NOTE [call plans]), or None (no plan): only with max_tokens
    (the exact layout syncs with the host anyway), for plain tensors and int sizes, team= or the world."""
    if group is not None or type(max_tokens) is not int or type(n_experts) is not int:
        return None
    if type(tokens) is not torch.Tensor or type(topk_ids) is not torch.Tensor or type(topk_weights) is not torch.Tensor:
        return None
    ids, weights = topk_ids, topk_weights
    shapes = (tokens.dtype, tokens.shape, tokens.device, ids.dtype, ids.shape, ids.device, weights.dtype, weights.shape)
    return ("dispatch", *shapes, weights.device, n_experts, max_tokens, team)


def _dispatch_launch(core, ws, team, tokens, topk_ids, topk_weights, n_experts, cap, padded):
    """A dispatch call on ws for these shapes, with its checks done: (tokens, topk_ids, topk_weights)
    -> (expert_tokens, counts, handle), one launch (NOTE [routing])."""
    n, (T, K), H = team.n_pes, topk_ids.shape, tokens.shape[-1]
    L = n_experts // n
    rows = n * cap * K
    b = ws.buffers
    block_h = min(_blocks(H), 1024)
    device, dtype = core.device, tokens.dtype
    bound = _dispatch.bind(
        capped_grid(_dispatch, n * ws.extra["pieces"]),
        PER_CALL,  # tokens
        PER_CALL,  # topk_ids
        PER_CALL,  # topk_weights
        PER_CALL,  # route (NOTE [route])
        PER_CALL,  # weights (the handle's copy)
        b["stage"],
        b["my_counts"],
        b["cnt"],
        b["cnt_sig"],
        b["recv"],
        b["recv_sig"],
        PER_CALL,  # counts
        PER_CALL,  # out
        b["state"],
        ws.members,
        ws.my_index,
        n,
        H,
        K,
        T * K,
        rows,
        ws.extra["pieces"],
        L=L,
        N_BLOCK=_blocks(n),
        E_BLOCK=_blocks(n_experts),
        ITEMSIZE=tokens.element_size(),
        COPY_OUT=padded,
        ROW_PER_COPY=tokens.dim() == 3,
        BLOCK_C=max(16, min(1024, _tile() // _blocks(n_experts))),
        BLOCK_R=max(1, min(64, _tile() // block_h)),
        BLOCK_H=block_h,
        BLOCK=_tile(),
    )

    def launch(tokens, topk_ids, topk_weights):
        ws.epoch += 1  # the host's count of calls: only compared across PEs (combine's handle check)
        route = torch.empty(2 * T * K + n * n_experts, dtype=torch.int64, device=device)
        weights = torch.empty(T, K, dtype=topk_weights.dtype, device=device)  # (sizes one by one: _frame.empty)
        counts = torch.empty(L, n, dtype=torch.int64, device=device)
        out = torch.empty(rows, H, dtype=dtype, device=device) if padded else b["recv"]
        tokens, topk_ids, topk_weights = tokens.contiguous(), topk_ids.contiguous(), topk_weights.contiguous()
        bound(tokens, topk_ids, topk_weights, route, weights, counts, out)
        received = rows
        if not padded:  # the exact layout: R read on the host
            received = int(counts.sum())
            out = b["recv"][:received].clone()
        return out, counts, MoEHandle(ws, team, ws.epoch, route, weights, T, K, received, dtype, H, L, cap, padded)

    return launch


def combine(expert_out, handle, *, weights=None, per_copy: bool = False, team=None, group=None):
    """Send each row of expert_out (expert_tokens' layout and shape) back to its (t, k) and return
    this PE's tokens [T, H]: out[t] = sum_k topk_weights[t, k] * row of (t, k), in float32 (float64
    for float64 rows), in k order (a copy routed nowhere adds nothing). weights: [T, K] used instead
    of dispatch's topk_weights (e.g. ones: the sum of each token's copies). per_copy: return
    [T, K, H] instead, each copy's row as it came back, unweighted (zero where routed nowhere).
    team: the team the handle's dispatch ran on (default: the world). Runs on torch's current stream;
    after a dispatch given max_tokens, it has no host sync and is safe to capture in a CUDA graph.
    Differentiable in expert_out and the weights (dispatch's or these). Under torch.compile, after a
    dispatch with max_tokens, a custom op (torch.ops.unishmem.combine); otherwise a graph break."""
    if isinstance(handle, MoERouting):  # from a dispatch with max_tokens under torch.compile
        w = None if per_copy else handle.weights if weights is None else weights
        route, _, n_experts, max_tokens, number = handle
        return torch.ops.unishmem.combine(expert_out, route, w, n_experts, max_tokens, per_copy, number)
    if torch.compiler.is_compiling():
        return _eager_combine(expert_out, handle, weights=weights, per_copy=per_copy, team=team, group=group)
    if weights is None and not per_copy and isinstance(handle, MoEHandle):
        weights = handle.weights
    if needs_op(expert_out, weights):
        return _combine_with_grad(expert_out, weights, handle, per_copy, team, group)
    return _run_combine(expert_out, handle, weights, per_copy, team, group)


def _weights_problem(weights, handle, per_copy, core):
    if weights is None:
        return None
    if per_copy:
        return ValueError("combine: per_copy=True returns each copy's row unweighted: pass no weights= with it")
    T, K = handle.T, handle.K
    if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (T, K) or weights.dtype not in FLOATS:
        got = f"{weights.dtype} of shape {list(weights.shape)}" if isinstance(weights, torch.Tensor) else type(weights)
        return ValueError(
            f"combine: weights must be float32, float16, bfloat16 or float64 of shape [{T}, {K}] (the "
            f"dispatch's topk_weights' shape); got {got}"
        )
    if weights.device != core.device:
        return ValueError(f"combine: weights is on {weights.device}, not the runtime's device {core.device}")
    return None


def _run_combine(expert_out, handle, weights, per_copy, team, group):
    """combine's kernel call; weights: those to apply (None with per_copy)."""
    core = _active.core()
    key = _combine_key(expert_out, handle, weights, per_copy, team, group)
    plan = planned(core, key)
    if plan is not None:  # NOTE [call plans]: the handle's routing and the weights passed at every call
        weights = (handle.weights if weights is None else weights).detach().contiguous()
        return run_plan(core, plan, expert_out.detach(), None, "combine", handle.route, weights)
    team = kernel_team(core, team, group)
    n = team.n_pes
    problem = check_tensor(core, expert_out, "expert_out", "combine")
    if problem is None and not isinstance(handle, MoEHandle):
        problem = TypeError(f"combine: handle must be what dispatch returned, got {type(handle).__name__}")
    if problem is None and handle.team is not team:
        problem = ValueError(
            f"combine: the handle is from dispatch on {handle.team.name}, not on {team.name}: pass dispatch's team"
        )
    if problem is None and not core.workspaces.holds(handle.ws):
        problem = ValueError("combine: the handle's workspace was freed (rt.free_workspaces()) after its dispatch")
    if problem is None and (tuple(expert_out.shape) != (handle.rows, handle.H) or expert_out.dtype != handle.dtype):
        problem = ValueError(
            f"combine: expert_out must be {handle.dtype} of shape [{handle.rows}, {handle.H}] "
            f"(expert_tokens' dtype and shape); got {expert_out.dtype} of shape "
            f"{list(expert_out.shape)}"
        )
    problem = problem or _weights_problem(weights, handle, per_copy, core)
    if problem or not handle.padded or checks_every_call(core):
        # every PE must pass the handle of the same dispatch call (workspace and its call number)
        desc = [-1] * 5 if problem else [0, handle.call, handle.capacity, DTYPE_CODES[handle.dtype], handle.H]
        agreed = exchange(core, team, "combine", desc, problem)
        mismatch = _disagreement(
            "combine", agreed, (1, 2, 3, 4), ("the dispatch call of the handle", "its capacity", "its dtype", "its H")
        )
        if mismatch:
            raise mismatch
    ws, H, L, T, K = handle.ws, handle.H, handle.L, handle.T, handle.K
    weights = (handle.weights if weights is None else weights).detach().contiguous()  # per_copy: never read
    b = ws.buffers
    shape = (T, K, H) if per_copy else (T, H)
    block_h = min(_blocks(H), 1024)
    block_t = max(1, min(64, _tile() // block_h))  # by H alone: one binary for every T and capacity
    pieces = ws.extra["pieces"]
    expert_out = expert_out.detach()
    bound = _combine.bind(
        capped_grid(_combine, max(n * pieces, cdiv(T, block_t))),
        PER_CALL,  # expert_out
        PER_CALL,  # src
        PER_CALL,  # stage
        PER_CALL,  # handle.route
        b["ret"],
        b["ret_sig"],
        b["cstate"],
        ws.members,
        PER_CALL,  # weights
        PER_CALL,  # out
        ws.my_index,
        n,
        T,
        H,
        ws.extra["slot"],
        pieces,
        expert_out.numel(),
        L=L,
        K=K,
        N_BLOCK=_blocks(n),
        E_BLOCK=_blocks(n * L),
        BLOCK_T=block_t,
        BLOCK_H=block_h,
        ITEMSIZE=expert_out.element_size(),
        WIDE=expert_out.dtype == torch.float64,
        PER_COPY=per_copy,
        enable_fp_fusion=False,
    )

    def launch(expert_out, src, stage, out, route, weights):
        bound(expert_out, src, stage, route, weights, out)

    return plan_and_launch(core, key, ws, shape, launch, expert_out, None, handle.route, weights)


def _combine_key(expert_out, handle, weights, per_copy, team, group):
    """The key of a combine call's plan (NOTE [call plans]), or None (no plan): only after a dispatch
    given max_tokens (its handle needs no host check) and where combine checks its arguments once
    per shape. The workspace is the handle's (the plan keeps it, so its id is not reused)."""
    if group is not None or type(expert_out) is not torch.Tensor or not isinstance(handle, MoEHandle):
        return None
    if not handle.padded or (weights is not None and type(weights) is not torch.Tensor) or type(per_copy) is not bool:
        return None
    w = None if weights is None else (weights.dtype, weights.shape, weights.device)
    got = (expert_out.dtype, expert_out.shape, expert_out.device)
    return ("combine", got, id(handle.ws), handle.team, handle.T, handle.K, w, per_copy, team)


# Under torch.compile: run eagerly (a graph break), since the handle is not a tensor
_eager_dispatch = torch.compiler.disable(dispatch)
_eager_combine = torch.compiler.disable(combine)


# ---- MoE dispatch and combine --------------------------------------------------------------------
# Eager: torch.autograd.Functions, not custom ops: dispatch returns a handle (workspace, routing), which is
# no tensor, and without max_tokens its output's rows are known only after the call (under torch.compile
# that layout is a graph break; with max_tokens the custom ops below are traced instead). The backward passes are public calls (formulas in moe.py's
# docstring, "Gradients"); every PE runs them in the same order, as it runs the forward calls.


def wide_dtype(*dtypes) -> torch.dtype:
    return torch.float64 if torch.float64 in dtypes else torch.float32


def copy_rows(weights, grad, dtype) -> torch.Tensor:
    """[T, K, H]: copy (t, k)'s share of the gradient of combine's out[t], w[t, k] * grad[t]."""
    wide = wide_dtype(weights.dtype, grad.dtype)
    return (weights.to(wide)[:, :, None] * grad.to(wide)[:, None, :]).to(dtype)


def weights_grad(copies, grad, dtype) -> torch.Tensor:
    """[T, K]: the gradient of w[t, k], <grad[t], copy (t, k)'s row as it came back>."""
    wide = wide_dtype(dtype, grad.dtype)
    return (copies.to(wide) * grad.to(wide)[:, None, :]).sum(-1).to(dtype)


class _Dispatch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tokens, topk_ids, weights, n_experts, max_tokens, team, group):
        out, counts, handle = _run_dispatch(tokens.detach(), topk_ids, weights, n_experts, max_tokens, team, group)
        ctx.handle, ctx.per_copy = handle, tokens.dim() == 3
        ctx.mark_non_differentiable(counts)
        return out, counts, handle

    @staticmethod
    def backward(ctx, grad, _counts, _handle):
        h = ctx.handle
        if ctx.per_copy:  # copy (t, k) carried tokens[t, k]
            grad_tokens = combine(grad.contiguous(), h, per_copy=True, team=h.team)
        else:  # copy (t, k) carried tokens[t]: the sum of its copies' gradients
            ones = torch.ones(h.T, h.K, dtype=wide_dtype(grad.dtype), device=grad.device)
            grad_tokens = combine(grad.contiguous(), h, weights=ones, team=h.team)
        return grad_tokens, None, None, None, None, None, None


def _dispatch_with_grad(tokens, topk_ids, weights, n_experts, max_tokens, team, group):
    """moe.dispatch with the gradient of tokens; weights: the handle's copy of topk_weights."""
    return _Dispatch.apply(tokens, topk_ids, weights, n_experts, max_tokens, team, group)


class _Combine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, expert_out, weights, handle, per_copy, team, group):
        out = _run_combine(expert_out.detach(), handle, weights, per_copy, team, group)
        ctx.handle, ctx.per_copy = handle, per_copy
        ctx.save_for_backward(expert_out, weights)
        return out

    @staticmethod
    def backward(ctx, grad):
        expert_out, weights = ctx.saved_tensors
        h, grad = ctx.handle, grad.contiguous()
        grad_rows = grad_weights = None
        if ctx.needs_input_grad[0]:  # row (t, k) of expert_out: w[t, k] * grad[t] (per_copy: grad[t, k])
            grad_rows = h.dispatch(grad if ctx.per_copy else copy_rows(weights, grad, expert_out.dtype))
        if ctx.needs_input_grad[1]:  # w[t, k]: <grad[t], row (t, k) back on this PE>
            copies = combine(expert_out.detach(), h, per_copy=True, team=h.team)
            grad_weights = weights_grad(copies, grad, weights.dtype)
        return grad_rows, grad_weights, None, None, None, None


def _combine_with_grad(expert_out, weights, handle, per_copy, team, group):
    """moe.combine with the gradients of expert_out and weights (None with per_copy)."""
    return _Combine.apply(expert_out, weights, handle, per_copy, team, group)
