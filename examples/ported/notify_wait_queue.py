"""Ported: a producer/consumer queue between neighbours.  unishmem run -n 2 examples/ported/notify_wait_queue.py

Port of Triton-distributed's tutorial 01, "Distributed Notify and Wait"
(ByteDance-Seed/Triton-distributed, tutorials/01-distributed-notify-wait.py at commit
1512a81189315eca7ba38f884aaf239469a88ba3), rewritten for unishmem.language.

Each PE streams its input, block by block, to its right neighbour through a small queue that lives
in the neighbour's symmetric memory. One word per queue slot, on the receiving PE, says what the
slot holds: 2r means "empty, ready for the r-th pass over the queue", 2r+1 "full with the r-th
pass's block". Producer programs wait until the neighbour's slot is empty, store a block into it
and mark it full; consumer programs wait for a full slot, copy it out and mark it empty again.

The kernel logic follows the original; what changed, and why, is marked "Port:" below. Sizes are
smaller than the original's (2025 blocks of 128 floats, 20 programs) so that the host backend, one
interpreter thread per program, finishes in seconds.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402
import unishmem.language as shl  # noqa: E402


@unishmem.jit
def queue_kernel(
    inp,
    out,
    queue,
    slot_state,
    num_blocks,
    SLOTS: tl.constexpr,
    BLOCK: tl.constexpr,
    PRODUCERS: tl.constexpr,
    CONSUMERS: tl.constexpr,
):
    # Port: the original takes rank and num_ranks as constexpr arguments (one compile per PE);
    # shl.my_pe()/shl.n_pes() are read at run time, so every PE runs the same compiled kernel.
    me = shl.my_pe()
    n = shl.n_pes()
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    if pid < PRODUCERS:
        right = (me + 1) % n
        for i in range(pid, num_blocks, PRODUCERS):
            slot = i % SLOTS
            empty = tl.cast((i // SLOTS) * 2, tl.uint64)
            # Port: the original waits on the neighbour's word with dl.wait(dl.symm_at(word, right),
            # ...). unishmem's waits take a word of the calling PE (as OpenSHMEM's do), so a wait on
            # a peer's word is a spin on load_remote, a volatile load that a loop may spin on.
            seen = shl.load_remote(slot_state + slot, right)
            while seen != empty:
                seen = shl.load_remote(slot_state + slot, right)
            # load_remote is relaxed (dl.wait's load is an acquire): one atomic read of the word
            # is the acquire, and its value the token the stores into the slot depend on.
            seen = shl.atomic_fetch(slot_state + slot, right)
            block = tl.load(inp + i * BLOCK + offs)
            dst = shl.consume_token(queue + slot * BLOCK + offs, seen)
            # Port: dl.symm_at + tl.store becomes store_remote (a neighbour reachable by load/store,
            # as in the original; on another node it would be a put from a symmetric stage).
            shl.store_remote(dst, block, right)
            # Port: the original's __syncthreads() + libshmem_device.fence(): shl.fence() sits
            # between two block barriers, so every thread's store is ordered before the signal.
            shl.fence()
            # Port: dl.notify(word, right, signal=..., sig_op="set") is signal_op; like notify it is
            # issued once per program (thread 0), and SIGNAL_SET is mapped to each vendor's number.
            shl.signal_op(slot_state + slot, empty + 1, shl.SIGNAL_SET, right)
    elif pid < PRODUCERS + CONSUMERS:
        for i in range(pid - PRODUCERS, num_blocks, CONSUMERS):
            slot = i % SLOTS
            full = tl.cast((i // SLOTS) * 2 + 1, tl.uint64)
            # Port: dl.wait(word, 1, "gpu", "acquire", waitValue=v) on a local word is
            # signal_wait_until(word, CMP_EQ, v) (dl.wait compares for equality). Its result is the
            # value seen, the token that consume_token takes, as dl.wait's token is.
            token = shl.signal_wait_until(slot_state + slot, shl.CMP_EQ, full)
            block = tl.load(shl.consume_token(queue + slot * BLOCK + offs, token))
            tl.store(out + i * BLOCK + offs, block)
            # Every thread has read its part of the slot before thread 0 hands it back: as in the
            # original (__syncthreads() + fence), since signal_op starts with no block barrier.
            shl.fence()
            # Port: dl.notify on this PE's own word is signal_op with pe = my_pe().
            shl.signal_op(slot_state + slot, full + 1, shl.SIGNAL_SET, me)


NUM_BLOCKS = 18  # more blocks than slots: each slot is filled and emptied several times
SLOTS, BLOCK = 4, 32
PRODUCERS, CONSUMERS = 4, 2  # the original: 16 and 4
SHAPE = {"SLOTS": SLOTS, "BLOCK": BLOCK, "PRODUCERS": PRODUCERS, "CONSUMERS": CONSUMERS}
ROUNDS = 3

# How `unishmem compile` compiles the kernel with no GPU (the types main() launches it with).
COMPILE = {
    queue_kernel: {
        "signature": {"inp": "*fp32", "out": "*fp32", "queue": "*fp32", "slot_state": "*u64", "num_blocks": "i32"},
        "constexprs": SHAPE,
    }
}


def pe_input(pe: int, round_: int) -> torch.Tensor:
    """PE pe's input in a round: every PE can compute its neighbour's, the reference."""
    gen = torch.Generator().manual_seed(1000 * round_ + pe)
    return torch.randn(NUM_BLOCKS * BLOCK, generator=gen)


def main() -> None:
    with unishmem.init(heap_size="64M") as rt:
        queue = rt.full(SLOTS * BLOCK, -1.0)  # symmetric: the left neighbour stores into it
        slot_state = rt.signals(SLOTS)  # Port: uint64 signal words (Triton-distributed uses int64)
        left = (rt.my_pe - 1) % rt.n_pes
        for round_ in range(ROUNDS):
            inp = pe_input(rt.my_pe, round_).to(rt.device)
            out = torch.empty_like(inp)
            # As in the original: every slot empty again (0), and no PE starts the kernel before
            # all PEs have reset their words. (Resetting here is safe: this PE's kernel ended, so
            # the left neighbour's producers have sent their last signal.)
            slot_state.zero_()
            rt.barrier_all()
            queue_kernel[(PRODUCERS + CONSUMERS,)](inp, out, queue, slot_state, NUM_BLOCKS, **SHAPE)
            # The original gathers every PE's input with torch.distributed to build its reference;
            # here the inputs are seeded per (PE, round), so the left neighbour's is recomputed.
            torch.testing.assert_close(out.cpu(), pe_input(left, round_), rtol=0, atol=0)
        if rt.my_pe == 0:
            print(f"ported notify/wait queue: {ROUNDS} rounds correct on {rt.n_pes} PEs (backend {rt.backend})")
        rt.free(queue)
        rt.free(slot_state)


if __name__ == "__main__":
    main()
