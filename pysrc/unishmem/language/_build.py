"""Turns the rows of _table.py into Triton builtins. Each generated function works two ways:

- compiled (Triton calls it with `_semantic`): it emits an extern call to the vendor symbol of the
  compile target, with this package's constants mapped to the vendor's numbering, and issues it
  from the threads the row says (see NOTE [execution rule]);
- interpreted (TRITON_INTERPRET=1 calls it with plain interpreter values): it runs the row's host
  implementation on the host backend.
"""
from __future__ import annotations

import inspect

import numpy as np
import triton.language as tl

from . import _host
from ._table import ATOMICS, ROWS, DeviceFn, Missing, Sym, Triton
from ._vendor import (CMP_VALUES, SCOPES, SIGNAL_VALUES, TEAM_TYPE, THREAD_ID, TYPE_TABLES, VENDOR_OF_BACKEND,
                      WARP_SIZE)

REDUCE_OPS = ("sum", "min", "max", "prod")
SIGNAL_NAMES = {0: "set", 1: "add"}
_BUILTIN = tl.core.TRITON_BUILTIN


def _constexpr(value, what: str):
    if isinstance(value, tl.constexpr):
        return value.value
    if isinstance(value, tl.tensor):
        raise ValueError(f"{what} must be a compile-time constant (tl.constexpr), such as shl.SIGNAL_SET "
                         f"or shl.CMP_EQ, not a run-time value")
    return value


# ---- compiled ---------------------------------------------------------------------------------

def _vendor(semantic) -> str:
    backend = getattr(semantic.builder.options, "backend_name", None)
    if backend not in VENDOR_OF_BACKEND:
        raise ValueError(f"unishmem.language compiles for CUDA (NVSHMEM) and HIP (rocSHMEM) targets, "
                         f"not {backend!r}")
    return VENDOR_OF_BACKEND[backend]


def _elem_type(fn_name: str, args: dict, params) -> tl.dtype | None:
    for name, kind in params:
        if kind == "ptr":
            ty = args[name].type.scalar
            if not ty.is_ptr():
                raise TypeError(f"{fn_name}: {name} must be a pointer, got {ty}")
            return ty.element_ty
    return None


def _type_name(fn: DeviceFn, vendor: str, elem) -> str:
    names = TYPE_TABLES[fn.types][vendor]
    if elem not in names:
        raise TypeError(f"{fn.name}: {vendor} has no form for {elem} (it has: "
                        f"{', '.join(str(t) for t in names)})")
    return names[elem]


_IR_TYPES = {"size": tl.int64, "pe": tl.int32, "u64": tl.uint64, "i32": tl.int32, "sigop": tl.int32,
             "cmp": tl.int32}


def _extern_arg(semantic, kind: str, value, elem, vendor: str, what: str):
    if kind == "ptr":
        return semantic.cast(value, tl.int64)
    if kind in ("sigop", "cmp"):
        table, names = (SIGNAL_VALUES, "SIGNAL_SET, SIGNAL_ADD") if kind == "sigop" else (CMP_VALUES, "CMP_*")
        constant = _constexpr(value, what)
        if constant not in table[vendor]:
            raise ValueError(f"{what}={constant!r} is not one of shl.{names}")
        return semantic.to_tensor(table[vendor][constant])
    if kind == "team":
        return _as(semantic, value, TEAM_TYPE[vendor])
    return _as(semantic, value, elem if kind == "val" else _IR_TYPES[kind])


def _as(semantic, value, ty: tl.dtype):
    """A run-time value or constant, as a scalar of type `ty`."""
    value = value.value if isinstance(value, tl.constexpr) else value
    return semantic.cast(semantic.to_tensor(value), ty)


def _result_type(result: str | None, elem):
    return {None: tl.int32, "i32": tl.int32, "u64": tl.uint64, "val": elem, "ptr": tl.int64}[result]


def _call(semantic, symbol: str, args: list, ret: tl.dtype, pure: bool = False):
    key = tuple(a.dtype for a in args)
    return tl.core.extern_elementwise("", "", args, {key: (symbol, ret)}, is_pure=pure, _semantic=semantic)


def _thread_id(semantic, vendor: str):
    how, what = THREAD_ID[vendor]
    if how == "asm":
        return tl.core.inline_asm_elementwise(what, "=r", [], dtype=tl.int32, is_pure=True, pack=1,
                                              _semantic=semantic)
    return semantic.cast(_call(semantic, what, [semantic.to_tensor(0)], tl.int64, pure=True), tl.int32)


