"""The collectives' defaults, measured on GPUs (NOTE [measured defaults]).

NOTE [measured defaults]: where a call leaves a choice to unishmem, the row of TABLE for
(architecture, PEs, kernel, size class) makes it: the fastest configuration the sweep measured there
(scripts/gpu_sweep.py: every variant, grid cap, warp count and push block size, graphed, device
time; `--table` writes TABLE from its merged JSON, docs/benchmarks/gpu-<date>.json). Its `variant`
is all_reduce's algorithm under algorithm="auto" and its pull or push under pull=None, and every
other collective's pull, push or copy engine; its `programs` (the grid's cap), `block_bytes` (a
push's bytes per program and peer) and `warps` apply to calls that run that variant. A setting that
is set (UNISHMEM_PULL, UNISHMEM_COPY_ENGINE, UNISHMEM_MAX_PROGRAMS, UNISHMEM_COMM_BLOCK_BYTES,
UNISHMEM_COMM_WARPS) wins over the row, as the caller's arguments do. The size class is the ladder's
size nearest the call's per-PE input bytes on a log scale; a row is taken only at the PE count it
was measured at.

Where TABLE has no row (no sweep has run on a GPU yet: TABLE is empty), a rule decides: every SM, 4
warps, 64 KiB pieces, no copy engine; pull wherever every member is reachable by load/store (the
data is read where it lies, with no staging copies and one handshake, where the push stages it and
fences each piece); the one-shot up to ONE_SHOT_MAX_BYTES (256 KiB), the two-shot above: the one-
shot reads n copies of x, the two-shot about 1 + (n - 1)/n over one more handshake, and
docs/kernels.md's model of 8 H100s has the one-shot ahead at 256 KiB (13-26 us against 57-105) and
behind or level at 4 MiB (86-92 against 71-130, the push two-shot's figures). The rule is a model,
not a measurement.
"""

from __future__ import annotations

import functools
import math

SIZE_CLASSES = (8 << 10, 256 << 10, 4 << 20, 64 << 20)  # the sweep's ladder: per-PE input bytes
ONE_SHOT_MAX_BYTES = 256 * 1024  # the rule's crossing (see the NOTE)

# BEGIN TABLE: written by `python scripts/gpu_sweep.py --table docs/benchmarks/gpu-<date>.json`
# (architecture, n_pes, kernel, size class) -> {"variant": ..., "programs": ..., "block_bytes": ..., "warps": ...}
TABLE: dict[tuple[str, int, str, int], dict] = {}
# END TABLE


def size_class(nbytes: int) -> int:
    """The SIZE_CLASSES entry nearest nbytes on a log scale."""
    return min(SIZE_CLASSES, key=lambda c: abs(math.log2(max(nbytes, 1) / c)))


def measured(arch: str, n_pes: int, kernel: str, nbytes: int) -> dict | None:
    """TABLE's row for a call of kernel on n_pes PEs with nbytes of input per PE, or None."""
    return TABLE.get((arch, n_pes, kernel, size_class(nbytes)))


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
