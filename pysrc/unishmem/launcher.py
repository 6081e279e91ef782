"""`unishmem run -n N prog.py [args]`: start N PEs on this host and watch over them.

The launcher serves the rendezvous on a Unix socket in a private directory (NOTE [rendezvous trust]
in rendezvous.py), tells it when a PE's process ends (so peers still in init stop waiting), starts each
PE in its own process group (so Ctrl-C reaches the launcher once, and it forwards it), reports the
first PE that fails, and removes the job's directory and shared-memory segments whatever happened:
itself, or, if it is SIGKILLed, a cleaner process it forked for that (`_Cleaner`).

SIGINT and SIGTERM only set a flag that the launcher's loop reads: an exception raised by a signal
handler lands wherever the main thread happens to be, and inside Popen.poll, between taking its
waitpid lock and the `try` that releases it, it leaves the lock taken, after which Popen.wait()
blocks for good (in 1 of 10 such interruptions in a tight poll loop); a second Ctrl-C would also
break off the cleanup.

PEs write into pipes that the launcher copies out a whole line at a time, so the lines of different
PEs never run into each other (an unbuffered `print` writes its text and its newline separately).
"""

from __future__ import annotations

import ctypes
import glob
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from . import rendezvous
from ._config import seconds
from .bootstrap import pid_alive

GRACE_S = 15.0  # after a PE fails: time for the others to notice (PeerFailure) and exit on their own
TERM_S = 3.0  # after SIGINT/SIGTERM, before SIGKILL
DRAIN_S = 10.0  # at the end, for the PEs' last output to be taken
PES_GONE_S = 10.0  # the cleaner's wait for the PEs of a launcher that died (a pid may be reused meanwhile)
LINE_MAX = 1 << 16  # a longer run of output without a line end is passed on as it is
_output_lock = threading.Lock()


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


def _check_program(cmd: list[str]) -> None:
    """A missing program or script fails here, once, rather than in every PE."""
    python_script = cmd[0] == sys.executable and len(cmd) > 1 and cmd[1] not in ("-m", "-c")
    program = cmd[1] if python_script else cmd[0]
    if os.path.isdir(program):
        raise ValueError(f"{program} is a directory, not a program")
    if python_script and not os.path.isfile(program):
        raise ValueError(f"{program}: no such file")
    if not python_script and shutil.which(program) is None:
        raise ValueError(f"{program}: no such program (not an executable file, not on PATH)")


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


class _Cleaner:
    """A process of its own, forked before anything else exists, that removes the job's directory and
    segments once the launcher is gone, however it went: a SIGKILLed launcher cannot. The launcher
    writes each PE's pid to it; when its pipe closes (the launcher is done or dead), it waits for the
    PEs to be gone too (they die with the launcher: PR_SET_PDEATHSIG), lest one still make a segment."""

    def __init__(self, private: str, token: str):
        read_end, self._pipe = os.pipe()
        self._pid = os.fork()
        if self._pid == 0:
            try:
                os.close(self._pipe)
                _clean_after(read_end, private, token)
            finally:
                os._exit(0)
        os.close(read_end)

    def watch(self, pid: int) -> None:
        os.write(self._pipe, f"{pid}\n".encode())

    def release(self) -> None:
        """The launcher has removed everything itself: the cleaner ends without waiting for anything."""
        os.write(self._pipe, b"done\n")
        os.close(self._pipe)
        os.waitpid(self._pid, 0)


def _clean_after(pipe: int, private: str, token: str) -> None:
    os.setsid()  # out of the launcher's process group and terminal: Ctrl-C or a kill of the group leaves it be
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # whoever reads the launcher's output sees it end with the launcher
        os.dup2(devnull, fd)
    os.closerange(3, pipe)
    os.closerange(pipe + 1, os.sysconf("SC_OPEN_MAX"))
    told = b""
    while chunk := os.read(pipe, 4096):
        told += chunk
    if told.endswith(b"done\n"):
        return
    pes = [int(pid) for pid in told.split()]
    deadline = time.monotonic() + PES_GONE_S
    while any(pid_alive(pid) for pid in pes) and time.monotonic() < deadline:
        time.sleep(0.02)
    shutil.rmtree(private, ignore_errors=True)
    remove_segments(token)


def _copy_lines(pipe: int, out) -> None:
    """Copy a PE's pipe to `out` (a binary stream), whole lines (ended by \\n or \\r) in one write."""
    pending = b""
    while chunk := os.read(pipe, LINE_MAX):
        pending += chunk
        end = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1
        if end == 0 and len(pending) >= LINE_MAX:
            end = len(pending)
        if end:
            _write(out, pending[:end])
            pending = pending[end:]
    if pending:
        _write(out, pending)
    os.close(pipe)


def _write(out, data: bytes) -> None:
    with _output_lock:
        try:
            out.write(data)
            out.flush()
        except (OSError, ValueError):  # our reader went away (or the terminal): keep draining, or the PE blocks
            pass


def _say(message: str) -> None:
    _write(sys.stderr.buffer, f"unishmem run: {message}\n".encode())


