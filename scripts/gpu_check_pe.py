"""One PE of scripts/gpu_check.sh: the nvshmem backend on a real GPU, 2 PEs (NVSHMEM's limited
multi-PE-per-GPU mode when they share one GPU). Each check records ok/FAILED/SKIPPED with its detail in
OUT/pe<N>.json, written after every check, so a PE that dies still leaves what it did.

    unishmem run -n 2 scripts/gpu_check_pe.py OUTDIR
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch

import unishmem
from unishmem import CMP, SIGNAL, _active

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
BW_BYTES = 256 << 20
REPS = 20


class Report:
    def __init__(self, pe: int):
        self.path = os.path.join(OUT, f"pe{pe}.json")
        self.items: list[dict] = []
        self.info: dict = {}

    def add(self, name: str, status: str, detail="") -> None:
        self.items.append({"check": name, "status": status, "detail": str(detail)})
        print(f"[pe {self.info.get('pe', '?')}] {status:7s} {name}: {detail}", flush=True)
        self.save()

    def save(self) -> None:
        with open(self.path, "w") as f:
            json.dump({"info": self.info, "checks": self.items}, f, indent=1)


def check(report: Report, name: str, fn) -> None:
    try:
        detail = fn()
        report.add(name, "ok", detail if detail is not None else "")
    except Exception as e:  # noqa: BLE001 - each check reports and the next one runs
        report.add(name, "FAILED", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")


def timed(fn, reps: int = REPS) -> float:
    """Seconds per call, by CUDA events on the current stream, after one warm-up."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def main() -> int:
    t0 = time.time()
    rt = unishmem.init(backend="nvshmem")
    me, n = rt.my_pe, rt.n_pes
    peer = (me + 1) % n
    left = (me - 1) % n
    report = Report(me)
    report.info = {
        "pe": me,
        "n_pes": n,
        "device": str(rt.device),
        "gpu": torch.cuda.get_device_name(rt.device),
        "version": rt.version,
        "init_seconds": round(time.time() - t0, 2),
    }
    report.add("init", "ok", f"{rt!r}; mode {rt.version.get('nvshmem_mode')}")

    def allocation():
        x = rt.zeros(1024, torch.float32)
        s = rt.signals(4)
        assert x.is_cuda and x.device == rt.device and rt.is_symmetric(x) and rt.is_symmetric(s)
        assert int(x.sum().item()) == 0 and int(s.sum().item()) == 0
        rt.free(s)
        rt.free(x)
        return f"zeros/signals on {x.device}, freed; {_active.core().native.heap_free_bytes()} heap bytes free"

    check(report, "allocation", allocation)

    def peer_views():
        x = rt.full(4096, float(me + 1))
        view = rt.peer(x, peer)
        if view is None:
            raise AssertionError(f"PE {peer} is not load/store reachable (nvshmem_ptr returned NULL)")
        got = float(view[0].item())
        assert got == peer + 1, f"peer view reads {got}, expected {peer + 1}"
        rt.barrier_all()
        view.fill_(100.0 + me)  # a store into the peer's copy
        torch.cuda.synchronize()
        rt.barrier_all()
        mine = float(x[0].item())
        assert mine == 100.0 + left, f"own copy holds {mine} after the left neighbour's store, expected {100 + left}"
        rt.free(x)
        return "load from and store to the peer's copy through rt.peer()"

    check(report, "peer_views", peer_views)

    def put_get():
        dst = rt.zeros(1 << 20, torch.int32)
        src = torch.full((1 << 20,), me + 7, dtype=torch.int32, device=rt.device)
        rt.put(dst, src, peer)
        rt.quiet()
        rt.barrier_all()
        assert bool((dst == left + 7).all()), f"put: dst holds {dst[:4].tolist()}, expected {left + 7}"
        back = torch.empty_like(src)
        rt.get(back, dst, peer)
        torch.cuda.current_stream().synchronize()
        assert bool((back == me + 7).all()), f"get: {back[:4].tolist()}, expected {me + 7}"
        rt.barrier_all()
        rt.free(dst)
        return "4 MiB put to the right neighbour, read back with get, on the current stream"

    check(report, "put_get_on_stream", put_get)

    def put_signal():
        dst = rt.zeros(1 << 18, torch.float32)
        sig = rt.signals(1)
        src = torch.arange(1 << 18, dtype=torch.float32, device=rt.device) + me
        rt.put_signal(dst, src, sig[0:1], 1, peer, SIGNAL.SET)
        seen = rt.signal_wait_until(sig[0:1], CMP.EQ, 1)
        expect = torch.arange(1 << 18, dtype=torch.float32, device=rt.device) + left
        assert seen == 1 and bool((dst == expect).all()), "data not there when the signal was"
        rt.signal_op(sig[0:1], 5, peer, SIGNAL.ADD)
        seen = rt.signal_wait_until(sig[0:1], CMP.GE, 6)
        assert rt.signal_fetch(sig[0:1]) == 6, rt.signal_fetch(sig[0:1])
        rt.barrier_all()
        rt.free(sig)
        rt.free(dst)
        return f"put_signal SET then signal_op ADD; waits saw {seen}"

    check(report, "put_signal_and_signal_wait_until", put_signal)

    def barrier_all():
        times = []
        for _ in range(20):
            t = time.perf_counter()
            rt.barrier_all()
            times.append(time.perf_counter() - t)
        return f"20 barriers, median {sorted(times)[10] * 1e6:.0f} us each (host-blocking, with the call check)"

    check(report, "barrier_all", barrier_all)

    def limited_mode_refusals():
        if not _active.core().native.limited_mode:
            return "not in limited mode: nothing to refuse"
        x = rt.zeros(16)
        try:
            rt.broadcast(x, x, 0)
        except unishmem.UnishmemError as e:
            assert "limited multi-PE-per-GPU" in str(e), e
        else:
            raise AssertionError("broadcast was not refused in limited mode")
        rt.barrier_all()
        rt.free(x)
        return "broadcast refused with an error instead of NVSHMEM ending the process"

    check(report, "limited_mode_refusals", limited_mode_refusals)

    def bandwidth():
        a = rt.empty(BW_BYTES // 4, torch.float32)
        b = rt.empty(BW_BYTES // 4, torch.float32)
        a.fill_(1.0)
        rt.barrier_all()
        result = {}
        if me == 0:  # one PE measures while the other waits: they share the GPU
            put_s = timed(lambda: rt.put(b, a, peer))
            c = torch.empty_like(a)
            copy_s = timed(lambda: c.copy_(a))
            result = {
                "bytes": BW_BYTES,
                "host_put_on_stream_GBps": BW_BYTES / put_s / 1e9,
                "torch_d2d_copy_GBps": BW_BYTES / copy_s / 1e9,
            }
            del c
        rt.barrier_all()
        rt.free(b)
        rt.free(a)
        report.info["bandwidth"] = result
        if not result:
            return "measured by PE 0"
        return (
            f"{BW_BYTES >> 20} MiB: rt.put (nvshmemx_putmem_on_stream) {result['host_put_on_stream_GBps']:.0f} GB/s, "
            f"torch device-to-device copy {result['torch_d2d_copy_GBps']:.0f} GB/s (bytes copied / time)"
        )

    check(report, "put_bandwidth", bandwidth)

    # ---- Triton device library: a compiled putmem_signal_block kernel ---------------------------
    # Skipped with a message where Triton is not installed.
    try:
        import triton  # noqa: F401  (present, or the check is skipped)
        import triton.language as tl

        import unishmem.language as shl
    except ImportError as e:
        report.add("triton_putmem_signal_block", "SKIPPED", f"device library not available here ({e})")
    else:

        def triton_kernel():
            @unishmem.jit
            def ring_put(buf, src, sig, nbytes, peer, BLOCK: tl.constexpr):
                pid = tl.program_id(0)
                off = pid * BLOCK
                shl.putmem_signal_block(buf + off, src + off, BLOCK * 4, sig, 1, shl.SIGNAL_ADD, peer)

            blocks, block = 512, 128 * 1024
            nelem = blocks * block
            buf = rt.zeros(nelem, torch.float32)
            sig = rt.signals(1)
            src = torch.full((nelem,), float(me + 1), device=rt.device)
            rt.barrier_all()
            ring_put[(blocks,)](buf, src, sig, nelem * 4, peer, BLOCK=block)
            rt.signal_wait_until(sig[0:1], CMP.GE, blocks)
            assert bool((buf == left + 1).all()), "kernel put: wrong data"
            rt.barrier_all()
            result = ""
            if me == 0:
                kernel_s = timed(lambda: ring_put[(blocks,)](buf, src, sig, nelem * 4, peer, BLOCK=block), reps=10)
                report.info.setdefault("bandwidth", {})["triton_putmem_signal_block_GBps"] = nelem * 4 / kernel_s / 1e9
                result = f"; {nelem * 4 >> 20} MiB in {blocks} programs: {nelem * 4 / kernel_s / 1e9:.0f} GB/s"
            rt.barrier_all()
            rt.free(sig)
            rt.free(buf)
            return "putmem_signal_block + host signal_wait_until" + result

        check(report, "triton_putmem_signal_block", triton_kernel)

    # Last, since a vendor failure here could end the process: host atomics on a P2P peer, which
    # NVSHMEM's own host AMOs do not implement (NOTE [peer atomics]): every PE draws 50 tickets from
    # one counter on PE 0, then a compare-swap and a swap on the peer's word.
    def atomics():
        c = rt.zeros(1, torch.int64)
        rt.barrier_all()
        tickets = [rt.atomic_fetch_add(c, 1, 0) for _ in range(50)]
        rt.barrier_all()
        total = rt.atomic_fetch(c, 0)
        assert total == 50 * rt.n_pes and len(set(tickets)) == 50, (total, tickets)
        rt.barrier_all()
        won = rt.atomic_compare_swap(c, total, -5 - me, 0) == total  # one PE's swap finds `total`
        rt.barrier_all()
        final = rt.atomic_fetch(c, 0)
        assert final in [-5 - pe for pe in range(rt.n_pes)] and won == (final == -5 - me), (final, won)
        rt.barrier_all()
        rt.free(c)
        return f"{50 * rt.n_pes} fetch_adds on PE 0's counter, distinct tickets; one compare_swap won"

    check(report, "host_atomics", atomics)

    report.info["seconds"] = round(time.time() - t0, 2)
    report.save()
    rt.finalize()
    report.add("finalize", "ok")
    return 0 if all(i["status"] != "FAILED" for i in report.items) else 1


if __name__ == "__main__":
    sys.exit(main())
