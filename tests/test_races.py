"""The race checker (UNISHMEM_RACE_CHECK, NOTE [race check] in _races.py): a corpus of kernels with one
known race each, every one beside its corrected twin. Each buggy kernel is reported (on whichever PE sees
the second access: the other PE may see nothing), each twin is clean. The module runs under
UNISHMEM_RACE_CHECK=report, so that a race is recorded where it is seen and the job goes on; one test
switches to 1 and catches the RaceError."""

import os
import types

import pytest
import torch
import triton.language as tl
from spmd import launch, segments, segments_left, spmd

import unishmem
import unishmem.language as shl
from unishmem import _config, _races

SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_RACE_CHECK": "report", "UNISHMEM_DEADLOCK_TIMEOUT": "10"}
N = 16  # int32 elements a message carries


def races_of(rt, run) -> tuple[list[str], int]:
    """run() on every PE, then (the races this PE recorded in it, how many every PE recorded in all)."""
    checker = _races.checker()
    before = len(checker.races)
    run()
    rt.barrier_all()
    mine = checker.races[before:]
    counts = rt.zeros(rt.n_pes, dtype=torch.int64)
    count = rt.zeros(1, dtype=torch.int64)
    count.fill_(len(mine))
    rt.fcollect(counts, count)
    total = int(counts.sum())
    rt.free(count)
    rt.free(counts)
    return mine, total


def reported(rt, run, *parts: str) -> list[str]:
    """The races run() made, at least one on some PE, each naming every one of parts."""
    mine, total = races_of(rt, run)
    assert total >= 1, f"no PE reported a race ({parts})"
    for message in mine:
        assert message.startswith("race: "), message
        for part in parts:
            assert part in message, (part, message)
    return mine


def clean(rt, run) -> None:
    mine, total = races_of(rt, run)
    assert total == 0, mine


def launches(rt, kernel, grid, *args, signals=()):
    """run(twin): a call of kernel[grid](*args, twin, N) that starts with every signal of `signals` zero
    on every PE: False runs the buggy form of a corpus kernel, True its corrected twin."""

    def run(twin):
        for signal in signals:
            signal.zero_()
        rt.barrier_all()
        return lambda: kernel[grid](*args, twin, N)

    return run


# ---- 1. a peer's data read before the wait for its signal ----------------------------------------


