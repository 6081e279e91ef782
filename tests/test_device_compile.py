"""The device library compiled for real targets, with no GPU: every function compiles and links
against the nvidia-nvshmem wheel's bitcode into a cubin for sm_80, sm_90 and sm_100; for gfx942 and
gfx950 the LLVM IR declares each rocSHMEM symbol with the signature rocSHMEM's rocshmem_wrapper.cc gives.
Compiled results are kept by content (tests/compile_cache.py), so a rerun compiles only what changed."""

import concurrent.futures
import functools
import multiprocessing
import os
import re
import sys
import tempfile

import pytest

triton = pytest.importorskip("triton")
import device_kernels  # noqa: E402
from compile_cache import CompileCache  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from unishmem import BackendUnavailable, _triton_compat  # noqa: E402
from unishmem.triton_support import extern_libs  # noqa: E402

pytestmark = pytest.mark.compile

# .ci/run's second stack narrows both; scripts/ci_rocm.sh sets the arch of the machine it runs on
CUDA_ARCHS = tuple(int(a) for a in os.environ.get("UNISHMEM_TEST_CUDA_ARCHS", "80,90,100").split(","))
HIP_ARCHS = tuple(os.environ.get("UNISHMEM_TEST_HIP_ARCHS", "gfx942,gfx950").split(","))


def _compile(
    kernel_name: str,
    backend: str,
    arch,
    link: bool,
    signature=None,
    constexprs=None,
    options=None,
    attrs=None,
    debug_waits=False,
):
    """Compile one kernel of device_kernels; returns its IR texts, or the error text."""
    from unishmem.language import _debug

    kernel = getattr(device_kernels, kernel_name)
    if isinstance(signature, str):  # the name of one in device_kernels (a job must be hashable)
        signature = getattr(device_kernels, signature)
    libs = tuple(extern_libs(backend, arch).items()) if link else ()
    libs += ((_debug.LIB_KEY, _debug.LIBRARY),) if debug_waits else ()  # as @unishmem.jit(debug_waits=True) does
    options = dict(options or {}, **({"extern_libs": libs} if libs else {}))
    target = GPUTarget(backend, arch, 32 if backend == "cuda" else 64)
    default = device_kernels.SIGNATURE if backend == "cuda" else device_kernels.HIP_SIGNATURE
    try:
        if constexprs is None:
            constexprs = {"N": 8} if signature is None else {}
        # NOTE [Triton releases]: LLVM IR only where this Triton cannot assemble an undefined call
        asm, assembled = _triton_compat.compile_asm(
            ASTSource(kernel, signature=signature or default, constexprs=constexprs, attrs=attrs),
            target,
            options,
            linked=link,
        )
    except Exception as e:  # reported to the test, which decides
        return {"error": f"{type(e).__name__}: {e}"[:4000]}
    binary = asm.get("cubin", asm.get("hsaco", b""))
    return {
        "ttir": asm["ttir"],
        "ttgir": asm["ttgir"],
        "llir": asm["llir"],
        "binary": len(binary),
        "assembled": assembled,
        "rocshmem_names": {m.decode() for m in re.findall(rb"ROCSHMEM_\w+", binary)},
    }


def _init_worker(cache_dir):
    os.environ["TRITON_CACHE_DIR"] = cache_dir  # a fresh cache: every kernel really compiles
    os.environ["DISABLE_PTXAS_OPT"] = "1"  # linking is what is checked; optimising only costs minutes
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    os.environ["TRITON_INTERPRET"] = "0"  # compile: the examples and tutorials switch it on without a GPU
    sys.path.insert(0, os.path.dirname(__file__))


def compile_in_workers(compile_fn, jobs: dict, workers: int = 2) -> dict:
    """{name: compile_fn(*args)} for jobs {name: args}, in fresh spawned workers with a fresh Triton cache."""
    with tempfile.TemporaryDirectory() as cache:
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(
            min(workers, len(jobs)), mp_context=ctx, initializer=_init_worker, initargs=(cache,)
        ) as pool:
            futures = {name: pool.submit(compile_fn, *args) for name, args in jobs.items()}
            return {name: f.result() for name, f in futures.items()}


def _links(backend: str, arch, link: bool) -> list[str]:
    return list(extern_libs(backend, arch).values()) if link else []


