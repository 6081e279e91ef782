"""unishmem.kernels under TRITON_INTERPRET=1 on the host backend at 1, 2 and 4 PEs, against torch
references built from what every PE passed (torch.distributed's all_gather_into_tensor,
reduce_scatter_tensor and all_reduce semantics). Values are small integers, so float sums are exact
in any order."""

import os
import re

import pytest
import torch
from spmd import raises, spmd

import unishmem
import unishmem.kernels as K
from unishmem import _active

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
def test_all_to_all_sizes_dtypes_and_teams(rt):
    # torch.distributed's all_to_all_single with equal splits: block i of the output is member i's block
    # my_index of its x
    n = rt.n_pes
    for team, dtype, shape in (
        (rt.team_world, torch.float16, (n, 7)),
        (rt.team_world, torch.int64, (3 * n,)),
        (rt.team_node, torch.float32, (100 * n, 3)),
    ):
        x = data(rt.my_pe, shape, dtype, seed=4)
        me = team.my_pe
        ref = torch.cat([data(pe, shape, dtype, seed=4).chunk(team.n_pes)[me] for pe in members(team)])
        assert torch.equal(K.all_to_all(x, team=team), ref), (dtype, shape)
    if n > 1:
        raises(lambda: K.all_to_all(torch.zeros(n + 1)), f"all_to_all: x of shape [{n + 1}] does not split into {n}")


PULLS_AND_PUSHES = (("one_shot", None), ("one_shot", False), ("two_shot", None), ("two_shot", False))  # None pulls here


@spmd
def test_all_reduce_both_algorithms_every_op(rt):
    cases = [(op, torch.float32, (1001,)) for op in ("sum", "prod", "min", "max")]
    cases += [("sum", torch.float32, (1,)), ("sum", torch.float16, (3, 5)), ("max", torch.int32, (64,))]
    for algorithm, pull in PULLS_AND_PUSHES:
        for op, dtype, shape in cases:
            x = data(rt.my_pe, shape, dtype, seed=1)
            ref = REFERENCE[op](torch.stack([data(pe, shape, dtype, seed=1) for pe in range(rt.n_pes)]))
            out = K.all_reduce(x, op=op, algorithm=algorithm, pull=pull)
            assert out.shape == x.shape and torch.equal(out, ref), (algorithm, pull, op, dtype, shape)
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


@spmd(sizes=(2,))
def test_auto_takes_the_measured_default_else_the_rule(rt):
    # NOTE [measured defaults]: a row of the table for this architecture ("cpu" here), PE count, kernel and
    # size class picks all_reduce's algorithm and pull, and a collective's pull or push; without one,
    # the rule: pull where every member is reachable, the one-shot up to 256 KiB
    import unishmem.testing
    from unishmem.kernels import _tuned

    n, me = rt.n_pes, rt.my_pe
    x = data(me, (1000,), torch.float32)  # 4000 bytes: the 8 KiB class
    xs = torch.stack([data(pe, x.shape, x.dtype) for pe in range(n)])

    def launched(call):
        rt.free_workspaces()  # and the call plans, which hold the choice
        with unishmem.testing.capture(dry=True) as graph:
            call()
        return [launch.fn.__name__ for launch, *_ in graph.launches]

    saved = dict(_tuned.TABLE)
    _tuned.TABLE.clear()
    assert launched(lambda: K.all_reduce(x)) == ["_pull_reduce"]  # the rule
    assert launched(lambda: K.all_reduce(torch.zeros(70000))) == ["_pull_two_shot"]
    assert launched(lambda: K.all_gather(x)) == ["_pull_gather"]
    try:
        for variant, kernel in (
            ("two_shot, push", "_reduce"),
            ("two_shot", "_pull_two_shot"),
            ("one_shot, push", "_reduce"),
            ("one_shot", "_pull_reduce"),
        ):
            _tuned.TABLE[("cpu", n, "all_reduce", 8192)] = {"variant": variant, "programs": None, "block_bytes": None}
            assert launched(lambda: K.all_reduce(x)) == [kernel], variant
            assert torch.equal(K.all_reduce(x), xs.sum(0)), variant
            # an explicit algorithm, or pull, is the caller's
            assert launched(lambda: K.all_reduce(x, algorithm="one_shot", pull=True)) == ["_pull_reduce"]
        for what, push, pull in (
            ("all_gather", "_all_gather", "_pull_gather"),
            ("reduce_scatter", "_reduce", "_pull_reduce"),
            ("all_to_all", "_all_gather", "_pull_gather"),
        ):
            for variant, kernel in (("push", push), ("pull", pull)):
                _tuned.TABLE[("cpu", n, what, 8192)] = {"variant": variant, "programs": None, "block_bytes": None}
                assert launched(lambda: getattr(K, what)(x)) == [kernel], (what, variant)
        assert torch.equal(K.all_gather(x), torch.cat(list(xs)))
        assert launched(lambda: K.all_reduce(torch.zeros(70000))) == ["_pull_two_shot"]  # another class: no row
        # a row's knobs go with its variant: the grid's cap and the warps of the one-shot it measured, a
        # push's bytes per program and peer; a setting that is set wins over them
        row = {"variant": "one_shot", "programs": 1, "block_bytes": None, "warps": 2}
        _tuned.TABLE[("cpu", n, "all_reduce", 8192)] = row
        _tuned.TABLE[("cpu", n, "all_gather", 8192)] = {
            "variant": "push",
            "programs": None,
            "block_bytes": 64,
            "warps": 8,
        }

        def grid_and_warps(call):
            rt.free_workspaces()
            with unishmem.testing.capture(dry=True) as graph:
                call()
            (launch, _, grid, kwargs), *_ = graph.launches
            return launch.fn.__name__, tuple(grid), kwargs.get("num_warps")

        assert grid_and_warps(lambda: K.all_reduce(x)) == ("_pull_reduce", (1,), 2)
        assert grid_and_warps(lambda: K.all_reduce(x, algorithm="two_shot"))[1:] == ((2,), 4)  # not its row's
        name, grid, warps = grid_and_warps(lambda: K.all_gather(x))
        assert name == "_all_gather" and grid[0] > n and warps == 8, grid  # 64-byte pieces: many programs
        os.environ["UNISHMEM_COMM_WARPS"] = "16"
        try:
            assert grid_and_warps(lambda: K.all_reduce(x)) == ("_pull_reduce", (1,), 16)
        finally:
            del os.environ["UNISHMEM_COMM_WARPS"]
        assert torch.equal(K.all_reduce(x), xs.sum(0)) and torch.equal(K.all_gather(x), torch.cat(list(xs)))
    finally:
        _tuned.TABLE.clear()
        _tuned.TABLE.update(saved)
        rt.free_workspaces()


