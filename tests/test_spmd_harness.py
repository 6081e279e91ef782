"""tests/spmd.py itself, on the modules in tests/fixtures/spmd_harness: -k narrows the job, a failure is
reported with its traceback and does not take the later tests with it, each test's time is its own."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))


def test_failures_stay_with_their_function_and_k_narrows_the_job(tmp_path):
    log, report = tmp_path / "ran.txt", tmp_path / "report.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "python_files=harness_*.py"]
        + ["-k", "not deselected", f"--junitxml={report}", os.path.join(HERE, "fixtures", "spmd_harness")],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, HARNESS_LOG=str(log)),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    cases = {c.get("name"): c for c in ET.parse(report).getroot().iter("testcase")}
    assert sorted(cases) == ["test_after_the_failure[2]", "test_fails_on_pe_1[2]", "test_second_module[2]"], out
    failure = cases["test_fails_on_pe_1[2]"].find("failure")
    assert failure is not None and "PE 1 fails on purpose" in failure.get("message", "") + failure.text, out
    for name in ("test_after_the_failure[2]", "test_second_module[2]"):
        assert not list(cases[name]), f"{name}: {ET.tostring(cases[name]).decode()}"  # passed
    assert float(cases["test_after_the_failure[2]"].get("time")) >= 1.5, out
    ran = sorted(log.read_text().split("\n")[:-1])
    assert ran == [f"{name} {pe}" for name in ("test_after_the_failure", "test_fails_on_pe_1") for pe in (0, 1)] + [
        "test_second_module 0",
        "test_second_module 1",
    ], ran
