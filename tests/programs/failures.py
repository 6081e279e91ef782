"""PE programs that fail on purpose, for the launcher and failure tests. argv[1] picks the failure."""

import os
import signal
import subprocess
import sys
import threading
import time

import unishmem
from unishmem import CMP, PeerFailure, _active


def say(line: str) -> None:
    sys.stdout.write(line + "\n")  # one write per line: PEs share the terminal
    sys.stdout.flush()


def process_alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


mode = sys.argv[1]
rt = unishmem.init(heap_size="16M")
victim = rt.n_pes - 1
sig = rt.signals(1)
if mode in ("stopped", "blame"):
    import torch

    mine, pids = rt.full(1, os.getpid(), dtype=torch.int64), rt.zeros(rt.n_pes, dtype=torch.int64)
    rt.fcollect(pids, mine)
    pids = pids.tolist()
if mode == "hang_in_kernel":  # under TRITON_INTERPRET=1: a launch whose programs all wait
    import triton.language as tl

    import unishmem.language as shl

    @unishmem.jit
    def wait_forever(sig):
        if tl.program_id(0) == 1:
            shl.signal_op(sig + 1, 1, shl.SIGNAL_SET, shl.my_pe())  # the programs are running
        shl.signal_wait_until(sig, shl.CMP_EQ, 1)

    sig = rt.signals(2)

    def ready_once_running():
        while rt.signal_fetch(sig[1:]) != 1:
            time.sleep(0.01)
        say(f"READY pe={rt.my_pe} pid={os.getpid()}")

    threading.Thread(target=ready_once_running, daemon=True).start()
else:
    say(f"READY pe={rt.my_pe} pid={os.getpid()}")
if mode in ("hang", "hang_in_kernel"):

    def waiting_once_in_the_wait():
        """WAITING once this PE publishes a wait (what the deadlock check reads): it is inside it."""
        while not next(v for v in _active.core().native.wait_snapshot() if v["pe"] == rt.my_pe)["waiting"]:
            time.sleep(0.01)
        say(f"WAITING pe={rt.my_pe}")

    threading.Thread(target=waiting_once_in_the_wait, daemon=True).start()
start = time.monotonic()
try:
    if mode == "kill" and rt.my_pe == victim:
        time.sleep(0.5)  # let the others settle into their waits
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "raise" and rt.my_pe == victim:
        time.sleep(0.5)
        raise RuntimeError("this PE fails on purpose")
    if mode in ("kill", "raise"):
        if rt.my_pe % 2:
            rt.barrier_all()
        else:
            rt.signal_wait_until(sig, CMP.EQ, 1)  # never signalled
    elif mode == "hang":  # wait until interrupted
        rt.signal_wait_until(sig, CMP.EQ, 1)
    elif mode == "hang_in_kernel":
        wait_forever[(2,)](sig)
    elif mode == "stall":  # nobody will ever signal: the wait must time out and say what it waited for
        rt.signal_wait_until(sig, CMP.EQ, 42)
    elif mode == "deadlock":  # PE 0 waits in a barrier, the others on a signal nobody sends
        if rt.my_pe == 0:
            rt.barrier_all()
        else:
            rt.signal_wait_until(sig, CMP.EQ, 1)
    elif mode == "stopped":  # PE 0 is stopped (as by a debugger) in a wait that PE 1 then ends
        if rt.my_pe == 0:
            rt.signal_wait_until(sig, CMP.EQ, 1)
        else:
            time.sleep(0.5)  # PE 0 is well into its wait
            os.kill(pids[0], signal.SIGSTOP)
            rt.signal_op(sig, 1, 0)
            # Continued well after the deadlock timeout, by a process that does not wait in unishmem.
            subprocess.Popen(
                ["sh", "-c", f"sleep {3 * float(os.environ['UNISHMEM_DEADLOCK_TIMEOUT'])}; kill -CONT {pids[0]}"]
            )
        rt.barrier_all()
        say(f"DONE pe={rt.my_pe}")
        rt.finalize()
    elif mode == "blame":  # the victim dies; PE 1 reports it and leaves; PE 0 waits only after that
        if rt.my_pe == victim:
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGKILL)
        elif rt.my_pe == 0:
            while process_alive(pids[1]):
                time.sleep(0.02)
        rt.barrier_all()
    elif mode == "leak_segment":  # a segment a crashed PE would leave behind: the launcher removes it
        open(f"/dev/shm/unishmem-{os.environ['UNISHMEM_JOB_TOKEN']}-{rt.n_pes + 7}", "w").close()
        os._exit(3)
except PeerFailure as e:
    say(f"PEERFAILURE pe={rt.my_pe} after={time.monotonic() - start:.2f}s: {e}")
    sys.exit(3)
except KeyboardInterrupt:
    say(f"INTERRUPTED pe={rt.my_pe}")
    sys.exit(130)
except unishmem.DeadlockError as e:
    say(f"DEADLOCK pe={rt.my_pe} after={time.monotonic() - start:.1f}s: {e}")
    sys.exit(5)
except unishmem.WaitTimeout as e:
    say(f"TIMEOUT pe={rt.my_pe}: {e}")
    sys.exit(4)
