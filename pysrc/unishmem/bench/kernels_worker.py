"""The job of `unishmem bench --kernels`: every timing of the kernel table (TIMINGS in
unishmem/kernels/_table.py) beside torch.distributed doing the same work on the same tensors, in the
same processes (gloo on the host backend, NCCL or RCCL on a GPU backend). Started as
`unishmem run -n N python -m unishmem.bench.kernels_worker SPEC OUT`; rank 0 writes the figures to OUT."""

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

from ..kernels._table import TIMINGS  # noqa: E402
from .gloo_worker import _store  # noqa: E402
from .timing import measure  # noqa: E402


def cases(rt, size: int) -> dict:
    """timing name (the kernel table's TIMINGS) -> (unishmem call, torch.distributed call) on float32
    tensors of `size` bytes per PE."""
    import unishmem.kernels as K

    n, dev = rt.n_pes, rt.device
    elems = max(n, size // 4 // n * n)
    x = torch.randn(elems, device=dev)
    gathered = torch.empty(n * elems, device=dev)
    scattered = torch.empty(elems // n, device=dev)
    reduced = torch.empty(elems, device=dev)
    exchanged = torch.empty(elems, device=dev)
    return {
        "all_gather": (lambda: K.all_gather(x, out=gathered), lambda: dist.all_gather_into_tensor(gathered, x)),
        "all_to_all": (lambda: K.all_to_all(x, out=exchanged), lambda: dist.all_to_all_single(exchanged, x)),
        "reduce_scatter": (
            lambda: K.reduce_scatter(x, out=scattered),
            lambda: dist.reduce_scatter_tensor(scattered, x),
        ),
        "all_reduce.one_shot": (
            lambda: K.all_reduce(x, algorithm="one_shot", out=reduced),
            lambda: dist.all_reduce(reduced),
        ),
        "all_reduce.two_shot": (
            lambda: K.all_reduce(x, algorithm="two_shot", out=reduced),
            lambda: dist.all_reduce(reduced),
        ),
        **gemm_cases(rt, size),
        **moe_cases(rt, size),
    }


def gemm_cases(rt, size: int):
    """ag_gemm beside all_gather + matmul, gemm_rs beside matmul + reduce_scatter: square d x d float32
    shards of `size` bytes."""
    import unishmem.kernels as K

    d = int((size // 4) ** 0.5)
    n, dev = rt.n_pes, rt.device
    a_shard, b = torch.randn(d, d, device=dev), torch.randn(d, d, device=dev)
    a_full = torch.empty(n * d, d, device=dev)
    a_rows, partial_out = torch.randn(n * d, d, device=dev), torch.empty(d, d, device=dev)

    def gathered_matmul():
        dist.all_gather_into_tensor(a_full, a_shard)
        return a_full @ b

    return {
        "ag_gemm": (lambda: K.ag_gemm(a_shard, b), gathered_matmul),
        "gemm_rs": (lambda: K.gemm_rs(a_rows, b), lambda: dist.reduce_scatter_tensor(partial_out, a_rows @ b)),
    }


def moe_cases(rt, size: int):
    """dispatch + combine (identity experts) beside what an expert-parallel MoE layer does with
    torch.distributed: an all_to_all_single of the per-PE counts, the token copies sorted by
    destination PE and sent with all_to_all_single, and sent back the same way and summed with
    their weights. T x 512 float32 tokens of `size` bytes, top-2 of 2 experts per PE."""
    import unishmem.kernels as K

    n, dev, H, k = rt.n_pes, rt.device, 512, 2
    n_experts = 2 * n
    T = max(1, size // 4 // H)
    g = torch.Generator().manual_seed(rt.my_pe)
    tokens = torch.randn(T, H, generator=g).to(dev)
    topk_ids = torch.randint(0, n_experts, (T, k), generator=g).to(dev)
    topk_weights = torch.rand(T, k, generator=g).to(dev)

    def unishmem_moe():
        expert_tokens, _, handle = K.dispatch(tokens, topk_ids, topk_weights, n_experts)
        return K.combine(expert_tokens, handle)

    def torch_moe():
        dest = topk_ids.flatten() // (n_experts // n)
        order = torch.argsort(dest, stable=True)
        send = tokens[order // k]
        send_counts = torch.bincount(dest, minlength=n)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts)
        sends, recvs = send_counts.tolist(), recv_counts.tolist()
        received = torch.empty(sum(recvs), H, device=dev)
        dist.all_to_all_single(received, send, recvs, sends)
        back = torch.empty_like(send)
        dist.all_to_all_single(back, received, sends, recvs)
        out = torch.zeros(T, H, device=dev)
        return out.index_add_(0, order // k, back * topk_weights.flatten()[order, None])

    return {"dispatch+combine": (unishmem_moe, torch_moe)}


def main(spec_path: str, out_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    torch.set_num_threads(1)
    with unishmem.init(heap_size=spec["heap"]) as rt:
        backend = "gloo" if rt.backend == "host" else "nccl"  # RCCL answers to "nccl" on ROCm builds
        dist.init_process_group(
            backend, store=_store(rt.n_pes), rank=rt.my_pe, world_size=rt.n_pes, timeout=datetime.timedelta(seconds=300)
        )

        def agree_max(x: float) -> float:
            t = torch.tensor([x], dtype=torch.float64, device=rt.device if backend == "nccl" else "cpu")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t[0])

        def timed(op, barrier) -> float:
            def synced():
                op()
                torch.cuda.synchronize()

            sync = synced if rt.device.type == "cuda" else op
            return measure(
                sync, barrier, agree_max, budget_s=spec["budget_s"], reps=spec["reps"], max_iters=spec["max_iters"]
            )["seconds"]

        rows = []
        for size in spec["sizes"]:
            built = cases(rt, size)
            for name in TIMINGS:
                mine, reference = built[name]
                rows.append(
                    {
                        "kernel": name,
                        "bytes": size,
                        "pes": rt.n_pes,
                        "seconds": timed(mine, rt.barrier_all),
                        "reference_seconds": timed(reference, dist.barrier),
                    }
                )
                rt.free_workspaces()  # the next kernel's buffers fit the heap
        dist.destroy_process_group()
        if rt.my_pe == 0:
            with open(out_path, "w") as f:
                json.dump(
                    {
                        "backend": rt.backend,
                        "reference": f"torch.distributed {backend}",
                        "interpreted": os.environ.get("TRITON_INTERPRET") == "1",
                        "rows": rows,
                    },
                    f,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
