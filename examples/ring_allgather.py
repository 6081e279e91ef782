"""Ring all-gather written once in unishmem.language:  unishmem run -n 4 examples/ring_allgather.py

Each PE owns one block of `out`. In n-1 steps every PE forwards the block it received last to its
right neighbour with putmem_signal_block, then waits for the next block's signal. On a machine
without a GPU the kernel runs under Triton's interpreter on the host backend.
"""

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402
import unishmem.language as shl  # noqa: E402


@unishmem.jit
def ring_allgather(out, arrived, BLOCK: tl.constexpr):
    me = shl.my_pe()
    n = shl.n_pes()
    right = (me + 1) % n
    for step in range(n - 1):
        owner = (me - step + n) % n  # the block to forward this step
        shl.putmem_signal_block(
            out + owner * BLOCK, out + owner * BLOCK, BLOCK * 4, arrived + owner, 1, shl.SIGNAL_SET, right
        )
        incoming = (me - step - 1 + n) % n  # the block the left neighbour forwards
        shl.signal_wait_until(arrived + incoming, shl.CMP_EQ, 1)


# How `unishmem compile examples/ring_allgather.py` compiles the kernel with no GPU: the Triton type of each
# run-time argument and a value for each tl.constexpr one, as main() launches it.
COMPILE = {ring_allgather: {"signature": {"out": "*fp32", "arrived": "*u64"}, "constexprs": {"BLOCK": 8}}}


def main() -> None:
    block = 8
    with unishmem.init(heap_size="64M") as rt:
        out = rt.zeros(rt.n_pes * block, dtype=torch.float32)
        arrived = rt.signals(rt.n_pes)
        out[rt.my_pe * block : (rt.my_pe + 1) * block] = torch.arange(block) + 100 * rt.my_pe
        rt.barrier_all()
        ring_allgather[(1,)](out, arrived, BLOCK=block)
        expected = torch.cat([torch.arange(block) + 100 * pe for pe in range(rt.n_pes)]).float().to(out.device)
        assert torch.equal(out, expected), out
        rt.barrier_all()
        if rt.my_pe == 0:
            mode = "interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "compiled"
            sys.stdout.write(f"ring all-gather ({mode}, backend {rt.backend}) correct on {rt.n_pes} PEs\n")
        rt.free(out)
        rt.free(arrived)


if __name__ == "__main__":
    main()
