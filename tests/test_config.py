"""unishmem._config: one table of UNISHMEM_* settings, its checks, and docs/settings.md made from it."""

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
