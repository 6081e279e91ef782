"""The gloo reference of `unishmem bench`: torch.distributed collectives on CPU tensors, started by
the bench as `unishmem run -n N python -m unishmem.bench.gloo_worker PLAN OUT` (the process group
meets in the launcher's store); rank 0 writes the figures to OUT."""

from __future__ import annotations

import datetime
import os
import sys

import torch
import torch.distributed as dist

from .. import _config
from ..rendezvous import parse_address
from .plan import Plan, dst_elements, elements, write_figures
from .timing import long_iters, long_run, measure, summary


def _launched(name: str) -> str:
    """The value `unishmem run` gave its variable `name`: the bench starts this job under it."""
    value = _config.protocol(name)
    if value is None:
        raise RuntimeError(f"{name} is not set: run this under `unishmem run`, as `unishmem bench` does")
    return value


def _store(size: int):
    # A FileStore beside the launcher's rendezvous socket: in its private directory, and nothing listens.
    _, socket_path = parse_address(_launched("UNISHMEM_RENDEZVOUS"))
    if not isinstance(socket_path, str):
        raise RuntimeError("the launcher's rendezvous is not a Unix socket: it has no directory for the store")
    return dist.FileStore(os.path.join(os.path.dirname(socket_path), "gloo.store"), size)


def _init() -> None:
    rank, size = int(_launched("UNISHMEM_RANK")), int(_launched("UNISHMEM_WORLD_SIZE"))
    dist.init_process_group(
        "gloo", store=_store(size), rank=rank, world_size=size, timeout=datetime.timedelta(seconds=120)
    )


def main(plan_path: str, out_path: str) -> int:
    with open(plan_path) as f:
        plan = Plan.loads(f.read())
    torch.set_num_threads(1)  # one core's worth per rank, as each MPI rank and each PE
    _init()
    me, n = dist.get_rank(), dist.get_world_size()
    # torch 2.13 renamed the tensor forms; older releases only have the first names
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def agree_max(x: float) -> float:
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t[0])

    def timed(op) -> float:
        return measure(op, dist.barrier, agree_max, budget_s=plan.budget_s, reps=plan.reps, max_iters=plan.max_iters)[
            "seconds"
        ]

    best = timed(dist.barrier)
    dist.barrier()
    samples = torch.tensor(
        long_run(lambda j: dist.barrier(), long_iters(best, plan.long_run_s, plan.long_run)), dtype=torch.float64
    )
    dist.all_reduce(samples, op=dist.ReduceOp.MAX)  # call by call, the slowest rank's, as the host backend's
    out: dict = {
        "pes": n,
        "library": f"torch {torch.__version__} gloo",
        "barrier": summary(samples.tolist(), best),
        "collectives": {},
    }
    for op in plan.ops_at(n):
        out["collectives"][op] = {}
        for size in plan.coll_sizes:
            elems = elements(size, n)
            src = torch.ones(elems)
            dst = torch.zeros(dst_elements(op, elems, n))
            call = {
                "reduce": lambda: dist.all_reduce(src),  # in place: gloo has no out-of-place all-reduce
                "reducescatter": lambda: reduce_scatter(dst, src),
                "fcollect": lambda: all_gather(dst, src),
                "alltoall": lambda: dist.all_to_all_single(dst, src),
                "broadcast": lambda: dist.broadcast(src, 0),
            }[op]
            out["collectives"][op][size] = timed(call)
    dist.destroy_process_group()
    if me == 0:
        write_figures(out_path, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