@spmd(sizes=(2, 4))
def test_gathers_and_reductions_pull_and_push_alike(rt):
    # NOTE [pull one-shot], [pull two-shot]: every member reachable (one host), all_gather,
    # all_to_all, reduce_scatter and all_reduce read the members' data where it lies, and
    # UNISHMEM_PULL=0 pushes it: both give torch's result, for x symmetric (read in place) and not
    # (copied in), several blocks a member, sizes of 16-byte multiples and not (NOTE [16-byte copies])
    import unishmem.testing

    n, me = rt.n_pes, rt.my_pe
    try:
        for pull, copy, kernels in (
            ("1", "0", ["_pull_gather", "_pull_reduce", "_pull_two_shot"]),
            ("0", "0", ["_all_gather", "_reduce", "_reduce"]),
            ("1", "1", ["handshake", "handshake", "_pull_reduce", "_pull_two_shot"]),  # NOTE [copy engine]
        ):
            os.environ["UNISHMEM_PULL"], os.environ["UNISHMEM_COPY_ENGINE"] = pull, copy
            for dtype in (torch.float32, torch.float16):
                for rows in (700, 701):
                    shape = (rows * n, 3)
                    xs = torch.stack([data(pe, shape, dtype, seed=rows) for pe in range(n)])
                    symmetric = rt.empty(shape, dtype)
                    symmetric.copy_(xs[me])
                    for x in (xs[me].clone(), symmetric):
                        assert torch.equal(K.all_gather(x), torch.cat(list(xs))), (pull, dtype, rows)
                        mine = torch.cat([xs[i].chunk(n)[me] for i in range(n)])
                        assert torch.equal(K.all_to_all(x), mine), (pull, dtype, rows)
                        total = xs.float().sum(0).to(dtype)  # (fp16 is reduced in float32)
                        assert torch.equal(K.reduce_scatter(x), total.chunk(n)[me]), (pull, dtype, rows)
                        for algorithm in ("one_shot", "two_shot"):
                            got = K.all_reduce(x, algorithm=algorithm)
                            assert torch.equal(got, total), (pull, dtype, rows, algorithm)
                    rt.barrier_all()  # no peer still reads it
                    rt.free(symmetric)
            with unishmem.testing.capture(dry=True) as graph:
                K.all_gather(xs[me])
                K.reduce_scatter(xs[me])
                K.all_reduce(xs[me], algorithm="two_shot")
            assert [launch.fn.__name__ for launch, *_ in graph.launches] == kernels, graph.launches
    finally:
        del os.environ["UNISHMEM_PULL"], os.environ["UNISHMEM_COPY_ENGINE"]
    rt.free_workspaces()


@spmd(sizes=(2, 4))
def test_bad_arguments_raise_on_every_pe_and_the_job_goes_on(rt):
    # one PE passes another shape: every PE raises, naming both
    shape = (4,) if rt.my_pe else (5,)
    raises(
        lambda: K.all_gather(torch.zeros(shape)),
        "all_gather: the PEs of world disagree: member 0 passes torch.float32 of shape [5] (pull), member 1",
    )
    # one PE's bad op: it raises its own error, the others say who rejected
    op = "mean" if rt.my_pe == 1 else "sum"
    raises(
        lambda: K.all_reduce(torch.zeros(3), op=op),
        "op='mean' is not one of" if rt.my_pe == 1 else "member(s) [1] of world rejected their arguments",
    )
    raises(lambda: K.reduce_scatter(torch.zeros(rt.n_pes + 1)), "does not split into")
    raises(lambda: K.all_reduce(torch.zeros(3), algorithm="ring"), "algorithm='ring' is not one of")
    raises(lambda: K.all_reduce(torch.zeros(3), pull="yes"), "pull must be None, True or False, got 'yes'")
    raises(lambda: K.all_gather(torch.zeros(3), out=torch.zeros(2)), "out must be torch.float32 of shape")
    # a dtype the heap does not hold is a TypeError (as torch's), too many dimensions a ValueError
    for kernel in (K.all_gather, K.all_to_all):
        with pytest.raises(TypeError, match="is torch.complex64, which the symmetric heap does not hold"):
            kernel(torch.zeros(2 * rt.n_pes, dtype=torch.complex64))
        with pytest.raises(ValueError, match=r"has 7 dimensions, more than the 6 a kernel takes"):
            kernel(torch.zeros([rt.n_pes] + [1] * 6))
    x = data(rt.my_pe, (6,), torch.float32)
    assert torch.equal(K.all_reduce(x), torch.stack([data(pe, (6,), torch.float32) for pe in range(rt.n_pes)]).sum(0))


