"""Kernels that together call every function of unishmem.language, for the compile-and-link tests.
They are split into groups because one kernel holding every NVSHMEM call takes ptxas minutes."""
import triton
import triton.language as tl

import unishmem.language as shl

SIGNATURE = {"buf": "*i32", "src": "*i32", "sig": "*u64", "ivar": "*i64", "team": "i32", "N": "constexpr"}


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


# rocSHMEM's bitcode lacks team functions and broadcast/fcollect/alltoall: its groups leave them out.
@triton.jit
def hip_queries(buf, src, sig, ivar, team, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    tl.store(shl.remote_ptr(buf, peer), peer)


@triton.jit
def hip_synchronization(buf, src, sig, ivar, team, N: tl.constexpr):
    shl.fence()
    shl.quiet()
    shl.barrier_all()
    shl.sync_all()
    shl.barrier_all_block()
    shl.sync_all_block()


# rocSHMEM has no C-linkage device reduction: compiling this for a HIP target must fail with the reason.
# The team comes from the kernel's argument (team.handle), never a literal: rocSHMEM's team is a pointer.
@triton.jit
def hip_reduce(buf, src, sig, ivar, team, N: tl.constexpr):
    shl.reduce(team, buf, src, N, "sum")


HIP_GROUPS = [hip_queries, thread_rma, block_rma, warp_rma, signals, atomics, hip_synchronization]


@triton.jit
def half_p(hbuf, pe):
    shl.p(hbuf, 1.0, pe)
