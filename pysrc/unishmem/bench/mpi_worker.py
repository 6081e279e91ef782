"""The Open MPI reference of `unishmem bench`, through mpi4py: started by the bench as
`mpirun -np N python .../unishmem/bench/mpi_worker.py PLAN OUT`; rank 0 writes the figures to OUT.
Buffers are numpy arrays (mpi4py's zero-copy path); the timing is the one every implementation uses.
Run as a file, it imports its two siblings directly rather than the unishmem package, which would
import torch in every rank for nothing (seconds per rank on a busy 2-core machine)."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

import mpi4py
import numpy as np
from mpi4py import MPI

if __package__ or TYPE_CHECKING:  # mypy reads the siblings through the package
    from .plan import Plan, dst_elements, elements, write_figures
    from .timing import best_of, iterations, long_iters, long_round_trips, long_run, measure, summary
else:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from plan import Plan, dst_elements, elements, write_figures
    from timing import best_of, iterations, long_iters, long_round_trips, long_run, measure, summary

PAYLOAD = 8  # as the host backend's ping-pong


def main(plan_path: str, out_path: str) -> int:
    with open(plan_path) as f:
        plan = Plan.loads(f.read())
    comm = MPI.COMM_WORLD
    me, n = comm.Get_rank(), comm.Get_size()

    def agree_max(x: float) -> float:
        return comm.allreduce(x, op=MPI.MAX)

    def timed(op) -> float:
        return measure(op, comm.Barrier, agree_max, budget_s=plan.budget_s, reps=plan.reps, max_iters=plan.max_iters)[
            "seconds"
        ]

    out: dict = {
        "pes": n,
        "library": MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0],
        "mpi4py": mpi4py.__version__,
    }
    if n == 2:
        peer = 1 - me
        out["send"] = {}
        for size in plan.p2p_sizes:  # one-way streaming bandwidth, the counterpart of put
            buf = np.ones(size, dtype=np.uint8)
            one_way = (lambda: comm.Send(buf, peer, 7)) if me == 0 else (lambda: comm.Recv(buf, peer, 7))
            out["send"][size] = timed(one_way)
        msg = np.zeros(PAYLOAD, dtype=np.uint8)

        def pingpong(k: int) -> float:
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                if me == 0:
                    comm.Send(msg, peer, 1)
                    comm.Recv(msg, peer, 1)
                else:
                    comm.Recv(msg, peer, 1)
                    comm.Send(msg, peer, 1)
            return time.perf_counter() - t0

        pingpong(1)
        reps = max(5, plan.reps)  # as the host backend's
        iters = iterations(pingpong, agree_max, plan.budget_s, reps, plan.py_pingpong_iters)
        best = best_of(lambda: pingpong(iters) / iters, agree_max, reps)
        if me == 0:  # as the host backend's: the initiator times whole round trips

            def step(j):
                comm.Send(msg, peer, 1)
                comm.Recv(msg, peer, 1)
        else:

            def step(j):
                comm.Recv(msg, peer, 1)
                comm.Send(msg, peer, 1)

        comm.Barrier()
        out["pingpong"] = summary(long_run(step, long_round_trips(best, plan.long_run_s, plan.long_run)), best)
    ops = plan.ops_at(n) if n in plan.all_pes() else ()  # a 2-PE job may be there for the point-to-point only
    if ops:
        best = timed(comm.Barrier)
        comm.Barrier()
        samples = np.array(
            long_run(lambda j: comm.Barrier(), long_iters(best, plan.long_run_s, plan.long_run)), dtype=np.float64
        )
        comm.Allreduce(MPI.IN_PLACE, samples, MPI.MAX)  # call by call, the slowest rank's, as the host backend's
        out["barrier"] = summary(samples.tolist(), best)
    out["collectives"] = {}
    for op in ops:
        out["collectives"][op] = {}
        for size in plan.coll_sizes:
            elems = elements(size, n)
            src = np.ones(elems, dtype=np.float32)
            dst = np.zeros(dst_elements(op, elems, n), dtype=np.float32)
            call = {
                "reduce": lambda: comm.Allreduce(src, dst, MPI.SUM),
                "reducescatter": lambda: comm.Reduce_scatter_block(src, dst, MPI.SUM),
                "fcollect": lambda: comm.Allgather(src, dst),
                "alltoall": lambda: comm.Alltoall(src, dst),
                "broadcast": lambda: comm.Bcast(src, 0),
            }[op]
            out["collectives"][op][size] = timed(call)
    if me == 0:
        write_figures(out_path, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
