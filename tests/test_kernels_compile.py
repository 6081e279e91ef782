"""unishmem.kernels compiled for a real target with no GPU, from each module's COMPILE table (what
`unishmem compile` reads): every kernel links against the nvidia-nvshmem wheel's bitcode into an
sm_90 cubin with no NVSHMEM function left undefined."""
import concurrent.futures
import multiprocessing
import os
import re
import tempfile

import pytest

triton = pytest.importorskip("triton")

from unishmem import BackendUnavailable  # noqa: E402
from unishmem.triton_support import extern_libs  # noqa: E402

MODULES = ("unishmem.kernels.moe",)


def _compile(module: str, name: str, backend: str, arch):
    """Compile kernel `name` of `module` from its COMPILE row; its LLVM IR and binary size, or the error."""
    import importlib

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    mod = importlib.import_module(module)
    kernel, spec = next((k, s) for k, s in mod.COMPILE.items() if k.jit_function.__name__ == name)
    options = {"extern_libs": tuple(extern_libs(backend, arch).items())} if backend == "cuda" else {}
    try:
        c = triton.compile(ASTSource(kernel.jit_function, signature=spec["signature"], constexprs=spec["constexprs"]),
                           target=GPUTarget(backend, arch, 32 if backend == "cuda" else 64), options=options)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:4000]}
    return {"llir": c.asm["llir"], "binary": len(c.asm.get("cubin", c.asm.get("hsaco", b"")))}


def _init_worker(cache_dir):
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_CACHE_DIR"] = cache_dir  # a fresh cache: every kernel really compiles
    os.environ["DISABLE_PTXAS_OPT"] = "1"       # linking is what is checked; optimising only costs time


def _kernels():
    import importlib

    return [(m, k.jit_function.__name__) for m in MODULES for k in importlib.import_module(m).COMPILE]


def test_kernels_link_for_sm_90():
    try:
        extern_libs("cuda", 90)
    except BackendUnavailable as e:
        pytest.skip(f"NVSHMEM bitcode not installed (pip install nvidia-nvshmem-cu13): {e}")
    jobs = _kernels()
    with tempfile.TemporaryDirectory() as cache:
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx, initializer=_init_worker,
                                                    initargs=(cache,)) as pool:
            results = {job: pool.submit(_compile, *job, "cuda", 90) for job in jobs}
            results = {job: f.result() for job, f in results.items()}
    for (module, name), out in results.items():
        assert "error" not in out, f"{module}.{name} for sm_90: {out['error']}"
        assert out["binary"] > 0
        unresolved = re.findall(r"^declare .*@(nvshmemx?_\w+)", out["llir"], re.M)
        assert not unresolved, f"{module}.{name} leaves {unresolved} unresolved"
        assert re.search(r"@nvshmemx_putmem_signal_block", out["llir"]) or "nvshmem" in out["llir"]
