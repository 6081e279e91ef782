"""Two programs of a launch on every PE write one symmetric buffer, with nothing ordering them (a race,
NOTE [race check]). Run under UNISHMEM_RACE_CHECK: with 1 the job ends
with RaceError, with report it finishes and prints the race at finalize."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402


@unishmem.jit
def both_write(buf, N: tl.constexpr):
    tl.store(buf + tl.arange(0, N), tl.program_id(0))


with unishmem.init() as rt:
    buf = rt.zeros(16, dtype=torch.int32)
    both_write[(2,)](buf, 16)
    rt.barrier_all()
    rt.free(buf)
    print(f"PE {rt.my_pe} finished")
