"""tests/compile_cache.py: a result is reused only while everything that decides it is unchanged."""

import types

import pytest

pytest.importorskip("triton")
from compile_cache import CompileCache  # noqa: E402


def _config(directory):
    def mkdir(name):
        (directory / name).mkdir(exist_ok=True)
        return directory / name

    return types.SimpleNamespace(cache=types.SimpleNamespace(mkdir=mkdir))


def test_results_are_kept_by_the_bytes_of_what_decides_them(tmp_path):
    calls = []

    def compile_all(jobs):
        calls.append(sorted(jobs))
        return {name: {"llir": f"ir of {args[0]}", "names": {"b", "a"}} for name, args in jobs.items()}

    lib, copy, arg = tmp_path / "lib.bc", tmp_path / "copy.bc", tmp_path / "arg.ll"
    lib.write_bytes(b"bitcode 1")
    arg.write_bytes(b"an argument file")
    copy.write_bytes(b"an argument file")
    config = _config(tmp_path)

    def run(arg_path, **jobs):
        return CompileCache(config).run({k: ((k, "cuda", 90, str(arg_path)), [str(lib)]) for k in jobs}, compile_all)

    first = run(arg, k1=1, k2=1)
    assert first == {n: {"llir": f"ir of {n}", "names": {"a", "b"}} for n in ("k1", "k2")}  # sets come back as sets
    assert run(arg, k1=1, k2=1) == first and calls == [["k1", "k2"]]  # kept
    assert run(copy, k1=1) == {"k1": first["k1"]} and len(calls) == 1  # a file argument counts by its bytes
    lib.write_bytes(b"bitcode 2")
    run(arg, k1=1, k2=1)
    assert calls[1:] == [["k1", "k2"]]  # the linked library changed: compiled again
    uncached = CompileCache(types.SimpleNamespace(cache=None))  # pytest -p no:cacheprovider
    uncached.run({"k1": (("k1",), [])}, compile_all)
    uncached.run({"k1": (("k1",), [])}, compile_all)
    assert calls[2:] == [["k1"], ["k1"]]
