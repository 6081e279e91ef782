"""GEMMs with their tensor-parallel communication, written once in unishmem.language.

ag_gemm (A sharded by rows, B replicated): c = all_gather(a_shard) @ b on every PE.
  overlap=True: one launch from a capped grid (NOTE [persistent grid]). A contiguous a_shard that is
  not a symmetric tensor is first copied into the workspace by the launch itself (NOTE [copy-in]), what
  the pushes send from; the shard is cut into chunks of BLOCK_M rows, and the push tasks (chunk, peer)
  go round the grid, each a putmem_signal with the signal SET to the call's epoch. Then the C tiles go
  round the grid, the local shard's first (read from a_shard, no wait), then the shard of member
  my-1, my-2, ... (the order in which they send to us); a tile of a remote shard waits for that chunk's
  signal, and its A loads depend on the wait through consume_token, so that Triton's pipeliner cannot
  issue them earlier. Every program issues its pushes before it waits. Where every member is reachable
  by load/store, this PE's programs pull the chunks instead (NOTE [ag_gemm pull]), or with
  UNISHMEM_COPY_ENGINE=1 the copy engine copies the shards beside the launch (NOTE [ag_gemm copy engine]).
  overlap=False: all_gather (unishmem.kernels) of A, then torch.matmul (cuBLAS on a GPU).
  overlap=None (default): whichever of the two is faster at the call's size (NOTE [fuse or not]), or
  torch.matmul shard by shard as the copy engine gathers A (NOTE [ag_gemm chunked]).

gemm_rs (K split over PEs): a [M, K_local] and b_shard [K_local, N] on each PE give a partial C of
  [M, N]; PE p gets rows block p of the sum of every PE's partial C, [M / n, N]. The tiles go round a
  capped grid: first the tiles other PEs own, each stored whole into this PE's symmetric staging
  buffer, then this PE's own, each adding the peers' tiles to its own as they are ready: every
  program stages before it waits. Where every member is reachable by load/store (and UNISHMEM_PULL is
  not 0) the owner reads the peers' staged tiles in place, told by one signal per row of tiles (NOTE
  [gemm_rs pull]); elsewhere each staged tile is pushed whole to its owner with putmem_signal.
  overlap=False: torch.matmul, then reduce_scatter (unishmem.kernels); None (default): as for ag_gemm
  (chunked: NOTE [gemm_rs chunked]).

NOTE [ag_gemm pull]: where every member is reachable by load/store, a PE gathers A itself: its program
0 tells every peer that its source is whole (x in place, or the copy-in done: a fence, then a signal per
peer), and the copy tasks (chunk, member), in the order the tiles come, each wait for that member's word,
copy the chunk from the member's source into this PE's gathered A (16-byte accesses where the
descriptors fit) and release a local flag for the chunk, which the chunk's tiles wait for as they wait
for a pushed chunk's signal. Each member's last chunk copied tells the member it is done with its
source; program 0 waits for every peer's word before the call ends (x may change after it). Per call:
no put and no remote signal per chunk, two signals per pair of PEs.

NOTE [ag_gemm copy engine]: with UNISHMEM_COPY_ENGINE=1 (or where the measured default is "fused, copy")
and every member reachable by load/store, no program moves A: the copy engine does, beside the launch.
On torch's current stream, a_shard is staged into src where it must be (a torch copy), then the ready
handshake (one program: every member's src is whole, and this PE's ready word holds the call's epoch).
A side stream forks from there: for each peer in the tiles' order (my-1, my-2, ...) one device copy of
its whole shard from its view of src (rt.peer) into a, then an 8-byte device copy of that epoch into the
shard's word sig[shard]. Meanwhile the launch computes the local shard's tiles, which wait for nothing,
then each peer's, whose programs wait for the shard's word (as they wait for a pushed chunk's signal).
The current stream joins the side stream and runs the done handshake, which ends the call: no peer reads
a src after that. The SMs only multiply; the price is two one-program launches and 2(n - 1) copies
a call, and a peer's tiles wait for its whole shard, not a chunk. One A and one word per shard, no
parity: the next call's copies follow its ready handshake, which follows this call's launch on the
stream. Captured in a CUDA graph, the copies replay with the views they were made with and the fork and
join are the graph's; the word's value comes from the device, so a replay numbers its call. Not run on
a GPU (none here). What it relies on: a torch copy from a peer's view is a copy-engine transfer that
needs no SM (PyTorch's symmetric-memory all-gather by the copy engine is such copies, pytorch/pytorch
#169329); the same is assumed of the word's 8-byte copy, which PyTorch's fused all-gather matmul does
with a stream write-value instead (were it a kernel waiting for an SM that the spinning tiles hold, the
launch would hang); and a copy on a stream starts once the one before it has finished.

NOTE [gemm_rs chunked]: gemm_rs's counterpart of NOTE [ag_gemm chunked] (chosen alike): the ready
handshake (every owner has summed its last call's blocks), then for each other owner in turn (my+1,
my+2, ...: no two PEs push to one owner at once) torch.matmul of its rows of a into a local partial
block, which a device copy on the side stream, forked after that matmul, pushes into the owner's
receive slot for this PE (rt.peer of the symmetric receive buffer) while the next matmul runs; this
PE's own block last, straight into its own slot; the join, the done handshake (every member's pushes
have landed: each member sets its done word after its join), and one torch.sum of the n slots into c.
n matmuls of M/n rows and n - 1 copies where the sequential path makes one matmul and a
reduce_scatter; nothing spins on the GPU. The sum runs after the done handshake, which ends the call:
the next call's pushes into these slots wait for its ready handshake, which this PE joins only after
the sum, on the stream. Not run on a GPU; that a copy has landed when its stream has passed it, before
the done handshake's signal, is the same assumption as NOTE [copy engine]'s.

NOTE [gemm_rs pull]: a tile is written once, into the staging buffer (slot (owner, tile), in the call's
parity), and read once, by its owner. The programs that stage the tiles of one row of an owner's block
each count themselves in a local word for (owner, row) (a block barrier, then an acq_rel atomic); the
last one resets it, fences (the others' stores, which it acquired, reach the system before what follows)
and SETs the owner's word for (this PE, row) to the epoch. The owner's program of a tile waits for that
word of every peer, then loads the peer's tile through remote_ptr, 16 bytes an access. Per call: one
signal per row of tiles and owner (where the push sends one per tile, each after its own fence), no
receive buffer and no copy. The next call but one writes the same half of the buffer only after this
call's owners have read it: each PE's next call waits for tiles its peers stage after their own call
ended (the argument of NOTE [workspaces]); the race check runs it clean (tests/test_races.py).

NOTE [fuse or not]: the fused kernels pay for their overlap with a Triton tile slower than cuBLAS
(the first GPU runs: 1.75-2.8x torch.matmul, docs/benchmarks.md), so from some size on the
sequential path (the collective, then torch.matmul) is faster. overlap=None takes the measured
default for the kernel and the call's per-PE input bytes (NOTE [measured defaults] in _tuned.py:
variant "fused", "fused, copy" (ag_gemm), "chunked" or "unfused"), else fuses below
_tuned.FUSED_MAX_BYTES, and from there runs chunked with UNISHMEM_COPY_ENGINE=1 (NOTE [ag_gemm chunked],
NOTE [gemm_rs chunked]: cuBLAS and the copy engine overlapped), the sequential path without. Every form gives the
same result (to rounding: torch.matmul's float32 is not TF32), is differentiable and replays from a
graph; overlap=True or False forces the fused or the sequential path.

NOTE [ag_gemm chunked]: the overlap PyTorch's asynchronous tensor parallelism makes, with cuBLAS doing
the arithmetic: where every member is reachable by load/store, a_shard is staged where it must be (a
torch copy), then the ready handshake; on a side stream, for each peer in the fused kernel's order
(my-1, my-2, ...), one device copy of its shard from its view of src into the workspace's A, and an
event; on the current stream torch.matmul of a_shard into its rows of c, then for each peer a wait
for its event and torch.matmul of its shard into its rows; the join, and the done handshake, which
ends the call (no peer reads a src after it). n matmuls of M/n rows where the sequential path makes
one of M, and 2 handshakes and n - 1 copies where it launches all_gather: the copy engine moves A
while the SMs multiply, and nothing waits on the GPU for anything but events, so a copy that took an
SM could delay the matmuls but not hang them. One A, no parity (the next call's copies follow its
ready handshake, after this call's matmuls on the stream). Captured in a CUDA graph the events and
the fork and join are the graph's edges. Not run on a GPU: whether the shards' matmuls together
match one matmul of M rows (cuBLAS at M/n rows) is for the sweep ("chunked") to say.

Tiles need not divide M, N or K (masked loads and stores, or a descriptor's zero padding). float16,
bfloat16 and float32; tl.dot accumulates in float32 (float32 operands use tl.dot's default precision:
TF32 on NVIDIA tensor cores). Blocks are powers of two from 16 (tl.dot's minimum) to the architecture's
tile (NOTE [GEMM tiles]), smaller for small matrices.
Workspaces, epochs and parities follow NOTE [workspaces]; their size class is the shard's rows m
(a power of two from 16, `cap`): the varying dimension of a serving engine's batches; K (ag_gemm) and
N (gemm_rs) are part of the key. Each kernel counts its calls on the device (NOTE [call counter]), so a
call captured in a CUDA graph replays correctly.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import _active, _config, jit
from .. import language as shl
from .._workspaces import size_class, workspace
from ..triton_support import PER_CALL
from . import _tuned
from ._calls import COPY_BLOCK, STATE_WORDS, begin_call, copied_in, copy_block, end_call, handshakes, last_to_count_of
from ._frame import (
    PeerViews,
    Plan,
    SideStream,
    capped_grid,
    cdiv,
    check_tensor,
    empty,
    kernel_team,
    next_power_of_2,
    plan_and_launch,
    planned,
    reachable,
    record,
    run_plan,
)
from ._routing import needs_op, op_team_arg
from .collectives import all_gather, reduce_scatter

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# How the fused ag_gemm gathers the peers' shards of A (its GATHER): each PE's programs push its chunks to
# the others, this PE's programs pull the peers' chunks (NOTE [ag_gemm pull]), or the copy engine copies
# each peer's shard beside the launch (NOTE [ag_gemm copy engine]). Every member takes the same.
GATHERS = ("pull", "push", "copy")
# What an ag_gemm call runs, its workspace's variants: fused (named by its gather), chunked (NOTE [ag_gemm
# chunked]) or unfused (all_gather, then torch.matmul); every member runs the same (NOTE [fuse or not])
AG_GEMM_FORMS = (*GATHERS, "chunked", "unfused")
# gemm_rs's: fused, the owners pulling the peers' tiles (NOTE [gemm_rs pull]) or the peers pushing them,
# chunked (NOTE [gemm_rs chunked]) or unfused (torch.matmul, then reduce_scatter)
GEMM_RS_FORMS = ("pull", "push", "chunked", "unfused")
# NOTE [GEMM tiles]: the largest tile per architecture (each dimension smaller for a smaller matrix), its
# warps and its K loop's pipeline stages. 128x128x64 at 8 warps does 64 FLOP per byte of A and B it
# loads, twice the 64x64x32 tile's 32 (which the first H200 runs found L2-bound at 47 TFLOPS); sm_90:
# wgmma m64n128k16, 4 stages of A and B tiles in 128 KiB of shared memory, TMA loads (below); gfx942:
# MFMA, 2 stages in 32 KiB of its 64 KiB LDS, 16-byte loads (the descriptors lower to them there). Both
# read from compiles (tests/test_kernels_gemm_compile.py); a model, not measured on a GPU. Other architectures,
# and the host backend's interpreter (where a tile is one numpy call whatever its size), take the same
# tile with the defaults of the target Triton compiles for.
# Where every row stride and base is a multiple of 16 bytes (aligned tensors, K and N multiples of 8 in
# float16), a tile loads A and B through tensor descriptors (tl.make_tensor_descriptor, created in the
# kernel): TMA on sm_90, which also pads the edges with zeros instead of masks; elsewhere masked loads.
# A descriptor made in the kernel needs Triton's global scratch on NVIDIA (_scratch_allocator).
TILES = {
    "sm_90": {"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 4},
    "gfx942": {"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 2},
}
TILE = {"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 3}  # anywhere else
GROUP_M = 8  # tile rows a persistent GEMM walks down before moving right (L2 reuse of B's columns)
MIN_CLASS_ROWS = 16  # the smallest size class of a workspace (rows of a shard; NOTE [workspaces])


def tile_of(device) -> dict:
    """The GEMM tile of device's architecture (NOTE [GEMM tiles])."""
    return TILES.get(_tuned.architecture(device), TILE)


