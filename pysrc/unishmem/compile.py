"""`unishmem compile`: compile a module's @unishmem.jit kernels for named GPU targets on a machine with no
GPU, and say per kernel and target whether the vendor library linked, which vendor symbols are left for
module load, and which function the target's vendor lacks.

NOTE [COMPILE table]: a module declares how to compile its kernels in a module-level table

    COMPILE = {
        my_kernel: {"signature": {"out": "*fp32", "sig": "*u64", "n": "i32"},   # every run-time argument
                    "constexprs": {"BLOCK": 128},                              # every tl.constexpr one
                    "options": {"num_warps": 4},                               # triton.compile options
                    "target_options": {"gfx942": {"num_stages": 2}},           # a target's own, over them
                    "aligned": ["out", "sig", "n"]},                           # see below
        "other_kernel": [spec, spec],                                          # several specialisations
    }

keyed by the kernel (or its name), each value one specification or a list of them; `target_options`
(optional) gives a target options that replace those of `options` when compiling for it. Types are Triton's
signature strings (`*fp32`, `*i32`, `*u64`, `i32`, `i64`, `fp16`...). A tl.constexpr argument with a default
may be left out. `aligned` names the run-time arguments that a launch specialises as multiples of 16
(Triton's `tt.divisibility`: a pointer to 16-byte aligned data, an integer divisible by 16), on which
vectorised and pipelined loads depend; left out, it is every pointer argument, as a launch on torch
tensors has them; `[]` compiles as for unaligned data. The kernels compiled are the module's own
@unishmem.jit kernels (those defined in it) and any other that COMPILE names: unishmem.kernels' COMPILE is
its kernel modules' together (NOTE [kernel table] in unishmem/kernels/_table.py), so `unishmem compile
unishmem.kernels` compiles every kernel of the library.

Each (specialisation, target) compiles in a worker process (Triton's compiler keeps global state, and
two processes use both cores of a small CI runner), in a fresh Triton cache unless TRITON_CACHE_DIR is
set, so that every kernel really compiles.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import contextlib
import importlib
import importlib.util
import io
import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

# target name -> (Triton backend, arch, warp size); tests/test_registry.py pins the warp sizes to
# language/_vendor.py's WARP_SIZE (this module is read before Triton is imported)
TARGETS = {
    "sm_80": ("cuda", 80, 32),
    "sm_90": ("cuda", 90, 32),
    "sm_100": ("cuda", 100, 32),
    "gfx942": ("hip", "gfx942", 64),
    "gfx950": ("hip", "gfx950", 64),
}
DEFAULT_TARGETS = ("sm_90", "gfx942")
SPEC_KEYS = ("signature", "constexprs", "options", "target_options", "aligned")
WORKERS = 2


class SetupError(Exception):
    """What stops the whole run before anything compiles: a bad target, module or COMPILE table."""


def parse_targets(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise SetupError(f"--target {text!r} names no target; known targets: {', '.join(TARGETS)}")
    for name in names:
        if name not in TARGETS:
            raise SetupError(f"unknown target {name!r} in --target {text!r}; known targets: {', '.join(TARGETS)}")
    return list(dict.fromkeys(names))  # each once, in the order given


# ---- finding the kernels and their specialisations (in the workers) ----------------------------


def _load(ref: str):
    """The module `ref` names: a .py file (imported under its file name, its directory on sys.path as when
    run as a script, but not as __main__, so its main() does not run) or a dotted module name."""
    if _is_path(ref):
        path = Path(ref).resolve()
        # its file name, unless a module of that name is already loaded here (a file named like one)
        name = path.stem if path.stem not in sys.modules else f"_unishmem_compile_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise SetupError(f"{ref} is not a Python file: give the path of a .py file or a dotted module name")
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.parent))
        sys.modules[name] = module  # before it runs: dataclasses and pickling look it up there
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(ref)
    except ModuleNotFoundError as e:
        if e.name is not None and (ref == e.name or ref.startswith(e.name + ".")):
            raise SetupError(_no_module(ref)) from None
        raise


def _is_path(ref: str) -> bool:
    return ref.endswith(".py") or os.sep in ref


def _no_module(ref: str) -> str:
    return (
        f"no module named {ref!r} here: give a dotted module name importable from the current directory or "
        "sys.path, or the path of a .py file"
    )


def _kernels(module) -> dict:
    """name -> Kernel: the module's own @unishmem.jit kernels, then any other its COMPILE table names."""
    from .triton_support import Kernel

    found: dict[str, Kernel] = {}
    for value in vars(module).values():
        if isinstance(value, Kernel) and value.fn.__module__ == module.__name__:
            found.setdefault(value.fn.__name__, value)
    table = getattr(module, "COMPILE", {})
    if not isinstance(table, dict):
        raise SetupError(
            f"{module.__name__}.COMPILE must be a dict from kernel (or kernel name) to its "
            f"specification, not {type(table).__name__}"
        )
    for key in table:
        if isinstance(key, Kernel):
            found.setdefault(key.fn.__name__, key)
        elif not (isinstance(key, str) and key in found):
            raise SetupError(
                f"{module.__name__}.COMPILE has the key {key!r}, which is not a @unishmem.jit kernel "
                f"of the module (its kernels: {', '.join(found) or 'none'})"
            )
    return found


