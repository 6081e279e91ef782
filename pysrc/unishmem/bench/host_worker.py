"""One job of `unishmem bench` on the host backend, started by the bench as
`unishmem run -n N python -m unishmem.bench.host_worker PLAN OUT`. PE 0 writes the figures to OUT.

Figures from Python go through the public Runtime API (what users call); the references and the
C++ loops come from the benchmark helpers in csrc/host/bench.cpp (`_host.bench_*`).
"""

from __future__ import annotations

import os
import sys
import time

import torch

import unishmem
from unishmem import CMP, SIGNAL, _active, _host

from .plan import Plan, dst_elements, elements, ref_key, write_figures
from .timing import best_of, iterations, long_iters, long_round_trips, long_run, measure, summary

PAYLOAD = 8  # bytes carried by each signal ping-pong message
CPP_MAX_ITERS = 10**7  # C++ loops are bounded by the time budget, not by this


class HostBench:
    def __init__(self, rt, plan: Plan):
        self.rt, self.plan = rt, plan
        self.me, self.n = rt.my_pe, rt.n_pes
        self._max = rt.zeros(1, dtype=torch.float64)

    # ---- helpers ------------------------------------------------------------------------------

    def agree_max(self, x: float) -> float:
        self._max[0] = x
        self.rt.reduce(self._max, self._max, "max")
        return float(self._max[0])

    def measure(self, op) -> float:
        p = self.plan
        return measure(
            op, self.rt.barrier_all, self.agree_max, budget_s=p.budget_s, reps=p.reps, max_iters=p.max_iters
        )["seconds"]

    def slowest(self, samples: list | torch.Tensor) -> torch.Tensor:
        """Call by call, the slowest PE's time (every PE passes as many samples)."""
        mine = torch.as_tensor(samples, dtype=torch.float64)
        sym = self.rt.empty(mine.numel(), dtype=torch.float64)
        sym.copy_(mine)
        self.rt.reduce(sym, sym, "max")
        out = sym.clone()
        self.rt.free(sym)
        return out

    def cpp_latency(self, run, best: float, cap: int, every_pe: bool) -> dict:
        """The long run of a C++ loop `run(iters, samples_address)`: one sample per iteration, kept
        from PE 0 (every_pe=False: a ping-pong, whose initiator times whole round trips) or from
        the slowest PE call by call (a barrier)."""
        iters = long_iters(best, self.plan.long_run_s, cap)
        samples = torch.zeros(iters, dtype=torch.int64)
        self.rt.barrier_all()
        run(iters, samples.data_ptr())
        return summary((self.slowest(samples) if every_pe else samples).tolist(), best)

    def py_latency(self, step, best: float, every_pe: bool) -> dict:
        """As cpp_latency, for a Python call `step(j)` timed call by call."""
        iters = long_iters(best, self.plan.long_run_s, self.plan.long_run)
        self.rt.barrier_all()
        samples = long_run(step, iters)
        return summary(self.slowest(samples).tolist() if every_pe else samples, best)

    def py_loop(self, step, reps: int) -> dict:
        """A ping-pong's Python loop of `step(j)`, j counting on from 0 across runs: the best of
        `reps` runs (as cpp_loop), then a long run of at least ROUND_TRIPS calls timed by PE 0."""
        p, done = self.plan, [0]

        def run(k: int) -> float:
            base = done[0]
            done[0] += k
            self.rt.barrier_all()
            t0 = time.perf_counter()
            for j in range(base, base + k):
                step(j)
            return time.perf_counter() - t0

        run(1)  # warm-up
        iters = iterations(run, self.agree_max, p.budget_s, reps, p.py_pingpong_iters)
        best = best_of(lambda: run(iters) / iters, self.agree_max, reps)
        self.rt.barrier_all()
        return summary(long_run(step, long_round_trips(best, p.long_run_s, p.long_run), done[0]), best)

    def cpp_loop(self, run, max_iters: int, reps: int = 0) -> float:
        """Time a C++ loop `run(iters) -> seconds` (at most `max_iters` per run), as measure()
        times Python calls: the best of the plan's repetitions, each the slowest PE's."""
        p = self.plan

        def synced(k: int) -> float:
            self.rt.barrier_all()
            return run(k)

        synced(1)  # warm-up
        iters = iterations(synced, self.agree_max, p.budget_s, p.reps, max_iters)
        return best_of(lambda: synced(iters) / iters, self.agree_max, reps or p.reps)

    # ---- references ---------------------------------------------------------------------------

    def memcpy(self, size: int, copiers: int, piece: int = 0) -> float:
        """Seconds per copy of `size` bytes between two private buffers (in memcpy calls of `piece`
        bytes), on PEs 0..copiers-1 at once (1: the put/get reference; min(n, cores): the bounds')."""
        active = self.me < copiers
        if active:
            src, dst = torch.ones(size, dtype=torch.uint8), torch.zeros(size, dtype=torch.uint8)
            s, d = src.data_ptr(), dst.data_ptr()
        return self.cpp_loop(lambda k: _host.bench_memcpy(d, s, size, k, piece) if active else 0.0, CPP_MAX_ITERS)

    # ---- point to point (2 PEs) --------------------------------------------------------------

    def put_get(self) -> dict:
        rt = self.rt
        out: dict[str, dict[int, float]] = {"memcpy": {}, "put": {}, "get": {}}  # kind -> size -> seconds
        for size in self.plan.p2p_sizes:
            out["memcpy"][size] = self.memcpy(size, copiers=1)  # the reference, right before its figures
            sym = rt.empty(size, dtype=torch.uint8)
            sym.fill_(1)  # every PE touches its own pages
            local = torch.ones(size, dtype=torch.uint8)
            rt.barrier_all()
            noop = lambda: None  # noqa: E731
            out["put"][size] = self.measure((lambda: rt.put(sym, local, 1)) if self.me == 0 else noop)
            out["get"][size] = self.measure((lambda: rt.get(local, sym, 1)) if self.me == 0 else noop)
            rt.free(sym)
        return out

    def pingpong(self) -> dict:
        rt, me = self.rt, self.me
        peer, first = 1 - me, me == 0
        p = self.plan
        words = rt.signals(1)
        mine = words.data_ptr()
        theirs = _active.core().native.peer_ptr(mine, peer)
        start = [0]

        def raw(k, samples=0):
            dt = _host.bench_raw_pingpong(mine, theirs, k, first, start[0], 60.0, samples)
            start[0] += 2 * k
            return dt

        reps = max(5, p.reps)  # latencies: more, shorter runs find the quiet moments of a shared machine
        raw_best = self.cpp_loop(raw, p.pingpong_iters, reps)
        raw_s = self.cpp_latency(raw, raw_best, p.pingpong_iters, every_pe=False)

        sig, buf = rt.signals(1), rt.zeros(PAYLOAD, dtype=torch.uint8)
        src = torch.ones(PAYLOAD, dtype=torch.uint8)
        addrs = (buf.data_ptr(), src.data_ptr(), PAYLOAD, sig.data_ptr(), peer)
        native = _active.core().native  # the backend itself, below the checks (NOTE [private core])
        start[0] = 0

        def cpp(k, samples=0):
            dt = _host.bench_signal_pingpong(native, *addrs, k, first, start[0], samples)
            start[0] += 2 * k
            return dt

        cpp_best = self.cpp_loop(cpp, p.pingpong_iters, reps)
        cpp_s = self.cpp_latency(cpp, cpp_best, p.pingpong_iters, every_pe=False)

        # The Python round trip three ways: tensors made once and reused; views made in the call, as
        # a user's loop writes it; and reused tensors with the views' slices made and dropped where
        # the views are made, so that torch's charge for them is timed on the same path (both PEs
        # slice, and a round trip waits for some of those slices, not for others). Each loop has its
        # own signal word, so each counts from 0.
        sig2, sig3, sig4 = rt.signals(1), rt.signals(1), rt.signals(1)
        if first:

            def reused(j):
                rt.put_signal(buf, src, sig2, 2 * j + 1, peer)
                rt.signal_wait_until(sig2, CMP.GE, 2 * j + 2)

            def views(j):
                rt.put_signal(buf[0:PAYLOAD], src, sig3[0:1], 2 * j + 1, peer)
                rt.signal_wait_until(sig3[0:1], CMP.GE, 2 * j + 2)

            def sliced(j):  # reused, making and dropping the same slices: what torch charges for them
                buf[0:PAYLOAD], sig3[0:1]
                rt.put_signal(buf, src, sig4, 2 * j + 1, peer)
                sig3[0:1]
                rt.signal_wait_until(sig4, CMP.GE, 2 * j + 2)
        else:

            def reused(j):
                rt.signal_wait_until(sig2, CMP.GE, 2 * j + 1)
                rt.put_signal(buf, src, sig2, 2 * j + 2, peer)

            def views(j):
                rt.signal_wait_until(sig3[0:1], CMP.GE, 2 * j + 1)
                rt.put_signal(buf[0:PAYLOAD], src, sig3[0:1], 2 * j + 2, peer)

            def sliced(j):
                sig3[0:1]
                rt.signal_wait_until(sig4, CMP.GE, 2 * j + 1)
                buf[0:PAYLOAD], sig3[0:1]
                rt.put_signal(buf, src, sig4, 2 * j + 2, peer)

        py_s = self.py_loop(reused, reps)
        views_s = self.py_loop(views, reps)
        sliced_s = self.py_loop(sliced, reps)
        for t in (words, sig, buf, sig2, sig3, sig4):
            rt.free(t)
        return {
            "raw_atomic": raw_s,
            "cpp_signal": cpp_s,
            "python_signal": py_s,
            "python_signal_views": views_s,
            "python_signal_sliced": sliced_s,
            "payload_bytes": PAYLOAD,
        }

    # ---- synchronisation and collectives -------------------------------------------------------

    def call_costs(self) -> dict:
        """Seconds per call of the point-to-point calls from Python, on PE 0 and with nothing to
        wait for, beside the same call straight to the binding with its arguments ready: what the
        Python layer's checks cost."""
        rt, hot, peer = self.rt, _active.core().hot_path, 1  # the binding: NOTE [fast calls] (bindings.cpp)
        b = hot.backend
        sym, local, sig = rt.zeros(PAYLOAD, dtype=torch.uint8), torch.ones(PAYLOAD, dtype=torch.uint8), rt.signals(1)
        d, s, a = sym.data_ptr(), local.data_ptr(), sig.data_ptr()
        add, ge = int(SIGNAL.ADD), int(CMP.GE)
        calls = {
            "put": (lambda: rt.put(sym, local, peer), lambda: hot.fast_put(b, d, s, PAYLOAD, peer, 0)),
            "get": (lambda: rt.get(local, sym, peer), lambda: hot.fast_get(b, s, d, PAYLOAD, peer, 0)),
            "put_signal": (
                lambda: rt.put_signal(sym, local, sig, 0, peer, SIGNAL.ADD),
                lambda: hot.fast_put_signal(b, d, s, PAYLOAD, a, 0, add, peer, 0),
            ),
            "signal_wait_until": (
                lambda: rt.signal_wait_until(sig, CMP.GE, 0),
                lambda: hot.fast_signal_wait_until(b, a, ge, 0, 0),
            ),
        }
        noop = lambda: None  # noqa: E731
        out = {
            name: {
                "python": self.measure(py if self.me == 0 else noop),
                "binding": self.measure(raw if self.me == 0 else noop),
            }
            for name, (py, raw) in calls.items()
        }
        for t in (sym, sig):
            rt.free(t)
        return out

    def barrier(self) -> dict:
        rt, native = self.rt, _active.core().native
        python_best = self.measure(rt.barrier_all)
        python = self.py_latency(lambda j: rt.barrier_all(), python_best, every_pe=True)
        run = lambda k, samples=0: _host.bench_barrier(native, 0, k, samples)  # noqa: E731
        cpp_best = self.cpp_loop(run, CPP_MAX_ITERS)
        cpp = self.cpp_latency(run, cpp_best, self.plan.pingpong_iters, every_pe=True)
        return {"python": python, "cpp": cpp}

    def collective(self, op: str, size: int) -> float:
        rt, n, elems = self.rt, self.n, elements(size, self.n)
        src = rt.full(elems, 1.0)
        dst = rt.zeros(dst_elements(op, elems, n))
        call = {
            "reduce": lambda: rt.reduce(dst, src, "sum"),
            "reducescatter": lambda: rt.reducescatter(dst, src, "sum"),
            "fcollect": lambda: rt.fcollect(dst, src),
            "alltoall": lambda: rt.alltoall(dst, src),
            "broadcast": lambda: rt.broadcast(dst, src, 0),
        }[op]
        seconds = self.measure(call)
        rt.free(dst)
        rt.free(src)
        return seconds

    def run(self) -> dict:
        p, n = self.plan, self.n
        out: dict = {"pes": n}
        if n == 2:
            out.update(self.put_get())
            out["pingpong"] = self.pingpong()
            out["call_costs"] = self.call_costs()
        if n in p.all_pes():
            out["cores"] = cores = len(os.sched_getaffinity(0))
            out["barrier"] = self.barrier()
            fastest: dict[str, float] = {}  # "bytes/piece" -> fastest copy seen (the bounds' B)
            out["collectives"] = {op: {} for op in p.ops_at(n)}
            for size in p.coll_sizes:
                for c, piece in p.memcpy_refs(n, size):  # the references, right before their figures
                    key = ref_key((c, piece))
                    fastest[key] = min(fastest.get(key, float("inf")), self.memcpy(c, min(n, cores), piece))
                for op in p.ops_at(n):
                    out["collectives"][op][size] = self.collective(op, size)
            out["memcpy_all"] = fastest
        return out


def main(plan_path: str, out_path: str) -> int:
    with open(plan_path) as f:
        plan = Plan.loads(f.read())
    torch.set_num_threads(1)  # one core's worth per PE, as each MPI rank; idle pool threads would spin
    rt = unishmem.init(backend="host")
    bench = HostBench(rt, plan)
    out = bench.run()
    rt.free(bench._max)
    rt.finalize()
    if rt.my_pe == 0:
        write_figures(out_path, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