def _tile_for(device, row: dict) -> dict:
    """The fused call's tile: UNISHMEM_GEMM_TILE where set, else its measured default's `tile` (a row of
    variant "fused" or "fused, copy", NOTE [measured defaults]), else the architecture's; warps and stages the
    architecture's."""
    tile = dict(tile_of(device))
    given = _config.get("UNISHMEM_GEMM_TILE")
    if given is None and row.get("variant", "").startswith("fused") and row.get("tile"):
        given = _config.SETTINGS["UNISHMEM_GEMM_TILE"].kind.parse("the measured tile", row["tile"])
    if given is not None:
        tile.update(zip(("block_m", "block_n", "block_k"), given))
    return tile


def _descriptors_fit(itemsize: int, *tensors_and_strides) -> bool:
    """Whether tensor descriptors can address these operands: bases and row strides (elements) multiples
    of 16 bytes (NOTE [GEMM tiles])."""
    for t, stride in tensors_and_strides:
        if t.data_ptr() % 16 or stride * itemsize % 16:
            return False
    return True


def _scratch_allocator(device) -> None:
    """Triton's global scratch for descriptors made in a kernel (NVIDIA): a torch allocation on the
    launch's device (capturable in a CUDA graph), set where the caller has set no allocator of its own."""
    from triton.runtime import _allocation

    if device.type != "cuda" or not isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        return

    def scratch(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device=device)

    triton.set_allocator(scratch)


