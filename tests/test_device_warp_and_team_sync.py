"""Device library v3 under TRITON_INTERPRET=1 on the host backend, at 2 and 4 PEs: the warp forms of the
world barriers, team barriers and syncs by block and by warp, broadcast_warp and fcollect_warp, quiet_pe
and mc_ptr. References are computed with torch from what each PE sent; their compiled forms are checked in
test_device_compile.py."""

import os
import re
import time
import warnings

import pytest
import torch
import triton.language as tl
from spmd import spmd

import unishmem
import unishmem.language as shl

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "3"}
SIZES = (2, 4)
BARRIERS = ("barrier_all_warp", "sync_all_warp", "barrier_block", "barrier_warp", "sync_block", "sync_warp")


@unishmem.jit
def read_after_barrier(inbox, out, team, FORM: tl.constexpr, N: tl.constexpr):
    if FORM == 0:
        shl.barrier_all_warp()
    elif FORM == 1:
        shl.sync_all_warp()
    elif FORM == 2:
        shl.barrier_block(team)
    elif FORM == 3:
        shl.barrier_warp(team)
    elif FORM == 4:
        shl.sync_block(team)
    else:
        shl.sync_warp(team)
    offs = tl.arange(0, N)
    tl.store(out + offs, tl.load(inbox + offs))


def teams_of(rt):
    """(name, team or None where this PE is no member): the world, and the even PEs at 4 PEs."""
    teams = [("world", rt.team_world)]
    if rt.n_pes == 4:
        teams.append(("even", rt.team_world.split_strided(0, 2, 2)))
    return teams


@spmd(sizes=SIZES)
def test_a_barrier_or_sync_waits_for_every_member(rt):
    """Every other member puts late (after a sleep); a member reads its inbox after the barrier: it holds what
    its left neighbour in the team sent only if the barrier waited for that neighbour."""
    n = 8
    inbox, out = rt.zeros(n, dtype=torch.int32), torch.zeros(n, dtype=torch.int32)
    teams = teams_of(rt)
    for name, team in teams:
        for form, fn in enumerate(BARRIERS):
            rt.barrier_all()  # the inbox was read in the last round everywhere
            if team is None or (name != "world" and "all" in fn):  # a world barrier is for the world team
                continue
            size, me = team.n_pes, team.my_pe
            right = team.translate_pe((me + 1) % size, rt.team_world)
            sent = lambda i: torch.arange(n, dtype=torch.int32) * 100 + i * 10 + form  # noqa: E731
            if me % 2:
                time.sleep(0.3)
            rt.put(inbox, sent(me), right)
            read_after_barrier[(1,)](inbox, out, team.handle, FORM=form, N=n)
            assert torch.equal(out, sent((me - 1) % size)), (name, fn, out.tolist())
    rt.barrier_all()
    for _, team in teams[1:]:
        if team is not None:
            team.destroy()
    rt.free(inbox)


@unishmem.jit
def warp_collectives(team, bcast, gathered, src, root, N: tl.constexpr):
    shl.broadcast_warp(team, bcast, src, N, root)
    shl.fcollect_warp(team, gathered, src, N)


@spmd(sizes=SIZES)
def test_broadcast_and_fcollect_by_a_warp_against_torch(rt):
    n = 6
    src, bcast = rt.zeros(n, dtype=torch.float32), rt.zeros(n, dtype=torch.float32)
    gathered = rt.zeros(rt.n_pes * n, dtype=torch.float32)
    part = lambda i: torch.arange(n, dtype=torch.float32) * 0.5 + i  # noqa: E731  (member i's source)
    for name, team in teams_of(rt):
        if team is not None:
            size, root = team.n_pes, team.n_pes - 1
            src.copy_(part(team.my_pe))
            warp_collectives[(1,)](team.handle, bcast, gathered, src, root, N=n)
            assert torch.equal(bcast, part(root)), name
            assert torch.equal(gathered[: size * n], torch.cat([part(i) for i in range(size)])), name
            if name != "world":
                team.destroy()
        rt.barrier_all()
    for t in (src, bcast, gathered):
        rt.free(t)


