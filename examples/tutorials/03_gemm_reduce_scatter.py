"""Tutorial 3, GEMM + reduce-scatter:  unishmem run -n 4 examples/tutorials/03_gemm_reduce_scatter.py

A row-parallel linear layer splits K over the PEs: PE p holds a [M, K_p] and b_shard [K_p, N], so
a @ b_shard is only a partial C, and PE p must end with rows block p of the sum of all partials.
Here each program computes one partial tile; a tile that belongs to another PE is pushed to it
with putmem_signal as soon as it is done, and the owner adds the peers' tiles to its own as their
signals arrive, so the reduction overlaps the GEMM. This is unishmem.kernels.gemm_rs in short
(the library's version masks sizes that do not divide the tiles and alternates buffers between
calls); the tutorial checks itself against the library and against torch.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402
import unishmem.kernels  # noqa: E402
import unishmem.language as shl  # noqa: E402


@unishmem.jit(do_not_specialize=["epoch"])
def gemm_rs_kernel(
    a, b, c, stage, recv, arrived, epoch, m, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr
):
    me = shl.my_pe()
    n = shl.n_pes()
    pid = tl.program_id(0)
    tiles_n = N // BLOCK_N
    tiles = m // BLOCK_M * tiles_n  # tiles per owner
    # Other PEs' tiles first, this PE's last: pushes are never queued behind programs that wait.
    owner = (me + 1 + pid // tiles) % n
    t = pid % tiles
    tm = t // tiles_n
    tn = t % tiles_n
    rm = tl.arange(0, BLOCK_M)
    rn = tn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a_tile = tl.load(a + (owner * m + tm * BLOCK_M + rm)[:, None] * K + (k0 + rk)[None, :])
        acc = tl.dot(a_tile, tl.load(b + (k0 + rk)[:, None] * N + rn[None, :]), acc)
    TILE: tl.constexpr = BLOCK_M * BLOCK_N
    offs = rm[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]  # a tile stored contiguously
    if owner != me:
        # Stage, then send (puts start with a block barrier, so every thread's store is in): one
        # contiguous put into the owner's slot (sender me, tile t), its signal SET to the epoch.
        staged = stage + (owner * tiles + t) * TILE
        tl.store(staged + offs, acc)
        shl.putmem_signal_nbi_block(
            recv + (me * tiles + t) * TILE, staged, TILE * 4, arrived + t * n + me, epoch, shl.SIGNAL_SET, owner
        )
    else:
        for s in range(0, n):
            if s != me:
                token = shl.signal_wait_until(arrived + t * n + s, shl.CMP_GE, epoch)
                slot = shl.consume_token((s * tiles + t) * TILE, token)  # load only after the wait
                acc += tl.load(recv + slot + offs)
        tl.store(c + (tm * BLOCK_M + rm)[:, None] * N + rn[None, :], acc)


COMPILE = {
    gemm_rs_kernel: {
        "signature": {
            "a": "*fp32",
            "b": "*fp32",
            "c": "*fp32",
            "stage": "*fp32",
            "recv": "*fp32",
            "arrived": "*u64",
            "epoch": "i32",
            "m": "i32",
            "N": "i32",
            "K": "i32",
        },
        "constexprs": {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16},
    }
}


def main() -> None:
    m, N, block = 16, 32, 16
    with unishmem.init(heap_size="64M") as rt:
        n, me = rt.n_pes, rt.my_pe
        M, tiles = n * m, (m // block) * (N // block)
        stage = rt.empty(n * tiles * block * block)  # symmetric: put sources and receive slots
        recv = rt.empty(n * tiles * block * block)
        arrived = rt.signals(tiles * n)  # one signal per (tile, sender)
        c = torch.empty((m, N), device=rt.device)

        def operands(pe, epoch):  # K_p = 16 * (pe + 1): the shards need not be equal
            k = 16 * (pe + 1)
            a = ((torch.arange(M * k) + pe + epoch) % 7 - 3).float().reshape(M, k)
            return a, ((torch.arange(k * N) * (pe + 2)) % 5 - 2).float().reshape(k, N)

        for epoch in (1, 2):
            a, b = (x.to(rt.device) for x in operands(me, epoch))
            rt.barrier_all()  # nobody overwrites a slot the owner still reads from the last call
            gemm_rs_kernel[(n * tiles,)](
                a, b, c, stage, recv, arrived, epoch, m, N, a.shape[1], BLOCK_M=block, BLOCK_N=block, BLOCK_K=block
            )
            full = sum(x @ y for x, y in (operands(pe, epoch) for pe in range(n)))
            expected = full[me * m : (me + 1) * m]
            assert torch.equal(c.cpu(), expected), epoch
            assert torch.equal(unishmem.kernels.gemm_rs(a, b).cpu(), expected)
        rt.barrier_all()
        if me == 0:
            print(f"GEMM reduce-scatter: correct on {n} PEs (backend {rt.backend})")
        rt.free_workspaces()
        for t in (stage, recv, arrived):
            rt.free(t)


if __name__ == "__main__":
    main()
