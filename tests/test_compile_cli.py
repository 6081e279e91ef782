"""`unishmem compile`, run as a user would (python -m unishmem compile ...) on tests/programs/compile_kernels.py
and on an example, for sm_90 and gfx942 with no GPU. What the report says is checked against the files it
wrote (the cubin holds NVSHMEM's device state, so the bitcode was linked in) and against the rocSHMEM symbols
the kernels call, written here by hand from rocSHMEM's rocshmem_wrapper.cc names."""

import json
import os
import re
import subprocess
import sys
import types

import pytest

pytest.importorskip("triton")
from unishmem import _triton_compat  # noqa: E402

pytestmark = pytest.mark.compile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KERNELS = os.path.join(HERE, "programs", "compile_kernels.py")


# what ring_p calls on rocSHMEM: my_pe, n_pes and the int32 p
RING_P_ROCSHMEM = ["rocshmem_int_p", "rocshmem_my_pe", "rocshmem_n_pes"]


def _unishmem(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "unishmem", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out, cache = tmp_path_factory.mktemp("out"), tmp_path_factory.mktemp("cache")
    # --fast: ptxas without optimisation; a user-set cache, which the command must use and keep
    proc = _unishmem(
        "compile",
        KERNELS,
        "--target",
        "sm_90,gfx942",
        "--fast",
        "--json",
        "--out",
        str(out),
        env={"TRITON_CACHE_DIR": str(cache)},
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return {"proc": proc, "json": json.loads(proc.stdout), "out": out, "cache": cache}


def _row(report, kernel, target):
    rows = [r for r in report["json"]["results"] if r["kernel"] == kernel and r["target"] == target]
    assert len(rows) == 1, report["json"]["results"]
    return rows[0]


def test_failing_kernels_make_the_exit_status_one(report):
    assert report["proc"].returncode == 1, report["proc"].stderr[-3000:]
    assert not report["json"]["ok"]
    assert {(r["kernel"], r["target"]) for r in report["json"]["results"] if not r["ok"]} == {
        ("half_p", "gfx942"),
        ("mixed_sign", "sm_90"),
        ("mixed_sign", "gfx942"),
        ("undeclared", None),
    }


def test_cuda_links_nvshmem_into_a_cubin(report):
    for kernel in ("ring_p", "half_p"):  # NVSHMEM has an fp16 p
        row = _row(report, kernel, "sm_90")
        assert row["ok"] and row["linked"] and not row["unresolved"], row
        cubin = report["out"] / f"{kernel}.sm_90.cubin"
        data = cubin.read_bytes()
        assert data[:4] == b"\x7fELF" and row["binary_bytes"] == len(data)
        assert kernel.encode() in data
        # the global nvshmemx_cumodule_init fills: defined by NVSHMEM's bitcode, so it was linked in
        assert b"nvshmemi_device_state_d" in data


def test_hip_reports_the_rocshmem_symbols_left_for_module_load(report):
    row = _row(report, "ring_p", "gfx942")
    assert row["ok"] and not row["linked"], row  # no rocSHMEM bitcode on this machine
    assert row["unresolved"] == RING_P_ROCSHMEM
    # Triton 3.6's LLVM cannot assemble an undefined call: LLVM IR only (NOTE [Triton releases])
    if _triton_compat.version() < (3, 7):
        assert not row["assembled"] and not (report["out"] / "ring_p.gfx942.hsaco").exists(), row
        llir = (report["out"] / "ring_p.gfx942.llir").read_text()
        assert all(re.search(rf"^declare .*@{name}\(", llir, re.M) for name in RING_P_ROCSHMEM), llir[:2000]
        return
    assert row["assembled"], row
    hsaco = (report["out"] / "ring_p.gfx942.hsaco").read_bytes()
    assert hsaco[:4] == b"\x7fELF" and all(name.encode() in hsaco for name in RING_P_ROCSHMEM)


def test_what_rocshmem_lacks_is_named_with_the_reason(report):
    row = _row(report, "half_p", "gfx942")
    assert row["lacks"] == {"function": "p", "vendor": "rocshmem"}, row
    assert "p: rocshmem has no form for fp16" in row["error"]
    assert not (report["out"] / "half_p.gfx942.hsaco").exists()


def test_a_kernel_without_a_signature_says_how_to_declare_one(report):
    error = _row(report, "undeclared", None)["error"]
    assert (
        "no signature declared for undeclared: add to compile_kernels a table COMPILE = {undeclared: "
        '{"signature": {"buf": "...", "pe": "..."}, "constexprs": {"BLOCK": ...}}}' in error
    ), error


def test_the_users_cache_is_used_and_kept(report):
    assert any(report["cache"].iterdir())


def test_text_report(report):
    from unishmem.compile import format_report

    text = format_report(report["json"])
    assert "ring_p  (N=8)\n  sm_90   ok     linked (cubin " in text, text
    assert "  gfx942  FAILED p: rocshmem has no form for fp16" in text, text
    assert text.endswith("4 of 7 failed"), text


def test_an_error_inside_a_helper_is_reported_with_its_reason_first(report):
    # Triton's own message for the kernel names only the kernel's line that called the helper
    reason = "TypeError: Cannot use /, #, or % with triton.language.uint64 and triton.language.int32"
    for target in ("sm_90", "gfx942"):
        assert _row(report, "mixed_sign", target)["error"].startswith(reason), _row(report, "mixed_sign", target)
    from unishmem.compile import format_report

    row = format_report(report["json"]).split("mixed_sign\n")[1].split("\n")[:4]
    assert row[0].startswith("  sm_90   FAILED " + reason) and "_wrap(tl.load(words))" in row[3], row


def test_example_compiles_for_gfx942():
    proc = _unishmem("compile", "examples/ring_allgather.py", "--target", "gfx942", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    (row,) = json.loads(proc.stdout)["results"]
    # putmem_signal_block is rocSHMEM's _wg form; its wait_until returns nothing, so the value is fetched
    assert row["unresolved"] == [
        "rocshmem_my_pe",
        "rocshmem_n_pes",
        "rocshmem_putmem_signal_wg",
        "rocshmem_signal_fetch",
        "rocshmem_uint64_wait_until",
    ], row


def test_aligned_arguments_are_specialised_as_a_launch_does(tmp_path):
    # Triton vectorises a masked copy only where both pointers and n are known multiples of 16
    kernels = os.path.join(HERE, "programs", "aligned_kernels.py")
    proc = _unishmem("compile", kernels, "--target", "sm_90,gfx942", "--fast", "--json", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    rows = json.loads(proc.stdout)["results"]
    assert [r["aligned"] for r in rows if r["target"] == "sm_90"] == [["dst", "src", "n"], ["dst", "src"], []]
    ir = {(n, t): (tmp_path / f"copy.{n}.{t}.llir").read_text() for n in (0, 2) for t in ("sm_90", "gfx942")}
    assert "ld.global.v4.b32" in ir[(0, "sm_90")] and "ld.global.v4" not in ir[(2, "sm_90")]
    assert "load <4 x half>" in ir[(0, "gfx942")] and "load <4 x half>" not in ir[(2, "gfx942")]
    assert "load <1 x half>" in ir[(2, "gfx942")]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["examples/ring_allgather.py", "--target", "sm_90,sm_91"],
            "unknown target 'sm_91' in --target 'sm_90,sm_91'; known targets: sm_80, sm_90, sm_100, gfx942, gfx950",
        ),
        (["no_such_module_here"], "no module named 'no_such_module_here' here: give a dotted module name"),
        ([".relative"], "no module named '.relative' here"),
        (["examples/missing.py"], "no such file: examples/missing.py"),
    ],
)
def test_setup_errors_name_the_value(args, message, capsys, monkeypatch):
    from unishmem.cli import main

    monkeypatch.chdir(ROOT)
    assert main(["compile", *args]) == 2  # in this process: each fails before any worker starts
    out, err = capsys.readouterr()
    assert message in err and not out, err


def _module(**attrs):
    module = types.ModuleType("table_module")
    module.__dict__.update(attrs)
    return module


@pytest.mark.parametrize(
    "table, message",
    [
        (
            {"ring_p": {"signature": {"buf": "*i32"}}},
            "COMPILE[ring_p] gives no value for the tl.constexpr argument 'N': add it to \"constexprs\"",
        ),
        (
            {"ring_p": {"signature": {}, "constexprs": {"N": 8}}},
            "COMPILE[ring_p] gives no type for the argument 'buf': add it to \"signature\"",
        ),
        (
            {"ring_p": {"signature": {"buf": "*i32", "bufs": "*i32"}, "constexprs": {"N": 8}}},
            "COMPILE[ring_p] names 'bufs', which is not an argument of ring_p(buf, N)",
        ),
        (
            {
                "ring_p": [
                    {"signature": {"buf": "*i32"}, "constexprs": {"N": 8}},
                    {"signature": {"buf": "*i32"}, "constexpr": {"N": 8}},
                ]
            },
            "COMPILE[ring_p][1] has unknown keys ['constexpr']",
        ),
        (
            {"ring_p": {"signature": {"buf": "*f32"}, "constexprs": {"N": 8}}},
            "COMPILE[ring_p] gives 'buf' the type '*f32', which Triton does not know: use a Triton type such as \"*fp32\"",
        ),
        (
            {"ring_p": {"signature": {"buf": "*i32"}, "constexprs": {"N": 8}, "aligned": "buf"}},
            "COMPILE[ring_p]['aligned'] must be a list of argument names, not 'buf'",
        ),
        (
            {"ring_p": {"signature": {"buf": "*i32"}, "constexprs": {"N": 8}, "aligned": ["N"]}},
            "COMPILE[ring_p]['aligned'] names 'N', which is not a pointer or integer argument in \"signature\" (buf: *i32)",
        ),
        (
            {"ring_p": {"signature": {"buf": "*i32"}, "constexprs": {"N": 8}, "target_options": {"sm_99": {}}}},
            "COMPILE[ring_p]['target_options'] maps a target (sm_80, sm_90, sm_100, gfx942, gfx950) to its "
            "options, not 'sm_99'",
        ),
        (
            {"ring_q": {"signature": {}}},
            "COMPILE has the key 'ring_q', which is not a @unishmem.jit kernel of the module (its kernels: ring_p)",
        ),
    ],
)
def test_bad_compile_tables_are_refused_naming_the_entry(table, message):
    sys.path.insert(0, os.path.dirname(KERNELS))
    try:
        import compile_kernels
    finally:
        sys.path.remove(os.path.dirname(KERNELS))
    from unishmem.compile import SetupError, _kernels, _specs_of

    module = _module(ring_p=compile_kernels.ring_p, COMPILE=table)
    module.__name__ = "compile_kernels"  # ring_p is this module's own kernel
    with pytest.raises(SetupError) as e:
        _specs_of(module, _kernels(module))
    assert message in str(e.value)