@triton.jit
def _tile(
    a, rows, b, pn, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DESCRIPTORS: tl.constexpr
):
    """float32 [BLOCK_M, BLOCK_N] tile pn of a[:rows, :K] @ b[:K, :N]; a: its first row (row stride K).
    DESCRIPTORS: A and B through tensor descriptors (NOTE [GEMM tiles]), the rows past `rows` read as zeros."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if DESCRIPTORS:
        a_desc = tl.make_tensor_descriptor(a, [rows, K], [K, 1], [BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b, [K, N], [N, 1], [BLOCK_K, BLOCK_N])
        for k0 in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([0, k0]), b_desc.load([k0, pn * BLOCK_N]), acc)
    else:
        rm = tl.arange(0, BLOCK_M)
        rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = a + rm[:, None] * K + rk[None, :]
        b_ptrs = b + rk[:, None] * N + rn[None, :]
        m_in, n_in = (rm < rows)[:, None], (rn < N)[None, :]
        for k0 in range(0, K, BLOCK_K):
            k_in = (k0 + rk) < K
            a_t = tl.load(a_ptrs, mask=m_in & k_in[None, :], other=0.0)
            b_t = tl.load(b_ptrs, mask=k_in[:, None] & n_in, other=0.0)
            acc = tl.dot(a_t, b_t, acc)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K * N
    return acc


@triton.jit
def _grouped(t, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(tile row, tile column) of task t: GROUP_M tile rows at a time, down each column of the group
    before the next, so that programs running together share B's columns and A's rows in L2."""
    per_group = GROUP_M * tiles_n
    first = t // per_group * GROUP_M
    height = tl.minimum(tiles_m - first, GROUP_M)
    return first + t % per_group % height, t % per_group // height


@triton.jit
def _store_tile(c, acc, rows, pn, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """acc into c[:rows, tile pn of N] (c: its first row, row stride N)."""
    rm = tl.arange(0, BLOCK_M)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(
        c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty), mask=(rm < rows)[:, None] & (rn < N)[None, :]
    )


