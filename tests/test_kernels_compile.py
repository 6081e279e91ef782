"""unishmem.kernels compiled for real targets with no GPU, from each module's COMPILE table (what
`unishmem compile` reads): every kernel links against the nvidia-nvshmem wheel's bitcode into an
sm_90 cubin with no NVSHMEM function left undefined, and lowers for gfx942 calling only functions
that rocSHMEM's rocshmem_wrapper.cc exports, with their C signatures."""
import concurrent.futures
import importlib
import multiprocessing
import os
import re
import tempfile

import pytest

triton = pytest.importorskip("triton")

from test_device_compile import _ir_signature  # noqa: E402
from unishmem import BackendUnavailable  # noqa: E402
from unishmem.triton_support import extern_libs  # noqa: E402

MODULES = ("unishmem.kernels.moe",)
# Hand-written from rocshmem_wrapper.cc (see test_device_compile): the functions these kernels call.
ROCSHMEM_PROTOTYPES = {
    "rocshmem_putmem_signal_wg": "void (void*, const void*, size_t, uint64_t*, uint64_t, int, int)",
    "rocshmem_uint64_wait_until_all": "void (uint64_t*, size_t, const int*, int, uint64_t)",
    "rocshmem_signal_fetch": "uint64_t (const uint64_t*)",
}


def _compile(module: str, name: str, backend: str, arch):
    """Compile kernel `name` of `module` from its COMPILE row: its LLVM IR, PTX and binary size, or the error."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel, spec = next((k, s) for k, s in importlib.import_module(module).COMPILE.items()
                        if k.jit_function.__name__ == name)
    signature = dict(spec["signature"], **{k: "constexpr" for k in spec["constexprs"]})  # as ASTSource wants
    options = dict(spec.get("options", {}))
    if backend == "cuda":
        options["extern_libs"] = tuple(extern_libs(backend, arch).items())
    try:
        c = triton.compile(ASTSource(kernel.jit_function, signature=signature, constexprs=spec["constexprs"]),
                           target=GPUTarget(backend, arch, 32 if backend == "cuda" else 64), options=options)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:4000]}
    return {"llir": c.asm["llir"], "ptx": c.asm.get("ptx", ""), "options": spec.get("options", {}),
            "binary": len(c.asm.get("cubin", c.asm.get("hsaco", b"")))}


def _init_worker(cache_dir):
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_CACHE_DIR"] = cache_dir  # a fresh cache: every kernel really compiles
    os.environ["DISABLE_PTXAS_OPT"] = "1"       # linking is what is checked; optimising only costs time


@pytest.fixture(scope="module")
def builds():
    try:
        extern_libs("cuda", 90)
    except BackendUnavailable as e:
        pytest.skip(f"NVSHMEM bitcode not installed (pip install nvidia-nvshmem-cu13): {e}")
    kernels = [(m, k.jit_function.__name__) for m in MODULES for k in importlib.import_module(m).COMPILE]
    jobs = [(m, name, backend, arch) for backend, arch in (("cuda", 90), ("hip", "gfx942")) for m, name in kernels]
    with tempfile.TemporaryDirectory() as cache:
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx, initializer=_init_worker,
                                                    initargs=(cache,)) as pool:
            futures = {job: pool.submit(_compile, *job) for job in jobs}
            return {job: f.result() for job, f in futures.items()}


def test_kernels_link_for_sm_90(builds):
    cuda = {job: out for job, out in builds.items() if job[2] == "cuda"}
    assert cuda
    for (module, name, _, _), out in cuda.items():
        assert "error" not in out, f"{module}.{name} for sm_90: {out['error']}"
        assert out["binary"] > 0
        unresolved = re.findall(r"^declare .*@(nvshmemx?_\w+)", out["llir"], re.M)
        assert not unresolved, f"{module}.{name} leaves {unresolved} unresolved"
        if out["options"].get("enable_fp_fusion") is False:  # a bit-exact sum: no multiply-add contracted
            assert "fma.rn.f32" not in out["ptx"], f"{module}.{name}"


def test_kernels_lower_for_gfx942_with_rocshmem_wrapper_signatures(builds):
    hip = {job: out for job, out in builds.items() if job[2] == "hip"}
    assert hip
    for (module, name, _, _), out in hip.items():
        assert "error" not in out, f"{module}.{name} for gfx942: {out['error']}"
        declared = dict((n, f"{ret} ({args})") for ret, n, args in
                        re.findall(r"^declare [^@]*?(\w+) @(rocshmem_\w+)\(([^)]*)\)", out["llir"], re.M))
        assert declared, f"{module}.{name} calls no rocSHMEM function"
        for n, signature in declared.items():
            assert n in ROCSHMEM_PROTOTYPES, f"{module}.{name} calls {n}, not in this test's list"
            assert signature == _ir_signature(ROCSHMEM_PROTOTYPES[n]), (n, signature)
