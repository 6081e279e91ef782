"""The benchmark's report: figures beside their references (same run), as a table, JSON and a plot."""

from __future__ import annotations

from typing import Any

from .plan import BOUND_FORMULA, COLLECTIVES, TARGETED, TRAFFIC, KiB, MiB, copy_bytes, memcpy_ref, ref_key, traffic

TARGET_FROM = 64 * KiB  # collective targets apply from this size up
P2P_TARGET_FROM = 1 * MiB  # put/get target
TARGET_PES = (2, 4)
VIEWS_TARGET = 1.3  # (views round trip - slicing cost) / reused round trip, on the long runs' means
SLICED = "reused tensors, with the views' slices made and dropped"
P99_UNDER_LOAD = 50e-6  # the Python round trip's p99 with --load 1
DESCRIPTIONS = {
    "reduce": "all-reduce, float32 sum",
    "reducescatter": "reduce-scatter, float32 sum",
    "fcollect": "all-gather, S = each PE's block",
    "alltoall": "all-to-all, S = each PE's send buffer",
    "broadcast": "from PE 0",
}
MPI_NAMES = {
    "reduce": "Allreduce",
    "reducescatter": "Reduce_scatter_block",
    "fcollect": "Allgather",
    "alltoall": "Alltoall",
    "broadcast": "Bcast",
}
GLOO_NAMES = {
    "reduce": "all_reduce",
    "reducescatter": "reduce_scatter",
    "fcollect": "all_gather",
    "alltoall": "all_to_all_single",
    "broadcast": "broadcast",
}


def _by_size(d: dict | None) -> dict[int, float]:
    return {int(k): v for k, v in (d or {}).items()}


