"""The package's structure: every numbering it shares with C++ has one owner that every copy matches,
and its modules import each other without circles (docs/design.md, "Source layout")."""

import ast
import importlib
import pathlib

import pytest
import triton.language as tl

from unishmem import backends, compile, enums
from unishmem.language import _debug, _vendor

PKG = pathlib.Path(__file__).resolve().parent.parent / "pysrc" / "unishmem"


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
    """The package modules `path` imports, at any depth (inside functions too), but not those imported
    only for type checking. `from pkg import sub` counts as sub."""
    name, package = _module_name(path), _package(path)
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {name: _imports(path, set(files)) for name, path in files.items()}
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


def test_only_the_runtimes_module_touches_its_private_attributes():
    """NOTE [runtime helpers]: outside _runtime.py the package reaches a Runtime (rt, self.rt, ...) or a
    Team only through public attributes and methods."""
    import re

    private = re.compile(r"\b(rt|self\.rt|self\._rt|_rt|runtime\(\)|team|candidate|parent|node)\._[a-z]\w*")
    found = [
        f"{path.relative_to(PKG)}:{number}: {line.strip()}"
        for path in PKG.rglob("*.py")
        if path.name != "_runtime.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert not found, "\n".join(found)
