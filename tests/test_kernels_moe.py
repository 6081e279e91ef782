"""unishmem.kernels.dispatch/combine (MoE all-to-all) under TRITON_INTERPRET=1 on the host backend at
1, 2 and 4 PEs. The references are written from the documented semantics: every PE rebuilds every
PE's inputs from its seed, picks out the copies routed to each expert with torch.nonzero (row-major:
(t, k) order) and sums the weighted expert outputs in float32, k by k."""

import os

import torch
from spmd import raises, spmd

import unishmem.kernels as K
from unishmem import _active

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "5"}
H, TOPK = 6, 3
TOKENS = (5, 0, 7, 3)  # T of PE s is TOKENS[s % 4]: PE 1 has none


def n_experts(n):
    return 3 if n == 1 else 2 * n


def inputs(pe, n, seed, dtype, T=None):
    """PE pe's (tokens, topk_ids, topk_weights). The last expert is never picked (a zero count)."""
    g = torch.Generator().manual_seed(1000 * seed + pe)
    T = TOKENS[pe % 4] if T is None else T
    tokens = torch.randn(T, H, generator=g).to(dtype)
    ids = torch.randint(0, n_experts(n) - 1, (T, TOPK), generator=g)
    weights = torch.rand(T, TOPK, generator=g)
    return tokens, ids, weights


def reference_dispatch(all_inputs, d, L):
    """(rows, counts [L, n], expert of each row) that PE d must receive."""
    rows, experts, counts = [], [], torch.zeros(L, len(all_inputs), dtype=torch.int64)
    for j in range(L):
        for s, (tokens, ids, _) in enumerate(all_inputs):
            picked = torch.nonzero(ids == d * L + j)  # (t, k) pairs in row-major order
            rows.append(tokens[picked[:, 0]])
            experts += [d * L + j] * len(picked)
            counts[j, s] = len(picked)
    return torch.cat(rows), counts, torch.tensor(experts, dtype=torch.int64)


def expert(x, experts):
    """A stand-in expert whose output depends on which expert a row reached."""
    return (x.float() * (1.0 + 0.5 * experts.float())[:, None]).to(x.dtype)


def reference_combine(tokens, ids, weights):
    acc = None
    for k in range(ids.shape[1]):
        y = expert(tokens, ids[:, k]).float()
        term = torch.where(ids[:, k : k + 1] >= 0, weights[:, k : k + 1].float() * y, 0.0)  # -1: routed nowhere
        acc = term if acc is None else acc + term
    return (acc if acc is not None else torch.zeros(tokens.shape, dtype=torch.float32)).to(tokens.dtype)


def row_experts(counts, me, rows):
    """The expert of each of `rows` received rows, from the counts alone (no host sync: what a
    captured expert computation does); padding rows get expert me*L."""
    L = counts.shape[0]
    ends = torch.cumsum(counts.sum(1), 0)
    j = torch.searchsorted(ends, torch.arange(rows), right=True)
    return me * L + torch.where(j < L, j, 0)


