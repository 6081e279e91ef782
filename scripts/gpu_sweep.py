"""Times every variant and knob of the collectives, and both forms of the GEMMs, at 8 KiB, 256 KiB, 4 MiB and
64 MiB of input per PE, in device time, beside the device copy of each collective's floor or torch.matmul of
each GEMM's shapes: the sweep that writes the measured defaults (NOTE [measured defaults] in
unishmem/kernels/_tuned.py). `scripts/gpu_check.sh --sweep` runs it on a lent GPU; `--no-gpu` runs its
CPU mode.

    unishmem run -n 2 scripts/gpu_sweep.py OUT [--cpu] [--sizes 8K,64M] [--kernels all_gather,all_reduce]
    python scripts/gpu_sweep.py --merge OUT         # OUT/gpu-<date>.json from every PE's OUT/sweep-pe<N>.json
    python scripts/gpu_sweep.py --table FILE.json   # writes unishmem/kernels/_tuned.py's TABLE from a merged sweep

Configurations (configs()): each collective pulling (UNISHMEM_PULL=1) and pushing (=0), all_gather and
all_to_all by the copy engine (UNISHMEM_COPY_ENGINE=1), all_reduce's one-shot and two-shot each way; the
grid's cap (UNISHMEM_MAX_PROGRAMS: the GPU's SMs, or fewer), the warps (UNISHMEM_COMM_WARPS) and, pushing,
the bytes a program sends a peer at a time (UNISHMEM_COMM_BLOCK_BYTES); ag_gemm and gemm_rs fused and not
(overlap=True, False: NOTE [fuse or not]), ag_gemm fused with A gathered by the copy engine ("fused,
copy": NOTE [ag_gemm copy engine]), and both chunked (NOTE [ag_gemm chunked], [gemm_rs chunked]). A configuration's knobs are environment settings, read when a
call is first planned: each row frees the workspaces and their plans first.

Timing, per (configuration, size), on every PE; float16 and bfloat16:
- graph: CALLS calls captured in one CUDA graph, the graph replayed REPLAYS times, a pair of CUDA events around
  each replay: `us` is the mean per call over every replay, `median_us` the median of the replays' means. The
  host is not in it: one replay is one launch of the whole graph.
- eager: a torch.cuda._sleep long enough to cover the host's work, then CALLS eager calls between a pair of
  events, REPLAYS times: the device time of eager calls issued ahead of the GPU (the host's time per call is
  gpu_kernel_times.py's "eager host").
- the reference, the same two ways in the same run: for a collective torch's device copy of the bytes of
  its floor (floor_bytes: half of what the kernel must read and write on one PE, as a copy of B bytes
  reads B and writes B), `us / ref_us` its time in copies of its floor; for a GEMM torch.matmul on the
  gathered shapes, and beside it (`seq`, `seq_us`) the sequential torch path its targets are set against:
  a device copy of the collective's floor bytes (for all_gather_into_tensor or reduce_scatter_tensor) and
  torch.matmul, one after the other.
Every call's result is checked against torch (after the warm call, and after a replay with new inputs).

Each PE writes OUT/sweep-pe<N>.json after every row, and a rerun skips the rows PE 0's file already holds
(resumes a cut run). --merge writes OUT/gpu-<date>.json: a list, first a header object (device, MPS share,
stack, commit), then one object per (configuration, size, dtype, mode) with `kernel`, `variant`, `knobs`,
`bytes` (per-PE input), `dtype`, `n_pes`, `mode`, `us` (the slowest PE's mean), `median_us`, `us_per_pe`,
`ref` and `ref_us` (a GEMM's also `seq` and `seq_us`). --cpu runs the same code on the host backend under TRITON_INTERPRET=1 (perf_counter,
unishmem.testing.capture() replays of one call, tiny sizes): the code paths, not speeds.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_kernel_times as times  # noqa: E402 - Clock, make_case, compare, show_size

SIZES = ("8K", "256K", "4M", "64M")
CPU_SIZES = ("8K",)
CALLS, REPLAYS = 50, 5
CPU_CALLS, CPU_REPLAYS = 2, 2
DTYPES = ("float16", "bfloat16")
FEW_PROGRAMS, CPU_FEW_PROGRAMS = 32, 2  # a grid cap below the GPU's SMs (the interpreter's resident programs)
PULL, PUSH, COPY = ({"UNISHMEM_PULL": "1"}, {"UNISHMEM_PULL": "0"}, {"UNISHMEM_PULL": "1", "UNISHMEM_COPY_ENGINE": "1"})
# kernel -> variant -> (the timing of gpu_kernel_times.make_case, the settings that pick the variant)
VARIANTS = {
    "all_gather": {"pull": ("all_gather", PULL), "push": ("all_gather", PUSH), "copy": ("all_gather", COPY)},
    "all_to_all": {"pull": ("all_to_all", PULL), "push": ("all_to_all", PUSH), "copy": ("all_to_all", COPY)},
    "reduce_scatter": {"pull": ("reduce_scatter", PULL), "push": ("reduce_scatter", PUSH)},
    "all_reduce": {
        "one_shot": ("all_reduce.one_shot", PULL),
        "two_shot": ("all_reduce.two_shot", PULL),
        "one_shot, push": ("all_reduce.one_shot", PUSH),
        "two_shot, push": ("all_reduce.two_shot", PUSH),
    },
    # NOTE [fuse or not] in unishmem/kernels/gemm.py: overlap=True and False (the settings pick nothing but
    # ag_gemm's gather by the copy engine, NOTE [ag_gemm copy engine]); chunked (NOTE [ag_gemm chunked],
    # [gemm_rs chunked]) under overlap=None, picked by a measured default put in for the row
    "ag_gemm": {
        "fused": ("ag_gemm", {}),
        "fused, copy": ("ag_gemm", COPY),
        "chunked": ("ag_gemm", COPY),
        "unfused": ("ag_gemm", {}),
    },
    "gemm_rs": {"fused": ("gemm_rs", {}), "chunked": ("gemm_rs", COPY), "unfused": ("gemm_rs", {})},
}
GEMMS = ("ag_gemm", "gemm_rs")
KNOBS = {  # (unishmem.kernels.collectives.KNOB_SETTINGS, pinned by tests/test_gpu_check.py)
    "programs": "UNISHMEM_MAX_PROGRAMS",
    "block_bytes": "UNISHMEM_COMM_BLOCK_BYTES",
    "warps": "UNISHMEM_COMM_WARPS",
}
GEMM_KNOBS = {"tile": "UNISHMEM_GEMM_TILE"}  # the fused GEMMs' (NOTE [GEMM tiles] in unishmem/kernels/gemm.py)
GEMM_TILES = ("128x128x64", "128x256x64", "64x64x32")  # the architecture's tile (sm_90, gfx942), wider, the first
SETTING_OF = {**KNOBS, **GEMM_KNOBS}
CHOICES = ("UNISHMEM_PULL", "UNISHMEM_COPY_ENGINE", *SETTING_OF.values())  # what a row sets, and restores after


def configs(kernels, cpu: bool) -> list[tuple[str, str, dict]]:
    """(kernel, variant, knobs) to time. Pulling: every SM at 4 and 8 warps, and fewer programs; pushing:
    16, 64 and 256 KiB a program and peer, and fewer programs at 64 KiB; the copy engine (its handshakes
    are one program) and the unfused GEMMs as they are; the fused GEMMs in each of GEMM_TILES, and ag_gemm
    fused by the copy engine in the first (the architecture's). None: the
    setting's default."""
    few = CPU_FEW_PROGRAMS if cpu else FEW_PROGRAMS
    knobs = {
        "pull": [(None, None, 4), (None, None, 8), (few, None, 4)],
        "push": [(None, 16 << 10, 4), (None, 64 << 10, 4), (None, 256 << 10, 4), (few, 64 << 10, 4)],
        "as it is": [(None, None, None)],
    }
    found = []
    for kernel in kernels:
        for variant, (_, settings) in VARIANTS[kernel].items():
            if variant == "fused":
                found += [(kernel, variant, {"tile": tile}) for tile in GEMM_TILES]
                continue
            if variant == "fused, copy":  # the architecture's tile alone
                found.append((kernel, variant, {"tile": GEMM_TILES[0]}))
                continue
            kind = "as it is" if settings is COPY or kernel in GEMMS else "push" if settings is PUSH else "pull"
            for values in knobs[kind]:
                found.append((kernel, variant, dict(zip(KNOBS, values))))
    return found


def floor_bytes(kernel: str, variant: str, size: int, n: int) -> int:
    """Bytes of the device copy that moves what `kernel` must read and write on one PE for a per-PE input of
    `size` bytes (a copy of B bytes reads B and writes B, so half the sum). all_gather: it reads and writes
    its output, n * size; all_to_all: size; reduce_scatter: reads size (n blocks), writes size / n; the
    one-shot reads n copies of size and writes size; the two-shot reads size and n - 1 shares, writes size
    and its share."""
    share = size // n
    return {
        "all_gather": n * size,
        "all_to_all": size,
        "reduce_scatter": (size + share) // 2,
        "all_reduce": ((n + 1) * size if variant.startswith("one_shot") else 2 * size + n * share) // 2,
    }[kernel]


def arguments(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", default=".", help="directory for sweep-pe<N>.json")
    p.add_argument("--cpu", action="store_true", help="host backend under the interpreter, tiny sizes")
    p.add_argument("--sizes", help="comma-separated per-PE input sizes (8K, 4M, ...) in place of the ladder")
    p.add_argument("--kernels", help=f"comma-separated, of {', '.join(VARIANTS)} (default: all)")
    p.add_argument("--dtypes", help=f"comma-separated, of {', '.join(DTYPES)} (default: both)")
    p.add_argument("--deadline-s", type=float, help="start no new row when less time than that is likely left")
    p.add_argument("--merge", metavar="DIR", help="write DIR/gpu-<date>.json from DIR/sweep-pe*.json and exit")
    p.add_argument("--table", metavar="FILE", help="write unishmem/kernels/_tuned.py's TABLE from FILE and exit")
    args = p.parse_args(argv)
    if args.merge or args.table:
        return args
    from unishmem import parse_size

    args.sizes = [parse_size(s) for s in (args.sizes.split(",") if args.sizes else CPU_SIZES if args.cpu else SIZES)]
    args.kernels = args.kernels.split(",") if args.kernels else list(VARIANTS)
    args.dtypes = args.dtypes.split(",") if args.dtypes else list(DTYPES)
    bad = [k for k in args.kernels if k not in VARIANTS] + [d for d in args.dtypes if d not in DTYPES]
    if bad:
        p.error(f"unknown kernel(s) or dtype(s) {bad}")
    if args.cpu:  # before Triton is imported (NOTE [import order] in unishmem/_interpreter.py)
        os.environ["TRITON_INTERPRET"] = "1"
    args.calls, args.replays = (CPU_CALLS, CPU_REPLAYS) if args.cpu else (CALLS, REPLAYS)
    return args


class Sweep(times.InStep):
    def __init__(self, args):
        from unishmem.kernels import _tuned

        super().__init__(args, "1G")
        torch, rt = self.torch, self.rt
        self.path = os.path.join(args.out, f"sweep-pe{rt.my_pe}.json")
        self.rows: list[dict] = json.load(open(self.path))["rows"] if os.path.exists(self.path) else []
        self.header = {
            "device": torch.cuda.get_device_name(rt.device) if rt.device.type == "cuda" else "cpu (interpreter)",
            "arch": _tuned.architecture(rt.device),
            "n_pes": rt.n_pes,
            "mps_percent": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
            "nvshmem_mode": str(rt.version.get("nvshmem_mode")),
            "stack": {"torch": torch.__version__, **{k: str(v) for k, v in rt.version.items()}},
            "commit": commit(),
            "calls": args.calls,
            "replays": args.replays,
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        import triton

        self.header["stack"]["triton"] = triton.__version__

    def save(self):
        with open(self.path + ".tmp", "w") as f:
            json.dump({"header": self.header, "rows": self.rows}, f, indent=1)
        os.replace(self.path + ".tmp", self.path)

    def device_time(self, fn, graphed: bool) -> dict:
        """Per call of fn: {"us": mean, "median_us": median of the replays' means} (see the module's doc)."""
        calls, replays = self.args.calls, self.args.replays
        if graphed:
            run = self.capture(fn, calls)
        else:
            host = self.clock.host(fn, calls, 1e-3)  # how long the host takes to issue the calls
            run = lambda: [fn() for _ in range(calls)]  # noqa: E731

        per_replay = []
        for _ in range(replays):
            self.together()
            if not graphed and self.clock.cuda:
                self.torch.cuda._sleep(int((2 * calls * host + 1e-3) * times.SLEEP_HZ))
            per_replay.append(self.clock.loop(run, 1) / calls)
        return {"us": statistics.fmean(per_replay) * 1e6, "median_us": statistics.median(per_replay) * 1e6}

    def capture(self, fn, calls: int):
        """A replay of `calls` calls of fn: one CUDA graph on a GPU; on the host backend the replay of one
        captured call (unishmem.testing), `calls` times."""
        import unishmem.testing

        with unishmem.testing.capture() as graph:  # refuses a host synchronisation; runs the call once
            fn()
        if not self.clock.cuda:
            return lambda: graph.replay(calls)
        self.clock.sync()
        g = self.torch.cuda.CUDAGraph()
        with self.torch.cuda.graph(g):
            for _ in range(calls):
                fn()
        return g.replay

    def reference(self, kernel: str, variant: str, size: int, whole: int, dtype):
        """(what it is, a call of it): a collective's floor copy (floor_bytes); a GEMM's torch.matmul on
        the gathered shapes (gpu_kernel_times.gemm_dims of the whole buffer)."""
        torch, rt = self.torch, self.rt
        item = torch.tensor([], dtype=dtype).element_size()
        if kernel in GEMMS:
            d, m = times.gemm_dims(whole, rt.n_pes, item)
            a, b = (torch.ones(shape, dtype=dtype, device=rt.device) for shape in ((rt.n_pes * m, d), (d, d)))
            c = torch.empty((rt.n_pes * m, d), dtype=dtype, device=rt.device)
            return f"torch.matmul [{rt.n_pes * m}, {d}] x [{d}, {d}]", lambda: torch.matmul(a, b, out=c)
        floor = floor_bytes(kernel, variant, size, rt.n_pes)
        src = torch.empty(max(1, floor // item), dtype=dtype, device=rt.device)
        dst = torch.empty_like(src)
        return f"device copy of {floor} bytes (the floor)", lambda: dst.copy_(src)

    def sequential(self, kernel: str, whole: int, dtype):
        """(what it is, a call of it): the sequential torch path a GEMM's target is set against, its
        collective stood for by a device copy of the collective's floor bytes (floor_bytes): ag_gemm's
        gathered A copied, then torch.matmul; gemm_rs's torch.matmul, then its reduce_scatter's copy."""
        torch, rt = self.torch, self.rt
        n = rt.n_pes
        item = torch.tensor([], dtype=dtype).element_size()
        d, m = times.gemm_dims(whole, n, item)
        a, b = (torch.ones(shape, dtype=dtype, device=rt.device) for shape in ((n * m, d), (d, d)))
        c = torch.empty((n * m, d), dtype=dtype, device=rt.device)
        if kernel == "ag_gemm":
            shard = torch.ones((n * m, d), dtype=dtype, device=rt.device)
            what = f"device copy of {n * m * d * item} bytes, then torch.matmul [{n * m}, {d}] x [{d}, {d}]"
            return what, lambda: (a.copy_(shard), torch.matmul(a, b, out=c))
        floor = floor_bytes("reduce_scatter", "", n * m * d * item, n)
        src = torch.empty(floor // item, dtype=dtype, device=rt.device)
        dst = torch.empty_like(src)
        what = f"torch.matmul [{n * m}, {d}] x [{d}, {d}], then a device copy of {floor} bytes"
        return what, lambda: (torch.matmul(a, b, out=c), dst.copy_(src))

    def row(self, kernel: str, variant: str, knobs: dict, size: int, dtype_name: str) -> list[dict]:
        torch, rt = self.torch, self.rt
        t0 = time.perf_counter()
        timing, chosen = VARIANTS[kernel][variant]
        settings = {**chosen, **{SETTING_OF[k]: str(v) for k, v in knobs.items() if v is not None}}
        saved = {k: os.environ.get(k) for k in CHOICES}
        for k in CHOICES:
            os.environ.pop(k, None)
        os.environ.update(settings)
        rt.free_workspaces()  # and the call plans: the knobs are read when a call is first planned
        dtype = getattr(torch, dtype_name)
        n = rt.n_pes
        # make_case's size is the whole buffer: all_gather's output and ag_gemm's gathered A, the others' input
        whole = size * n if kernel in ("all_gather", "ag_gemm") else size
        overlap: bool | None = variant.startswith("fused")
        if variant == "chunked":  # what picks it: a measured default of this size (NOTE [fuse or not])
            from unishmem.kernels import _tuned

            where = (_tuned.architecture(rt.device), n, kernel, _tuned.size_class(size))
            _tuned.TABLE[where] = {"variant": variant}
            overlap = None
        case = times.make_case(timing, whole, rt, dtype, overlap=overlap)
        try:
            case.refresh(1)
            self.together()
            checks = [times.compare(case.call(), case.expected(1), case.tol)]
            what, reference = self.reference(kernel, variant, size, whole, dtype)
            seq_what, sequential = self.sequential(kernel, whole, dtype) if kernel in GEMMS else (None, None)
            rows = []
            for mode in ("graph", "eager"):
                mine = self.device_time(case.call, mode == "graph")
                ref = self.device_time(reference, mode == "graph")
                seq = {} if sequential is None else {"seq": seq_what}
                if sequential is not None:
                    timed = self.device_time(sequential, mode == "graph")
                    seq.update(seq_us=timed["us"], seq_median_us=timed["median_us"])
                rows.append(
                    {
                        "kernel": kernel,
                        "variant": variant,
                        "knobs": knobs,
                        "bytes": size,
                        "dtype": dtype_name,
                        "n_pes": n,
                        "mode": mode,
                        **mine,
                        "ref": what,
                        "ref_us": ref["us"],
                        "ref_median_us": ref["median_us"],
                        **seq,
                        "pe": rt.my_pe,
                    }
                )
            case.refresh(2)  # inputs changed in place: the calls above and one more give the new result
            self.together()
            checks.append(times.compare(case.call(), case.expected(2), case.tol))
            for r in rows:
                r["check"] = "; ".join(sorted(set(checks)))
            self.together()
        finally:
            if overlap is None:
                _tuned.TABLE.pop(where)
            for t in case.symmetric:
                rt.free(t)
            rt.free_workspaces()
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        self.longest = max(self.longest, time.perf_counter() - t0)
        return rows

    def run(self) -> int:
        done = {key(r) for r in self.rows}
        failed = False
        for size in self.args.sizes:
            for dtype in self.args.dtypes:
                for kernel, variant, knobs in configs(self.args.kernels, self.args.cpu):
                    probe = {"kernel": kernel, "variant": variant, "knobs": knobs, "bytes": size, "dtype": dtype}
                    if not self.pe0_says(key({**probe, "mode": "graph"}) not in done) or not self.time_left():
                        continue
                    rows = self.row(kernel, variant, knobs, size, dtype)
                    self.rows += rows
                    self.save()
                    failed |= rows[0]["check"] != "ok"
                    print(
                        f"[pe {self.rt.my_pe}] {kernel} ({variant}, {knobs}) {times.show_size(size)} {dtype}: "
                        f"{rows[0]['check']}, graph {rows[0]['us']:.3g} us ({rows[0]['us'] / rows[0]['ref_us']:.2f}x)",
                        flush=True,
                    )
        self.save()
        self.together()
        if self.rt.my_pe == 0:
            print(f"wrote {merge(self.args.out)}", flush=True)
        self.finish()
        return 1 if failed else 0


def key(row: dict) -> str:
    """A row's identity, for resuming and merging."""
    return json.dumps([row[k] for k in ("kernel", "variant", "knobs", "bytes", "dtype", "mode")], sort_keys=True)


def commit() -> str | None:
    """This checkout's commit (the lent machine's copy of the tree may have no .git: GPU_CHECK_COMMIT)."""
    if os.environ.get("GPU_CHECK_COMMIT"):
        return os.environ["GPU_CHECK_COMMIT"]
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return proc.stdout.strip() or None


def merge(out_dir: str) -> str:
    """OUT/gpu-<date>.json: the header, then each row every PE has, with the slowest PE's figures."""
    reports = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out_dir, "sweep-pe*.json")))]
    if not reports:
        raise SystemExit(f"no sweep-pe*.json in {out_dir}: the sweep did not start")
    header = {k: v for k, v in reports[0]["header"].items()}
    by_pe = [{key(r): r for r in rep["rows"]} for rep in reports]
    merged = []
    for k, first in by_pe[0].items():
        group = [rows[k] for rows in by_pe if k in rows]
        if len(group) < len(by_pe):
            continue
        slowest = max(group, key=lambda r: r["us"])
        merged.append(
            {
                **{f: first[f] for f in ("kernel", "variant", "knobs", "bytes", "dtype", "n_pes", "mode", "ref")},
                "us": slowest["us"],
                "median_us": slowest["median_us"],
                "us_per_pe": [r["us"] for r in group],
                "ref_us": max(r["ref_us"] for r in group),
                **({"seq": first["seq"], "seq_us": max(r["seq_us"] for r in group)} if "seq" in first else {}),
                "check": "; ".join(sorted({r["check"] for r in group})),
            }
        )
    path = os.path.join(out_dir, f"gpu-{header['started'][:10]}.json")
    with open(path, "w") as f:
        json.dump([header, *merged], f, indent=1)
    return path


TUNED = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "pysrc", "unishmem", "kernels", "_tuned.py")


def table(path: str, source: str = TUNED) -> str:
    """Rewrite TABLE in source (unishmem/kernels/_tuned.py) from the merged sweep at path: for each
    (architecture, PEs, kernel, size) the variant and knobs whose graphed rows, every one right, have the
    least mean time over the dtypes measured."""
    header, *rows = json.load(open(path))
    times_of: dict[tuple, dict[str, list]] = {}  # (arch, n, kernel, bytes) -> configuration -> [us, ...]
    wrong = set()
    for r in rows:
        if r["mode"] != "graph":
            continue
        config = json.dumps({"variant": r["variant"], **r["knobs"]})
        where = (header["arch"], r["n_pes"], r["kernel"], r["bytes"])
        times_of.setdefault(where, {}).setdefault(config, []).append(r["us"])
        if r["check"] != "ok":
            wrong.add((where, config))
    lines = []
    for where, configs in sorted(times_of.items()):
        mean = {c: statistics.fmean(us) for c, us in configs.items() if (where, c) not in wrong}
        if mean:
            best = min(mean, key=mean.get)
            lines.append(f"    {where!r}: {json.loads(best)!r},  # {mean[best]:.4g} us")
    text = open(source).read()
    begin = text.index("\n", text.index("# BEGIN TABLE")) + 1
    end = text.index("# END TABLE")
    body = (
        f"# {header['device']}, {header['n_pes']} PEs, MPS {header.get('mps_percent')}%, commit {header.get('commit')}\n"
        + "TABLE: dict[tuple[str, int, str, int], dict] = {\n"
        + "".join(line + "\n" for line in lines)
        + "}\n"
    )
    with open(source, "w") as f:
        f.write(
            text[:begin]
            + '# (architecture, n_pes, kernel, size class) -> {"variant": ..., "programs": ..., "block_bytes": ..., "warps": ...}\n'
            + '# (a fused GEMM\'s: {"variant": "fused" or "fused, copy", "tile": "BMxBNxBK"})\n'
            + body
            + text[end:]
        )
    return source


def main(argv=None) -> int:
    args = arguments(argv)
    if args.merge:
        print(merge(args.merge))
        return 0
    if args.table:
        print(table(args.table))
        return 0
    os.makedirs(args.out, exist_ok=True)
    return Sweep(args).run()


if __name__ == "__main__":
    sys.exit(main())