def _issue(semantic, vendor: str, issue: str, emit):
    """NOTE [execution rule]: a call written once in a program takes effect once for it.
    Block-scope calls run on every thread; single-issue calls only on thread 0 (warp-scope ones
    on the first warp), inside an scf.if on the thread id; '_synced' ones also sit between block
    barriers, so the other threads see their effect."""
    if issue == "all":
        return emit()
    synced = issue.endswith("_synced")
    if synced:
        semantic.debug_barrier()
    limit = WARP_SIZE[vendor] if issue.startswith("warp") else 1
    warp_size = getattr(semantic.builder.options, "warp_size", None)
    if issue.startswith("warp") and warp_size:
        limit = warp_size
    cond = semantic.less_than(_thread_id(semantic, vendor), semantic.to_tensor(limit))
    builder = semantic.builder
    ip = builder.get_insertion_point()
    if_op = builder.create_if_op([], cond.handle, False)
    builder.set_insertion_point_to_start(if_op.get_then_block())
    emit()
    builder.restore_insertion_point(ip)
    if synced:
        semantic.debug_barrier()
    return None


def _symbol(fn: DeviceFn, sym: Sym, vendor: str, args: dict, elem) -> str:
    pre, suf = SCOPES[vendor][fn.scope]
    fields = {"pre": pre, "suf": suf}
    if "{T}" in sym.template:
        fields["T"] = _type_name(fn, vendor, elem)
    if "{op}" in sym.template:
        op = _constexpr(args["op"], f"{fn.name}: op")
        if op not in REDUCE_OPS:
            raise ValueError(f"{fn.name}: op={op!r} is not one of {', '.join(REDUCE_OPS)}")
        fields["op"] = op
    if "{sigop}" in sym.template:
        op = _constexpr(args["op"], f"{fn.name}: op")
        if op not in SIGNAL_NAMES:
            raise ValueError(f"{fn.name}: op={op!r} is not one of shl.SIGNAL_SET, SIGNAL_ADD")
        fields["sigop"] = SIGNAL_NAMES[op]
    return sym.template.format(**fields)


def _compiled(fn: DeviceFn, args: dict, semantic):
    vendor = _vendor(semantic)
    sym = fn.symbols[vendor]
    if isinstance(sym, Missing):
        raise ValueError(f"{fn.name} is not available when compiling for {vendor}: {sym.reason}")
    if isinstance(sym, Triton):  # the public shl.<name> is a dispatcher that never gets here for this vendor
        raise RuntimeError(f"{fn.name} is implemented in Triton for {vendor} (NOTE [triton rows]); call "
                           f"unishmem.language.{fn.name}, not the raw builtin")
    kinds = dict(fn.params)
    elem = _elem_type(fn.name, args, fn.params)

    def call(s: Sym):
        names = s.args or tuple(n for n, k in fn.params if k != "redop" and not ("{sigop}" in s.template and n == "op"))
        ext = [_extern_arg(semantic, s.arg_kinds.get(n, kinds[n]), args[n], elem, vendor, f"{fn.name}: {n}")
               for n in names]
        ret = tl.int32 if s.void or s.then else _result_type(fn.result, elem)
        return _call(semantic, _symbol(fn, s, vendor, args, elem), ext, ret)

    out = []

    def emit():
        value = call(sym)
        out.append(value if sym.then is None else call(sym.then))  # `then` gives the result (rocSHMEM waits)

    _issue(semantic, vendor, fn.issue, emit)
    if fn.result is None or not out:
        return None
    value = out[0]
    if fn.result == "ptr":
        value = semantic.cast(value, args[fn.params[0][0]].type.scalar)
    return value


# ---- interpreted ------------------------------------------------------------------------------

def _torch_dtype(ty: tl.dtype):
    import torch

    return getattr(torch, {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}.get(
        ty.name, ty.name))


def _py(value, kind: str, what: str):
    value = value.value if isinstance(value, tl.constexpr) else value
    if not isinstance(value, tl.tensor):
        if kind == "ptr":
            raise TypeError(f"{what} must be a pointer, got {value!r}")
        return value
    data = value.handle.data
    if data.size != 1:
        raise ValueError(f"{what} must be a scalar, got a block of shape {data.shape}")
    if kind == "ptr":
        if not value.dtype.is_ptr():
            raise TypeError(f"{what} must be a pointer, got {value.dtype}")
        elem = value.dtype.element_ty
        return _host.Ptr(int(data.reshape(-1)[0]), _torch_dtype(elem), elem.primitive_bitwidth // 8)
    return data.reshape(-1)[0].item()


def _tensor(value, ty: tl.dtype):
    from triton.runtime.interpreter import TensorHandle, _get_np_dtype

    np_dtype = _get_np_dtype(ty)
    if ty == tl.bfloat16:  # the interpreter keeps bfloat16 as its bit pattern
        import torch

        value = torch.tensor([value], dtype=torch.bfloat16).view(torch.uint16).item()
    return tl.tensor(TensorHandle(np.array([value], dtype=np_dtype), ty), ty)


def _explain_deadlock(e):
    from ..errors import DeadlockError
    from ..triton_support import current_program

    launch, idx = current_program()
    if launch is None or launch.n_programs <= launch.resident:
        return e
    return DeadlockError(
        f"{e}\nUnder TRITON_INTERPRET=1 at most {launch.resident} of the {launch.n_programs} programs of a launch "
        f"are resident at once on a PE (this wait is in program {idx}): a wait on work that a program not yet "
        "started would do cannot finish. Raise @unishmem.jit(resident=...) or UNISHMEM_INTERPRET_RESIDENT, "
        "or launch no more programs than stay resident (on a GPU too).")


def _interpreted(fn_name: str, host, params, result, args: dict):
    from ..errors import DeadlockError

    rt = _host._runtime()
    values = {n: _py(args[n], k, f"{fn_name}: {n}") for n, k in params}
    try:
        out = host(rt, **values)
    except DeadlockError as e:
        raise _explain_deadlock(e) from e
    if result is None:
        return None
    if result == "ptr":
        return _tensor(out, args[params[0][0]].dtype)
    elem = args[params[0][0]].dtype.element_ty if params and params[0][1] == "ptr" else None
    return _tensor(out, _result_type(result, elem) if result != "i32" else tl.int32)


# ---- generation -------------------------------------------------------------------------------

def _make(name: str, params, doc: str, compiled, interpreted):
    names = [n for n, _ in params]

    def fn(*args, _semantic=None, **kwargs):
        bound = dict(zip(names, args))
        bound.update(kwargs)
        if len(args) > len(names) or set(bound) != set(names):
            raise TypeError(f"{name}({', '.join(names)}) got {len(args)} positional and "
                            f"{sorted(kwargs)} keyword arguments")
        return interpreted(bound) if _semantic is None else compiled(bound, _semantic)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc or f"{name}({', '.join(names)})"
    fn.signature = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
        + [inspect.Parameter("_semantic", inspect.Parameter.KEYWORD_ONLY, default=None)])
    setattr(fn, _BUILTIN, True)  # Triton passes _semantic when compiling; the interpreter does not
    return fn


