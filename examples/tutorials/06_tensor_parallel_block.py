"""Tutorial 6, a tensor-parallel transformer block:  unishmem run -n 4 examples/tutorials/06_tensor_parallel_block.py

A Megatron-style block from unishmem.nn: LayerNorm -> column-parallel QKV -> causal attention over
this PE's heads -> row-parallel projection, + residual; LayerNorm -> column-parallel FC1 -> GELU ->
row-parallel FC2, + residual. Each column/row pair needs one all-reduce forward and one backward,
and nothing in between: a PE's QKV shard holds whole heads, and its FC1 shard whole features.
With sequence_parallel=True the activations between the pairs are split along the sequence (dim 0
of [s, b, h]): the column layers gather it inside their GEMM (ag_gemm) and the row layers
reduce-scatter inside theirs (gemm_rs). The LayerNorms then see only this PE's rows, so their
(replicated) weights' gradients are all-reduced after backward, as Megatron does.

The block is trained three SGD steps on every PE and its losses compared with the single-process
model it was cut from; then its forward is compiled with torch.compile(fullgraph=True) (backend
aot_eager, which also traces the backward; inductor compiled it in one run by hand but costs more compile time than the
CPU run here wants) and trained again, with no graph break.
"""

import copy
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

from torch import nn  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import unishmem  # noqa: E402
import unishmem.kernels.functional as dist_f  # noqa: E402
from unishmem.nn import ColumnParallelLinear, RowParallelLinear  # noqa: E402

SEQ, BATCH, HIDDEN, HEADS, STEPS = 8, 2, 16, 4, 3


class Block(nn.Module):
    """x [s, b, hidden] -> [s, b, hidden]; the same code runs the full model and a PE's shard of it."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.head_dim = hidden // heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)  # output features [heads, (q, k, v), head_dim]
        self.proj = nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        qkv = self.qkv(self.ln1(x))  # [s, b, 3 * hidden / n]: all rows, this PE's heads
        s, b = qkv.shape[:2]
        q, k, v = qkv.view(s, b, -1, 3, self.head_dim).unbind(3)  # [s, b, heads / n, head_dim] each
        scores = torch.einsum("sbhd,tbhd->bhst", q, k) / self.head_dim**0.5
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        attn = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        heads = torch.einsum("bhst,tbhd->sbhd", attn, v).reshape(s, b, -1)
        x = x + self.proj(heads)
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


def parallel(full: Block, sequence_parallel: bool) -> Block:
    """This PE's shard of `full`: the LayerNorms replicated, the linears cut Megatron's way."""
    block = copy.deepcopy(full)
    block.qkv = ColumnParallelLinear.from_linear(full.qkv, sequence_parallel)
    block.proj = RowParallelLinear.from_linear(full.proj, sequence_parallel)
    block.fc1 = ColumnParallelLinear.from_linear(full.fc1, sequence_parallel)
    block.fc2 = RowParallelLinear.from_linear(full.fc2, sequence_parallel)
    return block


def train(block, x, target, sequence_parallel, step=None):
    """STEPS SGD steps; the job's loss (mean squared error over every row) after each."""
    step = block if step is None else step
    norms = [p for ln in (block.ln1, block.ln2) for p in ln.parameters()]
    optimizer = torch.optim.SGD(block.parameters(), lr=0.5)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = ((step(x) - target) ** 2).sum() / (SEQ * BATCH * HIDDEN)  # this PE's rows' share
        loss.backward()
        if sequence_parallel:  # each PE's LayerNorms saw its rows only
            for p in norms:
                dist_f.all_reduce(p.grad)
            loss = dist_f.all_reduce(loss.detach().reshape(1))
        optimizer.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    with unishmem.init(heap_size="64M") as rt:
        n, me = rt.n_pes, rt.my_pe
        torch.manual_seed(0)  # the same full model and data on every PE
        full = Block(HIDDEN, HEADS).to(rt.device)
        x, target = (torch.randn(SEQ, BATCH, HIDDEN).to(rt.device) for _ in range(2))
        expected = train(copy.deepcopy(full), x, target, False)
        for sequence_parallel in (False, True):
            mine = (lambda t: t.chunk(n)[me]) if sequence_parallel else (lambda t: t)
            block = parallel(full, sequence_parallel)
            losses = train(block, mine(x), mine(target), sequence_parallel)
            assert torch.allclose(torch.tensor(losses), torch.tensor(expected), rtol=1e-4), (losses, expected)
        counters.clear()  # torch.compile of the sequence-parallel block: its forward, and so its backward
        block = parallel(full, True)
        compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
        losses = train(block, x.chunk(n)[me], target.chunk(n)[me], True, step=compiled)
        assert not counters["graph_break"], dict(counters["graph_break"])
        assert torch.allclose(torch.tensor(losses), torch.tensor(expected), rtol=1e-4), (losses, expected)
        rt.barrier_all()
        if me == 0:
            print(f"tensor-parallel block: {STEPS} steps equal to one process on {n} PEs, eager and compiled")
            print(f"  losses {', '.join(f'{v:.4f}' for v in expected)} (backend {rt.backend})")
        rt.free_workspaces()


if __name__ == "__main__":
    main()
