"""unishmem.kernels under TRITON_INTERPRET=1 on the host backend at 1, 2 and 4 PEs, against torch
references built from what every PE passed (torch.distributed's all_gather_into_tensor,
reduce_scatter_tensor and all_reduce semantics). Values are small integers, so float sums are exact
in any order."""

import os
import re

import torch
from spmd import raises, spmd

import unishmem
import unishmem.kernels as K

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "5"}
REFERENCE = {
    "sum": lambda xs: xs.sum(0),
    "prod": lambda xs: xs.prod(0),
    "min": lambda xs: xs.min(0).values,
    "max": lambda xs: xs.max(0).values,
}


def data(pe: int, shape, dtype, seed: int = 0):
    """PE pe's input: integers in [-3, 3] (exact products and sums), the same on every PE's reference."""
    g = torch.Generator().manual_seed(1000 * seed + pe)
    return torch.randint(-3, 4, shape, generator=g).to(dtype)


def members(team):
    rt = unishmem.runtime()
    return [team.translate_pe(i, rt.team_world) for i in range(team.n_pes)]


@spmd
def test_all_gather_sizes_dtypes_and_teams(rt):
    cases = [(rt.team_world, dtype, (7,)) for dtype in (torch.float16, torch.bfloat16, torch.int64)]
    cases += [
        (rt.team_world, torch.float32, (1,)),
        (rt.team_world, torch.float32, (5, 3)),
        (rt.team_node, torch.float32, (1000,)),
    ]  # (one host: the node team is every PE)
    for team, dtype, shape in cases:
        x = data(rt.my_pe, shape, dtype)
        out = K.all_gather(x, team=team)
        assert torch.equal(out, torch.cat([data(pe, shape, dtype) for pe in members(team)])), (dtype, shape)
    given = torch.empty(rt.n_pes * 4, dtype=torch.float32)
    assert K.all_gather(data(rt.my_pe, (4,), torch.float32), out=given) is given
    assert torch.equal(given, torch.cat([data(pe, (4,), torch.float32) for pe in range(rt.n_pes)]))


@spmd
def test_all_reduce_both_algorithms_every_op(rt):
    cases = [(op, torch.float32, (1001,)) for op in ("sum", "prod", "min", "max")]
    cases += [("sum", torch.float32, (1,)), ("sum", torch.float16, (3, 5)), ("max", torch.int32, (64,))]
    for algorithm in ("one_shot", "two_shot"):
        for op, dtype, shape in cases:
            x = data(rt.my_pe, shape, dtype, seed=1)
            ref = REFERENCE[op](torch.stack([data(pe, shape, dtype, seed=1) for pe in range(rt.n_pes)]))
            out = K.all_reduce(x, op=op, algorithm=algorithm)
            assert out.shape == x.shape and torch.equal(out, ref), (algorithm, op, dtype, shape)
    big = data(rt.my_pe, (70000,), torch.float32, seed=2)  # > 256 KiB: "auto" takes two-shot
    ref = torch.stack([data(pe, (70000,), torch.float32, seed=2) for pe in range(rt.n_pes)]).sum(0)
    assert torch.equal(K.all_reduce(big), ref)


@spmd
def test_reduce_scatter(rt):
    n = rt.n_pes
    for op, dtype, shape in (
        ("sum", torch.float32, (n * 3,)),
        ("max", torch.float16, (n * 2, 5)),
        ("sum", torch.int64, (n,)),
    ):
        x = data(rt.my_pe, shape, dtype, seed=3)
        full = REFERENCE[op](torch.stack([data(pe, shape, dtype, seed=3) for pe in range(n)]))
        rows = shape[0] // n
        assert torch.equal(K.reduce_scatter(x, op=op), full[rt.my_pe * rows : (rt.my_pe + 1) * rows]), (op, dtype)


@spmd(sizes=(2, 4))
def test_bad_arguments_raise_on_every_pe_and_the_job_goes_on(rt):
    # one PE passes another shape: every PE raises, naming both
    shape = (4,) if rt.my_pe else (5,)
    raises(
        lambda: K.all_gather(torch.zeros(shape)),
        "all_gather: the PEs of world disagree: member 0 passes torch.float32 of shape [5], member 1",
    )
    # one PE's bad op: it raises its own error, the others say who rejected
    op = "mean" if rt.my_pe == 1 else "sum"
    raises(
        lambda: K.all_reduce(torch.zeros(3), op=op),
        "op='mean' is not one of" if rt.my_pe == 1 else "member(s) [1] of world rejected their arguments",
    )
    raises(lambda: K.reduce_scatter(torch.zeros(rt.n_pes + 1)), "does not split into")
    raises(lambda: K.all_reduce(torch.zeros(3), algorithm="ring"), "algorithm='ring' is not one of")
    raises(lambda: K.all_gather(torch.zeros(3), out=torch.zeros(2)), "out must be torch.float32 of shape")
    x = data(rt.my_pe, (6,), torch.float32)
    assert torch.equal(K.all_reduce(x), torch.stack([data(pe, (6,), torch.float32) for pe in range(rt.n_pes)]).sum(0))


