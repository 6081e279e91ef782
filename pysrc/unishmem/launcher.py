"""`unishmem run -n N prog.py [args]`: start N PEs on this host and watch over them.

The launcher serves the rendezvous store on loopback (guarded by a per-job secret), starts each
PE in its own process group (so Ctrl-C reaches the launcher once, and it forwards it), reports the
first PE that fails, and removes the job's shared-memory segments whatever happened.
"""
from __future__ import annotations

import ctypes
import datetime
import glob
import os
import secrets
import signal
import subprocess
import sys
import time

GRACE_S = 15.0  # after a PE fails: time for the others to notice (PeerFailure) and exit on their own
TERM_S = 3.0    # after SIGINT/SIGTERM, before SIGKILL


def _child_setup():
    os.setpgid(0, 0)
    try:  # die with the launcher, even if it is SIGKILLed
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _command(argv: list[str]) -> list[str]:
    first = argv[0]
    if first.endswith(".py") or first in ("-m", "-c"):
        return [sys.executable, *argv]
    return argv


def _describe(status: int) -> str:
    if status < 0:
        try:
            return f"was killed by signal {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"


def remove_segments(token: str) -> list[str]:
    left = glob.glob(f"/dev/shm/unishmem-{token}-*")
    for path in left:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return left


class _Stop(Exception):
    pass


def run(n: int, argv: list[str], extra_env: dict[str, str] | None = None) -> int:
    """Run `argv` as n PEs; returns the job's exit status (0, the first failure's, or 130 on Ctrl-C)."""
    from torch.distributed import TCPStore

    if n < 1:
        raise ValueError(f"-n {n}: need at least one PE")
    if not argv:
        raise ValueError("no program to run")
    token, secret = secrets.token_hex(8), secrets.token_hex(16)
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                     timeout=datetime.timedelta(seconds=60))
    store.set(f"unishmem/{secret}/ok", "1")
    base_env = dict(os.environ, **(extra_env or {}))
    base_env.update(UNISHMEM_STORE=f"127.0.0.1:{store.port}", UNISHMEM_SECRET=secret, UNISHMEM_JOB_TOKEN=token,
                    UNISHMEM_WORLD_SIZE=str(n), UNISHMEM_LOCAL_WORLD_SIZE=str(n))
    cmd = _command(argv)
    procs: list[subprocess.Popen] = []

    def on_term(signum, frame):
        raise _Stop()

    old_term = signal.signal(signal.SIGTERM, on_term)
    status = 0
    try:
        for rank in range(n):
            env = dict(base_env, UNISHMEM_RANK=str(rank), UNISHMEM_LOCAL_RANK=str(rank))
            procs.append(subprocess.Popen(cmd, env=env, preexec_fn=_child_setup))
        status = _watch(procs)
    except (KeyboardInterrupt, _Stop):
        print(f"unishmem run: interrupted; stopping {n} PE(s)", file=sys.stderr, flush=True)
        _stop(procs, signal.SIGINT)
        status = 130
    finally:
        _stop(procs, signal.SIGKILL, wait=0)
        signal.signal(signal.SIGTERM, old_term)
        remove_segments(token)
    return status


def _watch(procs: list[subprocess.Popen]) -> int:
    first_failure = None
    deadline = None
    while True:
        running = [p for p in procs if p.poll() is None]
        if first_failure is None:
            for rank, p in enumerate(procs):
                if p.returncode not in (None, 0):
                    first_failure = p.returncode
                    print(f"unishmem run: PE {rank} (pid {p.pid}) {_describe(p.returncode)}", file=sys.stderr,
                          flush=True)
                    deadline = time.monotonic() + GRACE_S
                    break
        if not running:
            break
        if deadline is not None and time.monotonic() > deadline:
            print(f"unishmem run: {len(running)} PE(s) still running {GRACE_S:.0f} s after the failure; "
                  "stopping them", file=sys.stderr, flush=True)
            _stop(running, signal.SIGTERM)
            break
        time.sleep(0.02)
    if first_failure is None:
        return 0
    return 128 - first_failure if first_failure < 0 else first_failure


def _stop(procs: list[subprocess.Popen], sig: int, wait: float = TERM_S) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
    end = time.monotonic() + wait
    for p in procs:
        try:
            p.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
