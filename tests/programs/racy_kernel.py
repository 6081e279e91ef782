"""Two programs of a launch on every PE: program 0 writes a symmetric buffer that program 1 reads, with
nothing between them (a race, NOTE [race check]). Run under UNISHMEM_RACE_CHECK: with 1 the job ends
with RaceError, with report it finishes and prints the race at finalize."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402


@unishmem.jit
def write_then_read(buf, out, N: tl.constexpr):
    offs = tl.arange(0, N)
    if tl.program_id(0) == 0:
        tl.store(buf + offs, offs)
    else:
        tl.store(out + offs, tl.load(buf + offs))


with unishmem.init() as rt:
    buf, out = rt.zeros(16, dtype=torch.int32), rt.zeros(16, dtype=torch.int32)
    write_then_read[(2,)](buf, out, 16)
    rt.barrier_all()
    rt.free(buf)
    rt.free(out)
    print(f"PE {rt.my_pe} finished")
