"""The README's demo and the device-library examples, run as a user would: unishmem run -n 4."""

import os
import re

import pytest
from spmd import launch

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def test_demo_runs_at_four_pes():
    proc = launch([os.path.join(EXAMPLES, "demo.py")], 4, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "demo passed on 4 PEs" in proc.stdout, proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "example, expected",
    [
        ("ring_allgather.py", r"ring all-gather \(interpreter, backend host\) correct on 4 PEs"),
        ("ping_pong.py", r"20 round trips between 2 pair\(s\): \d+ us each \(backend host\)"),
        ("tutorials/01_notify_wait.py", r"notify/wait: 3 rounds correct on 4 PEs \(backend host\)"),
        ("tutorials/02_all_gather_gemm.py", r"all-gather GEMM: correct on 4 PEs \(backend host\)"),
        ("tutorials/03_gemm_reduce_scatter.py", r"GEMM reduce-scatter: correct on 4 PEs \(backend host\)"),
        ("tutorials/04_moe_all_to_all.py", r"moe all-to-all \(interpreter, backend host\) correct on 4 PEs"),
        ("tutorials/05_one_shot_all_reduce.py", r"one-shot all-reduce: correct on 4 PEs \(backend host\)"),
        ("tutorials/06_tensor_parallel_block.py", r"tensor-parallel block: 3 steps equal to one process on 4 PEs"),
    ],
)
def test_device_library_examples(example, expected):
    pytest.importorskip("triton")
    proc = launch([os.path.join(EXAMPLES, example)], 4, timeout=300, env={"TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(expected, proc.stdout), proc.stdout


@pytest.mark.parametrize(
    "example, expected",
    [
        ("ported/notify_wait_queue.py", r"ported notify/wait queue: 3 rounds correct on 2 PEs \(backend host\)"),
        (
            "ported/intra_node_allgather.py",
            r"ported intra-node all-gather: pull and push correct on 2 PEs \(backend host\)",
        ),
    ],
)
def test_ported_tutorials_run_at_two_pes(example, expected):
    """The two Triton-distributed tutorials that docs/porting.md links, each checked against torch inside."""
    pytest.importorskip("triton")
    proc = launch([os.path.join(EXAMPLES, example)], 2, timeout=300, env={"TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(expected, proc.stdout), proc.stdout


ALL_EXAMPLES = sorted(
    os.path.relpath(os.path.join(d, f), EXAMPLES)
    for d, _, files in os.walk(EXAMPLES)
    for f in files
    if f.endswith(".py")
)


@pytest.mark.slow
@pytest.mark.parametrize("n_pes, seed", [(2, 1), (2, 2), (4, 3)])
@pytest.mark.parametrize("example", ALL_EXAMPLES)
def test_examples_and_tutorials_run_clean_under_the_race_check(example, n_pes, seed):
    """Under UNISHMEM_RACE_CHECK=1 (docs/finding-races.md) a race ends the job with a RaceError; each example
    checks its own results against torch."""
    pytest.importorskip("triton")
    env = {"TRITON_INTERPRET": "1", "UNISHMEM_RACE_CHECK": "1", "UNISHMEM_RACE_SEED": str(seed)}
    proc = launch([os.path.join(EXAMPLES, example)], n_pes, timeout=300, env=env)
    assert proc.returncode == 0 and "race:" not in proc.stderr, proc.stderr[-3000:]
