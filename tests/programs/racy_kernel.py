"""Two programs of a launch on every PE write one symmetric buffer, with nothing ordering them (a race,
NOTE [race check]). Run under UNISHMEM_RACE_CHECK: with 1 the job ends
with RaceError, with report it finishes and prints the race at finalize. RACY_KILL=maker: PE 0 SIGKILLs
itself once it has made the race check's segment, before anyone has mapped it; =mapper: PE 1 once it
has mapped it, before PE 0 unlinks it."""

import os
import signal

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402


@unishmem.jit
def both_write(buf, N: tl.constexpr):
    tl.store(buf + tl.arange(0, N), tl.program_id(0))


if os.environ.get("RACY_KILL"):
    from unishmem import _races

    make = _races.Checker

    def dying(name, create, pe, *args):
        checker = make(name, create, pe, *args)
        if pe == {"maker": 0, "mapper": 1}[os.environ["RACY_KILL"]]:
            os.kill(os.getpid(), signal.SIGKILL)
        return checker

    _races.Checker = dying

with unishmem.init() as rt:
    buf = rt.zeros(16, dtype=torch.int32)
    both_write[(2,)](buf, 16)
    rt.barrier_all()
    rt.free(buf)
    print(f"PE {rt.my_pe} finished")
