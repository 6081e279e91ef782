"""The collectives' defaults, measured on GPUs (NOTE [measured defaults]).

NOTE [measured defaults]: where a call leaves a choice to unishmem, the row of TABLE for
(architecture, PEs, kernel, size class) makes it: the fastest configuration the sweep measured there
(scripts/gpu_sweep.py: every variant, grid cap, warp count and push block size, graphed, device
time; `--table` writes TABLE from its merged JSON, docs/benchmarks/gpu-<date>.json). Its `variant`
is all_reduce's algorithm under algorithm="auto" and its pull or push under pull=None, every other
collective's pull, push or copy engine, and ag_gemm's and gemm_rs's "fused" or "unfused" under
overlap=None (NOTE [fuse or not] in gemm.py), or ag_gemm's "fused, copy": fused, with A gathered by the
copy engine (NOTE [ag_gemm copy engine]); its `programs` (the grid's cap), `block_bytes` (a
push's bytes per program and peer) and `warps` apply to calls that run that variant, and a fused
GEMM's `tile` (NOTE [GEMM tiles]) to fused calls. A setting that is set (UNISHMEM_PULL,
UNISHMEM_COPY_ENGINE, UNISHMEM_MAX_PROGRAMS, UNISHMEM_COMM_BLOCK_BYTES, UNISHMEM_COMM_WARPS,
UNISHMEM_GEMM_TILE) wins over the row, as the caller's arguments do. The size class is the ladder's
size nearest the call's per-PE input bytes on a log scale; a row is taken only at the PE count it
was measured at.

Where TABLE has no row (no sweep has run on a GPU yet: TABLE is empty), a rule decides: every SM, 4
warps, 64 KiB pieces, no copy engine; pull wherever every member is reachable by load/store (the
data is read where it lies, with no staging copies and one handshake, where the push stages it and
fences each piece); the one-shot up to ONE_SHOT_MAX_BYTES (256 KiB), the two-shot above: the one-
shot reads n copies of x, the two-shot about 1 + (n - 1)/n over one more handshake, and
docs/kernels.md's model of 8 H100s has the one-shot ahead at 256 KiB (13-26 us against 57-105) and
behind or level at 4 MiB (86-92 against 71-130, the push two-shot's figures). ag_gemm and gemm_rs
fuse below FUSED_MAX_BYTES (1 MiB) of input per PE (the figures beside it). The rule is a model, not
a measurement.
"""

from __future__ import annotations

import functools
import math

SIZE_CLASSES = (8 << 10, 256 << 10, 4 << 20, 64 << 20)  # the sweep's ladder: per-PE input bytes
ONE_SHOT_MAX_BYTES = 256 * 1024  # the rule's crossing (see the NOTE)
# ag_gemm and gemm_rs fuse below this many bytes of input per PE (NOTE [fuse or not] in gemm.py): on the one
# H200 run (2 PEs under MPS, graphed) the fused ag_gemm took 21.7 us at a gathered A of 1 MiB against 18.3 us
# for all_gather alone, and 74.7 us at 4 MiB against 31.9 + 32.3 us for all_gather and torch.matmul (whose
# figure includes host time); gemm_rs 15.7 us at 1 MiB, 70.2 us at 4 MiB against 40.2 + 32.3. A rule from
# one run, not a sweep.
FUSED_MAX_BYTES = 1 << 20

# BEGIN TABLE: written by `python scripts/gpu_sweep.py --table docs/benchmarks/gpu-<date>.json`
# (architecture, n_pes, kernel, size class) -> {"variant": ..., "programs": ..., "block_bytes": ..., "warps": ...}
# (a fused GEMM's: {"variant": "fused" or "fused, copy", "tile": "BMxBNxBK"})
TABLE: dict[tuple[str, int, str, int], dict] = {}
# END TABLE


def size_class(nbytes: int) -> int:
    """The SIZE_CLASSES entry nearest nbytes on a log scale."""
    return min(SIZE_CLASSES, key=lambda c: abs(math.log2(max(nbytes, 1) / c)))


def measured(arch: str, n_pes: int, kernel: str, nbytes: int) -> dict | None:
    """TABLE's row for a call of kernel on n_pes PEs with nbytes of input per PE, or None."""
    return TABLE.get((arch, n_pes, kernel, size_class(nbytes)))


def row_of(device, n_pes: int, kernel: str, nbytes: int) -> dict:
    """The measured default of a call of kernel on a torch device: its TABLE row, or {} where none."""
    return measured(architecture(device), n_pes, kernel, nbytes) or {}


@functools.cache
def architecture(device) -> str:
    """The table's architecture of a torch device: sm_XY (NVIDIA), gfxNNN (AMD) or "cpu"."""
    import torch

    if device.type != "cuda":
        return "cpu"
    if torch.version.hip:
        return torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"