def _get(results: dict, n: int, *path):
    node = results.get(n)
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def build(plan, host: dict, mpi: dict, gloo: dict, meta: dict) -> dict:
    """host/mpi/gloo: {n_pes: that job's JSON}. Every row holds its figure, its references and,
    where the project sets one, the target and whether this run met it."""
    report: dict[str, Any] = {
        "meta": meta,
        "formulas": {"bound": BOUND_FORMULA, **{op: f[2] for op, f in TRAFFIC.items()}},
        "put": [],
        "get": [],
        "call_costs": [],
        "pingpong": [],
        "pingpong_views": [],
        "barrier": [],
        "collectives": [],
    }
    two = host.get(2, {})
    memcpy = _by_size(two.get("memcpy"))
    send = _by_size(_get(mpi, 2, "send"))
    for kind in ("put", "get"):
        for size, seconds in sorted(_by_size(two.get(kind)).items()):
            ref = memcpy[size]
            ratio = ref / seconds  # bandwidth ratio
            row: dict[str, Any] = {
                "bytes": size,
                "seconds": seconds,
                "GBps": size / seconds / 1e9,
                "reference": {
                    "memcpy_seconds": ref,
                    "memcpy_GBps": size / ref / 1e9,
                    "open_mpi_send_GBps": size / send[size] / 1e9 if size in send else None,
                },
                "x_memcpy": ratio,
            }
            if size >= P2P_TARGET_FROM:
                row.update(target=">= 0.9x memcpy bandwidth", met=ratio >= 0.9)
            report[kind].append(row)

    for name, c in (two.get("call_costs") or {}).items():
        report["call_costs"].append(
            {
                "call": name,
                "seconds": c["python"],
                "binding_seconds": c["binding"],
                "python_layer_seconds": c["python"] - c["binding"],
            }
        )

    pp = two.get("pingpong")
    if pp:
        mpi_pp = _get(mpi, 2, "pingpong")
        mpi_name = "Open MPI Send/Recv (mpi4py)"
        # the mean's goal depends on the load beside the jobs: idle, or one busy process
        load = (meta.get("load") or {}).get("processes", 0)
        mean_target = {
            0: (1, "<= Open MPI's mean round trip (mpi4py), idle"),
            1: (1.5, "<= 1.5x Open MPI's mean round trip (mpi4py) under --load 1"),
        }.get(load)
        p99_target = (P99_UNDER_LOAD, "< 50 us under --load 1") if load == 1 else None
        views, sliced, reused = pp["python_signal_views"], pp["python_signal_sliced"], pp["python_signal"]
        report["pingpong"] = [
            _latency(
                "C++ loop: put_signal + signal_wait_until",
                pp["cpp_signal"],
                "raw shm atomic ping-pong",
                pp["raw_atomic"],
                best=(2, "<= 2x the raw shared-memory atomic round trip"),
                median=(1.5, "<= 1.5x the raw shared-memory atomic round trip"),
            ),
            _latency(
                "Python, reused tensors: rt.put_signal + rt.signal_wait_until",
                reused,
                mpi_name,
                mpi_pp,
                best=(0.5, "<= 0.5x Open MPI's Send/Recv round trip (mpi4py)"),
                median=(1, "<= Open MPI's Send/Recv round trip (mpi4py)"),
                mean=mean_target,
                p99=p99_target,
            ),
            _latency(
                f"Python, views made in the call: rt.put_signal(buf[0:{pp['payload_bytes']}], src, sig[0:1], ...)",
                views,
                mpi_name,
                mpi_pp,
                mean=mean_target,
                p99=p99_target,
            ),
        ]
        report["pingpong"][-1]["sliced"] = sliced
        # torch's charge for the slices: the sliced loop's round trip beyond the reused one's
        slicing = {stat: sliced[stat] - reused[stat] for stat in ("mean", "best")}
        net = views["mean"] - slicing["mean"]
        report["pingpong_views"].append(
            {
                "figure": "views round trip - slicing cost (means)",
                "seconds": net,
                "views_seconds": views["mean"],
                "slicing_seconds": slicing["mean"],
                "reference": {"name": "reused round trip (mean)", "seconds": reused["mean"]},
                "ratio": net / reused["mean"],
                "best_ratio": (views["best"] - slicing["best"]) / reused["best"],
                "target": f"<= {VIEWS_TARGET}x the reused round trip",
                "met": net / reused["mean"] <= VIEWS_TARGET,
            }
        )
        report["meta"]["pingpong_payload_bytes"] = pp["payload_bytes"]

    for n in plan.all_pes():
        b = host[n]["barrier"]
        row = _latency(
            "rt.barrier_all",
            b["python"],
            "Open MPI Barrier",
            _get(mpi, n, "barrier"),
            best=(0.5, "<= 0.5x Open MPI's barrier"),
            median=(1, "<= Open MPI's barrier") if n == 2 else None,
        )
        row.update(pes=n, cpp_loop=b["cpp"], gloo=_get(gloo, n, "barrier"))
        report["barrier"].append(row)

    for op in COLLECTIVES:
        for n in plan.all_pes():
            figures = _by_size(_get(host, n, "collectives", op))
            copies = _get(host, n, "memcpy_all") or {}  # "bytes/piece" -> seconds per copy
            share = max(1.0, n / host[n]["cores"]) if n in host else 1.0
            for size, seconds in sorted(figures.items()):
                c = copy_bytes(op, size, n)
                copy_ref = memcpy_ref(op, size, n)
                per_byte = copies[ref_key(copy_ref)] / copy_ref[0]
                bound = c * per_byte * share  # (R + W) / (2 B) * n / cores, with R + W = 2c, 1/B = per_byte
                r, w = traffic(op, size, n)
                ref_mpi = _by_size(_get(mpi, n, "collectives", op)).get(size)
                ref_gloo = _by_size(_get(gloo, n, "collectives", op)).get(size)
                row = {
                    "op": op,
                    "pes": n,
                    "bytes": size,
                    "seconds": seconds,
                    "reference": {
                        "bound_seconds": bound,
                        "read_bytes": r,
                        "write_bytes": w,
                        "memcpy_GBps": 1 / per_byte / 1e9,
                        "memcpy_bytes": copy_ref[0],
                        "memcpy_piece": copy_ref[1],
                        "cores": host[n]["cores"],
                        "open_mpi_seconds": ref_mpi,
                        "gloo_seconds": ref_gloo,
                    },
                    "x_bound": seconds / bound,
                    "x_faster_than_open_mpi": ref_mpi / seconds if ref_mpi else None,
                    "x_faster_than_gloo": ref_gloo / seconds if ref_gloo else None,
                }
                if op in TARGETED and n in TARGET_PES and size >= TARGET_FROM:
                    row["target"] = "<= 2x bound, >= 2x faster than Open MPI, >= 3x faster than gloo"
                    row["met"] = {
                        "bound": row["x_bound"] <= 2,
                        "open_mpi": row["x_faster_than_open_mpi"] >= 2 if ref_mpi else None,
                        "gloo": row["x_faster_than_gloo"] >= 3 if ref_gloo else None,
                    }
                report["collectives"].append(row)
    return report