@spmd(sizes=(2, 4))
def test_each_peers_data_moves_through_several_programs(rt):
    # UNISHMEM_COMM_BLOCK_BYTES=64: a 100-element float32 message goes in 7 pieces (16 elements, then 4),
    # fp16 in 4 (32 elements, then 4); the last piece shorter, some sizes leave a piece empty
    from unishmem.kernels.collectives import _pieces

    os.environ["UNISHMEM_COMM_BLOCK_BYTES"] = "64"
    try:
        assert _pieces(100, 4) == (7, 16) and _pieces(100, 2) == (4, 32) and _pieces(10_000, 4) == (16, 628)
        n, me = rt.n_pes, rt.my_pe
        for dtype in (torch.float32, torch.float16):
            for rows in (25, 8 * n + 1):
                x = data(me, (rows * n, 4), dtype)
                xs = torch.stack([data(pe, x.shape, dtype) for pe in range(n)])
                assert torch.equal(K.all_gather(x), torch.cat(list(xs))), (dtype, rows)
                assert torch.equal(K.reduce_scatter(x), xs.sum(0).chunk(n)[me]), (dtype, rows)
                for algorithm in ("one_shot", "two_shot"):
                    assert torch.equal(K.all_reduce(x, algorithm=algorithm), xs.sum(0)), (dtype, rows, algorithm)
    finally:
        del os.environ["UNISHMEM_COMM_BLOCK_BYTES"]
    rt.free_workspaces()


@spmd(sizes=(2, 4))
def test_captured_calls_replay_right_after_the_inputs_change(rt):
    # NOTE [call counter]: the launches a call made, replayed with the same arguments (as a CUDA graph
    # replays), give the result for the inputs' new values; the last PE comes late to one replay, so a
    # kernel that does not wait for its peers' data reads what the previous call left
    import time

    import unishmem.testing

    n, me = rt.n_pes, rt.my_pe
    calls = {
        "all_gather": (lambda x: K.all_gather(x), lambda xs: torch.cat(list(xs))),
        "reduce_scatter": (lambda x: K.reduce_scatter(x), lambda xs: xs.sum(0).chunk(n)[me]),
        "one_shot": (lambda x: K.all_reduce(x, algorithm="one_shot"), lambda xs: xs.sum(0)),
        "two_shot": (lambda x: K.all_reduce(x, algorithm="two_shot"), lambda xs: xs.sum(0)),
    }
    w = data(0, (3, 5), torch.float32, seed=99)  # the GEMMs' other operand, the same on every PE
    calls |= {
        "ag_gemm": (lambda x: K.ag_gemm(x, w), lambda xs: torch.cat(list(xs)) @ w),
        "ag_gemm_after_all_gather": (lambda x: K.ag_gemm(x, w, overlap=False), lambda xs: torch.cat(list(xs)) @ w),
        "gemm_rs": (lambda x: K.gemm_rs(x, w), lambda xs: (xs @ w).sum(0).chunk(n)[me]),
    }
    launches = {"ag_gemm_after_all_gather": 2}
    for name, (call, reference) in calls.items():
        x = data(me, (4 * n, 3), torch.float32)
        call(x)  # warm: the workspace is made outside the capture
        with unishmem.testing.capture() as graph:
            out = call(x)
        assert len(graph.launches) == launches.get(name, 1), (name, graph.launches)
        for seed in range(1, 11):
            x.copy_(data(me, x.shape, x.dtype, seed))
            if seed == 5 and me == n - 1:
                time.sleep(0.2)
            graph.replay()
            xs = torch.stack([data(pe, x.shape, x.dtype, seed) for pe in range(n)])
            assert torch.equal(out, reference(xs)), (name, seed, out, reference(xs))
    # a contiguous symmetric input is read in place: the capture holds the launch and nothing else
    for name in ("all_gather", "reduce_scatter", "one_shot", "two_shot", "ag_gemm"):
        call, reference = calls[name]
        x = rt.zeros((4 * n, 3))
        call(x)
        with unishmem.testing.capture() as graph:
            out = call(x)
        assert not graph.ops and len(graph.launches) == 1, (name, graph.ops)
        for seed in range(1, 4):
            x.copy_(data(me, x.shape, x.dtype, seed))
            rt.barrier_all()  # no PE may still read the x of the previous call
            graph.replay()
            xs = torch.stack([data(pe, x.shape, x.dtype, seed) for pe in range(n)])
            assert torch.equal(out, reference(xs)), (name, seed, out, reference(xs))
        rt.barrier_all()
        rt.free(x)


