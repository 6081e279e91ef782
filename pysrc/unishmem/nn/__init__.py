"""unishmem.nn: tensor- and expert-parallel layers over unishmem.kernels (docs/nn.md). Build them after
unishmem.init(): their parameters live on the runtime's device."""

from .linear import ColumnParallelLinear, RowParallelLinear
from .moe import ExpertParallelMoE, MoE

__all__ = ["ColumnParallelLinear", "ExpertParallelMoE", "MoE", "RowParallelLinear"]