@pytest.fixture(scope="module")
def builds(request):
    try:
        extern_libs("cuda", 90)
    except BackendUnavailable as e:
        pytest.skip(f"NVSHMEM bitcode not installed (pip install nvidia-nvshmem-cu13): {e}")
    jobs = [(k.__name__, "cuda", cc, True) for cc in CUDA_ARCHS for k in _linked_groups(cc)]
    jobs += [(k.__name__, "cuda", 90, True) for k in device_kernels.V2_GROUPS + [device_kernels.block_wait]]
    jobs += [(k.__name__, "hip", arch, False) for arch in HIP_ARCHS for k in device_kernels.HIP_GROUPS]
    jobs += [("team_reduce_ops", "hip", arch, False, "TEAM_REDUCE_SIGNATURE") for arch in HIP_ARCHS]
    named = {job[:3]: job for job in jobs}
    named["half_p"] = ("half_p", "hip", "gfx942", False, {"hbuf": "*fp16", "pe": "i32"}, {})
    for kernel in ("constant_team", "grid_barrier_on_a_signal"):
        named[kernel] = (kernel, "hip", HIP_ARCHS[0], False)
    named[("spin_on_a_peer", "cuda")] = ("spin_on_a_peer", "cuda", 90, True)
    named[("spin_on_a_peer", "hip")] = ("spin_on_a_peer", "hip", "gfx942", False)
    named[("range_wait_token", "cuda")] = ("range_wait_token", "cuda", 90, True)
    named[("range_wait_token", "hip")] = ("range_wait_token", "hip", "gfx942", False)
    buf_and_src_aligned = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
    for backend, arch in (("cuda", 90), ("hip", "gfx942")):  # 1024 int32 a load: 16-byte accesses where aligned
        signature = "SIGNATURE" if backend == "cuda" else "HIP_SIGNATURE"
        wide = ("range_wait_token", backend, arch, backend == "cuda", signature, {"N": 1024}, None)
        named[("tokened_copy", backend)] = wide + (buf_and_src_aligned,)
    aligned = {(i,): [["tt.divisibility", 16]] for i in range(4)}
    for guard in (False, True):
        constants = dict(device_kernels.GEMM_CONSTANTS, GUARD=guard)
        options = {"num_stages": 3}
        named[("gemm", guard)] = ("pipelined_gemm", "cuda", 90, True, "GEMM_SIGNATURE", constants, options, aligned)
        named[("descriptor_gemm", guard)] = ("pipelined_descriptor_gemm",) + named[("gemm", guard)][1:]
    for backend, arch in (("cuda", 90), ("hip", "gfx942")):
        # as @unishmem.jit(debug_waits=True) compiles: with the debug library
        named[("debug_waits", backend, arch)] = ("signals", backend, arch, backend == "cuda") + (None,) * 4 + (True,)
    cache = CompileCache(request.config, device_kernels.__file__, __file__)
    out = cache.run(
        {k: (args, _links(*args[1:4])) for k, args in named.items()}, functools.partial(compile_in_workers, _compile)
    )
    results = {k: v for k, v in out.items() if k[0] not in ("gemm", "descriptor_gemm", "debug_waits")}
    for gemm in ("gemm", "descriptor_gemm"):
        results[gemm] = {guard: out[(gemm, guard)] for guard in (False, True)}
    results["debug_waits"] = {k[1:]: v for k, v in out.items() if k[0] == "debug_waits"}
    return results


def _linked_groups(cc: int) -> list:
    """sm_90 compiles each group (other tests read their IR); the other archs, whose check is only that
    every function links, compile them as one kernel (one link of NVSHMEM's bitcode instead of eight)."""
    return device_kernels.GROUPS if cc == 90 else [device_kernels.every_group]


@pytest.mark.parametrize("cc", CUDA_ARCHS)
def test_every_function_links_into_a_cubin(builds, cc):
    for kernel in _linked_groups(cc):
        out = builds[(kernel.__name__, "cuda", cc)]
        assert "error" not in out, f"{kernel.__name__} for sm_{cc}: {out.get('error')}"
        assert out["binary"] > 0
        # after linking, no NVSHMEM function is left merely declared
        unresolved = re.findall(r"^declare .*@(nvshmemx?_\w+)", out["llir"], re.M)
        assert not unresolved, f"{kernel.__name__} for sm_{cc} leaves {unresolved} unresolved"


def test_v2_functions_link_for_sm_90(builds):
    for kernel in device_kernels.V2_GROUPS:
        out = builds[(kernel.__name__, "cuda", 90)]
        assert "error" not in out, f"{kernel.__name__} for sm_90: {out.get('error')}"
        assert out["binary"] > 0
        assert not re.findall(r"^declare .*@(nvshmemx?_\w+)", out["llir"], re.M)
    called = _functions_called(builds, device_kernels.V2_GROUPS, "cuda", 90)
    # what NVSHMEM 3.8's headers declare for these (host/nvshmem_api.h, host/nvshmemx_api.h)
    assert {
        "nvshmem_int64_wait_until_all",
        "nvshmem_int64_wait_until_any_vector",
        "nvshmem_int64_wait_until_some",
        "nvshmem_int32_put_signal_nbi",
        "nvshmemx_int32_put_signal_block",
        "nvshmemx_int32_put_signal_nbi_warp",
        "nvshmem_int32_iput",
        "nvshmemx_int32_iget_block",
        "nvshmemx_putmem_block",
    } <= called, called


