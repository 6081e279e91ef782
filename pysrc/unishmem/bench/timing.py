"""One timing method for every implementation, so unishmem, Open MPI and gloo are measured alike.

A figure is the time per call of an operation that every rank runs (a rank with nothing to do runs a
no-op). After a warm-up call, runs of 1, 4, 16, ... back-to-back calls find how many calls fill a
run's share of the time budget; then `reps` timed runs of that many calls, each started after a
barrier. A run's time is the slowest rank's (a collective is done when its last member is); the
figure is the best run, which filters out the noise of a shared machine.
"""
from __future__ import annotations

import time
from typing import Callable


def iterations(run: Callable[[int], float], agree_max: Callable[[float], float], budget_s: float, reps: int,
               max_iters: int) -> int:
    """Calls per timed run: `run(k)` times k calls (every rank the same k)."""
    share = budget_s / reps
    k = 1
    while True:
        elapsed = agree_max(run(k))
        if elapsed >= share / 8 or k >= max_iters:
            return int(max(1, min(max_iters, k * share / max(elapsed, 1e-9))))
        k *= 4


def measure(op: Callable[[], object], barrier: Callable[[], object], agree_max: Callable[[float], float], *,
            budget_s: float, reps: int, max_iters: int) -> dict:
    """Seconds per call of `op`: {'seconds': best, 'iters': calls per run, 'reps': runs}."""
    def run(k: int) -> float:
        barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            op()
        return time.perf_counter() - t0

    op()  # warm-up: first touch of pages, connection setup
    iters = iterations(run, agree_max, budget_s, reps, max_iters)
    best = min(agree_max(run(iters) / iters) for _ in range(reps))
    return {"seconds": best, "iters": iters, "reps": reps}


def best_of(run: Callable[[], float], agree_max: Callable[[float], float], reps: int) -> float:
    """For loops timed inside one call (C++ loops, ping-pongs): the best of `reps` runs, each the
    slowest rank's seconds as `run` returns them."""
    return min(agree_max(run()) for _ in range(reps))
