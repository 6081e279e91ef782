"""Plot a recorded `unishmem bench` run from its text output, for the docs.

The recorded runs are kept as the text `unishmem bench` printed, so this reads its tables: put/get bandwidth,
the barrier and the collectives. Every plot is titled with the run's first line (its date and machine).

    python scripts/plot_bench.py docs/benchmarks/run-2026-11-30.txt docs/benchmarks
"""

import argparse
import pathlib
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
SIZES = {"B": 1, "KiB": 2**10, "MiB": 2**20}
COLLECTIVES = ("reduce", "reducescatter", "fcollect", "alltoall", "broadcast")


def seconds(value: str, unit: str) -> float:
    return float(value) * UNITS[unit]


def parse(text: str) -> dict:
    """The run's title line and its tables: put/get rows, barrier rows, collective rows per op."""
    lines = text.splitlines()
    run = {"title": lines[0], "put": [], "barrier": [], "collectives": {op: [] for op in COLLECTIVES}}
    section = None
    for line in lines[1:]:
        head = line.split(" ", 1)[0]
        if head in ("put", "barrier") or head in COLLECTIVES:
            section = head
            continue
        if not line.strip() or not line.lstrip()[0].isdigit():
            continue
        f = line.split()
        if section == "put":  # size unit put get memcpy ratio [mark] ratio [mark] mpi
            numbers = [x for x in f[2:] if not x.endswith("x") and x not in ("ok", "MISS")]
            run["put"].append((int(f[0]) * SIZES[f[1]], *map(float, numbers)))
        elif section == "barrier":  # PEs, then four times with their units
            times = [seconds(f[i], f[i + 1]) for i in range(1, 9, 2)]
            run["barrier"].append((int(f[0]), *times))
        elif section in COLLECTIVES:  # PEs size unit, unishmem, bound, x bound [mark], MPI, ratio [mark], gloo, ...
            values = [x for x in f[3:] if x not in ("ok", "MISS") and not x.endswith("x")]
            times = [seconds(values[i], values[i + 1]) for i in range(0, 8, 2)]
            run["collectives"][section].append((int(f[0]), int(f[1]) * SIZES[f[2]], *times))
    return run


def style(ax, title: str, ylabel: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)


def plot(run: dict, out: pathlib.Path) -> list[pathlib.Path]:
    source = "source: " + re.sub(r"^unishmem bench: ", "unishmem bench, ", run["title"])
    written = []

    fig, ax = plt.subplots(figsize=(8, 5))
    size, put, get, memcpy, mpi = zip(*run["put"])
    ax.plot(size, put, "o-", label="unishmem rt.put")
    ax.plot(size, get, "s-", label="unishmem rt.get")
    ax.plot(size, memcpy, "k--", label="memcpy (private buffers)")
    ax.plot(size, mpi, "^:", label="Open MPI Send")
    style(ax, "put / get bandwidth, 2 PEs", "GB/s")
    ax.set_xlabel("bytes")
    fig.suptitle(source, fontsize=8)
    written.append(save(fig, out / "put-get.png"))

    fig, ax = plt.subplots(figsize=(8, 5))
    pes, barrier, loop, mpi, gloo = zip(*run["barrier"])
    for values, label in ((barrier, "rt.barrier_all"), (loop, "C++ loop"), (mpi, "Open MPI"), (gloo, "gloo")):
        ax.plot(pes, [v * 1e6 for v in values], "o-", label=label)
    style(ax, "barrier (best of several runs)", "us")
    ax.set_xticks(pes, [str(p) for p in pes])
    ax.set_xlabel("PEs")
    fig.suptitle(source, fontsize=8)
    written.append(save(fig, out / "barrier.png"))

    fig, axes = plt.subplots(2, 3, figsize=(18, 10))
    axes[-1, -1].axis("off")  # five collectives on six panels
    for ax, op in zip(axes.ravel(), COLLECTIVES):
        rows = run["collectives"][op]
        for i, n in enumerate(sorted({r[0] for r in rows if r[0] <= 4})):
            mine = [r for r in rows if r[0] == n]
            size = [r[1] for r in mine]
            color = f"C{i}"
            ax.plot(size, [r[2] * 1e6 for r in mine], "o-", color=color, label=f"unishmem, {n} PEs")
            ax.plot(size, [r[3] * 1e6 for r in mine], ":", color=color, label=f"bound, {n} PEs")
            ax.plot(size, [r[4] * 1e6 for r in mine], "^--", color=color, alpha=0.6, label=f"Open MPI, {n} PEs")
            ax.plot(size, [r[5] * 1e6 for r in mine], "x-.", color=color, alpha=0.6, label=f"gloo, {n} PEs")
        style(ax, f"{op} (best of several runs)", "us")
        ax.set_xlabel("bytes")
    fig.suptitle(source, fontsize=9)
    written.append(save(fig, out / "collectives.png"))
    return written


def save(fig, path: pathlib.Path) -> pathlib.Path:
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=pathlib.Path, help="a `unishmem bench` text output")
    parser.add_argument("out", type=pathlib.Path, help="the folder the PNG files go to")
    args = parser.parse_args()
    run = parse(args.run.read_text())
    if not run["put"] or not run["barrier"] or not all(run["collectives"].values()):
        missing = [k for k in ("put", "barrier") if not run[k]] + [k for k, v in run["collectives"].items() if not v]
        raise SystemExit(f"{args.run}: no table found for {', '.join(missing)}")
    for path in plot(run, args.out):
        print(path)


if __name__ == "__main__":
    main()