def test_atomics_use_triton_on_reachable_peers_and_the_vendor_amo_elsewhere(builds):
    ttir = builds[("atomics", "cuda", 90)]["ttir"]
    assert "tt.atomic_rmw" in ttir and "tt.atomic_cas" in ttir  # through remote_ptr
    called = set(re.findall(r'symbol = "(\w+)"', ttir))
    # NVSHMEM's C-typed AMOs (3.8's bitcode has nvshmem_long_atomic_fetch_add, not an int64 one)
    assert {
        f"nvshmem_long_atomic_{op}"
        for op in ("fetch_add", "fetch", "swap", "compare_swap", "fetch_inc", "add", "inc", "set")
    } <= called, called


def _instructions(ir: str) -> list[str]:
    return [line.strip() for line in ir.splitlines()]


def test_single_issue_put_starts_with_a_block_barrier(builds):
    out = builds[("thread_rma", "cuda", 90)]
    ttir = _instructions(out["ttir"])
    store = next(i for i, line in enumerate(ttir) if line.startswith("tt.store"))
    put = next(i for i, line in enumerate(ttir) if 'symbol = "nvshmem_putmem"' in line)
    assert any(line.startswith(("gpu.barrier", "ttg.barrier")) for line in ttir[store:put]), ttir[store : put + 1]
    llir = _instructions(out["llir"])  # and in the LLVM IR: the store, a barrier, thread 0's call
    store = next(i for i, line in enumerate(llir) if line.startswith("store ") or "st.global" in line)
    # the first call into NVSHMEM: nvshmem_putmem, or what it inlines to (NVSHMEM 3.4.5's bitcode)
    call = next(i for i in range(store, len(llir)) if re.search(r"call .*@(_Z\d+)?nvshmemi?_", llir[i]))
    assert any("barrier" in line for line in llir[store:call]), llir[store : call + 1]


# How a load of an A tile shows in the TTGIR: through pointers (64x32 f16) or through the tensor descriptor.
TILE_LOADS = {
    "gemm": (r"%\S+ = (tt\.load|ttg\.async_copy_global_to_local) %\S+.*: tensor<64x32x!tt\.ptr<f16>", "ttg.async_copy"),
    "descriptor_gemm": (
        r"(%\S+ = )?(tt\.descriptor_load|ttng\.async_tma_copy_global_to_local) ",
        "ttng.async_tma_copy",
    ),
}


@pytest.mark.parametrize("gemm", TILE_LOADS)
def test_consume_token_keeps_guarded_loads_after_their_waits(builds, gemm):
    load, asynchronous = TILE_LOADS[gemm]

    def order(ttgir):
        """For each load of an A tile, how many waits precede it, in program order."""
        waits, seen = 0, []
        for line in _instructions(ttgir):
            if 'symbol = "nvshmem_signal_wait_until"' in line:
                waits += 1
            elif re.match(load, line):
                seen.append(waits)
        return seen

    unguarded, guarded = (builds[gemm][g] for g in (False, True))
    assert "error" not in unguarded, unguarded.get("error")
    # Unguarded, the pipeliner issues the first A tiles before any wait: the hazard.
    assert order(unguarded["ttgir"])[0] == 0, order(unguarded["ttgir"])
    if _triton_compat.version() < (3, 9):
        # NOTE [Triton releases]: 3.6-3.8's pipeliner stops at the wait the loads depend on ("pipeliner doesn't
        # know how to predicate this op", on stderr): a compile error, not the hazard
        assert guarded.get("error") == "RuntimeError: PassManager::run failed", guarded.get("error")
        return
    assert "error" not in guarded, guarded.get("error")
    # Guarded, it still pipelines (the prologue loads stay asynchronous copies, TMA ones for the descriptor)
    # but each tile comes after its own wait.
    seen = order(guarded["ttgir"])
    assert len(seen) >= 3 and all(waits > i for i, waits in enumerate(seen)), seen
    assert asynchronous in guarded["ttgir"]


def test_a_tokened_descriptor_keeps_its_token_across_calls_and_loops():
    """Passed to another @triton.jit function and carried through a loop, the descriptor consume_token made
    still ties each load's offsets (both of them) to a token."""
    src = ASTSource(
        device_kernels.descriptor_through_calls_and_loops,
        signature={"a": "*fp16", "sig": "*u64", "c": "*fp32", "K": "constexpr"},
        constexprs={"K": 128},
    )
    lines = _instructions(_triton_compat.front_end(src, GPUTarget("cuda", 90, 32)))
    loads = [i for i, line in enumerate(lines) if "tt.descriptor_load" in line]
    assert loads, lines
    ties = [i for i, line in enumerate(lines) if "tt.elementwise_inline_asm" in line and '"=l,0,l"' in line]
    for before, load in zip([0] + loads, loads):
        assert sum(before <= i < load for i in ties) >= 2, lines[before : load + 1]