@spmd(sizes=(2, 4))
def test_forty_calls_compile_one_binary_per_kernel_and_dtype(rt):
    # Triton's kernel-cache key of every launch, for sm_90: nothing a call passes changes between calls
    import unishmem.testing

    n, me = rt.n_pes, rt.my_pe
    calls = {
        "_all_gather": lambda x: K.all_gather(x),
        "_reduce": lambda x: K.all_reduce(x),
        "_ag_gemm": lambda x: K.ag_gemm(x, torch.ones(3, 5, dtype=x.dtype)),
        "_gemm_rs": lambda x: K.gemm_rs(x, torch.ones(3, 5, dtype=x.dtype)),
    }
    with unishmem.testing.capture(dry=True) as graph:  # nothing runs: the launches are all it needs
        for i in range(40):
            dtype = (torch.float32, torch.float16)[i % 2]
            for call in calls.values():
                call(data(me, (2 * n, 3), dtype, seed=i))  # a new tensor each call, as a model passes
    assert len(graph.launches) == 40 * len(calls), len(graph.launches)
    assert graph.compiled_variants("sm_90") == {name: 2 for name in calls}, graph.compiled_variants("sm_90")


@spmd(sizes=(2, 4))
def test_a_host_sync_inside_a_capture_is_refused(rt):
    import unishmem.testing

    x = torch.ones(4)
    try:
        with unishmem.testing.capture():
            K.all_reduce(x).sum().item()
    except unishmem.testing.CaptureError as e:
        assert "aten._local_scalar_dense reads device values on the host" in str(e), e
    else:
        raise AssertionError(".item() inside a capture was accepted")
    assert torch.equal(K.all_reduce(x), x * rt.n_pes)  # the job goes on


@spmd(sizes=(2,))
def test_workspaces_are_reused_and_freed(rt):
    x = torch.ones(100)
    K.all_reduce(x)
    free = rt._native.heap_free_bytes()
    for _ in range(5):
        assert torch.equal(K.all_reduce(x), x * rt.n_pes)
    assert rt._native.heap_free_bytes() == free  # the same workspace each call
    rt.free_workspaces()
    assert rt._native.heap_free_bytes() > free and not rt._workspaces
    assert torch.equal(K.all_reduce(x), x * rt.n_pes)  # made again on the next call


def halves(rt):
    """The strided halves {0, 2} and {1, 3} of 4 PEs: this PE's."""
    even = rt.team_world.split_strided(0, 2, 2)
    odd = rt.team_world.split_strided(1, 2, 2)
    return even or odd


@spmd(sizes=(4,))
def test_sub_teams_run_every_collective_at_once(rt):
    rt.free_workspaces()
    free = rt._native.heap_free_bytes()
    half = halves(rt)
    pes = members(half)
    assert pes == [rt.my_pe % 2, rt.my_pe % 2 + 2]
    x = data(rt.my_pe, (5, 3), torch.float32, seed=4)
    xs = torch.stack([data(pe, (5, 3), torch.float32, seed=4) for pe in pes])
    assert torch.equal(K.all_gather(x, team=half), torch.cat(list(xs)))
    for algorithm in ("one_shot", "two_shot"):
        for op in ("sum", "max"):
            out = K.all_reduce(x, op=op, algorithm=algorithm, team=half)
            assert torch.equal(out, REFERENCE[op](xs)), (algorithm, op)
    y = data(rt.my_pe, (4, 3), torch.float16, seed=5)
    full = torch.stack([data(pe, (4, 3), torch.float16, seed=5) for pe in pes]).sum(0)
    assert torch.equal(K.reduce_scatter(y, team=half), full[half.my_pe * 2 : half.my_pe * 2 + 2])
    # nested: a team of one and a team of both, split from the half (arenas carved from its arena)
    single = half.split_strided(1, 1, 1)
    both = half.split_strided(0, 1, 2)
    if single is not None:
        assert torch.equal(K.all_reduce(x, team=single), x)
        single.destroy()
    assert torch.equal(K.all_reduce(x, algorithm="two_shot", team=both), xs.sum(0))
    assert torch.equal(K.all_gather(x[0], team=both), xs[:, 0].reshape(-1))
    both.destroy()
    # split_2d: rows {0, 1}, {2, 3} and columns {0, 2}, {1, 3}, an arena each
    row, column = rt.team_world.split_2d(2)
    for team in (row, column):
        ref = torch.stack([data(pe, (5, 3), torch.float32, seed=4) for pe in members(team)]).sum(0)
        assert torch.equal(K.all_reduce(x, team=team), ref), team
        team.destroy()
    half.destroy()
    rt.free_workspaces()  # every team destroyed: their arenas go back to the heap
    assert rt._native.heap_free_bytes() == free


