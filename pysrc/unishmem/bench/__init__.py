"""`unishmem bench`: the host backend's figures beside their references, all measured in one run.

It launches its own jobs: the host backend through `unishmem run` at each PE count, Open MPI
through mpirun + mpi4py, torch.distributed gloo through `unishmem run`; then prints one table,
and writes JSON (--json) and a plot (--plot). The modules: plan (what is measured, the
memory-traffic formulas), timing (one method for every implementation), *_worker (one per kind of
job), jobs (launching them), report (table, JSON, plot).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import tempfile

from .plan import Plan

__all__ = ["run", "check_output_path"]


def check_output_path(path: str, what: str) -> str:
    """An output file whose folder exists and is writable, checked before minutes of measuring."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise ValueError(f"{what} {path!r} is a directory; give a file name")
    if not os.path.isdir(folder):
        raise ValueError(f"{what} {path!r}: folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{what} {path!r}: folder {folder!r} is not writable")
    return path


def run(
    plan: Plan, json_path: str | None = None, plot_path: str | None = None, skip=(), quiet: bool = False, load: int = 0
) -> int:
    """Measure everything in `plan`, beside `load` busy processes; print the table; write JSON and the
    plot if asked."""
    import torch

    from .. import __version__
    from . import jobs, report

    if plot_path:
        try:
            import matplotlib  # noqa: F401
        except ImportError as e:
            raise RuntimeError(
                f"--plot needs matplotlib, which cannot be imported ({e}): "
                "pip install 'unishmem[bench]' (or pip install matplotlib)"
            ) from None
    skipped: dict[str, str] = {}
    mpirun = None
    if "mpi" in skip:
        skipped["open_mpi"] = "--skip mpi"
    else:
        mpirun, why = jobs.find_mpi()
        if why:
            skipped["open_mpi"] = why
    if "gloo" in skip:
        skipped["gloo"] = "--skip gloo"
    for name, why in skipped.items():
        print(f"unishmem bench: the {name.replace('_', ' ')} reference is skipped: {why}", file=sys.stderr)

    host, mpi, gloo = {}, {}, {}
    counts = sorted(set(plan.all_pes()) | {2})  # put, get and the ping-pongs run at 2 PEs
    with tempfile.TemporaryDirectory(prefix="unishmem-bench-") as tmp, jobs.busy_load(load) as load_info:
        plan_path = os.path.join(tmp, "plan.json")
        with open(plan_path, "w") as f:
            f.write(plan.dumps())
        for n in counts:
            host[n] = jobs.host_job(plan, n, plan_path, tmp, quiet)
            if mpirun and "open_mpi" not in skipped:
                try:
                    mpi[n] = jobs.mpi_job(plan, n, plan_path, tmp, mpirun, quiet)
                except jobs.JobFailed as e:
                    skipped["open_mpi"] = str(e).splitlines()[0]
                    print(f"unishmem bench: the Open MPI reference is skipped: {e}", file=sys.stderr)
            if "gloo" not in skipped and n in plan.all_pes():
                try:
                    gloo[n] = jobs.gloo_job(plan, n, plan_path, tmp, quiet)
                except jobs.JobFailed as e:
                    skipped["gloo"] = str(e).splitlines()[0]
                    print(f"unishmem bench: the gloo reference is skipped: {e}", file=sys.stderr)

    meta = {
        "backend": "host",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "unishmem": __version__,
        "quick": plan.quick,
        "plan": json.loads(plan.dumps()),
        "open_mpi": f"{mpi[2]['library'].split(',')[0]} (mpi4py {mpi[2]['mpi4py']})" if 2 in mpi else None,
        "gloo": f"gloo (torch {torch.__version__})" if gloo else None,
        "skipped": skipped,
        "load": load_info,
    }
    result = report.build(plan, host, mpi, gloo, meta)
    print(report.text(result))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
        print(f"\nunishmem bench: wrote {json_path}")
    if plot_path:
        report.plot(result, plot_path)
        print(f"unishmem bench: wrote {plot_path}")
    return 0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