def _specs_of(module, kernels: dict) -> dict:
    """kernel name -> list of (signature, constexprs, options), checked against the kernel's arguments."""
    table = getattr(module, "COMPILE", {})
    specs = {}
    for key, value in table.items():
        name = key if isinstance(key, str) else key.fn.__name__
        where = f"{module.__name__}.COMPILE[{name}]"
        if name in specs:
            raise SetupError(
                f"{where} is given twice (as the kernel and as its name): give one entry, with a "
                "list of specifications for several"
            )
        entries = list(value) if isinstance(value, (list, tuple)) else [value]
        if not entries:
            raise SetupError(f"{where} is an empty list: give at least one specification")
        specs[name] = [
            _check_spec(kernels[name], entry, f"{where}" + (f"[{i}]" if len(entries) > 1 else ""))
            for i, entry in enumerate(entries)
        ]
    return specs


def _check_spec(kernel, spec, where: str):
    if not isinstance(spec, dict):
        raise SetupError(f"{where} must be a dict with keys {', '.join(SPEC_KEYS)}, not {type(spec).__name__}")
    unknown = set(spec) - set(SPEC_KEYS)
    if unknown:
        raise SetupError(f"{where} has unknown keys {sorted(unknown)}: the keys are {', '.join(SPEC_KEYS)}")
    if "signature" not in spec:
        raise SetupError(
            f'{where} has no "signature": give each run-time argument\'s Triton type, '
            'e.g. {"out": "*fp32", "n": "i32"}'
        )
    parts = {k: spec.get(k, {}) for k in ("signature", "constexprs", "options", "target_options")}  # "aligned": a list
    for k, v in parts.items():
        if not isinstance(v, dict):
            raise SetupError(f"{where}[{k!r}] must be a dict, not {type(v).__name__}")
    signature, constexprs, options, by_target = (dict(v) for v in parts.values())
    for target, extra in by_target.items():
        if target not in TARGETS or not isinstance(extra, dict):
            raise SetupError(
                f"{where}['target_options'] maps a target ({', '.join(TARGETS)}) to its options, not {target!r}: "
                f"{extra!r}"
            )
    options = {None: options, **{t: {**options, **extra} for t, extra in by_target.items()}}
    params = kernel.jit_function.params
    names = [p.name for p in params]
    for k in list(signature) + list(constexprs):
        if k not in names:
            raise SetupError(
                f"{where} names {k!r}, which is not an argument of {kernel.fn.__name__}({', '.join(names)})"
            )
    for p in params:
        if p.name in signature or p.name in constexprs:
            continue
        if p.is_constexpr and p.has_default:
            constexprs[p.name] = p.default  # as a launch that leaves it out
        elif p.is_constexpr:
            raise SetupError(f'{where} gives no value for the tl.constexpr argument {p.name!r}: add it to "constexprs"')
        else:
            raise SetupError(
                f'{where} gives no type for the argument {p.name!r}: add it to "signature" '
                '(a Triton type such as "*fp32" or "i32"), or to "constexprs" with a value'
            )
    for k, ty in signature.items():
        _check_type(ty, f"{where} gives {k!r} the type {ty!r}")
    aligned = _check_aligned(spec.get("aligned"), signature, where)
    for k in constexprs:
        signature[k] = "constexpr"  # Triton's ASTSource wants every argument in the signature
    # Triton's attrs: argument index -> its specialisation, as a launch computes it
    attrs = {(names.index(k),): [["tt.divisibility", 16]] for k in aligned}
    return signature, constexprs, options, attrs


