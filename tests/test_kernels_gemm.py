"""ag_gemm and gemm_rs under TRITON_INTERPRET=1 on the host backend at 1, 2 and 4 PEs, against torch
matmuls of what every PE passed: all_gather(a_shard) @ b, and rows block my_pe of the sum over PEs
of a @ b_shard. Integer-valued operands make float32 (and float16) results exact; random float16
operands are checked against a float64 reference with the tolerance stated below."""

import contextlib

import torch
from spmd import raises, spmd

import unishmem
import unishmem.kernels as K
from unishmem import _active

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "5"}
# float16 results: each output rounded once to float16 (relative 2**-11) after a float32 sum of
# float16 products; gemm_rs also rounds each PE's partial tile to float16 before the sum
F16_TOL = {"rtol": 2e-3, "atol": 2e-2}
# bfloat16 the same with 8 bits of significand (relative 2**-8; the interpreter truncates where a GPU
# rounds to nearest, up to 2**-7)
BF16_TOL = {"rtol": 2e-2, "atol": 1e-1}


def ints(pe: int, shape, dtype, seed: int = 0):
    """PE pe's operand: integers in [-3, 3], the same wherever it is rebuilt."""
    g = torch.Generator().manual_seed(1000 * seed + pe)
    return torch.randint(-3, 4, shape, generator=g).to(dtype)


def dry_run(call):
    """The kernels a call launches and the torch operations it runs, from a dry capture (unishmem.testing)."""
    import unishmem.testing

    with unishmem.testing.capture(dry=True) as graph:
        call()
    return [launch.fn.__name__ for launch, *_ in graph.launches], graph.ops


@contextlib.contextmanager
def measured_defaults(rows: dict):
    """The measured defaults (_tuned.TABLE, NOTE [measured defaults]) with `rows` put in for the block, then as
    they were, and the workspaces (which hold the plans made under them) freed."""
    from unishmem.kernels import _tuned

    saved = dict(_tuned.TABLE)
    _tuned.TABLE.update(rows)
    try:
        yield
    finally:
        _tuned.TABLE.clear()
        _tuned.TABLE.update(saved)
        unishmem.runtime().free_workspaces()


def check_ag_gemm_sources(rt, seed: int, *args, **kwargs):
    """ag_gemm(x, b, *args, **kwargs) against torch in float32, float16 and bfloat16 over three calls (the
    workspace reused), x symmetric (read in place by the peers), plain (copied in) and strided."""
    n, me = rt.n_pes, rt.my_pe
    m, k, N = 40, 24, 45
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        shard = rt.empty((m, k), dtype=dtype)
        for call in range(3):
            s = seed + 10 * call
            b = ints(99, (k, N), dtype, s)
            shards = [ints(pe, (m, k), dtype, s + 1) for pe in range(n)]
            ref = (torch.cat(shards).float() @ b.float()).to(dtype)  # exact: integers
            for x in (shards[me], shard.copy_(shards[me]), shards[me].t().contiguous().t()):
                assert torch.equal(K.ag_gemm(x, b, *args, **kwargs), ref), (dtype, call)
        rt.barrier_all()  # no peer still reads it
        rt.free(shard)


def check_ag_gemm_gradients(rt, overlap=None):
    """ag_gemm's gradients (a_shard's through gemm_rs, b's on this PE) against torch's on the gathered A,
    every PE's loss the sum of the squares of its c."""
    n, me = rt.n_pes, rt.my_pe
    a = ints(me, (6, 16), torch.float32, 3).requires_grad_()
    w = ints(99, (16, 8), torch.float32, 3).requires_grad_()
    K.ag_gemm(a, w, overlap).square().sum().backward()
    a_all = torch.cat([ints(pe, (6, 16), torch.float32, 3) for pe in range(n)]).requires_grad_()
    w_ref = w.detach().clone().requires_grad_()
    (a_all @ w_ref).square().sum().mul(n).backward()  # every PE's loss, summed through gemm_rs
    assert torch.equal(a.grad, a_all.grad[me * 6 : (me + 1) * 6])
    assert torch.equal(w.grad, w_ref.grad / n)


def normal(pe: int, shape, seed: int = 0, dtype=torch.float16):
    g = torch.Generator().manual_seed(1000 * seed + pe)
    return torch.randn(shape, generator=g).to(dtype)


