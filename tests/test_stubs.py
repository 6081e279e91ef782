"""language/__init__.pyi, the stub that type checkers and editors read in place of the generated
device functions: it is the generator's output, and it agrees with the live module."""

import ast
from pathlib import Path

import pytest

import unishmem.language as shl
from unishmem.language import _stubs

STUB = Path(shl.__file__).with_name("__init__.pyi")
TREE = ast.parse(STUB.read_text())
# the functions both stubs define: __init__.pyi re-exports the vendors' own from _externs.pyi
DEFS = {
    node.name: node
    for tree in (TREE, ast.parse(_stubs.EXTERNS_PATH.read_text()))
    for node in tree.body
    if isinstance(node, ast.FunctionDef)
}


def test_stub_is_the_generators_output():
    assert STUB.read_text() == _stubs.stub(), f"{STUB} is out of date: run `{_stubs.COMMAND}`"
    externs = _stubs.EXTERNS_PATH
    assert externs.read_text() == _stubs.externs_stub(), f"{externs} is out of date: run `{_stubs.COMMAND}`"


def test_the_device_function_reference_is_the_generators_output():
    page = Path(__file__).resolve().parent.parent / "docs" / "device-functions.md"
    assert page.read_text() == _stubs.reference(), f"{page} is out of date: run `{_stubs.COMMAND}`"
    for name in shl.FUNCTIONS:  # every public function has its row
        assert (
            f"| `{name}(" in page.read_text() or name == "consume_token" and "## consume_token" in page.read_text()
        ), name


def test_stub_defines_every_public_name():
    defined = set(DEFS)
    for node in TREE.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom):  # in a stub only `import x as x` re-exports x
            defined |= {a.asname for a in node.names if a.asname == a.name}
    # also what kernels and tests take from it beyond __all__
    public = set(shl.__all__) | {"FUNCTIONS", "ROWS", "ATOMICS", "device_function", "atomic_function"}
    assert not public - defined, f"missing from {STUB.name}: {sorted(public - defined)}"
    (exports,) = [n.value for n in TREE.body if isinstance(n, ast.Assign) and n.targets[0].id == "__all__"]
    assert ast.literal_eval(exports) == shl.__all__  # a star import takes the same names


@pytest.mark.parametrize("name", sorted(DEFS))
def test_stub_parameters_are_the_live_ones(name):
    # a generated builtin's signature is its `.signature` (Triton binds calls to it; inspect.signature
    # sees *args); _semantic and _generator are Triton's to pass
    live = getattr(shl, name).signature.parameters.values()
    live = [(p.name, p.default is not p.empty) for p in live if p.name not in ("_semantic", "_generator")]
    args = DEFS[name].args
    defaulted = {a.arg for a in args.args[len(args.args) - len(args.defaults) :]}
    assert [(a.arg, a.arg in defaulted) for a in args.args] == live
    assert not (args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg)