def _latency(figure: str, mine: dict, ref_name: str, ref: dict | None, **targets) -> dict:
    """A latency row: the figure's and its reference's best, mean, median and p99 (timing.summary),
    the ratios of their best, mean and median, and the targets where the project sets them: best=,
    mean=, median= (factor, text) on a ratio to the reference, p99= (seconds, text) on the figure's own."""
    row = {
        "figure": figure,
        "seconds": mine["best"],
        "mean": mine["mean"],
        "median": mine["median"],
        "p99": mine["p99"],
        "samples": mine["samples"],
        "reference": {"name": ref_name, **(ref or {})},
        "x_reference": mine["best"] / ref["best"] if ref else None,
        "x_reference_mean": mine["mean"] / ref["mean"] if ref else None,
        "x_reference_median": mine["median"] / ref["median"] if ref else None,
    }
    values = {"best": row["x_reference"], "mean": row["x_reference_mean"], "median": row["x_reference_median"]}
    for stat, target in targets.items():
        if not target:
            continue
        key = "" if stat == "best" else stat + "_"
        row[key + "target"] = target[1]
        if stat == "p99":  # a bound in seconds, under which the figure's own p99 must stay
            row[key + "met"] = row["p99"] < target[0]
        else:
            row[key + "met"] = values[stat] <= target[0] if values[stat] is not None else None
    return row


# ---- text -----------------------------------------------------------------------------------------


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if s >= scale or unit == "ns":
            v = s / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return "-"


def fmt_size(b: int) -> str:
    for unit, scale in (("MiB", MiB), ("KiB", KiB)):
        if b >= scale and b % scale == 0:
            return f"{b // scale} {unit}"
    return f"{b} B"


def fmt_x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def fmt_gbps(x: float | None) -> str:
    return "-" if x is None else (f"{x:.3g}" if x < 100 else f"{x:.0f}")


def mark(met) -> str:
    return {True: "ok", False: "MISS"}.get(met, "")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return [line(header)] + [line(r) for r in rows]


LATENCY_HEADER = [
    "figure",
    "best",
    "mean",
    "median",
    "p99",
    "samples",
    "x ref best",
    "x ref mean",
    "x ref median",
    "targets",
]


def _latency_rows(first, r: dict, others=()) -> list[list]:
    """Table rows of a latency row (_latency): the figure with its ratios and targets, then its
    reference, then any further figures; `first` leads each row when given (the PE count)."""

    def stats(label, d):
        return [
            label,
            fmt_time(d.get("best")),
            fmt_time(d.get("mean")),
            fmt_time(d.get("median")),
            fmt_time(d.get("p99")),
            d.get("samples", "-"),
        ]

    targets = "; ".join(
        f"{stat} {r[key + 'target'].split(' the ')[0].split(' Open')[0]} {mark(r[key + 'met'])}"
        for stat, key in (("best", ""), ("mean", "mean_"), ("median", "median_"), ("p99", "p99_"))
        if key + "target" in r
    )
    rows = [
        stats(r["figure"], {"best": r["seconds"], **r})
        + [fmt_x(r["x_reference"]), fmt_x(r["x_reference_mean"]), fmt_x(r["x_reference_median"]), targets],
        stats("  ref: " + r["reference"]["name"], r["reference"]) + ["", "", "", ""],
    ]
    rows += [stats("  " + label, d or {}) + ["", "", "", ""] for label, d in others]
    return [([first] if first != "" else []) + row for row in rows]


