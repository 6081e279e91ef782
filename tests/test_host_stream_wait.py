"""rt.signal_wait_until_on_stream: the stream, not the host, waits for a signal (API.md).

The host backend has no streams, so there the call is the wait itself, with signal_wait_until's checks,
dead-peer detection and hang reports. The GPU paths are checked as far as a machine without a GPU allows:
the NVSHMEM module calls NVSHMEM's on-stream wait, which the wheel's library exports, in NVSHMEM's
numbering of comparisons; the stream-wait form the rocshmem backend falls back to (HIP's
hipStreamWaitValue64) is exact for every comparison it takes and refuses the others."""

import inspect
import json
import operator
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import torch
from nvshmem_wheel import needs_wheel, wheel_file
from spmd import launch, spmd

from unishmem import CMP, SIGNAL, DeadlockError, NotSymmetricError

SPMD_ENV = {"UNISHMEM_DEADLOCK_TIMEOUT": "1"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
U64_MAX = 2**64 - 1
HOLDS = {
    CMP.EQ: operator.eq,
    CMP.NE: operator.ne,
    CMP.GT: operator.gt,
    CMP.GE: operator.ge,
    CMP.LT: operator.lt,
    CMP.LE: operator.le,
}


def pair(rt) -> tuple[bool, int]:
    """(whether this PE produces, its partner): even PEs produce for the next odd one."""
    return rt.my_pe % 2 == 0, rt.my_pe ^ 1


def test_name_and_argument_order_are_the_contracts():
    from unishmem import Runtime

    params = inspect.signature(Runtime.signal_wait_until_on_stream).parameters
    assert list(params) == ["self", "signal", "cmp", "value", "stream"]
    assert params["stream"].default is None


@spmd(sizes=(2, 4))
def test_the_consumer_waits_for_the_signal_then_reads_what_was_put_before_it(rt):
    producer, partner = pair(rt)
    data, sig = rt.zeros(256, dtype=torch.int64), rt.signals(1)
    rt.barrier_all()
    if producer:
        time.sleep(0.05)  # the consumer is waiting by now: a call that returned early would read zeros
        rt.put(data, torch.arange(256) * (rt.my_pe + 1), partner)
        rt.signal_op(sig, 1, partner, SIGNAL.SET)
    else:
        assert rt.signal_wait_until_on_stream(sig, CMP.EQ, 1) is None
        assert torch.equal(data, torch.arange(256) * (partner + 1))
    rt.barrier_all()
    rt.free(data)
    rt.free(sig)


# (cmp, the signal before, after, value): false before, true after
TRANSITIONS = (
    (CMP.EQ, 1, 7, 7),
    (CMP.NE, 7, 8, 7),
    (CMP.GT, 7, 9, 8),
    (CMP.GE, 7, 8, 8),
    (CMP.LT, 9, 3, 5),
    (CMP.LE, 9, 5, 5),
    (CMP.GT, 0, U64_MAX, U64_MAX - 1),
)


@spmd(sizes=(2, 4))
def test_every_comparison_waits_until_it_holds(rt):
    producer, partner = pair(rt)
    sig = rt.signals(1)
    for cmp, before, after, value in TRANSITIONS:
        assert not HOLDS[cmp](before, value) and HOLDS[cmp](after, value), (cmp, before, after, value)
        if not producer:
            rt.signal_op(sig, before, rt.my_pe)
        rt.barrier_all()
        if producer:
            time.sleep(0.03)  # the consumer is waiting by now
            rt.signal_op(sig, after, partner)
        else:
            assert rt.signal_wait_until_on_stream(sig, cmp, value) is None
            assert rt.signal_fetch(sig) == after, (cmp, value)  # not `before`: the call waited
            assert rt.signal_wait_until_on_stream(sig, int(cmp), value, stream=None) is None  # holds: at once
        rt.barrier_all()
    rt.free(sig)


@spmd(sizes=(2,))
def test_bad_arguments_raise_what_signal_wait_until_raises(rt):
    sig = rt.signals(2)
    s0 = sig[0]
    cases = [
        ((sig.view(torch.int64)[:1], CMP.GE, 0), TypeError, "1-element torch.uint64"),
        ((sig, CMP.GE, 0), TypeError, "1-element torch.uint64"),  # two words
        ((torch.zeros(1, dtype=torch.uint64), CMP.GE, 0), NotSymmetricError, "signal"),
        ((torch.zeros(1, dtype=torch.uint64, device="meta"), CMP.GE, 0), ValueError, "is on meta"),
        (([0], CMP.GE, 0), TypeError, "must be a torch.Tensor"),
        ((s0, 6, 0), ValueError, "6 is not a valid CMP"),
        ((s0, False, 0), TypeError, "cmp must be a unishmem.CMP"),
        ((s0, SIGNAL.SET, 0), TypeError, "cmp must be a unishmem.CMP"),
        ((s0, CMP.EQ, -1), ValueError, r"value=-1 does not fit torch.uint64"),
        ((s0, CMP.EQ, 2**64), ValueError, r"value=18446744073709551616 does not fit torch.uint64"),
        ((s0, CMP.EQ, 1.5), TypeError, "value"),
    ]
    for args, kind, pattern in cases:
        same_error(rt, args, kind, pattern)
    rt.free(sig)
    same_error(rt, (s0, CMP.EQ, 1), NotSymmetricError, "signal .* was freed")


def same_error(rt, args, kind, pattern):
    with pytest.raises(kind, match=pattern) as waited:
        rt.signal_wait_until(*args)
    with pytest.raises(kind) as on_stream:
        rt.signal_wait_until_on_stream(*args)
    assert type(on_stream.value) is type(waited.value), args
    assert str(on_stream.value) == str(waited.value), args


@spmd(sizes=(2,))
def test_a_wait_nobody_can_end_is_a_deadlock_on_every_pe_and_the_job_goes_on(rt):
    sig = rt.signals(1)
    offset = sig.data_ptr() - rt.heap_base
    with pytest.raises(DeadlockError, match="every PE has been waiting") as info:
        rt.signal_wait_until_on_stream(sig, CMP.GE, 3)
    assert f"signal at heap offset {offset} to become >= 3" in str(info.value), str(info.value)
    rt.barrier_all()
    rt.signal_op(sig, 3, rt.my_pe)
    assert rt.signal_wait_until_on_stream(sig, CMP.GE, 3) is None
    rt.free(sig)


DIES = """
import os, signal, sys, time
import unishmem
from unishmem import CMP, PeerFailure

rt = unishmem.init(heap_size="16M")
sig = rt.signals(1)
rt.barrier_all()
if rt.my_pe == 1:
    time.sleep(0.3)  # PE 0 is in its wait by now
    os.kill(os.getpid(), signal.SIGKILL)
try:
    rt.signal_wait_until_on_stream(sig, CMP.EQ, 1)  # never signalled
except PeerFailure as e:
    print(f"PEERFAILURE {e}", flush=True)
    sys.exit(3)
"""


@pytest.mark.slow  # a job of its own; the deadlock test above checks the same wait within the shared job
def test_a_peer_that_dies_ends_the_wait_with_peer_failure(tmp_path):
    program = tmp_path / "dies.py"
    program.write_text(DIES)
    proc = launch([sys.executable, str(program)], 2, timeout=120, env={"UNISHMEM_DEADLOCK_TIMEOUT": "30"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert re.search(r"^PEERFAILURE .*PE 1\b", proc.stdout, re.M), out


# ---- the GPU paths, as far as a machine without a GPU can check them ------------------------------


def _nm(path, *flags) -> str:
    if shutil.which("nm") is None:
        pytest.skip("no nm (binutils) here")
    return subprocess.run(["nm", "-D", *flags, str(path)], capture_output=True, text=True, check=True).stdout


@needs_wheel
def test_the_nvshmem_module_enqueues_nvshmems_own_on_stream_wait():
    """The built module calls nvshmemx_signal_wait_until_on_stream, and the wheel's host library exports it
    (the module links against it, so a missing symbol would also fail its import)."""
    import importlib.util

    spec = importlib.util.find_spec("unishmem._nvshmem")
    if spec is None:
        pytest.skip("the NVSHMEM backend module is not built here")
    name = "nvshmemx_signal_wait_until_on_stream"
    assert re.search(rf"^\s+U {name}\b", _nm(spec.origin, "--undefined-only"), re.M)
    assert re.search(rf"^[0-9a-f]+ T {name}\b", _nm(wheel_file("libnvshmem_host.so.3"), "--defined-only"), re.M)


@needs_wheel
def test_nvshmem_gets_comparisons_in_its_own_numbering():
    """cmp_values (our CMP code -> what the module passes NVSHMEM) against the order of the enumerators in
    the wheel's header, and against the device library's table of the same numbers."""
    from unishmem.language import _vendor

    proc = subprocess.run(
        [sys.executable, "-c", "import json, unishmem._nvshmem as m; print(json.dumps(sorted(m.cmp_values.items())))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    got = dict(json.loads(proc.stdout))
    header = wheel_file("nvshmem_constants.h").read_text()
    body = re.search(r"enum nvshmemi_cmp_type\s*\{(.*?)\}", header, re.S).group(1)
    names = re.findall(r"NVSHMEM_CMP_([A-Z]+)", body)
    assert re.search(r"NVSHMEM_CMP_EQ\s*=\s*0\s*,", body), body  # the rest count up from 0
    in_header = {int(CMP[n]): i for i, n in enumerate(names) if n in CMP.__members__}
    assert got == in_header == _vendor.CMP_VALUES["nvshmem"], (got, in_header)


WAIT_VALUE_PROGRAM = r"""
#include "gpu/stream_wait_value.hpp"
#include <cstdio>
using namespace unishmem;
int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const Cmp cmp = Cmp(std::atoi(argv[i]));
    const std::uint64_t value = std::strtoull(argv[i + 1], nullptr, 10);
    if (auto w = gpu::wait_value_for(cmp, value))
      std::printf("%d %llu %llu\n", int(w->test), (unsigned long long)w->value, (unsigned long long)w->mask);
    else
      std::printf("refused %s\n", gpu::wait_value_refusal("WHO", cmp, value).c_str());
  }
}
"""


def _hip_wait_holds(test: int, word: int, value: int, mask: int) -> bool:
    """HIP's documented stream-wait tests (hip_runtime_api.h, hipStreamWaitValue64): Gte, Eq, And."""
    masked = word & mask
    return (masked >= value, masked == value, masked & value != 0)[test]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_the_hip_stream_wait_form_is_exact_or_refused(tmp_path):
    """Where rocSHMEM's headers declare no rocshmem_signal_wait_until_on_stream, the rocshmem backend asks
    hipStreamWaitValue64, which tests >=, == or set bits under a mask. Each form given must hold for exactly
    the words the comparison holds for; only CMP.LT, CMP.LE, CMP.NE of a nonzero value and CMP.GT 2**64-1
    (which no form expresses exactly) are refused, with an error naming the comparison."""
    src = tmp_path / "wait_value.cpp"
    src.write_text(WAIT_VALUE_PROGRAM)
    exe = tmp_path / "wait_value"
    subprocess.run(
        ["g++", "-std=c++20", "-I", f"{ROOT}/csrc", str(src), "-o", str(exe)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    values = [0, 1, 2, 5, 2**32, 2**63, U64_MAX - 1, U64_MAX]
    words = sorted({v + d for v in values for d in (-1, 0, 1) if 0 <= v + d <= U64_MAX} | {3, 2**40 + 7})
    cases = [(cmp, v) for cmp in CMP for v in values]
    out = subprocess.run(
        [str(exe), *(str(x) for cmp, v in cases for x in (int(cmp), v))], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(out) == len(cases)
    for (cmp, value), line in zip(cases, out):
        inexpressible = cmp in (CMP.LT, CMP.LE) or (cmp == CMP.NE and value) or (cmp == CMP.GT and value == U64_MAX)
        if line.startswith("refused "):
            assert inexpressible, (cmp, value, line)
            ops = {CMP.NE: "!=", CMP.GT: ">", CMP.LT: "<", CMP.LE: "<="}
            assert f"signal {ops[cmp]} {value} (CMP.{cmp.name})" in line and line.startswith("refused WHO "), line
            continue
        assert not inexpressible, (cmp, value, line)
        test, v, mask = map(int, line.split())
        for word in words:
            assert _hip_wait_holds(test, word, v, mask) == HOLDS[cmp](word, value), (cmp, value, word, line)
