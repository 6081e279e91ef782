"""The kernel table (NOTE [kernel table] in unishmem/kernels/_table.py) is the one list of the kernels:
every other list (the exports, the custom ops, what `unishmem compile unishmem.kernels` compiles and the
scripts' kernel modules, the timings of `unishmem bench` and scripts/gpu_kernel_times.py, the index of
docs/kernels.md) equals its view, and a kernel that a kernel module defines or one of the lists has, but the
table lacks, is named here."""

import importlib
import importlib.util
import inspect
import json
import pathlib
import pkgutil
import re
import subprocess
import sys
import types

import pytest

pytest.importorskip("triton")
import torch  # noqa: E402
from torch._library.custom_ops import OPDEFS  # noqa: E402

import unishmem  # noqa: E402
import unishmem.kernels as K  # noqa: E402
from unishmem.compile import _kernels, _specs_of  # noqa: E402
from unishmem.kernels import _table, collectives, functional  # noqa: E402
from unishmem.triton_support import Kernel as JitKernel  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


def kernel_modules() -> list:
    """Every module of unishmem.kernels, imported."""
    return [importlib.import_module(f"{K.__name__}.{m.name}") for m in pkgutil.iter_modules(K.__path__)]


def kernel_functions() -> dict:
    """name -> function, found without the table: the public functions of the public modules of
    unishmem.kernels that take team= and group= (every kernel does; functional.py's names take group=)."""
    found = {}
    for module in kernel_modules():
        if module.__name__.rpartition(".")[2].startswith("_"):
            continue
        for name, value in vars(module).items():
            if (
                inspect.isfunction(value)
                and value.__module__ == module.__name__
                and not name.startswith("_")
                and {"team", "group"} <= set(inspect.signature(value).parameters)
            ):
                found[name] = value
    return found


def jit_kernels() -> set[str]:
    """The @unishmem.jit kernels the modules of unishmem.kernels define."""
    return {
        value.fn.__name__
        for module in kernel_modules()
        for value in vars(module).values()
        if isinstance(value, JitKernel) and value.fn.__module__ == module.__name__
    }


def registered_ops() -> set[str]:
    return {name.partition("::")[2] for name in torch._C._dispatch_get_all_op_names() if name.startswith("unishmem::")}


def docs_index() -> dict[str, list[str]]:
    """The kernels docs/kernels.md lists: its sections under "The kernels", the calls of its opening
    example, the first column of "Calling the kernels from a model"."""
    text = (ROOT / "docs/kernels.md").read_text()
    kernels = text.split("\n## The kernels\n")[1].split("\n## ")[0]
    example = text.split("```python\n")[1].split("```")[0]
    model = text.split("\n## Calling the kernels from a model\n\n")[1].split("\n\n")[0]
    return {
        "docs/kernels.md's sections": re.findall(r"^### (\w+)$", kernels, re.M),
        "docs/kernels.md's opening example": re.findall(r"\bK\.(\w+)\(", example),
        "docs/kernels.md's table of calls": [
            name for line in model.splitlines()[2:] for name in re.findall(r"`(\w+)`", line.split(" | ")[0])
        ],
    }


def script_modules() -> dict[str, list[str]]:
    """The kernel modules the CI scripts hand to `unishmem compile`."""
    gpu = (ROOT / "scripts/gpu_check.sh").read_text()
    rocm = re.search(r"^for m in ([\w ]+); do\n +run compile\.log", (ROOT / "scripts/ci_rocm.sh").read_text(), re.M)
    return {
        "scripts/gpu_check.sh --no-gpu's compiles": list(dict.fromkeys(re.findall(r"unishmem\.kernels\.\w+", gpu))),
        "scripts/ci_rocm.sh's compiles": [f"unishmem.kernels.{m}" for m in rocm.group(1).split()],
    }


def gpu_script():
    spec = importlib.util.spec_from_file_location("gpu_kernel_times", ROOT / "scripts/gpu_kernel_times.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def lists(tmp_path_factory):
    """Every list of the kernels that is not the table's own, found as its user finds it."""
    mp = pytest.MonkeyPatch()
    mp.delenv("TRITON_INTERPRET", raising=False)  # the bench worker sets it where there is no GPU
    try:
        from unishmem.bench import kernels_worker

        rt = types.SimpleNamespace(n_pes=2, my_pe=0, device=torch.device("cpu"))  # cases() only builds tensors
        bench_kernels = list(kernels_worker.cases(rt, 64 * 1024))
    finally:
        mp.undo()
    out = tmp_path_factory.mktemp("launch") / "launch.json"
    code = f"import json; from unishmem.bench import launch; json.dump(launch.measure(1, 1), open({str(out)!r}, 'w'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return {
        "unishmem bench --kernels": bench_kernels,
        "unishmem bench --launch": [r["kernel"] for r in json.loads(out.read_text())["rows"]],
        "scripts/gpu_kernel_times.py": list(gpu_script().kernels()),
        **docs_index(),
        **script_modules(),
    }


