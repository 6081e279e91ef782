"""A kernel that hangs: PE 0 waits for a signal nobody sends, the others wait for PE 0 in barrier_all.
Run with `unishmem run --hang-timeout S`: the watchdog must report it and end the job (NOTE [hang report]).
Compiled on a GPU (scripts/gpu_check.sh) with UNISHMEM_DEBUG_WAITS=1; under TRITON_INTERPRET=1 elsewhere.
--finish: nobody waits for the signal (every PE only meets the others in barrier_all), so the kernel
ends and the job finalizes. HUNG_OWN_HANG_DIR=1: the PEs find their hang directory themselves, as
under a launcher that gives them none (mpirun, torchrun)."""

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402
import unishmem.language as shl  # noqa: E402

if os.environ.get("HUNG_OWN_HANG_DIR"):
    del os.environ["UNISHMEM_HANG_DIR"]
finish = "--finish" in sys.argv


@unishmem.jit
def never_signalled(sig, waiter):
    if shl.my_pe() == waiter:
        shl.signal_wait_until(sig, shl.CMP_EQ, 1)  # HUNG WAIT
    else:
        shl.barrier_all()  # HUNG BARRIER
    tl.store(sig + 1, 1)


rt = unishmem.init()
sig = rt.signals(2)
print(f"READY pe={rt.my_pe} offset={sig.data_ptr() - rt.heap_base}", flush=True)
never_signalled[(1,)](sig, -1 if finish else 0)
if torch.cuda.is_available():
    torch.cuda.synchronize()
if finish:
    rt.free(sig)
    rt.finalize()
    sys.exit(0)
print(f"NOT HUNG pe={rt.my_pe}", flush=True)
sys.exit(1)