def _start(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, list[threading.Thread]]:
    """Start one PE with its stdout and stderr on pipes; returns it and the (unstarted) threads that copy them.

    Start the threads only once every PE runs: forking while threads run is not safe with preexec_fn."""
    pipes = [os.pipe(), os.pipe()]
    proc = subprocess.Popen(
        cmd,
        env=env,
        preexec_fn=_child_setup,  # noqa: PLW1509 (no copier runs yet)
        stdout=pipes[0][1],
        stderr=pipes[1][1],
    )
    copiers = []
    for (read_end, write_end), out in zip(pipes, (sys.stdout.buffer, sys.stderr.buffer)):
        os.close(write_end)
        copiers.append(threading.Thread(target=_copy_lines, args=(read_end, out), daemon=True))
    return proc, copiers


def run(n: int, argv: list[str], extra_env: dict[str, str] | None = None) -> int:
    """Run `argv` as n PEs; returns the job's exit status (0, the first failure's, or 130 on Ctrl-C)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"-n {n}: need at least one PE")
    if not argv:
        raise ValueError("no program to run")
    cmd = _command(argv)
    _check_program(cmd)
    token, secret = secrets.token_hex(8), secrets.token_hex(32)
    base_env = dict(os.environ, **(extra_env or {}))
    base_env.setdefault("PYTHONUNBUFFERED", "1")  # through the pipes, output still arrives as it is written
    # The PEs share this host's cores. An OpenMP or BLAS pool per PE as wide as the machine (torch's,
    # numpy's OpenBLAS, which the interpreter's tl.dot calls) makes n times too many threads, which
    # spin against each other: a 4-PE interpreted ag_gemm on 2 cores took 15.5 s with such pools and
    # 3.8 s with one thread each. Unless the user chose, each PE gets its share (torchrun sets 1).
    base_env.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // n)))
    timeout = seconds("UNISHMEM_BOOTSTRAP_TIMEOUT")  # a bad setting fails before anything is made
    private = tempfile.mkdtemp(prefix="unishmem-run-")  # 0700: only this user reaches the socket
    try:
        cleaner = _Cleaner(private, token)
    except BaseException:
        shutil.rmtree(private, ignore_errors=True)
        raise
    stop_signals: list[int] = []  # SIGINT and SIGTERM, as they came; the loop stops the PEs

    def on_stop_signal(signum, frame):
        stop_signals.append(signum)

    old_handlers = {sig: signal.signal(sig, on_stop_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    server = None
    procs: list[subprocess.Popen] = []
    copiers: list[list[threading.Thread]] = []
    try:
        server = rendezvous.Server(f"unix:{private}/rendezvous.sock", secret.encode(), n, timeout)
        base_env.update(
            UNISHMEM_RENDEZVOUS=server.address,
            UNISHMEM_SECRET=secret,
            UNISHMEM_JOB_TOKEN=token,
            UNISHMEM_WORLD_SIZE=str(n),
            UNISHMEM_LOCAL_WORLD_SIZE=str(n),
            UNISHMEM_HANG_DIR=private,
        )  # NOTE [hang report]: the PEs' parts, gone with the directory
        for rank in range(n):
            if stop_signals:
                break
            env = dict(base_env, UNISHMEM_RANK=str(rank), UNISHMEM_LOCAL_RANK=str(rank))
            proc, proc_copiers = _start(cmd, env)
            procs.append(proc)
            copiers.append(proc_copiers)
            cleaner.watch(proc.pid)
        for copier in (c for rank_copiers in copiers for c in rank_copiers):
            copier.start()
        status = _watch(procs, copiers, server, stop_signals)
        if status is None:
            _say(f"interrupted; stopping {len(procs)} PE(s)")
            _stop(procs, signal.SIGINT)
            status = 130
    finally:
        _stop(procs, signal.SIGKILL, wait=0)
        _drain([c for rank_copiers in copiers for c in rank_copiers], DRAIN_S)
        if server is not None:
            server.close()
        shutil.rmtree(private, ignore_errors=True)
        remove_segments(token)
        cleaner.release()
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
    return status


def _drain(copiers: list[threading.Thread], seconds: float) -> None:
    """Let exited PEs' last output through (a slow reader may still be taking it); a PE's own children
    may hold its pipes open, so wait at most `seconds` in all."""
    end = time.monotonic() + seconds
    for copier in copiers:
        if copier.is_alive():
            copier.join(timeout=max(0.0, end - time.monotonic()))


def _watch(
    procs: list[subprocess.Popen],
    copiers: list[list[threading.Thread]],
    server: rendezvous.Server,
    stop_signals: list[int],
) -> int | None:
    """The job's exit status once every PE has ended, or None as soon as a stop signal has come."""
    first_failure = None
    deadline = None
    reported: set[int] = set()
    while not stop_signals:
        running = [p for p in procs if p.poll() is None]
        for rank, p in enumerate(procs):
            if p.returncode is not None and rank not in reported:  # peers still in init stop waiting for it
                server.mark_gone(rank, f"PE {rank} (pid {p.pid}) {_describe(p.returncode)}")
                reported.add(rank)
        if first_failure is None:
            for rank, p in enumerate(procs):
                if p.returncode not in (None, 0):
                    first_failure = p.returncode
                    _drain(copiers[rank], 1.0)  # its traceback before our verdict
                    _say(f"PE {rank} (pid {p.pid}) {_describe(p.returncode)}")
                    deadline = time.monotonic() + GRACE_S
                    break
        if not running:
            break
        if deadline is not None and time.monotonic() > deadline:
            _say(f"{len(running)} PE(s) still running {GRACE_S:.0f} s after the failure; stopping them")
            _stop(running, signal.SIGTERM)
            break
        time.sleep(0.02)
    if stop_signals:
        return None
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
