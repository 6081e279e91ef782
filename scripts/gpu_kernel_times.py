"""Times every kernel of unishmem.kernels, eager and replayed from a CUDA graph, beside references
measured in the same run: the timing phase of scripts/gpu_check.sh. First run on an H200 on 2026-12-04
(docs/benchmarks.md#the-first-gpu-runs-2026-12-04).

    unishmem run -n 2 scripts/gpu_kernel_times.py OUT [--quick] [--sizes 8K,4M] [--kernels all_gather,dispatch+combine]
    unishmem run -n 2 scripts/gpu_kernel_times.py OUT --cpu [--quick]   # host backend, interpreter, tiny sizes
    unishmem run -n 2 scripts/gpu_kernel_times.py OUT --plan            # GPU binaries the run compiles; no GPU
    python scripts/gpu_kernel_times.py --summary OUT                    # the tables, from OUT/times-pe*.json

Kernels: the timings of the kernel table (TIMINGS in unishmem/kernels/_table.py, NOTE [kernel table]):
all_gather, all_to_all, reduce_scatter, all_reduce.one_shot and .two_shot, ag_gemm, gemm_rs,
dispatch+combine (with max_tokens: the capacity form), all float16 (one dtype: a binary is per kernel,
dtype and constexprs; the GEMMs take float16 or float32, not bfloat16). A size is the bytes of the whole
buffer, as nccl-tests counts them: all_gather's output, all_to_all's, reduce_scatter's and all_reduce's
input, the gathered A of ag_gemm and the partial C of gemm_rs (square shards d x d, M = n * d), the token
copies one PE dispatches (and gets back from combine). Inputs are symmetric tensors where a kernel reads
them in place, outputs are given (`out=`) where a kernel takes one.

Per (kernel, size), on every PE:
- first call: its wall time and the Triton compiles it made (knobs.compilation.listener: seconds and
  cache hits per binary), then the result against torch;
- eager: the mean over a loop of calls (one pair of CUDA events around the loop: what a user's loop
  pays, host work included) and the median of calls timed one by one;
- eager host: the host's time per call of the same loop issued behind a torch.cuda._sleep long enough
  that the GPU never waits for the host (so the figure is the host work alone: unishmem's, Triton's or
  the direct launch's, and the driver's), and beside it in the summary the eager mean less the graph's;
- graph: `reps` calls captured in one torch.cuda.CUDAGraph after the warm calls (unishmem.testing.capture()
  first, which refuses a host synchronisation, so a call that cannot be captured is reported, never
  captured half), the graph replayed REPLAYS times, a pair of CUDA events around each replay: the mean per
  call over every replay and the median of the replays' means (one replay is one launch: the host is not
  in it); then the inputs change in place and one replay must give the new result;
- reference: torch's device-to-device copy of the same bytes (twice the bytes for dispatch + combine),
  timed the same way as the graph, in a graph of its own;
  for the GEMMs the GEMM part alone (unishmem's GEMM tile code, the fused kernels' tile launched alone,
  on the gathered shapes) beside torch.matmul of the same shapes.
NCCL is not a reference here: it refuses two ranks on one GPU ("Duplicate GPU detected", NCCL >= 2.5).
Every PE runs the same loops at the same time; without MPS the two PEs' kernels take turns on the GPU
(time slices), so a kernel that waits for its peer's kernel waits for a context switch, and every figure
includes the other PE's work. They are figures of this mode, not of two GPUs.

--cpu runs the same code on the host backend under TRITON_INTERPRET=1 at tiny sizes: time.perf_counter
instead of CUDA events, unishmem.testing.capture() replays instead of a CUDA graph. --plan records the
launches of the GPU run (nothing runs) and counts the binaries Triton would build for sm_90 per PE.
Every PE writes OUT/times-pe<N>.json after each row; PE 0 prints the tables at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import glob
import json
import os
import statistics
import sys
import time

SIZES = ("8K", "256K", "4M", "64M", "64K", "1M", "16M")  # the model sizes first: a cut run has them
QUICK_SIZES = ("8K", "256K", "4M", "64M")
CPU_SIZES, CPU_QUICK_SIZES = ("8K", "64K"), ("8K",)
H, TOPK, EXPERTS_PER_PE = 1024, 2, 4  # MoE: token width, top-k, experts per PE


def gemm_blocks(device) -> dict:
    """The GEMMs' blocks, given at every size so that every size uses one binary: UNISHMEM_GEMM_TILE where
    set (the sweep sets it), else the device's tile (NOTE [GEMM tiles] in unishmem/kernels/gemm.py)."""
    from unishmem import _config
    from unishmem.kernels import gemm

    given = _config.get("UNISHMEM_GEMM_TILE")
    if given is not None:
        return dict(zip(("block_m", "block_n", "block_k"), given))
    return {k: v for k, v in gemm.tile_of(device).items() if k.startswith("block_")}


