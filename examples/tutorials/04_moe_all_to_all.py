"""MoE all-to-all with unishmem.kernels.dispatch/combine:  unishmem run -n 4 examples/tutorials/04_moe_all_to_all.py

An expert-parallel MoE layer: each PE holds some tokens and owns n_experts / n_pes experts. The
router picked K experts per token (topk_ids) with weights (topk_weights); dispatch sends every
(token, k) copy to the PE owning its expert, the experts run where they live, and combine sends the
outputs back and sums them with the weights. Both kernels live in unishmem/kernels/moe.py, written
once in unishmem.language: read them next (counts exchanged in-kernel with signals, rows put
straight into their packed place). Without a GPU they run under Triton's interpreter on the host
backend.
"""

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

import unishmem  # noqa: E402
import unishmem.kernels as K  # noqa: E402

H, TOPK, EXPERTS_PER_PE = 64, 2, 2


def main() -> None:
    with unishmem.init(heap_size="64M") as rt:
        n, me = rt.n_pes, rt.my_pe
        n_experts = EXPERTS_PER_PE * n
        # Every PE builds the same expert weights (one H x H matrix each) from one seed.
        experts = torch.randn(n_experts, H, H, generator=torch.Generator().manual_seed(0)).to(rt.device) / H**0.5

        # This PE's tokens and its router's choices; T differs per PE (PE 1 has none at all).
        g = torch.Generator().manual_seed(1 + me)
        T = (32, 0, 17, 8)[me % 4]
        tokens = torch.randn(T, H, generator=g).to(rt.device)
        topk_ids = torch.rand(T, n_experts, generator=g).argsort(dim=1)[:, :TOPK]  # K distinct experts
        topk_weights = torch.softmax(torch.randn(T, TOPK, generator=g), dim=1)
        topk_ids, topk_weights = topk_ids.to(rt.device), topk_weights.to(rt.device)

        # dispatch: expert_tokens is packed by local expert, then source PE, then (token, k) order;
        # counts[j, s] is how many rows PE s sent to local expert j (zeros included).
        expert_tokens, counts, handle = K.dispatch(tokens, topk_ids, topk_weights, n_experts)

        # Run each local expert on its contiguous group of rows (a grouped GEMM in a real layer).
        expert_out = torch.empty_like(expert_tokens)
        start = 0
        for j, rows in enumerate(counts.sum(1).tolist()):
            expert_out[start : start + rows] = expert_tokens[start : start + rows] @ experts[me * EXPERTS_PER_PE + j]
            start += rows

        # combine: out[t] = sum_k topk_weights[t, k] * expert_{topk_ids[t, k]}(tokens[t]), back on this PE.
        out = K.combine(expert_out, handle)

        # Check against the same layer computed locally (every PE knows every expert's weights).
        ref = torch.zeros(T, H, device=rt.device)
        for k in range(TOPK):
            ref += topk_weights[:, k : k + 1] * torch.einsum("th,thg->tg", tokens, experts[topk_ids[:, k]])
        assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5), (out - ref).abs().max()
        received = K.all_gather(torch.tensor([expert_tokens.shape[0]], device=rt.device))
        rt.barrier_all()
        if me == 0:
            mode = "interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "compiled"
            sys.stdout.write(
                f"moe all-to-all ({mode}, backend {rt.backend}) correct on {n} PEs; rows received "
                f"per PE: {received.tolist()}\n"
            )
        rt.free_workspaces()


if __name__ == "__main__":
    main()