def _check_aligned(aligned, signature: dict, where: str) -> list[str]:
    if aligned is None:
        return [k for k, ty in signature.items() if str(ty).startswith("*")]
    if not isinstance(aligned, (list, tuple)) or not all(isinstance(k, str) for k in aligned):
        raise SetupError(f"{where}['aligned'] must be a list of argument names, not {aligned!r}")
    for k in aligned:
        ty = signature.get(k)
        if not re.fullmatch(r"\*.+|[iu](8|16|32|64)", str(ty)):
            raise SetupError(
                f"{where}['aligned'] names {k!r}, which is not a pointer or integer argument in \"signature\" "
                f"({', '.join(f'{n}: {t}' for n, t in signature.items()) or 'empty'})"
            )
    return list(aligned)


def _check_type(ty, what: str) -> None:
    """A signature type Triton reads (its own parser, where this Triton has it): a typo fails here, named,
    rather than as a KeyError inside the compiler."""
    import triton.language as tl

    parse = getattr(tl, "str_to_ty", None)
    if parse is None or (isinstance(ty, str) and ty == "constexpr"):
        return
    try:
        parse(ty, None)
    except Exception:
        raise SetupError(
            f'{what}, which Triton does not know: use a Triton type such as "*fp32", "*fp16", '
            '"*bf16", "*i32", "*i64", "*u64", "i32", "i64", "fp32"'
        ) from None


def _how_to_declare(module, kernel) -> str:
    params = kernel.jit_function.params
    sig = ", ".join(f'"{p.name}": "..."' for p in params if not p.is_constexpr)
    cx = ", ".join(f'"{p.name}": ...' for p in params if p.is_constexpr)
    return (
        f"no signature declared for {kernel.fn.__name__}: add to {module.__name__} a table COMPILE = "
        f'{{{kernel.fn.__name__}: {{"signature": {{{sig}}}'
        + (f', "constexprs": {{{cx}}}' if cx else "")
        + '}} with Triton types such as "*fp32", "*u64", "i32" (see `unishmem compile --help`)'
    )


# ---- the workers -------------------------------------------------------------------------------

_worker: dict = {}  # in a worker: "module", "kernels", "specs", or "error"


def _init_worker(ref: str, env: dict) -> None:
    os.environ.update(env)
    try:
        module = _load(ref)
        kernels = _kernels(module)
        _worker.update(module=module, kernels=kernels, specs=_specs_of(module, kernels))
    except SetupError as e:
        _worker["error"] = str(e)
    except BaseException:  # the module itself failed: say where, as Python would
        _worker["error"] = f"importing {ref} failed:\n" + traceback.format_exc(limit=-4).rstrip()


def _discover():
    """[(kernel, index, label, {"signature": ..., "constexprs": ...} shown)], {kernel: why it cannot compile}."""
    if "error" in _worker:
        raise SetupError(_worker["error"])
    module, kernels, specs = _worker["module"], _worker["kernels"], _worker["specs"]
    jobs, problems = [], {}
    for name, kernel in kernels.items():
        if name not in specs:
            problems[name] = _how_to_declare(module, kernel)
            continue
        for i, (signature, constexprs, _, attrs) in enumerate(specs[name]):
            label = name if len(specs[name]) == 1 else f"{name}#{i}"
            names = list(kernel.jit_function.arg_names)
            shown = {
                "signature": {k: v for k, v in signature.items() if v != "constexpr"},
                "constexprs": {k: repr(v) for k, v in constexprs.items()},
                "aligned": [names[index] for (index,) in attrs],
            }
            jobs.append((name, i, label, shown))
    return jobs, problems


def _causes(e: BaseException) -> list[BaseException]:
    """A compile error and what it came from, outermost first: Triton wraps an error in one
    CompilationError per @triton.jit function it was inlined through."""
    chain: list[BaseException] = []
    cause: BaseException | None = e
    while cause is not None and all(cause is not seen for seen in chain):
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    return chain


def _not_available(e: BaseException):
    """The NotAvailableError that a compile error comes from, through Triton's CompilationError layers."""
    from .errors import NotAvailableError

    return next((c for c in _causes(e) if isinstance(c, NotAvailableError)), None)


def _compile_error(e: BaseException) -> str:
    """Where in the kernel the compile failed (the outermost error's source), led by why (the innermost
    error) when Triton's message left it out, as it does for an error inside a nested @triton.jit function."""
    root = _causes(e)[-1]
    where = f"{type(e).__name__}: {e}".strip()
    return where if str(root) in str(e) else f"{type(root).__name__}: {root}".strip() + "\n" + where