def test_a_spin_on_load_remote_reads_memory_every_time(builds):
    """load_remote is a volatile load on both vendors: a loop may spin on a peer's word (a weak PTX ld.global may
    keep returning an L1 copy, a plain LLVM load may be hoisted out of the loop)."""
    ptx = builds[("spin_on_a_peer", "cuda")]["llir"]  # Triton's NVIDIA loads are PTX in inline asm
    loads = re.findall(r"ld((?:\.\w+)*?)\.global\.b64", ptx)
    assert len(loads) == 2 and all(".volatile" in q for q in loads), loads  # before the loop and in it
    amd = builds[("spin_on_a_peer", "hip")]["llir"]
    loads = re.findall(r"= load (volatile )?<1 x i64>, ptr addrspace\(1\)", amd)
    assert len(loads) == 2 and all(loads), loads


def test_a_range_wait_returns_a_token_that_orders_the_load(builds):
    for backend in ("cuda", "hip"):
        out = builds[("range_wait_token", backend)]
        assert "error" not in out, out.get("error")
        lines = _instructions(out["ttgir"])
        wait = next(i for i, line in enumerate(lines) if re.search(r'symbol = "\w*wait_until_all"', line))
        token = next(
            i for i, line in enumerate(lines) if "tt.elementwise_inline_asm" in line and "pure = false" in line
        )
        load = next(i for i, line in enumerate(lines) if re.match(r"%\S+ = (tt\.load|amdg(pu)?\.buffer_load) ", line))
        assert wait < token < load, (backend, lines[wait], lines[token], lines[load])


def test_a_pointer_through_consume_token_keeps_its_alignment(builds):
    """A 16-byte aligned pointer made to depend on a token still loads 16 bytes an access. On sm_90, through
    the tie's asm itself it would lose what Triton knows of it and load 4 bytes an access (checked: eight
    ld.global.b32 a thread); gfx942's buffer loads were 16 bytes either way."""
    for backend in ("cuda", "hip"):
        out = builds[("tokened_copy", backend)]
        assert "error" not in out, out.get("error")
        kernel = re.search(r"define [^\n]*@range_wait_token\(.*?\n}", out["llir"], re.S).group(0)  # not the library's
        # NVIDIA: a load or its inline PTX; AMD: a buffer load
        loads = [line for line in kernel.splitlines() if re.search(r"= load |ld\.global|buffer\.load", line)]
        data = [line for line in loads if re.search(r"i32|\.b32", line)]
        assert data and all(re.search(r"<4 x i32>|\.v4\.b32|\.v4i32", line) for line in data), (backend, loads)


def test_consume_token_refuses_what_the_interpreter_refuses():
    """The same words as under the interpreter (tests/test_device_waits_and_remote_access.py), not an error from inside Triton."""
    out = _compile("consume_nothing", "cuda", 90, False)
    assert device_kernels.CONSUME_NOTHING in out.get("error", ""), out.get("error")


def test_a_block_of_pointers_to_a_scalar_wait_fails_to_compile(builds):
    error = builds[("block_wait", "cuda", 90)].get("error", "")
    assert (
        "signal_wait_until: sig must be a scalar, got a block of shape [8] (wait on many words with "
        "wait_until_all/any/some)" in error
    ), error


def _functions_called(builds, groups, backend, arch) -> set:
    called = set()
    for kernel in groups:
        ttir = builds[(kernel.__name__, backend, arch)]["ttir"]
        called |= set(re.findall(r'symbol = "(\w+)"', ttir))
    return called


def test_every_device_function_is_in_a_compiled_group(builds):
    import unishmem.language as shl

    source = "".join(open(device_kernels.__file__).read().split("# rocSHMEM's bitcode")[:1])
    missing = [f for f in shl.FUNCTIONS if not re.search(rf"shl\.{f}\(", source)]
    assert not missing, f"device functions no compile test calls: {missing}"
    called = _functions_called(builds, device_kernels.GROUPS, "cuda", 90)
    assert {
        "nvshmem_my_pe",
        "nvshmemx_putmem_warp",
        "nvshmem_int32_p",
        "nvshmemx_int32_fcollect_block",
        "nvshmemx_int32_sum_reduce_block",
        "nvshmem_int64_wait_until",
        "nvshmem_ptr",
    } <= called, called
    # NVSHMEM keeps its own team functions and collectives (the Triton ones are for rocSHMEM)
    assert {
        "nvshmem_team_my_pe",
        "nvshmem_team_n_pes",
        "nvshmem_team_translate_pe",
        "nvshmem_barrier",
        "nvshmem_team_sync",
        "nvshmemx_int32_broadcast_block",
        "nvshmemx_int32_alltoall_block",
    } <= called, called


