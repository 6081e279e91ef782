"""Tutorial 5, a one-shot all-reduce:  unishmem run -n 4 examples/tutorials/05_one_shot_all_reduce.py

One-shot: every PE pushes its whole input into a slot of every peer's receive buffer, then sums
its n slots. It moves n times the data but takes one step, which is why it wins for small
messages. This is the kernel behind unishmem.kernels.all_reduce(algorithm="one_shot"), written out
for reading; the tutorial checks itself against the library and against torch.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402
import unishmem.kernels  # noqa: E402
import unishmem.language as shl  # noqa: E402


@unishmem.jit
def one_shot_sum(x, slots, arrived, out, epoch, numel, BLOCK: tl.constexpr):
    me = shl.my_pe()
    n = shl.n_pes()
    p = tl.program_id(0)
    # Programs 0..n-1 each push x to one PE (block scope: the program's threads copy together).
    # The signal for slot `me` on that PE is SET to this call's epoch once the data is there.
    if p < n:
        shl.putmem_signal_nbi_block(slots + me * numel, x, numel * 4, arrived + me, epoch, shl.SIGNAL_SET, p)
    # Every program needs all n slots: one wait on n signal words (thread 0 waits, then a barrier).
    shl.wait_until_all(arrived, n, shl.CMP_GE, epoch)
    # Then each program sums its block of elements over the slots, in PE order.
    offs = p * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    acc = tl.load(slots + offs, mask=mask)
    for s in range(1, n):
        acc += tl.load(slots + s * numel + offs, mask=mask)
    tl.store(out + offs, acc, mask=mask)


# How `unishmem compile` compiles the kernel with no GPU (the types main() launches it with).
COMPILE = {
    one_shot_sum: {
        "signature": {
            "x": "*fp32",
            "slots": "*fp32",
            "arrived": "*u64",
            "out": "*fp32",
            "epoch": "i32",
            "numel": "i32",
        },
        "constexprs": {"BLOCK": 1024},
    }
}


def main() -> None:
    numel, block = 3000, 1024
    with unishmem.init(heap_size="64M") as rt:
        x = rt.empty(numel)  # symmetric source (also any local memory on NVLink)
        slots = rt.zeros(rt.n_pes * numel)  # one slot per PE
        arrived = rt.signals(rt.n_pes)  # one signal per slot
        out = torch.empty(numel, device=rt.device)
        grid = (max(rt.n_pes, triton.cdiv(numel, block)),)
        for epoch in (1, 2):
            x.copy_(torch.arange(numel) % 7 + rt.my_pe + epoch)
            rt.barrier_all()  # nobody overwrites a slot a peer still reads from the last call
            one_shot_sum[grid](x, slots, arrived, out, epoch, numel, BLOCK=block)
            expected = sum(torch.arange(numel) % 7 + pe + epoch for pe in range(rt.n_pes)).float()
            assert torch.equal(out.cpu(), expected), epoch
            assert torch.equal(unishmem.kernels.all_reduce(x.clone(), algorithm="one_shot").cpu(), expected)
        rt.barrier_all()
        if rt.my_pe == 0:
            print(f"one-shot all-reduce: correct on {rt.n_pes} PEs (backend {rt.backend})")
        rt.free_workspaces()
        for t in (x, slots, arrived):
            rt.free(t)


if __name__ == "__main__":
    main()
