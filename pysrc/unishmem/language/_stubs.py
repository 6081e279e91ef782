"""Writes language/__init__.pyi and language/_externs.pyi: the device functions are made at import from
_table.py, so type checkers, editors and grep find no definition of them without these; and the guide's
device-function reference (docs/device-functions.md), from the same rows.

    python -m unishmem.language._stubs           # print the package's stub
    python -m unishmem.language._stubs --write   # write all three
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import triton.language as tl

from .. import language
from ._build import consume_token, implemented_in_triton
from ._table import ATOMICS, ROWS, Sym, Triton
from ._vendor import SCOPES

COMMAND = "python -m unishmem.language._stubs --write"
PATH = Path(__file__).with_name("__init__.pyi")
EXTERNS_PATH = Path(__file__).with_name("_externs.pyi")
REFERENCE_PATH = Path(__file__).resolve().parents[3] / "docs" / "device-functions.md"

# no module docstring: editors would show it in place of __init__.py's
HEADER = f"""# Generated from language/_table.py by `{COMMAND}`: do not edit.

from typing import Any

import triton.language as tl

from ._build import atomic_function as atomic_function
from ._build import device_function as device_function
{{externs}}from ._table import ATOMICS as ATOMICS
from ._table import ROWS as ROWS

FUNCTIONS: list[str]
"""


def _def(name: str, params, returns: bool, doc: str) -> str:
    """One stub function; params: (name, optional). Arguments are Any: kernels pass tensors,
    pointers, Python ints and constexprs, and Triton ships no types for them anyway."""
    args = ", ".join(f"{n}: Any = None" if optional else f"{n}: Any" for n, optional in params)
    result = "tl.tensor" if returns else "None"
    head = f"def {name}({args}) -> {result}:"
    if len(head) > 120:  # one parameter a line, with a trailing comma: the formatter keeps that
        head = f"def {name}(" + "".join(f"\n    {a}," for a in args.split(", ")) + f"\n) -> {result}:"
    if not doc:
        return head + " ...\n"
    assert '"""' not in doc and "\\" not in doc, f"{name}: its doc cannot be a plain docstring"
    body = textwrap.fill(" ".join(doc.split()), width=112, initial_indent='    """', subsequent_indent="    ")
    return f'{head}\n{body}"""\n\n'  # the formatter's stub style: a blank line after a body only


def _row_def(r) -> str:
    return _def(r.name, [(n, n in r.optional) for n, _ in r.params], r.result is not None, r.doc)


def externs_stub() -> str:
    """_externs.pyi: the rows every vendor provides, which _triton_impl.py is written over."""
    head = f"# Generated from language/_table.py by `{COMMAND}`: do not edit.\n\nfrom typing import Any\n\n"
    head += "import triton.language as tl\n\n"
    return head + "".join(_row_def(r) for r in ROWS if not implemented_in_triton(r)).rstrip() + "\n"


def stub() -> str:
    """__init__.pyi: the vendors' own functions re-exported from _externs.pyi, the others defined here."""
    names = sorted(r.name for r in ROWS if not implemented_in_triton(r))
    externs = "".join(f"from ._externs import {name} as {name}\n" for name in names)
    defs = [_row_def(r) for r in ROWS if implemented_in_triton(r)]
    for name, (params, fetches) in ATOMICS.items():
        defs.append(_def(name, [(n, False) for n in params], fetches, getattr(language, name).__doc__))
    # not a row: its parameters are those Triton binds (without the _semantic/_generator it adds)
    token = [(n, p.default is None) for n, p in consume_token.signature.parameters.items() if not n.startswith("_")]
    defs.append(_def("consume_token", token, True, consume_token.__doc__))
    constants = [name for name in language.__all__ if name not in language.FUNCTIONS]
    for name in constants:
        if not isinstance(getattr(language, name), tl.constexpr):
            raise TypeError(f"unishmem.language.{name} is not a constexpr: teach _stubs.py its type")
    # __all__ too, so that a star import takes what it takes at run time (not ROWS, device_function...)
    exports = "__all__ = [\n" + "".join(f'    "{name}",\n' for name in language.__all__) + "]\n\n"
    constants_text = "".join(f"{name}: tl.constexpr\n" for name in constants)
    return HEADER.replace("{externs}", externs) + constants_text + "\n" + exports + "".join(defs).rstrip() + "\n"


# ---- the reference page ------------------------------------------------------------------------