def check_round_trip(rt, dtype, seed, T=None, combine=True, combines=1, team=None, drop=False, **kw):
    """On `team` (default the world): inputs are rebuilt from its members' world PEs. drop: some
    copies are routed nowhere (id -1; with "outside", ids past the last expert, which a capacity's
    call does not check and routes nowhere)."""
    team = team or rt.team_world
    n, me = team.n_pes, team.my_pe
    E = n_experts(n)
    L = E // n
    everyone = [inputs(team.translate_pe(i, rt.team_world), n, seed, dtype, T) for i in range(n)]
    if drop:
        for _, ids, _ in everyone:
            ids[::2, -1] = -1
    tokens, ids, weights = everyone[me]
    given = ids.clone()
    if drop == "outside":  # E: one past the last expert (inside the kernel's power-of-two tiles at 1 PE)
        given[::2, -1] = torch.tensor([E, 1 << 40])[torch.arange(len(given[::2])) % 2]
    expert_tokens, counts, handle = K.dispatch(
        tokens, given.to(torch.int32 if seed % 2 and drop != "outside" else torch.int64), weights, E, team=team, **kw
    )
    # the handle's routing: each copy's expert (-1: nowhere), and its place among this PE's copies
    # sorted by expert, (t, k) order within one
    assert torch.equal(handle.ids, ids), (handle.ids, ids)
    routed = sorted((e, i) for i, e in enumerate(ids.reshape(-1).tolist()) if e >= 0)
    places = torch.full((ids.numel(),), -1, dtype=torch.int64)
    places[[i for _, i in routed]] = torch.arange(len(routed))
    assert torch.equal(handle.pos.reshape(-1), places), (handle.pos, places)
    rows, ref_counts, experts = reference_dispatch(everyone, me, L)
    assert counts.dtype == torch.int64 and torch.equal(counts, ref_counts), (counts, ref_counts)
    R = len(rows)
    if "max_tokens" in kw:  # padded to the capacity, zeros after the received rows
        assert expert_tokens.shape == (n * kw["max_tokens"] * TOPK, H), expert_tokens.shape
        assert not expert_tokens[R:].any()
        experts = row_experts(counts, me, len(expert_tokens))
    assert expert_tokens.dtype == dtype and torch.equal(expert_tokens[:R], rows), (dtype, seed)
    ref = reference_combine(tokens, ids, weights) if combine else None
    for _ in range(combines if combine else 0):  # a handle may be combined more than once
        out = K.combine(expert(expert_tokens, experts), handle, team=team)
        assert out.dtype == dtype and out.shape == tokens.shape
        assert torch.equal(out, ref), (dtype, seed, (out - ref).abs().max())
    return counts


@spmd
def test_dispatch_combine_bit_exact(rt):
    for dtype in (torch.float32, torch.float16):
        counts = check_round_trip(rt, dtype, seed=1)
    assert counts[-1].sum() == 0 if rt.my_pe == rt.n_pes - 1 else True  # the never-picked expert
    check_round_trip(rt, torch.bfloat16, seed=2, combine=False)  # bf16: data movement only (see module doc)
    check_round_trip(rt, torch.float32, seed=3, T=0)  # every PE without tokens


@spmd
def test_repeated_calls_reuse_the_workspace(rt):
    check_round_trip(rt, torch.float32, seed=4)
    free = _active.core().native.heap_free_bytes()
    for seed in (5, 6):
        check_round_trip(rt, torch.float32, seed=seed, combines=2)
    assert _active.core().native.heap_free_bytes() == free
    check_round_trip(rt, torch.float32, seed=8, max_tokens=16)  # a given capacity: a workspace of its own
    rt.free_workspaces()
    check_round_trip(rt, torch.float32, seed=9)


@spmd
def test_a_capacity_pads_the_layout_and_ids_of_minus_one_route_nowhere(rt):
    for dtype, seed in ((torch.float32, 20), (torch.float16, 21)):
        check_round_trip(rt, dtype, seed, max_tokens=8, combines=2)
    check_round_trip(rt, torch.float32, seed=22, max_tokens=8, drop=True)
    check_round_trip(rt, torch.float32, seed=25, max_tokens=8, drop="outside")
    check_round_trip(rt, torch.float32, seed=23, drop=True)  # the exact layout too
    check_round_trip(rt, torch.float32, seed=24, T=0, max_tokens=1)


