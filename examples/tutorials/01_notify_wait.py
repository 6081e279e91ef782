"""Tutorial 1, notify and wait:  unishmem run -n 4 examples/tutorials/01_notify_wait.py

The pattern under every distributed kernel: a producer stages data, sends it with a signal, and the
consumer waits for the signal before it reads, then hands the buffer back. Here every PE is both: a
kernel of two programs, where program 0 produces for the right neighbour and program 1 consumes what
the left neighbour sent. The same code runs compiled on a GPU (NVSHMEM or rocSHMEM) and here under
Triton's interpreter on the host backend.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402
import unishmem.language as shl  # noqa: E402


@unishmem.jit
def notify_wait(inbox, stage, ready, freed, out, epoch, N: tl.constexpr):
    me = shl.my_pe()
    n = shl.n_pes()
    offs = tl.arange(0, N)
    if tl.program_id(0) == 0:
        # Producer. The right neighbour's inbox is ours to fill once it has read the last round's
        # message: without this wait a fast producer overwrites data its consumer has not read yet.
        shl.signal_wait_until(freed, shl.CMP_GE, epoch - 1)
        # Stage the message, then send it: a put starts with a block barrier, so every thread's
        # store is what arrives. The signal is SET to this round's number (never reset, so rounds
        # cannot be confused), and it lands after the data.
        tl.store(stage + offs, offs * 10 + me + epoch)
        shl.putmem_signal_block(inbox, stage, N * 4, ready, epoch, shl.SIGNAL_SET, (me + 1) % n)
    else:
        # Consumer. Wait for the left neighbour's signal; consume_token ties the loads to the wait,
        # so a compiler that pipelines loads cannot move them above it.
        token = shl.signal_wait_until(ready, shl.CMP_GE, epoch)
        tl.store(out + offs, tl.load(shl.consume_token(inbox + offs, token)))
        # Hand the inbox back: the left neighbour may send the next round.
        shl.signal_op(freed, epoch, shl.SIGNAL_SET, (me + n - 1) % n)


# How `unishmem compile` compiles the kernel with no GPU (the types main() launches it with).
COMPILE = {
    notify_wait: {
        "signature": {
            "inbox": "*i32",
            "stage": "*i32",
            "ready": "*u64",
            "freed": "*u64",
            "out": "*i32",
            "epoch": "i32",
        },
        "constexprs": {"N": 16},
    }
}


def main() -> None:
    n_elems = 16
    with unishmem.init(heap_size="64M") as rt:
        inbox = rt.zeros(n_elems, dtype=torch.int32)  # symmetric: peers write into it
        stage = rt.zeros(n_elems, dtype=torch.int32)  # symmetric: the source of a put
        ready, freed = rt.signals(1), rt.signals(1)
        out = torch.zeros(n_elems, dtype=torch.int32, device=rt.device)  # any local tensor
        left = (rt.my_pe - 1) % rt.n_pes
        for epoch in (1, 2, 3):
            notify_wait[(2,)](inbox, stage, ready, freed, out, epoch, N=n_elems)
            expected = torch.arange(n_elems, dtype=torch.int32) * 10 + left + epoch
            assert torch.equal(out.cpu(), expected), (epoch, out)
        rt.barrier_all()
        if rt.my_pe == 0:
            print(f"notify/wait: 3 rounds correct on {rt.n_pes} PEs (backend {rt.backend})")
        for t in (inbox, stage, ready, freed):
            rt.free(t)


if __name__ == "__main__":
    main()
