"""Launchers and failure behaviour: unishmem run, mpirun, torchrun, srun-style environments, a dead PE,
Ctrl-C, stalls, and shared-memory segments that must never outlive their job."""

import fcntl
import io
import os
import pathlib
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import termios
import textwrap
import threading
import time

import pytest
from spmd import launch, segments, segments_left

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")
SMOKE = os.path.join(PROGRAMS, "smoke.py")
FAILURES = os.path.join(PROGRAMS, "failures.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ok_lines(output: str, n: int, launcher: str) -> None:
    lines = sorted(re.findall(r"^OK pe=(\d+) n=(\d+) launcher=(.*)$", output, re.M))
    assert lines == [(str(pe), str(n), launcher) for pe in range(n)], output


@pytest.mark.parametrize("n", [1, 2, 4])
def test_unishmem_run(n):
    proc = launch([SMOKE], n, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ok_lines(proc.stdout, n, "unishmem run")


@pytest.mark.slow
def test_python_dash_m_unishmem_run_and_command_forms():
    proc = subprocess.run(
        [sys.executable, "-m", "unishmem", "run", "-n", "2", sys.executable, SMOKE],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    ok_lines(proc.stdout, 2, "unishmem run")


@pytest.mark.slow
def test_run_takes_dash_m_and_dash_c_programs():
    code = (
        "import unishmem; rt = unishmem.init(heap_size='16M'); "
        "print(f'OK pe={rt.my_pe} n={rt.n_pes} launcher={rt.launcher}', flush=True); rt.finalize()"
    )
    proc = launch(["-c", code], 2, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ok_lines(proc.stdout, 2, "unishmem run")
    proc = launch(["-m", "unishmem", "info"], 1, timeout=120)
    assert proc.returncode == 0 and "backends:" in proc.stdout, proc.stderr


def test_each_pe_gets_its_share_of_the_cores_unless_the_user_chose():
    code = "import os; print('THREADS', os.environ['OMP_NUM_THREADS'], flush=True)"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    cores = len(os.sched_getaffinity(0))
    for n, given, expected in ((1, None, cores), (3, None, max(1, cores // 3)), (2, "3", 3)):
        proc = subprocess.run(
            [sys.executable, "-m", "unishmem", "run", "-n", str(n), sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env=env if given is None else dict(env, OMP_NUM_THREADS=given),
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["THREADS", str(expected)] * n, proc.stdout


@pytest.mark.slow
def test_lines_of_different_pes_never_run_into_each_other():
    # Unbuffered, print writes its text and its newline separately; the launcher must still pass on whole lines.
    code = (
        "import sys, unishmem\n"
        "rt = unishmem.init(heap_size='16M'); pe = rt.my_pe; rt.barrier_all()  # all PEs write at once\n"
        "for i in range(2000):\n"
        "    print(f'pe={pe} line={i} ', end=''); print('end')\n"
        "    print(f'err pe={pe} line={i}', file=sys.stderr)\n"
        "rt.finalize()\n"
    )
    proc = launch(["-c", code], 4, timeout=120, env={"PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr
    out, err = proc.stdout.splitlines(), proc.stderr.splitlines()
    assert sorted(out) == sorted(f"pe={pe} line={i} end" for pe in range(4) for i in range(2000)), out[:20]
    assert sorted(err) == sorted(f"err pe={pe} line={i}" for pe in range(4) for i in range(2000)), err[:20]


def test_output_copier_passes_whole_lines_and_long_runs_without_line_end():
    from unishmem.launcher import LINE_MAX, _copy_lines

    class Recorder(io.BytesIO):
        def __init__(self):
            super().__init__()
            self.writes = []

        def write(self, data):
            self.writes.append(bytes(data))
            return super().write(data)

    read_end, write_end = os.pipe()
    out = Recorder()
    copier = threading.Thread(target=_copy_lines, args=(read_end, out))
    copier.start()
    long_run = b"x" * (LINE_MAX + 10)
    for piece in (b"half ", b"a line\n", b"progress 1\r", b"progress 2\r", long_run, b"\n", b"no end"):
        os.write(write_end, piece)
        while _unread(read_end):  # the copier takes each piece before the next is written
            time.sleep(0.001)
    os.close(write_end)
    copier.join(timeout=10)
    assert out.getvalue() == b"half a line\nprogress 1\rprogress 2\r" + long_run + b"\nno end"
    # Nothing is passed on in the middle of a line, except a run too long to hold.
    assert all(w.endswith((b"\n", b"\r")) or w == b"no end" or len(w) >= LINE_MAX for w in out.writes), out.writes


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe `fd` reads from."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def test_single_process_without_launcher():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UNISHMEM_", "OMPI_", "PMI_", "SLURM_"))}
    proc = subprocess.run([sys.executable, SMOKE], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    ok_lines(proc.stdout, 1, "none (single process)")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["kill", "raise"])
def test_dead_pe_raises_peer_failure_everywhere(mode):
    before = segments()
    proc = launch([FAILURES, mode], 4, timeout=120)
    out = proc.stdout + proc.stderr
    failures = re.findall(r"^PEERFAILURE pe=(\d) after=([\d.]+)s: (.*)$", proc.stdout, re.M)
    assert sorted(pe for pe, _, _ in failures) == ["0", "1", "2"], out
    for _, after, msg in failures:
        assert float(after) < 10.0, out
        assert re.search(r"PE 3 \(pid \d+\) died while PE \d was waiting for", msg), msg
    status = "was killed by signal SIGKILL" if mode == "kill" else "exited with status 1"
    assert re.search(rf"unishmem run: PE 3 \(pid \d+\) {status}", proc.stderr), out
    assert proc.returncode == (137 if mode == "kill" else 1)
    assert not segments_left(before)


@pytest.mark.parametrize("mode", ["hang", "hang_in_kernel"])  # a host wait; the programs of an interpreted launch
def test_ctrl_c_stops_every_pe(mode):
    before = segments()
    cmd = [sys.executable, "-m", "unishmem", "run", "-n", "4", FAILURES, mode]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # every PE waits on a signal nobody sends: a loaded machine must not let the deadlock check end it first
        env=dict(os.environ, TRITON_INTERPRET="1", UNISHMEM_DEADLOCK_TIMEOUT="0", PYTHONFAULTHANDLER="1"),
    )
    pids, waiting = [], 0  # each PE says READY, then WAITING once it is inside its wait
    deadline = time.monotonic() + 60
    while (len(pids) < 4 or waiting < 4) and time.monotonic() < deadline:
        line = proc.stdout.readline()
        m = re.match(r"READY pe=\d pid=(\d+)", line)
        if m:
            pids.append(int(m.group(1)))
        waiting += line.startswith("WAITING pe=")
    assert len(pids) == 4 and waiting == 4, (pids, waiting)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # it once took over 30 s on a loaded machine: say where it was
        pytest.fail(_stuck_report(proc))
    assert proc.returncode == 130, err
    assert "interrupted; stopping 4 PE(s)" in err
    assert len(re.findall(r"^INTERRUPTED pe=\d", out, re.M)) == 4, out + err  # each PE saw KeyboardInterrupt
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert not segments_left(before)


def _stuck_report(proc: subprocess.Popen) -> str:
    """Who still holds the launcher's output pipes open and in what state, then the launcher's own Python
    stacks (faulthandler, on SIGABRT): what a stop that did not end shows of itself."""
    ours = {os.readlink(f"/proc/self/fd/{f.fileno()}") for f in (proc.stdout, proc.stderr)}
    holders = {proc.pid}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(pid) != os.getpid() and ours & {os.readlink(e.path) for e in os.scandir(f"/proc/{pid}/fd")}:
                holders.add(int(pid))
        except OSError:  # gone, or not ours to read
            pass
    lines = []
    for pid in sorted(holders):
        try:
            proc_dir = pathlib.Path(f"/proc/{pid}")
            stat_fields = (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()
            wchan = (proc_dir / "wchan").read_text()
            cmdline = (proc_dir / "cmdline").read_text().replace("\0", " ")
            lines.append(f"pid {pid} state {stat_fields[0]} ppid {stat_fields[1]} wchan {wchan}: {cmdline}")
        except OSError:
            lines.append(f"pid {pid}: gone")
    proc.send_signal(signal.SIGABRT)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return "the launcher did not stop within 30 s of SIGINT\n" + "\n".join(lines) + "\n" + err[-6000:]


# A PE that says READY, then sleeps until it is interrupted.
SLEEPER = """
import os, time
try:  # (READY inside: a Ctrl-C forwarded as soon as it is read may land before print returns)
    print("READY", os.getpid(), flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
"""


def _start_sleepers(n: int, tmp: str) -> tuple[subprocess.Popen, list[int]]:
    """`unishmem run` of n sleeping PEs, with its temporary directory in `tmp`; returns it once every PE runs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "unishmem", "run", "-n", str(n), sys.executable, "-c", SLEEPER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, TMPDIR=tmp),
    )
    pids = [int(proc.stdout.readline().split()[1]) for _ in range(n)]
    return proc, pids


def _gone(pid: int) -> bool:
    """Exited (a zombie) or reaped; reading /proc races with the reaping, which then counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_ctrl_c_again_and_again_still_stops_every_pe_and_cleans_up(tmp_path):
    """Ctrl-C pressed over and over until the launcher has stopped its PEs: no signal may break into what the
    launcher is doing (one used to land inside Popen.poll, holding its waitpid lock, after which
    Popen.wait could block for good), so it still stops every PE, says so once and removes everything."""
    proc, pids = _start_sleepers(2, str(tmp_path))
    start = time.monotonic()
    while proc.poll() is None and not all(_gone(pid) for pid in pids) and time.monotonic() - start < 20:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.002)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert err.count("interrupted; stopping 2 PE(s)") == 1 and "Traceback" not in err, err
    assert out.count("INTERRUPTED") == 2, out + err
    assert all(_gone(pid) for pid in pids)
    assert list(tmp_path.iterdir()) == []


def test_a_sigkilled_launcher_leaves_nothing_behind(tmp_path):
    """Its PEs die with it; its directory (the rendezvous socket, hang reports) and the job's segments go too."""
    proc, pids = _start_sleepers(2, str(tmp_path))
    (private,) = tmp_path.iterdir()
    assert private.name.startswith("unishmem-run-") and (private / "rendezvous.sock").exists()
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while (list(tmp_path.iterdir()) or not all(_gone(pid) for pid in pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in pids)
    assert list(tmp_path.iterdir()) == []


def test_launcher_removes_segments_a_crashed_pe_left():
    before = segments()
    proc = launch([FAILURES, "leak_segment"], 2, timeout=60)
    assert proc.returncode == 3
    assert not segments_left(before)


@pytest.mark.slow
def test_stalled_wait_warns_then_times_out():
    proc = launch(
        [FAILURES, "stall"], 1, timeout=60, env={"UNISHMEM_STALL_WARN": "0.3", "UNISHMEM_WAIT_TIMEOUT": "1.5"}
    )
    assert proc.returncode == 4, proc.stderr
    # NOTE [stall reports]: a Python warning, naming the program's own line that waits
    assert re.search(
        r"failures\.py:\d+: UnishmemWarning: still waiting after \d+ s for signal at heap offset \d+ to become == 42",
        proc.stderr,
    ), proc.stderr
    assert re.search(
        r"TIMEOUT pe=0: gave up after \d+ s waiting for signal at heap offset \d+ to become == 42 "
        r"\(it is 0\)",
        proc.stdout,
    ), proc.stdout


@pytest.mark.slow
def test_deadlock_is_reported_by_every_pe():
    proc = launch([FAILURES, "deadlock"], 3, timeout=60, env={"UNISHMEM_DEADLOCK_TIMEOUT": "1"})
    # each report runs from its DEADLOCK line to the next such line (NOTE [hang report])
    lines = re.findall(
        r"^DEADLOCK pe=(\d) after=([\d.]+)s: (.*?)(?=^DEADLOCK|^unishmem run:|\Z)", proc.stdout, re.M | re.S
    )
    assert sorted(pe for pe, _, _ in lines) == ["0", "1", "2"], proc.stdout + proc.stderr
    for _, after, msg in lines:
        assert float(after) < 10
        assert "every PE has been waiting" in msg
        # PE 0 in barrier_all, the others on a signal nobody sends: each wait with its verdict
        assert re.search(
            r"^PE 0 waits for PE [12] to reach the barrier .*\[failures.py:\d+ in <module>\]\n"
            r"  can never be satisfied: PE [12] is not in a barrier; it waits for signal at heap offset "
            r"\d+ to become == 1 \(it is 0\)",
            msg,
            re.M,
        ), msg
        for pe in (1, 2):
            assert re.search(
                rf"^PE {pe} waits for signal at heap offset \d+ to become == 1 \(it is 0\) "
                r".*\n  can never be satisfied: no PE has signalled this word",
                msg,
                re.M,
            ), msg
    assert proc.returncode == 5


@pytest.mark.slow
def test_a_stopped_pe_whose_wait_is_over_is_no_deadlock():
    # PE 0 is stopped in a wait that PE 1 then satisfies, and stays stopped for 3 deadlock timeouts
    # while PE 1 waits for it in a barrier: every PE waits, but PE 0 goes on once it runs.
    proc = launch([FAILURES, "stopped"], 2, timeout=60, env={"UNISHMEM_DEADLOCK_TIMEOUT": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(re.findall(r"^DONE pe=(\d)$", proc.stdout, re.M)) == ["0", "1"], proc.stdout


@pytest.mark.slow
def test_peer_failure_names_the_dead_pe_not_a_peer_that_reported_it_and_left():
    proc = launch([FAILURES, "blame"], 3, timeout=120)
    out = proc.stdout + proc.stderr
    failures = dict(
        (pe, msg) for pe, _, msg in re.findall(r"^PEERFAILURE pe=(\d) after=([\d.]+)s: (.*)$", proc.stdout, re.M)
    )
    assert sorted(failures) == ["0", "1"], out
    for msg in failures.values():
        assert re.match(r"PE 2 \(pid \d+\) died while PE \d was waiting for PE 1? ?", msg), msg
    assert failures["0"].endswith("; PE 1 reported it and has left since"), failures["0"]


def _small_dev_shm(size: str) -> list[str]:
    """A command prefix that runs the rest in a private mount namespace with a /dev/shm of `size`."""
    prefix = ["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$0" "$@"']
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(prefix + ["true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private /dev/shm here (needs root or user namespaces): {probe.stderr.strip()}")
    return prefix


SHM_PROGRAM = """
import sys, torch, unishmem
from unishmem import _active
try:
    rt = unishmem.init()
except unishmem.BackendUnavailable as e:
    print(f"UNAVAILABLE: {e}", flush=True)
    sys.exit(7)
if rt.my_pe == 0:  # another program takes what the job left of /dev/shm
    try:
        with open("/dev/shm/filler", "wb") as f:
            while True:
                f.write(bytes(1 << 20))
                f.flush()
    except OSError as e:
        print(f"FILLED errno={e.errno}", flush=True)
rt.barrier_all()
total = rt.zeros(1, dtype=torch.int64)
x = rt.full(_active.core().native.heap_free_bytes(), 1, dtype=torch.uint8)  # every other page of the heap
total.fill_(int(x.sum()))
rt.reduce(total, total)
print(f"SUM pe={rt.my_pe} {total.item()}", flush=True)
rt.free(x)
rt.free(total)
rt.finalize()
"""


@pytest.mark.slow
def test_heaps_beyond_dev_shm_fail_at_init_and_reserved_heaps_never_fault():
    prefix = _small_dev_shm("96M")
    run = [sys.executable, "-m", "unishmem", "run", "-n", "2", "-c", SHM_PROGRAM]
    # 2 x 64 MiB heaps: each fits alone, together they do not
    proc = subprocess.run(
        prefix + run, capture_output=True, text=True, timeout=120, env=dict(os.environ, UNISHMEM_SYMMETRIC_SIZE="64M")
    )
    lines = re.findall(r"^UNAVAILABLE: (.*)$", proc.stdout, re.M)
    assert len(lines) == 2 and proc.returncode == 7, proc.stdout + proc.stderr
    for msg in lines:
        assert re.search(
            r"/dev/shm has 100663296 bytes free; the job's 2 PEs need 2 x 67174400 bytes \(a heap of "
            r"67108864 bytes plus 65536 of control each\)",
            msg,
        ), msg
    # 2 x 40 MiB fit: then, with the rest of /dev/shm taken by another program, every page is still there
    proc = subprocess.run(
        prefix + run, capture_output=True, text=True, timeout=120, env=dict(os.environ, UNISHMEM_SYMMETRIC_SIZE="40M")
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FILLED errno=28" in proc.stdout  # ENOSPC
    total = str(2 * ((40 << 20) - 256))
    assert sorted(re.findall(r"^SUM pe=(\d) (\d+)$", proc.stdout, re.M)) == [("0", total), ("1", total)], proc.stdout


def test_segment_is_private_and_named_by_job_token():
    from unishmem import _host

    token = "t" + os.urandom(6).hex()
    backend = _host.HostBackend(token, 0, 1, 1 << 20, 1, 30.0, 10.0, 5.0)
    path = f"/dev/shm/unishmem-{token}-0"
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        backend.attach_peers()
        backend.unlink_own_segment()
        assert not os.path.exists(path)  # the mapping lives on; the name is gone
        backend.finalize()
    finally:
        _host.HostBackend.unlink_job(token, 1)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_torchrun():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(_free_port()),
            SMOKE,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ok_lines(proc.stdout, 2, "torchrun")


@pytest.mark.slow
def test_existing_process_group_and_kernels_called_with_it():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(_free_port()),
            SMOKE,
            "--group",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "TRITON_INTERPRET": "1"},  # (the kernels it calls with group=)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ok_lines(proc.stdout, 2, "torch.distributed group")


def test_mpirun():
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found (.ci/run installs Open MPI from PyPI)")
    proc = subprocess.run(
        [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, SMOKE],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ok_lines(proc.stdout, 2, "mpirun (Open MPI)")


@pytest.mark.parametrize("flavour", ["srun", "mpich"])
def test_launcher_environments_without_a_channel(flavour):
    """srun and MPICH's Hydra only say who each rank is; rank 0 then serves the rendezvous.
    The variables are set here as those launchers set them (neither is installed here)."""
    n = 2
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UNISHMEM_", "OMPI_", "PMI_", "SLURM_"))}
    procs = []
    for rank in range(n):
        if flavour == "srun":
            extra = dict(
                SLURM_PROCID=rank,
                SLURM_NTASKS=n,
                SLURM_LOCALID=rank,
                SLURM_NTASKS_PER_NODE=n,
                SLURM_JOB_ID=4242,
                SLURM_STEP_ID=0,
            )
        else:
            extra = dict(PMI_RANK=rank, PMI_SIZE=n, MPI_LOCALRANKID=rank, MPI_LOCALNRANKS=n)
        procs.append(
            subprocess.Popen(
                [sys.executable, SMOKE],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=dict(env, **{k: str(v) for k, v in extra.items()}),
            )
        )
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    name = "srun" if flavour == "srun" else "mpirun (MPICH)"
    ok_lines("".join(o for o, _ in outs), n, name)
    ids = "4242-0" if flavour == "srun" else ""  # SLURM_JOB_ID-SLURM_STEP_ID; MPICH without PMI_PORT: none
    assert not _rendezvous_files(f"{name}|{ids}-{os.getpid()}")  # rank 0 removed this job's file


def _rendezvous_files(job: str) -> list[str]:
    """Those of the one-host rendezvous file and socket of this job's first init that exist (the PEs'
    parent, this process, is part of the job's name: other jobs on the machine never have it)."""
    from unishmem.bootstrap import _rendezvous_file

    return [path for path in _rendezvous_file(job, 0) if os.path.exists(path)]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill", "raise"])
def test_rank_0_dying_before_every_rank_came_leaves_no_rendezvous_file(how):
    """Rank 0 writes its rendezvous file, then dies before the first exchange; the file must still go
    (removed by rank 0 on its way out, or by the rank that finds its writer gone)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UNISHMEM_", "OMPI_", "PMI", "SLURM_"))}
    env.update(UNISHMEM_BOOTSTRAP_TIMEOUT="10")
    procs = [
        subprocess.Popen(
            [sys.executable, INIT_FAULTS, f"rank0_{how}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(
                env,
                SLURM_PROCID=str(rank),
                SLURM_NTASKS="2",
                SLURM_LOCALID=str(rank),
                SLURM_NTASKS_PER_NODE="2",
                SLURM_JOB_ID="4244",
                SLURM_STEP_ID="0",
            ),
        )
        for rank in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    said = "".join(o + e for o, e in outs)
    assert procs[0].returncode == (-signal.SIGKILL if how == "kill" else 3), said
    assert how == "kill" or "rank 0 fails on purpose before the first exchange" in outs[0][0], said
    assert procs[1].returncode == 3 and "INIT FAILED rank=1" in outs[1][0], said
    assert not _rendezvous_files(f"srun|4244-0-{os.getpid()}"), said


def test_a_program_failing_after_init_leaves_no_rendezvous_socket(tmp_path):
    """Under mpirun, srun or torchrun on one host, rank 0 serves the rendezvous; a program that raises
    once init has returned never finalizes, and nothing of the rendezvous may stay behind."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UNISHMEM_", "OMPI_", "PMI", "SLURM_"))}
    env.update(XDG_RUNTIME_DIR=str(tmp_path))
    srun = dict(SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="2", SLURM_JOB_ID="4245", SLURM_STEP_ID="0")
    procs = [
        subprocess.Popen(
            [sys.executable, INIT_FAULTS, "raise_after_init"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank), **srun),
        )
        for rank in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    said = "".join(o + e for o, e in outs)
    assert [p.returncode for p in procs] == [1, 1], said
    assert sorted(re.findall(r"^INIT RETURNED rank=(\d)$", said, re.M)) == ["0", "1"], said
    assert [p for p in tmp_path.rglob("*") if not p.is_dir()] == [], said


@pytest.mark.parametrize("flavour", ["srun", "torchrun"])
def test_multi_host_rendezvous_over_tcp(flavour):
    """Ranks that say they are on different hosts (one per host) meet over TCP at MASTER_ADDR: srun-style
    with rank 0 serving at MASTER_PORT; torchrun-style with a torchrun agent's store holding MASTER_PORT."""
    from torch.distributed import TCPStore

    n, port = 2, _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UNISHMEM_", "OMPI_", "PMI_", "SLURM_"))}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    agent = None
    if flavour == "torchrun":
        agent = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
        env.update(TORCHELASTIC_RUN_ID="multi-host-test", UNISHMEM_SECRET="a secret every rank was given")
    procs = []
    for rank in range(n):
        if flavour == "srun":
            extra = dict(
                SLURM_PROCID=rank,
                SLURM_NTASKS=n,
                SLURM_LOCALID=0,
                SLURM_NTASKS_PER_NODE=1,
                SLURM_JOB_ID=4243,
                SLURM_STEP_ID=0,
            )
        else:
            extra = dict(RANK=rank, WORLD_SIZE=n, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1)
        procs.append(
            subprocess.Popen(
                [sys.executable, SMOKE],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=dict(env, **{k: str(v) for k, v in extra.items()}),
            )
        )
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    ok_lines("".join(o for o, _ in outs), n, flavour)
    unauthenticated = "rendezvous is not authenticated" in "".join(e for _, e in outs)
    assert unauthenticated == (flavour == "srun")  # said when, and only when, no UNISHMEM_SECRET was given
    del agent


def test_unishmem_info():
    proc = subprocess.run([sys.executable, "-m", "unishmem", "info"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^  host\s+built", proc.stdout, re.M), proc.stdout
    assert re.search(r"^  nvshmem\s+(not )?built", proc.stdout, re.M), proc.stdout  # details: test_vendor.py
    assert "/dev/shm" in proc.stdout


# ---- faults around init (NOTE [rendezvous trust] in rendezvous.py) --------------------------------
INIT_FAULTS = os.path.join(PROGRAMS, "init_faults.py")


@pytest.mark.parametrize(
    "mode, why",
    [
        # whichever the rendezvous hears first: the dropped connection, or the launcher seeing the process end
        (
            "kill_in_init",
            r"rank 2 \(pid \d+\) lost its connection to the rendezvous"
            r"|PE 2 \(pid \d+\) was killed by signal SIGKILL",
        ),
        ("exit_early", r"PE 2 \(pid \d+\) exited with status 0"),
    ],
)
def test_peer_lost_during_init_raises_peer_failure(mode, why):
    before = segments()
    proc = launch([INIT_FAULTS, mode], 3, timeout=120)
    out = proc.stdout + proc.stderr
    failures = re.findall(r"^PEERFAILURE pe=(\d) after=([\d.]+)s: (.*)$", proc.stdout, re.M)
    assert sorted(pe for pe, _, _ in failures) == ["0", "1"], out
    for _, after, msg in failures:
        assert float(after) < 10.0, out
        assert re.search(why, msg), msg
    assert "INIT RETURNED" not in out
    assert not segments_left(before)


def test_init_after_finalize_twenty_times_with_changing_heaps():
    proc = launch([INIT_FAULTS, "cycles"], 2, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert sorted(re.findall(r"^CYCLES OK pe=(\d)$", proc.stdout, re.M)) == ["0", "1"], proc.stdout


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-n", "0", "x.py"], "-n 0: need at least one PE"),
        (["-n", "-1", "x.py"], "-n -1: need at least one PE"),
        (["-n", "2", PROGRAMS], f"{PROGRAMS} is a directory, not a program"),
        (["-n", "2", "no-such-program.py"], "no-such-program.py: no such file"),
        (["-n", "2", "no-such-command-xyz"], "no-such-command-xyz: no such program"),
    ],
)
def test_run_rejects_bad_arguments_without_a_traceback(argv, message):
    proc = subprocess.run([sys.executable, "-m", "unishmem", "run", *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"unishmem run: {message}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_a_group_job_with_a_bad_local_rank_names_the_variable():
    code = textwrap.dedent("""
        import torch.distributed as dist, unishmem
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            unishmem.init(group=dist.group.WORLD)
        except ValueError as e:
            print("ValueError:", e)
        finally:
            dist.destroy_process_group()
    """)
    env = {**os.environ, "LOCAL_RANK": "first"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ValueError: LOCAL_RANK='first' is not an integer"
