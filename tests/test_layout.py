"""The package's structure: every numbering it shares with C++ has one owner that every copy matches,
and its modules import each other without circles (docs/design.md, "Source layout")."""

import ast
import importlib
import pathlib

import pytest
import triton.language as tl
from spmd import spmd

from unishmem import backends, compile, enums
from unishmem.language import _debug, _vendor

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "pysrc" / "unishmem"


def _built_modules():
    """The extension modules this build has (host always; nvshmem/rocshmem where their SDK was found)."""
    found = []
    for name in backends.NAMES:
        try:
            found.append((name, importlib.import_module(backends.get(name).module)))
        except ImportError:
            continue
    return found


@pytest.mark.parametrize("backend,module", _built_modules(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_cpp_numberings_are_enums_py(backend, module):
    """NOTE [enum values]: the extension exports its C++ enumerators under enums.py's names."""
    cpp = module.enum_values
    ours = {
        "DTYPES": enums.DTYPES,
        "SIGNAL": {m.name: int(m) for m in enums.SIGNAL},
        "CMP": {m.name: int(m) for m in enums.CMP},
        "REDUCE_OPS": enums.REDUCE_OPS,
        "ATOMIC_OPS": enums.ATOMIC_OPS,
    }
    if backend == "host":  # the host backend's WaitKind, which the debug wait table reuses
        ours["WAIT"] = {m.name: int(m) for m in enums.WAIT}
    assert set(cpp) == set(ours)
    for name, values in ours.items():
        assert dict(cpp[name]) == dict(values), name


def test_every_copy_of_a_numbering_matches_its_owner():
    # The vendor tables map every value of our enums, and only those, for each vendor.
    for vendor in _vendor.CMP_VALUES:
        assert set(_vendor.CMP_VALUES[vendor]) == {int(m) for m in enums.CMP}, vendor
        assert set(_vendor.SIGNAL_VALUES[vendor]) == {int(m) for m in enums.SIGNAL}, vendor
    # The debug wait table's dtype field (NOTE [debug waits]) uses the DType codes.
    assert {str(ty): code for ty, code in _debug._DTYPES.items()} == {n: enums.DTYPES[n] for n in enums.WAIT_DTYPES}
    assert all(isinstance(ty, tl.dtype) for ty in _debug._DTYPES)
    # `unishmem compile`'s targets compile with their vendor's warp width.
    for target, (triton_backend, _, warp) in compile.TARGETS.items():
        assert warp == _vendor.WARP_SIZE[_vendor.VENDOR_OF_BACKEND[triton_backend]], target


def _module_name(path: pathlib.Path) -> str:
    parts = ["unishmem", *path.relative_to(PKG).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(path: pathlib.Path) -> str:
    """The package a module's relative imports start from."""
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module a `from ... import` statement in `package` names."""
    base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
    return ".".join(base + ([node.module] if node.module else []))


def _imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The package modules `path` imports, at any depth (inside functions and under TYPE_CHECKING too: a
    circle that only the type checker follows is still a circle for a reader). `from pkg import sub`
    counts as sub."""
    name, package = _module_name(path), _package(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _from_module(node, package)
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_module_of_the_package_imports_itself_round_a_circle():
    graph = _graph()
    assert graph["unishmem._config"] == set(), "_config.py must stay a leaf"

    def circle_from(start):
        """A path back to `start`, if there is one (depth-first)."""
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return path + [start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
        return None

    circles = [c for c in map(circle_from, sorted(graph)) if c]
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    return {name: _imports(path, set(files)) for name, path in files.items()}


DESIGN = ROOT / "docs" / "design.md"
MAP_START, MAP_END = "<!-- layers: drawn by tests/test_layout.py -->", "<!-- end of layers -->"


def _layers() -> str:
    """The package's modules by layer, drawn from the import graph: a module's layer is one above the
    highest of those it imports (at any depth, under TYPE_CHECKING too), the leaves' is 0."""
    graph, layer = _graph(), {}

    def of(name):
        if name not in layer:
            layer[name] = 1 + max((of(d) for d in graph[name]), default=-1)
        return layer[name]

    rows = {}
    for name in sorted(graph):
        rows.setdefault(of(name), []).append(name.removeprefix("unishmem.") if name != "unishmem" else name)
    body = "\n".join(f"{n:>2}  {', '.join(rows[n])}" for n in sorted(rows))
    return f"{MAP_START}\n```\n{body}\n```\n{MAP_END}"


def test_the_design_pages_layers_are_the_codes():
    """docs/design.md's dependency order is drawn from the code: `python tests/test_layout.py` redraws it."""
    text = DESIGN.read_text()
    start, end = text.index(MAP_START), text.index(MAP_END) + len(MAP_END)
    assert text[start:end] == _layers(), "docs/design.md's layers drifted: run `python tests/test_layout.py`"


def test_the_design_pages_layout_names_every_module():
    """docs/design.md's source layout names every module of the package (a new one is placed there)."""
    text = DESIGN.read_text()
    layout = text[text.index("## Source layout") : text.index("## How the Python modules depend")]
    modules = [p for p in sorted(PKG.rglob("*.py*")) if p.suffix in (".py", ".pyi")]
    assert [str(p.relative_to(PKG)) for p in modules if p.name not in layout] == []


def test_no_kernel_module_imports_another_kernel_modules_private_names():
    """The kernels' frame (docs/kernels.md, "Writing a kernel"): what the kernels share lives in the
    kernels' shared private modules (_frame.py, _calls.py, _routing.py, _ops.py: a leading underscore in
    the module's name), under names without one; a name with a leading underscore belongs to its module.
    So no module under unishmem/kernels/ imports, by any `from ... import` statement at any depth
    (relative or absolute, inside functions too), a name with a leading underscore from another module
    under unishmem/kernels/, be it a kernel module (collectives.py, gemm.py, moe.py, functional.py) or a
    shared one. A submodule imported as such (`from . import _ops`) is a module, not a name, and may be;
    so may any name under an alias of its own (`import op_team as _team`: the name is op_team)."""
    kernels = PKG / "kernels"
    modules = {_module_name(p) for p in PKG.rglob("*.py")}
    found = []
    for path in sorted(kernels.rglob("*.py")):
        name = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = _from_module(node, _package(path))
            if source == name or not (source + ".").startswith("unishmem.kernels."):
                continue
            private = [a.name for a in node.names if a.name.startswith("_") and f"{source}.{a.name}" not in modules]
            if private:
                found.append(f"{path.relative_to(PKG)}:{node.lineno}: {', '.join(private)} from {source}")
    assert not found, "private names of another kernel module:\n" + "\n".join(found)


def test_each_hot_call_takes_its_methods_arguments():
    """NOTE [hot paths]: hot_<method> (fast_calls.cpp) takes the hot path's address, then the Runtime
    method's parameters in order; called with one too many it names the count it takes."""
    import inspect
    import re

    from unishmem import _hot
    from unishmem._runtime import Runtime

    module = importlib.import_module(backends.get("host").module)
    for name, fast in _hot.HOT_METHODS.items():
        params = list(inspect.signature(getattr(Runtime, name)).parameters)[1:]  # self excluded
        with pytest.raises(TypeError, match=r"expected (\d+) arguments") as e:
            getattr(module, f"hot_{name}")(*[None] * (len(params) + 2))
        assert int(re.search(r"expected (\d+)", str(e.value)).group(1)) == 1 + len(params), (name, params)
        assert fast is None or callable(getattr(module, fast)), name


def _lines(paths, skip: str):
    """(where, line) of every line of `paths` but those of the file named `skip`."""
    for path in paths:
        if path.name != skip:
            for number, line in enumerate(path.read_text().splitlines(), 1):
                yield f"{path.relative_to(ROOT)}:{number}", line


# The Runtime's public face (NOTE [private core]): the host API of the contract (../shared/docs/API.md,
# "Process-level runtime" to "Kernels"), as a user reaches it on a Runtime ...
API = {
    "backend", "my_pe", "n_pes", "device", "version", "finalize",
    "empty", "zeros", "full", "empty_like", "signals", "free", "is_symmetric", "peer",
    "team_world", "team_node",
    "put", "get", "put_signal", "signal_op", "signal_wait_until", "signal_wait_until_on_stream", "signal_fetch",
    "quiet", "fence",
    "atomic_fetch_add", "atomic_add", "atomic_fetch", "atomic_set", "atomic_swap", "atomic_compare_swap",
    "atomic_fetch_inc",
    "barrier_all", "sync_all", "barrier", "sync", "broadcast", "fcollect", "alltoall", "reduce", "reducescatter",
    "wait_until_all", "wait_until_any", "wait_until_some", "free_workspaces",
}  # fmt: skip
# ... the host forms of the device library's other point-to-point calls (docs/device-library.md) ...
MORE_CALLS = {
    "wait_until", "test", "atomic_inc",
    "atomic_fetch_and", "atomic_and", "atomic_fetch_or", "atomic_or", "atomic_fetch_xor", "atomic_xor",
}  # fmt: skip
# ... and read-only facts.
FACTS = {"heap_base", "heap_size", "finalized", "launcher"}
# What the Runtime carried before it had a core: a user reaching one gets an AttributeError.
WIRING = (
    "native", "heap", "hot_path", "workspaces", "diagnostics", "module_init", "bootstrap", "heap_of",
    "checked_team", "kernel_teams", "signal_args", "checked", "check_active", "runtime",
)  # fmt: skip


@spmd(sizes=(1,))
def test_the_runtime_is_the_users_object(rt):
    """NOTE [private core]: a Runtime's public names are the API and its facts, nothing else; the facts
    cannot be assigned, and the wiring is the core's."""
    import pytest

    assert {name for name in dir(rt) if not name.startswith("_")} == API | MORE_CALLS | FACTS
    for name in WIRING:
        with pytest.raises(AttributeError):
            getattr(rt, name)
        with pytest.raises(AttributeError):
            getattr(rt.team_world, name)
    for name in FACTS | {"backend", "my_pe", "n_pes", "device", "version", "team_world", "team_node"}:
        with pytest.raises(AttributeError):
            setattr(rt, name, None)


def test_no_module_reaches_past_the_runtimes_api():
    """Outside _runtime.py, a Runtime (rt, self.rt, unishmem.runtime(), ...) is reached only by its public
    names, in the package, its tests, examples and scripts alike."""
    import re

    runtime = re.compile(
        r"(?<![\w.])(?:rt|self\.rt|runtime\(\)|unishmem\.runtime\(\)|_active\.runtime\(\)|_active\.current\(\))"
        r"\.(\w+)"
    )
    paths = [p for d in ("pysrc", "tests", "examples", "scripts") for p in (ROOT / d).rglob("*.py")]
    found = [
        f"{where}: {line.strip()}"
        for where, line in _lines(paths, "_runtime.py")
        for name in runtime.findall(line)
        if name not in API | MORE_CALLS | FACTS
    ]
    assert not found, "\n".join(found)


def test_only_the_runtimes_module_touches_its_private_attributes():
    """NOTE [private core]: outside _runtime.py the package reaches a Runtime (rt, self.rt, ...) or a
    Team only through public attributes and methods, and outside _core.py nothing reads or assigns a
    Core's private attributes (a core reached as core, self._core, _active.core(), ...)."""
    import re

    runtime = re.compile(r"\b(rt|self\.rt|self\._rt|_rt|runtime\(\)|team|candidate|parent|node)\._[a-z]\w*")
    core = re.compile(r"\b(core|_core|self\.core|current_core\(\)|core\(\)|_core\(\))\._[a-z]\w*")
    package = list(PKG.rglob("*.py"))
    found = [f"{where}: {line.strip()}" for where, line in _lines(package, "_runtime.py") if runtime.search(line)]
    found += [f"{where}: {line.strip()}" for where, line in _lines(package, "_core.py") if core.search(line)]
    assert not found, "\n".join(found)


if __name__ == "__main__":  # redraw docs/design.md's layers
    text = DESIGN.read_text()
    start, end = text.index(MAP_START), text.index(MAP_END) + len(MAP_END)
    DESIGN.write_text(text[:start] + _layers() + text[end:])