@spmd
def test_ag_gemm_both_forms_odd_sizes_repeated(rt):
    n = rt.n_pes
    # (a_shard rows, K, N): none divides the 16/32/64 tiles, then one that does
    for seed, (m, k, N) in enumerate([(7, 37, 45), (16, 32, 16)]):
        b = ints(99, (k, N), torch.float32, seed)
        for overlap in (True, False):
            for call in range(2 if seed == 0 else 1):  # again: the next epoch, the other parity
                s = 10 * seed + call
                c = K.ag_gemm(ints(rt.my_pe, (m, k), torch.float32, s), b, overlap=overlap)
                ref = torch.cat([ints(pe, (m, k), torch.float32, s) for pe in range(n)]) @ b
                assert c.shape == (n * m, N) and c.dtype == torch.float32
                assert torch.equal(c, ref), (overlap, m, k, N, call, (c - ref).abs().max())
    # float16: exact on integers, within F16_TOL on random values
    c = K.ag_gemm(ints(rt.my_pe, (5, 24), torch.float16, 7), ints(98, (24, 33), torch.float16, 7))
    ref = (
        torch.cat([ints(pe, (5, 24), torch.float16, 7) for pe in range(n)]).float()
        @ ints(98, (24, 33), torch.float16, 7).float()
    )
    assert c.dtype == torch.float16 and torch.equal(c.float(), ref)
    b = normal(97, (40, 20), 8)
    c = K.ag_gemm(normal(rt.my_pe, (9, 40), 8), b, block_m=16, block_n=32, block_k=16)
    ref = torch.cat([normal(pe, (9, 40), 8) for pe in range(n)]).double() @ b.double()
    torch.testing.assert_close(c.double(), ref, **F16_TOL)
    # bfloat16, accumulated in float32: exact on integers, within BF16_TOL on random values
    bf = torch.bfloat16
    c = K.ag_gemm(ints(rt.my_pe, (5, 24), bf, 9), ints(98, (24, 33), bf, 9), overlap=False)
    ref = torch.cat([ints(pe, (5, 24), bf, 9) for pe in range(n)]).float() @ ints(98, (24, 33), bf, 9).float()
    assert c.dtype == bf and torch.equal(c.float(), ref)
    b = normal(97, (40, 20), 10, bf)
    c = K.ag_gemm(normal(rt.my_pe, (9, 40), 10, bf), b, block_m=16, block_n=32, block_k=16)
    ref = torch.cat([normal(pe, (9, 40), 10, bf) for pe in range(n)]).double() @ b.double()
    torch.testing.assert_close(c.double(), ref, **BF16_TOL)


@spmd
def test_gemm_rs_odd_sizes_uneven_k_repeated(rt):
    n, me = rt.n_pes, rt.my_pe

    def shard_of(full, m):
        return full[me * m : (me + 1) * m]

    # m = M / n rows per PE; each PE's K_local differs (17 + 4 * pe): only M and N must agree
    for m, N, calls in ((5, 45, 2), (16, 32, 1)):
        for overlap in (True, False):  # fused, or torch.matmul then reduce_scatter (NOTE [fuse or not])
            for call in range(calls):
                s = 10 * m + call
                a = [ints(pe, (n * m, 17 + 4 * pe), torch.float32, s) for pe in range(n)]
                bs = [ints(pe, (17 + 4 * pe, N), torch.float32, s + 1) for pe in range(n)]
                c = K.gemm_rs(a[me], bs[me], overlap)
                full = sum(x @ y for x, y in zip(a, bs))
                assert c.shape == (m, N) and torch.equal(c, shard_of(full, m)), (m, N, call, overlap)
    a = [normal(pe, (n * 6, 24), 3) for pe in range(n)]
    bs = [normal(pe, (24, 19), 4) for pe in range(n)]
    c = K.gemm_rs(a[me], bs[me])
    full = sum(x.double() @ y.double() for x, y in zip(a, bs))
    assert c.dtype == torch.float16
    torch.testing.assert_close(c.double(), shard_of(full, 6), **F16_TOL)
    a = [normal(pe, (n * 6, 24), 5, torch.bfloat16) for pe in range(n)]
    bs = [normal(pe, (24, 19), 6, torch.bfloat16) for pe in range(n)]
    c = K.gemm_rs(a[me], bs[me])
    full = sum(x.double() @ y.double() for x, y in zip(a, bs))
    assert c.dtype == torch.bfloat16
    torch.testing.assert_close(c.double(), shard_of(full, 6), **BF16_TOL)


