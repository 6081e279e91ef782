"""Simulated nodes on the host backend (UNISHMEM_HOST_NODE_SIZE, NOTE [simulated nodes]): 4 PEs as
two nodes of 2, as on two hosts. The node team is this PE's node; load/store reach only its PEs
while RMA reaches every PE; every unishmem.kernels kernel runs on the node team (from the arena made
at init), against torch references built from the node's members' inputs."""

import os

import torch
import triton.language as tl
from spmd import raises, spmd
from test_kernels_collectives import REFERENCE, data, members
from test_kernels_gemm import check_both_gemms
from test_kernels_moe import check_round_trip

import unishmem
import unishmem.kernels as K
import unishmem.language as shl
from unishmem import _active
from unishmem.kernels import _tuned

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "5", "UNISHMEM_HOST_NODE_SIZE": "2"}


@unishmem.jit
def reach(buf, out, N_PES: tl.constexpr):
    offs = tl.arange(0, 4)
    for pe in tl.static_range(N_PES):  # per PE: is the pointer non-null, and how many of a block's are
        tl.store(out + 2 * pe, (shl.remote_ptr(buf, pe).to(tl.int64) != 0).to(tl.int32))
        tl.store(out + 2 * pe + 1, tl.sum((shl.remote_ptr(buf + offs, pe).to(tl.int64) != 0).to(tl.int32)))


@unishmem.jit
def load_from(buf, out, pe):
    tl.store(out, shl.load_remote(buf, pe))


