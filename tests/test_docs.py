"""The README's links into the repository resolve (mkdocs --strict checks the links inside docs/), the
tests' index names every test file, and the docs' model tables are their scripts' output."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert local, "the README links into docs/"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_tests_index_names_every_test_file():
    """tests/README.md: each test file under its subject, once; nothing named there is missing."""
    named = re.findall(r"`(test_\w+\.py)`", (ROOT / "tests" / "README.md").read_text())
    files = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert sorted(named) == files


def _state_table(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def test_readme_and_the_guide_say_the_same_about_what_works():
    """One "What works today" table in two places (README's links go into docs/): what was compiled, what
    ran and what never ran is stated once."""
    readme = _state_table((ROOT / "README.md").read_text())
    index = [
        re.sub(r"\]\((?![a-z]+:|#)", "](docs/", line) for line in _state_table((ROOT / "docs/index.md").read_text())
    ]
    assert readme and readme == index


def test_ported_kernels_guide_names_only_device_functions_that_exist():
    """Every `shl.<name>` in the porting guide is a function of the live unishmem.language or one of its
    constexpr constants (CMP_*, SIGNAL_*): a renamed or missing function fails here, not in a user's port."""
    pytest.importorskip("triton")
    import triton.language as tl

    import unishmem.language as shl

    names = set(re.findall(r"\bshl\.([A-Za-z_]\w*)", (ROOT / "docs/porting.md").read_text()))
    assert len(names) > 30, f"the guide's tables name unishmem.language functions: found only {sorted(names)}"
    constants = {n for n in dir(shl) if n.isupper() and isinstance(getattr(shl, n), tl.constexpr)}
    unknown = sorted(names - set(shl.FUNCTIONS) - constants)
    assert not unknown, f"docs/porting.md names shl.{', shl.'.join(unknown)}, not in unishmem.language"


def test_the_8_gpu_gemm_table_is_the_models_output():
    # docs/kernels.md's "GEMMs on 8 H100": each unishmem row as scripts/gemm_model.py computes it from the
    # formulas and assumptions written beside it (a model, which this keeps in step with its text)
    import importlib.util

    spec = importlib.util.spec_from_file_location("gemm_model", ROOT / "scripts" / "gemm_model.py")
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    text = (ROOT / "docs" / "kernels.md").read_text()
    table = text[text.index("**GEMMs on 8 H100**") : text.index("**MoE on 8 H100**")]
    rows = model.rows()
    assert len(rows) == 7 and all(row.count("|") == 6 for row in rows), rows
    missing = [row for row in rows if row not in table.splitlines()]
    assert not missing, missing