def test_the_v3_forms_call_nvshmem_s_own_functions(builds):
    # the names of NVSHMEM 3.x's host/nvshmemx_coll_api.h (barriers, syncs, collectives by scope) and
    # host/nvshmem_api.h (nvshmemx_mc_ptr); NVSHMEM has no per-PE quiet
    called = _functions_called(builds, [device_kernels.scoped_synchronization], "cuda", 90)
    assert called == {
        "nvshmem_putmem_nbi",
        "nvshmem_quiet",
        "nvshmemx_barrier_all_warp",
        "nvshmemx_sync_all_warp",
        "nvshmemx_barrier_block",
        "nvshmemx_barrier_warp",
        "nvshmemx_team_sync_block",
        "nvshmemx_team_sync_warp",
        "nvshmemx_int32_broadcast_warp",
        "nvshmemx_int32_fcollect_warp",
        "nvshmemx_mc_ptr",
    }, called
    # mc_ptr asks for the world team: NVSHMEM_TEAM_WORLD is 0 (device_host/nvshmem_common.cuh)
    ttir = builds[("scoped_synchronization", "cuda", 90)]["ttir"]
    world = re.search(r'tt.extern_elementwise %(\w+), %\w+ .*symbol = "nvshmemx_mc_ptr"', ttir)
    assert world and re.search(rf"%{world.group(1)} = arith.constant 0 : i32", ttir), ttir


def test_nvshmem_constants_are_mapped(builds):
    ttir = builds[("signals", "cuda", 90)]["ttir"]
    # NVSHMEM 3.x numbers SIGNAL_SET 9, SIGNAL_ADD 10; its CMP_GE is 5 where ours is 3
    assert re.search(r"arith.constant 9 : i32", ttir) and re.search(r"arith.constant 10 : i32", ttir)
    assert re.search(r"arith.constant 5 : i32", ttir)


# The truth for gfx942/gfx950: C prototypes written by hand from rocSHMEM's src/device/rocshmem_wrapper.cc
# (the extern "C" wrappers, the only device symbols Triton can call), ROCm/rocm-systems
# projects/rocshmem at commit 2922ab56a0d0739d096bff5c70745f69c93de04c (rocSHMEM 3.5 line). Written
# independently of unishmem.language's table: only the functions device_kernels' HIP groups call.
# WRAP_RMA(int, int), WRAP_RMA_EXTENDED (_wave, _wg), WRAP_AMO_STANDARD(uint64_t, uint64),
# WRAP_WAIT(long, long) and WRAP_WAIT(uint64_t, uint64) give the typed ones.
ROCSHMEM_WRAPPER_PROTOTYPES = {
    "rocshmem_my_pe": "int ()",
    "rocshmem_n_pes": "int ()",
    "rocshmem_ptr": "void* (const void*, int)",
    **{
        f"rocshmem_{op}{sfx}": "void (void*, const void*, size_t, int)"
        for op in ("putmem", "getmem", "putmem_nbi", "getmem_nbi")
        for sfx in ("", "_wg", "_wave")
    },
    **{
        f"rocshmem_int_{op}{sfx}": "void (int*, const int*, size_t, int)"
        for op in ("put", "get", "put_nbi", "get_nbi")
        for sfx in ("", "_wg")
    },
    "rocshmem_int_p": "void (int*, int, int)",
    "rocshmem_int_g": "int (const int*, int)",
    **{
        f"rocshmem_putmem_signal{nbi}{sfx}": "void (void*, const void*, size_t, uint64_t*, uint64_t, int, int)"
        for nbi in ("", "_nbi")
        for sfx in ("", "_wg", "_wave")
    },
    "rocshmem_uint64_atomic_add": "void (uint64_t*, uint64_t, int)",
    "rocshmem_uint64_wait_until": "void (uint64_t*, int, uint64_t)",
    "rocshmem_signal_fetch": "uint64_t (const uint64_t*)",
    "rocshmem_long_wait_until": "void (long*, int, long)",
    "rocshmem_long_test": "int (long*, int, long)",
    **{
        f"rocshmem_{f}": "void ()"
        for f in (
            "fence",
            "quiet",
            "barrier_all",
            "sync_all",
            "barrier_all_wg",
            "sync_all_wg",
            "barrier_all_wave",
            "sync_all_wave",
        )
    },
    # WRAP_AMO_STANDARD(long, long) and WRAP_AMO_EXTENDED(long, long)
    "rocshmem_long_atomic_compare_swap": "long (long*, long, long, int)",
    "rocshmem_long_atomic_fetch_inc": "long (long*, int)",
    "rocshmem_long_atomic_inc": "void (long*, int)",
    "rocshmem_long_atomic_fetch_add": "long (long*, long, int)",
    "rocshmem_long_atomic_add": "void (long*, long, int)",
    "rocshmem_long_atomic_fetch": "long (long*, int)",
    "rocshmem_long_atomic_set": "void (long*, long, int)",
    "rocshmem_long_atomic_swap": "long (long*, long, int)",
    # WRAP_WAIT(long, long): the waits on many words
    "rocshmem_long_wait_until_all": "void (long*, size_t, const int*, int, long)",
    "rocshmem_long_wait_until_any": "size_t (long*, size_t, const int*, int, long)",
    "rocshmem_long_wait_until_some": "size_t (long*, size_t, size_t*, const int*, int, long)",
    "rocshmem_long_wait_until_all_vector": "void (long*, size_t, const int*, int, long*)",
    "rocshmem_long_wait_until_any_vector": "size_t (long*, size_t, const int*, int, long*)",
    "rocshmem_long_wait_until_some_vector": "size_t (long*, size_t, size_t*, const int*, int, long*)",
    # WRAP_PUT_SIGNAL(int, int)
    **{
        f"rocshmem_int_put_signal{sfx}": "void (int*, const int*, size_t, uint64_t*, uint64_t, int, int)"
        for sfx in ("", "_wg", "_wave", "_nbi", "_nbi_wg", "_nbi_wave")
    },
}
# Team functions and team collectives: rocshmem_wrapper.cc has none with C linkage (they are C++,
# over a rocshmem_team_t; its tile collectives take one too), so none may be declared.
ROCSHMEM_NOT_IN_WRAPPER = [
    f"rocshmem_{t}_{op}_reduce_wg"
    for t in ("float", "double", "short", "int", "long")
    for op in ("sum", "min", "max", "prod")
]
ROCSHMEM_NOT_IN_WRAPPER += [f"rocshmem_team_{f}" for f in ("my_pe", "n_pes", "translate_pe", "sync", "sync_wg")]
ROCSHMEM_NOT_IN_WRAPPER += [
    f"rocshmem_int_{c}{sfx}" for c in ("broadcast", "fcollect", "alltoall") for sfx in ("", "_wg")
]