@spmd(sizes=(4,))
def test_the_node_team_and_what_load_store_reach(rt):
    node = [rt.my_pe // 2 * 2, rt.my_pe // 2 * 2 + 1]
    assert members(rt.team_node) == node and rt.team_node.my_pe == rt.my_pe % 2
    assert rt.team_node.device_args() == (node[0], 1, 2)
    buf = rt.zeros(4, dtype=torch.int32)
    buf.fill_(rt.my_pe + 10)
    rt.barrier_all()
    assert [rt.peer(buf, pe) is not None for pe in range(4)] == [pe in node for pe in range(4)]
    assert int(rt.peer(buf, node[1 - rt.my_pe % 2])[0]) == node[1 - rt.my_pe % 2] + 10
    out = torch.zeros(8, dtype=torch.int32)
    reach[(1,)](buf, out, N_PES=4)
    assert out.tolist() == [n for pe in range(4) for n in ((1, 4) if pe in node else (0, 0))]
    far = (rt.my_pe + 2) % 4  # on the other node: RMA and atomics reach it, load/store do not
    got = torch.zeros(4, dtype=torch.int32)
    rt.get(got, buf, far)
    assert got.tolist() == [far + 10] * 4
    rt.barrier_all()
    assert rt.atomic_fetch_add(buf[3:], 100, far) == far + 10  # the one add into far's word
    rt.barrier_all()
    assert int(buf[3]) == rt.my_pe + 110
    raises(lambda: load_from[(1,)](buf, out, far), "the peer is not reachable by load/store")
    load_from[(1,)](buf, out, node[0])
    assert int(out[0]) == node[0] + 10
    rt.barrier_all()
    rt.free(buf)


@spmd(sizes=(4,))
def test_every_kernel_runs_on_the_node_team(rt):
    node = rt.team_node
    assert _active.core().workspaces.arena_of(node) is not None, _active.core().workspaces.why_no_arena(node)
    pes = members(node)
    x = data(rt.my_pe, (5, 3), torch.float32, seed=20)
    xs = torch.stack([data(pe, (5, 3), torch.float32, seed=20) for pe in pes])
    assert torch.equal(K.all_gather(x, team=node), torch.cat(list(xs)))
    for algorithm in ("one_shot", "two_shot"):
        for op in ("sum", "min"):
            assert torch.equal(K.all_reduce(x, op=op, algorithm=algorithm, team=node), REFERENCE[op](xs))
    y = data(rt.my_pe, (6, 3), torch.float16, seed=21)
    full = torch.stack([data(pe, (6, 3), torch.float16, seed=21) for pe in pes]).sum(0)
    assert torch.equal(K.reduce_scatter(y, team=node), full[node.my_pe * 3 : node.my_pe * 3 + 3])
    check_both_gemms(rt, node, 70)
    check_round_trip(rt, torch.float32, seed=22, team=node)
    # NOTE [copy engine]: the node team's members are reachable, so it copies; the world's are not, so it pushes
    import unishmem.testing

    os.environ["UNISHMEM_COPY_ENGINE"] = "1"
    try:
        assert torch.equal(K.all_gather(x, team=node), torch.cat(list(xs)))
        everyone = torch.stack([data(pe, (5, 3), torch.float32, seed=20) for pe in range(4)])
        assert torch.equal(K.all_gather(x), torch.cat(list(everyone)))
        with unishmem.testing.capture(dry=True) as graph:
            K.all_gather(x, team=node)
            K.all_gather(x)
        assert [launch.fn.__name__ for launch, *_ in graph.launches] == ["handshake", "handshake", "_all_gather"]
        check_both_gemms(rt, node, 80)  # ag_gemm fused by the copy engine on the node (NOTE [ag_gemm copy engine])
        a, b = data(rt.my_pe, (4, 8), torch.float32, seed=23), data(9, (8, 16), torch.float32, seed=23)
        everyone = torch.cat([data(pe, (4, 8), torch.float32, seed=23) for pe in range(4)])
        assert torch.equal(K.ag_gemm(a, b, True), everyone @ b)  # pushing across the nodes
        with unishmem.testing.capture(dry=True) as graph:
            K.ag_gemm(a, b, True, team=node)
            K.ag_gemm(a, b, True)
        gathers = [(launch.fn.__name__, kwargs.get("GATHER")) for launch, _, _, kwargs in graph.launches]
        assert gathers == [("handshake", None), ("_ag_gemm", "copy"), ("handshake", None), ("_ag_gemm", "push")]
        # from FUSED_MAX_BYTES on, chunked on the node (NOTE [ag_gemm chunked], [gemm_rs chunked]), unfused
        # across the nodes
        big = torch.zeros(_tuned.FUSED_MAX_BYTES // 4 // 8, 8)
        names = []
        for gemm in (K.ag_gemm, K.gemm_rs):
            rt.free_workspaces()  # (the node's arena holds one large workspace at a time)
            with unishmem.testing.capture(dry=True) as graph:
                gemm(big, b[:, :8], team=node)
                gemm(big, b[:, :8])
            names += [launch.fn.__name__ for launch, *_ in graph.launches]
        assert names == ["handshake", "handshake", "_all_gather", "handshake", "handshake", "_reduce"], names
    finally:
        del os.environ["UNISHMEM_COPY_ENGINE"]
    # the arena outlives free_workspaces, and a team split from the node carves its own from it
    rt.free_workspaces()
    assert torch.equal(K.all_reduce(x, team=node), xs.sum(0))
    with node.split_strided(0, 1, 2) as both:
        assert torch.equal(K.all_reduce(x, algorithm="two_shot", team=both), xs.sum(0))


@spmd(sizes=(4,))
def test_uneven_nodes_no_arena_and_bad_values(rt):
    # ends this module's runtime and inits others (SPMD_ENV is restored after the module)
    rt.finalize()
    os.environ["UNISHMEM_HOST_NODE_SIZE"] = "3"  # nodes {0, 1, 2} and {3}
    rt = unishmem.init()
    node = [0, 1, 2] if rt.my_pe < 3 else [3]
    assert members(rt.team_node) == node
    x = data(rt.my_pe, (7,), torch.float32, seed=23)
    ref = torch.stack([data(pe, (7,), torch.float32, seed=23) for pe in node]).sum(0)
    assert torch.equal(K.all_reduce(x, team=rt.team_node), ref)
    rt.finalize()
    os.environ["UNISHMEM_TEAM_ARENA"] = "0"
    try:
        rt = unishmem.init()
        raises(
            lambda: K.all_gather(x, team=rt.team_node),
            f"{rt.team_node.name} ({len(node)} of 4 PEs) has no team arena for its workspaces "
            "(NOTE [workspaces]): UNISHMEM_TEAM_ARENA=0",
        )
        assert torch.equal(K.all_gather(x), torch.cat([data(pe, (7,), torch.float32, seed=23) for pe in range(4)]))
        rt.finalize()
    finally:
        del os.environ["UNISHMEM_TEAM_ARENA"]
    for value, message in (
        ("0" if rt.my_pe == 1 else "2", "UNISHMEM_HOST_NODE_SIZE='0' is not a whole number of PEs >= 1"),
        (str(1 + rt.my_pe % 2), "PEs have different UNISHMEM_HOST_NODE_SIZE: [1, 2, 1, 2] (by rank)"),
    ):
        os.environ["UNISHMEM_HOST_NODE_SIZE"] = value
        try:
            unishmem.init()
        except (ValueError, unishmem.UnishmemError) as e:  # on every PE: the one that read it, and its peers
            assert message in str(e), e
        else:
            raise AssertionError(f"no error: {message}")
