"""What `unishmem bench` measures: sizes, PE counts, and each operation's memory traffic.

NOTE [memory-traffic bound]: for an operation on S bytes per PE, R and W are the bytes each PE
must at least read and write (formulas below). A memcpy of C bytes reads C and writes C, so with
B the per-PE memcpy rate measured with min(n, cores) PEs copying at once (same job, same run), an
operation cannot take less than (R + W) / (2 * B); with more PEs than cores, at most `cores` of them
run at a time, so the bound grows by n / cores. B is measured on C = (R + W) / 2 bytes (as a power of
two, at most 64 MiB, where memcpy is long DRAM-bound) copied in pieces the size of the operation's
blocks (PIECE below): glibc copies 16 MiB pieces faster than one 64 MiB region (it switches to
non-temporal stores for large copies), so a bound taken from one big memcpy was beaten by alltoall.
Each reference is measured right before the figures that use it, and the fastest copy seen is the
one used: on a shared machine that is the honest lower bound.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

KiB, MiB = 1 << 10, 1 << 20

# S is each PE's source buffer: the vector for reduce, the whole send buffer for alltoall and
# reducescatter, the block each PE contributes for fcollect, the root's buffer for broadcast.
COLLECTIVES = ("reduce", "reducescatter", "fcollect", "alltoall", "broadcast")
TARGETED = ("reduce", "reducescatter", "fcollect", "alltoall")  # the host backend's speed goals name these four
SCALING = ("reduce",)  # also measured at the --scale-pes counts, with the barrier

TRAFFIC = {  # op -> (R(S, n), W(S, n), printable formula)
    "put": (lambda s, n: s, lambda s, n: s, "R = S, W = S"),
    "get": (lambda s, n: s, lambda s, n: s, "R = S, W = S"),
    "broadcast": (lambda s, n: s, lambda s, n: s, "R = S (the root's buffer), W = S"),
    "fcollect": (lambda s, n: n * s, lambda s, n: n * s, "R = n*S (every block), W = n*S"),
    "alltoall": (lambda s, n: s, lambda s, n: s, "R = S (n blocks of S/n), W = S"),
    "reduce": (
        lambda s, n: (2 * n - 1) * s / n,
        lambda s, n: s,
        "R = S + (n-1)*S/n (reduce 1/n of the vector from n sources, then read the other n-1 reduced chunks), W = S",
    ),
    "reducescatter": (lambda s, n: s, lambda s, n: s / n, "R = S (its block from each of n PEs), W = S/n"),
}
PIECE = {  # op -> the size of the blocks it copies (the memcpy reference copies in pieces of it)
    "put": lambda s, n: s,
    "get": lambda s, n: s,
    "broadcast": lambda s, n: s,
    "fcollect": lambda s, n: s,
    "alltoall": lambda s, n: s / n,
    "reduce": lambda s, n: s / n,
    "reducescatter": lambda s, n: s / n,
}
BOUND_FORMULA = (
    "bound = (R + W) / (2 * B) * max(1, n / cores), B = per-PE memcpy rate with min(n, cores) "
    "PEs copying at once, on (R + W) / 2 bytes in pieces of the op's block size"
)

FULL_P2P_SIZES = (8, 64, 512, 4 * KiB, 32 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB)
FULL_COLL_SIZES = (1 * KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB)
QUICK_P2P_SIZES = (8, 64 * KiB, 1 * MiB)
QUICK_COLL_SIZES = (1 * KiB, 64 * KiB, 1 * MiB)
MEMCPY_CAP = 64 * MiB  # largest concurrent-memcpy size measured for the bounds


@dataclass
class Plan:
    """Everything a worker needs to know; travels to the jobs as JSON."""

    quick: bool = False
    p2p_sizes: list = field(default_factory=lambda: list(FULL_P2P_SIZES))
    coll_sizes: list = field(default_factory=lambda: list(FULL_COLL_SIZES))
    pes: list = field(default_factory=lambda: [2, 4])  # collectives and barrier
    scale_pes: list = field(default_factory=lambda: [8])  # barrier and reduce only
    budget_s: float = 0.25  # measuring time per figure (all repetitions)
    reps: int = 3  # repetitions; the best is kept
    max_iters: int = 20000
    pingpong_iters: int = 100000  # round trips per repetition, C++ loops
    py_pingpong_iters: int = 20000  # round trips per repetition, Python loops
    long_run: int = 20000  # calls in the long run of a Python latency (C++: pingpong_iters)
    long_run_s: float = 2.0  # but fewer where that would take much longer than this

    @classmethod
    def make(cls, quick: bool, pes=None, scale_pes=None, max_size=None) -> Plan:
        p = cls()
        if quick:
            p = cls(
                quick=True,
                p2p_sizes=list(QUICK_P2P_SIZES),
                coll_sizes=list(QUICK_COLL_SIZES),
                pes=[2, 4],
                scale_pes=[],
                budget_s=0.03,
                reps=2,
                max_iters=2000,
                pingpong_iters=20000,
                py_pingpong_iters=2000,
                long_run=2000,
                long_run_s=0.3,
            )
        if pes is not None:
            p.pes = sorted(set(pes))
        if scale_pes is not None:
            p.scale_pes = sorted(set(scale_pes) - set(p.pes))
        if max_size is not None:
            p.p2p_sizes = [s for s in p.p2p_sizes if s <= max_size]
            p.coll_sizes = [s for s in p.coll_sizes if s <= max_size]
        return p

    def ops_at(self, n: int) -> tuple[str, ...]:
        return COLLECTIVES if n in self.pes else SCALING

    def all_pes(self) -> list[int]:
        return sorted(set(self.pes) | set(self.scale_pes))

    def memcpy_refs(self, n: int, size: int) -> list[tuple[int, int]]:
        """(bytes, piece) of the memcpy references that the bounds at n PEs and this size need."""
        return sorted({memcpy_ref(op, size, n) for op in self.ops_at(n)})

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> Plan:
        return cls(**json.loads(text))


def elements(size: int, n: int) -> int:
    """float32 elements of a collective's source buffer: size / 4, rounded down to a multiple of n
    (alltoall and reducescatter split it into n blocks; 1 KiB at 3 PEs is 255 elements)."""
    return max(n, size // 4 // n * n)


def dst_elements(op: str, elems: int, n: int) -> int:
    """float32 elements of a collective's destination buffer, for a source of elems elements."""
    return {"fcollect": n * elems, "reducescatter": elems // n}.get(op, elems)


def write_figures(path: str, figures: dict) -> None:
    """A worker's figures as JSON, where the bench reads them back (rank 0 writes them)."""
    with open(path, "w") as f:
        json.dump(figures, f)


def traffic(op: str, s: int, n: int) -> tuple[float, float]:
    r, w, _ = TRAFFIC[op]
    return r(s, n), w(s, n)


def copy_bytes(op: str, s: int, n: int) -> float:
    r, w = traffic(op, s, n)
    return (r + w) / 2


def _pow2(x: float) -> int:
    return 1 << max(0, round(math.log2(max(x, 1))))


def memcpy_ref(op: str, s: int, n: int) -> tuple[int, int]:
    """(bytes, piece): the memcpy whose per-PE rate is B in the bound of `op` on S bytes at n PEs."""
    c = min(_pow2(copy_bytes(op, s, n)), MEMCPY_CAP)
    return c, min(_pow2(PIECE[op](s, n)), c)


def ref_key(ref: tuple[int, int]) -> str:
    return f"{ref[0]}/{ref[1]}"
