"""unishmem.kernels' GEMMs compiled for real targets with no GPU, from gemm.COMPILE: they link against
the NVSHMEM wheel's bitcode for sm_90 with wgmma and TMA loads in a K loop pipelined over the tile's
stages (NOTE [GEMM tiles]), the overlapped ag_gemm's A loads stay after their waits in the TTGIR, and
every kernel lowers for gfx942 to MFMA and 16-byte loads."""

import functools
import re

import pytest

triton = pytest.importorskip("triton")

from compile_cache import CompileCache  # noqa: E402
from test_device_compile import compile_in_workers  # noqa: E402  (one way to set up compile workers)

from unishmem import BackendUnavailable, _triton_compat  # noqa: E402
from unishmem.triton_support import extern_libs  # noqa: E402

pytestmark = pytest.mark.compile

# _ag_gemm: its push (to other nodes); #pull and #copy: its other GATHERS
KERNELS = ("_ag_gemm", "_ag_gemm#pull", "_ag_gemm#copy", "_gemm", "_gemm_rs")
ALIGNED = ("N", "K")  # with every pointer: what a launch on aligned tensors with N, K % 16 == 0 specialises


def _compile(name: str, backend: str, arch) -> dict:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from unishmem.kernels import gemm

    base, _, form = name.partition("#")
    kernel = getattr(gemm, base)
    spec = gemm.COMPILE[kernel]
    if isinstance(spec, list):  # ag_gemm: a specification per form, in GATHERS' order
        spec = spec[gemm.GATHERS.index(form or "push")]
    names = list(kernel.jit_function.arg_names)
    aligned = [a for a in names if spec["signature"].get(a, "").startswith("*") or a in ALIGNED]
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in aligned}
    signature = dict(spec["signature"], **{k: "constexpr" for k in spec["constexprs"]})
    target = "gfx942" if backend == "hip" else f"sm_{arch}"
    options = dict(spec.get("options", {}), **spec.get("target_options", {}).get(target, {}))
    if backend == "cuda":
        options["extern_libs"] = tuple(extern_libs(backend, arch).items())
    try:
        asm, assembled = _triton_compat.compile_asm(  # NOTE [Triton releases]: LLVM IR only for HIP on 3.6
            ASTSource(kernel.jit_function, signature=signature, constexprs=spec["constexprs"], attrs=attrs),
            GPUTarget(backend, arch, 32 if backend == "cuda" else 64),
            options,
            linked=backend == "cuda",
        )
    except Exception as e:  # reported to the test
        return {"error": f"{type(e).__name__}: {e}"[:4000]}
    binary = asm.get("cubin", asm.get("hsaco", b""))
    return {
        "ttgir": asm["ttgir"],
        "llir": asm["llir"],
        "binary": len(binary),
        "assembled": assembled,
        "stages": options.get("num_stages"),
    }


@pytest.fixture(scope="module")
def builds(request):
    try:
        extern_libs("cuda", 90)
    except BackendUnavailable as e:
        pytest.skip(f"NVSHMEM bitcode not installed (pip install nvidia-nvshmem-cu13): {e}")
    # the two slow ones (NVSHMEM linked in) first, one per worker
    jobs = [(k, "cuda", 90) for k in ("_ag_gemm", "_ag_gemm#pull", "_gemm_rs", "_ag_gemm#copy", "_gemm")]
    jobs += [(k, "hip", "gfx942") for k in KERNELS]
    links = list(extern_libs("cuda", 90).values())
    cache = CompileCache(request.config, __file__)  # gemm.py is in the package's sources
    return cache.run(
        {job: (job, links if job[1] == "cuda" else []) for job in jobs}, functools.partial(compile_in_workers, _compile)
    )


def _lines(ir: str) -> list[str]:
    return [line.strip() for line in ir.splitlines()]


def test_every_gemm_kernel_links_for_sm_90_with_wgmma_and_tma_pipelined(builds):
    for name in KERNELS:
        out = builds[(name, "cuda", 90)]
        assert "error" not in out, f"{name}: {out.get('error')}"
        assert out["binary"] > 0
        assert not re.findall(r"^declare .*@(nvshmemx?_\w+)", out["llir"], re.M), name
        # the tile's A and B come by TMA from descriptors made in the kernel, into a pipeline of the tile's
        # stages (stages - 1 pairs issued before the K loop, one pair in it), and wgmma multiplies them
        ttgir, llir = out["ttgir"], out["llir"]
        assert ttgir.count("ttng.tensormap_create") == 2, name
        assert ttgir.count("ttng.async_tma_copy_global_to_local") == 2 * out["stages"], name
        assert "ttng.warp_group_dot " in ttgir and "wgmma.mma_async" in llir and "cp.async.bulk.tensor" in llir, name
        assert "ttg.async_copy_global_to_local" not in ttgir, name  # no cp.async tiles left


