"""Teams: world, node, strided and 2-D splits, translation, team barriers."""

import pytest
import torch
from spmd import spmd

from unishmem import SymmetryError, _active


@spmd
def test_split_strided_even_and_odd(rt):
    evens = rt.team_world.split_strided(0, 2, (rt.n_pes + 1) // 2)
    odds = rt.team_world.split_strided(1, 2, rt.n_pes // 2) if rt.n_pes > 1 else None
    mine = evens if rt.my_pe % 2 == 0 else odds
    assert mine is not None and (odds is None or evens is None)
    assert mine.my_pe == rt.my_pe // 2
    assert mine.n_pes == ((rt.n_pes + 1) // 2 if rt.my_pe % 2 == 0 else rt.n_pes // 2)
    for pe in range(mine.n_pes):
        world_pe = 2 * pe + rt.my_pe % 2
        assert mine.translate_pe(pe, rt.team_world) == world_pe
        assert rt.team_world.translate_pe(world_pe, mine) == pe
    other = 1 - rt.my_pe % 2
    if other < rt.n_pes:
        assert rt.team_world.translate_pe(other, mine) == -1
    # a barrier, a sync and a collective on the sub-team only
    rt.barrier(mine)
    rt.sync(mine)
    src = rt.full(1, rt.my_pe, dtype=torch.int64)
    dst = rt.zeros(mine.n_pes, dtype=torch.int64)
    rt.fcollect(dst, src, team=mine)
    assert dst.tolist() == [2 * i + rt.my_pe % 2 for i in range(mine.n_pes)]
    rt.free(src)
    rt.free(dst)
    mine.destroy()


@spmd(sizes=(4,))
def test_split_2d(rt):
    x, y = rt.team_world.split_2d(2)
    assert (x.n_pes, y.n_pes) == (2, 2)
    assert x.my_pe == rt.my_pe % 2 and y.my_pe == rt.my_pe // 2
    assert x.translate_pe(0, rt.team_world) == rt.my_pe - rt.my_pe % 2
    assert y.translate_pe(1, rt.team_world) == 2 + rt.my_pe % 2
    total = rt.full(1, rt.my_pe + 1, dtype=torch.int32)
    rt.reduce(total, total, "sum", team=x)
    assert total.item() == (3 if rt.my_pe < 2 else 7)
    rt.reduce(total, total, "sum", team=y)
    assert total.item() == 10
    rt.free(total)
    with x, y:
        rt.barrier(x)
        rt.barrier(y)


@spmd
def test_split_2d_uneven(rt):
    x, y = rt.team_world.split_2d(3)
    assert x.n_pes == min(3, rt.n_pes - rt.my_pe // 3 * 3)
    assert y.my_pe == rt.my_pe // 3
    x.destroy()
    y.destroy()


@spmd
def test_team_slots_are_reused(rt):
    # far more splits than there are team slots: destroy gives them back
    for i in range(150):
        with rt.team_world.split_strided(0, 1, rt.n_pes) as t:
            assert t.n_pes == rt.n_pes and t.my_pe == rt.my_pe
            if i % 50 == 0:
                rt.barrier(t)


@spmd(sizes=(4,))
def test_nested_split_and_translation(rt):
    first3 = rt.team_world.split_strided(0, 1, 3)
    if rt.my_pe == 3:
        assert first3 is None
        return
    tail = first3.split_strided(1, 1, 2)  # world PEs 1 and 2
    if rt.my_pe == 0:
        assert tail is None
    else:
        assert tail.n_pes == 2 and tail.translate_pe(tail.my_pe, rt.team_world) == rt.my_pe
        assert tail.translate_pe(0, first3) == 1
        rt.barrier(tail)
        tail.destroy()
    rt.barrier(first3)
    first3.destroy()


@spmd
def test_device_args_give_the_members_as_world_pes(rt):
    # (start, stride, size) in world PEs: what the device team descriptor holds (NOTE [team descriptor])
    assert rt.team_world.device_args() == (0, 1, rt.n_pes)
    evens = rt.team_world.split_strided(0, 2, (rt.n_pes + 1) // 2)
    odds = rt.team_world.split_strided(1, 2, rt.n_pes // 2) if rt.n_pes > 1 else None
    mine = evens or odds
    assert mine.device_args() == (rt.my_pe % 2, 2 if mine.n_pes > 1 else 1, mine.n_pes)  # one member: stride 1
    if rt.n_pes == 4:
        x, y = rt.team_world.split_2d(2)
        assert x.device_args() == (rt.my_pe - rt.my_pe % 2, 1, 2)
        assert y.device_args() == (rt.my_pe % 2, 2, 2)
        tail = x.split_strided(1, 1, 1)  # a split of a split: still in world PEs
        if rt.my_pe % 2 == 1:
            assert tail.device_args() == (rt.my_pe, 1, 1)
            tail.destroy()
        x.destroy()
        y.destroy()
    mine.destroy()


@spmd(sizes=(2, 4))
def test_team_arenas_go_back_to_the_heap(rt):
    # a team smaller than the world reserves UNISHMEM_TEAM_ARENA (default: a sixteenth of the job's
    # 64 MiB heap) on every PE at its split; its destroy cannot free that (collective over the
    # members only), the next split of the world or rt.free_workspaces() does
    rt.free_workspaces()
    before = _active.core().native.heap_free_bytes()
    for i in range(40):
        solo = rt.team_world.split_strided(0, 1, 1)
        assert before - _active.core().native.heap_free_bytes() == (64 << 20) // 16, i
        if solo is not None:
            solo.destroy()
    rt.free_workspaces()
    assert _active.core().native.heap_free_bytes() == before


def world_works(rt):
    """Every PE: a world barrier, an allocation and a reduction give right results."""
    rt.barrier()
    x = rt.full(4, rt.my_pe + 1, dtype=torch.int64)
    rt.reduce(x, x, "sum")
    assert x.tolist() == [rt.n_pes * (rt.n_pes + 1) // 2] * 4
    rt.free(x)


def destroy_against_barrier(rt, team, destroy: bool):
    """team.destroy() where `destroy`, else rt.barrier(team): the members disagree, so each raises
    SymmetryError naming both calls, and the team lives on (NOTE [collective descriptor])."""
    with pytest.raises(SymmetryError) as info:
        team.destroy() if destroy else rt.barrier(team)
    text = str(info.value)
    assert f"called team_destroy on team {team.slot}" in text and f"called barrier on team {team.slot}" in text, text
    assert ("The team was not destroyed" in text) == destroy, text
    assert not team.destroyed


@spmd(sizes=(2, 4))
def test_a_destroy_refused_on_some_pes_can_be_retried_or_gone_on_from(rt):
    rt.free_workspaces()
    free_before = _active.core().native.heap_free_bytes()
    team = rt.team_world.split_strided(0, 1, rt.n_pes)
    destroy_against_barrier(rt, team, rt.my_pe == 0)  # PE 0 destroys, the others call a barrier
    destroy_against_barrier(rt, team, rt.my_pe != 0)  # the other way round
    team.destroy()  # every PE retries the destroy
    assert team.destroyed
    world_works(rt)
    # a team of the last three PEs (at 2 PEs: both), which synchronises on its own channel at 4
    # PEs (NOTE [barrier channel]) and has a team arena: only its last member destroys it
    team = rt.team_world.split_strided(rt.n_pes - min(3, rt.n_pes), 1, min(3, rt.n_pes))
    x = rt.full(4, rt.my_pe + 1, dtype=torch.int64)
    if team is not None:
        destroy_against_barrier(rt, team, team.my_pe == team.n_pes - 1)
        rt.barrier(team)  # every member goes on with the team
        rt.reduce(x, x, "sum", team=team)
        assert x.tolist() == [sum(range(rt.n_pes - team.n_pes + 1, rt.n_pes + 1))] * 4
        team.destroy()
    rt.free(x)
    world_works(rt)
    rt.free_workspaces()  # the arena's allocation
    assert _active.core().native.heap_free_bytes() == free_before


@spmd(sizes=(2, 4))
def test_a_destroy_against_a_split_makes_and_destroys_nothing(rt):
    team = rt.team_world.split_strided(0, 1, rt.n_pes)
    free_before = _active.core().native.heap_free_bytes()
    with pytest.raises(SymmetryError) as info:
        team.destroy() if rt.my_pe == 0 else team.split_strided(0, 1, 1)
    text = str(info.value)
    assert "PE 0 called team_destroy" in text and "called split_strided(start=0, stride=1, size=1)" in text, text
    assert ("The team was not destroyed" if rt.my_pe == 0 else "No team was made") in text, text
    assert not team.destroyed and _active.core().native.heap_free_bytes() == free_before  # no team arena either
    solo = team.split_strided(0, 1, 1)  # every PE retries the split, then destroys both
    assert (solo is not None) == (rt.my_pe == 0)
    if solo is not None:
        assert (solo.n_pes, solo.my_pe) == (1, 0)
        rt.barrier(solo)
        solo.destroy()
    team.destroy()
    world_works(rt)
    rt.free_workspaces()