@spmd(sizes=(4,))
def test_sub_team_errors_raise_on_every_member_and_the_job_goes_on(rt):
    half = halves(rt)
    me = half.my_pe
    raises(
        lambda: K.all_gather(torch.zeros(4 if me else 5), team=half),
        f"all_gather: the PEs of {half.name} disagree: member 0 passes torch.float32 of shape [5], member 1 "
        "torch.float32 of shape [4]",
    )
    raises(
        lambda: K.all_reduce(torch.zeros(3), algorithm="two_shot" if me else "one_shot", team=half),
        "member 0 passes torch.float32 of shape [3] (one_shot), member 1 torch.float32 of shape [3] (two_shot)",
    )
    # a workspace larger than the arena (the default: a sixteenth of the job's 64 MiB heap)
    big = torch.zeros(300_000)  # src + two parities of 2 slots: 5 * 1.2 MB
    try:
        K.all_gather(big, team=half)
    except ValueError as e:
        text = str(e)
        need = int(re.search(r"needs (\d+) bytes", text).group(1))
        assert need >= 5 * big.nbytes and f"of its {(64 << 20) // 16} bytes free" in text, text
        assert "UNISHMEM_TEAM_ARENA" in text and half.name in text, text
    else:
        raise AssertionError("a workspace larger than the team arena was accepted")
    x = data(rt.my_pe, (6,), torch.float32)
    ref = torch.stack([data(pe, (6,), torch.float32) for pe in members(half)]).sum(0)
    assert torch.equal(K.all_reduce(x, team=half), ref)
    half.destroy()
    # UNISHMEM_TEAM_ARENA (read at each split of the world): none, or a bad value refused at the split
    os.environ["UNISHMEM_TEAM_ARENA"] = "0"
    try:
        half = halves(rt)
        raises(
            lambda: K.all_reduce(x, team=half),
            f"{half.name} (2 of 4 PEs) has no team arena for its workspaces (NOTE [workspaces]): UNISHMEM_TEAM_ARENA=0",
        )
        half.destroy()
        os.environ["UNISHMEM_TEAM_ARENA"] = "1G"  # more than the heap: the split works, the kernels say why not
        half = halves(rt)
        raises(
            lambda: K.all_gather(x, team=half),
            "the heap had no room for its UNISHMEM_TEAM_ARENA=1073741824 bytes when it was split",
        )
        half.destroy()
        os.environ["UNISHMEM_TEAM_ARENA"] = "lots"
        raises(lambda: rt.team_world.split_strided(0, 2, 2), "UNISHMEM_TEAM_ARENA='lots' is not a byte count")
    finally:
        del os.environ["UNISHMEM_TEAM_ARENA"]
    assert torch.equal(K.all_reduce(x), torch.stack([data(pe, (6,), torch.float32) for pe in range(4)]).sum(0))


@spmd
def test_agreement_through_the_bootstrap_matches_the_fcollect(rt):
    """NOTE [limited-mode exchange]: the path a library in limited mode takes, over this job's own
    bootstrap, gives the rows that the host fcollect gives."""
    from unishmem._workspaces import _exchange_through_bootstrap, exchange

    desc = [rt.my_pe, 7, rt.n_pes]
    for team in (rt.team_world, rt.team_node):
        rows = exchange(rt, team, "agreement", desc, None)
        assert rows == [[team.translate_pe(i, rt.team_world), 7, rt.n_pes] for i in range(team.n_pes)], rows
        assert _exchange_through_bootstrap(rt, team, desc) == rows
