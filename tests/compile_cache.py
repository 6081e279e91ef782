"""Compile results kept by content, so that a rerun of the compile tests takes seconds.

A result is stored under a hash of everything that decides it: the compile job's arguments (a file
named in them counts by its bytes, not its path), the files the job links (bitcode), Triton's
version and TRITON_* settings, the sources of the unishmem package and the test files that hold the
kernels and the compile function. Anything else changed compiles again. The results live in pytest's
cache directory (`pytest --cache-clear` empties it; without the cacheprovider plugin nothing is kept),
so a fresh checkout compiles everything.
"""

from __future__ import annotations

import hashlib
import json
import os

import unishmem


def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _canonical(value):
    """value with each path of an existing file replaced by the hash of its bytes."""
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, str) and os.path.isfile(value):
        return "file " + _file_digest(value)
    return value if isinstance(value, (int, float, bool, type(None))) else repr(value)


def _package_sources() -> list[str]:
    root = os.path.dirname(unishmem.__file__)
    return sorted(
        os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.endswith((".py", ".ll", ".json"))
    )


class CompileCache:
    def __init__(self, config, *sources: str):
        import triton

        cache = getattr(config, "cache", None)
        self.dir = cache.mkdir("unishmem-compile") if cache is not None else None
        h = hashlib.sha256()
        h.update(triton.__version__.encode())
        h.update(json.dumps(sorted((k, v) for k, v in os.environ.items() if k.startswith("TRITON_"))).encode())
        for path in [*_package_sources(), *sources]:
            h.update(path.encode() + _file_digest(path).encode())
        self._salt = h.hexdigest()

    def triton_cache(self, *links: str) -> str | None:
        """A Triton cache directory for compiles linking `links` (Triton keys each kernel by its source,
        options and the bytes of its libraries, but not by unishmem's Python, which this directory is named by)."""
        if self.dir is None:
            return None
        name = hashlib.sha256(json.dumps([self._salt, [_file_digest(p) for p in links]]).encode()).hexdigest()
        path = os.path.join(self.dir, "triton-" + name)
        os.makedirs(path, exist_ok=True)
        return path

    def _path(self, job, links) -> str | None:
        if self.dir is None:
            return None
        text = json.dumps([self._salt, _canonical(job), [_file_digest(p) for p in links]])
        return os.path.join(self.dir, hashlib.sha256(text.encode()).hexdigest() + ".json")

    def run(self, jobs: dict, compile_all) -> dict:
        """{name: result} for jobs {name: (args, links)}: the stored ones, and compile_all({name: args})
        for the rest (it returns {name: result}, JSON-able but for sets, which come back as sets)."""
        results, missing = {}, {}
        for name, (args, links) in jobs.items():
            path = self._path(args, links)
            if path is not None and os.path.exists(path):
                with open(path) as f:
                    results[name] = _decode(json.load(f))
            else:
                missing[name] = args
        if missing:
            fresh = compile_all(missing)
            for name, result in fresh.items():
                path = self._path(*jobs[name])
                if path is not None:
                    with open(path + ".tmp", "w") as f:
                        json.dump(_encode(result), f)
                    os.replace(path + ".tmp", path)  # whole or not at all, should the session be killed
            results.update(fresh)
        return results


def _encode(result: dict) -> dict:
    return {k: {"set": sorted(v)} if isinstance(v, set) else v for k, v in result.items()}


def _decode(result: dict) -> dict:
    return {k: set(v["set"]) if isinstance(v, dict) and set(v) == {"set"} else v for k, v in result.items()}