@spmd(sizes=(2, 4))
def test_each_peers_rows_move_through_several_programs(rt):
    # UNISHMEM_COMM_BLOCK_BYTES=64 and a capacity of 16 tokens: each (receiver, expert) slab leaves in
    # up to 16 pieces of 64-byte multiples, many of them empty, the last shorter; back the same way;
    # dispatch and combine from a grid of 1 program on PE 0 and 2 on the others, the n * 16 pieces
    # round it (NOTE [persistent grid])
    import unishmem.testing

    cap = 1 if rt.my_pe == 0 else 2
    os.environ["UNISHMEM_COMM_BLOCK_BYTES"] = "64"
    os.environ["UNISHMEM_MAX_PROGRAMS"] = str(cap)
    try:
        for dtype, seed in ((torch.float32, 25), (torch.float16, 26)):
            check_round_trip(rt, dtype, seed, T=11, max_tokens=16, combines=2)
            check_round_trip(rt, dtype, seed + 2, T=16, max_tokens=16, drop=True)
        tokens, ids, weights = inputs(rt.my_pe, rt.n_pes, 29, torch.float32, T=16)
        with unishmem.testing.capture(dry=True) as graph:  # the grids of the calls checked above
            expert_tokens, _, handle = K.dispatch(tokens, ids, weights, n_experts(rt.n_pes), max_tokens=16)
            K.combine(expert_tokens, handle)
        assert [grid for _, _, grid, _ in graph.launches] == [(cap,), (cap,)], graph.launches
    finally:
        del os.environ["UNISHMEM_COMM_BLOCK_BYTES"], os.environ["UNISHMEM_MAX_PROGRAMS"]
    rt.free_workspaces()


def captured_step(rt, tokens, ids, weights, E, cap):
    """A serving step as a CUDA graph would hold it: dispatch, the experts, combine."""
    expert_tokens, counts, handle = K.dispatch(tokens, ids, weights, E, max_tokens=cap)
    out = K.combine(expert(expert_tokens, row_experts(counts, rt.my_pe, len(expert_tokens))), handle)
    return expert_tokens, counts, out


