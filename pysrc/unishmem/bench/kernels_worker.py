"""The job of `unishmem bench --kernels`: every unishmem.kernels kernel beside torch.distributed
doing the same work on the same tensors, in the same processes (gloo on the host backend, NCCL or
RCCL on a GPU backend). Started as `unishmem run -n N python -m unishmem.bench.kernels_worker SPEC OUT`;
rank 0 writes the figures to OUT."""
from __future__ import annotations

import datetime
import json
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the host backend runs kernels under the interpreter

import torch.distributed as dist  # noqa: E402

import unishmem  # noqa: E402
from .gloo_worker import _store  # noqa: E402
from .timing import measure  # noqa: E402


def cases(rt, size: int):
    """(name, unishmem call, torch.distributed call) on float32 tensors of `size` bytes per PE."""
    import unishmem.kernels as K

    n, dev = rt.n_pes, rt.device
    elems = max(n, size // 4 // n * n)
    x = torch.randn(elems, device=dev)
    gathered = torch.empty(n * elems, device=dev)
    scattered = torch.empty(elems // n, device=dev)
    reduced = torch.empty(elems, device=dev)
    return [
        ("all_gather", lambda: K.all_gather(x, out=gathered), lambda: dist.all_gather_into_tensor(gathered, x)),
        ("reduce_scatter", lambda: K.reduce_scatter(x, out=scattered),
         lambda: dist.reduce_scatter_tensor(scattered, x)),
        ("all_reduce one_shot", lambda: K.all_reduce(x, algorithm="one_shot", out=reduced),
         lambda: dist.all_reduce(reduced)),
        ("all_reduce two_shot", lambda: K.all_reduce(x, algorithm="two_shot", out=reduced),
         lambda: dist.all_reduce(reduced)),
        *gemm_cases(rt, size),
    ]


def gemm_cases(rt, size: int):
    """ag_gemm beside all_gather + matmul, gemm_rs beside matmul + reduce_scatter: square d x d float32
    shards of `size` bytes. Under the interpreter only up to 256 KiB (a 1 MiB one takes seconds a call)."""
    import unishmem.kernels as K

    d = int((size // 4) ** 0.5)
    if os.environ.get("TRITON_INTERPRET") == "1" and size > 256 * 1024:
        return []
    n, dev = rt.n_pes, rt.device
    a_shard, b = torch.randn(d, d, device=dev), torch.randn(d, d, device=dev)
    a_full = torch.empty(n * d, d, device=dev)
    a_rows, partial_out = torch.randn(n * d, d, device=dev), torch.empty(d, d, device=dev)

    def gathered_matmul():
        dist.all_gather_into_tensor(a_full, a_shard)
        return a_full @ b

    return [
        ("ag_gemm", lambda: K.ag_gemm(a_shard, b), gathered_matmul),
        ("gemm_rs", lambda: K.gemm_rs(a_rows, b), lambda: dist.reduce_scatter_tensor(partial_out, a_rows @ b)),
    ]


def main(spec_path: str, out_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    torch.set_num_threads(1)
    with unishmem.init(heap_size=spec["heap"]) as rt:
        backend = "gloo" if rt.backend == "host" else "nccl"  # RCCL answers to "nccl" on ROCm builds
        dist.init_process_group(backend, store=_store(rt.n_pes), rank=rt.my_pe, world_size=rt.n_pes,
                                timeout=datetime.timedelta(seconds=300))

        def agree_max(x: float) -> float:
            t = torch.tensor([x], dtype=torch.float64, device=rt.device if backend == "nccl" else "cpu")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t[0])

        def timed(op, barrier) -> float:
            sync = (lambda: (op(), torch.cuda.synchronize())) if rt.device.type == "cuda" else op
            return measure(sync, barrier, agree_max, budget_s=spec["budget_s"], reps=spec["reps"],
                           max_iters=spec["max_iters"])["seconds"]

        rows = []
        for size in spec["sizes"]:
            for name, mine, reference in cases(rt, size):
                rows.append({"kernel": name, "bytes": size, "pes": rt.n_pes, "seconds": timed(mine, rt.barrier_all),
                             "reference_seconds": timed(reference, dist.barrier)})
            rt.free_workspaces()  # the next size's buffers fit the heap
        dist.destroy_process_group()
        if rt.my_pe == 0:
            with open(out_path, "w") as f:
                json.dump({"backend": rt.backend, "reference": f"torch.distributed {backend}",
                           "interpreted": os.environ.get("TRITON_INTERPRET") == "1", "rows": rows}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
