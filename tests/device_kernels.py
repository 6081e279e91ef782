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


GROUPS = [queries, thread_rma, block_rma, warp_rma, signals, atomics, synchronization, collectives]


# rocSHMEM's bitcode lacks team functions and team collectives: for HIP targets unishmem.language
# writes them in Triton (NOTE [triton rows]), so every group compiles for gfx942/gfx950 too.
HIP_GROUPS = GROUPS


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