def text(report: dict) -> str:
    m = report["meta"]
    out = [
        f"unishmem bench: {m['backend']} backend, {m['date']}, {m['host']} ({m['cpus']} CPUs), torch {m['torch']}",
        f"references measured in this run: memcpy and a raw shared-memory atomic ping-pong (C++), "
        f"{m.get('open_mpi') or 'Open MPI: skipped (' + m['skipped'].get('open_mpi', '?') + ')'}, "
        f"{m.get('gloo') or 'gloo: skipped (' + m['skipped'].get('gloo', '?') + ')'}",
        "best: the best of several runs (a run's time being its slowest PE's), as a mean per call; "
        "mean, median and p99: over one long run timed call by call (each call's time includes one clock read; "
        "a ping-pong's run is at least 10,000 round trips)",
        f"load: {m['load']['processes']} busy process(es) ran beside every job"
        if m.get("load", {}).get("processes")
        else "load: none besides this machine's own",
        "targets: this project's goals for the host backend (ok: met in this run; MISS: not met)",
        "",
    ]
    if report["put"]:
        out.append(
            "put / get: PE 0 copies to / from PE 1 (2 PEs, Python rt.put / rt.get); "
            "memcpy: private buffers, same process          target >= 0.9x memcpy from 1 MiB"
        )
        rows = []
        for p, g in zip(report["put"], report["get"]):
            rows.append(
                [
                    fmt_size(p["bytes"]),
                    fmt_gbps(p["GBps"]),
                    fmt_gbps(g["GBps"]),
                    fmt_gbps(p["reference"]["memcpy_GBps"]),
                    fmt_x(p["x_memcpy"]) + " " + mark(p.get("met")),
                    fmt_x(g["x_memcpy"]) + " " + mark(g.get("met")),
                    fmt_gbps(p["reference"]["open_mpi_send_GBps"]),
                ]
            )
        out += _table(
            ["size", "put GB/s", "get GB/s", "memcpy GB/s", "put/memcpy", "get/memcpy", "Open MPI Send GB/s"], rows
        ) + [""]
    if report["call_costs"]:
        out.append(
            f"Python per-call cost (PE 0 to PE 1, {m.get('pingpong_payload_bytes', 8)} B, nothing to wait for; "
            "best run's mean per call): the call from Python, the binding alone with its arguments ready, "
            "and the difference (the Python layer's checks)"
        )
        rows = [
            [
                f"rt.{r['call']}",
                fmt_time(r["seconds"]),
                fmt_time(r["binding_seconds"]),
                fmt_time(max(r["python_layer_seconds"], 0)),
            ]
            for r in report["call_costs"]
        ]
        out += _table(["call", "from Python", "binding alone", "Python layer"], rows) + [""]
    if report["pingpong"]:
        out.append(
            f"signal ping-pong round trip (2 PEs, {m.get('pingpong_payload_bytes', 8)}-byte payload, "
            "signal SET, wait until >=; PE 0 times each round trip)"
        )
        rows = []
        for r in report["pingpong"]:
            rows += _latency_rows("", r, [(SLICED, r["sliced"])] if "sliced" in r else ())
        out += _table(LATENCY_HEADER, rows) + [""]
    if report["pingpong_views"]:
        out.append(
            "views made in the call: what the Python layer adds for views beyond torch's own slicing (the "
            "slicing cost: the round trip of reused tensors with the slices made and dropped, less that of "
            "reused tensors), against the reused round trip (the long runs' means; best: the best runs')"
        )
        rows = [
            [
                r["figure"],
                fmt_time(r["seconds"]),
                r["reference"]["name"],
                fmt_time(r["reference"]["seconds"]),
                fmt_x(r["ratio"]),
                fmt_x(r["best_ratio"]),
                f"{r['target'].split(' the ')[0]} {mark(r['met'])}",
            ]
            for r in report["pingpong_views"]
        ]
        out += _table(["figure", "seconds", "reference", "ref seconds", "ratio", "best ratio", "target"], rows)
        out += [""]
    if report["barrier"]:
        out.append(
            "barrier (rt.barrier_all from Python; C++ loop: the backend's barrier without Python; "
            "call by call, the slowest PE's time)"
        )
        rows = []
        for r in report["barrier"]:
            rows += _latency_rows(r["pes"], r, [("C++ loop", r["cpp_loop"]), ("gloo barrier", r["gloo"])])
        out += _table(["PEs"] + LATENCY_HEADER, rows) + [""]
    if report["collectives"]:
        out.append(f"collectives (Python rt.<op>); memory-traffic {BOUND_FORMULA}")
        out.append(
            "targets at 2 and 4 PEs from 64 KiB for reduce, reducescatter, fcollect, alltoall: "
            "<= 2x bound, >= 2x faster than Open MPI, >= 3x faster than gloo"
        )
        for op in COLLECTIVES:
            op_rows = [r for r in report["collectives"] if r["op"] == op]
            if not op_rows:
                continue
            out.append("")
            out.append(
                f"{op} ({DESCRIPTIONS[op]}): {report['formulas'][op]}; Open MPI {MPI_NAMES[op]}, gloo {GLOO_NAMES[op]}"
            )
            table = []
            for r in op_rows:
                met = r.get("met") or {}
                ref = r["reference"]
                table.append(
                    [
                        r["pes"],
                        fmt_size(r["bytes"]),
                        fmt_time(r["seconds"]),
                        fmt_time(ref["bound_seconds"]),
                        fmt_x(r["x_bound"]) + " " + mark(met.get("bound")),
                        fmt_time(ref["open_mpi_seconds"]),
                        fmt_x(r["x_faster_than_open_mpi"]) + " " + mark(met.get("open_mpi")),
                        fmt_time(ref["gloo_seconds"]),
                        fmt_x(r["x_faster_than_gloo"]) + " " + mark(met.get("gloo")),
                    ]
                )
            out += _table(
                ["PEs", "size", "unishmem", "bound", "x bound", "Open MPI", "MPI/unishmem", "gloo", "gloo/unishmem"],
                table,
            )
    return "\n".join(out)