# How the device library calls a C prototype (NOTE [device table]): pointers and size_t pass as i64,
# int as i32, uint64_t/long as i64, and a void function is called as returning i32.
_IR_OF_C = {"int": "i32", "long": "i64", "uint64_t": "i64", "size_t": "i64", "void": "i32"}


def _ir_signature(prototype: str) -> str:
    ret, args = re.fullmatch(r"(.+?) \((.*)\)", prototype).groups()
    ir = lambda c: "i64" if c.endswith("*") else _IR_OF_C[c.removeprefix("const ")]  # noqa: E731
    return f"{ir(ret)} ({', '.join(ir(a) for a in args.split(', ')) if args else ''})"


ROCSHMEM_SIGNATURES = {name: _ir_signature(p) for name, p in ROCSHMEM_WRAPPER_PROTOTYPES.items()}


@pytest.mark.parametrize("arch", HIP_ARCHS)
def test_rocshmem_declarations(builds, arch):
    declared = {}
    for kernel in device_kernels.HIP_GROUPS + [device_kernels.team_reduce_ops]:
        out = builds[(kernel.__name__, "hip", arch)]
        assert "error" not in out, f"{kernel.__name__} for {arch}: {out.get('error')}"
        for ret, name, args in re.findall(r"^declare [^@]*?(\w+) @(rocshmem_\w+)\(([^)]*)\)", out["llir"], re.M):
            declared[name] = f"{ret} ({args})"
    assert declared == ROCSHMEM_SIGNATURES
    assert not set(declared) & set(ROCSHMEM_NOT_IN_WRAPPER)


@pytest.mark.parametrize("arch", HIP_ARCHS)
def test_team_kernels_compile_for_rocshmem_over_put_signal_wait(builds, arch):
    # every team row is written in Triton there: the queries read the descriptor (no call but my_pe),
    # the collectives move data with putmem_wg and synchronise with uint64 atomics and waits
    called = {
        g: set(re.findall(r'symbol = "(\w+)"', builds[(g, "hip", arch)]["ttir"]))
        for g in ("queries", "synchronization", "collectives", "team_reduce_ops")
    }
    assert called["queries"] == {"rocshmem_my_pe", "rocshmem_n_pes", "rocshmem_ptr"}, called
    team_calls = {
        "rocshmem_my_pe",
        "rocshmem_quiet",
        "rocshmem_uint64_atomic_add",
        "rocshmem_uint64_wait_until",
        "rocshmem_signal_fetch",
        "__ockl_get_local_id",
    }
    assert team_calls <= called["synchronization"], called
    assert called["collectives"] == team_calls | {"rocshmem_putmem_wg"}, called
    assert called["team_reduce_ops"] == team_calls | {"rocshmem_putmem_wg"}, called
    # a team handle is the descriptor's address: the kernel takes it as i64 and loads the team's shape
    llir = builds[("queries", "hip", arch)]["llir"]
    assert re.search(r"define amdgpu_kernel void @queries\(.*\bi64 (inreg )?%4\b", llir), llir[:2000]
    assert re.search(r"inttoptr i64 %4 to ptr", llir), "the team handle is not used as the descriptor's address"


