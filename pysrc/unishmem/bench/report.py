"""The benchmark's report: figures beside their references (same run), as a table, JSON and a plot."""
from __future__ import annotations

from .plan import BOUND_FORMULA, COLLECTIVES, TARGETED, TRAFFIC, KiB, MiB, copy_bytes, memcpy_ref, ref_key, traffic

TARGET_FROM = 64 * KiB      # collective targets apply from this size up
P2P_TARGET_FROM = 1 * MiB   # put/get target
TARGET_PES = (2, 4)
DESCRIPTIONS = {
    "reduce": "all-reduce, float32 sum",
    "reducescatter": "reduce-scatter, float32 sum",
    "fcollect": "all-gather, S = each PE's block",
    "alltoall": "all-to-all, S = each PE's send buffer",
    "broadcast": "from PE 0",
}
MPI_NAMES = {"reduce": "Allreduce", "reducescatter": "Reduce_scatter_block", "fcollect": "Allgather",
             "alltoall": "Alltoall", "broadcast": "Bcast"}
GLOO_NAMES = {"reduce": "all_reduce", "reducescatter": "reduce_scatter", "fcollect": "all_gather",
              "alltoall": "all_to_all_single", "broadcast": "broadcast"}


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
    where the issue sets one, the target and whether this run met it."""
    report = {"meta": meta, "formulas": {"bound": BOUND_FORMULA, **{op: f[2] for op, f in TRAFFIC.items()}},
              "put": [], "get": [], "pingpong": [], "barrier": [], "collectives": []}
    two = host.get(2, {})
    memcpy = _by_size(two.get("memcpy"))
    send = _by_size(_get(mpi, 2, "send"))
    for kind in ("put", "get"):
        for size, seconds in sorted(_by_size(two.get(kind)).items()):
            ref = memcpy[size]
            ratio = ref / seconds  # bandwidth ratio
            row = {"bytes": size, "seconds": seconds, "GBps": size / seconds / 1e9,
                   "reference": {"memcpy_seconds": ref, "memcpy_GBps": size / ref / 1e9,
                                 "open_mpi_send_GBps": size / send[size] / 1e9 if size in send else None},
                   "x_memcpy": ratio}
            if size >= P2P_TARGET_FROM:
                row.update(target=">= 0.9x memcpy bandwidth", met=ratio >= 0.9)
            report[kind].append(row)

    pp = two.get("pingpong")
    if pp:
        mpi_pp = _get(mpi, 2, "pingpong")
        report["pingpong"] = [
            {"figure": "C++ loop: put_signal + signal_wait_until", "seconds": pp["cpp_signal"],
             "reference": {"raw_atomic_seconds": pp["raw_atomic"]}, "x_reference": pp["cpp_signal"] / pp["raw_atomic"],
             "target": "<= 2x the raw shared-memory atomic round trip",
             "met": pp["cpp_signal"] <= 2 * pp["raw_atomic"]},
            {"figure": "Python: rt.put_signal + rt.signal_wait_until", "seconds": pp["python_signal"],
             "reference": {"open_mpi_sendrecv_seconds": mpi_pp},
             "x_reference": pp["python_signal"] / mpi_pp if mpi_pp else None,
             "target": "<= 0.5x Open MPI's Send/Recv round trip (mpi4py)",
             "met": pp["python_signal"] <= 0.5 * mpi_pp if mpi_pp else None},
        ]
        report["meta"]["pingpong_payload_bytes"] = pp["payload_bytes"]

    for n in plan.all_pes():
        b = host[n]["barrier"]
        ref_mpi, ref_gloo = _get(mpi, n, "barrier"), _get(gloo, n, "barrier")
        report["barrier"].append({
            "pes": n, "seconds": b["python"], "cpp_loop_seconds": b["cpp"],
            "reference": {"open_mpi_seconds": ref_mpi, "gloo_seconds": ref_gloo},
            "x_open_mpi": b["python"] / ref_mpi if ref_mpi else None,
            "target": "<= 0.5x Open MPI's barrier", "met": b["python"] <= 0.5 * ref_mpi if ref_mpi else None})

    for op in COLLECTIVES:
        for n in plan.all_pes():
            figures = _by_size(_get(host, n, "collectives", op))
            copies = _get(host, n, "memcpy_all") or {}  # "bytes/piece" -> seconds per copy
            share = max(1.0, n / host[n]["cores"]) if n in host else 1.0
            for size, seconds in sorted(figures.items()):
                c = copy_bytes(op, size, n)
                ref = memcpy_ref(op, size, n)
                per_byte = copies[ref_key(ref)] / ref[0]
                bound = c * per_byte * share  # (R + W) / (2 B) * n / cores, with R + W = 2c, 1/B = per_byte
                r, w = traffic(op, size, n)
                ref_mpi = _by_size(_get(mpi, n, "collectives", op)).get(size)
                ref_gloo = _by_size(_get(gloo, n, "collectives", op)).get(size)
                row = {"op": op, "pes": n, "bytes": size, "seconds": seconds,
                       "reference": {"bound_seconds": bound, "read_bytes": r, "write_bytes": w,
                                     "memcpy_GBps": 1 / per_byte / 1e9, "memcpy_bytes": ref[0],
                                     "memcpy_piece": ref[1], "cores": host[n]["cores"],
                                     "open_mpi_seconds": ref_mpi, "gloo_seconds": ref_gloo},
                       "x_bound": seconds / bound,
                       "x_faster_than_open_mpi": ref_mpi / seconds if ref_mpi else None,
                       "x_faster_than_gloo": ref_gloo / seconds if ref_gloo else None}
                if op in TARGETED and n in TARGET_PES and size >= TARGET_FROM:
                    row["target"] = "<= 2x bound, >= 2x faster than Open MPI, >= 3x faster than gloo"
                    row["met"] = {"bound": row["x_bound"] <= 2,
                                  "open_mpi": row["x_faster_than_open_mpi"] >= 2 if ref_mpi else None,
                                  "gloo": row["x_faster_than_gloo"] >= 3 if ref_gloo else None}
                report["collectives"].append(row)
    return report


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


def text(report: dict) -> str:
    m = report["meta"]
    out = [f"unishmem bench: {m['backend']} backend, {m['date']}, {m['host']} ({m['cpus']} CPUs), torch {m['torch']}",
           f"references measured in this run: memcpy and a raw shared-memory atomic ping-pong (C++), "
           f"{m.get('open_mpi') or 'Open MPI: skipped (' + m['skipped'].get('open_mpi', '?') + ')'}, "
           f"{m.get('gloo') or 'gloo: skipped (' + m['skipped'].get('gloo', '?') + ')'}",
           "each time is the best of several runs, a run's time being its slowest PE's; "
           "targets are the issue's (ok / MISS)", ""]
    if report["put"]:
        out.append("put / get: PE 0 copies to / from PE 1 (2 PEs, Python rt.put / rt.get); "
                   "memcpy: private buffers, same process          target >= 0.9x memcpy from 1 MiB")
        rows = []
        for p, g in zip(report["put"], report["get"]):
            rows.append([fmt_size(p["bytes"]), fmt_gbps(p["GBps"]), fmt_gbps(g["GBps"]),
                         fmt_gbps(p["reference"]["memcpy_GBps"]), fmt_x(p["x_memcpy"]) + " " + mark(p.get("met")),
                         fmt_x(g["x_memcpy"]) + " " + mark(g.get("met")),
                         fmt_gbps(p["reference"]["open_mpi_send_GBps"])])
        out += _table(["size", "put GB/s", "get GB/s", "memcpy GB/s", "put/memcpy", "get/memcpy",
                       "Open MPI Send GB/s"], rows) + [""]
    if report["pingpong"]:
        out.append(f"signal ping-pong round trip (2 PEs, {m.get('pingpong_payload_bytes', 8)}-byte payload, "
                   "signal SET, wait until >=)")
        rows = []
        for r in report["pingpong"]:
            (ref_name, ref), = r["reference"].items()
            label = {"raw_atomic_seconds": "raw shm atomic ping-pong",
                     "open_mpi_sendrecv_seconds": "Open MPI Send/Recv (mpi4py)"}[ref_name]
            rows.append([r["figure"], fmt_time(r["seconds"]), label, fmt_time(ref), fmt_x(r["x_reference"]),
                         r["target"].split(" the ")[0].split(" Open")[0] + " " + mark(r["met"])])
        out += _table(["figure", "time", "reference", "ref time", "ratio", "target"], rows) + [""]
    if report["barrier"]:
        out.append("barrier (rt.barrier_all from Python; C++ loop: the backend's barrier without Python)"
                   "          target <= 0.5x Open MPI")
        rows = [[r["pes"], fmt_time(r["seconds"]), fmt_time(r["cpp_loop_seconds"]),
                 fmt_time(r["reference"]["open_mpi_seconds"]), fmt_time(r["reference"]["gloo_seconds"]),
                 fmt_x(r["x_open_mpi"]) + " " + mark(r["met"])] for r in report["barrier"]]
        out += _table(["PEs", "rt.barrier_all", "C++ loop", "Open MPI Barrier", "gloo barrier", "x Open MPI"],
                      rows) + [""]
    if report["collectives"]:
        out.append(f"collectives (Python rt.<op>); memory-traffic {BOUND_FORMULA}")
        out.append("targets at 2 and 4 PEs from 64 KiB for reduce, reducescatter, fcollect, alltoall: "
                   "<= 2x bound, >= 2x faster than Open MPI, >= 3x faster than gloo")
        for op in COLLECTIVES:
            rows = [r for r in report["collectives"] if r["op"] == op]
            if not rows:
                continue
            out.append("")
            out.append(f"{op} ({DESCRIPTIONS[op]}): {report['formulas'][op]}; "
                       f"Open MPI {MPI_NAMES[op]}, gloo {GLOO_NAMES[op]}")
            table = []
            for r in rows:
                met = r.get("met") or {}
                ref = r["reference"]
                table.append([r["pes"], fmt_size(r["bytes"]), fmt_time(r["seconds"]), fmt_time(ref["bound_seconds"]),
                              fmt_x(r["x_bound"]) + " " + mark(met.get("bound")), fmt_time(ref["open_mpi_seconds"]),
                              fmt_x(r["x_faster_than_open_mpi"]) + " " + mark(met.get("open_mpi")),
                              fmt_time(ref["gloo_seconds"]),
                              fmt_x(r["x_faster_than_gloo"]) + " " + mark(met.get("gloo"))])
            out += _table(["PEs", "size", "unishmem", "bound", "x bound", "Open MPI", "MPI/unishmem", "gloo",
                           "gloo/unishmem"], table)
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
        mpi = [(s, r["reference"]["open_mpi_send_GBps"]) for s, r in zip(sizes, report["put"])
               if r["reference"]["open_mpi_send_GBps"]]
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
            ax.plot(sizes, [r["reference"]["bound_seconds"] * 1e6 for r in mine], ":", color=color,
                    label=f"bound {n} PEs")
            for key, style, name in (("open_mpi_seconds", "^--", "Open MPI"), ("gloo_seconds", "x-.", "gloo")):
                pts = [(r["bytes"], r["reference"][key] * 1e6) for r in mine if r["reference"][key]]
                if pts:
                    ax.plot(*zip(*pts), style, color=color, alpha=0.6, label=f"{name} {n}")
        _axes(ax, f"{op} time", "us")
    ax = axes[6]
    if report["barrier"]:
        pes = [r["pes"] for r in report["barrier"]]
        ax.plot(pes, [r["seconds"] * 1e6 for r in report["barrier"]], "o-", label="rt.barrier_all")
        ax.plot(pes, [r["cpp_loop_seconds"] * 1e6 for r in report["barrier"]], "s-", label="C++ loop")
        for key, style, name in (("open_mpi_seconds", "^--", "Open MPI"), ("gloo_seconds", "x-.", "gloo")):
            pts = [(r["pes"], r["reference"][key] * 1e6) for r in report["barrier"] if r["reference"][key]]
            if pts:
                ax.plot(*zip(*pts), style, label=name)
        ax.set_xticks(pes)
    _axes(ax, "barrier latency against PEs", "us", logx=False, xlabel="PEs")
    ax = axes[7]
    if report["pingpong"]:
        labels, values = [], []
        for r in report["pingpong"]:
            labels.append(r["figure"].split(":")[0])
            values.append(r["seconds"] * 1e6)
            for name, v in r["reference"].items():
                if v:
                    labels.append({"raw_atomic_seconds": "raw atomic",
                                   "open_mpi_sendrecv_seconds": "Open MPI"}[name])
                    values.append(v * 1e6)
        ax.bar(labels, values, color=["C0", "C7", "C1", "C7"][:len(values)])
        ax.set_yscale("log")
        ax.set_title("ping-pong round trip, 2 PEs")
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