NOTE = (
    "2 PEs time-sliced on one GPU (NVSHMEM limited mode, no MPS): a wait for the peer's kernel waits for a "
    "context switch, and each figure includes the other PE's work"
)

NOTE_MPS = (
    "2 PEs on one GPU under MPS (NVSHMEM full multi-PE-per-GPU mode), each on "
    f"{os.environ.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE', '?')}% of the SMs: both PEs' kernels run at once, and "
    "the bytes a put moves stay in the one GPU's memory"
)


def show_size(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def arguments(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", default=".", help="directory for times-pe<N>.json")
    p.add_argument("--cpu", action="store_true", help="host backend under the interpreter, tiny sizes")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    p.add_argument("--plan", action="store_true", help="count the sm_90 binaries of the GPU run; run nothing")
    p.add_argument("--sizes", help="comma-separated sizes (8K, 4M, ...) in place of the default ladder")
    p.add_argument("--kernels", help="comma-separated timings of the kernel table (default: all of them)")
    p.add_argument("--reps", type=int, help="calls per timed loop")
    p.add_argument("--deadline-s", type=float, help="start no new row when less time than that is likely left")
    p.add_argument("--summary", metavar="DIR", help="print the tables from DIR/times-pe*.json and exit")
    args = p.parse_args(argv)
    sizes = args.sizes.split(",") if args.sizes else None
    if sizes is None:
        sizes = (CPU_QUICK_SIZES if args.quick else CPU_SIZES) if args.cpu else QUICK_SIZES if args.quick else SIZES
    from unishmem import parse_size

    args.sizes = [parse_size(s) for s in sizes]
    if args.summary:
        return args
    # before Triton is imported, which the kernel table does (NOTE [import order] in unishmem/_interpreter.py)
    if args.cpu:
        os.environ["TRITON_INTERPRET"] = "1"
    elif args.plan:
        os.environ["TRITON_INTERPRET"] = "0"  # the kernels pick their blocks as for a GPU; nothing launches
        os.environ.setdefault("UNISHMEM_MAX_PROGRAMS", "132")  # an H200's SMs: the grid, not read from a GPU
    timed = kernels()
    args.kernels = args.kernels.split(",") if args.kernels else list(timed)
    bad = [k for k in args.kernels if k not in timed]
    if bad:
        p.error(f"unknown kernel(s) {bad}: choose from {', '.join(timed)}")
    if args.reps is None:
        args.reps = (2 if args.quick else 3) if args.cpu else 20 if args.quick else 50
    return args


def kernels() -> tuple[str, ...]:
    """What the run times: the kernel table's timings, in its order. Imports unishmem.kernels, so
    TRITON_INTERPRET must be set before."""
    from unishmem.kernels._table import TIMINGS

    return TIMINGS


# ---- one PE's run ------------------------------------------------------------------------------


SLEEP_HZ = 2.0e9  # torch.cuda._sleep's cycles per second, an upper bound (H100/H200 boost clocks: 1.98 GHz)
REPLAYS = 5  # replays of a row's graph of `reps` calls


class Clock:
    """CUDA events on a GPU, time.perf_counter on the host backend (where every call is synchronous)."""

    def __init__(self, device):
        import torch

        self.torch, self.cuda = torch, device.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def loop(self, fn, reps: int) -> float:
        """Seconds per call over a loop of reps calls."""
        if self.cuda:
            start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / reps
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - start) / reps

    def host(self, fn, reps: int, ahead_s: float) -> float:
        """Host seconds per call over a loop of reps calls; on a GPU issued behind ahead_s of sleep, so
        that no call waits for the GPU (the sleep counted at SLEEP_HZ cycles a second, at least as fast
        as the GPU's clock: the sleep lasts at least ahead_s)."""
        if self.cuda:
            self.torch.cuda._sleep(int(ahead_s * SLEEP_HZ))
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        seconds = time.perf_counter() - start
        self.sync()
        return seconds / reps

    def each(self, fn, reps: int) -> list[float]:
        """Seconds of each of reps calls, timed one by one."""
        if self.cuda:
            pairs = [tuple(self.torch.cuda.Event(enable_timing=True) for _ in range(2)) for _ in range(reps)]
            for start, end in pairs:
                start.record()
                fn()
                end.record()
            pairs[-1][1].synchronize()
            return [start.elapsed_time(end) / 1e3 for start, end in pairs]
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return times


class Case:
    """One kernel at one size: call() runs it; refresh(seed) rewrites its inputs in place; expected(seed)
    is torch's result for those inputs."""

    def __init__(self, call, refresh, expected, shape: str, copy_bytes: int, busbw: float | None, tol: float = 0.0):
        self.call, self.refresh, self.expected = call, refresh, expected
        self.shape, self.copy_bytes, self.busbw, self.tol = shape, copy_bytes, busbw, tol
        self.symmetric: list = []  # freed after the row (collective)


def gemm_dims(size: int, n: int, itemsize: int) -> tuple[int, int]:
    """(d, m): K = N = d, the largest power of two >= 64 with n * d * d elements in `size` bytes; m rows per
    PE (m = d where size is n * d * d elements, as on the ladder at 2 PEs from 64 KiB)."""
    d = 64
    while n * (2 * d) ** 2 * itemsize <= size:
        d *= 2
    return d, max(1, size // (n * d * itemsize))


def make_case(name: str, size: int, rt, dtype, overlap: bool | None = True):
    import torch

    import unishmem.kernels as K

    n, me, dev = rt.n_pes, rt.my_pe, rt.device
    item = torch.tensor([], dtype=dtype).element_size()

    def gen(pe, seed, shape, lo=-3, hi=4):
        """PE pe's data for `seed`, the same on every PE: small integers, exact in float16 sums."""
        g = torch.Generator(device=dev).manual_seed(1000 * seed + pe)
        return torch.randint(lo, hi, shape, generator=g, device=dev).to(dtype)

    if name in ("all_gather", "all_to_all", "reduce_scatter", "all_reduce.one_shot", "all_reduce.two_shot"):
        numel = max(n, size // item // n * n)
        mine = numel // n if name == "all_gather" else numel
        x = rt.empty(mine, dtype=dtype)
        everyone = lambda seed: torch.stack([gen(pe, seed, (mine,)) for pe in range(n)])  # noqa: E731
        if name == "all_gather":
            out = torch.empty(numel, dtype=dtype, device=dev)
            call = lambda: K.all_gather(x, out=out)  # noqa: E731
            expected = lambda seed: everyone(seed).reshape(-1)  # noqa: E731
        elif name == "all_to_all":
            out = torch.empty(numel, dtype=dtype, device=dev)
            call = lambda: K.all_to_all(x, out=out)  # noqa: E731
            expected = lambda seed: everyone(seed).view(n, n, -1)[:, me].reshape(-1)  # noqa: E731 - each x's block me
        elif name == "reduce_scatter":
            out = torch.empty(numel // n, dtype=dtype, device=dev)
            call = lambda: K.reduce_scatter(x, out=out)  # noqa: E731
            expected = lambda seed: everyone(seed).sum(0).chunk(n)[me]  # noqa: E731
        else:
            out = torch.empty(numel, dtype=dtype, device=dev)
            call = lambda: K.all_reduce(x, algorithm=name.partition(".")[2], out=out)  # noqa: E731
            expected = lambda seed: everyone(seed).sum(0)  # noqa: E731
        case = Case(
            call,
            lambda seed: x.copy_(gen(me, seed, (mine,))),
            expected,
            f"[{mine}] per PE",
            numel * item,
            (2.0 if name.startswith("all_reduce") else 1.0) * (n - 1) / n,
        )
        case.symmetric.append(x)
        return case
    if name in ("ag_gemm", "gemm_rs", "gemm_part"):
        blocks = gemm_blocks(dev)
        d, m = gemm_dims(size, n, item)
        shape = f"[{n * m}, {d}] x [{d}, {d}]"
        ones = lambda pe, seed, shape: gen(pe, seed, shape, -1, 2)  # noqa: E731
        if name == "ag_gemm":
            a = rt.empty((m, d), dtype=dtype)
            b = ones(0, 99, (d, d))
            case = Case(
                lambda: K.ag_gemm(a, b, overlap, **blocks),
                lambda seed: a.copy_(ones(me, seed, (m, d))),
                lambda seed: (torch.cat([ones(pe, seed, (m, d)) for pe in range(n)]).float() @ b.float()).to(dtype),
                shape,
                n * m * d * item,
                (n - 1) / n,
                tol=1e-2,
            )
            case.symmetric.append(a)
            return case
        if name == "gemm_rs":
            a, b = ones(me, 1, (n * m, d)), ones(me, 51, (d, d))

            def expected(seed):
                total = sum(ones(pe, seed, (n * m, d)).float() @ ones(pe, seed + 50, (d, d)).float() for pe in range(n))
                return total.chunk(n)[me].to(dtype)

            def refresh(seed):
                a.copy_(ones(me, seed, (n * m, d)))
                b.copy_(ones(me, seed + 50, (d, d)))

            return Case(
                lambda: K.gemm_rs(a, b, overlap, **blocks),
                refresh,
                expected,
                shape,
                n * m * d * item,
                (n - 1) / n,
                1e-2,
            )
        # the GEMM part of both: unishmem's tile code (the fused kernels') alone, on the gathered shapes
        from unishmem.kernels import gemm as G

        a, b = ones(me, 1, (n * m, d)), ones(0, 99, (d, d))
        c = torch.empty((n * m, d), dtype=dtype, device=dev)

        def call():
            return G.gemm_part(a, b, c)

        def expected(seed):
            return (ones(me, seed, (n * m, d)).float() @ b.float()).to(dtype)

        case = Case(call, lambda seed: a.copy_(ones(me, seed, (n * m, d))), expected, shape, 0, None, 1e-2)
        case.matmul = lambda: torch.matmul(a, b, out=c)
        return case
    if name == "dispatch+combine":
        T = max(1, size // (TOPK * H * item))
        E = EXPERTS_PER_PE * n
        tokens = torch.empty((T, H), dtype=dtype, device=dev)
        ids = torch.empty((T, TOPK), dtype=torch.int64, device=dev)
        weights = torch.empty((T, TOPK), dtype=torch.float32, device=dev)

        def inputs(seed):
            g = torch.Generator(device=dev).manual_seed(7000 + 1000 * seed + me)
            return (
                gen(me, seed, (T, H)),
                torch.randint(0, E, (T, TOPK), generator=g, device=dev),
                torch.rand((T, TOPK), generator=g, device=dev),
            )

        def refresh(seed):
            for dest, new in zip((tokens, ids, weights), inputs(seed)):
                dest.copy_(new)

        def expected(seed):  # identity experts: out[t] = sum_k w[t, k] * tokens[t], in float32, k in order
            x, _, w = inputs(seed)
            acc = w[:, 0:1] * x.float()
            for k in range(1, TOPK):
                acc = acc + w[:, k : k + 1] * x.float()
            return acc.to(dtype)

        def call():
            expert_tokens, _, handle = K.dispatch(tokens, ids, weights, E, max_tokens=T)
            return K.combine(expert_tokens, handle)

        return Case(
            call, refresh, expected, f"T={T} x H={H}, top-{TOPK} of {E} experts", 2 * T * TOPK * H * item, None, 1e-3
        )
    raise ValueError(name)


def compare(out, want, tol: float) -> str:
    if tuple(out.shape) != tuple(want.shape):
        return f"FAILED: shape {list(out.shape)}, expected {list(want.shape)}"
    err = (out.float() - want.float()).abs().max().item() if out.numel() else 0.0
    scale = want.float().abs().max().item() if want.numel() else 0.0
    return "ok" if err <= tol * max(scale, 1.0) else f"FAILED: max error {err:g} (largest value {scale:g})"


def stats(times: list[float], mean: float) -> dict:
    return {"mean_us": mean * 1e6, "median_us": statistics.median(times) * 1e6, "min_us": min(times) * 1e6}


class InStep:
    """A timing job's PEs kept in step (every PE runs the same rows; PE 0 decides which): the base of
    this script's Run and of gpu_sweep.py's Sweep. args.deadline_s: start no row unlikely to finish."""

    def __init__(self, args, heap: str):
        import torch

        import unishmem

        self.args, self.torch = args, torch
        self.start = time.perf_counter()
        heap = None if os.environ.get("UNISHMEM_SYMMETRIC_SIZE") else heap
        self.rt = rt = unishmem.init(
            backend="host" if args.cpu or getattr(args, "plan", False) else "auto", heap_size=heap
        )
        self.clock = Clock(rt.device)
        self.flag = rt.zeros(1, dtype=torch.int64)
        self.flag_local = torch.zeros(1, dtype=torch.int64, device=rt.device)
        self.longest = 0.0  # the longest row's seconds

    def together(self):
        self.clock.sync()
        self.rt.barrier_all()
        self.clock.sync()

    def pe0_says(self, ok: bool) -> bool:
        """PE 0's ok, on every PE: what each PE's clock says may differ, and every PE must run the same rows."""
        self.flag.fill_(int(ok))
        self.together()
        self.rt.get(self.flag_local, self.flag, 0)
        self.clock.sync()
        said = bool(self.flag_local.item())
        self.together()  # nobody rewrites the flag before every PE has read it
        return said

    def time_left(self) -> bool:
        if self.args.deadline_s is None:
            return True
        left = self.args.deadline_s - (time.perf_counter() - self.start)
        return self.pe0_says(left > max(15.0, 1.5 * self.longest))

    def finish(self):
        self.rt.free(self.flag)
        self.rt.finalize()


class Run(InStep):
    def __init__(self, args):
        super().__init__(args, "1G" if args.plan else "256M")
        torch, rt = self.torch, self.rt
        self.dtype = torch.float16
        self.compiles: list[dict] = []
        self.rows: list[dict] = []
        self.path = os.path.join(args.out, f"times-pe{rt.my_pe}.json")
        self.info = {
            "pe": rt.my_pe,
            "n_pes": rt.n_pes,
            "backend": rt.backend,
            "device": torch.cuda.get_device_name(rt.device) if rt.device.type == "cuda" else "cpu (interpreter)",
            "mode": "plan" if args.plan else "cpu" if args.cpu else "gpu",
            "dtype": "float16",
            "sizes": args.sizes,
            "kernels": args.kernels,
            "reps": args.reps,
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "versions": {"torch": torch.__version__, **{k: str(v) for k, v in rt.version.items()}},
            "note": (NOTE_MPS if "MPS" in str(rt.version.get("nvshmem_mode")) else NOTE)
            if rt.device.type == "cuda"
            else "host backend under the interpreter: code paths, not speed",
        }
        import triton

        self.info["versions"]["triton"] = triton.__version__
        triton.knobs.compilation.listener = self._compiled
        if not args.plan:
            self.save()  # a job cut short in its first row still says how far it came

    def _compiled(self, *, src, metadata, times, cache_hit, **_):
        total = times.ir_initialization + sum(d for _, d in times.lowering_stages) + times.store_results
        self.compiles.append({"kernel": getattr(src, "name", "?"), "seconds": total / 1e6, "cache_hit": cache_hit})

    def save(self, **extra):
        with open(self.path + ".tmp", "w") as f:
            json.dump({"info": self.info, "rows": self.rows, "compiles": self.compiles, **extra}, f, indent=1)
        os.replace(self.path + ".tmp", self.path)

    def timings(self, fn) -> dict:
        self.together()
        mean = self.clock.loop(fn, self.args.reps)
        self.together()
        each = self.clock.each(fn, self.args.reps)
        self.together()
        return stats(each, mean)

    def graph(self, call):
        """(replay of `reps` calls, the output the last writes, None), or (None, None, why it cannot be
        captured). On the host backend the replay of one captured call, `reps` times."""
        import unishmem.testing

        reps = self.args.reps
        try:
            with unishmem.testing.capture() as probe:  # runs the call once; refuses host synchronisation
                out = call()
        except unishmem.testing.CaptureError as e:
            return None, None, f"not capturable: {e}"
        if not self.clock.cuda:
            return (lambda: probe.replay(reps)), out, None
        self.clock.sync()
        g = self.torch.cuda.CUDAGraph()
        try:  # nothing runs while it captures: a failed capture leaves the PEs in step
            with self.torch.cuda.graph(g):
                for _ in range(reps):
                    out = call()
        except RuntimeError as e:
            return None, None, f"CUDA graph capture failed: {e}"
        return g.replay, out, None

    def graph_timings(self, replay) -> dict:
        """Per call of a replay of `reps` calls: the mean over REPLAYS replays, the median of their means."""
        per_call = []
        for _ in range(REPLAYS):
            self.together()
            per_call.append(self.clock.loop(replay, 1) / self.args.reps)
        self.together()
        return stats(per_call, statistics.fmean(per_call))

    def row(self, name: str, size: int) -> dict:
        rt, t0 = self.rt, time.perf_counter()
        case = make_case(name, size, rt, self.dtype)
        row = {"kernel": name, "bytes": size, "shape": case.shape, "pe": rt.my_pe}
        case.refresh(1)
        self.together()
        before = len(self.compiles)
        start = time.perf_counter()
        out = case.call()
        self.clock.sync()
        row["first_call_s"] = time.perf_counter() - start
        row["compiled"] = [c for c in self.compiles[before:] if not c["cache_hit"]]
        row["compile_s"] = sum(c["seconds"] for c in row["compiled"])
        row["check"] = compare(out, case.expected(1), case.tol)
        row["eager"] = self.timings(case.call)
        self.together()
        ahead = 2 * self.args.reps * row["eager"]["mean_us"] * 1e-6 + 1e-3  # the loop's GPU time, twice
        row["eager_host"] = {"mean_us": self.clock.host(case.call, self.args.reps, ahead) * 1e6}
        if name == "gemm_part":
            row["matmul"] = self.timings(case.matmul)
            row["matmul_check"] = compare(case.matmul(), case.expected(1), case.tol)
        else:
            replay, gout, why = self.graph(case.call)
            if why is not None:
                row["graph"] = {"error": why}
            else:
                row["graph"] = self.graph_timings(replay)
                case.refresh(2)  # inputs changed in place: a replay must give the new result
                self.together()
                replay()
                self.clock.sync()
                row["graph_check"] = compare(gout, case.expected(2), case.tol)
            del replay, gout
            src = self.torch.empty(case.copy_bytes // 2, dtype=self.dtype, device=rt.device)
            dst = self.torch.empty_like(src)
            row["reference"] = {"name": "device-to-device copy", "bytes": case.copy_bytes}
            copies, _, _ = self.graph(lambda: dst.copy_(src))
            row["reference"].update(self.graph_timings(copies))
            del src, dst
        if case.busbw is not None:
            row["busbw_factor"] = case.busbw
        self.together()
        for t in case.symmetric:
            rt.free(t)
        rt.free_workspaces()
        row["row_s"] = time.perf_counter() - t0
        self.longest = max(self.longest, row["row_s"])
        return row

    def run(self) -> int:
        names = [k for k in self.args.kernels]
        if "ag_gemm" in names or "gemm_rs" in names:
            names.insert(names.index("ag_gemm" if "ag_gemm" in names else "gemm_rs"), "gemm_part")
        stopped = []
        for size in self.args.sizes:
            for name in names:
                if stopped or not self.time_left():
                    stopped.append(f"{name} {show_size(size)}")
                    continue
                try:
                    self.rows.append(self.row(name, size))
                except Exception as e:  # noqa: BLE001 - recorded; the PEs may no longer be in step: stop
                    self.rows.append({"kernel": name, "bytes": size, "pe": self.rt.my_pe, "check": f"FAILED: {e!r}"})
                    self.save(skipped=stopped)
                    raise
                self.save(skipped=stopped)
                r = self.rows[-1]
                print(
                    f"[pe {self.rt.my_pe}] {name} {show_size(size)}: {r['check']}, "
                    f"graph {r.get('graph_check', r.get('graph', {}).get('error', '-'))}, {r['row_s']:.1f} s",
                    flush=True,
                )
        self.info["seconds"] = time.perf_counter() - self.start
        self.save(skipped=stopped)
        self.together()
        if self.rt.my_pe == 0:
            print(summary(self.args.out), flush=True)
        self.finish()
        bad = [r for r in self.rows if failed(r)]
        return 1 if bad else 0


def failed(row: dict) -> bool:
    return any(str(row.get(k, "ok")).startswith("FAILED") for k in ("check", "graph_check", "matmul_check"))


def plan(args) -> int:
    """Record the launches the GPU run makes (nothing runs: the launch recorder says no) and count Triton's
    sm_90 binaries per kernel on this PE. Runs on the host backend, without the interpreter, so that the
    kernels choose their blocks as on a GPU."""
    from triton.backends.compiler import GPUTarget

    from unishmem import _triton_compat, triton_support
    from unishmem.compile import TARGETS

    run = Run(args)
    rt, target = run.rt, GPUTarget(*TARGETS["sm_90"])
    keys: dict[str, dict] = {}  # kernel -> {cache key: the first row that needs it}
    where = [""]

    @contextlib.contextmanager
    def record(kernel, launch_args, grid, kwargs):
        key = _triton_compat.launch_cache_key(kernel.jit_function, target, launch_args, kwargs)
        keys.setdefault(kernel.fn.__name__, {}).setdefault(key, where[0])
        yield False

    names = list(args.kernels) + (["gemm_part"] if {"ag_gemm", "gemm_rs"} & set(args.kernels) else [])
    triton_support.launch_recorder = record
    try:
        for size in args.sizes:
            for name in names:
                where[0] = f"{name} {show_size(size)}"
                case = make_case(name, size, rt, run.dtype)
                case.refresh(1)  # valid inputs (dispatch checks its expert ids)
                case.call()
                for t in case.symmetric:
                    rt.free(t)
                rt.free_workspaces()
    finally:
        triton_support.launch_recorder = None
    mine = {name: found for name, found in keys.items()}
    with open(os.path.join(args.out, f"plan-pe{rt.my_pe}.json"), "w") as f:
        json.dump({"sizes": args.sizes, "kernels": mine}, f)
    run.together()
    if rt.my_pe == 0:
        plans = [json.load(open(p))["kernels"] for p in sorted(glob.glob(os.path.join(args.out, "plan-pe*.json")))]
        sizes = ", ".join(show_size(s) for s in args.sizes)
        print(f"sm_90 binaries the GPU run compiles ({sizes}; float16):")
        for name in sorted({k for p in plans for k in p}):
            per_pe = [len(p.get(name, [])) for p in plans]
            union = len({k for p in plans for k in p.get(name, {})})
            first = ", ".join(dict.fromkeys(plans[0].get(name, {}).values()))
            print(f"  {name:12s} per PE {per_pe}, {union} distinct; PE 0's first needed by: {first}")
        print(f"  total per PE {[sum(len(v) for v in p.values()) for p in plans]}")
    run.finish()
    return 0


# ---- the tables --------------------------------------------------------------------------------


def us(x) -> str:
    if x is None:
        return "-"
    return f"{x / 1e3:.3g} ms" if abs(x) >= 1e3 else f"{x:.3g} us"


def summary(out_dir: str) -> str:
    files = sorted(glob.glob(os.path.join(out_dir, "times-pe*.json")))
    if not files:
        return f"no times-pe*.json in {out_dir}: the timing phase did not start"
    reports = [json.load(open(f)) for f in files]
    info = reports[0]["info"]
    rows: dict[tuple, list[dict]] = {}
    for rep in reports:
        for r in rep["rows"]:
            rows.setdefault((r["kernel"], r["bytes"]), []).append(r)

    def worst(group, *path):
        """The slowest PE's figure (a collective ends when its slowest member does)."""
        values = []
        for r in group:
            v = r
            for p in path:
                v = v.get(p) if isinstance(v, dict) else None
            if isinstance(v, (int, float)):
                values.append(v)
        return max(values) if values else None

    lines = [
        f"unishmem.kernels timed: {info['mode']} mode, {info['device']}, {info['n_pes']} PEs, {info['dtype']}, "
        f"{info['reps']} calls per loop, started {info['started']}",
        f"({info['note']}; figures: the slowest PE's; eager mean = loop / calls, median = calls timed one by one;",
        "host = the host's time per call with the GPU kept busy ahead; graph = per call of a graph of that many "
        "calls, mean over its replays and median of their means; copy ref the same way; "
        "eager - graph = eager mean less graph mean)",
        "",
        "| kernel | size | eager mean | eager median | host | eager - graph | graph mean | graph median | copy ref "
        "| graph / copy | busbw (graph) | first call | check |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    order = {k: i for i, k in enumerate(info.get("kernels", ()))}  # the run's, in the table's order
    for (name, size), group in sorted(rows.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
        if name == "gemm_part":
            continue
        checks = sorted({r.get("check", "?") for r in group} | {r["graph_check"] for r in group if "graph_check" in r})
        gmean, ref = worst(group, "graph", "mean_us"), worst(group, "reference", "mean_us")
        error = next((r["graph"]["error"] for r in group if "error" in r.get("graph", {})), None)
        factor = group[0].get("busbw_factor")
        busbw = f"{size / (gmean * 1e-6) * factor / 1e9:.3g} GB/s" if gmean and factor else "-"
        first = worst(group, "first_call_s")
        emean = worst(group, "eager", "mean_us")
        lines.append(
            f"| {name} | {show_size(size)} | {us(emean)} | "
            f"{us(worst(group, 'eager', 'median_us'))} | {us(worst(group, 'eager_host', 'mean_us'))} | "
            f"{us(emean - gmean) if emean is not None and gmean else '-'} | "
            f"{us(gmean) if not error else error.split(':')[0]} | "
            f"{us(worst(group, 'graph', 'median_us'))} | {us(ref)} | "
            f"{f'{gmean / ref:.2f}x' if gmean and ref else '-'} | {busbw} | "
            f"{f'{first:.1f} s' if first is not None else '-'} | {'; '.join(checks)} |"
        )
    gemm = [k for k in rows if k[0] == "gemm_part"]
    if gemm:
        lines += [
            "",
            "| size | GEMM | ag_gemm (graph) | gemm_rs (graph) | unishmem GEMM part | torch.matmul | part / matmul | check |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for _, size in sorted(gemm, key=lambda k: k[1]):
            part = rows[("gemm_part", size)]
            mine, ref = worst(part, "eager", "median_us"), worst(part, "matmul", "median_us")
            fused = [worst(rows.get((k, size), []), "graph", "median_us") for k in ("ag_gemm", "gemm_rs")]
            checks = sorted({r.get("check", "?") for r in part} | {r.get("matmul_check", "?") for r in part})
            lines.append(
                f"| {show_size(size)} | {part[0].get('shape', '?')} | {us(fused[0])} | {us(fused[1])} | {us(mine)} | "
                f"{us(ref)} | {f'{mine / ref:.2f}x' if mine and ref else '-'} | {'; '.join(checks)} |"
            )
        lines.append("(GEMM figures: medians; the GEMM part is eager: one launch, no communication)")
    compiled: dict[str, list[float]] = {}
    hits = 0
    for rep in reports:
        for c in rep["compiles"]:
            if c["cache_hit"]:
                hits += 1
            else:
                compiled.setdefault(c["kernel"], []).append(c["seconds"])
    lines.append("")
    if compiled:
        lines.append("Triton compiles (every PE; the PEs compile at the same time, each its own):")
        for name, secs in sorted(compiled.items()):
            lines.append(f"  {name}: {len(secs)} binaries, {sum(secs):.1f} s ({min(secs):.1f}-{max(secs):.1f} s each)")
        lines.append(f"  cache hits: {hits}")
    else:
        lines.append(
            "Triton compiles: none (interpreter)"
            if info["mode"] == "cpu"
            else f"Triton compiles: none ({hits} cache hits)"
        )
    skipped = sorted({s for rep in reports for s in rep.get("skipped", [])})
    if skipped:
        lines.append(f"NOT RUN (time budget): {', '.join(skipped)}")
    bad = [f"{r['kernel']} {show_size(r['bytes'])} (pe {r['pe']})" for rep in reports for r in rep["rows"] if failed(r)]
    if bad:
        lines.append(f"FAILED: {', '.join(bad)}")
    elif not rows:
        lines.append("no row finished (see kernel_times.log)")
    else:
        lines.append("every result matched torch")
    seconds = [rep["info"].get("seconds") for rep in reports]
    if all(s is not None for s in seconds):
        lines.append(f"run: {max(seconds):.1f} s")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = arguments(argv)
    if args.summary:
        print(summary(args.summary))
        return 0
    os.makedirs(args.out, exist_ok=True)
    if args.plan:
        return plan(args)
    return Run(args).run()


if __name__ == "__main__":
    sys.exit(main())
