"""unishmem.kernels.dispatch/combine (MoE all-to-all) under TRITON_INTERPRET=1 on the host backend at
1, 2 and 4 PEs. The references are written from the documented semantics: every PE rebuilds every
PE's inputs from its seed, picks out the copies routed to each expert with torch.nonzero (row-major:
(t, k) order) and sums the weighted expert outputs in float32, k by k."""

import torch
from spmd import raises, spmd

import unishmem.kernels as K

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
        term = weights[:, k : k + 1].float() * y
        acc = term if acc is None else acc + term
    return (acc if acc is not None else torch.zeros(tokens.shape, dtype=torch.float32)).to(tokens.dtype)


def check_round_trip(rt, dtype, seed, T=None, combine=True, combines=1, team=None, **kw):
    """On `team` (default the world): inputs are rebuilt from its members' world PEs."""
    team = team or rt.team_world
    n, me = team.n_pes, team.my_pe
    E = n_experts(n)
    L = E // n
    everyone = [inputs(team.translate_pe(i, rt.team_world), n, seed, dtype, T) for i in range(n)]
    tokens, ids, weights = everyone[me]
    expert_tokens, counts, handle = K.dispatch(
        tokens, ids.to(torch.int32 if seed % 2 else torch.int64), weights, E, team=team, **kw
    )
    rows, ref_counts, experts = reference_dispatch(everyone, me, L)
    assert counts.dtype == torch.int64 and torch.equal(counts, ref_counts), (counts, ref_counts)
    assert expert_tokens.dtype == dtype and torch.equal(expert_tokens, rows), (dtype, seed)
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
    free = rt._native.heap_free_bytes()
    for seed in (5, 6):
        check_round_trip(rt, torch.float32, seed=seed, combines=2)
    assert rt._native.heap_free_bytes() == free
    check_round_trip(rt, torch.float32, seed=8, max_tokens=16)  # a given capacity: a workspace of its own
    rt.free_workspaces()
    check_round_trip(rt, torch.float32, seed=9)


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