def _compile(name: str, index: int, target: str, out_dir: str | None) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from . import _triton_compat
    from .backends import by_triton_backend
    from .errors import BackendUnavailable
    from .triton_support import extern_libs

    backend, arch, warp = TARGETS[target]
    # its symbols all start with its name (nvshmem_, nvshmemx_, rocshmem_)
    vendor = by_triton_backend(backend)
    kernel = _worker["kernels"][name]
    signature, constexprs, by_target, attrs = _worker["specs"][name][index]
    options = by_target.get(target, by_target[None])
    result = _failed(target, None)
    try:
        libs = extern_libs(backend, arch)
    except BackendUnavailable as e:
        if backend == "cuda":  # NVSHMEM's bitcode comes with the `cuda` extra: without it nothing links
            result["error"] = f"cannot link NVSHMEM: {e}"
            return result
        # rocSHMEM's bitcode is built with ROCm only; a code object without it resolves at module load
        libs, result["note"] = {}, f"{e}: its symbols stay declarations, resolved at module load"
    options = dict(options, extern_libs=tuple({**libs, **dict(options.get("extern_libs") or {})}.items()))
    start = time.perf_counter()
    try:
        # Triton prints the whole PTX on a ptxas failure and warns about its settings: the error keeps
        # what matters, so the report stays readable
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            asm, assembled = _triton_compat.compile_asm(
                ASTSource(kernel.jit_function, signature=signature, constexprs=constexprs, attrs=attrs),
                GPUTarget(backend, arch, warp),
                options,
                linked=bool(libs),
            )
    except Exception as e:
        result["seconds"] = round(time.perf_counter() - start, 1)
        lacks = _not_available(e)
        if lacks is not None:
            result["lacks"] = {"function": lacks.function, "vendor": lacks.vendor}
            result["error"] = str(lacks)
        else:
            result["error"] = _compile_error(e)
            # ptxas names the first vendor function the bitcode did not provide
            result["unresolved"] = re.findall(rf"Unresolved extern function '({vendor.name}\w*)'", str(e))
        return result
    result["seconds"] = round(time.perf_counter() - start, 1)
    llir, binary = asm["llir"], asm.get(vendor.triton_binary, b"")
    if not assembled:  # NOTE [Triton releases]
        result["note"] = (
            f"{result['note']}; lowered to LLVM IR, not assembled: Triton {triton.__version__} cannot assemble "
            "a code object that calls an undefined function"
        )
    declared = sorted(set(re.findall(rf"^declare [^@]*@({vendor.name}\w*)\(", llir, re.M)))
    result.update(
        binary_bytes=len(binary), unresolved=declared, linked=bool(libs) and not declared, assembled=assembled
    )
    # linked; or, for HIP without rocSHMEM's bitcode here, its calls left as declarations for module load
    result["ok"] = result["linked"] or (not libs and bool(binary or not assembled))
    if libs and declared:
        result["error"] = f"linked, yet {', '.join(declared)} stay declared: the bitcode lacks them"
    if out_dir is not None:
        several = len(_worker["specs"][name]) > 1
        stem = Path(out_dir) / (f"{name}.{index}.{target}" if several else f"{name}.{target}")
        for path, data in ((f"{stem}.{vendor.triton_binary}", binary), (f"{stem}.llir", llir)):
            if not data:  # not assembled
                continue
            Path(path).write_bytes(data if isinstance(data, bytes) else data.encode())
            result["files"].append(path)
    return result


def _failed(target: str | None, error: str | None) -> dict:
    """A result row before anything succeeded (the fields every row of the report has)."""
    return {
        "target": target,
        "ok": False,
        "linked": False,
        "binary_bytes": 0,
        "assembled": False,
        "unresolved": [],
        "lacks": None,
        "error": error,
        "note": None,
        "files": [],
        "seconds": 0.0,
    }


# ---- the run -----------------------------------------------------------------------------------