@jit(do_not_specialize=("stage",))
def _ag_gemm(
    x,
    src,
    stage,
    a,
    b,
    c,
    sig,
    ready,
    done,
    count,
    state,
    members,
    my_index,
    n,
    m,
    N,
    K,
    cap,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ITEMSIZE: tl.constexpr,
    DESCRIPTORS: tl.constexpr,
    GATHER: tl.constexpr,
):
    """x: this PE's shard [m, K]; src: x (stage=0) or the workspace's copy of it (stage=1, NOTE
    [copy-in]), what the pushes send from; a: [2, n * cap, K] symmetric (cap >= m: the size class),
    the peers' shards in rows shard * m... of the call's parity; sig: [2, n * cdiv(cap, BLOCK_M)], a
    word per (shard, chunk); c: [n * m, N]. GATHER: how the peers' shards come (GATHERS). Tasks go round
    the grid (NOTE [persistent grid]): first the pushes ("pull": the copies of the peers' chunks, NOTE
    [ag_gemm pull], with ready, done and count a word per member), then the tiles. "copy": a is [1, n *
    cap, K] and sig [n]: the copy engine brings each peer's shard whole into a and sets its word
    sig[shard] (NOTE [ag_gemm copy engine]); the launch only waits for the words and multiplies, and the
    done handshake after it ends the call."""
    p = tl.program_id(0)
    grid = tl.num_programs(0)
    epoch = begin_call(state)
    chunks = tl.cdiv(m, BLOCK_M)
    if GATHER != "copy":  # (the copy engine's form: no parity, and a_shard staged by torch)
        a += epoch % 2 * n * cap * K
        sig += epoch % 2 * n * tl.cdiv(cap, BLOCK_M)
        if stage:
            src = copied_in(x, src, m * K, state, epoch)
    if GATHER == "pull":  # NOTE [ag_gemm pull]
        if p == 0:  # src is whole (copied in by every program, or x in place): the peers may read it
            shl.fence()
            for j in range(1, n):
                shl.signal_op(ready + my_index, epoch, shl.SIGNAL_SET, tl.load(members + (my_index + j) % n))
        for t in range(p, chunks * (n - 1), grid):  # chunk t % chunks of member my-1, my-2, ...: the tiles' order
            s = (my_index - 1 - t // chunks + n) % n
            chunk = t % chunks
            token = shl.signal_wait_until(ready + s, shl.CMP_GE, epoch)
            peer = shl.remote_ptr(shl.consume_token(src, token), tl.load(members + s))
            first = (s * m + chunk * BLOCK_M) * K
            rows = tl.minimum(BLOCK_M, m - chunk * BLOCK_M)
            if DESCRIPTORS:  # 16-byte rows: the pointers' alignment restated (NOTE [16-byte copies])
                dest, source = tl.multiple_of(a + first, 16), tl.multiple_of(peer + chunk * BLOCK_M * K, 16)
            else:
                dest, source = a + first, peer + chunk * BLOCK_M * K
            for start in range(0, rows * K, COPY_BLOCK):
                copy_block(dest, source, start, rows * K, COPY_BLOCK)
            tl.debug_barrier()  # every thread's stores come before the chunk's release
            tl.atomic_xchg(sig + s * chunks + chunk, epoch.to(tl.uint64), sem="release", scope="gpu")
            if last_to_count_of(count + s, chunks):  # this PE has read all of s's shard
                shl.signal_op(done + my_index, epoch, shl.SIGNAL_SET, tl.load(members + s))
    elif GATHER == "push":
        for t in range(p, chunks * (n - 1), grid):  # chunk t % chunks of the shard to member my_index + 1 + t // chunks
            chunk = t % chunks
            shl.putmem_signal_nbi_block(
                a + (my_index * m + chunk * BLOCK_M) * K,
                src + chunk * BLOCK_M * K,
                tl.minimum(BLOCK_M, m - chunk * BLOCK_M) * K * ITEMSIZE,
                sig + my_index * chunks + chunk,
                epoch,
                shl.SIGNAL_SET,
                tl.load(members + (my_index + 1 + t // chunks) % n),
            )
        shl.quiet()  # src may change after the call: the puts must have read it
    tiles_n = tl.cdiv(N, BLOCK_N)
    for t in range(p, n * chunks * tiles_n, grid):
        shard = (my_index - t // (chunks * tiles_n) + n) % n  # local shard first, then my-1, my-2, ...
        chunk = t % (chunks * tiles_n) // tiles_n
        pn = t % tiles_n
        first = shard * m + chunk * BLOCK_M
        if shard != my_index:
            word = sig + shard if GATHER == "copy" else sig + shard * chunks + chunk
            token = shl.signal_wait_until(word, shl.CMP_GE, epoch)
            # the A rows' offset depends on the wait (NOTE: consume_token on the scalar offset keeps the
            # alignment Triton knows of K, so the tile loads stay vectorised where K allows)
            a_rows = a + shl.consume_token(first, token) * K
        else:
            a_rows = x + chunk * BLOCK_M * K  # this PE's own rows: nothing to wait for
        rows = m - chunk * BLOCK_M
        acc = _tile(a_rows, rows, b, pn, N, K, BLOCK_M, BLOCK_N, BLOCK_K, DESCRIPTORS)
        _store_tile(c + first * N, acc, rows, pn, N, BLOCK_M, BLOCK_N)
    if GATHER == "pull":
        if p == 0:  # src may change once the call ends: every peer must have read it
            for j in range(1, n):
                shl.signal_wait_until(done + (my_index + j) % n, shl.CMP_GE, epoch)
    if GATHER != "copy":
        end_call(state, epoch)


@jit
def _gemm(
    a,
    b,
    c,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DESCRIPTORS: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """c[M, N] = a[M, K] @ b[K, N]: the fused kernels' tile alone, persistent over a capped grid in
    grouped order, which the GPU check's timing phase measures beside torch.matmul
    (scripts/gpu_kernel_times.py, the GEMM part; launched by gemm_part)."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for t in range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0)):
        pm, pn = _grouped(t, tiles_m, tiles_n, GROUP_M)
        first = pm * BLOCK_M
        acc = _tile(a + first * K, M - first, b, pn, N, K, BLOCK_M, BLOCK_N, BLOCK_K, DESCRIPTORS)
        _store_tile(c + first * N, acc, M - first, pn, N, BLOCK_M, BLOCK_N)


def gemm_part(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """c = a @ b by the fused kernels' tile alone (_gemm), with the device's tile, on a capped grid: the
    GEMM part that scripts/gpu_kernel_times.py times beside torch.matmul. a: [M, K], b: [K, N], c: [M, N],
    contiguous, one dtype of DTYPES."""
    (M, K), N = a.shape, b.shape[1]
    tile = tile_of(a.device)
    blocks, bad = _blocks({"block_m": M, "block_n": N, "block_k": K}, {}, tile)
    if bad:
        raise bad
    descriptors = _descriptors_fit(a.element_size(), (a, K), (b, N))
    if descriptors:
        _scratch_allocator(a.device)
    tiles = cdiv(M, blocks["block_m"]) * cdiv(N, blocks["block_n"])
    _gemm[capped_grid(_gemm, tiles)](
        a,
        b,
        c,
        M,
        N,
        K,
        BLOCK_M=blocks["block_m"],
        BLOCK_N=blocks["block_n"],
        BLOCK_K=blocks["block_k"],
        DESCRIPTORS=descriptors,
        GROUP_M=GROUP_M,
        num_warps=tile["num_warps"],
        num_stages=tile["num_stages"],
    )
    return c


def _gemm_rs_buffers(form: str, n: int, cap: int, N: int, bm: int, bn: int, room: int, dtype) -> dict:
    """The workspace of a gemm_rs form (GEMM_RS_FORMS) for owner blocks of at most cap rows: fused, the
    staged tiles (room a owner) in two parities, the pushes' receive buffer or the pull's counts per row of
    tiles, a signal per tile; chunked (NOTE [gemm_rs chunked]), the partial blocks for the other owners,
    the receive buffer (a block per member), a ready and a done word per member; the call counter.
    Unfused: none (reduce_scatter has its own)."""
    if form == "unfused":
        return {}
    if form == "chunked":
        return {
            "stage": ((n, cap, N), dtype),
            "recv": ((n, cap, N), dtype),
            "ready": ((n,), torch.uint64),
            "done": ((n,), torch.uint64),
            "state": ((STATE_WORDS,), torch.int64),
        }
    tiles = n * room * bm * bn
    received = {"count": ((n * cdiv(cap, bm),), torch.int32)} if form == "pull" else {"recv": ((2, tiles), dtype)}
    return {
        "stage": ((2, tiles), dtype),
        **received,
        "sig": ((2, room * n), torch.uint64),
        "state": ((STATE_WORDS,), torch.int64),
    }


def _chunked_rs(core, ws, team, m: int):
    """launch(a, b_shard, c) of gemm_rs chunked (NOTE [gemm_rs chunked]): the ready handshake, each other
    owner's partial block by torch.matmul and pushed to its owner by a device copy on the side stream,
    this PE's own into its receive slot, the done handshake, and the sum of the received blocks into c."""
    buf, n, me = ws.buffers, team.n_pes, ws.my_index
    ready, done = handshakes(ws, n)
    owners = [(me + j) % n for j in range(1, n)]  # owner my+1 first: each owner hears from its peers in turn
    partials = [buf["stage"][i, :m] for i in owners]
    slots = [core.peer(buf["recv"], team.translate_pe(i, core.team_world))[me, :m] for i in owners]
    received = buf["recv"][:, :m]
    side = SideStream(core.device)

    def launch(a, b_shard, c):
        ready()  # every owner's receive buffer is free: it has summed its last call's
        for owner, partial, slot in zip(owners, partials, slots):
            torch.matmul(a[owner * m : (owner + 1) * m], b_shard, out=partial)
            with side.fork():
                slot.copy_(partial)
        torch.matmul(a[me * m : (me + 1) * m], b_shard, out=received[me])
        side.join()
        done()  # every member's pushes to every owner have landed
        torch.sum(received, dim=0, out=c)

    return launch


# From sig on, its parameters (and its launch's arguments) are _ag_gemm's on purpose: a Triton kernel
# binds and specialises its parameters one by one, so each kernel spells out its own.
@jit
def _gemm_rs(
    a,
    b,
    c,
    stage,
    recv,
    sig,
    count,
    state,
    members,
    my_index,
    n,
    m,
    N,
    K,
    cap,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ITEMSIZE: tl.constexpr,
    DESCRIPTORS: tl.constexpr,
    PULL: tl.constexpr,
):
    """a: [n * m, K], b: [K, N], c: [m, N]. stage and recv: [2, n, tiles of cap rows, BLOCK_M * BLOCK_N]
    (cap >= m: the size class; the call uses the first n * tiles; recv's first index after the parity
    the sender, stage's the owner; PULL: no recv, NOTE [gemm_rs pull]); sig: [2, tiles of cap rows * n],
    a word per (tile, sender), or with PULL per (sender, row of tiles); count: with PULL, a word per (owner,
    row of tiles). Tasks go round the grid (NOTE [persistent grid]): the other members' tiles first
    (computed and staged, never waiting), this PE's last (each waits for the peers' partial tiles)."""
    p = tl.program_id(0)
    grid = tl.num_programs(0)
    epoch = begin_call(state)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = tl.cdiv(m, BLOCK_M) * tiles_n  # per owner
    rows_room = tl.cdiv(cap, BLOCK_M)  # rows of tiles per owner in the workspace's class
    room = rows_room * tiles_n  # tiles per owner in the class
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    stage += epoch % 2 * n * room * TILE
    recv += epoch % 2 * n * room * TILE
    sig += epoch % 2 * room * n
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    for task in range(p, n * tiles, grid):
        owner = (my_index + 1 + task // tiles) % n
        t = task % tiles
        chunk = t // tiles_n
        pn = t % tiles_n
        rows = m - chunk * BLOCK_M
        acc = _tile(a + (owner * m + chunk * BLOCK_M) * K, rows, b, pn, N, K, BLOCK_M, BLOCK_N, BLOCK_K, DESCRIPTORS)
        if owner != my_index:  # the whole tile (zeros outside the matrix), contiguous
            staged = stage + (owner * tiles + t) * TILE
            tl.store(staged + offs, acc.to(stage.dtype.element_ty))
            if PULL:  # the row's last tile tells the owner (NOTE [gemm_rs pull])
                row = count + owner * rows_room + chunk
                if last_to_count_of(row, tiles_n):
                    shl.fence()
                    shl.signal_op(sig + my_index * rows_room + chunk, epoch, shl.SIGNAL_SET, tl.load(members + owner))
            else:
                shl.putmem_signal_nbi_block(
                    recv + (my_index * tiles + t) * TILE,
                    staged,
                    TILE * ITEMSIZE,
                    sig + t * n + my_index,
                    epoch,
                    shl.SIGNAL_SET,
                    tl.load(members + owner),
                )
        else:
            for s in range(0, n):
                if s != my_index:
                    # the loads come after the wait; the slot's alignment restated (the token's asm hides
                    # it), so that they are 16-byte loads (NOTE [16-byte copies] in collectives.py)
                    if PULL:
                        token = shl.signal_wait_until(sig + s * rows_room + chunk, shl.CMP_GE, epoch)
                        peer = shl.remote_ptr(shl.consume_token(stage, token), tl.load(members + s))
                        slot = tl.multiple_of(tl.multiple_of(peer, 16) + (my_index * tiles + t) * TILE, 16)
                        acc += tl.load(slot + offs).to(tl.float32)
                    else:
                        token = shl.signal_wait_until(sig + t * n + s, shl.CMP_GE, epoch)
                        slot = tl.multiple_of(shl.consume_token((s * tiles + t) * TILE, token), TILE)
                        acc += tl.load(recv + slot + offs).to(tl.float32)
            _store_tile(c + chunk * BLOCK_M * N, acc, rows, pn, N, BLOCK_M, BLOCK_N)
    end_call(state, epoch)


# How `unishmem compile` (and tests/test_kernels_compile.py) compile these kernels with no GPU:
# float16 with sm_90's tile (NOTE [GEMM tiles]; gfx942 with its own stages), through tensor descriptors,
# as a launch on a GPU is: on aligned tensors with N and K multiples of 16, and cap (a power of two
# >= 16) as every launch specialises it.
_INTS = ("my_index", "n", "m", "N", "K", "cap")
_BLOCKS = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "DESCRIPTORS": True}
_OPTIONS = {k: v for k, v in TILES["sm_90"].items() if k.startswith("num_")}
_TARGET_OPTIONS = {"gfx942": {k: v for k, v in TILES["gfx942"].items() if k.startswith("num_")}}


def _spec(pointers: dict, ints, constexprs: dict) -> dict:
    """pointers: the arguments before the integers (stage, an i32 among them, is not aligned)."""
    signature = {**pointers, **{k: "i32" for k in ints}}
    return {
        "signature": signature,
        "constexprs": constexprs,
        "options": _OPTIONS,
        "target_options": _TARGET_OPTIONS,
        "aligned": [
            *(k for k, ty in pointers.items() if ty.startswith("*")),
            "N",
            "K",
            *(("cap",) if "cap" in ints else ()),
        ],
    }


_AG_GEMM_ARGS = {
    "x": "*fp16",
    "src": "*fp16",
    "stage": "i32",
    "a": "*fp16",
    "b": "*fp16",
    "c": "*fp16",
    "sig": "*u64",
    "ready": "*u64",
    "done": "*u64",
    "count": "*i32",
    "state": "*i64",
    "members": "*i32",
}
COMPILE = {
    # in GATHERS' order: the pull (NOTE [ag_gemm pull]), the push to members elsewhere, the copy engine's form
    _ag_gemm: [_spec(_AG_GEMM_ARGS, _INTS, {**_BLOCKS, "ITEMSIZE": 2, "GATHER": gather}) for gather in GATHERS],
    _gemm: _spec({"a": "*fp16", "b": "*fp16", "c": "*fp16"}, ("M", "N", "K"), {**_BLOCKS, "GROUP_M": GROUP_M}),
    _gemm_rs: _spec(
        {
            "a": "*fp16",
            "b": "*fp16",
            "c": "*fp16",
            "stage": "*fp16",
            "recv": "*fp16",
            "sig": "*u64",
            "count": "*i32",
            "state": "*i64",
            "members": "*i32",
        },
        _INTS,
        {**_BLOCKS, "ITEMSIZE": 2, "PULL": True},
    ),
}


def _blocks(dims: dict, given: dict, tile: dict) -> tuple[dict, Exception | None]:
    """Block sizes: the given ones, else the smallest power of two >= 16 covering the dimension, at
    most the architecture's tile (NOTE [GEMM tiles])."""
    out: dict[str, int] = {}
    for name, dim in dims.items():
        value = given.get(name)
        if value is None:
            value = max(16, min(tile[name], next_power_of_2(max(dim, 1))))
        elif not isinstance(value, int) or value < 16 or value & (value - 1):
            return out, ValueError(f"{name}={value!r} must be a power of two >= 16 (tl.dot's smallest tile)")
        out[name] = value
    return out, None


def _operands(core, a, b, what: str, a_name: str, b_name: str):
    """The problem with (a, b) as the two operands of a GEMM, or None."""
    problem = check_tensor(core, a, a_name, what) or check_tensor(core, b, b_name, what)
    if problem:
        return problem
    if a.dim() != 2 or b.dim() != 2:
        return ValueError(f"{what}: {a_name} and {b_name} must be 2-D, got shapes {list(a.shape)} and {list(b.shape)}")
    if a.dtype not in DTYPES or b.dtype != a.dtype:
        return TypeError(
            f"{what}: {a_name} and {b_name} must both be float16, bfloat16 or float32 (one dtype), got {a.dtype} "
            f"and {b.dtype}"
        )
    if a.shape[1] != b.shape[0]:
        return ValueError(
            f"{what}: {a_name} of shape {list(a.shape)} and {b_name} of shape {list(b.shape)} do "
            f"not multiply ({a.shape[1]} != {b.shape[0]})"
        )
    if 0 in a.shape or 0 in b.shape:
        return ValueError(f"{what}: empty operands ({a_name} {list(a.shape)}, {b_name} {list(b.shape)})")
    return None


def _dummy():
    return torch.empty(0)


def _plan_key(what: str, a, b, blocks: tuple, overlap, team, group):
    """The key of a GEMM call's plan (NOTE [call plans]): the operands' dtypes, shapes, devices and
    16-byte alignment (which picks the tensor descriptors, NOTE [GEMM tiles]), the blocks and overlap asked
    for and the team; None (no plan) where group= names the team, an operand is not a plain tensor, a
    block is neither None nor an int or overlap not None, True or False (it must raise)."""
    if group is not None or type(a) is not torch.Tensor or type(b) is not torch.Tensor:
        return None
    if any(block is not None and type(block) is not int for block in blocks) or overlap not in (None, True, False):
        return None
    aligned = not (a.data_ptr() % 16 or b.data_ptr() % 16)
    return (what, a.dtype, a.shape, a.device, b.dtype, b.shape, b.device, aligned, blocks, overlap, team)


def _overlap_problem(overlap, what: str):
    if overlap not in (None, True, False):
        return TypeError(f"{what}: overlap must be None, True or False, got {overlap!r}")
    return None


def ag_gemm(
    a_shard, b, overlap: bool | None = None, *, block_m=None, block_n=None, block_k=None, team=None, group=None
):
    """all_gather(a_shard) @ b on every PE.

    a_shard: [M / n, K], this PE's rows of A (PE p holds rows p * M / n ...; every PE the same shape);
    b: [K, N], this PE's (N may differ between PEs: gemm_rs's gradient passes b_shard^T, whose K_p may);
    returns c: [M, N] in a_shard's dtype (float16, bfloat16 or float32).
    overlap: True gathers A chunk by chunk inside the GEMM launch, each GEMM tile waiting only for
    its own rows; False gathers all of A first (unishmem.kernels.all_gather), then torch.matmul;
    None (default) takes the faster at this size (NOTE [fuse or not]), which with UNISHMEM_COPY_ENGINE=1
    may be torch.matmul shard by shard as the copy engine brings them (NOTE [ag_gemm chunked]). block_m, block_n, block_k:
    the fused kernel's tile sizes (powers of two >= 16); every PE must pass the same. Runs on torch's current stream; safe to capture in a CUDA graph once a call of the same
    shapes has run. group: a torch.distributed ProcessGroup naming the team instead. Differentiable
    (grad a_shard = gemm_rs(grad, b^T), grad b = all_gather(a_shard)^T @ grad) and traceable by
    torch.compile (torch.ops.unishmem.ag_gemm)."""
    if needs_op(a_shard, b):
        op_blocks = [block_m or 0, block_n or 0, block_k or 0]
        return torch.ops.unishmem.ag_gemm(a_shard, b, overlap, op_blocks, op_team_arg(team, group))
    core = _active.core()
    # NOTE [call plans] (the fused launch): b, like out, is passed at every call
    key = _plan_key("ag_gemm", a_shard, b, (block_m, block_n, block_k), overlap, team, group)
    plan = planned(core, key)
    if plan is not None:
        return run_plan(core, plan, a_shard, None, "ag_gemm", b.contiguous())
    team = kernel_team(core, team, group)
    n = team.n_pes
    problem = _operands(core, a_shard, b, "ag_gemm", "a_shard", "b") or _overlap_problem(overlap, "ag_gemm")
    nbytes = a_shard.numel() * a_shard.element_size() if problem is None else 0
    row = _tuned.row_of(core.device, n, "ag_gemm", nbytes)
    form = _form_of(core, team, row, overlap, nbytes, lambda: _gather_of(core, team, row))
    fused = form in GATHERS
    m, K = a_shard.shape if problem is None else (0, 0)
    N = b.shape[1] if problem is None else 0
    tile = _tile_for(core.device, row)
    blocks, bad = _blocks(
        {"block_m": m, "block_n": N, "block_k": K}, {"block_m": block_m, "block_n": block_n, "block_k": block_k}, tile
    )
    problem = problem or bad
    bm = blocks.get("block_m", 16)
    cap = size_class(m, MIN_CLASS_ROWS)
    ws = workspace(
        core,
        team,
        "ag_gemm",
        a_shard if problem is None else _dummy(),
        lambda: _ag_gemm_buffers(form, n, cap, cdiv(cap, bm), K, a_shard.dtype),
        problem,
        key=(form, bm, K, cap),
        shape=(m, K, bm, int(fused)),  # (not N: only A travels)
        label="(a_shard rows, K, block_m, overlap)",
        variants=AG_GEMM_FORMS,
    )
    b = b.contiguous()
    bn, bk = blocks["block_n"], blocks["block_k"]
    if form == "unfused":
        return torch.matmul(all_gather(a_shard.contiguous(), team=team), b)
    if form == "chunked":
        return plan_and_launch(core, key, ws, (n * m, N), _chunked(core, ws, team, m, K), a_shard, None, b)
    buf = ws.buffers
    chunks = cdiv(m, bm)
    item = a_shard.element_size()
    descriptors = _descriptors_fit(item, (a_shard, K), (b, N), (buf["a"], K))
    if descriptors:
        _scratch_allocator(core.device)
    bound = _ag_gemm.bind(
        capped_grid(_ag_gemm, max(chunks * (n - 1), n * chunks * cdiv(N, bn))),
        PER_CALL,  # a_shard
        PER_CALL,  # src
        PER_CALL,  # stage
        buf["a"],
        PER_CALL,  # b
        PER_CALL,  # c
        buf["sig"],
        buf.get("ready", buf["sig"]),  # (unused where the pushes gather)
        buf.get("done", buf["sig"]),
        buf.get("count", buf["state"]),  # (used by the pull alone)
        buf["state"],
        ws.members,
        ws.my_index,
        n,
        m,
        N,
        K,
        cap,
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        ITEMSIZE=item,
        DESCRIPTORS=descriptors,
        GATHER=form,
        num_warps=tile["num_warps"],
        num_stages=tile["num_stages"],
    )
    if form == "copy":
        launch = _copy_engine_gather(core, ws, team, bound, m, K)
    else:

        def launch(a_shard, src, stage, c, b):
            bound(a_shard, src, stage, b, c)

    return plan_and_launch(core, key, ws, (n * m, N), launch, a_shard, None, b)


def _form_of(core, team, row: dict, overlap, nbytes: int, fused) -> str:
    """What a GEMM call on team runs (AG_GEMM_FORMS, GEMM_RS_FORMS): overlap=True the fused form `fused()`
    names, False "unfused"; None (NOTE [fuse or not]) its measured default `row`, else fused below
    FUSED_MAX_BYTES of input per PE, and from there "chunked" with UNISHMEM_COPY_ENGINE=1, "unfused"
    without. Chunked needs every member reachable by load/store; elsewhere unfused."""
    if overlap is None:
        if row:
            variant = row["variant"]
        elif nbytes < _tuned.FUSED_MAX_BYTES:
            variant = "fused"
        else:
            variant = "chunked" if _config.get("UNISHMEM_COPY_ENGINE") else "unfused"
        if variant == "chunked":
            return "chunked" if _loads_reach(core, team) else "unfused"
        overlap = variant.startswith("fused")
    return fused() if overlap is True else "unfused"


def _loads_reach(core, team) -> bool:
    """Whether a GEMM reads its peers' data in place on team: every member reachable by load/store, and
    UNISHMEM_PULL not 0."""
    return bool(_config.get("UNISHMEM_PULL")) and reachable(core, team)


def _gather_of(core, team, row: dict) -> str:
    """How the fused ag_gemm gathers A on team (GATHERS): "push" unless every member is reachable by
    load/store and UNISHMEM_PULL is not 0; else, unless UNISHMEM_PULL or UNISHMEM_COPY_ENGINE is set, "copy"
    where its measured default `row` is "fused, copy" (NOTE [measured defaults]); else "copy" with
    UNISHMEM_COPY_ENGINE=1 (NOTE [ag_gemm copy engine]), "pull" without (NOTE [ag_gemm pull])."""
    if not _loads_reach(core, team):
        return "push"
    if row and not (_config.given("UNISHMEM_PULL") or _config.given("UNISHMEM_COPY_ENGINE")):
        return "copy" if row["variant"] == "fused, copy" else "pull"
    return "copy" if _config.get("UNISHMEM_COPY_ENGINE") else "pull"


def _ag_gemm_buffers(form: str, n: int, cap: int, chunks: int, K: int, dtype) -> dict:
    """The workspace of an ag_gemm form (AG_GEMM_FORMS) for shards of at most cap rows (chunks of them): the
    gathered A and a word per (shard, chunk) in two parities, where the copy engine keeps one A (and the
    fused form a word per shard: NOTE [ag_gemm copy engine]); the staging copy of a_shard; a ready and a
    done word per member where this PE reads the members' shards (and the pull's count of chunks read per
    member); the call counter. Unfused: none (all_gather has its own)."""
    if form == "unfused":
        return {}
    one_a = form in ("copy", "chunked")
    buffers = {
        "a": ((1 if one_a else 2, n * cap, K), dtype),
        "src": ((cap, K), dtype),
        "state": ((STATE_WORDS,), torch.int64),
    }
    if form != "chunked":
        buffers["sig"] = ((n,) if form == "copy" else (2, n * chunks)), torch.uint64
    if form != "push":
        buffers.update(ready=((n,), torch.uint64), done=((n,), torch.uint64))
    if form == "pull":
        buffers["count"] = ((n,), torch.int32)
    return buffers


def _copy_engine_gather(core, ws, team, bound, m: int, K: int):
    """launch(a_shard, src, stage, c, b) of the fused ag_gemm whose A the copy engine gathers (NOTE [ag_gemm
    copy engine]): a_shard staged where it must be (a torch copy), the ready handshake, then on the side
    stream each peer's shard copied from its view of src and its word set to the epoch, while the launch
    (`bound`) multiplies on the current stream; the done handshake once both are through."""
    ready, done = handshakes(ws, team.n_pes)
    order, views, gathered = _peer_shards(core, ws, team, m, K)
    words = [ws.buffers["sig"][i : i + 1] for i in order]
    me = ws.my_index
    epoch = ws.buffers["ready"][me : me + 1]  # this PE's own ready word, SET to the call's epoch by the handshake
    side = SideStream(core.device)

    def launch(a_shard, src, stage, c, b):
        if stage:
            src[:m].copy_(a_shard)
        ready()
        with side.fork():
            for rows, peer_rows, word in zip(gathered, views.of(src), words):
                rows.view(-1).copy_(peer_rows)
                word.copy_(epoch)  # an 8-byte device copy after the shard's, on the same stream
        bound(a_shard, src, 0, b, c)
        side.join()
        done()

    return launch


def _peer_shards(core, ws, team, m: int, K: int):
    """(order, views, gathered) for the copy engine's gathers of A (NOTE [ag_gemm copy engine], [ag_gemm
    chunked]): the peers in the fused kernel's tile order (member my-1, my-2, ...), their views of a
    source's m rows of K (PeerViews), and where each one's shard goes in the workspace's A ([m, K])."""
    n, me = team.n_pes, ws.my_index
    order = [(me - j) % n for j in range(1, n)]
    views = PeerViews(core, [team.translate_pe(i, core.team_world) for i in order], 0, m * K)
    return order, views, [ws.buffers["a"][0, i * m : (i + 1) * m] for i in order]


def _chunked(core, ws, team, m: int, K: int):
    """launch(a_shard, src, stage, c, b) of ag_gemm chunked (NOTE [ag_gemm chunked]): a_shard staged where it
    must be, the ready handshake, each peer's shard copied on the side stream and marked, torch.matmul of
    each shard into its rows of c once its copy is through (the local one first), the done handshake."""
    me = ws.my_index
    ready, done = handshakes(ws, team.n_pes)
    order, views, gathered = _peer_shards(core, ws, team, m, K)
    side = SideStream(core.device, marks=team.n_pes - 1)

    def launch(a_shard, src, stage, c, b):
        if stage:
            src[:m].copy_(a_shard)
        ready()
        with side.fork():
            for j, (rows, peer_rows) in enumerate(zip(gathered, views.of(src))):
                rows.view(-1).copy_(peer_rows)
                side.mark(j)
        torch.matmul(a_shard, b, out=c[me * m : (me + 1) * m])
        for j, (shard, rows) in enumerate(zip(order, gathered)):
            side.wait_for(j)
            torch.matmul(rows, b, out=c[shard * m : (shard + 1) * m])
        side.join()
        done()

    return launch


def gemm_rs(
    a, b_shard, overlap: bool | None = None, *, block_m=None, block_n=None, block_k=None, team=None, group=None
):
    """Rows block my_pe of the sum over PEs of a @ b_shard (matmul + reduce_scatter_tensor).

    The tensor-parallel layout of a row-parallel linear layer: K is split over the PEs, PE p holding
    a: [M, K_p] (its columns of the activations) and b_shard: [K_p, N] (its rows of the weight);
    K_p may differ between PEs, M and N may not, and M must split into n equal blocks. Returns
    c_shard: [M / n, N] in a's dtype (float16, bfloat16 or float32). Partial tiles travel in that dtype and
    are summed in float32 by their owner. overlap: True, one fused launch; False, torch.matmul then
    reduce_scatter; None (default), the faster at this size (NOTE [fuse or not]), which with
    UNISHMEM_COPY_ENGINE=1 may be torch.matmul block by block, each pushed to its owner by the copy engine
    (NOTE [gemm_rs chunked]). block_m, block_n,
    block_k: as for ag_gemm. Runs on torch's
    current stream; safe to capture in a CUDA graph once a call of the same shapes has run. group: a
    torch.distributed ProcessGroup naming the team instead. Differentiable (grad a =
    ag_gemm(grad, b_shard^T), grad b_shard = a^T @ all_gather(grad)); traceable by torch.compile."""
    if needs_op(a, b_shard):
        op_blocks = [block_m or 0, block_n or 0, block_k or 0]
        return torch.ops.unishmem.gemm_rs(a, b_shard, overlap, op_blocks, op_team_arg(team, group))
    core = _active.core()
    key = _plan_key("gemm_rs", a, b_shard, (block_m, block_n, block_k), overlap, team, group)
    plan = planned(core, key)  # NOTE [call plans]: a and b_shard passed at every call
    if plan is not None:
        c = empty(plan.shape, a.dtype, core.device)
        plan.launch(a.contiguous(), b_shard.contiguous(), c)
        return c
    team = kernel_team(core, team, group)
    n = team.n_pes
    problem = _operands(core, a, b_shard, "gemm_rs", "a", "b_shard") or _overlap_problem(overlap, "gemm_rs")
    nbytes = a.numel() * a.element_size() if problem is None else 0
    row = _tuned.row_of(core.device, n, "gemm_rs", nbytes)
    form = _form_of(core, team, row, overlap, nbytes, lambda: "pull" if _loads_reach(core, team) else "push")
    pull = form == "pull"
    M, K = a.shape if problem is None else (0, 0)
    N = b_shard.shape[1] if problem is None else 0
    if problem is None and M % n:
        problem = ValueError(f"gemm_rs: a has M={M} rows, which do not split into {n} equal blocks")
    m = M // n
    tile = _tile_for(core.device, row)
    blocks, bad = _blocks(
        {"block_m": m, "block_n": N, "block_k": K}, {"block_m": block_m, "block_n": block_n, "block_k": block_k}, tile
    )
    problem = problem or bad
    bm, bn = blocks.get("block_m", 16), blocks.get("block_n", 16)
    cap = size_class(m, MIN_CLASS_ROWS)
    room = cdiv(cap, bm) * cdiv(N, bn)  # tiles per owner in the class
    ws = workspace(
        core,
        team,
        "gemm_rs",
        a if problem is None else _dummy(),
        lambda: _gemm_rs_buffers(form, n, cap, N, bm, bn, room, a.dtype),
        problem,
        key=(form, bm, bn, N, cap),
        shape=(M, N, bm, bn, int(form in ("pull", "push"))),
        label="(M, N, block_m, block_n, overlap)",
        variants=GEMM_RS_FORMS,
    )
    if form == "unfused":
        return reduce_scatter(torch.matmul(a, b_shard), team=team)
    c = torch.empty((m, N), dtype=a.dtype, device=core.device)
    if form == "chunked":
        launch = _chunked_rs(core, ws, team, m)
        record(core, key, Plan(ws, (m, N), launch))
        launch(a.contiguous(), b_shard.contiguous(), c)
        return c
    buf = ws.buffers
    descriptors = _descriptors_fit(a.element_size(), (a, K), (b_shard, N))
    if descriptors:
        _scratch_allocator(core.device)
    launch = _gemm_rs.bind(
        capped_grid(_gemm_rs, n * cdiv(m, bm) * cdiv(N, bn)),
        PER_CALL,  # a
        PER_CALL,  # b_shard
        PER_CALL,  # c
        buf["stage"],
        buf["stage"] if pull else buf["recv"],  # (no receive buffer when pulling)
        buf["sig"],
        buf["count"] if pull else buf["state"],  # (no count when pushing)
        buf["state"],
        ws.members,
        ws.my_index,
        n,
        m,
        N,
        K,
        cap,
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=blocks["block_k"],
        ITEMSIZE=a.element_size(),
        DESCRIPTORS=descriptors,
        PULL=pull,
        num_warps=tile["num_warps"],
        num_stages=tile["num_stages"],
    )
    record(core, key, Plan(ws, (m, N), launch))
    launch(a.contiguous(), b_shard.contiguous(), c)
    return c