@unishmem.jit
def put_quiet_signal(dst, src, sig, peer, N: tl.constexpr):
    shl.putmem_nbi(dst, src, N * 4, peer)
    shl.quiet_pe(peer)  # the put is complete before the signal that says so
    shl.signal_op(sig, 1, shl.SIGNAL_SET, peer)
    shl.signal_wait_until(sig, shl.CMP_EQ, 1)


@unishmem.jit
def quiet_one(pe):
    shl.quiet_pe(pe)


@spmd(sizes=SIZES)
def test_quiet_pe_completes_a_put_before_its_signal(rt):
    n = 16
    right, left = (rt.my_pe + 1) % rt.n_pes, (rt.my_pe - 1) % rt.n_pes
    dst, sig = rt.zeros(n, dtype=torch.int32), rt.signals(1)
    src = torch.arange(n, dtype=torch.int32) + 1000 * rt.my_pe
    put_quiet_signal[(1,)](dst, src, sig, right, N=n)
    assert torch.equal(dst, torch.arange(n, dtype=torch.int32) + 1000 * left)
    with pytest.raises(ValueError, match=rf"quiet_pe: pe=99 is out of range: there are {rt.n_pes} PEs"):
        quiet_one[(1,)](99)
    rt.barrier_all()
    rt.free(dst)
    rt.free(sig)


@unishmem.jit
def multicast_address(buf, out):
    tl.store(out, shl.mc_ptr(buf).to(tl.int64))


@spmd(sizes=(2,))
def test_mc_ptr_is_null_without_multicast(rt):
    buf, out = rt.zeros(4, dtype=torch.int32), torch.full((1,), -1, dtype=torch.int64)
    multicast_address[(1,)](buf, out)
    assert out.item() == 0  # the host backend has no multicast
    with pytest.raises(unishmem.NotSymmetricError, match=r"mc_ptr: ptr"):
        multicast_address[(1,)](torch.zeros(4, dtype=torch.int32), out)
    rt.free(buf)


@unishmem.jit
def spin_on_a_peer(flag, out):
    right = (shl.my_pe() + 1) % shl.n_pes()
    while shl.load_remote(flag, right) == 0:  # nobody sets it
        pass
    tl.store(out, 1)


@spmd(sizes=(2,))
def test_a_spin_on_load_remote_that_cannot_end_is_reported(rt):
    """NOTE [spins]: a spin the host backend's waits cannot see warns as a slow wait does, then times out,
    naming the word, its PE and the kernel's line."""
    flag, out = rt.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int32)
    right = (rt.my_pe + 1) % rt.n_pes
    os.environ.update(UNISHMEM_STALL_WARN="0.5", UNISHMEM_WAIT_TIMEOUT="1.5")
    try:
        with warnings.catch_warnings(record=True) as seen, pytest.raises(unishmem.WaitTimeout) as gave_up:
            warnings.simplefilter("always")
            spin_on_a_peer[(1,)](flag, out)
    finally:
        del os.environ["UNISHMEM_STALL_WARN"], os.environ["UNISHMEM_WAIT_TIMEOUT"]
    word = rf"the word at heap offset 0x[0-9a-f]+ of PE {right} \(kernel spin_on_a_peer at test_device_warp_and_team_sync.py:\d+\)"
    assert re.search(rf"gave up after 1 s spinning on load_remote of {word}, which has read 0", str(gave_up.value))
    stalls = [str(w.message) for w in seen if issubclass(w.category, unishmem.UnishmemWarning)]
    assert len(stalls) == 1 and re.match(rf"still spinning after \d s on load_remote of {word}", stalls[0]), stalls
    assert out.item() == 0
    rt.barrier_all()
    rt.free(flag)
