"""Hang reports (NOTE [hang report]): the four classic hangs, on the host API and in kernels under
TRITON_INTERPRET=1, at 2 and 4 PEs. Each test knows which PE it made hang, on which word, for which
value, and what that word holds, and checks that the DeadlockError every PE raises says so.

Every scenario is arranged so that every PE ends up waiting (the deadlock check's condition): the
PEs not involved wait in barrier_all, whose arrival they take back as they raise (NOTE [taken-back
arrival]), so that the job goes on in step. Buffers stay allocated to the end, so that no
scenario's word reuses the heap offset of another's signals (the report shows the last signal to
each peer)."""

import glob
import inspect
import os
import re
import subprocess
import time

import pytest
from spmd import launch, segments, segments_left, spmd

import unishmem
import unishmem.language as shl
from unishmem import CMP, SIGNAL, DeadlockError

DEADLOCK_S = 1.0
SPMD_ENV = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": str(DEADLOCK_S)}
SIZES = (2, 4)
KEPT = []  # every scenario's buffers, freed by the last test
# (waiter, expect, signaller, target, skipper) per scenario, for n PEs; -1: nobody
SCENARIOS = {
    "missing_signal": lambda n: (0, 1, -1, -1, -1),  # PE 0 waits for a signal nobody sends
    "wrong_expected_value": lambda n: (0, 2, 1, 0, -1),  # PE 1 sets 1, PE 0 waits for 2
    "barrier_skipped": lambda n: (-1, 1, -1, -1, n - 1),  # the last PE never reaches barrier_all
    "wrong_pe_buffer": lambda n: (0, 1, 1, 1, -1),  # PE 1 signals its own copy, not PE 0's
}


@unishmem.jit
def classic_hang(sig, never, waiter, expect, signaller, target, skipper):
    me = shl.my_pe()
    if me == signaller:
        shl.signal_op(sig, 1, shl.SIGNAL_SET, target)
    if me == waiter:
        shl.signal_wait_until(sig, shl.CMP_EQ, expect)  # KERNEL WAIT
    elif me == skipper:
        shl.signal_wait_until(never, shl.CMP_EQ, 1)  # KERNEL SKIPPER
    else:
        shl.barrier_all()  # KERNEL BARRIER


def host_hang(rt, sig, never, waiter, expect, signaller, target, skipper):
    if rt.my_pe == signaller:
        rt.signal_op(sig, 1, target, SIGNAL.SET)
    if rt.my_pe == waiter:
        rt.signal_wait_until(sig, CMP.EQ, expect)  # HOST WAIT
    elif rt.my_pe == skipper:
        rt.signal_wait_until(never, CMP.EQ, 1)  # HOST SKIPPER
    else:
        rt.barrier_all()  # HOST BARRIER


def _line(fn, mark: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if mark in text)