def test_ag_gemm_a_loads_stay_after_their_wait(builds):
    ttgir = _lines(builds[("_ag_gemm", "cuda", 90)]["ttgir"])
    wait = [i for i, line in enumerate(ttgir) if 'symbol = "nvshmem_signal_wait_until"' in line]
    # consume_token's identity is an empty pure inline asm taking the token (the thread id that single-issues
    # quiet is another asm; the token a wait_until makes is an impure one of one operand)
    token = [i for i, line in enumerate(ttgir) if 'tt.elementwise_inline_asm ""' in line and '"=l,0,l"' in line]
    a_desc = [i for i, line in enumerate(ttgir) if line.startswith("ttng.tensormap_create %a_desc")]
    a_loads = [
        i
        for i, line in enumerate(ttgir)
        # (Triton 3.6 prints the type as tensordesc<tensor<128x64xf16, ...>>)
        if line.startswith("ttng.async_tma_copy_global_to_local %a_desc")
        and re.search(r"tensordesc<(tensor<)?128x64xf16", line)
    ]
    # one token ties the pushes' source to the copy-in (NOTE [copy-in]), one the A rows to their wait
    assert len(wait) == 1 and len(token) == 2, (wait, token)
    # A's descriptor is made from the rows the token gives, after the wait; the prologue's A tiles and the
    # loop's come from it (B's descriptor is made once, before the tiles)
    assert len(a_desc) == 1 and len(a_loads) >= 3, (a_desc, a_loads)
    assert wait[0] < token[1] < a_desc[0] < min(a_loads), (wait, token, a_desc, a_loads)
    # and the chunk push comes first, after the copy-in and before any wait
    push = next(i for i, line in enumerate(ttgir) if 'symbol = "nvshmemx_putmem_signal_nbi_block"' in line)
    copied = next(i for i, line in enumerate(ttgir) if 'symbol = "nvshmem_int64_wait_until"' in line)
    assert copied < token[0] < push < wait[0], (copied, token, push, wait)


def test_gemm_rs_peer_tiles_are_loaded_after_their_waits(builds):
    ttgir = _lines(builds[("_gemm_rs", "cuda", 90)]["ttgir"])
    waits, seen = 0, []
    for line in ttgir:
        if 'symbol = "nvshmem_signal_wait_until"' in line:
            waits += 1
        elif re.match(r"%\S+ = tt\.load %\S+ : tensor<128x128x!tt\.ptr<f16>", line):
            seen.append(waits)
    assert seen and all(w >= 1 for w in seen), seen


def test_every_gemm_kernel_lowers_for_gfx942(builds):
    declared = set()
    for name in KERNELS:
        out = builds[(name, "hip", "gfx942")]
        assert "error" not in out, f"{name}: {out.get('error')}"
        declared |= set(re.findall(r"^declare [^@]*@(rocshmem_\w+)\(", out["llir"], re.M))
        # the tile's descriptors lower to 16-byte loads (no TMA there) and MFMA multiplies them
        assert "mfma" in out["llir"] and "load <8 x half>" in out["llir"], name
    # the push and the wait, as rocshmem_wrapper.cc names them (the wait's value read back with signal_fetch)
    assert {"rocshmem_putmem_signal_nbi_wg", "rocshmem_uint64_wait_until", "rocshmem_signal_fetch"} <= declared, (
        declared
    )


def test_gemm_rs_adds_the_peers_tiles_with_16_byte_loads(builds):
    # NOTE [16-byte copies] in collectives.py: a peer's partial tile's slot comes through consume_token's
    # asm, which hides its alignment; restated, the 128x128 float16 tile loads 16 bytes an access (256
    # threads, 64 halves each: 8 loads), where it would take 64 2-byte loads
    llir = builds[("_gemm_rs", "cuda", 90)]["llir"]
    assert llir.count("ld.global.v4.b32") >= 8 and "ld.global.b16" not in llir, re.findall(r"ld\.global\.\w+", llir)