def test_every_triton_entry_names_an_implementation_taking_the_rows_parameters():
    import inspect

    from unishmem.language import _table, _triton_impl

    entries = [(row, sym) for row in _table.ROWS for sym in row.symbols.values() if isinstance(sym, _table.Triton)]
    assert {row.name for row, _ in entries} >= {
        "team_my_pe",
        "team_n_pes",
        "team_translate_pe",
        "barrier",
        "sync",
        "broadcast",
        "fcollect",
        "alltoall",
        "reduce",
        "iput",
        "iget",
        "put_tile_block",
        "load_remote",
        "store_remote",
        "barrier_all_grid",
    }
    for row, sym in entries:
        impl = getattr(_triton_impl, sym.impl)
        assert isinstance(impl, triton.runtime.JITFunction), sym.impl
        assert list(inspect.signature(impl.fn).parameters) == [n for n, _ in row.params], row.name


def test_what_rocshmem_lacks_fails_at_compile_time_with_the_reason(builds):
    assert re.search(r"p: rocshmem has no form for fp16", builds["half_p"].get("error", "")), builds["half_p"]


def test_a_constant_team_on_rocshmem_is_refused_naming_it(builds):
    error = builds["constant_team"].get("error", "")
    assert "reduce: team=0 is a constant, which cannot be a team on rocshmem" in error, builds["constant_team"]
    assert "pass team.handle (rt.team_world.handle for the world team) as a kernel argument" in error, error


def test_the_grid_barrier_counts_on_a_uint64_signal_word(builds):
    assert "error" not in builds["grid_barrier_on_a_signal"], builds["grid_barrier_on_a_signal"]["error"]
    assert re.search(r"atomicrmw add ptr addrspace\(1\) %\S+, i64 1", builds["grid_barrier_on_a_signal"]["llir"])


ROCSHMEM_GLOBALS = {"ROCSHMEM_CTX_DEFAULT", "ROCSHMEM_TEAM_WORLD", "ROCSHMEM_TEAM_SHARED"}


def _defined_globals(llir: str) -> set[str]:
    return {name for name, rest in re.findall(r"^@(\w+) = (.*)$", llir, re.M) if not rest.startswith("external")}


def test_every_rocshmem_kernel_keeps_the_globals_module_init_needs(tmp_path, monkeypatch, request):
    """NOTE [rocSHMEM module globals]: rocshmem_hipmodule_init fails on a module lacking any of the three
    (rocSHMEM src/rocshmem_gpu.cpp, rocm-systems fe14a430). Against a stand-in bitcode shaped like rocSHMEM's
    (tests/fixtures/standin_rocshmem_device.ll), Triton's LinkOnlyNeeded alone drops them; with the
    extern_libs that unishmem passes, every kernel that calls rocSHMEM defines all three."""
    standin = os.path.join(os.path.dirname(__file__), "fixtures", "standin_rocshmem_device.ll")
    (tmp_path / "librocshmem_device_gfx942.bc").write_bytes(open(standin, "rb").read())  # IR text parses too
    monkeypatch.setenv("ROCSHMEM_LIB_DIR", str(tmp_path))
    libs = extern_libs("hip", "gfx942")
    only_bitcode = {"rocshmem": libs["rocshmem"]}
    pe_only = {"buf": "*i32"}
    jobs = {
        "alone": ("pe_only", only_bitcode, pe_only),
        "teams alone": ("queries", only_bitcode, None),
        "unishmem": ("pe_only", libs, pe_only),
        "unishmem teams": ("queries", libs, None),
    }
    named = {
        k: (kernel, "hip", "gfx942", False, sig or "HIP_SIGNATURE", None if sig is None else {})
        + ({"extern_libs": tuple(libs.items())},)
        for k, (kernel, libs, sig) in jobs.items()
    }
    cache = CompileCache(request.config, device_kernels.__file__, __file__)
    out = cache.run(
        {k: (args, []) for k, args in named.items()}, functools.partial(compile_in_workers, _compile, workers=1)
    )
    for k, o in out.items():
        assert "error" not in o, f"{k}: {o.get('error')}"
        assert o["binary"] > 0 or not o["assembled"]  # Triton 3.6: LLVM IR only (NOTE [Triton releases])
    # the hazard, with rocSHMEM's bitcode alone: a kernel keeps only the globals its calls read
    assert not _defined_globals(out["alone"]["llir"]) & ROCSHMEM_GLOBALS
    assert _defined_globals(out["teams alone"]["llir"]) & ROCSHMEM_GLOBALS == ROCSHMEM_GLOBALS - {
        "ROCSHMEM_TEAM_SHARED"
    }
    # unishmem's libraries: all three defined in either kernel, and nothing left to resolve at load
    for k in ("unishmem", "unishmem teams"):
        assert ROCSHMEM_GLOBALS <= _defined_globals(out[k]["llir"]), out[k]["llir"][:3000]
        assert not re.findall(r"^@(ROCSHMEM_\w+) = external", out[k]["llir"], re.M)
        if out[k]["assembled"]:  # in the code object, where hipModuleGetGlobal looks
            assert ROCSHMEM_GLOBALS <= out[k]["rocshmem_names"]