def _run(rt, name: str, in_kernel: bool):
    """Make scenario `name` hang; check the report every PE gets."""
    n, me = rt.n_pes, rt.my_pe
    waiter, expect, signaller, target, skipper = SCENARIOS[name](n)
    sig, never = rt.signals(1), rt.signals(1)
    KEPT.extend((sig, never))
    offset, never_offset = sig.data_ptr() - rt.heap_base, never.data_ptr() - rt.heap_base
    start = time.monotonic()
    try:
        if in_kernel:
            classic_hang[(1,)](sig, never, waiter, expect, signaller, target, skipper)
        else:
            host_hang(rt, sig, never, waiter, expect, signaller, target, skipper)
    except DeadlockError as e:
        report, error = str(e), e
    else:
        raise AssertionError(f"{name}: no DeadlockError on PE {me}")
    took = time.monotonic() - start
    blocked_on = waiter if waiter >= 0 else skipper
    assert took < DEADLOCK_S + 5, f"{name}: the report took {took:.1f} s"
    site = (
        (lambda mark: f"kernel classic_hang at test_hang.py:{_line(classic_hang.fn, 'KERNEL ' + mark)}")
        if in_kernel
        else (lambda mark: f"test_hang.py:{_line(host_hang, 'HOST ' + mark)} in host_hang")
    )
    label = "program (0, 0, 0), " if in_kernel else ""
    actual = 1 if (signaller, target) == (1, 0) else 0
    lines = report.splitlines()
    assert lines[0] == f"deadlock: every PE has been waiting for {DEADLOCK_S:g} s and none can make progress", report

    def entry(pe: int, what: str, mark: str, because: str):
        head = f"PE {pe} waits for {what} [{label}{site(mark)}]"
        assert head in lines, f"{name}: no line\n{head}\nin the report on PE {me}:\n{report}"
        assert lines[lines.index(head) + 1].startswith(f"  can never be satisfied: {because}"), (
            f"{name}: PE {pe}'s verdict is not '{because}' in:\n{report}"
        )

    if waiter >= 0:
        word = f"signal at heap offset {offset} to become == {expect} (it is {actual})"
        because = {
            "missing_signal": "no PE has signalled this word",
            "wrong_expected_value": f"PE 1 last set it to 1, and the wait expects == {expect}",
            "wrong_pe_buffer": f"no PE signalled this word, but PE 1 signalled heap offset {offset} on PE 1 "
            "(a wait on the wrong PE's buffer",
        }[name]
        entry(waiter, word, "WAIT", because)
        blocked_what = word
    else:
        blocked_what = f"signal at heap offset {never_offset} to become == 1 (it is 0)"
        entry(skipper, blocked_what, "SKIPPER", "no PE has signalled this word")
    for pe in range(n):
        if pe not in (waiter, skipper):
            head = next(
                (x for x in lines if x.startswith(f"PE {pe} waits for PE {blocked_on} to reach the barrier")), None
            )
            assert head is not None and head.endswith(f"[{label}{site('BARRIER')}]"), f"{name}: PE {pe}:\n{report}"
            assert lines[lines.index(head) + 1] == (
                f"  can never be satisfied: PE {blocked_on} is not in a barrier; "
                f"it waits for {blocked_what} [{label}{site('WAIT' if waiter >= 0 else 'SKIPPER')}]"
            ), report
    # the structured report behind the text says the same
    mine = {r.pe: r for r in error.report}
    assert sorted(mine) == list(range(n)) and all(r.status == "waiting" for r in mine.values())
    if signaller >= 0:
        assert [(s.writer, s.peer, s.offset, s.value) for s in mine[signaller].signals if s.offset == offset] == [
            (signaller, target, offset, 1)
        ]


@spmd(sizes=SIZES)
def test_classic_hangs_on_the_host_api(rt):
    for name in SCENARIOS:
        _run(rt, name, in_kernel=False)


@spmd(sizes=SIZES)
def test_classic_hangs_in_kernels(rt):
    for name in SCENARIOS:
        _run(rt, name, in_kernel=True)
    rt.barrier_all()
    for t in KEPT:
        rt.free(t)


HUNG = os.path.join(os.path.dirname(__file__), "programs", "hung_kernel.py")


