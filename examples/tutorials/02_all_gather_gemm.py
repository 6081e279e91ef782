"""Tutorial 2, all-gather + GEMM overlapped:  unishmem run -n 4 examples/tutorials/02_all_gather_gemm.py

Tensor parallelism shards A by rows: PE p holds a_shard = A[p*m:(p+1)*m], every PE needs C = A @ B.
Instead of gathering all of A and then multiplying, one launch does both: the first programs push
this PE's shard to the peers with putmem_signal, and every program computes one C tile, starting
with tiles of the local shard (no wait) while the other shards are still on their way. A tile of
a remote shard waits for that shard's signal only. This is unishmem.kernels.ag_gemm(overlap=True)
in short (the library's version sends in row chunks and masks sizes that do not divide the tiles);
the tutorial checks itself against the library and against torch.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402
import unishmem.kernels  # noqa: E402
import unishmem.language as shl  # noqa: E402


@unishmem.jit(do_not_specialize=["epoch"])  # epoch changes every call: one compiled kernel for all
def ag_gemm_kernel(
    a, b, c, arrived, epoch, m, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr
):
    me = shl.my_pe()
    n = shl.n_pes()
    pid = tl.program_id(0)
    # Producer: programs 0..n-2 push this PE's rows of `a` (symmetric, [n*m, K]) to PE me+1+pid.
    # Low program ids start first on a GPU, and pushes never wait: no consumer waits for a push
    # that cannot start, however few programs fit on the device.
    if pid < n - 1:
        shl.putmem_signal_nbi_block(
            a + me * m * K, a + me * m * K, m * K * 4, arrived + me, epoch, shl.SIGNAL_SET, (me + 1 + pid) % n
        )
    # Consumer: tile (shard, row block, column block); the local shard first, then me-1, me-2, ...
    # (PE me-1 sends to us first).
    tiles_m = m // BLOCK_M
    tiles_n = N // BLOCK_N
    shard = (me - pid // (tiles_m * tiles_n) + n) % n
    tm = pid % (tiles_m * tiles_n) // tiles_n
    tn = pid % tiles_n
    if shard != me:
        token = shl.signal_wait_until(arrived + shard, shl.CMP_GE, epoch)
    else:
        token = tl.cast(epoch, tl.uint64)
    # consume_token makes the A addresses depend on the wait, so the pipeliner (num_stages > 1)
    # cannot issue the first A loads before it (docs/device-library.md: writing a distributed kernel, rule 2).
    first_row = shl.consume_token(shard * m + tm * BLOCK_M, token)
    rm = tl.arange(0, BLOCK_M)
    rn = tn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a_tile = tl.load(a + (first_row + rm)[:, None] * K + (k0 + rk)[None, :])
        b_tile = tl.load(b + (k0 + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a_tile, b_tile, acc)
    tl.store(c + (shard * m + tm * BLOCK_M + rm)[:, None] * N + rn[None, :], acc)


# How `unishmem compile` compiles the kernel with no GPU (the types main() launches it with).
COMPILE = {
    ag_gemm_kernel: {
        "signature": {
            "a": "*fp32",
            "b": "*fp32",
            "c": "*fp32",
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
    m, K, N, block = 16, 32, 32, 16  # this tutorial's kernel wants sizes the blocks divide
    with unishmem.init(heap_size="64M") as rt:
        n, me = rt.n_pes, rt.my_pe
        a = rt.zeros((n * m, K))  # symmetric: the gathered A; this PE fills its rows
        arrived = rt.signals(n)  # one signal per shard
        b = (torch.arange(K * N) % 5 - 2).float().reshape(K, N).to(rt.device)
        c = torch.empty((n * m, N), device=rt.device)
        grid = (n * (m // block) * (N // block),)
        for epoch in (1, 2):

            def shard(pe):
                return ((torch.arange(m * K) + 7 * pe + epoch) % 7 - 3).float().reshape(m, K)

            a[me * m : (me + 1) * m] = shard(me).to(rt.device)
            rt.barrier_all()  # nobody pushes into rows a peer still reads from the last call
            ag_gemm_kernel[grid](a, b, c, arrived, epoch, m, N, K, BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)
            expected = torch.cat([shard(pe) for pe in range(n)]) @ b.cpu()
            assert torch.equal(c.cpu(), expected), epoch
            for overlap in (True, False):
                library = unishmem.kernels.ag_gemm(shard(me).to(rt.device), b, overlap=overlap)
                assert torch.equal(library.cpu(), expected), overlap
        rt.barrier_all()
        if me == 0:
            print(f"all-gather GEMM: correct on {n} PEs (backend {rt.backend})")
        rt.free_workspaces()
        rt.free(a)
        rt.free(arrived)


if __name__ == "__main__":
    main()