@spmd(sizes=(2, 4))
def test_the_copy_engine_gathers_on_teams_into_out_in_place_and_replayed(rt):
    # NOTE [copy engine]: two handshakes and a torch copy from each member's view; x symmetric (read in
    # place), plain (copied to src by torch) or strided; out given, all_to_all into its own x; on a
    # sub-team; captured and replayed after the inputs change, one PE late to a replay
    import time

    import unishmem.testing

    n, me = rt.n_pes, rt.my_pe
    os.environ["UNISHMEM_COPY_ENGINE"] = "1"
    try:
        for dtype in (torch.float32, torch.bfloat16):
            for rows in (1, 701):
                shape = (rows * n, 3)
                xs = torch.stack([data(pe, shape, dtype, seed=rows) for pe in range(n)])
                mine = torch.cat([xs[i].chunk(n)[me] for i in range(n)])
                symmetric = rt.empty(shape, dtype)
                symmetric.copy_(xs[me])
                strided = xs[me].t().contiguous().t()
                for x in (xs[me].clone(), symmetric, strided):
                    assert torch.equal(K.all_gather(x), torch.cat(list(xs))), (dtype, rows)
                    assert torch.equal(K.all_to_all(x), mine), (dtype, rows)
                out = torch.empty((n * rows * n, 3), dtype=dtype)
                assert K.all_gather(symmetric, out=out) is out and torch.equal(out, torch.cat(list(xs)))
                assert K.all_to_all(symmetric, out=symmetric) is symmetric and torch.equal(symmetric, mine)
                rt.barrier_all()  # no peer still reads it
                rt.free(symmetric)
        if n == 4:
            team = halves(rt)
            x = data(me, (6, 2), torch.float32, seed=8)
            xs = torch.stack([data(pe, (6, 2), torch.float32, seed=8) for pe in members(team)])
            assert torch.equal(K.all_gather(x, team=team), torch.cat(list(xs)))
            assert torch.equal(K.all_to_all(x, team=team), torch.cat([t.chunk(2)[team.my_pe] for t in xs]))
        x = data(me, (4 * n, 3), torch.float32)
        K.all_gather(x)  # warm: the workspace is made outside the capture
        with unishmem.testing.capture() as graph:
            out = K.all_gather(x)
        assert [launch.fn.__name__ for launch, *_ in graph.launches] == ["handshake", "handshake"]
        assert graph.ops == ["copy_"] * (n + 1), graph.ops  # x into src, then one copy per member
        for seed in range(1, 6):
            x.copy_(data(me, x.shape, x.dtype, seed))
            if seed == 3 and me == n - 1:
                time.sleep(0.2)
            graph.replay()
            assert torch.equal(out, torch.cat([data(pe, x.shape, x.dtype, seed) for pe in range(n)])), seed
    finally:
        del os.environ["UNISHMEM_COPY_ENGINE"]
    rt.free_workspaces()


@spmd(sizes=(2, 4))
def test_each_peers_data_moves_through_several_programs(rt):
    # UNISHMEM_COMM_BLOCK_BYTES=64: a 100-element float32 message goes in 7 pieces (16 elements, then 4),
    # fp16 in 4 (32 elements, then 4); the last piece shorter, some sizes leave a piece empty
    from unishmem.kernels._frame import peer_pieces

    os.environ["UNISHMEM_COMM_BLOCK_BYTES"] = "64"
    os.environ["UNISHMEM_PULL"] = "0"  # all_gather pushes too (NOTE [pull one-shot])
    try:
        assert peer_pieces(100, 4) == (7, 16) and peer_pieces(100, 2) == (4, 32)
        assert peer_pieces(10_000, 4) == (16, 628)
        n, me = rt.n_pes, rt.my_pe
        for dtype in (torch.float32, torch.float16):
            # messages of 16-byte multiples and not, at each dtype (NOTE [16-byte copies])
            for rows, columns in ((25, 4), (8 * n + 1, 3)):
                x = data(me, (rows * n, columns), dtype)
                xs = torch.stack([data(pe, x.shape, dtype) for pe in range(n)])
                assert torch.equal(K.all_gather(x), torch.cat(list(xs))), (dtype, rows)
                assert torch.equal(K.reduce_scatter(x), xs.sum(0).chunk(n)[me]), (dtype, rows)
                for algorithm in ("one_shot", "two_shot"):
                    assert torch.equal(K.all_reduce(x, algorithm=algorithm), xs.sum(0)), (dtype, rows, algorithm)
    finally:
        del os.environ["UNISHMEM_COMM_BLOCK_BYTES"], os.environ["UNISHMEM_PULL"]
    rt.free_workspaces()


