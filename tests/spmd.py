"""SPMD tests: one function body runs on every PE of a real `unishmem run` job.

    @spmd                      # runs at 1, 2 and 4 PEs
    def test_ring(rt): ...

    @spmd(sizes=(2, 4))        # or a subset
    def test_pairs(rt): ...

pytest collects one test per (function, size). The first test of a module at a size launches
one job that runs every SPMD function of the module in order on each PE and records each
outcome; a function that fails on some PE aborts the job (its peers then stop with
PeerFailure) instead of leaving them waiting, and the tests after it report that they did not run.
Run this file as `spmd.py run MODULE OUTDIR` on each PE (the job does that).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import traceback

import pytest

# Default job sizes; UNISHMEM_TEST_SIZES="2,8" replaces them (scripts/ci_rocm.sh runs GPU backends so).
SIZES = tuple(int(n) for n in os.environ.get("UNISHMEM_TEST_SIZES", "1,2,4").split(","))
JOB_ENV = {"UNISHMEM_SYMMETRIC_SIZE": "64M", "UNISHMEM_WAIT_TIMEOUT": "60"}
JOB_TIMEOUT_S = 300
REGISTRY: dict[str, list] = {}  # module file -> [(name, fn, sizes)]
_JOBS: dict[tuple[str, int], dict] = {}


def spmd(fn=None, *, sizes=SIZES):
    if fn is None:
        return functools.partial(spmd, sizes=sizes)
    module_file = os.path.abspath(sys.modules[fn.__module__].__file__)
    REGISTRY.setdefault(module_file, []).append((fn.__name__, fn, tuple(sizes)))

    @pytest.mark.parametrize("n_pes", sizes)
    def test(n_pes):
        outcome = _job(module_file, n_pes)
        _report(outcome, fn.__name__)

    test.__name__ = fn.__name__
    test.__doc__ = fn.__doc__
    test.pe_function = fn
    return test


def raises(call, message: str) -> None:
    """call() must raise a ValueError or TypeError whose text contains `message`."""
    try:
        call()
    except (ValueError, TypeError) as e:
        assert message in str(e), e
    else:
        raise AssertionError(f"no error: {message}")


def launch(args: list[str], n_pes: int, timeout: float = JOB_TIMEOUT_S, env=None) -> subprocess.CompletedProcess:
    """`unishmem run -n n_pes args...` with captured output."""
    cmd = [sys.executable, "-m", "unishmem", "run", "-n", str(n_pes), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


def _job(module_file: str, n_pes: int) -> dict:
    """Results of the module's job at n_pes. A module may add variables for its PEs in SPMD_ENV."""
    key = (module_file, n_pes)
    if key not in _JOBS:
        module_env = next(
            (
                getattr(m, "SPMD_ENV", {})
                for m in list(sys.modules.values())
                if getattr(m, "__file__", None) and os.path.abspath(m.__file__) == module_file
            ),
            {},
        )
        with tempfile.TemporaryDirectory() as out:
            proc = launch([os.path.abspath(__file__), "run", module_file, out], n_pes, env={**JOB_ENV, **module_env})
            results: dict[str, list] = {}
            for pe in range(n_pes):
                path = os.path.join(out, f"pe{pe}.jsonl")
                if os.path.exists(path):
                    for line in open(path):
                        rec = json.loads(line)
                        results.setdefault(rec["name"], []).append(rec)
        _JOBS[key] = {
            "results": results,
            "returncode": proc.returncode,
            "output": (proc.stdout + proc.stderr)[-6000:],
            "n_pes": n_pes,
        }
    return _JOBS[key]


def _report(job: dict, name: str) -> None:
    recs = job["results"].get(name, [])
    failed = [r for r in recs if r["status"] == "failed"]
    if failed:
        pytest.fail("\n".join(f"PE {r['pe']}:\n{r['detail']}" for r in failed), pytrace=False)
    if recs and all(r["status"] == "skipped" for r in recs):
        pytest.skip(recs[0]["detail"])
    if len([r for r in recs if r["status"] == "passed"]) != job["n_pes"]:
        pytest.fail(
            f"{name} did not complete on every PE (job exit status {job['returncode']}); job output:\n{job['output']}",
            pytrace=False,
        )


def _run_module(module_file: str, outdir: str) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(os.path.basename(module_file)[:-3], module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    import unishmem

    rt = unishmem.init()
    log = open(os.path.join(outdir, f"pe{rt.my_pe}.jsonl"), "w")

    def record(name, status, detail=""):
        log.write(json.dumps({"name": name, "pe": rt.my_pe, "status": status, "detail": detail}) + "\n")
        log.flush()

    for name, fn, sizes in REGISTRY[os.path.abspath(module_file)]:
        if rt.n_pes not in sizes:
            record(name, "skipped", f"runs at {sizes} PEs, not {rt.n_pes}")
            continue
        try:
            fn(rt)
            if not rt._finalized:  # a test may end the runtime itself (it must be the module's last)
                rt.barrier_all()
        except BaseException:
            record(name, "failed", traceback.format_exc())
            os._exit(1)  # abort the job: peers raise PeerFailure rather than wait for us
        record(name, "passed")
    rt.finalize()
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["run"]:
    sys.modules["spmd"] = sys.modules["__main__"]  # test modules register here, not in a second copy
    sys.exit(_run_module(sys.argv[2], sys.argv[3]))