def test_gemm_rs_pull_signals_each_row_of_tiles_after_its_count_and_a_fence(builds):
    # NOTE [gemm_rs pull]: no tile is pushed; the row's count (acq_rel, gpu scope), then the fence that
    # carries the row's stores to the system, then the owner's signal; the owner reads through nvshmem_ptr
    ttgir = _lines(builds[("_gemm_rs", "cuda", 90)]["ttgir"])
    symbols = [re.search(r'symbol = "(\w+)"', line).group(1) for line in ttgir if 'symbol = "' in line]
    assert "nvshmemx_putmem_signal_nbi_block" not in symbols and "nvshmem_ptr" in symbols, symbols
    count = next(i for i, line in enumerate(ttgir) if re.search(r"tt\.atomic_rmw add, acq_rel, gpu, %row", line))
    fence = next(i for i, line in enumerate(ttgir) if 'symbol = "nvshmem_fence"' in line)
    signal = next(i for i, line in enumerate(ttgir) if 'symbol = "nvshmemx_signal_op"' in line)
    assert count < fence < signal, (count, fence, signal)


def test_ag_gemm_pull_copies_each_chunk_after_its_members_word_and_tiles_wait_for_the_copy(builds):
    # NOTE [ag_gemm pull]: program 0's fence then a signal per peer (ready); the copies wait for the member's
    # word; each chunk's flag is released after its copy's stores; a remote tile's A descriptor is made from
    # rows that depend on the flag's wait; the done word is waited for last
    ttgir = _lines(builds[("_ag_gemm#pull", "cuda", 90)]["ttgir"])
    symbols = [
        (i, re.search(r'symbol = "(\w+)"', line).group(1)) for i, line in enumerate(ttgir) if 'symbol = "' in line
    ]
    names = [name for _, name in symbols]
    assert "nvshmemx_putmem_signal_nbi_block" not in names and "nvshmem_ptr" in names, names
    fence = next(i for i, name in symbols if name == "nvshmem_fence")
    signals = [i for i, name in symbols if name == "nvshmemx_signal_op"]
    waits = [i for i, name in symbols if name == "nvshmem_signal_wait_until"]
    flag = next(i for i, line in enumerate(ttgir) if i > waits[0] and "tt.atomic_rmw exch, release, gpu" in line)
    a_desc = next(i for i, line in enumerate(ttgir) if line.startswith("ttng.tensormap_create %a_desc"))
    # ready (fence, signal), the copy's wait, its flag, the done signal; the tile's wait, A's descriptor; done's wait
    assert len(signals) == 2 and len(waits) == 3, (signals, waits)
    assert fence < signals[0] < waits[0] < flag < signals[1] < waits[1] < a_desc < waits[2], (
        fence,
        signals,
        waits,
        flag,
        a_desc,
    )
    # the chunk copies move 16 bytes an access (NOTE [16-byte copies]): 4 more v4 loads than the push's kernel
    # (whose v4 loads are the copy-in's), and no 2-byte load or store
    llir, push = builds[("_ag_gemm#pull", "cuda", 90)]["llir"], builds[("_ag_gemm", "cuda", 90)]["llir"]
    assert llir.count("ld.global.v4.b32") >= push.count("ld.global.v4.b32") + 4, re.findall(r"ld\.global\.\w+", llir)
    assert not re.search(r"(ld|st)\.global\.b16", llir), re.findall(r"(?:ld|st)\.global\.\w+", llir)


def test_ag_gemm_by_the_copy_engine_only_waits_for_each_shards_word_and_multiplies(builds):
    # NOTE [ag_gemm copy engine]: no put, no peer pointer, no fence, no count or end of call (the handshakes
    # around the launch keep the call counter); a remote tile's A descriptor is made from rows that depend
    # on its shard's word; the tiles are the other forms' (wgmma and TMA: the test above)
    ttgir = _lines(builds[("_ag_gemm#copy", "cuda", 90)]["ttgir"])
    symbols = [re.search(r'symbol = "(\w+)"', line).group(1) for line in ttgir if 'symbol = "' in line]
    assert symbols == ["nvshmem_signal_wait_until"], symbols
    assert not [line for line in ttgir if "tt.atomic_rmw" in line or "tt.atomic_cas" in line]
    wait = next(i for i, line in enumerate(ttgir) if 'symbol = "nvshmem_signal_wait_until"' in line)
    token = [i for i, line in enumerate(ttgir) if 'tt.elementwise_inline_asm ""' in line and '"=l,0,l"' in line]
    a_desc = [i for i, line in enumerate(ttgir) if line.startswith("ttng.tensormap_create %a_desc")]
    assert len(token) == 1 and len(a_desc) == 1 and wait < token[0] < a_desc[0], (wait, token, a_desc)
