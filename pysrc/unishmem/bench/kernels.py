"""`unishmem bench --kernels`: unishmem.kernels beside torch.distributed doing the same work on the
same tensors in the same run (kernels_worker). On the host backend the kernels run under Triton's
interpreter: those figures say what the interpreter costs, not what a GPU would do."""

from __future__ import annotations

import json
import os
import tempfile

from . import jobs
from .plan import KiB, MiB

HOST_SIZES = (64 * KiB, 256 * KiB, 1 * MiB)  # the interpreter: a 4-PE 1 MiB GEMM takes about 4 s here
GPU_SIZES = tuple(64 * KiB * 4**i for i in range(8))  # 64 KiB .. 256 MiB


def sizes_for(quick: bool, max_size: int | None, gpu: bool) -> list[int]:
    sizes = [s for s in (GPU_SIZES if gpu else HOST_SIZES) if max_size is None or s <= max_size]
    return sizes[:2] if quick else sizes


def run(
    pes: list[int], sizes: list[int], json_path: str | None, plot_path: str | None, quick: bool, quiet: bool = False
) -> int:
    spec = {"sizes": sizes, "budget_s": 0.3 if quick else 1.5, "reps": 2 if quick else 3, "max_iters": 50}
    results = []
    with tempfile.TemporaryDirectory(prefix="unishmem-bench-kernels-") as tmp:
        for n in pes:
            spec["heap"] = (4 * n + 12) * max(sizes) + 16 * MiB  # the largest kernel workspace of one size
            spec_path, out = os.path.join(tmp, f"spec{n}.json"), os.path.join(tmp, f"kernels{n}.json")
            with open(spec_path, "w") as f:
                json.dump(spec, f)
            cmd = jobs.unishmem_run(n, "unishmem.bench.kernels_worker", spec_path, out)
            results.append(
                jobs._run(
                    f"unishmem.kernels beside torch.distributed, {n} PEs",
                    cmd,
                    jobs._env(UNISHMEM_WAIT_TIMEOUT="300"),
                    out,
                    1800,
                    quiet,
                )
            )
    report = {
        "jobs": [{k: v for k, v in r.items() if k != "rows"} for r in results],
        "rows": [row for r in results for row in r["rows"]],
    }
    print(text(report))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
        print(f"\nunishmem bench: wrote {json_path}")
    if plot_path:
        plot(report, plot_path)
        print(f"unishmem bench: wrote {plot_path}")
    return 0


def _size(b: int) -> str:
    return f"{b // MiB} MiB" if b >= MiB else f"{b // KiB} KiB"


def text(report: dict) -> str:
    job = report["jobs"][0] if report["jobs"] else {}
    lines = [
        f"unishmem.kernels on the {job.get('backend')} backend"
        + (" (Triton interpreter)" if job.get("interpreted") else "")
        + f" beside {job.get('reference')}; best run of each, in the same job",
        f"{'kernel':22s} {'PEs':>3s} {'size/PE':>8s} {'unishmem us':>12s} {'reference us':>13s} {'speed-up':>9s}",
    ]
    for r in report["rows"]:
        lines.append(
            f"{r['kernel']:22s} {r['pes']:3d} {_size(r['bytes']):>8s} {r['seconds'] * 1e6:12.1f} "
            f"{r['reference_seconds'] * 1e6:13.1f} {r['reference_seconds'] / r['seconds']:8.2f}x"
        )
    lines.append("speed-up: reference time / unishmem time (above 1: unishmem is faster)")
    return "\n".join(lines)


def plot(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kernels = sorted({r["kernel"] for r in report["rows"]})
    fig, axes = plt.subplots(1, len(kernels), figsize=(5 * len(kernels), 4), squeeze=False)
    for ax, kernel in zip(axes[0], kernels):
        for i, n in enumerate(sorted({r["pes"] for r in report["rows"]})):
            rows = [r for r in report["rows"] if r["kernel"] == kernel and r["pes"] == n]
            sizes = [r["bytes"] for r in rows]
            ax.plot(sizes, [r["seconds"] * 1e6 for r in rows], "o-", color=f"C{i}", label=f"unishmem {n} PEs")
            ax.plot(sizes, [r["reference_seconds"] * 1e6 for r in rows], "x--", color=f"C{i}", label=f"reference {n}")
        ax.set(xscale="log", yscale="log", title=kernel, xlabel="bytes per PE", ylabel="us")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
