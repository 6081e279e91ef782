"""unishmem._config: one table of UNISHMEM_* settings, its checks, and docs/settings.md made from it."""

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

import unishmem
from unishmem import _config

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYSRC = ROOT / "pysrc" / "unishmem"


@pytest.fixture
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("UNISHMEM_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_docs_settings_md_is_the_table():
    proc = subprocess.run(
        [sys.executable, "-m", "unishmem", "settings"], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout == _config.markdown()
    assert (ROOT / "docs" / "settings.md").read_text() == proc.stdout, (
        "docs/settings.md is out of date: run `unishmem settings > docs/settings.md`"
    )
    for name in (*_config.SETTINGS, *_config.PROTOCOL):
        assert f"| `{name}` |" in proc.stdout, name


def test_every_variable_the_package_names_is_in_a_table():
    named = set()
    for path in PYSRC.rglob("*.py"):
        named |= set(re.findall(r"\bUNISHMEM_[A-Z0-9_]+", path.read_text()))
    assert named, "the scan found no variables"
    unknown = named - set(_config.SETTINGS) - set(_config.PROTOCOL)
    assert not unknown, f"UNISHMEM_* variables in pysrc that neither table documents: {sorted(unknown)}"


def test_only_config_reads_the_environment_for_unishmem_variables():
    # os.environ.get("UNISHMEM_X"), os.environ["UNISHMEM_X"], os.getenv("UNISHMEM_X"), "UNISHMEM_X" in os.environ
    read = re.compile(
        r"""(environ\.get\(|environ\[|getenv\()\s*["']UNISHMEM_|["']UNISHMEM_\w+["']\s+in\s+os\.environ"""
    )
    offenders = []
    for path in PYSRC.rglob("*.py"):
        if path.name == "_config.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if read.search(line):
                offenders.append(f"{path.relative_to(PYSRC)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_unset_settings_have_their_defaults(clean_env):
    # the defaults the README has always given
    assert _config.get("UNISHMEM_BACKEND") == "auto"
    assert _config.get("UNISHMEM_SYMMETRIC_SIZE") == 1024**3
    assert _config.seconds("UNISHMEM_WAIT_TIMEOUT") == 300
    assert _config.seconds("UNISHMEM_STALL_WARN") == 30
    assert _config.seconds("UNISHMEM_DEADLOCK_TIMEOUT") == 5
    assert _config.seconds("UNISHMEM_BOOTSTRAP_TIMEOUT") == 120
    assert _config.seconds("UNISHMEM_HANG_TIMEOUT") == 0
    assert _config.get("UNISHMEM_DEBUG_WAITS") is False
    assert _config.get("UNISHMEM_INTERPRET_RESIDENT") == 64
    assert _config.get("UNISHMEM_SECRET") is None
    assert _config.get("UNISHMEM_COMM_WARPS") == 4 and _config.get("UNISHMEM_COPY_ENGINE") is False
    # a setting left unset is not a choice made: measured defaults may decide (NOTE [measured defaults])
    assert not _config.given("UNISHMEM_COMM_WARPS")
    clean_env.setenv("UNISHMEM_COMM_WARPS", "4")
    assert _config.given("UNISHMEM_COMM_WARPS")
    # a setting set for a block, then as it was: set, or unset
    with _config.setting("UNISHMEM_COMM_WARPS", "8"), _config.setting("UNISHMEM_RACE_SEED", "5"):
        assert _config.get("UNISHMEM_COMM_WARPS") == 8 and _config.get("UNISHMEM_RACE_SEED") == 5
    assert _config.get("UNISHMEM_COMM_WARPS") == 4 and not _config.given("UNISHMEM_RACE_SEED")
    assert _config.team_arena(1024**3) == 64 * 1024**2  # at most 64 MiB
    assert _config.team_arena(64 * 1024**2) == 4 * 1024**2  # a sixteenth of the heap
    assert {_config.protocol(name) for name in _config.PROTOCOL} == {None}


@pytest.mark.parametrize(
    "name, text, value",
    [
        ("UNISHMEM_BACKEND", "host", "host"),
        ("UNISHMEM_SYMMETRIC_SIZE", "2G", 2 * 1024**3),
        ("UNISHMEM_SYMMETRIC_SIZE", "4096", 4096),
        ("UNISHMEM_WAIT_TIMEOUT", "1.5", 1.5),
        ("UNISHMEM_STALL_WARN", "0", 0.0),
        ("UNISHMEM_DEBUG_WAITS", "1", True),
        ("UNISHMEM_DEBUG_WAITS", "0", False),
        ("UNISHMEM_DEBUG_WAITS", "", False),
        ("UNISHMEM_INTERPRET_RESIDENT", " 3 ", 3),
        ("UNISHMEM_TEAM_ARENA", "0", 0),
        ("UNISHMEM_TEAM_ARENA", "16M", 16 * 1024**2),
        ("UNISHMEM_SECRET", "s3cret", "s3cret"),
        ("UNISHMEM_SECRET", "", None),
        ("UNISHMEM_COMM_WARPS", " 8", 8),
        ("UNISHMEM_RACE_SEED", "0", 0),
        ("UNISHMEM_COPY_ENGINE", "1", True),
        ("UNISHMEM_GEMM_TILE", " 128X256x64", (128, 256, 64)),
        ("UNISHMEM_RACE_CHECK", "1", "raise"),
        ("UNISHMEM_RACE_CHECK", "report", "report"),
        ("UNISHMEM_RACE_CHECK", "0", None),
    ],
)
def test_good_values_are_read(clean_env, name, text, value):
    clean_env.setenv(name, text)
    assert _config.get(name) == value
    if name == "UNISHMEM_TEAM_ARENA":
        assert _config.team_arena(1024**3) == value


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("UNISHMEM_BACKEND", "cuda", "UNISHMEM_BACKEND='cuda' is not one of auto, host, nvshmem, rocshmem"),
        ("UNISHMEM_SYMMETRIC_SIZE", "lots", "UNISHMEM_SYMMETRIC_SIZE: heap size 'lots' is not a byte count"),
        ("UNISHMEM_SYMMETRIC_SIZE", "0", "UNISHMEM_SYMMETRIC_SIZE: heap size '0' must be positive"),
        ("UNISHMEM_WAIT_TIMEOUT", "inf", "UNISHMEM_WAIT_TIMEOUT='inf' is not a positive number of seconds"),
        ("UNISHMEM_BOOTSTRAP_TIMEOUT", "", "UNISHMEM_BOOTSTRAP_TIMEOUT='' is not a positive number of seconds"),
        ("UNISHMEM_HANG_TIMEOUT", "-2", "UNISHMEM_HANG_TIMEOUT='-2' is not a number of seconds >= 0"),
        ("UNISHMEM_DEBUG_WAITS", "yes", "UNISHMEM_DEBUG_WAITS='yes' is not 0 or 1"),
        ("UNISHMEM_INTERPRET_RESIDENT", "0", "UNISHMEM_INTERPRET_RESIDENT='0' is not a whole number of programs"),
        ("UNISHMEM_TEAM_ARENA", "-1", "UNISHMEM_TEAM_ARENA='-1' is not a byte count"),
        ("UNISHMEM_COMM_WARPS", "3", "UNISHMEM_COMM_WARPS='3' is not a power of two from 1 to 32"),
        ("UNISHMEM_RACE_SEED", "-1", "UNISHMEM_RACE_SEED='-1' is not a whole number >= 0"),
        ("UNISHMEM_COMM_WARPS", "64", "UNISHMEM_COMM_WARPS='64' is not a power of two from 1 to 32"),
        ("UNISHMEM_GEMM_TILE", "128x96x64", "UNISHMEM_GEMM_TILE='128x96x64' is not BLOCK_MxBLOCK_NxBLOCK_K"),
        ("UNISHMEM_GEMM_TILE", "128x128", "UNISHMEM_GEMM_TILE='128x128' is not BLOCK_MxBLOCK_NxBLOCK_K"),
        ("UNISHMEM_RACE_CHECK", "yes", "UNISHMEM_RACE_CHECK='yes' is not 0, 1 or report"),
    ],
)
def test_bad_values_name_the_variable_and_the_value(clean_env, name, text, message):
    clean_env.setenv(name, text)
    with pytest.raises(ValueError, match=re.escape(message)):
        _config.get(name)


def test_init_names_a_bad_backend_variable(clean_env):
    clean_env.setenv("UNISHMEM_BACKEND", "cuda")
    with pytest.raises(ValueError, match=re.escape("UNISHMEM_BACKEND='cuda' is not one of auto, host")):
        unishmem.init()
    with pytest.raises(unishmem.NotInitializedError):
        unishmem.runtime()


def test_accessors_refuse_names_outside_their_table():
    with pytest.raises(KeyError):
        _config.get("UNISHMEM_WAIT_TIMOUT")
    with pytest.raises(KeyError, match="UNISHMEM_WARPS is not a setting"):
        _config.given("UNISHMEM_WARPS")
    with pytest.raises(KeyError, match="UNISHMEM_SEED is not a setting"), _config.setting("UNISHMEM_SEED", "1"):
        pass
    with pytest.raises(TypeError, match="UNISHMEM_TEAM_ARENA is not a setting in seconds"):
        _config.seconds("UNISHMEM_TEAM_ARENA")
    with pytest.raises(KeyError, match="UNISHMEM_BACKEND is not a variable unishmem run sets"):
        _config.protocol("UNISHMEM_BACKEND")


def test_config_is_a_leaf_that_runs_without_the_package():
    """`unishmem settings` prints its docs with no extension built: _config imports nothing of unishmem."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('config_alone', {str(PYSRC / '_config.py')!r})\n"
        "m = sys.modules['config_alone'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
        "sys.stdout.write(m.markdown())\n"
        "assert not [n for n in sys.modules if n.startswith(('unishmem', 'torch', 'triton'))], sorted(sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == _config.markdown()


def test_config_constants_match_their_owners():
    from unishmem import backends

    assert _config.BACKEND_NAMES == tuple(backends.BACKENDS)
    assert _config.MAX_RESIDENT_PROGRAMS == backends.native_module("host").max_resident_programs


# ---- every variable the package reads or sets is in docs/settings.md ---------------------------
# Found in the code, not in the tables: each module's accesses to the environment (os.environ, os.getenv,
# and dicts made from os.environ for a child process), with the name resolved where the code spells it
# (a literal, a loop over a literal tuple, a module constant). Where a module reaches the environment
# through a name that cannot be resolved so (a function's argument, a registry field), every string in
# it, and in the package modules it imports, shaped like a variable counts as one, but for NOT_VARIABLES.

VARIABLE_SHAPE = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)+")
NOT_VARIABLES = {
    "SC_OPEN_MAX": "an os.sysconf name (launcher.py)",
    "SC_CLK_TCK": "an os.sysconf name (bench/jobs.py)",
    "MODULE_OR_FILE": "an argparse metavar (cli.py)",
}
_GETTERS = ("get", "pop", "setdefault")  # E.m(name, ...)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _literal_strings(node) -> list[str] | None:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return [e.value for e in node.elts]
    return None


def environment_reads(source: str) -> tuple[set[str], bool]:
    """The variables `source` reads or sets, and whether it reaches the environment through a name
    that this cannot resolve."""
    tree = ast.parse(source)
    from_os = {  # `from os import environ, getenv`
        a.name: a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "os"
        for a in n.names
    }

    def os_attr(node, attr: str) -> bool:
        """os.<attr>, or its name where `from os import` brought it."""
        if isinstance(node, ast.Name):
            return attr in from_os and node.id == from_os[attr]
        return (
            isinstance(node, ast.Attribute)
            and node.attr == attr
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        )

    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    constants = {}  # module-level NAME = "X" or NAME = ("X", "Y")
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                constants[node.targets[0].id] = value.value
            elif _literal_strings(value) is not None:
                constants[node.targets[0].id] = _literal_strings(value)

    def environ(node) -> bool:
        return os_attr(node, "environ")

    def copy_of_environ(value) -> bool:
        """dict(os.environ, ...), os.environ.copy(), {**os.environ}, {k: v for k, v in os.environ.items()}."""
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict":
            return any(environ(a) or (isinstance(a, ast.Name) and a.id in copies) for a in value.args)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "copy":
            return environ(value.func.value)
        if isinstance(value, ast.Dict):
            return any(k is None and environ(v) for k, v in zip(value.keys, value.values))
        if isinstance(value, ast.DictComp):
            return any(environ(n) for g in value.generators for n in ast.walk(g.iter))
        return False

    copies: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and copy_of_environ(node.value):
            copies |= {t.id for t in node.targets if isinstance(t, ast.Name)}

    def mapping(node) -> bool:
        return environ(node) or (isinstance(node, ast.Name) and node.id in copies)

    names: set[str] = set()
    opaque = False

    def key(node) -> None:
        nonlocal opaque
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
            return
        if isinstance(node, ast.Name):
            # the innermost loop or comprehension that binds it, over a literal tuple
            at = node
            while at in parent:
                at = parent[at]
                loops = [at] if isinstance(at, ast.For) else at.generators if isinstance(at, _COMPREHENSIONS) else []
                for loop in loops:
                    if isinstance(loop.target, ast.Name) and loop.target.id == node.id:
                        found = _literal_strings(loop.iter)
                        if found is None:
                            opaque = True
                        else:
                            names.update(found)
                        return
            if isinstance(constants.get(node.id), str):
                names.add(constants[node.id])
                return
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and isinstance(constants.get(node.value.id), list)
            and isinstance(node.slice, ast.Constant)
        ):
            names.add(constants[node.value.id][node.slice.value])
            return
        opaque = True

    def keywords(call) -> None:
        nonlocal opaque
        for k in call.keywords:
            if k.arg is None:
                opaque = True  # **mapping
            else:
                names.add(k.arg)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if any(os_attr(func, f) for f in ("getenv", "putenv", "unsetenv")):
                key(node.args[0])
            elif isinstance(func, ast.Attribute) and mapping(func.value) and func.attr in _GETTERS:
                key(node.args[0])
            elif isinstance(func, ast.Attribute) and mapping(func.value) and func.attr == "update":
                keywords(node)
                for arg in node.args:
                    if isinstance(arg, ast.Dict) and None not in arg.keys:
                        for k in arg.keys:
                            key(k)
                    else:
                        opaque = True
            elif copy_of_environ(node):
                keywords(node)
        elif isinstance(node, ast.Subscript) and mapping(node.value):
            key(node.slice)
        elif isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and mapping(right):
                    key(node.left)
    return names, opaque


def _shaped_like_variables(source: str) -> set[str]:
    tree = ast.parse(source)
    exported = {  # __all__'s strings name Python objects
        n
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        for n in ast.walk(node.value)
    }
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and VARIABLE_SHAPE.fullmatch(n.value)
        and n not in exported
    } - set(NOT_VARIABLES)


def _package_imports(path: pathlib.Path, package: pathlib.Path) -> list[pathlib.Path]:
    """The modules of the package that `path` imports (relative imports, `from . import x` included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            stem = base.joinpath(*node.module.split(".")) if node.module else base
            for candidate in ([stem] if node.module else []) + [stem / a.name for a in node.names]:
                for file in (candidate.with_suffix(".py"), candidate / "__init__.py"):
                    if file.is_file() and package in file.parents:
                        found.append(file)
    return found


def package_environment(package: pathlib.Path = PYSRC) -> dict[str, set[str]]:
    """Every variable the modules under `package` read or set -> the modules where it was found."""
    where: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        names, opaque = environment_reads(path.read_text())
        if opaque:
            for module in (path, *_package_imports(path, package)):
                if module.name != "_config.py":  # its strings are the tables this checks
                    names |= _shaped_like_variables(module.read_text())
        for name in names:
            where.setdefault(name, set()).add(str(path.relative_to(package)))
    return where


def _tabled() -> set[str]:
    return {
        *_config.SETTINGS,
        *_config.PROTOCOL,
        *(n for _, rows in _config.FOREIGN.values() for r in rows for n in r.names),
    }


@pytest.mark.parametrize(
    "source",
    [
        'os.environ.get("X_Y")',
        'os.environ.get("X_Y", "0")',
        'os.environ["X_Y"]',
        'os.getenv("X_Y")',
        'from os import environ\nenviron.get("X_Y")',
        'from os import getenv as g\ng("X_Y")',
        '"X_Y" in os.environ',
        '"X_Y" not in os.environ',
        'os.environ.setdefault("X_Y", "1")',
        'os.environ.pop("X_Y", None)',
        'os.environ["X_Y"] = "1"',
        'del os.environ["X_Y"]',
        'os.putenv("X_Y", "1")',
        'os.environ.update(X_Y="1")',
        'os.environ.update({"X_Y": "1"})',
        '[os.environ.get(v) for v in ("X_Y", "OTHER")]',
        'all(v in os.environ for v in ("X_Y",))',
        'for v in ("X_Y",):\n    os.environ.get(v)',
        'NAMES = ("A_B", "X_Y")\nos.environ.get(NAMES[1])',
        'NAME = "X_Y"\nos.getenv(NAME)',
        'env = dict(os.environ)\nenv.setdefault("X_Y", "1")',
        'env = {k: v for k, v in os.environ.items() if k}\nenv.update(X_Y="1")',
        'env = dict(os.environ, X_Y="1")',
    ],
)
def test_the_scan_finds_each_form_of_access(source):
    names, opaque = environment_reads(source)
    assert "X_Y" in names and not opaque, (names, opaque)


@pytest.mark.parametrize(
    "source",
    [
        "def f(name):\n    return os.environ.get(name)",
        "def f(names):\n    return [os.environ[n] for n in names]",
        "os.environ.update(env)",
        "env = dict(os.environ, **extra)",
        "for rank, size in PAIRS:\n    rank in os.environ",
    ],
)
def test_the_scan_says_when_a_name_hides_the_variable(source):
    assert environment_reads(source)[1]


def test_a_new_variable_anywhere_in_the_package_is_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "mod.py").write_text('import os\nFLAG = os.environ.get("SOME_NEW_VAR")\n')
    (package / "names.py").write_text('HIDDEN = "ANOTHER_NEW_VAR"\nNOT_ONE = "plain text"\n')
    (package / "reader.py").write_text(
        "import os\nfrom .names import HIDDEN\n\ndef read(name):\n    return os.getenv(name)\n"
    )
    found = package_environment(package)
    assert found == {"SOME_NEW_VAR": {"sub/mod.py"}, "ANOTHER_NEW_VAR": {"reader.py"}}
    assert not set(found) & _tabled()


def test_every_variable_the_package_reads_or_sets_is_in_docs_settings_md():
    found = package_environment()
    # what the scan must see, or it has gone blind: a literal read, a loop's, a registry's, a child's
    assert {"ROCM_PATH", "RANK", "OMPI_MCA_ess_base_jobid", "NVSHMEM_SYMMETRIC_SIZE", "OMP_NUM_THREADS"} <= set(found)
    missing = {name: sorted(where) for name, where in found.items() if name not in _tabled()}
    assert not missing, f"variables the package reads or sets that docs/settings.md does not name: {missing}"
    docs = (ROOT / "docs" / "settings.md").read_text()
    assert not [name for name in found if f"`{name}`" not in docs]


def test_every_other_tools_variable_in_the_table_is_in_the_code():
    listed = {n for _, rows in _config.FOREIGN.values() for r in rows for n in r.names}
    stale = listed - set(package_environment())
    assert not stale, f"FOREIGN names variables the package no longer reads or sets: {sorted(stale)}"
    assert not listed & (set(_config.SETTINGS) | set(_config.PROTOCOL))


def test_what_the_other_tools_table_says_matches_the_code(monkeypatch):
    from unishmem import backends, vendor_libs

    assert backends.get("nvshmem").single_host_env == (("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", _config.LOOPBACK),)
    monkeypatch.delenv("ROCM_PATH", raising=False)
    assert str(vendor_libs.rocm_path()) == "/opt/rocm"
