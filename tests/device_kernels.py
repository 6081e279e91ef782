"""Kernels that together call every function of unishmem.language, for the compile-and-link tests.
They are split into groups because one kernel holding every NVSHMEM call takes ptxas minutes."""

import triton
import triton.language as tl

import unishmem.language as shl

SIGNATURE = {"buf": "*i32", "src": "*i32", "sig": "*u64", "ivar": "*i64", "team": "i32", "N": "constexpr"}
# On rocSHMEM a team handle is the address of unishmem's team descriptor (NOTE [team descriptor])
HIP_SIGNATURE = dict(SIGNATURE, team="i64")


@triton.jit
def queries(buf, src, sig, ivar, team, N: tl.constexpr):
    me = shl.my_pe()
    peer = (me + 1) % shl.n_pes()
    t = shl.team_my_pe(team) + shl.team_n_pes(team) + shl.team_translate_pe(team, 0, team)
    tl.store(shl.remote_ptr(buf, peer), t + me)


@triton.jit
def thread_rma(buf, src, sig, ivar, team, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    tl.store(src + tl.arange(0, N), tl.arange(0, N))  # the execution rule: what the threads stored is sent
    shl.putmem(buf, src, N * 4, peer)
    shl.getmem(buf, src, N * 4, peer)
    shl.putmem_nbi(buf, src, N * 4, peer)
    shl.getmem_nbi(buf, src, N * 4, peer)
    shl.put(buf, src, N, peer)
    shl.get(buf, src, N, peer)
    shl.put_nbi(buf, src, N, peer)
    shl.get_nbi(buf, src, N, peer)
    shl.p(buf, 7, peer)
    tl.store(buf, shl.g(buf, peer))


@triton.jit
def block_rma(buf, src, sig, ivar, team, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    shl.putmem_block(buf, src, N * 4, peer)
    shl.getmem_block(buf, src, N * 4, peer)
    shl.putmem_nbi_block(buf, src, N * 4, peer)
    shl.getmem_nbi_block(buf, src, N * 4, peer)
    shl.put_block(buf, src, N, peer)
    shl.get_block(buf, src, N, peer)
    shl.put_nbi_block(buf, src, N, peer)
    shl.get_nbi_block(buf, src, N, peer)


@triton.jit
def warp_rma(buf, src, sig, ivar, team, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    shl.putmem_warp(buf, src, N * 4, peer)
    shl.getmem_warp(buf, src, N * 4, peer)
    shl.putmem_nbi_warp(buf, src, N * 4, peer)
    shl.getmem_nbi_warp(buf, src, N * 4, peer)


@triton.jit
def signals(buf, src, sig, ivar, team, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    shl.putmem_signal(buf, src, N * 4, sig, 1, shl.SIGNAL_SET, peer)
    shl.putmem_signal_nbi(buf, src, N * 4, sig, 1, shl.SIGNAL_ADD, peer)
    shl.putmem_signal_block(buf, src, N * 4, sig, 1, shl.SIGNAL_SET, peer)
    shl.putmem_signal_nbi_block(buf, src, N * 4, sig, 1, shl.SIGNAL_ADD, peer)
    shl.putmem_signal_warp(buf, src, N * 4, sig, 1, shl.SIGNAL_SET, peer)
    shl.putmem_signal_nbi_warp(buf, src, N * 4, sig, 1, shl.SIGNAL_ADD, peer)
    shl.signal_op(sig, 2, shl.SIGNAL_ADD, peer)
    s = shl.signal_wait_until(sig, shl.CMP_GE, 1) + shl.signal_fetch(sig)
    shl.wait_until(ivar, shl.CMP_NE, 0)
    tl.store(buf, s.to(tl.int32) + shl.test(ivar, shl.CMP_EQ, 1))


@triton.jit
def atomics(buf, src, sig, ivar, team, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    a = shl.atomic_fetch_add(ivar, 1, peer) + shl.atomic_fetch(ivar, peer) + shl.atomic_swap(ivar, 3, peer)
    a += shl.atomic_compare_swap(ivar, 3, 4, peer) + shl.atomic_fetch_inc(ivar, peer)
    shl.atomic_add(ivar, 1, peer)
    shl.atomic_inc(ivar, peer)
    shl.atomic_set(ivar, 0, peer)
    tl.store(ivar, a)


@triton.jit
def synchronization(buf, src, sig, ivar, team, N: tl.constexpr):
    shl.fence()
    shl.quiet()
    shl.barrier_all()
    shl.sync_all()
    shl.barrier_all_block()
    shl.sync_all_block()
    shl.barrier(team)
    shl.sync(team)


@triton.jit
def collectives(buf, src, sig, ivar, team, N: tl.constexpr):
    shl.broadcast(team, buf, src, N, 0)
    shl.fcollect(team, buf, src, N)
    shl.alltoall(team, buf, src, N)
    shl.reduce(team, buf, src, N, "sum")


# Device library v3: the warp and team scopes of the barriers and syncs and of two collectives, quiet_pe, mc_ptr
@triton.jit
def scoped_synchronization(buf, src, sig, ivar, team, N: tl.constexpr):
    shl.putmem_nbi(buf, src, N * 4, 1)
    shl.quiet_pe(1)
    shl.barrier_all_warp()
    shl.sync_all_warp()
    shl.barrier_block(team)
    shl.barrier_warp(team)
    shl.sync_block(team)
    shl.sync_warp(team)
    shl.broadcast_warp(team, buf, src, N, 0)
    shl.fcollect_warp(team, buf, src, N)
    tl.store(ivar, shl.mc_ptr(buf).to(tl.int64))


GROUPS = [
    queries,
    thread_rma,
    block_rma,
    warp_rma,
    signals,
    atomics,
    synchronization,
    collectives,
    scoped_synchronization,
]


@triton.jit
def every_group(buf, src, sig, ivar, team, N: tl.constexpr):
    """The groups as one kernel, for the archs where only the linking is checked: linking NVSHMEM's
    bitcode (30-50 MB, parsed for each compile) is most of a compile's time."""
    queries(buf, src, sig, ivar, team, N)
    thread_rma(buf, src, sig, ivar, team, N)
    block_rma(buf, src, sig, ivar, team, N)
    warp_rma(buf, src, sig, ivar, team, N)
    signals(buf, src, sig, ivar, team, N)
    atomics(buf, src, sig, ivar, team, N)
    synchronization(buf, src, sig, ivar, team, N)
    collectives(buf, src, sig, ivar, team, N)
    scoped_synchronization(buf, src, sig, ivar, team, N)


# Device library v2: compiled for sm_90 (and the HIP targets) only, to keep the suite's time.
@triton.jit
def many_waits(buf, src, sig, ivar, team, N: tl.constexpr):
    shl.wait_until_all(ivar, N, shl.CMP_GE, 1)
    i = shl.wait_until_any(ivar, N, shl.CMP_EQ, 2)
    c = shl.wait_until_some(ivar, N, ivar + N, shl.CMP_NE, 0)
    shl.wait_until_all_vector(ivar, N, shl.CMP_GE, ivar + N)
    j = shl.wait_until_any_vector(ivar, N, shl.CMP_EQ, ivar + N)
    k = shl.wait_until_some_vector(ivar, N, ivar + 2 * N, shl.CMP_NE, ivar + N)
    token = shl.signal_wait_until(sig, shl.CMP_EQ, 1)
    tl.store(shl.consume_token(buf, token), (i + c + j + k).to(tl.int32))


@triton.jit
def typed_signals(buf, src, sig, ivar, team, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    shl.put_signal(buf, src, N, sig, 1, shl.SIGNAL_SET, peer)
    shl.put_signal_nbi(buf, src, N, sig, 1, shl.SIGNAL_ADD, peer)
    shl.put_signal_block(buf, src, N, sig, 1, shl.SIGNAL_SET, peer)
    shl.put_signal_nbi_block(buf, src, N, sig, 1, shl.SIGNAL_ADD, peer)
    shl.put_signal_warp(buf, src, N, sig, 1, shl.SIGNAL_SET, peer)
    shl.put_signal_nbi_warp(buf, src, N, sig, 1, shl.SIGNAL_ADD, peer)


@triton.jit
def strided_and_direct(buf, src, sig, ivar, team, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    shl.iput(buf, src, 2, 1, N, peer)
    shl.iput_block(buf, src, 2, 1, N, peer)
    shl.iget(buf, src, 1, 2, N, peer)
    shl.iget_block(buf, src, 1, 2, N, peer)
    shl.put_tile_block(buf, 16, src, 8, 4, N * 4, peer)
    offs = tl.arange(0, N)
    shl.store_remote(buf + offs, tl.load(src + offs), peer, mask=offs < N - 1)
    tl.store(src + offs, shl.load_remote(buf + offs, peer, mask=offs < N - 1, other=0))
    shl.barrier_all_grid(ivar)


# A spin on a peer's word through load_remote (the port of Triton-distributed's wait on symm_at): every
# load of the word must reach memory, not a cached or hoisted copy.
@triton.jit
def spin_on_a_peer(buf, src, sig, ivar, team, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    seen = shl.load_remote(sig, peer)
    while seen == 0:
        seen = shl.load_remote(sig, peer)
    tl.store(ivar, seen.to(tl.int64))


# A range wait's token guards a load (consume_token); and what consume_token refuses, compiled as
# tests/test_device_waits_and_remote_access.py runs the same bodies interpreted, with the same words.
CONSUME_NOTHING = "consume_token: token must be a scalar run-time value, such as what a wait returned, not None"


@triton.jit
def range_wait_token(buf, src, sig, ivar, team, N: tl.constexpr):
    token = shl.wait_until_all(ivar, 1, shl.CMP_GE, 1)
    offs = tl.arange(0, N)
    tl.store(src + offs, tl.load(shl.consume_token(buf, token) + offs))


@triton.jit
def consume_nothing(buf, src, sig, ivar, team, N: tl.constexpr):
    tl.store(src, tl.load(shl.consume_token(buf, None)))


# A block of signal pointers given to a scalar wait: compiling it must fail, not wait per element.
@triton.jit
def block_wait(buf, src, sig, ivar, team, N: tl.constexpr):
    shl.signal_wait_until(sig + tl.arange(0, N), shl.CMP_EQ, 1)


V2_GROUPS = [many_waits, typed_signals, strided_and_direct]


# consume_token: a GEMM whose K loop waits for each A tile; Triton's pipeliner (num_stages=3)
# hoists the loads of later iterations, and must not hoist a guarded load above its wait.
@triton.jit
def pipelined_gemm(
    a, b, c, sig, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GUARD: tl.constexpr
):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K // BK):
        token = shl.signal_wait_until(sig + k, shl.CMP_GE, 1)
        a_tile = a + rm[:, None] * K + (k * BK + rk)[None, :]
        if GUARD:  # (the hints restore the alignment the identity hides, so the loads stay vectorised)
            a_tile = tl.max_contiguous(tl.multiple_of(shl.consume_token(a_tile, token), [8, 8]), [1, 8])
        acc += tl.dot(tl.load(a_tile), tl.load(b + (k * BK + rk)[:, None] * BN + rn[None, :]))
    tl.store(c + rm[:, None] * BN + rn[None, :], acc)


# The same loop over a tensor descriptor of A: consume_token ties the descriptor's load offsets to the wait.
@triton.jit
def pipelined_descriptor_gemm(
    a, b, c, sig, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GUARD: tl.constexpr
):
    a_desc = tl.make_tensor_descriptor(a, shape=[BM, K], strides=[K, 1], block_shape=[BM, BK])
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K // BK):
        token = shl.signal_wait_until(sig + k, shl.CMP_GE, 1)
        tiles = a_desc
        if GUARD:
            tiles = shl.consume_token(a_desc, token)
        acc += tl.dot(tiles.load([0, k * BK]), tl.load(b + (k * BK + rk)[:, None] * BN + rn[None, :]))
    tl.store(c + tl.arange(0, BM)[:, None] * BN + rn[None, :], acc)


# A descriptor made by consume_token, passed to another @triton.jit function and carried through a loop:
# its loads still take their offsets through the token (test_device_compile).
@triton.jit
def _load_tile(tiles, k):
    return tiles.load([0, k])


@triton.jit
def descriptor_through_calls_and_loops(a, sig, c, K: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a, shape=[64, K], strides=[K, 1], block_shape=[64, 32])
    tiles = shl.consume_token(a_desc, shl.signal_wait_until(sig, shl.CMP_GE, 1))
    acc = tl.zeros((64, 32), dtype=tl.float32)
    for k in range(0, K // 32):
        acc += _load_tile(tiles, k * 32).to(tl.float32)
        tiles = shl.consume_token(a_desc, shl.signal_wait_until(sig + k + 1, shl.CMP_GE, 1))
    tl.store(c + tl.arange(0, 64)[:, None] * 32 + tl.arange(0, 32)[None, :], acc)


GEMM_SIGNATURE = {
    "a": "*fp16",
    "b": "*fp16",
    "c": "*fp32",
    "sig": "*u64",
    "K": "constexpr",
    "BM": "constexpr",
    "BN": "constexpr",
    "BK": "constexpr",
    "GUARD": "constexpr",
}
GEMM_CONSTANTS = {"K": 256, "BM": 64, "BN": 64, "BK": 32}


# rocSHMEM's bitcode lacks team functions and team collectives: for HIP targets unishmem.language
# writes them in Triton (NOTE [triton rows]), so every group compiles for gfx942/gfx950 too.
HIP_GROUPS = GROUPS + V2_GROUPS


# The Triton reduction's every op, on 16-bit floats (combined in float32) and doubles, for HIP targets.
@triton.jit
def team_reduce_ops(hbuf, dbuf, team):
    shl.reduce(team, hbuf, hbuf + 64, 64, "sum")
    shl.reduce(team, hbuf, hbuf + 64, 64, "prod")
    shl.reduce(team, dbuf, dbuf + 64, 64, "min")
    shl.reduce(team, dbuf, dbuf + 64, 64, "max")


TEAM_REDUCE_SIGNATURE = {"hbuf": "*bf16", "dbuf": "*fp64", "team": "i64"}


@triton.jit
def half_p(hbuf, pe):
    shl.p(hbuf, 1.0, pe)


# Calls one rocSHMEM function that touches no team (NOTE [rocSHMEM module globals]).
@triton.jit
def pe_only(buf):
    tl.store(buf, shl.my_pe())


# A literal team: NVSHMEM's world team is 0, but on rocSHMEM a team is the address of its descriptor.
@triton.jit
def constant_team(buf, src, sig, ivar, team, N: tl.constexpr):
    shl.reduce(0, buf, src, N, "sum")


# The grid barrier counting on a uint64 signal word instead of an int64 one.
@triton.jit
def grid_barrier_on_a_signal(buf, src, sig, ivar, team, N: tl.constexpr):
    shl.barrier_all_grid(sig)