@pytest.mark.slow
def test_the_watchdog_reports_a_hung_kernel_and_ends_the_job():
    # The deadlock check is off: only the watchdog can end this job (NOTE [hang report])
    for n in SIZES:
        before = segments()
        start = time.monotonic()
        proc = launch(
            ["--hang-timeout", "2", HUNG],
            n,
            timeout=120,
            env={"UNISHMEM_DEADLOCK_TIMEOUT": "0", "UNISHMEM_SYMMETRIC_SIZE": "16M"},
        )
        took = time.monotonic() - start
        assert proc.returncode == 124, proc.stdout + proc.stderr
        assert "NOT HUNG" not in proc.stdout
        offset = re.search(r"READY pe=0 offset=(\d+)", proc.stdout).group(1)
        report = proc.stderr[proc.stderr.index("[unishmem] hang:") :]
        assert report.startswith("[unishmem] hang: a launch has not finished after 2 s (UNISHMEM_HANG_TIMEOUT)")
        wait_line = _line_of(HUNG, "HUNG WAIT")
        assert (
            f"PE 0 waits for signal at heap offset {offset} to become == 1 (it is 0) [program (0, 0, 0), "
            f"kernel never_signalled at hung_kernel.py:{wait_line}]\n  can never be satisfied: no PE has "
            "signalled this word"
        ) in report, report
        for pe in range(1, n):
            assert re.search(
                rf"^PE {pe} waits for PE 0 to reach the barrier .*hung_kernel.py:"
                rf"{_line_of(HUNG, 'HUNG BARRIER')}\]\n  can never be satisfied: PE 0 is not in a "
                "barrier",
                report,
                re.M,
            ), report
        assert took < 2 + 30, f"the job took {took:.0f} s"
        assert not segments_left(before)


def _own_hang_dir_job(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """hung_kernel.py at 2 PEs that find their hang directory themselves (under the user's private
    directory, here in tmp_path), as under mpirun or torchrun."""
    env = {"XDG_RUNTIME_DIR": str(tmp_path), "HUNG_OWN_HANG_DIR": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "0"}
    return launch(["--hang-timeout", "2", HUNG, *args], 2, timeout=120, env={**env, "UNISHMEM_SYMMETRIC_SIZE": "16M"})


def test_a_jobs_own_hang_directory_is_removed_when_it_ends(tmp_path):
    proc = _own_hang_dir_job(tmp_path, "--finish")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not glob.glob(str(tmp_path / "unishmem-*" / "hang-*"))


@pytest.mark.slow
def test_a_jobs_own_hang_directory_is_removed_after_its_report(tmp_path):
    proc = _own_hang_dir_job(tmp_path)
    assert proc.returncode == 124 and "[unishmem] hang:" in proc.stderr, proc.stdout + proc.stderr
    assert not glob.glob(str(tmp_path / "unishmem-*" / "hang-*"))


def _line_of(path: str, mark: str) -> int:
    return next(i for i, text in enumerate(open(path), 1) if mark in text)


def test_the_report_names_kernels_past_globals_that_raise_on_any_attribute(monkeypatch):
    """A GPU run's watchdog died finding the kernels' names: torch.classes answers every attribute by
    raising RuntimeError. Such a global is passed over; the kernels are still found."""
    import sys
    import types

    from unishmem import hang

    class Raises:
        def __getattr__(self, name):
            raise RuntimeError(f"no attribute {name}")

    module = types.ModuleType("raises_on_any_attribute")
    module.value = Raises()
    monkeypatch.setitem(sys.modules, module.__name__, module)
    names = hang._jit_functions()
    assert "classic_hang" in names.values(), sorted(names.values())


def test_a_device_read_that_blocks_leaves_the_report_without_values():
    """The report goes out where reading a waited-on word from device memory blocks (hang._within)."""
    from unishmem import hang

    started = time.monotonic()
    assert hang._within(0.2, lambda: time.sleep(30)) is None
    assert time.monotonic() - started < 5
    assert hang._within(5, lambda: [1, 2]) == [1, 2]


def test_a_word_without_its_expected_value_holds_no_verdict():
    """A debug wait table that recorded no expected value: the word's comparison cannot hold (it once
    compared the word read against None and raised)."""
    from unishmem.enums import CMP
    from unishmem.hang import Word

    for cmp in CMP:
        assert not Word(pe=0, offset=0, cmp=int(cmp), value=None, actual=5).holds()
    assert Word(pe=0, offset=0, cmp=int(CMP.GE), value=5, actual=5).holds()
    assert not Word(pe=0, offset=0, cmp=int(CMP.LT), value=5, actual=5).holds()
