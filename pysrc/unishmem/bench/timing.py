"""One timing method for every implementation, so unishmem, Open MPI and gloo are measured alike.

A figure is the time per call of an operation that every rank runs (a rank with nothing to do runs a
no-op). After a warm-up call, runs of 1, 4, 16, ... back-to-back calls find how many calls fill a
run's share of the time budget; then `reps` timed runs of that many calls, each started after a
barrier. A run's time is the slowest rank's (a collective is done when its last member is); the
figure is the best run, which filters out the noise of a shared machine.

Latencies are also timed call by call over one long run (long_run), and reported as the mean, the
median and the 99th percentile of those calls: what a user's loop sees (a loop pays the mean), where
the best run shows the quietest moment. Each call's time includes one clock read, in every
implementation alike. A ping-pong's long run has at least ROUND_TRIPS round trips, so that its mean
is taken over the same count in every implementation.
"""

from __future__ import annotations

import time
from collections.abc import Callable

ROUND_TRIPS = 10_000  # the fewest round trips in a ping-pong's long run (its mean is a target)


def iterations(
    run: Callable[[int], float], agree_max: Callable[[float], float], budget_s: float, reps: int, max_iters: int
) -> int:
    """Calls per timed run: `run(k)` times k calls (every rank the same k)."""
    share = budget_s / reps
    k = 1
    while True:
        elapsed = agree_max(run(k))
        if elapsed >= share / 8 or k >= max_iters:
            return int(max(1, min(max_iters, k * share / max(elapsed, 1e-9))))
        k *= 4


def measure(
    op: Callable[[], object],
    barrier: Callable[[], object],
    agree_max: Callable[[float], float],
    *,
    budget_s: float,
    reps: int,
    max_iters: int,
) -> dict:
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


def long_run(step: Callable[[int], object], iters: int, first: int = 0) -> list[int]:
    """Nanoseconds of each of `iters` consecutive calls step(first), step(first + 1), ..."""
    samples = [0] * iters
    clock = time.perf_counter_ns
    last = clock()
    for j in range(first, first + iters):
        step(j)
        now = clock()
        samples[j - first] = now - last
        last = now
    return samples


def long_iters(best_s: float, budget_s: float, cap: int) -> int:
    """Calls in a long run: `cap`, or fewer where calls are slow enough to overrun `budget_s` at
    several times the best run's time per call (at least 100, so that the p99 means something)."""
    return int(max(100, min(cap, budget_s / max(best_s, 1e-9) / 4)))


def long_round_trips(best_s: float, budget_s: float, cap: int) -> int:
    """Round trips in a ping-pong's long run: as long_iters, but never fewer than ROUND_TRIPS."""
    return max(ROUND_TRIPS, long_iters(best_s, budget_s, cap))


def summary(samples_ns, best_s: float) -> dict:
    """The figures of one latency: the best run's time per call, and the long run's mean, median
    and 99th percentile (nearest rank), all in seconds."""
    ordered = sorted(samples_ns)
    n = len(ordered)
    rank = lambda q: ordered[min(n - 1, max(0, -(-n * q // 100) - 1))] * 1e-9  # noqa: E731
    return {"best": best_s, "mean": sum(ordered) / n * 1e-9, "median": rank(50), "p99": rank(99), "samples": n}
