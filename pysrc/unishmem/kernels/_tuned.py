"""The collectives' defaults, measured on GPUs (NOTE [measured defaults]).

NOTE [measured defaults]: where a call leaves the choice to unishmem (all_reduce's algorithm="auto"
with pull=None; every collective's pull or push under UNISHMEM_PULL=1), the choice is the row of TABLE
for (architecture, PEs, kernel, size class): the variant of the fastest configuration the sweep
measured there (scripts/gpu_sweep.py: every variant, grid cap and push block size, graphed, device
time; `--table` writes TABLE from its merged JSON, docs/benchmarks/gpu-<date>.json). A row also records
the grid cap (`programs`) and push block size (`block_bytes`) it was measured with; the kernels take
those from UNISHMEM_MAX_PROGRAMS and UNISHMEM_COMM_BLOCK_BYTES, not from the row. The size class is the
ladder's size nearest the call's per-PE input bytes on a log scale; a row is taken only at the PE count
it was measured at.

Where TABLE has no row (no sweep has run on a GPU yet: TABLE is empty), a rule decides, from the cost
model of docs/kernels.md: pull wherever every member is reachable by load/store (the data is read where
it lies, with no staging copies and one handshake, where the push stages it and fences each piece);
the one-shot up to ONE_SHOT_MAX_BYTES (256 KiB), the two-shot above (the one-shot reads n copies of x,
the two-shot about 1 + (n - 1)/n copies over one more handshake: at 8 GPUs and NVLink's ~370 GB/s the
model puts the crossing between 100 KiB and 500 KiB; at 2 PEs the link bytes are equal and HBM reads
favour the two-shot by size). The rule is a model, not a measurement.
"""

from __future__ import annotations

import functools
import math

SIZE_CLASSES = (8 << 10, 256 << 10, 4 << 20, 64 << 20)  # the sweep's ladder: per-PE input bytes
ONE_SHOT_MAX_BYTES = 256 * 1024  # the rule's crossing (see the NOTE)

# BEGIN TABLE: written by `python scripts/gpu_sweep.py --table docs/benchmarks/gpu-<date>.json`
# (architecture, n_pes, kernel, size class) -> {"variant": ..., "programs": ..., "block_bytes": ...}
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