@spmd(sizes=(2, 4))
def test_mismatches_raise_on_every_pe_and_the_job_goes_on(rt):
    me, n = rt.my_pe, rt.n_pes
    b = torch.ones(8, 16)
    # another shard height, another form on PE 1: every PE names what each passed
    raises(
        lambda: K.ag_gemm(torch.ones(5 if me == 1 else 4, 8), b),
        "ag_gemm: the PEs of world disagree: member 0 passes torch.float32 of (a_shard rows, K, block_m, "
        "overlap) [4, 8, 16, 1] (pull), member 1 torch.float32 of (a_shard rows, K, block_m, overlap) "
        "[5, 8, 16, 1] (pull)",
    )
    # b is this PE's own, so N may differ between PEs (gemm_rs's gradient passes b_shard^T, whose K_p may)
    for overlap in (True, False):
        c = K.ag_gemm(torch.ones(4, 8), torch.ones(8, 16 + me), overlap)
        assert torch.equal(c, torch.full((4 * n, 16 + me), 8.0)), overlap
    raises(lambda: K.ag_gemm(torch.ones(4, 8), b, overlap=me != 1), "[4, 8, 16, 0] (unfused)")
    raises(
        lambda: K.gemm_rs(torch.ones(2 * n, 8), torch.ones(8, 20 if me == 1 else 16)),
        "gemm_rs: the PEs of world disagree: member 0 passes torch.float32 of (M, N, block_m, block_n, overlap) "
        f"[{2 * n}, 16, 16, 16, 1] (pull), member 1",
    )
    # one PE's own mistake: it says what, the others who
    bad_k = torch.ones(9 if me == 1 else 8, 16)
    raises(
        lambda: K.ag_gemm(torch.ones(4, 8), bad_k),
        "a_shard of shape [4, 8] and b of shape [9, 16] do not multiply (8 != 9)"
        if me == 1
        else "ag_gemm: member(s) [1] of world rejected their arguments",
    )
    raises(
        lambda: K.gemm_rs(torch.ones(4, 8, dtype=torch.float16 if me == 1 else torch.float32), torch.ones(8, 4)),
        "a and b_shard must both be float16, bfloat16 or float32 (one dtype), got torch.float16 and torch.float32"
        if me == 1
        else "gemm_rs: member(s) [1] of world rejected their arguments",
    )
    raises(
        lambda: K.gemm_rs(torch.ones(n + 1, 8), torch.ones(8, 4)),
        f"gemm_rs: a has M={n + 1} rows, which do not split into {n} equal blocks",
    )
    raises(lambda: K.ag_gemm(torch.ones(4, 8), b, block_n=24), "block_n=24 must be a power of two >= 16")
    raises(lambda: K.ag_gemm(torch.ones(4, 8), b, overlap="yes"), "overlap must be None, True or False, got 'yes'")
    # and the next good call works
    c = K.ag_gemm(torch.full((4, 8), float(me)), b)
    assert torch.equal(c, torch.cat([torch.full((4, 16), 8.0 * pe) for pe in range(n)]))