def pushing(kernel, x):
    """kernel(x) with UNISHMEM_PULL=0: it pushes (NOTE [pull one-shot])."""
    os.environ["UNISHMEM_PULL"] = "0"
    try:
        return kernel(x)
    finally:
        del os.environ["UNISHMEM_PULL"]


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
        "one_shot_push": (lambda x: K.all_reduce(x, algorithm="one_shot", pull=False), lambda xs: xs.sum(0)),
        "two_shot": (lambda x: K.all_reduce(x, algorithm="two_shot"), lambda xs: xs.sum(0)),
        "two_shot_push": (lambda x: K.all_reduce(x, algorithm="two_shot", pull=False), lambda xs: xs.sum(0)),
        "all_gather_push": (lambda x: pushing(K.all_gather, x), lambda xs: torch.cat(list(xs))),
        "reduce_scatter_push": (lambda x: pushing(K.reduce_scatter, x), lambda xs: xs.sum(0).chunk(n)[me]),
        "all_to_all": (lambda x: K.all_to_all(x), lambda xs: torch.cat([t.chunk(n)[me] for t in xs])),
    }
    collectives = list(calls)
    w = data(0, (3, 5), torch.float32, seed=99)  # the GEMMs' other operand, the same on every PE
    calls |= {
        "ag_gemm": (lambda x: K.ag_gemm(x, w), lambda xs: torch.cat(list(xs)) @ w),
        "ag_gemm_after_all_gather": (lambda x: K.ag_gemm(x, w, overlap=False), lambda xs: torch.cat(list(xs)) @ w),
        "matmul_then_reduce_scatter": (
            lambda x: K.gemm_rs(x, w, overlap=False),
            lambda xs: (xs @ w).sum(0).chunk(n)[me],
        ),
        "gemm_rs": (lambda x: K.gemm_rs(x, w), lambda xs: (xs @ w).sum(0).chunk(n)[me]),
    }
    launches = {"ag_gemm_after_all_gather": 1}  # all_gather, then torch.matmul (NOTE [fuse or not])
    pushes = {"all_gather_push": "_all_gather", "reduce_scatter_push": "_reduce"}
    unfused = ("ag_gemm_after_all_gather", "matmul_then_reduce_scatter")
    for name, (call, reference) in calls.items():
        rt.free_workspaces()  # and the call plans: UNISHMEM_PULL is read at a shape's first call
        x = data(me, (4 * n, 3), torch.float32)
        call(x)  # warm: the workspace is made outside the capture
        with unishmem.testing.capture() as graph:
            out = call(x)
        assert len(graph.launches) == launches.get(name, 1), (name, graph.launches)
        assert name not in pushes or graph.launches[0][0].fn.__name__ == pushes[name], graph.launches
        # x, a plain tensor, is copied in by the kernel (NOTE [copy-in]); the unfused GEMMs' matmul is torch's
        assert graph.ops == (["mm"] if name in unfused else []), (name, graph.ops)
        for seed in range(1, 11):
            x.copy_(data(me, x.shape, x.dtype, seed))
            if seed == 5 and me == n - 1:
                time.sleep(0.2)
            graph.replay()
            xs = torch.stack([data(pe, x.shape, x.dtype, seed) for pe in range(n)])
            assert torch.equal(out, reference(xs)), (name, seed, out, reference(xs))
    # a contiguous symmetric input is read in place: the capture holds the launch and nothing else; a
    # call whose out is its x copies x in (programs and peers would read what others already wrote)
    in_place = {
        "one_shot, out=x": lambda x: K.all_reduce(x, algorithm="one_shot", out=x),
        "one_shot_push, out=x": lambda x: K.all_reduce(x, algorithm="one_shot", pull=False, out=x),
        "two_shot, out=x": lambda x: K.all_reduce(x, algorithm="two_shot", out=x),
        "two_shot_push, out=x": lambda x: K.all_reduce(x, algorithm="two_shot", pull=False, out=x),
        "all_to_all, out=x": lambda x: K.all_to_all(x, out=x),
    }
    for name in [*collectives, "ag_gemm", *in_place]:
        call, reference = in_place.get(name), calls[name.split(",")[0]][1]
        call = call or calls[name][0]
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
    # Triton's kernel-cache key of every launch, for sm_90: nothing a call passes changes between calls,
    # the collectives' message sizes included (1 element, multiples of 16 and not, several size classes)
    import unishmem.testing

    n, me = rt.n_pes, rt.my_pe
    collectives = {
        "all_gather": lambda x: K.all_gather(x),
        "all_to_all": lambda x: K.all_to_all(x),
        "one_shot": lambda x: K.all_reduce(x, algorithm="one_shot"),
        "two_shot": lambda x: K.all_reduce(x, algorithm="two_shot"),
        "reduce_scatter": lambda x: K.reduce_scatter(x),
    }
    gemms = {
        "_ag_gemm": lambda x: K.ag_gemm(x, torch.ones(3, 5, dtype=x.dtype)),
        "_gemm_rs": lambda x: K.gemm_rs(x, torch.ones(3, 5, dtype=x.dtype)),
    }
    rows = [1, 16 * n, 2 * n + 1, 5 * n, 700 * n, 3 * n]
    with unishmem.testing.capture(dry=True) as graph:  # nothing runs: the launches are all it needs
        for i in range(40):
            dtype = (torch.float32, torch.float16)[i % 2]
            shape = (rows[i % len(rows)] * n, 3)  # (reduce_scatter: n equal blocks)
            for call in collectives.values():
                call(data(me, shape, dtype, seed=i))  # a new tensor each call, as a model passes
            for call in gemms.values():
                call(data(me, (2 * n, 3), dtype, seed=i))
    assert len(graph.launches) == 40 * (len(collectives) + len(gemms)), len(graph.launches)
    # every collective pulls (every PE reaches every other here): all_gather and all_to_all are
    # _pull_gather's two forms (constexprs), the one-shot and reduce_scatter _pull_reduce's, for two dtypes
    expected = {"_pull_gather": 4, "_pull_reduce": 4, "_pull_two_shot": 2, "_ag_gemm": 2, "_gemm_rs": 2}
    assert graph.compiled_variants("sm_90") == expected, graph.compiled_variants("sm_90")
    rt.free_workspaces()


