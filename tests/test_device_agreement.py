"""What runs under the interpreter compiles, and what compiles runs under the interpreter (NOTE [one rule set]
in unishmem/language/_build.py): every device function, called with arguments it takes and with each wrong
kind of argument (tests/agreement_cases.py), is run under TRITON_INTERPRET=1 on the host backend and compiled
for sm_90 and gfx942 (code generation, where the arguments are checked). Both paths must accept the call, or
both refuse it with the same message, which names the argument. A refusal that only one target makes, for what
that vendor lacks, is allowed where the interpreter and the other target accept the call."""

import concurrent.futures
import json
import multiprocessing
import os
import sys

import agreement_cases
import pytest
from spmd import launch

pytestmark = pytest.mark.compile
triton = pytest.importorskip("triton")

TARGETS = (("cuda", 90, 32), ("hip", "gfx942", 64))
PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "agreement_interpreted.py")
# What a vendor lacks, refused only when compiling for it (NOTE [one rule set]).
TARGET_REFUSALS = ("NotAvailableError", "which cannot be a team on rocshmem")


def _compile_all(module_path: str, backend: str, arch, warp: int) -> dict:
    """{kernel: None, or the compile error's text} for every case, compiled for one target."""
    os.environ["TRITON_INTERPRET"] = "0"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from unishmem import _triton_compat

    kernels = agreement_cases.load(module_path)
    target, signature = GPUTarget(backend, arch, warp), agreement_cases.SIGNATURES[backend]
    out = {}
    for i in range(len(agreement_cases.cases())):
        try:
            _triton_compat.front_end(ASTSource(getattr(kernels, f"k{i}"), signature=signature), target)
            out[f"k{i}"] = None
        except Exception as e:  # the outcome is what the test compares
            out[f"k{i}"] = f"{type(e).__name__}: {e}"
    return out


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """(cases, {target or "interpreted": {kernel: outcome}})."""
    tmp = tmp_path_factory.mktemp("agreement")
    module = tmp / "agreement_kernels.py"
    module.write_text(agreement_cases.source())
    results = {}
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(len(TARGETS), mp_context=ctx) as pool:
        futures = {t[0]: pool.submit(_compile_all, str(module), *t) for t in TARGETS}
        out = tmp / "interpreted.json"
        env = {"TRITON_INTERPRET": "1", "UNISHMEM_DEADLOCK_TIMEOUT": "5"}
        proc = launch([PROGRAM, str(module), str(out)], 1, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results["interpreted"] = json.loads(out.read_text())
        results.update({name: f.result() for name, f in futures.items()})
    return agreement_cases.cases(), results


def _message(outcome: str) -> str:
    return outcome.split(": ", 1)[1]


def test_interpreted_and_compiled_agree_on_every_call(outcomes):
    cases, results = outcomes
    disagreements = []
    for i, (_, what, call) in enumerate(cases):
        interpreted = results["interpreted"][f"k{i}"]
        compiled = {t: results[t][f"k{i}"] for t, _, _ in TARGETS}
        target_only = {t: c for t, c in compiled.items() if c and any(r in c for r in TARGET_REFUSALS)}
        for t, c in compiled.items():
            if t in target_only:
                agrees = interpreted is None and any(v is None for v in compiled.values())
            elif interpreted is None or c is None:
                agrees = interpreted is None and c is None
            else:  # Triton's CompilationError quotes the device library's message
                agrees = _message(interpreted) in c
            if not agrees:
                disagreements.append(f"{call}  [{what}]\n  interpreted: {interpreted}\n  {t}: {(c or 'ok')[-400:]}")
    assert not disagreements, f"{len(disagreements)} disagreements:\n" + "\n".join(disagreements)


def test_every_valid_call_runs_and_every_refusal_names_its_argument(outcomes):
    cases, results = outcomes
    wrong = []
    for i, (fn, what, call) in enumerate(cases):
        outcome = results["interpreted"][f"k{i}"]
        if what == "valid":
            if outcome is not None:
                wrong.append(f"{call}: {outcome}")
            continue
        argument = what.split()[0]  # "pe a block": pe; "data of uint32" names no argument but a dtype
        if outcome is not None and argument != "data" and f"{fn}: {argument}" not in _message(outcome):
            wrong.append(f"{call}  [{what}]: {outcome}")
    assert not wrong, "\n".join(wrong)