@spmd(sizes=(2, 4))
def test_each_gemm_fuses_where_measured_faster_else_by_the_rule(rt):
    # NOTE [fuse or not]: overlap=None fuses below FUSED_MAX_BYTES of input per PE, else runs the
    # collective then torch.matmul; a measured default (the table's row) decides where there is one;
    # overlap=True or False forces either; the results are the same and both forms differentiate
    import unishmem.testing
    from unishmem import _config
    from unishmem.kernels import _tuned

    n, me = rt.n_pes, rt.my_pe

    def kernels(call):
        rt.free_workspaces()  # and the call plans, which hold the choice
        with unishmem.testing.capture(dry=True) as graph:
            call()
        return [launch.fn.__name__ for launch, *_ in graph.launches]

    small, b = ints(me, (4, 8), torch.float32), ints(99, (8, 16), torch.float32)
    big = torch.zeros(_tuned.FUSED_MAX_BYTES // 4 // 64, 64)  # FUSED_MAX_BYTES of float32 per PE
    assert kernels(lambda: K.ag_gemm(small, b)) == ["_ag_gemm"]
    assert kernels(lambda: K.ag_gemm(big, torch.zeros(64, 8))) == ["_pull_gather"]  # then torch.matmul
    assert kernels(lambda: K.gemm_rs(ints(me, (2 * n, 8), torch.float32), b)) == ["_gemm_rs"]
    assert kernels(lambda: K.gemm_rs(big[: n * (len(big) // n)], torch.zeros(64, 8))) == ["_pull_reduce"]
    saved = dict(_tuned.TABLE)
    try:
        for what in ("ag_gemm", "gemm_rs"):
            _tuned.TABLE[("cpu", n, what, 8192)] = {
                "variant": "unfused",
                "programs": None,
                "block_bytes": None,
                "warps": None,
            }
        assert kernels(lambda: K.ag_gemm(small, b)) == ["_pull_gather"]
        assert kernels(lambda: K.ag_gemm(small, b, True)) == ["_ag_gemm"]  # forced
        assert kernels(lambda: K.gemm_rs(ints(me, (2 * n, 8), torch.float32), b)) == ["_pull_reduce"]
        # the same results, and the gradients, unfused
        a = ints(me, (4, 8), torch.float32).requires_grad_()
        w = ints(99, (8, 16), torch.float32).requires_grad_()
        c = K.ag_gemm(a, w)
        assert torch.equal(c, torch.cat([ints(pe, (4, 8), torch.float32) for pe in range(n)]) @ w.detach())
        c.sum().backward()
        assert torch.equal(a.grad, torch.ones(4, 16) @ w.detach().t() * n)  # gemm_rs(ones, w^T), every PE alike
        # fused, with A gathered by the copy engine (NOTE [ag_gemm copy engine]), unless a setting says otherwise
        _tuned.TABLE[("cpu", n, "ag_gemm", 8192)] = {"variant": "fused, copy", "tile": None}
        assert kernels(lambda: K.ag_gemm(small, b)) == ["handshake", "_ag_gemm", "handshake"]
        assert torch.equal(K.ag_gemm(small, b), torch.cat([ints(pe, (4, 8), torch.float32) for pe in range(n)]) @ b)
        with _config.setting("UNISHMEM_COPY_ENGINE", "0"):
            assert kernels(lambda: K.ag_gemm(small, b)) == ["_ag_gemm"]
    finally:
        _tuned.TABLE.clear()
        _tuned.TABLE.update(saved)
        rt.free_workspaces()


def check_both_gemms(rt, team, b_seed: int):
    """Both GEMMs (both ag_gemm forms) on `team`, operands rebuilt from its members' world PEs; b
    differs between teams whose first members differ."""
    pes = [team.translate_pe(i, rt.team_world) for i in range(team.n_pes)]
    b = ints(b_seed + pes[0], (20, 33), torch.float32)
    for overlap in (True, False):
        c = K.ag_gemm(ints(rt.my_pe, (6, 20), torch.float32, 1), b, overlap=overlap, team=team)
        assert torch.equal(c, torch.cat([ints(pe, (6, 20), torch.float32, 1) for pe in pes]) @ b), overlap
    a = [ints(pe, (2 * 5, 9 + pe), torch.float32, 2) for pe in pes]
    bs = [ints(pe, (9 + pe, 18), torch.float32, 3) for pe in pes]
    full = sum(x @ y for x, y in zip(a, bs))
    for overlap in (True, False):
        c = K.gemm_rs(a[team.my_pe], bs[team.my_pe], overlap, team=team)
        assert torch.equal(c, full[team.my_pe * 5 : (team.my_pe + 1) * 5]), overlap


@spmd(sizes=(4,))
def test_both_gemms_on_two_halves_at_once(rt):
    # the strided halves {0, 2} and {1, 3}
    even, odd = rt.team_world.split_strided(0, 2, 2), rt.team_world.split_strided(1, 2, 2)  # both: collective
    half = even or odd
    check_both_gemms(rt, half, 90)
    half.destroy()


@spmd(sizes=(2, 4))
def test_shard_heights_of_one_size_class_share_a_workspace(rt):
    # NOTE [workspaces]: a shard's rows (9..16 here) pick the class; K (ag_gemm) and N (gemm_rs) the key
    n, me = rt.n_pes, rt.my_pe
    rt.free_workspaces()
    b = ints(99, (20, 33), torch.float32)
    free = None
    for m in (9, 16, 11, 9):
        c = K.ag_gemm(ints(me, (m, 20), torch.float32, m), b)
        assert torch.equal(c, torch.cat([ints(pe, (m, 20), torch.float32, m) for pe in range(n)]) @ b), m
        a = [ints(pe, (n * m, 7 + pe), torch.float32, m) for pe in range(n)]
        bs = [ints(pe, (7 + pe, 33), torch.float32, m + 1) for pe in range(n)]
        full = sum(x @ y for x, y in zip(a, bs))
        assert torch.equal(K.gemm_rs(a[me], bs[me]), full[me * m : (me + 1) * m]), m
        if free is None:
            free, held = _active.core().native.heap_free_bytes(), len(_active.core().workspaces)
        assert _active.core().native.heap_free_bytes() == free and len(_active.core().workspaces) == held, m
    K.ag_gemm(ints(me, (17, 20), torch.float32), b)  # 17 rows: the next class
    assert _active.core().native.heap_free_bytes() < free
    rt.free_workspaces()


@spmd
def test_both_tile_loads_descriptors_and_masked_pointers_give_torchs_result(rt):
    # NOTE [GEMM tiles]: K and N of 16 bytes' multiples load through tensor descriptors (TMA on sm_90, zero
    # padding at the edges), others through masked pointers; both in float32, float16 and bfloat16
    import unishmem.testing
    from unishmem.kernels import gemm

    n, me = rt.n_pes, rt.my_pe
    tols = {torch.float32: {"rtol": 0, "atol": 0}, torch.float16: F16_TOL, torch.bfloat16: BF16_TOL}
    for dtype, tol in tols.items():
        for (m, k, N), descriptors in (((24, 72, 40), True), ((24, 36, 20), dtype == torch.float32)):
            b = ints(97, (k, N), dtype, 3)
            shards = [ints(pe, (m, k), dtype, 3) for pe in range(n)]
            with unishmem.testing.capture(dry=True) as graph:
                K.ag_gemm(shards[me], b, overlap=True)
            flags = [kwargs["DESCRIPTORS"] for kernel, _, _, kwargs in graph.launches if kernel is gemm._ag_gemm]
            assert flags == [descriptors], (dtype, k, N, flags)
            c = K.ag_gemm(shards[me], b, overlap=True)
            torch.testing.assert_close(c.float(), torch.cat(shards).float() @ b.float(), **tol)
            a = ints(me, (n * m, k), dtype, 4)
            bs = ints(me + 50, (k, N), dtype, 4)
            ref = sum(
                ints(pe, (n * m, k), dtype, 4).float() @ ints(pe + 50, (k, N), dtype, 4).float() for pe in range(n)
            )
            c = K.gemm_rs(a, bs, overlap=True)
            torch.testing.assert_close(c.float(), ref[me * m : (me + 1) * m], **tol)
            part = gemm.gemm_part(a, bs, torch.empty((n * m, N), dtype=dtype))
            torch.testing.assert_close(part.float(), a.float() @ bs.float(), **tol)
    rt.free_workspaces()


@spmd
def test_both_gemms_pull_on_one_node_and_push_alike(rt):
    # NOTE [ag_gemm pull], NOTE [gemm_rs pull]: every member reachable (one host), ag_gemm copies the peers'
    # chunks itself and gemm_rs's owner reads the staged tiles in place, a signal per row of tiles;
    # UNISHMEM_PULL=0 pushes chunks and tiles. Small blocks make several chunks and rows of several tiles,
    # three calls use both halves of the workspaces and the first again, and a symmetric a_shard is read
    # in place by the peers: the call ends only once they have, so the next copy_ into it is safe.
    from unishmem import _config

    n, me = rt.n_pes, rt.my_pe
    m, N = 40, 45
    shard = rt.empty((m, 24), dtype=torch.float32)
    for pull in ("1", "0"):
        with _config.setting("UNISHMEM_PULL", pull):
            for call in range(3):
                s = 100 + 10 * call
                a = [ints(pe, (n * m, 20 + pe), torch.float32, s) for pe in range(n)]
                bs = [ints(pe, (20 + pe, N), torch.float32, s + 1) for pe in range(n)]
                c = K.gemm_rs(a[me], bs[me], True, block_m=16, block_n=16, block_k=16)
                full = sum(x @ y for x, y in zip(a, bs))
                assert torch.equal(c, full[me * m : (me + 1) * m]), (pull, call)
                b = ints(99, (24, N), torch.float32, s)
                shards = [ints(pe, (m, 24), torch.float32, s + 2) for pe in range(n)]
                for x in (shards[me], shard.copy_(shards[me])):  # copied in, then in place
                    c = K.ag_gemm(x, b, True, block_m=16, block_n=16, block_k=16)
                    assert torch.equal(c, torch.cat(shards) @ b), (pull, call)
        rt.free_workspaces()  # the next setting's plans and workspaces are its own
    rt.free(shard)


@spmd(sizes=(2,))
def test_the_fused_tile_comes_from_the_setting_else_the_measured_default_else_the_architecture(rt):
    # NOTE [GEMM tiles], NOTE [measured defaults]: UNISHMEM_GEMM_TILE wins over a fused row's `tile`, which
    # wins over the architecture's; block_* arguments win over all; a tile caps each block at its dimension
    import unishmem.testing
    from unishmem import _config
    from unishmem.kernels import _tuned, gemm

    n, me = rt.n_pes, rt.my_pe
    a, b = ints(me, (64, 64), torch.float32), ints(99, (64, 64), torch.float32)
    ref = torch.cat([ints(pe, (64, 64), torch.float32) for pe in range(n)]) @ b

    def blocks(**kw):
        rt.free_workspaces()  # (a plan keeps the tile it was made with)
        with unishmem.testing.capture(dry=True) as graph:
            K.ag_gemm(a, b, True, **kw)
        (launch,) = [kwargs for kernel, _, _, kwargs in graph.launches if kernel is gemm._ag_gemm]
        assert torch.equal(K.ag_gemm(a, b, True, **kw), ref)
        return launch["BLOCK_M"], launch["BLOCK_N"], launch["BLOCK_K"]

    assert blocks() == (64, 64, 64)  # the interpreter's tile, 128x128x64, capped by the 64x64x64 shapes
    saved = dict(_tuned.TABLE)
    try:
        # (16 KiB per PE: the 8 KiB class)
        _tuned.TABLE[("cpu", n, "ag_gemm", 8192)] = {"variant": "fused", "tile": "16x32x16"}
        assert blocks() == (16, 32, 16)
        with _config.setting("UNISHMEM_GEMM_TILE", "32x16x32"):
            assert blocks() == (32, 16, 32)
            assert blocks(block_m=64) == (64, 16, 32)
    finally:
        _tuned.TABLE.clear()
        _tuned.TABLE.update(saved)
        rt.free_workspaces()


@spmd(sizes=(2, 4))
def test_warm_gemms_replay_from_a_capture_pulling_and_pushing_through_descriptors(rt):
    # NOTE [call counter]: a warm call's launch, replayed with the same arguments as a CUDA graph would,
    # gives the result for the inputs' new values; here with the tile through tensor descriptors (K and N
    # 16-byte multiples, NOTE [GEMM tiles]) and both GEMMs pulling (NOTE [ag_gemm pull], [gemm_rs pull])
    # and pushing; the capture holds the one launch and nothing else (no host sync, no torch op)
    import unishmem.testing
    from unishmem import _config

    n, me = rt.n_pes, rt.my_pe
    w = ints(99, (8, 12), torch.float32)
    calls = {
        "ag_gemm": (lambda x: K.ag_gemm(x, w, True), lambda xs: torch.cat(list(xs)) @ w),
        "gemm_rs": (lambda x: K.gemm_rs(x, w, True), lambda xs: (xs @ w).sum(0).chunk(n)[me]),
    }
    for pull in ("1", "0"):
        with _config.setting("UNISHMEM_PULL", pull):
            for name, (call, reference) in calls.items():
                rt.free_workspaces()
                x = ints(me, (4 * n, 8), torch.float32)
                call(x)  # warm: the workspace is made outside the capture
                with unishmem.testing.capture() as graph:
                    out = call(x)
                assert len(graph.launches) == 1 and graph.launches[0][3]["DESCRIPTORS"], (name, graph.launches)
                assert graph.ops == [], (name, graph.ops)
                for seed in range(1, 6):
                    x.copy_(ints(me, x.shape, x.dtype, seed))
                    graph.replay()
                    xs = torch.stack([ints(pe, x.shape, x.dtype, seed) for pe in range(n)])
                    assert torch.equal(out, reference(xs)), (name, pull, seed)
    rt.free_workspaces()


@spmd
def test_ag_gemm_by_the_copy_engine_in_place_copied_in_strided_and_replayed(rt):
    # NOTE [ag_gemm copy engine]: with UNISHMEM_COPY_ENGINE=1 (every member reachable: one host) the launch
    # only multiplies, between two handshakes, and torch copies bring each peer's shard and set its word;
    # a symmetric a_shard is read in place by the peers, a plain one staged by torch, a strided one copied
    # first; three calls (the one A and its words reused); float32, float16, bfloat16; autograd; captured
    # and replayed after the inputs change, one PE late to a replay
    import time

    import unishmem.testing
    from unishmem import _config

    n, me = rt.n_pes, rt.my_pe
    with _config.setting("UNISHMEM_COPY_ENGINE", "1"):
        check_ag_gemm_sources(rt, 200, True, block_m=16, block_n=16, block_k=16)
        check_ag_gemm_gradients(rt, True)
        # what a warm call runs: two handshakes around the launch, which gathers nothing itself
        x = ints(me, (4 * n, 8), torch.float32)
        b = ints(98, (8, 12), torch.float32)
        K.ag_gemm(x, b, True)  # warm: the workspace is made outside the capture
        with unishmem.testing.capture() as graph:
            out = K.ag_gemm(x, b, True)
        names = [(launch.fn.__name__, kwargs.get("GATHER")) for launch, _, _, kwargs in graph.launches]
        assert names == [("handshake", None), ("_ag_gemm", "copy"), ("handshake", None)], names
        assert graph.ops == ["copy_"] * (1 + 2 * (n - 1)), graph.ops  # x into src; each peer's rows and word
        for seed in range(1, 6):
            x.copy_(ints(me, x.shape, x.dtype, seed))
            if seed == 3 and me == n - 1:
                time.sleep(0.2)
            graph.replay()
            assert torch.equal(out, torch.cat([ints(pe, x.shape, x.dtype, seed) for pe in range(n)]) @ b), seed
    rt.free_workspaces()


@spmd(sizes=(2,))
def test_a_pe_alone_with_the_copy_engine_raises_on_every_pe_and_the_job_goes_on(rt):
    # every member must gather alike (GATHERS): a setting on one PE only is a mismatch every PE names
    from unishmem import _config

    me = rt.my_pe
    a, b = torch.ones(4, 8), torch.ones(8, 16)
    with _config.setting("UNISHMEM_COPY_ENGINE", "1" if me == 1 else "0"):
        raises(
            lambda: K.ag_gemm(a, b, True),
            "member 0 passes torch.float32 of (a_shard rows, K, block_m, overlap) [4, 8, 16, 1] (pull), "
            "member 1 torch.float32 of (a_shard rows, K, block_m, overlap) [4, 8, 16, 1] (copy)",
        )
    assert torch.equal(K.ag_gemm(a, b, True), torch.full((8, 16), 8.0))
    rt.free_workspaces()


@spmd
def test_ag_gemm_chunked_overlaps_torch_matmul_with_the_copy_engine(rt):
    # NOTE [ag_gemm chunked]: overlap=None from FUSED_MAX_BYTES on with UNISHMEM_COPY_ENGINE=1, or where the
    # measured default says "chunked": two handshakes, a device copy per peer's shard and a torch.matmul per
    # shard into its rows; in place, copied in and strided, three calls, float32/16/bf16, autograd, a
    # replayed capture; without the setting the large call runs unfused, and overlap=True or False still force
    import unishmem.testing
    from unishmem import _config
    from unishmem.kernels import _tuned

    n, me = rt.n_pes, rt.my_pe

    big_rows = _tuned.FUSED_MAX_BYTES // 4 // 64  # FUSED_MAX_BYTES of float32 per PE
    big = ints(me, (big_rows, 64), torch.float32)
    w = ints(98, (64, 8), torch.float32)
    big_ref = torch.cat([ints(pe, (big_rows, 64), torch.float32) for pe in range(n)]) @ w
    with _config.setting("UNISHMEM_COPY_ENGINE", "1"):
        launches, ops = dry_run(lambda: K.ag_gemm(big, w))
        assert launches == ["handshake", "handshake"] and ops.count("mm") == n, (launches, ops)
        assert torch.equal(K.ag_gemm(big, w), big_ref)
        assert dry_run(lambda: K.ag_gemm(big, w, True))[0] == ["handshake", "_ag_gemm", "handshake"]
    rt.free_workspaces()
    with _config.setting("UNISHMEM_COPY_ENGINE", "0"):
        assert dry_run(lambda: K.ag_gemm(big, w))[0] == ["_pull_gather"]  # then torch.matmul
    with measured_defaults({("cpu", n, "ag_gemm", 8192): {"variant": "chunked"}}):  # (a_shard of a few KiB)
        check_ag_gemm_sources(rt, 300)
        check_ag_gemm_gradients(rt)
        x = ints(me, (4 * n, 8), torch.float32)
        b = ints(98, (8, 12), torch.float32)
        K.ag_gemm(x, b)  # warm: the workspace is made outside the capture
        with unishmem.testing.capture() as graph:
            out = K.ag_gemm(x, b)
        assert [launch.fn.__name__ for launch, *_ in graph.launches] == ["handshake", "handshake"]
        assert graph.ops == ["copy_"] * n + ["mm"] * n, graph.ops  # x into src; each peer's rows; a matmul each
        for seed in range(1, 6):
            x.copy_(ints(me, x.shape, x.dtype, seed))
            graph.replay()
            assert torch.equal(out, torch.cat([ints(pe, x.shape, x.dtype, seed) for pe in range(n)]) @ b), seed


@spmd
def test_gemm_rs_chunked_pushes_each_owners_block_by_the_copy_engine(rt):
    # NOTE [gemm_rs chunked]: chosen as ag_gemm's chunked form is (NOTE [fuse or not]): two handshakes, a
    # torch.matmul per owner's block, a device copy of each other owner's to it, one sum of the received
    # blocks; K_p differing between PEs, three calls, float32/16/bf16, autograd, a replayed capture; without
    # the setting the large call runs unfused, and a PE alone with the setting is a mismatch every PE names
    import unishmem.testing
    from unishmem import _config
    from unishmem.kernels import _tuned

    n, me = rt.n_pes, rt.my_pe

    big = torch.zeros(_tuned.FUSED_MAX_BYTES // 4 // 64 // n * n, 64)  # FUSED_MAX_BYTES of float32 per PE
    w = torch.zeros(64, 8)
    with _config.setting("UNISHMEM_COPY_ENGINE", "1"):
        K.gemm_rs(big, w)  # (its workspace made outside the capture)
        launches, ops = dry_run(lambda: K.gemm_rs(big, w))
        assert launches == ["handshake", "handshake"], launches
        assert ops == ["mm", "copy_"] * (n - 1) + ["mm", "sum"], ops
    rt.free_workspaces()
    with _config.setting("UNISHMEM_COPY_ENGINE", "0"):
        assert dry_run(lambda: K.gemm_rs(big, w))[0] == ["_pull_reduce"]  # after torch.matmul
    if n > 1:
        with _config.setting("UNISHMEM_COPY_ENGINE", "1" if me == 1 else "0"):
            raises(lambda: K.gemm_rs(big, w), f"[{len(big)}, 8, 128, 16, 0] (unfused), member 1 torch.float32")
    with measured_defaults({("cpu", n, "gemm_rs", 8192): {"variant": "chunked"}}):  # (a of a few KiB)
        m, N = 40, 45
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for call in range(3):
                s = 400 + 10 * call
                a = [ints(pe, (n * m, 20 + pe), dtype, s) for pe in range(n)]
                bs = [ints(pe, (20 + pe, N), dtype, s + 1) for pe in range(n)]
                full = sum(x.float() @ y.float() for x, y in zip(a, bs))  # exact: integers
                assert torch.equal(K.gemm_rs(a[me], bs[me]), full[me * m : (me + 1) * m].to(dtype)), (dtype, call)
        # (K_p differs between PEs: the gradient's ag_gemm has b_shard^T of another N on each)
        a = ints(me, (2 * n, 16 + me), torch.float32, 5).requires_grad_()
        b = ints(me, (16 + me, 8), torch.float32, 6).requires_grad_()
        K.gemm_rs(a, b).square().sum().backward()
        a_ref, b_ref = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        others = [
            ints(pe, (2 * n, 16 + pe), torch.float32, 5) @ ints(pe, (16 + pe, 8), torch.float32, 6) for pe in range(n)
        ]
        others[me] = 0
        (a_ref @ b_ref + sum(others)).square().sum().backward()  # every PE's loss: the whole sum's squares
        assert torch.equal(a.grad, a_ref.grad) and torch.equal(b.grad, b_ref.grad)
        x, y = ints(me, (4 * n, 8), torch.float32), ints(me, (8, 12), torch.float32, 1)
        K.gemm_rs(x, y)  # warm: the workspace is made outside the capture
        with unishmem.testing.capture() as graph:
            out = K.gemm_rs(x, y)
        assert [launch.fn.__name__ for launch, *_ in graph.launches] == ["handshake", "handshake"]
        for seed in range(1, 6):
            x.copy_(ints(me, x.shape, x.dtype, seed))
            graph.replay()
            full = sum(ints(pe, x.shape, x.dtype, seed) @ ints(pe, (8, 12), torch.float32, 1) for pe in range(n))
            assert torch.equal(out, full.chunk(n)[me]), seed
