"""Every unishmem.language function under TRITON_INTERPRET=1 on the host backend, at 2 and 4 PEs."""

import os

import pytest
import torch
import triton
import triton.language as tl
from spmd import launch, spmd

import unishmem
import unishmem.language as shl
from unishmem import DeadlockError, NotSymmetricError, SymmetryError, _active
from unishmem.language import _triton_impl as timpl

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "3"}
SIZES = (2, 4)


@unishmem.jit
def rma_ring(dst, src, VARIANT: tl.constexpr, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    if VARIANT == 0:
        shl.putmem(dst, src, N * 4, peer)
    elif VARIANT == 1:
        shl.putmem_nbi(dst, src, N * 4, peer)
        shl.quiet()
    elif VARIANT == 2:
        shl.putmem_block(dst, src, N * 4, peer)
    elif VARIANT == 3:
        shl.putmem_nbi_block(dst, src, N * 4, peer)
        shl.quiet()
    elif VARIANT == 4:
        shl.putmem_warp(dst, src, N * 4, peer)
    elif VARIANT == 5:
        shl.put(dst, src, N, peer)
    elif VARIANT == 6:
        shl.put_nbi(dst, src, N, peer)
        shl.quiet()
    elif VARIANT == 7:
        shl.put_block(dst, src, N, peer)
    elif VARIANT == 8:
        shl.put_nbi_block(dst, src, N, peer)
        shl.quiet()
    elif VARIANT == 9:
        shl.putmem_nbi_warp(dst, src, N * 4, peer)
        shl.quiet()
    shl.barrier_all()


@unishmem.jit
def get_ring(dst, src, VARIANT: tl.constexpr, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    if VARIANT == 0:
        shl.getmem(dst, src, N * 4, peer)
    elif VARIANT == 1:
        shl.getmem_nbi(dst, src, N * 4, peer)
        shl.quiet()
    elif VARIANT == 2:
        shl.getmem_block(dst, src, N * 4, peer)
    elif VARIANT == 3:
        shl.getmem_warp(dst, src, N * 4, peer)
    elif VARIANT == 4:
        shl.get(dst, src, N, peer)
    elif VARIANT == 5:
        shl.get_nbi_block(dst, src, N, peer)
        shl.quiet()
    elif VARIANT == 6:
        shl.getmem_nbi_block(dst, src, N * 4, peer)
        shl.quiet()
    elif VARIANT == 7:
        shl.get_block(dst, src, N, peer)
    elif VARIANT == 8:
        shl.get_nbi(dst, src, N, peer)
        shl.quiet()
    elif VARIANT == 9:
        shl.getmem_nbi_warp(dst, src, N * 4, peer)
        shl.quiet()


def ring(rt):
    return (rt.my_pe + 1) % rt.n_pes, (rt.my_pe - 1) % rt.n_pes


@spmd(sizes=SIZES)
def test_put_and_get_ring_every_variant(rt):
    right, left = ring(rt)
    n = 64
    src = rt.empty(n, dtype=torch.int32)
    dst = rt.zeros(n, dtype=torch.int32)
    for variant in range(10):
        src.copy_(torch.arange(n, dtype=torch.int32) + 1000 * rt.my_pe + variant)
        dst.zero_()
        rt.barrier_all()
        rma_ring[(1,)](dst, src, VARIANT=variant, N=n)
        assert torch.equal(dst, torch.arange(n, dtype=torch.int32) + 1000 * left + variant), variant
        rt.barrier_all()
    for variant in range(10):
        out = torch.zeros(n, dtype=torch.int32)  # a get's dest may be any local memory
        get_ring[(1,)](out, src, VARIANT=variant, N=n)
        assert torch.equal(out, torch.arange(n, dtype=torch.int32) + 1000 * right + 9), variant
    rt.barrier_all()
    rt.free(src)
    rt.free(dst)


@unishmem.jit
def p_and_g(buf, out, counter):
    me = shl.my_pe()
    peer = (me + 1) % shl.n_pes()
    pid = tl.program_id(0)
    shl.p(buf + pid, me * 10 + pid, peer)
    shl.quiet()
    shl.barrier_all_grid(counter)
    tl.store(out + pid, shl.g(buf + pid, peer))


@spmd(sizes=SIZES)
def test_p_and_g_once_per_program(rt):
    right, left = ring(rt)
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.uint8):
        buf = rt.zeros(4, dtype=dtype)
        out = torch.zeros(4, dtype=dtype)
        counter = rt.zeros(1, dtype=torch.int64)
        p_and_g[(4,)](buf, out, counter)
        assert buf.tolist() == [left * 10 + i for i in range(4)], (dtype, buf)
        assert out.tolist() == [rt.my_pe * 10 + i for i in range(4)], (dtype, out)  # right holds mine
        rt.barrier_all()
        rt.free(buf)
        rt.free(counter)


@unishmem.jit
def signal_counts(dst, src, sig, OP: tl.constexpr, SCOPE: tl.constexpr, N: tl.constexpr):
    n = shl.n_pes()
    for pe in range(n):
        if SCOPE == 0:
            shl.putmem_signal(dst, src, N * 4, sig, 1, OP, pe)
        elif SCOPE == 1:
            shl.putmem_signal_block(dst, src, N * 4, sig, 1, OP, pe)
        elif SCOPE == 2:
            shl.putmem_signal_warp(dst, src, N * 4, sig, 1, OP, pe)
        elif SCOPE == 3:
            shl.putmem_signal_nbi(dst, src, N * 4, sig, 1, OP, pe)
        elif SCOPE == 4:
            shl.putmem_signal_nbi_warp(dst, src, N * 4, sig, 1, OP, pe)
        else:
            shl.putmem_signal_nbi_block(dst, src, N * 4, sig, 1, OP, pe)


@unishmem.jit
def wait_signal(sig, out, CMP: tl.constexpr, VALUE: tl.constexpr):
    tl.store(out, shl.signal_wait_until(sig, CMP, VALUE))
    tl.store(out + 1, shl.signal_fetch(sig))


@spmd(sizes=SIZES)
def test_putmem_signal_add_counts_exactly_and_set_sets(rt):
    programs = 3
    src = rt.full(8, rt.my_pe, dtype=torch.int32)
    dst = rt.zeros(8, dtype=torch.int32)
    out = torch.zeros(2, dtype=torch.uint64)
    for scope in range(6):
        sig = rt.signals(1)
        signal_counts[(programs,)](dst, src, sig, OP=shl.SIGNAL_ADD, SCOPE=scope, N=8)
        expected = programs * rt.n_pes  # once per program and peer, whatever the scope
        wait_signal[(1,)](sig, out, CMP=shl.CMP_GE, VALUE=expected)
        assert out.tolist() == [expected, expected], (scope, out)
        rt.barrier_all()
        assert sig.item() == expected
        rt.free(sig)
    sig = rt.signals(1)
    signal_counts[(programs,)](dst, src, sig, OP=shl.SIGNAL_SET, SCOPE=1, N=8)
    wait_signal[(1,)](sig, out, CMP=shl.CMP_EQ, VALUE=1)
    assert out.tolist() == [1, 1]
    rt.barrier_all()
    for t in (src, dst, sig):
        rt.free(t)


@unishmem.jit
def signal_op_ring(sig, out, VALUE: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    shl.signal_op(sig, VALUE, shl.SIGNAL_SET, peer)
    shl.signal_op(sig + 1, VALUE, shl.SIGNAL_ADD, peer)
    tl.store(out, shl.signal_wait_until(sig, shl.CMP_EQ, VALUE))
    tl.store(out + 1, shl.signal_wait_until(sig + 1, shl.CMP_GE, VALUE))


@unishmem.jit
def every_comparison(sig, ivar, out):
    tl.store(out + 0, shl.signal_wait_until(sig, shl.CMP_EQ, 5))
    tl.store(out + 1, shl.signal_wait_until(sig, shl.CMP_NE, 4))
    tl.store(out + 2, shl.signal_wait_until(sig, shl.CMP_GT, 4))
    tl.store(out + 3, shl.signal_wait_until(sig, shl.CMP_GE, 5))
    tl.store(out + 4, shl.signal_wait_until(sig, shl.CMP_LT, 6))
    tl.store(out + 5, shl.signal_wait_until(sig, shl.CMP_LE, 5))
    shl.wait_until(ivar, shl.CMP_EQ, -7)
    shl.wait_until(ivar, shl.CMP_LT, 0)
    shl.wait_until(ivar, shl.CMP_LE, -7)
    shl.wait_until(ivar, shl.CMP_NE, 0)
    shl.wait_until(ivar, shl.CMP_GT, -8)
    shl.wait_until(ivar, shl.CMP_GE, -7)
    tl.store(out + 6, shl.test(ivar, shl.CMP_EQ, -7) + 10 * shl.test(ivar, shl.CMP_GT, 0))


@spmd(sizes=SIZES)
def test_signal_op_and_waits_with_every_comparison(rt):
    sig = rt.signals(2)
    out = torch.zeros(2, dtype=torch.uint64)
    signal_op_ring[(2,)](sig, out, VALUE=5)
    assert out[0].item() == 5 and out[1].item() in (5, 10)
    rt.barrier_all()
    assert sig.tolist() == [5, 10]  # SET once, ADD once per program
    rt.barrier_all()
    for dtype in (torch.int32, torch.int64):
        ivar = rt.zeros(1, dtype=dtype)
        rt.atomic_set(ivar, -7, (rt.my_pe + 1) % rt.n_pes)
        results = torch.zeros(7, dtype=torch.int64)
        every_comparison[(1,)](sig, ivar, results)
        assert results.tolist() == [5] * 6 + [1], results
        rt.barrier_all()
        rt.free(ivar)
    rt.free(sig)


@unishmem.jit
def fenced_flag(data, flag, ROUND: tl.constexpr, N: tl.constexpr):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    offs = tl.arange(0, N)
    tl.store(data + offs, tl.full((N,), ROUND, tl.int32))  # what we will send
    shl.putmem_nbi_block(data, data, N * 4, peer)  # the peer's data...
    shl.fence()  # ...is ordered before...
    shl.p(flag, ROUND, peer)  # ...its flag
    shl.wait_until(flag, shl.CMP_EQ, ROUND)
    shl.quiet()


@spmd(sizes=SIZES)
def test_fence_orders_data_before_flag(rt):
    n = 256
    data = rt.zeros(n, dtype=torch.int32)
    flag = rt.zeros(1, dtype=torch.int64)
    for round_ in range(1, 4):
        fenced_flag[(1,)](data, flag, ROUND=round_, N=n)
        assert (data == round_).all()
        rt.barrier_all()
    rt.free(data)
    rt.free(flag)


@unishmem.jit
def sync_kernel(counter, out, team, WHICH: tl.constexpr):
    # every PE adds to every PE's counter, synchronises, then reads its own
    n = shl.n_pes()
    for pe in range(n):
        shl.atomic_add(counter, 1, pe)
    if WHICH == 0:
        shl.barrier_all()
    elif WHICH == 1:
        shl.sync_all()
    elif WHICH == 2:
        shl.barrier_all_block()
    elif WHICH == 3:
        shl.sync_all_block()
    elif WHICH == 4:
        shl.barrier(team)
    else:
        shl.sync(team)
    tl.store(out, tl.load(counter))


@spmd(sizes=SIZES)
def test_barriers_and_syncs(rt):
    for which in range(6):
        counter = rt.zeros(1, dtype=torch.int64)
        out = torch.zeros(1, dtype=torch.int64)
        sync_kernel[(1,)](counter, out, rt.team_world.handle, WHICH=which)
        assert out.item() == rt.n_pes, which
        rt.barrier_all()
        rt.free(counter)


@unishmem.jit
def team_queries(out, team, world):
    tl.store(out + 0, shl.my_pe())
    tl.store(out + 1, shl.n_pes())
    tl.store(out + 2, shl.team_my_pe(team))
    tl.store(out + 3, shl.team_n_pes(team))
    tl.store(out + 4, shl.team_translate_pe(team, 0, world))
    tl.store(out + 5, shl.team_translate_pe(world, 0, team))


@spmd(sizes=SIZES)
def test_team_queries_and_translation(rt):
    odd = rt.team_world.split_strided(1, 2, rt.n_pes // 2)
    even = rt.team_world.split_strided(0, 2, rt.n_pes // 2)
    team = odd or even
    out = torch.zeros(6, dtype=torch.int32)
    team_queries[(1,)](out, team.handle, rt.team_world.handle)
    assert out.tolist() == [
        rt.my_pe,
        rt.n_pes,
        rt.my_pe // 2,
        rt.n_pes // 2,
        rt.my_pe % 2,
        0 if rt.my_pe % 2 == 0 else -1,
    ]
    team.destroy()


# ---- the Triton implementations (NOTE [triton rows]) that rocSHMEM targets compile --------------
# Under the interpreter the public functions run the host backend; these tests call the Triton
# implementations themselves, with a team descriptor (NOTE [team descriptor]) built here in
# symmetric memory from team.device_args(), and check them against torch.


def team_descriptor(rt, team, scratch_bytes):
    """Collective over the world: a descriptor for `team` (None on non-members: left zero)."""
    desc = rt.zeros((timpl.HEADER_BYTES + scratch_bytes) // 8, dtype=torch.int64)
    if team is not None:
        desc[:4] = torch.tensor(timpl.descriptor_header(*team.device_args(), scratch_bytes))
    rt.barrier_all()
    return desc


def member_teams(rt):
    """(name, team or None) for a world, a strided split [1::2] / [0::2], and the first three PEs."""
    odd = rt.team_world.split_strided(1, 2, rt.n_pes // 2)
    even = rt.team_world.split_strided(0, 2, rt.n_pes // 2)
    teams = [("world", rt.team_world), ("odd/even", odd or even)]
    if rt.n_pes >= 3:
        teams.append(("first3", rt.team_world.split_strided(0, 1, 3)))
    return teams


def destroy_teams(rt, teams):
    for _, team in teams:
        if team is not None and team is not rt.team_world:
            team.destroy()


@unishmem.jit
def triton_queries(out, team, world, N_PES):
    tl.store(out + 0, timpl.team_my_pe_impl(team))
    tl.store(out + 1, timpl.team_n_pes_impl(team))
    for i in range(0, N_PES):
        tl.store(out + 2 + i, timpl.team_translate_pe_impl(team, i, world))  # -1 past the team's end
        tl.store(out + 2 + N_PES + i, timpl.team_translate_pe_impl(world, i, team))
    tl.store(out + 2 + 2 * N_PES, timpl.team_translate_pe_impl(team, -1, world))


@spmd(sizes=SIZES)
def test_triton_team_queries(rt):
    n = rt.n_pes
    world = team_descriptor(rt, rt.team_world, 0)
    teams = member_teams(rt)
    for name, team in teams:
        desc = team_descriptor(rt, team, 0)
        out = torch.full((3 + 2 * n,), -7, dtype=torch.int32)
        if team is not None:
            triton_queries[(1,)](out, desc.data_ptr(), world.data_ptr(), n)
            expect = [team.my_pe, team.n_pes]
            expect += [team.translate_pe(i, rt.team_world) if i < team.n_pes else -1 for i in range(n)]
            expect += [rt.team_world.translate_pe(i, team) for i in range(n)]
            assert out.tolist() == expect + [-1], (name, out.tolist(), expect)
        rt.barrier_all()
        rt.free(desc)
    rt.free(world)
    destroy_teams(rt, teams)


@unishmem.jit
def triton_barrier_rounds(counters, seen, team, world_pes, size, ROUNDS: tl.constexpr, SYNC: tl.constexpr):
    # round k: add 1 to counter k of every member, pass the barrier, read my counter k, which must
    # then hold exactly `size` (nobody adds to it after the barrier)
    for k in range(ROUNDS):
        for j in range(0, size):
            shl.atomic_add(counters + k, 1, tl.load(world_pes + j))
        if SYNC:
            timpl.sync_impl(team)
        else:
            timpl.barrier_impl(team)
        tl.store(seen + k, tl.load(counters + k))


@spmd(sizes=SIZES)
def test_triton_barrier_and_sync_repeated(rt):
    rounds = 6
    teams = member_teams(rt)
    for name, team in teams:
        desc = team_descriptor(rt, team, 0)
        counters = rt.zeros(2 * rounds, dtype=torch.int64)
        if team is not None:
            pes = torch.tensor([team.translate_pe(i, rt.team_world) for i in range(team.n_pes)], dtype=torch.int32)
            for sync in (0, 1):  # the same descriptor: its epoch goes on from the first kernel's
                seen = torch.zeros(rounds, dtype=torch.int64)
                triton_barrier_rounds[(1,)](
                    counters[sync * rounds :], seen, desc.data_ptr(), pes, team.n_pes, ROUNDS=rounds, SYNC=sync
                )
                assert seen.tolist() == [team.n_pes] * rounds, (name, sync, seen.tolist())
            # 2 kernels of `rounds` barriers: this PE's epoch counts them
            assert desc[timpl.EPOCH.value].item() == 2 * rounds
        rt.barrier_all()
        rt.free(counters)
        rt.free(desc)
    destroy_teams(rt, teams)


@unishmem.jit
def triton_collectives(
    team, bcast, src, gathered, exchanged, sums, mins, maxs, prods, inplace, root, N, IN_PLACE_OP: tl.constexpr
):
    timpl.broadcast_impl(team, bcast, src, N, root)
    timpl.fcollect_impl(team, gathered, src, N)
    timpl.alltoall_impl(team, exchanged, gathered, N)
    timpl.reduce_impl(team, sums, src, N, "sum")
    timpl.reduce_impl(team, mins, src, N, "min")
    timpl.reduce_impl(team, maxs, src, N, "max")
    timpl.reduce_impl(team, prods, src, N, "prod")
    timpl.reduce_impl(team, inplace, inplace, N, IN_PLACE_OP)  # dest is source


@spmd(sizes=SIZES)
def test_triton_collectives_on_teams_against_torch(rt):
    n = 10
    # a small scratch: the reduction goes in chunks of 1 to 5 elements, never a multiple of n
    scratch = 40
    teams = member_teams(rt)
    for name, team in teams:
        desc = team_descriptor(rt, team, scratch)
        size = team.n_pes if team is not None else 1
        for call, dtype in enumerate((torch.float32, torch.int64, torch.bfloat16)):
            part = lambda i: (torch.arange(n) % 3 + 1 + i + call).double()  # noqa: E731  (member i's source)
            src = rt.zeros(n, dtype=dtype)
            # the same sizes on every PE (allocation is collective over the world); a team uses a prefix
            bufs = [rt.zeros(k * n, dtype=dtype) for k in (1, rt.n_pes, rt.n_pes, 1, 1, 1, 1, 1)]
            bcast, gathered, exchanged, sums, mins, maxs, prods, inplace = bufs
            gathered, exchanged = gathered[: size * n], exchanged[: size * n]
            if team is not None:
                me = team.my_pe
                src.copy_(part(me).to(dtype))
                inplace.copy_(part(me).to(dtype))
                root = (size - 1 + call) % size
                triton_collectives[(1,)](
                    desc.data_ptr(),
                    bcast,
                    src,
                    gathered,
                    exchanged,
                    sums,
                    mins,
                    maxs,
                    prods,
                    inplace,
                    root,
                    n,
                    IN_PLACE_OP="sum" if call != 1 else "max",
                )
                parts = torch.stack([part(i) for i in range(size)])
                assert torch.equal(bcast, parts[root].to(dtype)), (name, dtype)
                assert torch.equal(gathered, parts.reshape(-1).to(dtype)), (name, dtype)
                # block j of my gathered (member j's source) goes to member j: I receive mine from all
                assert torch.equal(exchanged, parts[me].repeat(size).to(dtype)), (name, dtype)
                for out, ref in (
                    (sums, parts.sum(0)),
                    (mins, parts.min(0).values),
                    (maxs, parts.max(0).values),
                    (prods, parts.prod(0)),
                ):
                    assert torch.equal(out, ref.to(dtype)), (name, dtype, out, ref)
                assert torch.equal(inplace, (parts.max(0).values if call == 1 else parts.sum(0)).to(dtype))
            rt.barrier_all()
            for t in [src] + bufs:
                rt.free(t)
        rt.free(desc)
    destroy_teams(rt, teams)


@unishmem.jit
def remote_store(buf):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    offs = tl.arange(0, 16)
    tl.store(shl.remote_ptr(buf, peer) + offs, shl.my_pe() * 100 + offs)


@spmd(sizes=SIZES)
def test_remote_ptr_loads_and_stores(rt):
    right, left = ring(rt)
    buf = rt.zeros(16, dtype=torch.int32)
    remote_store[(1,)](buf)
    rt.barrier_all()
    assert buf.tolist() == [left * 100 + i for i in range(16)]
    rt.free(buf)


@unishmem.jit
def contended_atomics(counter, tickets):
    pid = tl.program_id(0)
    tl.store(tickets + pid, shl.atomic_fetch_add(counter, 1, 0))
    shl.atomic_inc(counter + 1, 0)
    shl.atomic_add(counter + 2, 3, 0)
    tl.store(tickets + tl.num_programs(0) + pid, shl.atomic_fetch_inc(counter + 3, 0))


@unishmem.jit
def atomic_ops(x, out):
    peer = (shl.my_pe() + 1) % shl.n_pes()
    shl.atomic_set(x, 5, peer)
    tl.store(out + 0, shl.atomic_fetch(x, peer))
    tl.store(out + 1, shl.atomic_swap(x, 9, peer))
    tl.store(out + 2, shl.atomic_compare_swap(x, 1, 2, peer))  # no match
    tl.store(out + 3, shl.atomic_compare_swap(x, 9, 4, peer))
    tl.store(out + 4, shl.atomic_fetch(x, peer))


@spmd(sizes=SIZES)
def test_atomics_exact_under_contention(rt):
    programs = 6
    counter = rt.zeros(4, dtype=torch.int64)
    tickets = torch.full((2 * programs,), -1, dtype=torch.int64)
    contended_atomics[(programs,)](counter, tickets)
    rt.barrier_all()
    total = programs * rt.n_pes
    if rt.my_pe == 0:
        assert counter.tolist() == [total, total, 3 * total, total]
    everyone = rt.zeros((rt.n_pes, 2 * programs), dtype=torch.int64)
    mine = rt.empty(2 * programs, dtype=torch.int64)
    mine.copy_(tickets)
    rt.fcollect(everyone, mine)
    for half in (everyone[:, :programs], everyone[:, programs:]):
        assert sorted(half.flatten().tolist()) == list(range(total))  # every ticket drawn exactly once
    for dtype in (torch.int32, torch.int64, torch.uint64):
        x = rt.zeros(1, dtype=dtype)
        out = torch.zeros(5, dtype=dtype)
        atomic_ops[(1,)](x, out)
        assert out.tolist() == [5, 5, 9, 9, 4], (dtype, out)
        rt.barrier_all()
        rt.free(x)
    for t in (counter, everyone, mine):
        rt.free(t)


@unishmem.jit
def collectives(dst, src, gathered, exchanged, reduced, team, root, N: tl.constexpr, OP: tl.constexpr):
    shl.broadcast(team, dst, src, N, root)
    shl.fcollect(team, gathered, src, N)
    shl.alltoall(team, exchanged, gathered, N)
    shl.reduce(team, reduced, src, N, OP)


@spmd(sizes=(2,))
def test_peer_atomics_kernel_every_op_and_exact_under_contention(rt):
    """NOTE [peer atomics]: the one-program kernel through which a GPU runtime does host atomics on a
    peer it reaches by load/store (NVSHMEM's own fail there), run here on the host backend's mappings:
    the same checks as test_host_atomics.py makes of the native atomics."""
    from test_host_atomics import check_every_atomic_op, check_fetch_add_under_contention

    from unishmem import _peer_atomics

    core = _active.core()
    core.atomic = _peer_atomics.make(core.native, core.heap_of, rt.device)  # what a GPU runtime's core holds
    check_every_atomic_op(rt)
    check_fetch_add_under_contention(rt, 200)


@spmd(sizes=SIZES)
def test_collectives_over_dtypes_and_ops(rt):
    n, size = 8, rt.n_pes
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.int8, torch.float64):
        for op in ("sum", "min", "max", "prod"):
            src = rt.empty(n, dtype=dtype)
            src.copy_((torch.arange(n) % 3 + 1 + rt.my_pe).to(dtype))
            dst, reduced = rt.zeros(n, dtype=dtype), rt.zeros(n, dtype=dtype)
            gathered, exchanged = rt.zeros(n * size, dtype=dtype), rt.zeros(n * size, dtype=dtype)
            root = size - 1
            collectives[(1,)](dst, src, gathered, exchanged, reduced, rt.team_world.handle, root, N=n, OP=op)
            parts = [(torch.arange(n) % 3 + 1 + pe).double() for pe in range(size)]
            assert torch.equal(dst, parts[root].to(dtype))
            assert torch.equal(gathered, torch.cat(parts).to(dtype))
            # alltoall of the gathered blocks: block j of mine goes to PE j, so I receive my own block from all
            assert torch.equal(exchanged, torch.cat([parts[rt.my_pe]] * size).to(dtype))
            stacked = torch.stack(parts)
            ref = {
                "sum": stacked.sum(0),
                "prod": stacked.prod(0),
                "min": stacked.min(0).values,
                "max": stacked.max(0).values,
            }[op]
            assert torch.equal(reduced, ref.to(dtype)), (dtype, op, reduced)
            for t in (src, dst, reduced, gathered, exchanged):
                rt.free(t)


def exchange_kernel(data, src, sig, out, PRODUCERS_FIRST: tl.constexpr, P: tl.constexpr, N: tl.constexpr):
    # P producers each send a block to the right PE; P consumers each wait for theirs from the left.
    pid = tl.program_id(0)
    produces = pid < P if PRODUCERS_FIRST else pid >= P
    j = pid % P
    if produces:
        shl.putmem_signal(data + j * N, src + j * N, N * 4, sig + j, 1, shl.SIGNAL_SET, (shl.my_pe() + 1) % shl.n_pes())
    else:
        shl.signal_wait_until(sig + j, shl.CMP_EQ, 1)
        x = tl.load(data + j * N + tl.arange(0, N))
        tl.store(out + j * N + tl.arange(0, N), x * 2 + 1)


exchange = unishmem.jit(exchange_kernel)
exchange_one_resident = unishmem.jit(resident=1)(exchange_kernel)


@spmd(sizes=SIZES)
def test_programs_wait_on_each_other_in_both_orders(rt):
    p, n = 3, 16
    left = (rt.my_pe - 1) % rt.n_pes
    for producers_first in (True, False):
        src = rt.empty((p, n), dtype=torch.int32)
        src.copy_(rt.my_pe * 1000 + torch.arange(p * n, dtype=torch.int32).reshape(p, n))
        data, sig = rt.zeros((p, n), dtype=torch.int32), rt.signals(p)
        out = torch.zeros((p, n), dtype=torch.int32)
        exchange[(2 * p,)](data, src, sig, out, PRODUCERS_FIRST=producers_first, P=p, N=n)
        expected = left * 1000 + torch.arange(p * n, dtype=torch.int32).reshape(p, n)
        assert torch.equal(data, expected), producers_first
        assert torch.equal(out, expected * 2 + 1), producers_first
        assert sig.tolist() == [1] * p
        rt.barrier_all()
        for t in (src, data, sig):
            rt.free(t)


@spmd(sizes=SIZES)
def test_one_resident_program_shows_a_residency_bug(rt):
    p, n = 2, 8
    src, data, sig = rt.zeros((p, n), dtype=torch.int32), rt.zeros((p, n), dtype=torch.int32), rt.signals(p)
    out = torch.zeros((p, n), dtype=torch.int32)
    # Producers first: program 0 never waits, so one program at a time is enough.
    exchange_one_resident[(2 * p,)](data, src, sig, out, PRODUCERS_FIRST=True, P=p, N=n)
    rt.barrier_all()
    sig.zero_()
    rt.barrier_all()
    # Producers last: every PE's program 0 waits for a producer that cannot start before it ends.
    with pytest.raises(
        DeadlockError,
        match=r"PE 0 waits for signal at heap offset \d+ to become == 1 \(it is 0\) "
        r"\[program \(0, 0, 0\), kernel exchange_kernel at test_device_interpreter.py:"
        r"\d+\](.|\n)*at most 1 of the 4 programs of a launch are resident",
    ):
        exchange_one_resident[(2 * p,)](data, src, sig, out, PRODUCERS_FIRST=False, P=p, N=n)
    rt.barrier_all()
    for t in (src, data, sig):
        rt.free(t)


@spmd(sizes=(2,))
def test_resident_setting_is_checked(rt):
    import os

    sig, out = rt.signals(1), torch.zeros((1, 4), dtype=torch.int32)
    try:
        for bad in ("0", "many", "100000"):
            os.environ["UNISHMEM_INTERPRET_RESIDENT"] = bad
            with pytest.raises(
                ValueError,
                match=rf"UNISHMEM_INTERPRET_RESIDENT='{bad}' is not a whole number of "
                r"programs from 1 to \d+",
            ):
                exchange[(2,)](sig, sig, sig, out, PRODUCERS_FIRST=True, P=1, N=4)
    finally:
        del os.environ["UNISHMEM_INTERPRET_RESIDENT"]
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=rf"resident={bad!r} is not a whole number of programs"):
            unishmem.jit(resident=bad)(exchange_kernel)
    rt.barrier_all()
    rt.free(sig)


@unishmem.jit
def one_program_fails(sig, ivar, pe):
    pid = tl.program_id(0)
    if pid == 0:
        shl.signal_wait_until(sig, shl.CMP_EQ, 1)
    elif pid == 1:
        shl.wait_until(ivar, shl.CMP_EQ, 1)
    elif pid == 2:
        while shl.test(ivar, shl.CMP_EQ, 1) == 0:  # a program spinning in Python, not in a C++ wait
            pass
    else:
        shl.p(ivar, 1, pe)  # pe out of range: the launch's error


@spmd(sizes=SIZES)
def test_a_failing_program_aborts_its_launch(rt):
    import time

    sig, ivar = rt.signals(1), rt.zeros(1, dtype=torch.int64)
    start = time.monotonic()
    with pytest.raises(ValueError, match=rf"pe={rt.n_pes + 5} is out of range"):
        one_program_fails[(4,)](sig, ivar, rt.n_pes + 5)
    assert time.monotonic() - start < 3, "the siblings' waits ended only by a timeout"  # UNISHMEM_DEADLOCK_TIMEOUT
    assert sig.item() == 0 and ivar.item() == 0
    rt.barrier_all()
    rt.free(sig)
    rt.free(ivar)


@triton.jit
def put_to(buf, pe):
    shl.p(buf, 1, pe)


@triton.jit
def helper_of_a_helper(buf, pe):
    put_to(buf, pe)


@unishmem.jit
def calls_a_helper(buf, pe):
    helper_of_a_helper(buf, pe)


@spmd(sizes=(2,))
def test_errors_in_nested_helpers_arrive_unwrapped(rt):
    buf = rt.zeros(1, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"pe=9 is out of range") as caught:
        calls_a_helper[(2,)](buf, 9)
    assert caught.type is ValueError and caught.value.__cause__ is None
    rt.barrier_all()
    rt.free(buf)


@spmd(sizes=SIZES)
def test_device_errors_name_the_value(rt):
    local = torch.zeros(8, dtype=torch.int32)
    sym = rt.zeros(8, dtype=torch.int32)
    with pytest.raises(NotSymmetricError, match=r"dest .* is not in the symmetric heap"):
        rma_ring[(1,)](local, sym, VARIANT=0, N=8)
    with pytest.raises(ValueError, match=rf"pe={rt.n_pes + 3} is out of range"):
        bad_pe[(1,)](sym, rt.n_pes + 3)
    # A bad root on one PE: its own error there, and the others are not left waiting for it.
    last = rt.n_pes - 1
    if rt.my_pe == last:
        with pytest.raises(ValueError, match=rf"broadcast: root=99 is out of range for a team of {rt.n_pes} PEs"):
            bad_root[(1,)](sym, rt.team_world.handle, 99)
    else:
        with pytest.raises(SymmetryError, match=rf"PE {last} rejected its arguments"):
            bad_root[(1,)](sym, rt.team_world.handle, 0)
    raw = rt.zeros(16, dtype=torch.uint8)
    with pytest.raises(
        ValueError, match=rf"sig at heap offset {raw.data_ptr() - rt.heap_base + 4} is not 8-byte aligned"
    ):
        misaligned_signal[(1,)](raw)
    rt.barrier_all()
    rt.free(raw)
    rt.free(sym)


@unishmem.jit
def bad_pe(buf, pe):
    shl.p(buf, 1, pe)


@unishmem.jit
def bad_root(buf, team, root):
    shl.broadcast(team, buf + 4, buf, 4, root)


@unishmem.jit
def misaligned_signal(buf):
    shl.signal_op((buf + 4).to(tl.pointer_type(tl.uint64)), 1, shl.SIGNAL_SET, shl.my_pe())


def test_every_device_function_is_exercised_here():
    import re

    files = ("interpreter", "waits_and_remote_access", "warp_and_team_sync")
    source = "".join(open(__file__.replace("interpreter", name)).read() for name in files)
    missing = [f for f in shl.FUNCTIONS if not re.search(rf"shl\.{f}\(", source)]
    assert not missing, f"device functions no interpreter test calls: {missing}"


IMPORT_ORDER = os.path.join(os.path.dirname(__file__), "programs", "import_order.py")


@pytest.mark.parametrize("when", ["late", "unset"])
def test_kernels_run_on_the_host_backend_whatever_imported_triton_first(when):
    """NOTE [import order]: TRITON_INTERPRET set after triton's import, or never set: a kernel with a
    plain triton.jit helper and tl.sum, all_reduce and ag_gemm (bfloat16 too) still run, right."""
    proc = launch([IMPORT_ORDER, when], 2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("OK")) == ["pe=0", "pe=1"]


def test_float32_to_bfloat16_rounds_as_torch_does():
    """NOTE [interpreter numerics]: the interpreter's float32 -> bfloat16 conversion, against torch's
    (round to nearest even) on random bits, ties, the largest finite values, infinities, subnormals and NaN."""
    import numpy as np

    from unishmem import _interpreter

    g = np.random.default_rng(0)
    bits = g.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    ties = (g.integers(0, 2**16, 1000, dtype=np.uint32) << 16) | 0x8000
    specials = np.array([0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0x00000001, 0x00008000, 0x80018000], dtype=np.uint32)
    values = np.concatenate([bits, ties, specials]).view(np.float32)
    got = _interpreter._float32_to_bfloat16_bits(values).view(np.int16)
    ref = torch.from_numpy(values.copy()).to(torch.bfloat16).view(torch.int16).numpy()
    nan = np.isnan(values)
    assert np.array_equal(got[~nan], ref[~nan])
    assert np.isnan(torch.from_numpy(got[nan].copy()).view(torch.bfloat16).float().numpy()).all()


@unishmem.jit
def two_device_calls(counter, order):
    # each program makes two device calls (my_pe, then an atomic that takes the next slot)
    slot = shl.atomic_fetch_add(counter, 1, shl.my_pe())
    tl.store(order + slot, tl.program_id(0))


@spmd(sizes=(2,))
def test_seeded_schedules_wait_before_every_device_call_and_correct_code_passes_under_each(rt):
    # NOTE [schedule fuzzing]: under UNISHMEM_RACE_SEED every interpreted device call of a program is
    # preceded by a wait drawn from the seed, the PE and the program: the same waits under the same seed,
    # others under another, none unset; the kernels' results do not change; a failure names its seed
    import threading

    import unishmem.kernels as K
    import unishmem.testing
    from unishmem import _config, _interpreter

    counter = rt.zeros(1, dtype=torch.int64)
    waits = []

    def recorded(seconds):
        waits.append((threading.current_thread().name, seconds))

    def waits_of_a_launch(seed):
        waits.clear()
        counter.zero_()
        order = torch.full((8,), -1, dtype=torch.int64)
        sleep, _interpreter.time.sleep = _interpreter.time.sleep, recorded
        try:
            with _config.setting("UNISHMEM_RACE_SEED", seed):
                two_device_calls[(8,)](counter, order)
        finally:
            _interpreter.time.sleep = sleep
        assert sorted(order.tolist()) == list(range(8)), order
        per_program: dict = {}
        for program, seconds in waits:
            per_program.setdefault(program, []).append(seconds)
        return per_program

    first = waits_of_a_launch("5")
    assert sorted(first) == [f"unishmem program {(i, 0, 0)}" for i in range(8)], first
    assert all(len(w) == 2 and set(w) <= set(_interpreter.SCHEDULE_WAITS) for w in first.values()), first
    assert waits_of_a_launch("5") == first  # the same seed: the same waits
    assert waits_of_a_launch("6") != first  # (the same 16 draws of 4 under another seed: 1 in 4**16)
    assert waits_of_a_launch(None) == {}  # unset: no waits
    x = torch.arange(4.0 * rt.n_pes) + rt.my_pe
    xs = torch.stack([torch.arange(4.0 * rt.n_pes) + pe for pe in range(rt.n_pes)])

    def collectives():
        for algorithm in ("one_shot", "two_shot"):
            assert torch.equal(K.all_reduce(x, algorithm=algorithm), xs.sum(0)), algorithm
        assert torch.equal(K.all_gather(x), xs.reshape(-1))
        assert torch.equal(K.reduce_scatter(x), xs.sum(0).chunk(rt.n_pes)[rt.my_pe])

    unishmem.testing.under_seeds(collectives, seeds=range(1, 4))

    def fails_under_3():
        if _config.get("UNISHMEM_RACE_SEED") == 3:
            raise ValueError("an order-dependent failure")

    with pytest.raises(ValueError, match="an order-dependent failure") as info:
        unishmem.testing.under_seeds(fails_under_3)
    assert info.value.__notes__ == ["under UNISHMEM_RACE_SEED=3 (unishmem.testing.under_seeds)"]
    assert not _config.given("UNISHMEM_RACE_SEED")  # as it was
    rt.free_workspaces()
    rt.free(counter)
