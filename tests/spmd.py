"""SPMD tests: one function body runs on every PE of a real `unishmem run` job.

    @spmd                      # runs at 1, 2 and 4 PEs
    def test_ring(rt): ...

    @spmd(sizes=(2, 4))        # or a subset
    def test_pairs(rt): ...

pytest collects one test per (function, size). The SPMD tests selected in a session (after -k, -m
and test ids), from every module, run in one `unishmem run` job per size, as mpi4py's suite does:
conftest.py moves them after the plain tests, grouped by size, and hands the plan to `plan()`. A
test's setup waits until every PE has begun its function (a job's start-up, a module's import and
init), its call for the function's outcome on every PE: each test's time is its own.

On each PE a module gets a fresh runtime: its SPMD_ENV is set, it is imported, unishmem.init()
runs, its functions run in order (each ends with a barrier), and the runtime is finalized (a
function may finalize it itself; it must be the module's last). PROCESS_WIDE variables (Triton
decides at import whether a kernel is interpreted) are set for the whole job instead, so modules
that set them differently run in jobs of their own; modules that do not set them run in the first.

A function that fails on some PE ends the job: its peers stop with PeerFailure (reported with it)
instead of waiting. The next test then starts a fresh job from its own function, so a failure costs
one job start and the tests after it still run and report their own outcome.
Run this file as `spmd.py run PLAN OUTDIR` on each PE (a job does that).
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import pytest

# Default job sizes; UNISHMEM_TEST_SIZES="2,8" replaces them (scripts/ci_rocm.sh runs GPU backends so).
SIZES = tuple(int(n) for n in os.environ.get("UNISHMEM_TEST_SIZES", "1,2,4").split(","))
JOB_ENV = {"UNISHMEM_SYMMETRIC_SIZE": "64M", "UNISHMEM_WAIT_TIMEOUT": "60"}
PROCESS_WIDE = ("TRITON_INTERPRET",)
JOB_TIMEOUT_S = 300  # for each function, counted from when its test starts waiting for it
POLL_S = 0.01  # how often a waiting test reads the PEs' result files
REGISTRY: dict[str, dict] = {}  # module file -> {function name: fn}
_PLANS: dict[int, list[list[tuple[str, str]]]] = {}  # size -> its jobs' (module file, function) lists
_JOBS: dict[tuple[int, int], _Job] = {}  # (size, job index) -> the job running or last run


def spmd(fn=None, *, sizes=SIZES):
    if fn is None:
        return functools.partial(spmd, sizes=sizes)
    module_file = os.path.abspath(sys.modules[fn.__module__].__file__)
    REGISTRY.setdefault(module_file, {})[fn.__name__] = fn

    @pytest.mark.parametrize("n_pes", sizes)
    def test(n_pes, spmd_started):  # the fixture (conftest.py): job start-up, import and init are setup
        _report(_outcome(n_pes, (module_file, fn.__name__)), fn.__name__, n_pes)

    test.__name__ = fn.__name__
    test.__doc__ = fn.__doc__
    test.pe_function = fn
    test.module_file = module_file
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


def segments() -> set[str]:
    return set(glob.glob("/dev/shm/unishmem-*"))


def segments_left(before: set[str]) -> set[str]:
    """Segments made since `before` that no live process maps: left behind by jobs that ended. (Those
    of jobs running now, this session's or others' on the machine, are in use, not left behind.)"""
    mapped = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as f:
                mapped.update(line.split(None, 5)[-1].strip() for line in f if "/dev/shm/unishmem-" in line)
        except OSError:  # the process ended, or is not ours to read
            continue
    return {path for path in segments() - before if path not in mapped}


def module_env(module_file: str) -> dict:
    """The SPMD_ENV of an imported test module."""
    for m in list(sys.modules.values()):
        if getattr(m, "__file__", None) and os.path.abspath(m.__file__) == module_file:
            return dict(getattr(m, "SPMD_ENV", {}))
    return {}


def _process_env(module_file: str) -> tuple:
    env = module_env(module_file)
    return tuple((k, env[k]) for k in PROCESS_WIDE if k in env)


def spmd_key(item) -> tuple[int, str, str] | None:
    """(size, module file, function) of an SPMD test item; None for a plain test."""
    fn = getattr(item, "obj", None)
    if getattr(fn, "pe_function", None) is None or not hasattr(item, "callspec"):
        return None
    return item.callspec.params["n_pes"], fn.module_file, fn.__name__


def plan(keys: list[tuple[int, str, str]]) -> list[tuple[int, int, str, str]]:
    """Splits the selected SPMD tests into jobs; returns each test's (size, job, module, function) in
    the order they should run: by size, then job, then collection order."""
    _PLANS.clear()
    groups = sorted({_process_env(m) for _, m, _ in keys} - {()}) or [()]
    ordered = []
    for n in sorted({n for n, _, _ in keys}):
        jobs = [[] for _ in groups]
        for size, m, name in keys:
            if size == n:
                pe = _process_env(m)
                jobs[groups.index(pe) if pe else 0].append((m, name))
        _PLANS[n] = [job for job in jobs if job]
        ordered += [(n, j, m, name) for j, job in enumerate(_PLANS[n]) for m, name in job]
    return ordered


def close_jobs() -> None:
    for job in _JOBS.values():
        job.close(remove=True)
    _JOBS.clear()


class _Job:
    """A running `unishmem run` job over `entries` [(module file, function)], from the first one."""

    def __init__(self, n_pes: int, entries: list[tuple[str, str]]):
        self.n_pes, self.entries = n_pes, entries
        self.out = tempfile.mkdtemp(prefix="unishmem-spmd-")
        modules = []
        for m, name in entries:  # consecutive functions of one module share its runtime
            if not modules or modules[-1]["file"] != m:
                modules.append({"file": m, "env": module_env(m), "functions": []})
            modules[-1]["functions"].append(name)
        with open(os.path.join(self.out, "plan.json"), "w") as f:
            json.dump(modules, f)
        env = dict(os.environ, **JOB_ENV)
        env.update(kv for m in modules for kv in _process_env(m["file"]))
        self._log = open(os.path.join(self.out, "job.log"), "w")
        cmd = [sys.executable, "-m", "unishmem", "run", "-n", str(n_pes), os.path.abspath(__file__), "run"]
        self.proc = subprocess.Popen(
            [*cmd, os.path.join(self.out, "plan.json"), self.out],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # close() ends the launcher and its PEs as one group
        )
        self.records: dict[tuple[str, str], dict[int, dict]] = {}
        self._read = [0] * n_pes
        self.timed_out = False

    def _poll(self) -> None:
        for pe in range(self.n_pes):
            try:
                with open(os.path.join(self.out, f"pe{pe}.jsonl"), "rb") as f:
                    f.seek(self._read[pe])
                    data = f.read()
            except FileNotFoundError:
                continue
            done = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
            self._read[pe] += len(done)
            for line in done.splitlines():
                rec = json.loads(line)
                self.records.setdefault((rec["module"], rec["name"]), {})[rec["pe"]] = rec

    def ran(self, key) -> bool:
        """Whether some PE of this job started key's function, or will: the job is running and no PE
        has failed (after a failure the job is ending, whether or not its launcher has seen it yet)."""
        self._poll()
        failed = any(r["status"] == "failed" for recs in self.records.values() for r in recs.values())
        return key in self.records or (key in self.entries and not failed and self.proc.poll() is None)

    def done(self, key) -> bool:
        recs = self.records.get(key, {})
        return all(recs.get(pe, {}).get("status", "started") != "started" for pe in range(self.n_pes))

    def wait(self, key, started: bool = False) -> dict[int, dict]:
        """key's records on every PE (with started=True, once every PE has begun it); fewer when the job
        ended (or timed out) before they all came."""
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while True:
            ended = self.proc.poll() is not None
            self._poll()
            if ended or (len(self.records.get(key, {})) == self.n_pes if started else self.done(key)):
                return self.records.get(key, {})
            if time.monotonic() > deadline:
                self.timed_out = True
                self.close()
                return self.records.get(key, {})
            time.sleep(POLL_S)  # polling the files, not waiting for anything to be ready

    def output(self) -> str:
        with open(os.path.join(self.out, "job.log"), errors="replace") as f:
            return f.read()[-6000:]

    def close(self, remove: bool = False) -> None:
        """Stops the job, or lets it finish when every function has run (its PEs finalize)."""
        finishing = all(self.done(key) for key in self.entries)
        if self.proc.poll() is None:
            if not finishing:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the launcher stops its PEs
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        if remove:
            shutil.rmtree(self.out, ignore_errors=True)


def started(item) -> None:
    """Waits until every PE has begun the item's function (its job started, its module imported and
    initialised), starting the job if none will run it."""
    n_pes, module_file, name = spmd_key(item)
    _job(n_pes, (module_file, name)).wait((module_file, name), started=True)


def _outcome(n_pes: int, key: tuple[str, str]) -> tuple[_Job, dict]:
    job = _job(n_pes, key)
    return job, job.wait(key)


def _job(n_pes: int, key: tuple[str, str]) -> _Job:
    """The job that runs key's function at n_pes, started from that function when none will run it."""
    if n_pes not in _PLANS or not any(key in job for job in _PLANS[n_pes]):
        _PLANS.setdefault(n_pes, []).append([key])  # not seen by the collection hook: a job of its own
    index = next(j for j, job in enumerate(_PLANS[n_pes]) if key in job)
    job = _JOBS.get((n_pes, index))
    if job is None or not job.ran(key):
        if job is not None:
            job.close(remove=True)
        entries = _PLANS[n_pes][index]
        job = _JOBS[(n_pes, index)] = _Job(n_pes, entries[entries.index(key) :])
    return job


