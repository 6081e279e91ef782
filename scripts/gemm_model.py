"""The cost model's GEMM table for 8 H100 (docs/kernels.md, "GEMMs on 8 H100"): every unishmem figure in it,
computed from the formulas and assumptions written there, at the low and the high end of the assumptions. A
model, not a measurement: nothing here ran on a GPU.

    python scripts/gemm_model.py     # the table's rows, as docs/kernels.md has them (tests/test_docs.py checks)
"""

from __future__ import annotations

import math

US = 1e-6
KIB = 1024
N_PES, SMS = 8, 132  # 8 H100 SXM on NVSwitch: one node, so the fused GEMMs pull (or copy) and never push
N = K = 4096  # ag_gemm's b [K, N]; gemm_rs splits K: 512 a PE
ITEMSIZE = 2  # float16
M_COLUMNS = (8, 32, 512, 8192)
TILE = (128, 128, 64)  # NOTE [GEMM tiles]: sm_90's, each dimension capped at the matrix's


def fast_slow(fast, slow):
    return {"fast": fast, "slow": slow}


# docs/kernels.md's assumptions, each at the end that makes a call fast and the end that makes it slow
ASSUMED = {
    "B_link": fast_slow(370e9, 370e9),
    "B_hbm": fast_slow(3.0e12, 3.0e12),
    "r_copy": fast_slow(20e9, 10e9),
    "t_L": fast_slow(2 * US, 4 * US),
    "t_s": fast_slow(1 * US, 2 * US),
    "t_f": fast_slow(2 * US, 3 * US),
    "t_p": fast_slow(0.15 * US, 0.3 * US),
    "t_c": fast_slow(2 * US, 4 * US),  # a device copy's start, as a launch
    "B_ce": fast_slow(370e9, 150e9),  # one copy engine over NVLink, one copy at a time: a guess
    "F": fast_slow(650e12, 450e12),  # the 128x128x64 TMA tile on the whole GPU: a guess
    "step_floor": fast_slow(0.1 * US, 0.2 * US),  # a BLOCK_K step of one program, at the least
    "F_cuBLAS": fast_slow(750e12, 600e12),
}


def block(dim: int, most: int) -> int:
    """A block of the fused kernels (gemm._blocks): the smallest power of two >= 16 covering dim, at most `most`."""
    return max(16, min(most, 1 << max(dim - 1, 0).bit_length()))


def copy_time(read: float, written: float, programs: int, a: dict) -> float:
    """C(R, W, g): g programs loading R bytes and storing W."""
    return max((read + written) / a["B_hbm"], read / (programs * a["r_copy"]))


def step(bm: int, bn: int, bk: int, a: dict) -> float:
    """tau_step: one BLOCK_K step of one program, at the tile's share of F, or the latency floor."""
    return max(a["step_floor"], 2 * bm * bn * bk / (a["F"] / SMS))


def matmul(m: int, k: int, a: dict) -> float:
    """cuBLAS on [m, k] @ [k, N]: at its rate, or reading b once."""
    return max(2 * m * N * k / a["F_cuBLAS"], k * N * ITEMSIZE / a["B_hbm"])


def handshakes(a: dict) -> float:
    """The ready and the done handshake: a launch, a signal each and a wait on n words each."""
    return 2 * (a["t_L"] + a["t_s"] + N_PES * a["t_p"])


def ag_gemm(M: int, a: dict) -> dict[str, float]:
    n = N_PES
    m = M // n
    bm, bn, bk = block(m, TILE[0]), block(N, TILE[1]), block(K, TILE[2])
    chunks = math.ceil(m / bm)
    tiles = n * chunks * math.ceil(N / bn)
    grid = min(SMS, max(chunks * (n - 1), tiles))
    shard = m * K * ITEMSIZE
    t_gemm = max(2 * M * N * K / a["F"], math.ceil(tiles / grid) * math.ceil(K / bk) * step(bm, bn, bk, a))
    chunk = min(bm, m) * K * ITEMSIZE
    first = math.ceil(chunks * (n - 1) / grid) * copy_time(chunk, chunk, 1, a)  # P: a program's copies first
    gathered = a["t_f"] + a["t_s"] + max(chunk / a["r_copy"], (n - 1) * shard / a["B_link"])  # T_c
    pull = a["t_L"] + max(first + t_gemm, gathered + (n - 1) * t_gemm / n) + a["t_s"]
    side = (n - 1) * (2 * a["t_c"] + shard / a["B_ce"])  # the copies and the words, one after another
    copy = a["t_L"] + handshakes(a) + max(t_gemm, side + t_gemm / n)
    one = matmul(m, K, a)
    chunked = n * a["t_L"] + handshakes(a) + max(n * one, (n - 1) * (a["t_c"] + shard / a["B_ce"]) + one)
    return {"pull": pull, "copy": copy, "chunked": chunked}