@unishmem.jit
def read_then_wait(inbox, source, ready, out, WAIT_FIRST: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    if shl.my_pe() == 0:
        shl.putmem_signal(inbox, source, N * 4, ready, 1, shl.SIGNAL_SET, 1)
    else:
        if WAIT_FIRST:
            shl.signal_wait_until(ready, shl.CMP_GE, 1)
        tl.store(out + offs, tl.load(inbox + offs))
        if not WAIT_FIRST:
            shl.signal_wait_until(ready, shl.CMP_GE, 1)


@spmd(sizes=(2,))
def test_a_read_before_the_wait_is_reported_and_after_it_is_not(rt):
    inbox, source, ready = rt.zeros(N, dtype=torch.int32), rt.zeros(N, dtype=torch.int32), rt.signals(1)
    source.copy_(torch.arange(N, dtype=torch.int32))
    out = rt.zeros(N, dtype=torch.int32)

    run = launches(rt, read_then_wait, (1,), inbox, source, ready, out, signals=[ready])
    reported(rt, run(False), "race: ", "putmem_signal to PE 1 by PE 0", "read by PE 1", "test_races.py:")
    clean(rt, run(True))
    for t in (inbox, source, ready, out):
        rt.free(t)


# ---- 2. a plain put (or stores through remote_ptr), then signal_op with no fence (docs/ordering.md, rule 1)


@unishmem.jit
def send_then_signal(inbox, source, ready, out, STORES: tl.constexpr, FENCE: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    if shl.my_pe() == 0:
        if STORES:
            shl.store_remote(inbox + offs, offs, 1)
        else:
            shl.putmem(inbox, source, N * 4, 1)
        if FENCE:
            shl.fence()
        shl.signal_op(ready, 1, shl.SIGNAL_SET, 1)
    else:
        shl.signal_wait_until(ready, shl.CMP_GE, 1)
        tl.store(out + offs, tl.load(inbox + offs))


@spmd(sizes=(2,))
def test_a_signal_after_a_put_or_remote_stores_without_a_fence_does_not_publish_them(rt):
    inbox, source, ready = rt.zeros(N, dtype=torch.int32), rt.zeros(N, dtype=torch.int32), rt.signals(1)
    out = rt.zeros(N, dtype=torch.int32)
    for stores, side in ((False, "put to PE 1 by PE 0"), (True, "store to another PE by PE 0")):
        run = launches(rt, send_then_signal, (1,), inbox, source, ready, out, stores, signals=[ready])
        mine = reported(rt, run(False), side, "still in flight", "read by PE 1", "fence or quiet")
        assert rt.my_pe == 1 or not mine  # only the reader can see it: the put or stores came first
        clean(rt, run(True))
    for t in (inbox, source, ready, out):
        rt.free(t)


# ---- 3. a receive buffer reused for the next round before the peer has read it -----------------------
# The acknowledgement is sent on arrival instead of after the read, so the sender's next round may land
# while the reader still reads this one. (With no acknowledgement at all, a run in which the sender finishes
# every round before the reader's first wait orders everything the reader does after it: the race shows
# only in runs that interleave, which seeded schedules make likelier; here every run shows it.)


@unishmem.jit
def rounds(inbox, source, ready, done, out, ROUNDS: tl.constexpr, ACK_AFTER_READ: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    for r in range(1, ROUNDS + 1):
        if shl.my_pe() == 0:
            shl.signal_wait_until(done, shl.CMP_GE, r - 1)  # the peer has acknowledged round r - 1
            shl.putmem_signal(inbox, source + (r - 1) * N, N * 4, ready, r, shl.SIGNAL_SET, 1)
        else:
            shl.signal_wait_until(ready, shl.CMP_GE, r)
            if not ACK_AFTER_READ:
                shl.signal_op(done, r, shl.SIGNAL_SET, 0)
            tl.store(out + (r - 1) * N + offs, tl.load(inbox + offs))
            if ACK_AFTER_READ:
                shl.signal_op(done, r, shl.SIGNAL_SET, 0)


@spmd(sizes=(2,))
def test_a_receive_buffer_reused_before_the_peer_has_read_it_is_reported(rt):
    rounds_n = 4
    inbox, ready, done = rt.zeros(N, dtype=torch.int32), rt.signals(1), rt.signals(1)
    source = rt.zeros(rounds_n * N, dtype=torch.int32)
    out = rt.zeros(rounds_n * N, dtype=torch.int32)

    run = launches(rt, rounds, (1,), inbox, source, ready, done, out, rounds_n, signals=[ready, done])
    reported(rt, run(False), "putmem_signal to PE 1 by PE 0", "read by PE 1", "rounds", "reuses a buffer")
    clean(rt, run(True))
    for t in (inbox, source, ready, done, out):
        rt.free(t)


# ---- 4. two programs of one PE exchanging data with no signal -------------------------------------


@unishmem.jit
def two_programs(buf, flag, out, SIGNAL: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    if tl.program_id(0) == 0:
        tl.store(buf + offs, offs)
        if SIGNAL:
            shl.signal_op(flag, 1, shl.SIGNAL_SET, shl.my_pe())
    else:
        if SIGNAL:
            shl.signal_wait_until(flag, shl.CMP_GE, 1)
        tl.store(out + offs, tl.load(buf + offs))


@spmd(sizes=(2,))
def test_two_programs_exchanging_data_without_a_signal_are_reported(rt):
    buf, flag, out = rt.zeros(N, dtype=torch.int32), rt.signals(1), rt.zeros(N, dtype=torch.int32)

    run = launches(rt, two_programs, (2,), buf, flag, out, signals=[flag])
    # each PE's programs race on its own buffer: every PE sees its own race
    mine = reported(rt, run(False), f"by PE {rt.my_pe}, program 1", f"by PE {rt.my_pe}, program 0", "two programs")
    assert len(mine) == 1, mine  # once per pair of sites
    clean(rt, run(True))

    # UNISHMEM_RACE_CHECK=1: the first race raises, in the launch that made it
    with _config.setting("UNISHMEM_RACE_CHECK", "1"):
        flag.zero_()
        with pytest.raises(unishmem.RaceError, match=r"^race: (read|write) by PE \d, program \d, kernel racing_twice"):
            racing_twice[(2,)](buf, out, N)
    rt.barrier_all()
    for t in (buf, flag, out):
        rt.free(t)


@unishmem.jit
def racing_twice(buf, out, N: tl.constexpr):
    offs = tl.arange(0, N)
    if tl.program_id(0) == 0:
        tl.store(buf + offs, offs)
    else:
        tl.store(out + offs, tl.load(buf + offs))


# ---- 5. two PEs writing one region of a third ---------------------------------------------------------


@unishmem.jit
def two_writers(region, source, ready, DISJOINT: tl.constexpr, N: tl.constexpr):
    me = shl.my_pe()
    if me < 2:
        at = region + me * N if DISJOINT else region
        shl.putmem_signal(at, source, N * 4, ready, 1, shl.SIGNAL_ADD, 2)
    if me == 2:
        shl.signal_wait_until(ready, shl.CMP_GE, 2)


@spmd(sizes=(4,))
def test_two_pes_writing_one_region_of_a_third_are_reported(rt):
    region, source, ready = rt.zeros(2 * N, dtype=torch.int32), rt.zeros(N, dtype=torch.int32), rt.signals(1)

    run = launches(rt, two_writers, (1,), region, source, ready, signals=[ready])
    mine = reported(rt, run(False), "putmem_signal to PE 2 by PE", "from heap offset")
    assert rt.my_pe < 2 or not mine  # the writers see it, the third PE does not
    clean(rt, run(True))
    for t in (region, source, ready):
        rt.free(t)


# ---- 6. no barrier between a kernel's puts and the host's read ------------------------------------------


@unishmem.jit
def push_right(inbox, source, N: tl.constexpr):
    shl.putmem(inbox, source, N * 4, (shl.my_pe() + 1) % shl.n_pes())


@spmd(sizes=(2,))
def test_a_host_read_with_no_barrier_after_the_peers_puts_is_reported(rt):
    inbox, source = rt.zeros(N, dtype=torch.int32), rt.zeros(N, dtype=torch.int32)
    local = torch.zeros(N, dtype=torch.int32)

    def run(barrier):
        def call():
            push_right[(1,)](inbox, source, N)
            if barrier:
                rt.barrier_all()
            rt.get(local, inbox, rt.my_pe)

        rt.barrier_all()
        return call

    reported(rt, run(False), "get from PE", "put to PE", "rt.barrier_all")
    clean(rt, run(True))
    rt.free(inbox)
    rt.free(source)


# ---- no false alarms: the library's kernels ----------------------------------------------------------


@spmd(sizes=(2, 4))
def test_the_library_kernels_run_clean_under_several_seeds(rt):
    # every kernel of unishmem.kernels in each of its forms, under seeded schedules; the examples and
    # tutorials run clean too (test_examples_and_tutorials_run_clean_under_the_check)
    import unishmem.kernels as K
    import unishmem.testing

    n, me = rt.n_pes, rt.my_pe
    x = torch.arange(64.0 * n) + me
    xs = torch.stack([torch.arange(64.0 * n) + pe for pe in range(n)])
    a, b = torch.randn(16, 32), torch.randn(32, 24)
    g = torch.Generator().manual_seed(me)
    tokens = torch.randn(8, 32, generator=g)
    ids = torch.randint(0, 2 * n, (8, 2), generator=g)
    weights = torch.rand(8, 2, generator=g)

    def kernels():
        for pull, copy in (("1", "0"), ("0", "0"), ("1", "1")):
            with _config.setting("UNISHMEM_PULL", pull), _config.setting("UNISHMEM_COPY_ENGINE", copy):
                for algorithm in ("one_shot", "two_shot"):
                    assert torch.equal(K.all_reduce(x, algorithm=algorithm), xs.sum(0)), algorithm
                assert torch.equal(K.all_gather(x), xs.reshape(-1))
                assert torch.equal(K.reduce_scatter(x), xs.sum(0).chunk(n)[me])
                K.all_to_all(x)
                if copy == "1":  # (NOTE [ag_gemm copy engine]; its torch copies are not seen, its waits are)
                    K.ag_gemm(a, b, overlap=True)
        for overlap in (True, False):
            K.ag_gemm(a, b, overlap=overlap)
            K.gemm_rs(a, b, overlap=overlap)
        expert_tokens, counts, handle = K.dispatch(tokens, ids, weights, 2 * n)
        K.combine(expert_tokens, handle)

    clean(rt, lambda: unishmem.testing.under_seeds(kernels, seeds=range(1, 3)))
    rt.free_workspaces()


# ---- a job under the check ------------------------------------------------------------------------------


RACY = os.path.join(os.path.dirname(__file__), "programs", "racy_kernel.py")


@pytest.mark.parametrize("mode", ["1", "report"])
def test_a_race_ends_the_job_or_is_reported_at_the_end_and_the_shared_state_goes_with_the_job(mode):
    before = segments()
    proc = launch([RACY], 2, timeout=120, env={"UNISHMEM_RACE_CHECK": mode})
    assert "race: write by PE " in proc.stderr and "kernel both_write at racy_kernel.py:" in proc.stderr, proc.stderr
    if mode == "1":  # the first race raises, like a failed assertion
        assert proc.returncode != 0 and "unishmem.errors.RaceError: race: " in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count("finished") == 2 and "race(s) found (UNISHMEM_RACE_CHECK=report)" in proc.stderr
    assert not segments_left(before)


@pytest.mark.parametrize("who", ["maker", "mapper"])
def test_a_pe_killed_while_the_check_starts_leaves_no_segment(who):
    before = segments()
    proc = launch([RACY], 2, timeout=120, env={"UNISHMEM_RACE_CHECK": "1", "RACY_KILL": who})
    assert proc.returncode != 0 and "killed by signal SIGKILL" in proc.stderr, proc.stderr
    assert not segments_left(before)


def test_the_check_needs_the_host_backend():
    pytest.importorskip("triton")
    with _config.setting("UNISHMEM_RACE_CHECK", "1"), pytest.raises(unishmem.UnishmemError, match="host backend"):
        _races.start(types.SimpleNamespace(backend="nvshmem", n_pes=1), None)


# ---- the host API -----------------------------------------------------------------------------------------


@spmd(sizes=(2,))
def test_the_host_apis_puts_signals_and_waits_are_checked_as_the_device_librarys(rt):
    inbox, ready = rt.zeros(N, dtype=torch.int32), rt.signals(1)
    local = torch.arange(N, dtype=torch.int32)

    def run(publish):
        def call():
            if rt.my_pe == 0:
                if publish == "put_signal":
                    rt.put_signal(inbox, local, ready, 1, 1)
                else:
                    rt.put(inbox, local, 1)
                    if publish == "quiet":
                        rt.quiet()
                    rt.signal_op(ready, 1, 1)
            else:
                rt.signal_wait_until(ready, unishmem.CMP.GE, 1)
                rt.get(torch.empty(N, dtype=torch.int32), inbox, 1)

        ready.zero_()
        rt.barrier_all()
        return call

    mine = reported(rt, run("nothing"), "get from PE 1 by PE 1, the host", "put to PE 1 by PE 0, the host", "quiet")
    assert rt.my_pe == 1 or not mine
    clean(rt, run("quiet"))
    clean(rt, run("put_signal"))
    rt.free(inbox)
    rt.free(ready)