def _report(outcome: tuple[_Job, dict], name: str, n_pes: int) -> None:
    job, recs = outcome
    failed = [r for r in recs.values() if r["status"] == "failed"]
    if failed:
        # the PE that failed first, then its peers (PeerFailure, as a rule)
        failed.sort(key=lambda r: ("PeerFailure" in r["detail"], r["pe"]))
        pytest.fail("\n".join(f"PE {r['pe']}:\n{r['detail']}" for r in failed), pytrace=False)
    if len(recs) == n_pes and all(r["status"] == "skipped" for r in recs.values()):
        pytest.skip(recs[0]["detail"])
    if sum(r["status"] == "passed" for r in recs.values()) != n_pes:
        why = f"timed out after {JOB_TIMEOUT_S} s" if job.timed_out else f"job exit status {job.proc.poll()}"
        pytest.fail(f"{name} did not complete on every PE ({why}); job output:\n{job.output()}", pytrace=False)


# ---- on each PE ---------------------------------------------------------------------------------


def _run_job(plan_file: str, outdir: str) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import unishmem

    pe = int(os.environ.get("UNISHMEM_RANK", "0"))
    log = open(os.path.join(outdir, f"pe{pe}.jsonl"), "w")

    def record(module, name, status, detail=""):
        log.write(json.dumps({"module": module, "name": name, "pe": pe, "status": status, "detail": detail}) + "\n")
        log.flush()

    for module in json.load(open(plan_file)):
        path, names = module["file"], module["functions"]
        saved = {k: os.environ.get(k) for k in module["env"]}
        os.environ.update(module["env"])
        if os.path.dirname(path) not in sys.path:  # as pytest imports it: its own folder first
            sys.path.insert(0, os.path.dirname(path))
        try:
            spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
            sys.modules[spec.name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(sys.modules[spec.name])
            rt = unishmem.init()
        except BaseException:
            detail = f"setting up {os.path.basename(path)} failed:\n{traceback.format_exc()}"
            for name in names:
                record(path, name, "failed", detail)
            os._exit(1)  # end the job: peers raise PeerFailure rather than wait for us
        for name in names:
            record(path, name, "started")
            try:
                try:
                    REGISTRY[path][name](rt)
                    status, detail = "passed", ""
                except pytest.skip.Exception as e:  # a missing capability: every PE skips alike
                    status, detail = "skipped", e.msg
                if not rt.finalized:  # a test may end the runtime itself (it must be the module's last)
                    rt.barrier_all()
            except BaseException:
                record(path, name, "failed", traceback.format_exc())
                os._exit(1)  # end the job: peers raise PeerFailure rather than wait for us
            record(path, name, status, detail)
        rt.finalize()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["run"]:
    sys.modules["spmd"] = sys.modules["__main__"]  # test modules register here, not in a second copy
    sys.exit(_run_job(sys.argv[2], sys.argv[3]))