def run(ref: str, targets: list[str], fast: bool = False, out_dir: str | None = None) -> dict:
    """Compile every kernel of module `ref` for each target; the report (see format_report)."""
    if _is_path(ref):
        if not os.path.isfile(ref):
            raise SetupError(f"no such file: {ref}")
    else:
        try:  # the top-level name: found without running any of its code
            found = importlib.util.find_spec(ref.partition(".")[0])
        except (ValueError, ImportError):  # an empty or relative name
            found = None
        if found is None:
            raise SetupError(_no_module(ref))
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        out_dir = os.path.abspath(out_dir)
    # Compile, never interpret: the examples turn the interpreter on by themselves on a machine without a GPU.
    env = {"TRITON_INTERPRET": "0"}
    if fast:  # ptxas without optimisation, as the tests compile: the linking is checked, not the launch's code
        env["DISABLE_PTXAS_OPT"] = "1"
    cache = None
    if not os.environ.get("TRITON_CACHE_DIR"):
        cache = env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="unishmem-compile-")
    try:
        ctx = multiprocessing.get_context("spawn")  # no fork of a parent that may hold threads or a GPU context
        with concurrent.futures.ProcessPoolExecutor(
            WORKERS, mp_context=ctx, initializer=_init_worker, initargs=(ref, env)
        ) as pool:
            # The pool starts a worker when none is idle (spawn context): one now, the second only when
            # there are two compiles to run. Each imports the module as it starts.
            jobs, problems = pool.submit(_discover).result()
            futures = [
                (job, target, pool.submit(_compile, job[0], job[1], target, out_dir))
                for job in jobs
                for target in targets
            ]
            results = []
            for (name, _index, label, shown), target, future in futures:
                try:
                    row = future.result()
                except concurrent.futures.process.BrokenProcessPool as e:  # the compiler crashed its process
                    row = _failed(target, f"the compiling process died ({e}): rerun this kernel alone to see why")
                results.append({"kernel": name, "label": label, **shown, **row})
    finally:
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    for name, why in problems.items():
        results.append(
            {"kernel": name, "label": name, "signature": {}, "constexprs": {}, "aligned": [], **_failed(None, why)}
        )
    if not results:
        raise SetupError(f"{ref} has no @unishmem.jit kernel")
    return {"module": ref, "targets": targets, "ok": all(r["ok"] for r in results), "results": results}


def format_report(report: dict) -> str:
    lines = []
    kernels = list(dict.fromkeys(r["label"] for r in report["results"]))
    n = len({r["kernel"] for r in report["results"]})
    lines.append(
        f"unishmem compile {report['module']}: {n} kernel{'s' if n > 1 else ''}"
        + (f" ({len(kernels)} specialisations)" if len(kernels) > n else "")
        + f", targets {', '.join(report['targets'])}"
    )
    for label in kernels:
        rows = [r for r in report["results"] if r["label"] == label]
        several = "#" in label  # then the signatures tell the specialisations apart too
        shown = ", ".join(
            ([f"{k}: {v}" for k, v in rows[0]["signature"].items()] if several else [])
            + [f"{k}={v}" for k, v in rows[0]["constexprs"].items()]
            + ([f"aligned: {' '.join(rows[0]['aligned']) or 'none'}"] if several else [])
        )
        lines.append(f"{label}" + (f"  ({shown})" if shown else ""))
        for r in rows:
            lines.append(f"  {r['target'] or '-':7s} {'ok' if r['ok'] else 'FAILED':7s}{_describe(r)}")
    notes = sorted({r["note"] for r in report["results"] if r["note"] and r["ok"]})
    lines += [f"note: {n}" for n in notes]  # once, not on every row it concerns
    failed = sum(not r["ok"] for r in report["results"])
    lines.append(f"{failed} of {len(report['results'])} failed" if failed else f"all {len(report['results'])} compiled")
    return "\n".join(lines)


def _describe(r: dict) -> str:
    from .backends import by_triton_backend

    if r["lacks"] is not None:
        return r["error"]  # the device library's message names the function and says why
    parts = []
    if r["binary_bytes"]:
        done = "linked" if r["linked"] else "compiled, not linked" if r["ok"] else "compiled"
        binary = by_triton_backend(TARGETS[r["target"]][0]).triton_binary  # a binary has its target
        parts.append(f"{done} ({binary} {r['binary_bytes']} B, {r['seconds']} s)")
    elif r["ok"] and not r["assembled"]:
        parts.append(f"lowered to LLVM IR, not assembled ({r['seconds']} s)")
    if r["unresolved"]:
        what = "left for module load" if r["ok"] else "unresolved"
        parts.append(f"{what}: {', '.join(r['unresolved'])}")
    if r["error"]:
        parts.append(_first_lines(r["error"]))
    return "; ".join(parts)


def _first_lines(text: str, n: int = 6) -> str:
    lines = text.strip().splitlines()
    return "\n          ".join(
        lines[:n] + ([f"... ({len(lines) - n} more lines; --json has them all)"] if len(lines) > n else [])
    )


def main(ref: str, target_text: str | None, as_json: bool, fast: bool, out_dir: str | None) -> int:
    """The command: 0 when every kernel compiled for every target, 1 when one failed, 2 on a setup error."""
    try:
        targets = parse_targets(target_text) if target_text is not None else list(DEFAULT_TARGETS)
        report = run(ref, targets, fast, out_dir)
    except SetupError as e:
        print(f"unishmem compile: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1) if as_json else format_report(report))
    return 0 if report["ok"] else 1