_RESULTS = {
    None: "nothing",
    "i32": "int32",
    "i64": "int64",
    "u64": "uint64",
    "val": "the element type",
    "ptr": "a pointer of the first one's type",
    "token": "int64: the words waited on, a token",
}
_ISSUERS = {"all": "every thread", "one": "thread 0", "warp": "the first warp"}
_WHEN = {"": "", "sends": ", after a block barrier", "synced": ", between two block barriers"}
_VENDORS = {"nvshmem": "NVSHMEM", "rocshmem": "rocSHMEM"}
# What holds when a call returns, by its host implementation (the kind of call), in the words of
# docs/ordering.md's "What orders what"; the _nbi forms and the rows written in Triton by name.
_PUT = "source reusable; delivery ordered by fence(), complete at quiet()"
_ORDERING = {
    "put": _PUT,
    "put_elems": _PUT,
    "iput": _PUT,
    "p": _PUT,
    "put_tile_block": "complete for the source; delivery ordered by fence(), complete at quiet()",
    "get": "data in dest",
    "get_elems": "data in dest",
    "iget": "data in dest",
    "g": "the value read",
    "put_signal": "the signal means this data arrived; orders nothing else",
    "put_signal_elems": "the signal means this data arrived; orders nothing else",
    "signal_op": "issued; earlier stores and puts to the PE are ordered before it only by fence() or quiet()",
    "store_remote": "issued, not delivered: fence() before a signal that announces it",
    "load_remote": "the value read; orders nothing after it",
    "fence": "this PE's earlier puts, stores and AMOs to each PE are delivered before its later ones to it",
    "quiet": "everything this PE issued is complete and visible",
    "quiet_pe": "everything this PE issued is complete and visible",
    "barrier_all": "quiet(), then every PE arrived",
    "barrier": "quiet(), then every member arrived",
    "barrier_all_grid": "every program of the launch and every PE arrived",
    "sync_all": "every PE arrived; puts not completed",
    "sync": "every member arrived; puts not completed",
    "signal_wait_until": "the word compared true; an acquire on both vendors",
    "wait_until": "the word compared true; an acquire on NVSHMEM, not on rocSHMEM",
    "test": "the word read once; no acquire on rocSHMEM",
    "signal_fetch": "the value read",
}
_NBI_PUT = "may still read the source until quiet()"
_NBI_GET = "data in dest only after quiet()"


def _ordering(row) -> str:
    if row.name.startswith("wait_until_"):
        return "the words compared true; an acquire on NVSHMEM, not on rocSHMEM"
    if "_nbi" in row.name and row.host in ("get", "get_elems"):
        return _NBI_GET
    if "_nbi" in row.name and row.host in ("put", "put_elems"):
        return _NBI_PUT
    if row.host in ("broadcast", "fcollect", "alltoall", "reduce"):
        return "complete in dest on every member"
    return _ORDERING.get(row.host or row.name, "")


def _issued(issue: str) -> str:
    who, _, when = issue.partition("_")
    return _ISSUERS[who] + _WHEN[when]


def _symbol(sym, vendor: str, scope: str) -> str:
    if isinstance(sym, Triton):
        return f"Triton (`{sym.impl}`)"
    if not isinstance(sym, Sym):
        return f"missing: {sym.reason}"
    pre, suf = SCOPES[vendor][scope]
    name = sym.template.replace("{pre}", pre).replace("{suf}", suf)
    for field, shown in (("{T}", "<T>"), ("{op}", "<op>"), ("{sigop}", "<sigop>")):
        name = name.replace(field, shown)
    return f"`{name}`" + ("" if sym.then is None else ", then " + _symbol(sym.then, vendor, scope))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def reference() -> str:
    """docs/device-functions.md: one row per device function, from the table."""
    lines = [
        "# Device function reference",
        "",
        f"<!-- generated from pysrc/unishmem/language/_table.py by `{COMMAND}`: do not edit -->",
        "",
        "Every function of `unishmem.language`, as its table row defines it: its arguments (those in brackets",
        "may be left out), what it returns, which threads of a program issue it when compiled ([the execution",
        "rule](device-library.md) of the Triton device library), and what it compiles to for each vendor: the",
        "vendor's function (`<T>`: the element type's name in the vendor's table; `<op>`: the reduction;",
        "`<sigop>`: the signal operation) or unishmem's implementation in Triton. Under `TRITON_INTERPRET=1`",
        "each runs on the host backend with the same argument checks, and synchronously: a put or a get is",
        "done when it returns, a wait blocks the program's thread (a wait that can never end is reported).",
        'Functions whose pointers may be blocks act element by element. "On return" is what holds when the',
        "call returns on a GPU ([what orders what](ordering.md#what-orders-what), per vendor).",
        "",
        "| function | returns | issued by | NVSHMEM | rocSHMEM | on return | what it does |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in ROWS:
        args = ", ".join(f"[{n}]" if n in r.optional else n for n, _ in r.params)
        cells = [f"`{r.name}({args})`", _RESULTS[r.result], _issued(r.issue)]
        cells += [_symbol(r.symbols[v], v, r.scope) for v in _VENDORS]
        cells.append(_ordering(r))
        cells.append(_cell(r.doc) + (" Pointers may be blocks." if r.blocks else ""))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Atomics",
        "",
        "On a peer reachable by load/store, Triton's own atomic on the peer's address (acquire-release, system",
        "scope), issued once per program; on any other peer the vendor's atomic, issued by thread 0. Either way",
        "every thread gets the fetched value.",
        "",
        "| function | returns |",
        "|---|---|",
    ]
    for name, (params, fetches) in ATOMICS.items():
        lines.append(f"| `{name}({', '.join(params)})` | {'the old value' if fetches else 'nothing'} |")
    lines += ["", "## consume_token", "", _cell(consume_token.__doc__), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        PATH.write_text(stub())
        EXTERNS_PATH.write_text(externs_stub())
        REFERENCE_PATH.write_text(reference())
        print(f"wrote {PATH}, {EXTERNS_PATH} and {REFERENCE_PATH}")
    elif sys.argv[1:]:
        sys.exit("usage: python -m unishmem.language._stubs [--write]")
    else:
        sys.stdout.write(stub())
