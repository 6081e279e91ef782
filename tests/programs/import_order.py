"""Kernels on the host backend whatever imported triton first (NOTE [import order]). argv[1]:
"late": triton is imported before TRITON_INTERPRET=1 is set (importing torch._dynamo.utils does that);
"unset": TRITON_INTERPRET is never set. Prints one OK line per PE."""

import os
import sys

os.environ.pop("TRITON_INTERPRET", None)
import triton  # noqa: E402  (before the variable: its own helpers, tl.sum among them, are compiled-only)

if sys.argv[1] == "late":
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402
import unishmem.language as shl  # noqa: E402
from unishmem import kernels  # noqa: E402


@triton.jit
def doubled(x):
    return 2 * x


@unishmem.jit
def sum_of_right_neighbour(x, out, N: tl.constexpr):
    """out = 2 * the sum of the right neighbour's x, through a plain triton.jit helper and tl.sum."""
    peer = (shl.my_pe() + 1) % shl.n_pes()
    tl.store(out, tl.sum(doubled(shl.load_remote(x + tl.arange(0, N), peer)), axis=0))


with unishmem.init(heap_size="16M") as rt:
    me, n = rt.my_pe, rt.n_pes
    x = rt.full((16,), float(me + 1))
    out = torch.zeros(1)
    sum_of_right_neighbour[(1,)](x, out, 16)
    rt.barrier_all()
    assert out.item() == 2 * 16 * ((me + 1) % n + 1), out
    assert torch.equal(kernels.all_reduce(x), torch.full((16,), n * (n + 1) / 2))
    a = [torch.arange(8 * 4, dtype=torch.float32).view(8, 4) % (pe + 3) for pe in range(n)]
    b = torch.arange(4 * 8, dtype=torch.float32).view(4, 8) % 5
    for dtype in (torch.float32, torch.bfloat16):
        got = kernels.ag_gemm(a[me].to(dtype), b.to(dtype))
        assert torch.equal(got, (torch.cat(a) @ b).to(dtype)), (dtype, got)
    rt.free(x)
    sys.stdout.write(f"OK pe={me} {sys.argv[1]} interpret={os.environ.get('TRITON_INTERPRET')}\n")