@spmd(sizes=(2, 4))
def test_a_capped_grid_takes_many_blocks_per_program(rt):
    # NOTE [persistent grid]: with at most 1 program on PE 0 and 2 on the others (a grid may differ
    # between PEs), each program sends many pieces and reduces or gathers many 4096-element blocks
    import unishmem.testing
    from unishmem.kernels.collectives import BLOCK

    n, me = rt.n_pes, rt.my_pe
    cap = 1 if me == 0 else 2
    os.environ["UNISHMEM_MAX_PROGRAMS"] = str(cap)
    os.environ["UNISHMEM_COMM_BLOCK_BYTES"] = "1024"  # 16 pieces per peer (the same on every PE)
    chunk = 5 * BLOCK + 37  # two-shot and reduce-scatter: 6 blocks, the last one short
    calls = {
        "all_gather": ((3000,), lambda x: K.all_gather(x), lambda xs: torch.cat(list(xs))),
        "reduce_scatter": ((n * chunk,), lambda x: K.reduce_scatter(x), lambda xs: xs.sum(0).chunk(n)[me]),
        "one_shot": ((3 * BLOCK + 100,), lambda x: K.all_reduce(x, algorithm="one_shot"), lambda xs: xs.sum(0)),
        "one_shot_push": (
            (3 * BLOCK + 100,),
            lambda x: K.all_reduce(x, algorithm="one_shot", pull=False),
            lambda xs: xs.sum(0),
        ),
        # n * chunk - 3 elements: the last member's chunk is 3 short
        "two_shot": ((n * chunk - 3,), lambda x: K.all_reduce(x, algorithm="two_shot"), lambda xs: xs.sum(0)),
        "two_shot_max_f16": (
            (n * chunk - 3,),
            lambda x: K.all_reduce(x.half(), op="max", algorithm="two_shot"),
            lambda xs: xs.half().max(0).values,
        ),
    }
    # the GEMMs' pushes and tiles go round the grid too: 2 chunks of 16 rows, 3 tiles across N
    w = data(0, (3, 40), torch.float32, seed=99)
    tiles = {"block_m": 16, "block_n": 16}
    calls |= {
        "ag_gemm": ((20, 3), lambda x: K.ag_gemm(x, w, **tiles), lambda xs: torch.cat(list(xs)) @ w),
        "gemm_rs": ((n * 20, 3), lambda x: K.gemm_rs(x, w, **tiles), lambda xs: (xs @ w).sum(0).chunk(n)[me]),
    }
    try:
        for name, (shape, call, reference) in calls.items():
            xs = torch.stack([data(pe, shape, torch.float32, seed=7) for pe in range(n)])
            assert torch.equal(call(xs[me].clone()), reference(xs)), name  # warm (a capture allocates nothing)
            with unishmem.testing.capture() as graph:  # the other parity: records the launch's grid, and runs it
                out = call(xs[me].clone())
            assert torch.equal(out, reference(xs)), (name, out, reference(xs))
            grids = [grid for _, _, grid, _ in graph.launches]
            assert grids == [(cap,)], (name, grids)  # capped: far more tasks than programs
        # a symmetric x whose size does not split into n chunks is read in place (the last chunk short)
        x = rt.empty(n * chunk - 3)
        x.copy_(data(me, x.shape, torch.float32, seed=8))
        with unishmem.testing.capture() as graph:
            out = K.all_reduce(x, algorithm="two_shot")
        assert not graph.ops and len(graph.launches) == 1, graph.ops  # no staging copy
        assert torch.equal(out, torch.stack([data(pe, x.shape, torch.float32, seed=8) for pe in range(n)]).sum(0))
        rt.barrier_all()  # no peer still reads this x
        rt.free(x)
        # under the interpreter never more programs than are resident (a wait on one that cannot
        # start would never finish): 16 pieces to each peer (push) or 16 blocks from each (pull), 8 programs
        os.environ["UNISHMEM_MAX_PROGRAMS"] = "1000"
        os.environ["UNISHMEM_INTERPRET_RESIDENT"] = "8"
        for pull in ("0", "1"):
            os.environ["UNISHMEM_PULL"] = pull
            x = data(me, (16 * BLOCK,), torch.float32)
            K.all_gather(x)  # warm
            with unishmem.testing.capture() as graph:
                out = K.all_gather(x)
            assert torch.equal(out, torch.cat([data(pe, x.shape, torch.float32) for pe in range(n)]))
            assert [grid for _, _, grid, _ in graph.launches] == [(8,)], graph.launches
    finally:
        for name in (
            "UNISHMEM_MAX_PROGRAMS",
            "UNISHMEM_COMM_BLOCK_BYTES",
            "UNISHMEM_INTERPRET_RESIDENT",
            "UNISHMEM_PULL",
        ):
            os.environ.pop(name, None)
    rt.free_workspaces()


