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
    "unishmem.kernels.collectives": (
        "_all_gather",
        "_pull_gather",
        "_reduce",
        "_pull_reduce",
        "_pull_two_shot",
        "handshake",
    ),
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


# (target, threads of a program at Triton's default 4 warps, a 16-byte load and store in its IR)
VECTOR_ACCESSES = {
    "sm_90": (128, "ld.global.v4.b32", "st.global.v4.b32"),
    "gfx942": (256, "load <4 x float>", "store <4 x float>"),
}


@pytest.mark.parametrize("target", sorted(VECTOR_ACCESSES))
def test_the_collectives_copies_and_reductions_use_16_byte_accesses(target, request, tmp_path):
    # NOTE [16-byte copies]: in the IR at float32 (sm_90: LLVM IR with its PTX inline loads; gfx942:
    # LLVM IR, rocSHMEM's calls left declared), each loop over a whole block of BLOCK elements moves them
    # 16 bytes an access: BLOCK / threads / 4 accesses per loop (8 on sm_90, 4 on gfx942's 64-wide waves)
    from unishmem import BackendUnavailable
    from unishmem.kernels.collectives import BLOCK
    from unishmem.triton_support import extern_libs

    env = dict(os.environ)
    if target == "sm_90":
        try:
            env["TRITON_CACHE_DIR"] = CompileCache(request.config, __file__).triton_cache(
                *extern_libs("cuda", 90).values()
            )
        except BackendUnavailable:
            pytest.skip("NVSHMEM's bitcode is not installed: the kernels do not link for sm_90")
    module = "unishmem.kernels.collectives"
    proc = subprocess.run(
        [sys.executable, "-m", "unishmem", "compile", module, "--target", target, "--fast", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    threads, load, store = VECTOR_ACCESSES[target]
    per_loop = BLOCK // threads // 4

    def check(name, loads, stores):
        ir = (tmp_path / f"{name}.{target}.llir").read_text()
        found = ir.count(load), ir.count(store)
        assert found[0] >= loads * per_loop and found[1] >= stores * per_loop, (name, found)

    check("_all_gather", 2, 2)  # the copy-in's whole blocks; the copy out of the slots (where numel allows)
    check("_pull_gather", 2, 2)  # the copy-in's whole blocks; the copy from the members (where numel allows)
    # two-shot: the copy-in; the reduction (a slot's load, then the others' in a loop) and its store;
    # the copy out of the gathered blocks
    check("_reduce.1", 4, 3)
    # the pulls (NOTE [pull one-shot], [pull two-shot]): the copy-in; the first member's load and the
    # others' in a loop; the store (reduce_scatter: where its block's offset allows); the two-shot
    # stores its share into red and out, then copies the members' shares
    check("_pull_reduce.0", 3, 2)
    check("_pull_reduce.1", 3, 2)
    check("_pull_two_shot", 4, 4)
