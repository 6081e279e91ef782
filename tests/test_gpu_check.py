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
