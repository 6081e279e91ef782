"""Ported: intra-node all-gather, pulled and pushed.  unishmem run -n 2 examples/ported/intra_node_allgather.py

Port of Triton-distributed's tutorial 02, "Intra-node AllGather"
(ByteDance-Seed/Triton-distributed, tutorials/02-intra-node-allgather.py at commit
1512a81189315eca7ba38f884aaf239469a88ba3), rewritten for unishmem.

Every PE holds a block of rows; afterwards every PE's symmetric buffer holds all of them, PE p's
block at rows [p*rows, (p+1)*rows). Two ways, as in the original:

- pull, from the host: copy each peer's block out of the peer's buffer through a direct view of
  it (the original's copy-engine version), and flag each block as arrived;
- push, from a kernel: one program per peer puts this PE's block into the peer's buffer with
  putmem_signal_block, which also sets the peer's "block arrived" signal word.

What changed, and why, is marked "Port:" below. The rows are fewer than the original's 8192 x 12288
so that the host backend finishes in seconds.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402
import unishmem.language as shl  # noqa: E402


@unishmem.jit
def push_all_gather(buf, arrived, block_elems, value, ELEM_BYTES: tl.constexpr):
    me = shl.my_pe()
    n = shl.n_pes()
    pid = tl.program_id(0)
    mine = buf + me * block_elems
    if pid < n - 1:
        # Port: the original launches n programs, and its last one (peer == rank) copies the block
        # onto itself; here programs 0..n-2 send to the n-1 other PEs only.
        peer = (me + pid + 1) % n
        # Same call as libshmem_device.putmem_signal_block; SIGNAL_SET is unishmem's own constant,
        # mapped to NVSHMEM's or rocSHMEM's number when compiled (the original passes NVSHMEM's 9).
        shl.putmem_signal_block(mine, mine, block_elems * ELEM_BYTES, arrived + me, value, shl.SIGNAL_SET, peer)
    else:
        # Port: the last program waits for the other PEs' blocks instead, so the kernel ends once
        # this PE holds the whole result; the original calls a barrier on the stream after the
        # kernel for that (it also makes sure this PE's own puts have landed, which this wait
        # does not: the host barrier in main() before the next round does).
        for k in range(1, n):
            shl.signal_wait_until(arrived + (me + n - k) % n, shl.CMP_EQ, value)


# How `unishmem compile` compiles the kernel with no GPU (the types main() launches it with).
COMPILE = {
    push_all_gather: {
        "signature": {"buf": "*fp16", "arrived": "*u64", "block_elems": "i32", "value": "i32"},
        "constexprs": {"ELEM_BYTES": 2},
    }
}

ROWS, COLS = 8, 64  # rows per PE (the original: 8192 / n_pes rows of 12288)
DTYPE = torch.float16


def pe_block(pe: int, round_: int) -> torch.Tensor:
    """PE pe's rows in a round, seeded so that every PE can build the whole reference."""
    gen = torch.Generator().manual_seed(100 * round_ + pe)
    return torch.randn(ROWS, COLS, generator=gen).to(DTYPE)


def pull_all_gather(rt, buf: torch.Tensor, arrived: torch.Tensor) -> None:
    """The original's copy-engine version: read each peer's block through a view of its buffer."""
    me, n = rt.my_pe, rt.n_pes
    for k in range(1, n):
        src = (me + k) % n
        # Port: nvshmem_create_tensors' per-peer tensors are rt.peer(buf, src) here: None where
        # the peer is not reachable by load/store (another node), which this version cannot serve.
        theirs = rt.peer(buf, src)
        if theirs is None:
            raise SystemExit(f"PE {src} is not reachable by load/store from PE {me}: pull needs one node")
        rows = slice(src * ROWS, (src + 1) * ROWS)
        buf[rows].copy_(theirs[rows])
        # Port: cuStreamWriteValue32 on a local flag becomes rt.signal_op on this PE's own word,
        # stream-ordered on a GPU backend as the original is.
        rt.signal_op(arrived[src : src + 1], 1, rt.my_pe)


def main() -> None:
    with unishmem.init(heap_size="64M") as rt:
        me, n = rt.my_pe, rt.n_pes
        buf = rt.empty((n * ROWS, COLS), dtype=DTYPE)  # symmetric: peers read it or write into it
        arrived = rt.signals(n)  # Port: uint64 signal words (Triton-distributed uses int64)
        for round_, mode in enumerate(("pull", "push", "push", "pull")):
            # The reference: what torch.distributed.all_gather_into_tensor gives in the original.
            golden = torch.cat([pe_block(pe, round_) for pe in range(n)])
            rt.barrier_all()  # no peer still reads this PE's buffer (pull) from the last round
            buf.fill_(-1)
            buf[me * ROWS : (me + 1) * ROWS].copy_(pe_block(me, round_).to(rt.device))
            arrived.zero_()
            # As in the original: every PE's block is in place (and every flag reset) before anyone
            # reads or writes a peer's buffer.
            rt.barrier_all()
            if mode == "pull":
                pull_all_gather(rt, buf, arrived)
            else:
                # Port: a push round sets the flags to its own number, only to show that a signal
                # value is any 64-bit number the receiver agrees on.
                push_all_gather[(n,)](buf, arrived, ROWS * COLS, round_ + 1, ELEM_BYTES=buf.element_size())
            expected_flags = torch.full((n,), 1 if mode == "pull" else round_ + 1, dtype=torch.int64)
            expected_flags[me] = 0  # nobody sends a PE its own block
            assert torch.equal(arrived.cpu().to(torch.int64), expected_flags), (mode, arrived)
            assert torch.equal(buf.cpu(), golden), f"{mode} round {round_}: all-gather differs from the reference"
        rt.barrier_all()  # no PE frees the buffers while a peer may still read them
        if me == 0:
            print(f"ported intra-node all-gather: pull and push correct on {n} PEs (backend {rt.backend})")
        rt.free(buf)
        rt.free(arrived)


if __name__ == "__main__":
    main()