def test_a_rocshmem_team_handle_crosses_as_64_bits():
    # rocshmem_team_t is `uint64_t *` (include/rocshmem/rocshmem_common.hpp, rocm-systems 48cce340): on
    # rocSHMEM a team argument is an i64 (today the descriptor's address: every team row there is Triton).
    from unishmem.language._vendor import TEAM_TYPE

    assert TEAM_TYPE["rocshmem"].primitive_bitwidth == 64


def _normalised(ir: str) -> list[str]:
    """IR lines with SSA names and locations made anonymous, so two builds' lines can be compared."""
    return [re.sub(r"#loc\d*|%[\w.]+", "_", line.strip()) for line in ir.splitlines()]


def _exchanges(ttir: str) -> list[tuple[int, str]]:
    """(line, kind written) of every system-scope release exchange: the debug table's STATE writes."""
    return [
        (i, m.group(1))
        for i, line in enumerate(ttir.splitlines())
        if (m := re.search(r"tt\.atomic_rmw exch, release, sys, %\S+, %c(\d+)_i64", line))
    ]


def test_debug_waits_record_and_clear_around_each_wait(builds):
    # NOTE [debug waits]: `signals` has two waits, signal_wait_until (kind 1) and wait_until (kind 2)
    waits = {"nvshmem_signal_wait_until": "1", "nvshmem_int64_wait_until": "2"}
    out = builds["debug_waits"][("cuda", 90)]
    assert "error" not in out, out.get("error")
    assert out["binary"] > 0 and not re.findall(r"^declare .*@(nvshmemx?_\w+)", out["llir"], re.M)
    lines = out["ttir"].splitlines()
    exchanges = _exchanges(out["ttir"])
    for symbol, kind in waits.items():
        at = next(i for i, line in enumerate(lines) if f'symbol = "{symbol}"' in line)
        before = [k for i, k in exchanges if i < at][-1]
        after = [k for i, k in exchanges if i > at][0]
        assert (before, after) == (kind, "0"), (symbol, exchanges, at)
    assert len(exchanges) == 2 * len(waits)
    # the table's address comes from the module global that the launch hook sets
    assert re.search(r"^@unishmem_wait_table = .*externally_initialized global i64 0", out["llir"], re.M)
    # every signal the kernel sends is recorded too: one count per putmem_signal*/signal_op
    assert len(re.findall(r"tt\.atomic_rmw add, release, sys", out["ttir"])) == 7
    # gfx942: the same, around rocSHMEM's waits, in the LLVM IR
    hip = builds["debug_waits"][("hip", "gfx942")]
    assert "error" not in hip, hip.get("error")
    llir = hip["llir"].splitlines()
    for symbol, kind in (("rocshmem_uint64_wait_until", "1"), ("rocshmem_long_wait_until", "2")):
        at = next(i for i, line in enumerate(llir) if f"call i32 @{symbol}(" in line)
        xchg = [
            (i, m.group(1))
            for i, line in enumerate(llir)
            if (m := re.search(r"atomicrmw xchg ptr addrspace\(1\) %\S+, i64 (\d+) release", line))
        ]
        assert [k for i, k in xchg if i < at][-1] == kind and [k for i, k in xchg if i > at][0] == "0", symbol


def test_debug_waits_off_leaves_the_generated_code_as_it_was(builds):
    off, on = builds[("signals", "cuda", 90)], builds["debug_waits"][("cuda", 90)]
    for ir in ("ttir", "llir"):
        assert "unishmem_wait_table" not in off[ir]
    assert not _exchanges(off["ttir"])
    # every line of the plain build is in the debug build, which only adds the records around the
    # waits and signals: the same extern calls in the same order, plus the table reader
    from collections import Counter

    assert not Counter(_normalised(off["ttir"])) - Counter(_normalised(on["ttir"]))
    calls = lambda ttir: [s for s in re.findall(r'symbol = "(\w+)"', ttir) if s != "unishmem_wait_table_address"]  # noqa: E731
    assert calls(off["ttir"]) == calls(on["ttir"])