def device_function(row: DeviceFn):
    host = getattr(_host, row.host)
    return _make(row.name, row.params, row.doc,
                 lambda a, s: _compiled(row, a, s),
                 lambda a: _interpreted(row.name, host, row.params, row.result, a))


_ROW_OF = {row.name: row for row in ROWS}


def _uses_triton(name, _semantic=None):
    """NOTE [triton rows]: tl.constexpr(True) when the compile target's vendor implements row `name`
    with unishmem.language's Triton code (its table entry is Triton), else False; always False under
    TRITON_INTERPRET=1, where every row runs its host implementation. The dispatchers of
    _triton_impl.py branch on it at compile time."""
    name = _constexpr(name, "uses_triton: name")
    if name not in _ROW_OF:
        raise ValueError(f"uses_triton: {name!r} is not a row of the device table")
    if _semantic is None:
        return tl.constexpr(False)
    return tl.constexpr(isinstance(_ROW_OF[name].symbols[_vendor(_semantic)], Triton))


uses_triton = _uses_triton
uses_triton.signature = inspect.signature(_uses_triton)
setattr(uses_triton, _BUILTIN, True)


def _atomic_compiled(name: str, fetches: bool, args: dict, semantic):
    ptr = args["dest"]
    elem = ptr.type.scalar.element_ty
    if elem not in (tl.int32, tl.int64, tl.uint32, tl.uint64):
        raise TypeError(f"{name}: dest must point to int32, int64, uint32 or uint64, not {elem}")
    vendor = _vendor(semantic)
    pre, _ = SCOPES[vendor][""]
    raw = _call(semantic, pre + "ptr", [semantic.cast(ptr, tl.int64), _extern_arg(semantic, "pe", args["pe"], elem,
                                                                                  vendor, f"{name}: pe")], tl.int64)
    tl.core.device_assert(semantic.not_equal(raw, semantic.to_tensor(0)),
                          f"{name}: the destination PE is not reachable by load/store (remote_ptr is null); "
                          "unishmem atomics need a peer reachable through remote_ptr", _semantic=semantic)
    remote = semantic.cast(raw, ptr.type.scalar)
    one = _as(semantic, 1, elem)
    value = _as(semantic, args["value"], elem) if "value" in args else None
    op = name[len("atomic_"):]
    if op == "compare_swap":
        out = semantic.atomic_cas(remote, _as(semantic, args["cond"], elem), value, "acq_rel", "sys")
    elif op in ("set", "swap"):
        out = semantic.atomic_xchg(remote, value, None, "acq_rel", "sys")
    else:
        addend = {"fetch": _as(semantic, 0, elem), "fetch_inc": one, "inc": one}.get(op, value)
        out = semantic.atomic_add(remote, addend, None, "acq_rel", "sys")
    return out if fetches else None


def atomic_function(name: str):
    params, fetches = ATOMICS[name]
    kinds = tuple((p, "ptr" if p == "dest" else "pe" if p == "pe" else "val") for p in params)

    def interpreted(a):
        rt = _host._runtime()
        vals = {n: _py(a[n], k, f"{name}: {n}") for n, k in kinds}
        out = _host.atomic(rt, name, **vals)
        return _tensor(out, a["dest"].dtype.element_ty) if fetches else None

    return _make(name, kinds, f"{name}({', '.join(params)}) on a peer reachable by load/store.",
                 lambda a, s: _atomic_compiled(name, fetches, a, s), interpreted)
