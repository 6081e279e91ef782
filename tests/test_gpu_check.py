"""scripts/gpu_kernel_times.py, the timing phase of scripts/gpu_check.sh, without a GPU: its CPU mode runs
every kernel eager and replayed through unishmem.testing.capture() on the host backend and checks each
result against torch; its summary reports what failed and what the time budget left out. Speed is not
asserted (the GPU figures are in docs/benchmarks.md)."""

import importlib.util
import json
import os
import sys

import pytest
from spmd import launch

pytestmark = pytest.mark.slow

SCRIPT = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "gpu_kernel_times.py")


def script():
    spec = importlib.util.spec_from_file_location("gpu_kernel_times", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_kernel_times", module)
    spec.loader.exec_module(module)
    return module


def test_cpu_mode_runs_and_checks_every_kernel(tmp_path):
    times = script()
    proc = launch([SCRIPT, str(tmp_path), "--cpu", "--quick"], 2, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for pe in range(2):
        with open(tmp_path / f"times-pe{pe}.json") as f:
            report = json.load(f)
        assert report["info"]["mode"] == "cpu" and report["info"]["n_pes"] == 2
        rows = {r["kernel"]: r for r in report["rows"]}
        assert set(rows) == {*times.kernels(), "gemm_part"}, sorted(rows)  # every timing of the kernel table
        for name, row in rows.items():
            assert row["check"] == "ok", row
            assert row["eager"]["mean_us"] > 0 and row["eager"]["median_us"] > 0, row
            assert row["eager_host"]["mean_us"] > 0, row
            if name == "gemm_part":
                assert row["matmul_check"] == "ok" and row["matmul"]["median_us"] > 0, row
                continue
            # every kernel is capturable (dispatch given max_tokens too) and right after its inputs changed
            assert row["graph_check"] == "ok" and row["graph"]["median_us"] > 0, row
            assert row["reference"]["bytes"] >= row["bytes"] and row["reference"]["mean_us"] > 0, row
    assert "| all_gather | 8K |" in proc.stdout and "every result matched torch" in proc.stdout, proc.stdout


def test_summary_names_failures_and_rows_the_budget_left_out(tmp_path):
    times = script()
    row = {
        "kernel": "all_gather",
        "bytes": 8192,
        "shape": "[2048] per PE",
        "pe": 0,
        "first_call_s": 20.5,
        "check": "ok",
        "graph_check": "FAILED: max error 3 (largest value 3)",
        "eager": {"mean_us": 40.0, "median_us": 30.0, "min_us": 25.0},
        "eager_host": {"mean_us": 28.0},
        "graph": {"mean_us": 10.0, "median_us": 9.0, "min_us": 8.0},
        "reference": {"name": "device-to-device copy", "bytes": 8192, "mean_us": 5.0, "median_us": 4.0},
        "busbw_factor": 0.5,
    }
    info = {"mode": "gpu", "device": "NVIDIA H200", "n_pes": 2, "dtype": "float16", "reps": 20}
    info |= {"started": "2026-12-03T00:00:00+00:00", "note": "a note", "seconds": 100.0}
    compiles = [{"kernel": "_all_gather", "seconds": 19.0, "cache_hit": False}]
    for pe in range(2):
        report = {"info": {**info, "pe": pe}, "rows": [{**row, "pe": pe}], "compiles": compiles}
        report["skipped"] = ["moe 64M"]
        (tmp_path / f"times-pe{pe}.json").write_text(json.dumps(report))
    text = times.summary(str(tmp_path))
    expected = "| all_gather | 8K | 40 us | 30 us | 28 us | 30 us | 10 us | 9 us | 5 us | 2.00x | 0.41 GB/s | 20.5 s |"
    assert expected in text, text
    assert "_all_gather: 2 binaries, 38.0 s" in text, text
    assert "NOT RUN (time budget): moe 64M" in text, text
    assert "FAILED: all_gather 8K (pe 0), all_gather 8K (pe 1)" in text, text
    assert times.summary(str(tmp_path / "none")).startswith("no times-pe*.json")


def sweep_script():
    spec = importlib.util.spec_from_file_location("gpu_sweep", SWEEP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SWEEP = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "gpu_sweep.py")


def test_the_sweep_times_every_configuration_checks_it_and_resumes(tmp_path):
    # scripts/gpu_sweep.py's CPU mode: every configuration of reduce_scatter (pulling at two grid caps and
    # two warp counts, pushing at three block sizes and two caps), graphed and eager, beside its floor's copy,
    # checked against torch; the merged JSON in the format; a rerun runs nothing it has, and a
    # cut run (rows missing) runs only what is missing
    sweep = sweep_script()
    command = [SWEEP, str(tmp_path), "--cpu", "--kernels", "reduce_scatter", "--dtypes", "float16"]
    proc = launch(command, 2, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    expected = {json.dumps([v, k], sort_keys=True) for _, v, k in sweep.configs(["reduce_scatter"], cpu=True)}
    assert len(expected) == 7, expected
    # all_gather on a GPU: pulling 3 ways, the copy engine once (one program), pushing 4 ways
    variants = [v for _, v, _ in sweep.configs(["all_gather"], cpu=False)]
    assert sorted(variants) == ["copy"] + ["pull"] * 3 + ["push"] * 4, variants
    # the GEMMs fused in each tile (NOTE [GEMM tiles]), the first the architectures' own, ag_gemm fused by
    # the copy engine in that one (NOTE [ag_gemm copy engine]), both chunked (NOTE [ag_gemm chunked],
    # [gemm_rs chunked]) and unfused once
    gemms = sweep.configs(["ag_gemm", "gemm_rs"], cpu=False)
    fused = [("fused", t) for t in sweep.GEMM_TILES]
    assert [(v, k.get("tile")) for _, v, k in gemms] == [
        *fused,
        ("fused, copy", "128x128x64"),
        ("chunked", None),
        ("unfused", None),
        *fused,
        ("chunked", None),
        ("unfused", None),
    ]
    for kernel, variant in (("ag_gemm", "fused, copy"), ("ag_gemm", "chunked"), ("gemm_rs", "chunked")):
        assert sweep.VARIANTS[kernel][variant][1] == {"UNISHMEM_PULL": "1", "UNISHMEM_COPY_ENGINE": "1"}
    assert sweep.GEMM_TILES[0] == "128x128x64" and sweep.SETTING_OF["tile"] == "UNISHMEM_GEMM_TILE"
    # the knobs a row sets are the kernels' own
    from unishmem.kernels.collectives import KNOB_SETTINGS

    assert sweep.KNOBS == KNOB_SETTINGS
    merged = json.load(
        open(tmp_path / f"gpu-{json.load(open(tmp_path / 'sweep-pe0.json'))['header']['started'][:10]}.json")
    )
    header, *rows = merged
    assert header["n_pes"] == 2 and header["arch"] == "cpu" and "torch" in header["stack"], header
    assert {json.dumps([r["variant"], r["knobs"]], sort_keys=True) for r in rows} == expected
    assert sorted({r["mode"] for r in rows}) == ["eager", "graph"] and len(rows) == 14, len(rows)
    for r in rows:
        assert r["kernel"] == "reduce_scatter" and r["bytes"] == 8192 and r["dtype"] == "float16", r
        assert r["check"] == "ok" and r["us"] > 0 and r["ref_us"] > 0 and len(r["us_per_pe"]) == 2, r
        assert r["ref"] == "device copy of 6144 bytes (the floor)", r  # reads 8 KiB, writes 4 KiB at 2 PEs
    assert proc.stdout.count("[pe 0] reduce_scatter") == 7, proc.stdout
    # resume: PE 0's file lost its last two rows (one configuration): only that one runs again
    path = tmp_path / "sweep-pe0.json"
    report = json.load(open(path))
    report["rows"] = report["rows"][:-2]
    path.write_text(json.dumps(report))
    proc = launch(command, 2, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("[pe 0] reduce_scatter") == 1, proc.stdout
    assert len(json.load(open(path))["rows"]) == 14


def test_the_sweep_times_each_gemm_form_beside_matmul_and_the_sequential_torch_path(tmp_path):
    # the GEMMs' rows in the sweep's CPU mode: every form (NOTE [fuse or not]) checked against torch, beside
    # torch.matmul on the gathered shapes and the sequential torch path their targets are set against (the
    # collective's floor copy and torch.matmul, one after the other), in the merged JSON
    sweep = sweep_script()
    command = [SWEEP, str(tmp_path), "--cpu", "--kernels", "ag_gemm,gemm_rs", "--dtypes", "bfloat16"]
    proc = launch(command, 2, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sweep.merge(str(tmp_path)).endswith(".json")
    header, *rows = json.load(open(next(tmp_path.glob("gpu-*.json"))))
    forms = {(r["kernel"], r["variant"]) for r in rows}
    assert forms == {(k, v) for k, v, _ in sweep.configs(["ag_gemm", "gemm_rs"], cpu=True)}, forms
    assert len(rows) == 2 * len(sweep.configs(["ag_gemm", "gemm_rs"], cpu=True)), len(rows)
    # 8 KiB of bfloat16 per PE at 2 PEs, d = 64: ag_gemm's a_shard 64 rows (A gathered: 16 KiB), gemm_rs's
    # a 64 rows (its reduce_scatter's floor: reads 8 KiB, writes 4)
    gathered = "torch.matmul [128, 64] x [64, 64]"
    for r in rows:
        assert r["check"] == "ok" and r["us"] > 0 and r["ref_us"] > 0 and r["seq_us"] > 0, r
        if r["kernel"] == "ag_gemm":
            assert r["ref"] == gathered and r["seq"] == f"device copy of 16384 bytes, then {gathered}", r
        else:
            matmul = "torch.matmul [64, 64] x [64, 64]"
            assert r["ref"] == matmul and r["seq"] == f"{matmul}, then a device copy of 6144 bytes", r


def test_the_table_takes_the_fastest_right_configuration_per_size(tmp_path):
    # --table: per (architecture, PEs, kernel, size) the configuration with the least mean graphed time
    # over the dtypes, never one whose result was wrong; eager rows do not count
    sweep = sweep_script()
    header = {"arch": "sm_90", "n_pes": 2, "device": "NVIDIA H200", "mps_percent": "50", "commit": "abc"}

    def row(variant, us, dtype="float16", mode="graph", check="ok", size=8192, programs=None):
        knobs = {"programs": programs, "block_bytes": None, "warps": 4}
        return {"kernel": "all_reduce", "variant": variant, "knobs": knobs, "bytes": size, "dtype": dtype}, {
            "n_pes": 2,
            "mode": mode,
            "us": us,
            "check": check,
        }

    rows = [
        row("one_shot", 10.0),
        row("one_shot", 30.0, "bfloat16"),  # mean 20
        row("two_shot", 15.0),
        row("two_shot", 16.0, "bfloat16"),  # mean 15.5: the fastest
        row("one_shot, push", 1.0, check="FAILED: max error 3"),  # fastest, but wrong
        row("two_shot, push", 2.0, mode="eager"),  # not graphed
        row("one_shot", 50.0, size=64 << 20, programs=32),
        row("one_shot", 40.0, size=64 << 20, programs=64),
    ]
    (tmp_path / "gpu.json").write_text(json.dumps([header, *({**a, **b} for a, b in rows)]))
    source = tmp_path / "_tuned.py"
    source.write_text(open(sweep.TUNED).read())
    sweep.table(str(tmp_path / "gpu.json"), str(source))
    spec = importlib.util.spec_from_file_location("tuned_copy", source)
    tuned = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tuned)
    assert tuned.TABLE == {
        ("sm_90", 2, "all_reduce", 8192): {"variant": "two_shot", "programs": None, "block_bytes": None, "warps": 4},
        ("sm_90", 2, "all_reduce", 64 << 20): {"variant": "one_shot", "programs": 64, "block_bytes": None, "warps": 4},
    }, tuned.TABLE
    assert tuned.measured("sm_90", 2, "all_reduce", 6000)["variant"] == "two_shot"  # 8 KiB's class
    assert tuned.measured("sm_90", 4, "all_reduce", 8192) is None  # measured at 2 PEs only
    # the sweep's ladder is the table's size classes
    from unishmem import parse_size

    assert tuple(parse_size(s) for s in sweep.SIZES) == tuned.SIZE_CLASSES