@spmd(sizes=(2, 4))
def test_shapes_of_one_size_class_share_a_workspace(rt):
    n, me = rt.n_pes, rt.my_pe
    rt.free_workspaces()
    calls = {
        "all_gather": (lambda x: K.all_gather(x), lambda xs: torch.cat(list(xs))),
        "reduce_scatter": (lambda x: K.reduce_scatter(x), lambda xs: xs.sum(0).chunk(n)[me]),
        "one_shot": (lambda x: K.all_reduce(x, algorithm="one_shot"), lambda xs: xs.sum(0)),
        "two_shot": (lambda x: K.all_reduce(x, algorithm="two_shot"), lambda xs: xs.sum(0)),
    }
    for name, (call, reference) in calls.items():
        # 600 * n and 1000 * n float32 elements (per chunk 600 and 1000): one class; 3000 * n: the next
        free = None
        for rows in (600, 1000, 600, 3000):
            xs = torch.stack([data(pe, (rows * n,), torch.float32, seed=rows) for pe in range(n)])
            assert torch.equal(call(xs[me]), reference(xs)), (name, rows)
            if rows == 600 and free is None:
                free, held = _active.core().native.heap_free_bytes(), len(_active.core().workspaces)
            elif rows != 3000:  # the first shape's workspace serves the second
                assert _active.core().native.heap_free_bytes() == free and len(_active.core().workspaces) == held, (
                    name,
                    rows,
                )
        assert _active.core().native.heap_free_bytes() < free, name  # another class: another workspace
    rt.free_workspaces()


@spmd(sizes=(2, 4))
def test_a_new_shape_in_a_known_class_is_still_compared_inside_a_capture(rt):
    # inside a capture calls compare their arguments once per shape, as on a GPU backend: a shape the
    # workspace has not seen is compared even though its class's workspace exists
    import unishmem.testing

    me = rt.my_pe
    K.all_reduce(torch.ones(600))  # warm: the class of 600..1024 float32 elements
    with unishmem.testing.capture():
        K.all_reduce(torch.ones(600))  # seen: not compared again (nothing to disagree on)
    try:
        with unishmem.testing.capture():
            K.all_reduce(torch.ones(700 if me == 1 else 800))
    except ValueError as e:
        assert "all_reduce: the PEs of world disagree: member 0 passes torch.float32 of shape [800]" in str(e), e
        assert "member 1 torch.float32 of shape [700]" in str(e), e
    else:
        raise AssertionError("a new shape in a known class was not compared inside a capture")
    assert torch.equal(K.all_reduce(torch.ones(700)), torch.full((700,), float(rt.n_pes)))
    rt.free_workspaces()


@spmd(sizes=(2, 4))
def test_the_workspace_cap_raises_on_every_pe_and_the_job_goes_on(rt):
    # UNISHMEM_WORKSPACE_BYTES: a call whose new workspace would pass it raises on every PE, naming
    # the cap, what it needs and what the workspaces hold; smaller calls, and after
    # rt.free_workspaces() the same call, still work
    n, me = rt.n_pes, rt.my_pe
    rt.free_workspaces()
    free = _active.core().native.heap_free_bytes()
    small, big = 20000, 40000  # pushing one-shot slots of 2**15 and 2**16 float32 elements
    slots = (1 + 2 * n) * 4  # bytes per slot element: the staging copy and two parities of n slots
    cap = slots * (2**15 + 2**16) - 1  # each alone fits, both do not
    os.environ["UNISHMEM_WORKSPACE_BYTES"] = str(cap)

    def reduced(numel):
        return torch.stack([data(pe, (numel,), torch.float32, seed=5) for pe in range(n)]).sum(0)

    try:
        assert torch.equal(
            K.all_reduce(data(me, (small,), torch.float32, seed=5), algorithm="one_shot", pull=False), reduced(small)
        )
        held = free - _active.core().native.heap_free_bytes()  # measured on the heap
        try:
            K.all_reduce(data(me, (big,), torch.float32, seed=5), algorithm="one_shot", pull=False)
        except ValueError as e:
            text = str(e)
            need = int(re.search(r"needs (\d+) bytes", text).group(1))
            assert need >= slots * 2**16 and f"already hold {held} bytes" in text, (text, held)
            assert f"UNISHMEM_WORKSPACE_BYTES={cap}" in text and "rt.free_workspaces()" in text, text
        else:
            raise AssertionError("a workspace past UNISHMEM_WORKSPACE_BYTES was allocated")
        assert _active.core().native.heap_free_bytes() == free - held  # nothing was allocated
        # the job goes on: a call of the class it holds, then the big one after a free
        assert torch.equal(K.all_reduce(data(me, (small - 7,), torch.float32, seed=5), pull=False), reduced(small - 7))
        rt.free_workspaces()
        assert torch.equal(
            K.all_reduce(data(me, (big,), torch.float32, seed=5), algorithm="one_shot", pull=False), reduced(big)
        )
        # one PE's lower cap: it says why, the others that it refused
        rt.free_workspaces()
        os.environ["UNISHMEM_WORKSPACE_BYTES"] = "4096" if me == 1 else str(cap)
        raises(
            lambda: K.all_gather(torch.ones(small)),
            "UNISHMEM_WORKSPACE_BYTES=4096" if me == 1 else "all_gather: member(s) [1] of world rejected",
        )
    finally:
        del os.environ["UNISHMEM_WORKSPACE_BYTES"]
    assert torch.equal(K.all_gather(torch.ones(small)), torch.ones(n * small))
    rt.free_workspaces()


