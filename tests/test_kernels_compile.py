"""Every unishmem.kernels kernel compiles and links for sm_90 (NVSHMEM's bitcode) and lowers for gfx942
(rocSHMEM's symbols left for module load), through `unishmem compile` as a kernel author's CI would run it."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")
from compile_cache import CompileCache  # noqa: E402

pytestmark = pytest.mark.compile

KERNELS = {
    "unishmem.kernels.collectives": ("_all_gather", "_reduce"),
    "unishmem.kernels.moe": ("_dispatch", "_combine"),
}


@pytest.mark.parametrize("module", sorted(KERNELS))
def test_every_kernel_links_for_sm_90_and_lowers_for_gfx942(module, request):
    from unishmem import BackendUnavailable
    from unishmem.triton_support import extern_libs

    try:
        cache = CompileCache(request.config, __file__).triton_cache(*extern_libs("cuda", 90).values())
    except BackendUnavailable:  # no NVSHMEM bitcode: the command says so, uncached
        cache = None
    proc = subprocess.run(
        [sys.executable, "-m", "unishmem", "compile", module, "--target", "sm_90,gfx942", "--fast", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, **({"TRITON_CACHE_DIR": cache} if cache else {})),  # a rerun compiles what changed
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["ok"], proc.stdout[-3000:] + proc.stderr[-2000:]
    done = {(r["kernel"], r["target"]) for r in result["results"] if r["ok"]}
    for kernel in KERNELS[module]:
        assert {(kernel, "sm_90"), (kernel, "gfx942")} <= done, done
    for r in result["results"]:
        if r["target"] == "sm_90":
            assert r["linked"] and not r["unresolved"], r
        else:  # what rocSHMEM's bitcode must provide at module load: C-linkage symbols only
            assert r["unresolved"] and all(s.startswith("rocshmem_") for s in r["unresolved"]), r