@spmd(sizes=(2, 4))
def test_a_captured_dispatch_and_combine_replay_right_after_the_inputs_change(rt):
    import unishmem.testing

    n, me = rt.n_pes, rt.my_pe
    E, cap, T = n_experts(n), 8, 6
    tokens, ids, weights = inputs(me, n, 30, torch.float32, T=T)
    captured_step(rt, tokens, ids, weights, E, cap)  # warm: the workspace is made outside the capture
    with unishmem.testing.capture() as graph:
        expert_tokens, counts, out = captured_step(rt, tokens, ids, weights, E, cap)
    # no host sync; combine copies its plain expert_out in itself (NOTE [copy-in]): no torch copy
    assert "bincount" not in graph.ops and "copy_" not in graph.ops, graph.ops
    assert len(graph.launches) == 2, graph.launches
    for seed in range(31, 41):
        everyone = [inputs(pe, n, seed, torch.float32, T=T) for pe in range(n)]
        everyone[(seed + 1) % n][1][0, 0] = -1  # a copy routed nowhere, on one PE at a time
        for mine, new in zip((tokens, ids, weights), everyone[me]):
            mine.copy_(new)
        graph.replay()
        rows, ref_counts, _ = reference_dispatch(everyone, me, E // n)
        assert torch.equal(counts, ref_counts), (seed, counts, ref_counts)
        assert torch.equal(expert_tokens[: len(rows)], rows) and not expert_tokens[len(rows) :].any(), seed
        ref = reference_combine(tokens, ids, weights)
        assert torch.equal(out, ref), (seed, (out - ref).abs().max())


def check_captured_serving_step(rt, seed: int, in_place: bool):
    """A warm dispatch (with max_tokens), experts that double their rows (into new tensors, or in place into
    handle.expert_out()) and combine, captured, then replayed after the inputs changed (a copy routed
    nowhere among them), against the documented sum."""
    import unishmem.testing

    n, me = rt.n_pes, rt.my_pe
    E, cap, T = n_experts(n), 8, 6
    tokens, ids, weights = inputs(me, n, seed, torch.float32, T=T)

    def step():
        expert_tokens, _, handle = K.dispatch(tokens, ids, weights, E, max_tokens=cap)
        if not in_place:
            return K.combine(expert_tokens * 2.0, handle)
        y = handle.expert_out()
        assert y.shape == expert_tokens.shape and y.dtype == expert_tokens.dtype and rt.is_symmetric(y)
        torch.mul(expert_tokens, 2.0, out=y)
        return K.combine(y, handle)

    step()  # warm: the workspace is made outside the capture
    with unishmem.testing.capture() as graph:
        out = step()
    # NOTE [routing]: dispatch and combine are their two launches alone (the experts' mul is the only op)
    assert graph.ops == ["mul"] and len(graph.launches) == 2, (graph.ops, graph.launches)
    _, args, _, _ = graph.launches[1]  # combine's: x, src, stage, ...
    assert args[2] == (0 if in_place else 1), args[:3]  # in place: read where the experts wrote, no copy-in
    for new_seed in (seed + 1, seed + 2):
        new = inputs(me, n, new_seed, torch.float32, T=T)
        new[1][new_seed % T, 0] = -1
        for mine, fresh in zip((tokens, ids, weights), new):
            mine.copy_(fresh)
        graph.replay()
        ref = torch.zeros(T, H)
        for k in range(TOPK):  # k by k, in float32: the documented sum
            ref = ref + torch.where(ids[:, k : k + 1] >= 0, weights[:, k : k + 1] * (2.0 * tokens), 0.0)
        assert torch.equal(out, ref), (new_seed, (out - ref).abs().max())


@spmd
def test_a_captured_dispatch_and_combine_are_two_launches_and_no_torch_op(rt):
    check_captured_serving_step(rt, 70, in_place=False)


@spmd
def test_experts_that_write_into_expert_out_are_combined_with_no_copy_in(rt):
    check_captured_serving_step(rt, 80, in_place=True)


@spmd(sizes=(2,))
def test_capacities_of_one_size_class_share_a_workspace_and_a_capture_never_allocates(rt):
    import unishmem.testing

    n, me = rt.n_pes, rt.my_pe
    E = n_experts(n)
    check_round_trip(rt, torch.float32, seed=60, T=5, max_tokens=5)  # class 8
    free = _active.core().native.heap_free_bytes()
    check_round_trip(rt, torch.float32, seed=61, T=7, max_tokens=7)  # class 8 too: no new workspace
    check_round_trip(rt, torch.float32, seed=62, T=6)  # the exact layout, capacity 8: the same one
    assert _active.core().native.heap_free_bytes() == free
    tokens, ids, weights = inputs(me, n, 63, torch.float32, T=9)
    try:  # class 16 has no workspace yet: refused, on every PE
        with unishmem.testing.capture():
            K.dispatch(tokens, ids, weights, E, max_tokens=9)
    except unishmem.testing.CaptureError as e:
        assert "dispatch allocates its workspace" in str(e), e
    else:
        raise AssertionError("a workspace was allocated inside a capture")
    check_round_trip(rt, torch.float32, seed=64, T=9, max_tokens=9)  # outside a capture: made, and right
    rt.free_workspaces()


@spmd(sizes=(2, 4))
def test_forty_steps_compile_one_binary_per_kernel_and_dtype(rt):
    import unishmem.testing

    n, me = rt.n_pes, rt.my_pe
    E = n_experts(n)
    for cap in (24, 40):
        for dtype in (torch.float32, torch.float16):
            captured_step(rt, *inputs(me, n, 50, dtype, T=cap), E, cap)  # warm outside the capture
    with unishmem.testing.capture(dry=True) as graph:  # nothing runs: the launches are all it needs
        for T in range(1, 21):  # every batch size up to 20 (1 and 16 included), two capacities and dtypes
            for dtype in (torch.float32, torch.float16):
                captured_step(rt, *inputs(me, n, 51, dtype, T=T), E, (24, 40)[T % 2])
    assert len(graph.launches) == 80, len(graph.launches)
    assert graph.compiled_variants("sm_90") == {"_dispatch": 2, "_combine": 2}, graph.compiled_variants("sm_90")


@spmd(sizes=(2, 4))
def test_bad_arguments_raise_on_every_pe_and_the_job_goes_on(rt):
    n, me = rt.n_pes, rt.my_pe
    tokens, ids, weights = inputs(me, n, 10, torch.float32, T=4)

    rejected = "member(s) [1] of world rejected their arguments"
    raises(
        lambda: K.dispatch(tokens, ids, weights, 2 * n if me else 4 * n),
        f"dispatch: the PEs disagree on n_experts: PE 0 passes {4 * n}, PE 1 passes {2 * n}",
    )
    raises(lambda: K.dispatch(tokens, ids, weights, n + 1), f"n_experts={n + 1} must be a positive multiple")
    raises(
        lambda: K.dispatch(tokens.half() if me == 1 else tokens, ids, weights, 2 * n),
        "disagree on tokens' dtype: PE 0 passes torch.float32, PE 1 passes torch.float16",
    )
    raises(lambda: K.dispatch(tokens, ids.float(), weights, 2 * n), "topk_ids must be int32 or int64")
    raises(
        lambda: K.dispatch(tokens, ids[:, :2] if me == 1 else ids, weights, 2 * n),
        "topk_weights must be float32, float16 or bfloat16 of shape" if me == 1 else rejected,
    )
    raises(lambda: K.dispatch(tokens[:, :4] if me == 1 else tokens, ids, weights, 2 * n), "disagree on H")
    raises(
        lambda: K.dispatch(tokens, ids + (2 * n if me == 1 else 0), weights, 2 * n),
        f"outside 0..{2 * n - 1}" if me == 1 else rejected,
    )
    raises(lambda: K.dispatch(tokens, ids, weights, 2 * n, max_tokens=2), "max_tokens=2 must be an int >=")
    raises(lambda: K.dispatch(tokens.view(-1), ids, weights, 2 * n), "tokens must be [T, H]")
    expert_tokens, _, handle = K.dispatch(tokens, ids, weights, 2 * n)
    raises(
        lambda: K.combine(expert_tokens[1:] if me == 1 else expert_tokens, handle),
        "expert_out must be torch.float32 of shape" if me == 1 else rejected,
    )
    raises(lambda: K.combine(expert_tokens, None), "handle must be what dispatch returned")
    _, _, second = K.dispatch(tokens, ids, weights, 2 * n)
    raises(
        lambda: K.combine(expert_tokens, second if me == 1 else handle),
        "combine: the PEs disagree on the dispatch call of the handle",
    )
    check_round_trip(rt, torch.float32, seed=11)  # and the job goes on


@spmd(sizes=(4,))
def test_dispatch_combine_on_two_halves_at_once(rt):
    # the strided halves {0, 2} (T = 5 and 7) and {1, 3} (T = 0 and 3), each with its own experts
    even, odd = rt.team_world.split_strided(0, 2, 2), rt.team_world.split_strided(1, 2, 2)  # both: collective
    half = even or odd
    for dtype, seed in ((torch.float32, 12), (torch.float16, 13)):
        check_round_trip(rt, dtype, seed, team=half, combines=2)
    tokens, ids, weights = inputs(rt.my_pe, 2, 14, torch.float32, T=4)
    expert_tokens, _, handle = K.dispatch(tokens, ids, weights, 4, team=half)
    raises(lambda: K.combine(expert_tokens, handle), f"the handle is from dispatch on {half.name}, not on world")
    raises(
        lambda: K.dispatch(tokens[:, :4] if half.my_pe else tokens, ids, weights, 4, team=half),
        "dispatch: the PEs disagree on H: PE 0 passes 6, PE 1 passes 4",
    )
    half.destroy()