@spmd(sizes=(2, 4))
def test_a_host_sync_inside_a_capture_is_refused(rt):
    import unishmem.testing

    x = torch.ones(4)
    K.all_reduce(x)  # warm: a capture also refuses making the workspace
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
    free = _active.core().native.heap_free_bytes()
    for _ in range(5):
        assert torch.equal(K.all_reduce(x), x * rt.n_pes)
    assert _active.core().native.heap_free_bytes() == free  # the same workspace each call
    rt.free_workspaces()
    assert _active.core().native.heap_free_bytes() > free and not len(_active.core().workspaces)
    assert torch.equal(K.all_reduce(x), x * rt.n_pes)  # made again on the next call


def halves(rt):
    """The strided halves {0, 2} and {1, 3} of 4 PEs: this PE's."""
    even = rt.team_world.split_strided(0, 2, 2)
    odd = rt.team_world.split_strided(1, 2, 2)
    return even or odd


@spmd(sizes=(4,))
def test_sub_teams_run_every_collective_at_once(rt):
    rt.free_workspaces()
    free = _active.core().native.heap_free_bytes()
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
    assert _active.core().native.heap_free_bytes() == free


@spmd(sizes=(4,))
def test_sub_team_errors_raise_on_every_member_and_the_job_goes_on(rt):
    half = halves(rt)
    me = half.my_pe
    raises(
        lambda: K.all_gather(torch.zeros(4 if me else 5), team=half),
        f"all_gather: the PEs of {half.name} disagree: member 0 passes torch.float32 of shape [5] (pull), member 1 "
        "torch.float32 of shape [4]",
    )
    raises(
        lambda: K.all_reduce(torch.zeros(3), algorithm="two_shot" if me else "one_shot", team=half),
        "member 0 passes torch.float32 of shape [3] (one_shot), member 1 torch.float32 of shape [3] (two_shot)",
    )
    # a workspace larger than the arena (the default: a sixteenth of the job's 64 MiB heap)
    big = torch.zeros(1_500_000)  # a pull's src alone: 6 MB
    try:
        K.all_gather(big, team=half)
    except ValueError as e:
        text = str(e)
        need = int(re.search(r"needs (\d+) bytes", text).group(1))
        assert need >= big.nbytes and f"of its {(64 << 20) // 16} bytes free" in text, text
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
        rows = exchange(_active.core(), team, "agreement", desc, None)
        assert rows == [[team.translate_pe(i, rt.team_world), 7, rt.n_pes] for i in range(team.n_pes)], rows
        assert _exchange_through_bootstrap(_active.core(), team, desc) == rows


@spmd(sizes=(2, 4))
def test_keyed_workspaces_are_made_once_and_capped(rt):
    # the API kernels that compare their arguments themselves (moe) take their workspaces from
    from unishmem._workspaces import keyed_workspace, size_class

    assert [size_class(c, 16) for c in (0, 1, 16, 17, 1000, 1024, 1025)] == [16, 16, 16, 32, 1024, 1024, 2048]
    rt.free_workspaces()
    free = _active.core().native.heap_free_bytes()
    key = ("test", rt.team_world.key, size_class(3000))
    buffers = {"rows": ((size_class(3000), 4), torch.float16), "sig": ((2, 8), torch.uint64)}
    ws = keyed_workspace(_active.core(), rt.team_world, "test", key, buffers)
    assert ws.buffers["rows"].shape == (4096, 4) and ws.buffers["rows"].dtype == torch.float16
    assert not ws.buffers["sig"].any() and rt.is_symmetric(ws.buffers["rows"])
    assert free - _active.core().native.heap_free_bytes() >= 4096 * 4 * 2 + 2 * 8 * 8
    assert keyed_workspace(_active.core(), rt.team_world, "test", key, lambda: 1 / 0) is ws  # made once
    held = free - _active.core().native.heap_free_bytes()
    os.environ["UNISHMEM_WORKSPACE_BYTES"] = str(held + 1000)
    try:
        raises(
            lambda: keyed_workspace(
                _active.core(), rt.team_world, "test", key[:2] + (8192,), {"rows": ((8192, 4), torch.float16)}
            ),
            f"test: its workspace needs 65536 bytes of symmetric memory and the kernel workspaces of this "
            f"runtime already hold {held} bytes, more together than UNISHMEM_WORKSPACE_BYTES={held + 1000} allows",
        )
        assert _active.core().native.heap_free_bytes() == free - held
        small = keyed_workspace(
            _active.core(), rt.team_world, "test", key[:2] + (16,), {"rows": ((16, 4), torch.float16)}
        )
        assert small.buffers["rows"].shape == (16, 4)  # 256 bytes: it fits
    finally:
        del os.environ["UNISHMEM_WORKSPACE_BYTES"]
    rt.free_workspaces()
    assert _active.core().native.heap_free_bytes() == free


