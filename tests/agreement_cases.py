"""The calls of the agreement test (test_device_agreement.py): every device function of unishmem.language, once
with arguments it takes and once for each wrong kind of argument, each call a kernel of its own. The kernels
are written out as the source of one module (Triton reads a kernel's source), which the compile workers
import with TRITON_INTERPRET=0 and the interpreted job (programs/agreement_interpreted.py) with it set to 1.
What each call should do is not written here: the test asks only that both paths do the same."""

import importlib.util

from unishmem.language._table import ATOMICS, ROWS

PARAMS = ("buf", "ubuf", "fbuf", "sig", "ivar", "idx", "counter", "team", "rt_value")
_TYPES = {"buf": "*i32", "ubuf": "*u32", "fbuf": "*fp32", "sig": "*u64", "ivar": "*i64", "idx": "*i64"}
SIGNATURES = {
    "cuda": dict(_TYPES, counter="*i64", team="i32", rt_value="i32"),
    "hip": dict(_TYPES, counter="*i64", team="i64", rt_value="i32"),  # a rocSHMEM team is an address
}
# How the job allocates the buffers (elements, torch dtype name); every call stays inside them.
BUFFERS = {
    "buf": (64, "int32"),
    "ubuf": (64, "uint32"),
    "fbuf": (64, "float32"),
    "sig": (4, "uint64"),
    "ivar": (16, "int64"),
    "idx": (16, "int64"),
    "counter": (1, "int64"),
}
RUN_TIME_VALUE = 3  # rt_value: a scalar known at run time only

_DATA = ("dest", "source", "ptr", "ivars", "values")  # the pointers whose element type picks the vendor form
_CONSTANT_KINDS = {"cmp": "99", "sigop": "99", "redop": '"mean"'}


def _valid(fn: str, types, name: str, kind: str) -> str:
    """An argument the function takes, which returns at once on one PE (every wait's condition holds)."""
    if kind == "ptr":
        special = {"sig": "sig", "indices": "idx", "counter": "counter", "values": "ivar + 1"}
        if name in special:
            return special[name]
        if types == "wait" or name == "ivars" or fn in ATOMICS:
            return "ivar"
        return "buf + 16" if name == "source" else "buf"
    return {
        "size": "4",
        "pe": "0",
        "u64": "0",
        "val": "0",
        "cmp": "shl.CMP_GE",
        "sigop": "shl.SIGNAL_SET",
        "redop": '"sum"',
        "team": "team",
        "token": "rt_value",
    }[kind]


def _functions():
    """(name, parameters, whether its pointers may be blocks, its type table) of every device function."""
    for row in ROWS:
        yield row.name, [p for p in row.params if p[0] not in row.optional], row.blocks, row.types
    for name, (params, _) in ATOMICS.items():
        yield name, [(p, "ptr" if p == "dest" else "pe" if p == "pe" else "val") for p in params], False, "amo"
    yield "consume_token", [("x", "ptr"), ("token", "token")], True, None


def _retyped(args: dict, to: str, names=_DATA) -> dict:
    """The data pointers moved to buffer `to`, at the same offsets."""
    return {n: to + v[len(v.split()[0]) :] if n in names else v for n, v in args.items()}


def cases() -> list[tuple[str, str, str]]:
    """(function, what is wrong or "valid", the call's source) for every call of the test."""
    out = []
    for fn, params, _blocks, types in _functions():
        args = {n: _valid(fn, types, n, k) for n, k in params}
        variants = [("valid", args)]
        for n, k in params:
            if k in _CONSTANT_KINDS:
                variants.append((f"{n} a run-time value", {**args, n: "rt_value"}))
                variants.append((f"{n} a constant it does not take", {**args, n: _CONSTANT_KINDS[k]}))
                continue
            block = f"({args[n]} + tl.arange(0, 2))" if k == "ptr" else f"({args[n]} + tl.zeros([2], tl.int32))"
            variants.append((f"{n} a block", {**args, n: block}))
            if k == "ptr":
                variants.append((f"{n} not a pointer", {**args, n: "rt_value"}))
            if k == "token":
                variants.append((f"{n} None", {**args, n: "None"}))
        if types is not None:
            variants += [(f"data of {BUFFERS[b][1]}", _retyped(args, b)) for b in ("ubuf", "fbuf")]
            if "dest" in args and "source" in args:
                variants.append(("dest and source of two types", _retyped(args, "fbuf", ("source",))))
        if fn == "consume_token":
            descriptor = "tl.make_tensor_descriptor(buf, [64], [1], [16])"
            variants.append(("x a tensor descriptor", {**args, "x": descriptor}))
        out += [(fn, what, f"shl.{fn}({', '.join(a.values())})") for what, a in variants]
    return out


def source() -> str:
    """The module of the kernels k0, k1, ... (one per case, in the order of cases())."""
    lines = [
        "import os",
        "import triton",
        "import triton.language as tl",
        "import unishmem",
        "import unishmem.language as shl",
        'jit = unishmem.jit if os.environ.get("TRITON_INTERPRET") == "1" else triton.jit',
    ]
    for i, (fn, what, call) in enumerate(cases()):
        lines += ["", "", "@jit", f"def k{i}({', '.join(PARAMS)}):", f"    # {fn}: {what}", f"    {call}"]
    return "\n".join(lines) + "\n"


def load(path: str):
    spec = importlib.util.spec_from_file_location("agreement_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
