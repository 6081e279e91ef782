"""unishmem.kernels: distributed kernels written once in unishmem.language, called on torch
tensors on the runtime's device. Each call is collective over its team (default: the world)."""

from .. import _triton_compat  # noqa: F401 - first: Triton is there, and of a release unishmem supports
from . import _ops  # noqa: F401 (registers torch.ops.unishmem.*, which the kernels call under torch.compile)
from .collectives import all_gather, all_reduce, all_to_all, reduce_scatter
from .gemm import ag_gemm, gemm_rs
from .moe import combine, dispatch

__all__ = ["ag_gemm", "all_gather", "all_reduce", "all_to_all", "combine", "dispatch", "gemm_rs", "reduce_scatter"]