@spmd(sizes=(2, 4))
def test_a_pulling_one_shot_returns_only_once_no_peer_reads_its_input(rt):
    # NOTE [pull one-shot]: a symmetric x is read in place by every peer, so a PE may change it as soon
    # as its call returns only because the call waits until every peer has read it. The last PE reads
    # with one program, block after block; the others, with 8, finish their reading long before
    from unishmem.kernels.collectives import BLOCK

    n, me = rt.n_pes, rt.my_pe
    x = rt.empty(8 * BLOCK)
    os.environ["UNISHMEM_MAX_PROGRAMS"] = "1" if me == n - 1 else "8"
    try:
        for seed in range(3):
            x.copy_(data(me, x.shape, torch.float32, seed))
            out = K.all_reduce(x, algorithm="one_shot")
            x.fill_(1000.0)  # at once: a peer still reading would sum this
            ref = torch.stack([data(pe, x.shape, torch.float32, seed) for pe in range(n)]).sum(0)
            assert torch.equal(out, ref), (seed, (out != ref).sum())
    finally:
        del os.environ["UNISHMEM_MAX_PROGRAMS"]
    rt.barrier_all()
    rt.free(x)


@spmd(sizes=(2, 4))
def test_bfloat16_results_are_the_float32_result_rounded_to_nearest_even(rt):
    """NOTE [interpreter numerics]: bit for bit what a GPU gives, where the interpreter truncated. The
    float32 results here are exact integers above 256, where bfloat16's step is 2 or 4: many are ties,
    which truncation, round-half-up and round-to-nearest-even each resolve their own way."""
    n, me = rt.n_pes, rt.my_pe

    def ints(pe, shape, low, high, seed):
        g = torch.Generator().manual_seed(1000 * seed + pe)
        return torch.randint(low, high + 1, shape, generator=g, dtype=torch.float32)  # exact in bfloat16

    def same_bits(got, exact):
        ref = exact.to(torch.bfloat16)  # torch rounds to nearest even
        assert (ref.float() != exact).any(), "no rounding to check"
        return got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16), ref.view(torch.int16))

    xs = torch.stack([ints(pe, (4 * 64,), 64, 256, seed=7) for pe in range(n)])
    x = xs[me].to(torch.bfloat16)
    for algorithm, pull in PULLS_AND_PUSHES:
        assert same_bits(K.all_reduce(x, algorithm=algorithm, pull=pull), xs.sum(0)), (algorithm, pull)
    assert same_bits(K.reduce_scatter(x), xs.sum(0).chunk(n)[me])
    shards = [ints(pe, (16, 4), 0, 15, seed=8) for pe in range(n)]
    b = ints(0, (4, 32), 0, 15, seed=9)
    assert same_bits(K.ag_gemm(shards[me].to(torch.bfloat16), b.to(torch.bfloat16)), torch.cat(shards) @ b)
    # gemm_rs sends the other PEs' partial tiles in bfloat16: those are small (at most 4 * 3 * 15), so
    # exact there; each PE's own partial (of its own rows) is large
    a = [ints(pe, (16 * n, 4), 0, 3, seed=10) for pe in range(n)]
    for pe in range(n):
        a[pe].view(n, 16, 4)[pe] = ints(pe, (16, 4), 0, 15, seed=12)
    b_shards = [ints(pe, (4, 32), 0, 15, seed=11) for pe in range(n)]
    exact = sum(a[pe] @ b_shards[pe] for pe in range(n)).chunk(n)[me]
    assert same_bits(K.gemm_rs(a[me].to(torch.bfloat16), b_shards[me].to(torch.bfloat16)), exact)


@spmd(sizes=(2, 4))
def test_16_bit_floats_reduce_in_float32(rt):
    # bfloat16 and float16 are reduced in float32 (the interpreter's bfloat16 arithmetic would work
    # on bit patterns) and rounded once
    n, me = rt.n_pes, rt.my_pe
    for dtype in (torch.bfloat16, torch.float16):
        ints = data(me, (1000,), torch.float32, seed=3)
        xs = torch.stack([data(pe, (1000,), torch.float32, seed=3) for pe in range(n)])
        for algorithm, pull in PULLS_AND_PUSHES:
            out = K.all_reduce(ints.to(dtype), algorithm=algorithm, pull=pull)
            assert out.dtype == dtype and torch.equal(out, xs.sum(0).to(dtype)), (dtype, algorithm, pull)
            for op in ("max", "min"):
                got = K.all_reduce(ints.to(dtype), op=op, algorithm=algorithm, pull=pull)
                assert torch.equal(got, REFERENCE[op](xs).to(dtype)), (dtype, algorithm, op)
        assert torch.equal(K.reduce_scatter(ints.to(dtype)), xs.sum(0).chunk(n)[me].to(dtype)), dtype
    # float16: 0.5 and n - 1 halves of float16's step at 0.5 (2**-11) sum exactly in float32, then
    # round once, while a float16 running sum rounds each addition back to 0.5 (at 4 PEs: 0.5 + 2**-10
    # against 0.5)
    tiny = torch.full((64,), 2.0**-12 if me else 0.5).to(torch.float16)
    ref = (torch.tensor(0.5) + (n - 1) * 2.0**-12).to(torch.float16)
    for algorithm, pull in PULLS_AND_PUSHES:
        got = K.all_reduce(tiny, algorithm=algorithm, pull=pull)
        assert torch.equal(got, torch.full((64,), ref.item(), dtype=torch.float16)), (algorithm, pull, got[:2], ref)