def gemm_rs(M: int, a: dict) -> dict[str, float]:
    n = N_PES
    m, k = M // n, K // n
    bm, bn, bk = block(m, TILE[0]), block(N, TILE[1]), block(k, TILE[2])
    tiles = math.ceil(m / bm) * math.ceil(N / bn)  # an owner's
    grid = min(SMS, n * tiles)
    tile_bytes = bm * bn * ITEMSIZE
    tau = math.ceil(k / bk) * step(bm, bn, bk, a)
    staged = max(
        math.ceil((n - 1) * tiles / grid) * tau, (n - 1) * tiles * tile_bytes / a["B_link"], 2 * M * N * k / a["F"]
    )
    own = math.ceil(tiles / grid) * (tau + (n - 1) * tile_bytes / a["r_copy"])
    pull = a["t_L"] + staged + a["t_f"] + a["t_s"] + own
    partial = M * N * ITEMSIZE  # S_C
    one = matmul(m, k, a)
    pushes = (n - 1) * (a["t_c"] + partial / n / a["B_ce"])
    chunked = (n + 1) * a["t_L"] + handshakes(a) + max(n * one, one + pushes) + (partial + partial / n) / a["B_hbm"]
    return {"pull": pull, "chunked": chunked}


def shapes(M: int) -> tuple[str, str]:
    """What the fused kernels cut M into: ag_gemm's chunks per peer (bytes each) and tiles per program R;
    gemm_rs's tiles per owner (bytes each) and other owners' tiles per program R_o."""
    n = N_PES
    m = M // n
    bm, bn = block(m, TILE[0]), block(N, TILE[1])
    chunks = math.ceil(m / bm)
    tiles = n * chunks * math.ceil(N / bn)
    grid = min(SMS, max(chunks * (n - 1), tiles))
    chunk = min(bm, m) * K * ITEMSIZE // KIB
    owner = math.ceil(m / bm) * math.ceil(N / bn)
    padding = f", {bm - m}/{bm} padding" if m < bm else ""
    return (
        f"{chunks} ({chunk} KiB); {math.ceil(tiles / grid)}",
        f"{owner} ({bm * bn * ITEMSIZE // KIB} KiB{padding}); {math.ceil((n - 1) * owner / min(SMS, n * owner))}",
    )


def span(kernel, M: int, form: str) -> str:
    low, high = (kernel(M, {k: v[end] for k, v in ASSUMED.items()})[form] / US for end in ("fast", "slow"))
    return f"{low:.0f}-{high:.0f}"


ROWS = (
    ("`ag_gemm` fused, pulling (model)", ag_gemm, "pull"),
    ("`ag_gemm` fused, the copy engine gathering (model)", ag_gemm, "copy"),
    ("`ag_gemm` chunked (model)", ag_gemm, "chunked"),
    ("`gemm_rs` fused, pulling (model)", gemm_rs, "pull"),
    ("`gemm_rs` chunked (model)", gemm_rs, "chunked"),
)


def rows() -> list[str]:
    """The table's unishmem rows, markdown."""
    cut = [shapes(M) for M in M_COLUMNS]
    found = [
        "| `ag_gemm` chunks per peer (bytes each); tiles per program `R` | " + " | ".join(c[0] for c in cut) + " |",
        "| `gemm_rs` tiles per owner (bytes each); other owners' tiles per program `R_o` | "
        + " | ".join(c[1] for c in cut)
        + " |",
    ]
    for name, kernel, form in ROWS:
        found.append(f"| {name} | " + " | ".join(span(kernel, M, form) for M in M_COLUMNS) + " |")
    return found


if __name__ == "__main__":
    print("\n".join(rows()))