def disagreements(rows, lists: dict) -> dict[str, str]:
    """what -> how it differs from the view of the table `rows`; {} when every list agrees."""
    names = [k.name for k in rows]
    timings = list(dict.fromkeys(t for k in rows for t in k.timings))
    modules = list(dict.fromkeys(k.function.__module__ for k in rows))
    views = [  # (what, found, the table's view, whether the order counts)
        ("unishmem.kernels.__all__", K.__all__, names, True),
        ("the kernel functions of unishmem.kernels' modules", list(kernel_functions()), names, False),
        ("torch.ops.unishmem", sorted(registered_ops()), names, False),
        ("unishmem bench --launch", lists["unishmem bench --launch"], names, True),
        ("unishmem bench --kernels", lists["unishmem bench --kernels"], timings, False),
        ("scripts/gpu_kernel_times.py", lists["scripts/gpu_kernel_times.py"], timings, True),
        *((what, lists[what], names, True) for what in docs_index()),
        *((what, lists[what], modules, True) for what in script_modules()),
    ]
    found = {}
    for what, have, want, ordered in views:
        problem = _differ(
            [n for n in want if n not in have], [n for n in have if n not in want], "which the table has not"
        )
        if problem:
            found[what] = problem
        elif ordered and list(have) != list(want):
            found[what] = f"is {list(have)}, not in the table's order {list(want)}"
    # what `unishmem compile unishmem.kernels` compiles (the table modules' COMPILE) and what they define
    compiled, defined = set(_kernels(K)), jit_kernels()
    problem = _differ(sorted(defined - compiled), sorted(compiled - defined), "which no kernel module defines")
    if problem:
        found["unishmem compile unishmem.kernels"] = problem
    return found


def _differ(missing: list, extra: list, why_extra: str) -> str:
    return "; ".join(
        ([f"lacks {', '.join(map(repr, missing))}"] if missing else [])
        + ([f"has {', '.join(map(repr, extra))}, {why_extra}"] if extra else [])
    )


def test_every_list_of_the_kernels_is_the_tables(lists):
    found = disagreements(_table.KERNELS, lists)
    assert not found, "\n".join(f"{what}: {problem}" for what, problem in found.items())
    functions = kernel_functions()
    for row in _table.KERNELS:
        assert getattr(K, row.name) is row.function is functions[row.name], row.name
        op = OPDEFS[f"unishmem::{row.name}"]  # the row's own functions, registered
        assert (op._init_fn, op._abstract_fn, op._backward_fn, op._setup_context_fn) == (
            row.op.run,
            row.op.fake,
            row.op.backward,
            row.op.context,
        ), row.name
    # every kernel `unishmem compile unishmem.kernels` finds has a specification
    assert set(_specs_of(K, _kernels(K))) == set(_kernels(K))


def test_the_exports_type_checkers_read_are_the_tables():
    """unishmem.kernels exports the table's functions in a loop, which type checkers cannot follow: its
    TYPE_CHECKING imports name the same functions, each from the module that defines it."""
    import ast

    tree = ast.parse((ROOT / "pysrc" / "unishmem" / "kernels" / "__init__.py").read_text())
    guarded = [node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)]
    named = {
        alias.name: importlib.import_module(f"unishmem.kernels.{node.module}")
        for block in guarded
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert set(named) == {row.name for row in _table.KERNELS}
    for row in _table.KERNELS:
        assert getattr(named[row.name], row.name) is row.function, row.name


@pytest.mark.parametrize("row", _table.KERNELS, ids=lambda row: row.name)
def test_a_kernel_the_table_lacks_is_named_in_every_list(row, lists):
    rest = tuple(k for k in _table.KERNELS if k is not row)
    found = disagreements(rest, lists)
    per_kernel = [
        "unishmem.kernels.__all__",
        "the kernel functions of unishmem.kernels' modules",
        "torch.ops.unishmem",
        "unishmem bench --launch",
        *docs_index(),
    ]
    for what in per_kernel:
        assert repr(row.name) in found.get(what, ""), (what, found)
    for timing in set(row.timings) - {t for k in rest for t in k.timings}:  # its own timings
        for what in ("unishmem bench --kernels", "scripts/gpu_kernel_times.py"):
            assert repr(timing) in found.get(what, ""), (what, found)


def test_a_kernel_function_or_jit_kernel_outside_the_table_is_named(lists, monkeypatch):
    def broadcast(x, root=0, out=None, team=None, group=None):
        return x

    def _broadcast(x):
        pass

    broadcast.__module__ = collectives.__name__
    _broadcast.__module__ = functional.__name__  # a module no row lives in
    monkeypatch.setattr(collectives, "broadcast", broadcast, raising=False)
    monkeypatch.setattr(functional, "_broadcast", unishmem.jit(_broadcast), raising=False)
    found = disagreements(_table.KERNELS, lists)
    assert "'broadcast'" in found["the kernel functions of unishmem.kernels' modules"], found
    assert "'_broadcast'" in found["unishmem compile unishmem.kernels"], found