# ---- plot -----------------------------------------------------------------------------------------


def plot(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(20, 9))
    axes = axes.ravel()
    ax = axes[0]
    if report["put"]:
        sizes = [r["bytes"] for r in report["put"]]
        ax.plot(sizes, [r["GBps"] for r in report["put"]], "o-", label="put")
        ax.plot(sizes, [r["GBps"] for r in report["get"]], "s-", label="get")
        ax.plot(sizes, [r["reference"]["memcpy_GBps"] for r in report["put"]], "k--", label="memcpy")
        mpi = [
            (s, r["reference"]["open_mpi_send_GBps"])
            for s, r in zip(sizes, report["put"])
            if r["reference"]["open_mpi_send_GBps"]
        ]
        if mpi:
            ax.plot(*zip(*mpi), "^:", label="Open MPI Send")
    _axes(ax, "put / get bandwidth, 2 PEs", "GB/s")
    for ax, op in zip(axes[1:6], COLLECTIVES):
        rows = [r for r in report["collectives"] if r["op"] == op]
        for i, n in enumerate(sorted({r["pes"] for r in rows})):
            mine = [r for r in rows if r["pes"] == n]
            color = f"C{i}"
            sizes = [r["bytes"] for r in mine]
            ax.plot(sizes, [r["seconds"] * 1e6 for r in mine], "o-", color=color, label=f"unishmem {n} PEs")
            ax.plot(
                sizes, [r["reference"]["bound_seconds"] * 1e6 for r in mine], ":", color=color, label=f"bound {n} PEs"
            )
            for key, style, name in (("open_mpi_seconds", "^--", "Open MPI"), ("gloo_seconds", "x-.", "gloo")):
                pts = [(r["bytes"], r["reference"][key] * 1e6) for r in mine if r["reference"][key]]
                if pts:
                    ax.plot(*zip(*pts), style, color=color, alpha=0.6, label=f"{name} {n}")
        _axes(ax, f"{op} time", "us")
    ax = axes[6]
    if report["barrier"]:
        pes = [r["pes"] for r in report["barrier"]]
        ax.plot(pes, [r["median"] * 1e6 for r in report["barrier"]], "o-", label="rt.barrier_all")
        ax.plot(pes, [r["cpp_loop"]["median"] * 1e6 for r in report["barrier"]], "s-", label="C++ loop")
        for figure, style, name in (
            (lambda r: r["reference"], "^--", "Open MPI"),
            (lambda r: r["gloo"], "x-.", "gloo"),
        ):
            pts = [
                (r["pes"], figure(r)["median"] * 1e6) for r in report["barrier"] if figure(r) and "median" in figure(r)
            ]
            if pts:
                ax.plot(*zip(*pts), style, label=name)
        ax.set_xticks(pes)
    _axes(ax, "barrier latency against PEs (median)", "us", logx=False, xlabel="PEs")
    ax = axes[7]
    if report["pingpong"]:
        labels, values, colors = [], [], []
        for i, r in enumerate(report["pingpong"]):
            labels.append(r["figure"].split(":")[0])
            values.append(r["median"] * 1e6)
            colors.append(f"C{i}")
            name = r["reference"]["name"].split(" (")[0]
            if "median" in r["reference"] and name not in labels:
                labels.append(name)
                values.append(r["reference"]["median"] * 1e6)
                colors.append("C7")
        ax.bar(labels, values, color=colors)
        ax.tick_params(axis="x", labelsize=6)
        ax.set_yscale("log")
        ax.set_title("ping-pong round trip, 2 PEs (median)")
        ax.set_ylabel("us")
    m = report["meta"]
    fig.suptitle(f"unishmem bench, {m['backend']} backend, {m['date']}, {m['host']} ({m['cpus']} CPUs)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _axes(ax, title: str, ylabel: str, logx: bool = True, xlabel: str = "bytes") -> None:
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
