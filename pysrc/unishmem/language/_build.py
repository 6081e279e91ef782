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

from .. import _interpreter, _triton_compat, enums
from .._wait_table import SIGNALS, WAIT_KINDS
from ..errors import NotAvailableError
from . import _debug, _host
from ._ir import as_scalar, branch, constexpr, extern_call, thread_id
from ._table import ATOMICS, NULL, ROWS, WORLD, DeviceFn, Missing, Sym, Triton
from ._vendor import (
    AMO_TYPES,
    CMP_VALUES,
    CONSUME_TOKEN_CONSTRAINTS,
    P_AS_BITS,
    SCOPES,
    SIGNAL_VALUES,
    TEAM_CONSTANT_REFUSED,
    TEAM_TYPE,
    TOKEN_CONSTRAINTS,
    TYPE_TABLES,
    VENDOR_OF_BACKEND,
    WARP_SIZE,
    WORLD_TEAM,
)

REDUCE_OPS = tuple(enums.REDUCE_OPS)
_ROW_INDEX = {row.name: i for i, row in enumerate(ROWS)}  # a wait's function in the debug table
SIGNAL_NAMES = {int(op): op.name.lower() for op in enums.SIGNAL}  # the vendors' symbols name them
BUILTIN = tl.core.TRITON_BUILTIN


def _not_a_block(fn_name: str, what: str, shape, where: str = "") -> ValueError:
    """Device functions take scalars; compiled, a block would silently become one call per element."""
    hint = " (wait on many words with wait_until_all/any/some)" if "wait" in fn_name or fn_name == "test" else ""
    shape = [int(getattr(d, "value", d)) for d in shape]
    return ValueError(f"{what} must be a scalar{where}, got a block of shape {shape}{hint}")


# ---- the argument rules, one set for both paths ------------------------------------------------

# NOTE [one rule set]: a device function checks its arguments here, before anything else, compiled and
# interpreted alike, from its table row: what is a scalar, a pointer or a compile-time constant, which
# constants a parameter takes, and which element types some vendor has a form for. A call the interpreter
# runs therefore compiles for some target, and one it refuses fails to compile with the same words. What
# only one target lacks (rocSHMEM's missing forms, a constant team there) is refused when compiling for it
# (NotAvailableError, or a ValueError naming the vendor): a property of the target, not of the call.
_CONSTANTS = {  # kind -> (the values it takes, how the refusal ends: in the host API's words)
    "cmp": (tuple(int(c) for c in enums.CMP), "is not a valid CMP"),
    "sigop": (tuple(int(op) for op in enums.SIGNAL), "is not a valid SIGNAL"),
    "redop": (REDUCE_OPS, "is not one of " + ", ".join(REDUCE_OPS)),
}


def _check_arguments(
    fn_name: str, params, args: dict, blocks: bool = False, optional=(), types: str | None = None
) -> None:
    for name, kind in params:
        value, what = args[name], f"{fn_name}: {name}"
        if value is None and name in optional:
            continue
        if kind in _CONSTANTS:
            allowed, refusal = _CONSTANTS[kind]
            constant = constexpr(value, what)
            if constant not in allowed:
                raise ValueError(f"{what}={constant!r} {refusal}")
            continue
        if _is_block(value) and not (blocks and kind in ("ptr", "val")):
            raise _not_a_block(fn_name, what, value.shape)
        if kind == "ptr" and not (isinstance(value, tl.tensor) and value.type.scalar.is_ptr()):
            raise TypeError(f"{what} must be a pointer, got {_kind(value)}")
        if kind == "val" and _is_block(value) and not _is_block(args[params[0][0]]):  # elementwise rows
            raise _not_a_block(fn_name, what, value.shape, f" where {params[0][0]} is a scalar")
    if types is not None:  # in the host API's words (rt.reduce, and the collectives' dest and source)
        elem = _elem_type(params, args)
        taken = {t: None for table in TYPE_TABLES[types].values() for t in table}
        if elem not in taken:
            supported = ", ".join(str(_torch_dtype(t)) for t in taken)
            raise TypeError(f"{fn_name}: dtype {_torch_dtype(elem)} is not supported (supported: {supported})")
        pair = [_torch_dtype(args[n].type.scalar.element_ty) for n in ("dest", "source") if n in args]
        if len(pair) == 2 and pair[0] != pair[1]:
            raise TypeError(f"{fn_name}: dest points to {pair[0]} but source to {pair[1]}")


def _is_block(value) -> bool:
    return isinstance(value, tl.tensor) and value.type.is_block()


def _check_row(row: DeviceFn, args: dict) -> None:
    _check_arguments(row.name, row.params, args, row.blocks, row.optional, row.types)


# ---- compiled ---------------------------------------------------------------------------------


def _vendor(semantic) -> str:
    backend = getattr(semantic.builder.options, "backend_name", None)
    if backend not in VENDOR_OF_BACKEND:
        raise ValueError(f"unishmem.language compiles for CUDA (NVSHMEM) and HIP (rocSHMEM) targets, not {backend!r}")
    return VENDOR_OF_BACKEND[backend]


def _elem_type(params, args: dict) -> tl.dtype | None:
    return next((args[n].type.scalar.element_ty for n, k in params if k == "ptr"), None)


def _type_name(fn: DeviceFn, vendor: str, elem) -> str:
    assert fn.types is not None, f"{fn.name}: its symbol has {{T}}, and its row names no type table"
    names = TYPE_TABLES[fn.types][vendor]
    if elem not in names:
        raise NotAvailableError(
            fn.name, vendor, f"{fn.name}: {vendor} has no form for {elem} (it has: {', '.join(str(t) for t in names)})"
        )
    return names[elem]


_IR_TYPES = {"size": tl.int64, "pe": tl.int32, "u64": tl.uint64, "i32": tl.int32, "sigop": tl.int32, "cmp": tl.int32}


def _extern_arg(semantic, kind: str, value, elem, vendor: str, what: str):
    if kind == "ptr":
        return semantic.cast(value, tl.int64)
    if kind in ("sigop", "cmp"):  # checked by _check_arguments
        table = SIGNAL_VALUES if kind == "sigop" else CMP_VALUES
        return semantic.to_tensor(table[vendor][constexpr(value, what)])
    if kind == "team":
        return _team_arg(semantic, value, vendor, what)
    return as_scalar(semantic, value, elem if kind == "val" else _IR_TYPES[kind])


def _team_arg(semantic, value, vendor: str, what: str):
    """A team handle as the vendor's handle type; a constant where that cannot be one is refused, naming it."""
    if not isinstance(value, tl.tensor) and TEAM_CONSTANT_REFUSED[vendor]:
        constant = value.value if isinstance(value, tl.constexpr) else value
        raise ValueError(
            f"{what}={constant!r} is a constant, which cannot be a team on {vendor}: "
            f"{TEAM_CONSTANT_REFUSED[vendor]}; pass team.handle (rt.team_world.handle for the world team) "
            "as a kernel argument"
        )
    return as_scalar(semantic, value, TEAM_TYPE[vendor])


def _result_type(result: str | None, elem):
    return {
        None: tl.int32,
        "i32": tl.int32,
        "i64": tl.int64,
        "u64": tl.uint64,
        "val": elem,
        "ptr": tl.int64,
        "token": tl.int64,
    }[result]


def _warp_size(semantic, vendor: str) -> int:
    """The compile target's warp width (HIP options say it), else the vendor's (_vendor.WARP_SIZE)."""
    return getattr(semantic.builder.options, "warp_size", None) or WARP_SIZE[vendor]


def _from_thread0(semantic, value, generator, vendor: str):
    """`value` as thread 0 holds it, on every thread of the program: a sum over one element per
    thread in which only thread 0's (element 0 of a blocked layout) is not zero."""
    n = semantic.builder.options.num_warps * _warp_size(semantic, vendor)
    index = semantic.arange(0, n)
    zero = semantic.to_tensor(0) if not value.dtype.is_floating() else semantic.to_tensor(0.0)
    spread = semantic.where(
        semantic.equal(index, semantic.to_tensor(0)),
        semantic.broadcast_impl_shape(value, [n]),
        semantic.broadcast_impl_shape(semantic.cast(zero, value.dtype), [n]),
    )
    return generator.call_JitFunction(tl.sum, [spread], {"axis": 0})


def _issue(semantic, vendor: str, issue: str, emit, ty=None, generator=None):
    """NOTE [execution rule]: a call written once in a program takes effect once for it.
    Block-scope calls run on every thread; single-issue calls only on thread 0 (warp-scope ones
    on the first warp), inside an scf.if on the thread id, and a value they return reaches every
    thread (_from_thread0). Those that read local memory ('_sends': puts of every scope) start
    with a block barrier, so they send what every thread of the program stored before the call;
    '_synced' ones sit between two block barriers, so the other threads also see their effect
    (blocking gets, quiet, barriers, waits on many words)."""
    if issue.startswith("all"):
        if issue.endswith("_sends"):
            semantic.debug_barrier()
        return emit()
    synced = issue.endswith("_synced")
    if synced or issue.endswith("_sends"):
        semantic.debug_barrier()
    limit = _warp_size(semantic, vendor) if issue.startswith("warp") else 1
    cond = semantic.less_than(thread_id(semantic, vendor), semantic.to_tensor(limit))
    value = branch(semantic, cond, emit, (lambda: semantic.to_tensor(0)) if ty else None, ty)
    if synced:
        semantic.debug_barrier()
    return None if ty is None else _from_thread0(semantic, value, generator, vendor)


def _symbol(fn: DeviceFn, sym: Sym, vendor: str, args: dict, elem) -> str:
    pre, suf = SCOPES[vendor][fn.scope]
    fields = {"pre": pre, "suf": suf}
    if "{T}" in sym.template:
        fields["T"] = _type_name(fn, vendor, elem)
    if "{op}" in sym.template:  # the ops were checked by _check_arguments
        fields["op"] = constexpr(args["op"], f"{fn.name}: op")
    if "{sigop}" in sym.template:
        fields["sigop"] = SIGNAL_NAMES[constexpr(args["op"], f"{fn.name}: op")]
    return sym.template.format(**fields)


def _compiled(fn: DeviceFn, args: dict, semantic, generator, triton_impl):
    _check_row(fn, args)
    vendor = _vendor(semantic)
    sym = fn.symbols[vendor]
    if isinstance(sym, Missing):
        raise NotAvailableError(
            fn.name, vendor, f"{fn.name} is not available when compiling for {vendor}: {sym.reason}"
        )
    if isinstance(sym, Triton):
        # the implementation reads a team as a tensor of the vendor's handle type, as the extern calls do
        impl_args = [
            _team_arg(semantic, args[n], vendor, f"{fn.name}: {n}") if k == "team" else args[n] for n, k in fn.params
        ]
        return generator.call_JitFunction(getattr(triton_impl, sym.impl), impl_args, {})
    kinds = dict(fn.params)
    elem = _elem_type(fn.params, args)
    if fn.name == "p" and elem in P_AS_BITS[vendor]:  # the value's bits, by an integer p
        bits = P_AS_BITS[vendor][elem]
        args = dict(args, value=semantic.bitcast(as_scalar(semantic, args["value"], elem), bits))
        elem = bits

    def call(s: Sym):
        names = s.args
        if names is None:
            names = tuple(n for n, k in fn.params if k != "redop" and not ("{sigop}" in s.template and n == "op"))
        ext = [
            as_scalar(semantic, 0, tl.int64)
            if n == NULL
            else as_scalar(semantic, WORLD_TEAM[vendor], TEAM_TYPE[vendor])
            if n == WORLD
            else _extern_arg(semantic, s.arg_kinds.get(n, kinds[n]), args[n], elem, vendor, f"{fn.name}: {n}")
            for n in names
        ]
        # a token is made after the call (_token): the call itself returns nothing
        ret = tl.int32 if s.void or s.then or fn.result == "token" else _result_type(fn.result, elem)
        return extern_call(semantic, _symbol(fn, s, vendor, args, elem), ext, ret)

    def emit():
        value = call(sym)
        return value if sym.then is None else call(sym.then)  # `then` gives the result (rocSHMEM waits)

    ty = None if fn.result in (None, "token") else _result_type(fn.result, elem)
    if _debug.enabled(semantic) and fn.name in WAIT_KINDS:  # NOTE [debug waits]
        value = _debug.around_wait(
            fn,
            _ROW_INDEX[fn.name],
            args,
            semantic,
            generator,
            vendor,
            lambda: _issue(semantic, vendor, fn.issue, emit, ty, generator),
        )
    else:
        value = _issue(semantic, vendor, fn.issue, emit, ty, generator)
    if fn.name in SIGNALS and _debug.enabled(semantic):
        _debug.after_signal(fn, args, semantic, vendor)
    if fn.result == "token":
        value = _token(semantic, vendor, args.get("nelems", 1))
    if fn.result == "ptr":
        value = semantic.cast(value, args[fn.params[0][0]].type.scalar)
    return value


# ---- interpreted ------------------------------------------------------------------------------


def _torch_dtype(ty: tl.dtype):
    import torch

    return getattr(
        torch, {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}.get(ty.name, ty.name)
    )


def _py(value, kind: str):
    """An interpreter value, checked (_check_arguments), as the host implementations take it (a block's
    pointers as an array)."""
    value = value.value if isinstance(value, tl.constexpr) else value
    if not isinstance(value, tl.tensor):
        return value
    data = value.handle.data
    if kind == "ptr":
        elem = value.dtype.scalar.element_ty
        addr = data.astype(np.uint64) if value.type.is_block() else int(data.reshape(-1)[0])
        return _host.Ptr(addr, _torch_dtype(elem), elem.primitive_bitwidth // 8)
    return data.reshape(-1)[0].item()


def _tensor(value, ty: tl.dtype):
    """A host result as an interpreter value: a scalar, or a block from an array (remote_ptr)."""
    from triton.runtime.interpreter import TensorHandle, _get_np_dtype

    if isinstance(value, np.ndarray):
        block = tl.block_type(ty, list(value.shape))
        return tl.tensor(TensorHandle(value.astype(_get_np_dtype(ty)), ty), block)
    np_dtype = _get_np_dtype(ty)
    if ty == tl.bfloat16:  # the interpreter keeps bfloat16 as its bit pattern
        import torch

        value = torch.tensor([value], dtype=torch.bfloat16).view(torch.uint16).item()
    return tl.tensor(TensorHandle(np.array([value], dtype=np_dtype), ty), ty)


def _explain_deadlock(e):
    from ..errors import DeadlockError

    launch, idx = _interpreter.current_program()
    if launch is None or launch.n_programs <= launch.resident:
        return e
    explained = DeadlockError(
        f"{e}\nUnder TRITON_INTERPRET=1 at most {launch.resident} of the {launch.n_programs} programs of a launch "
        f"are resident at once on a PE (this wait is in program {idx}): a wait on work that a program not yet "
        "started would do cannot finish. Raise @unishmem.jit(resident=...) or UNISHMEM_INTERPRET_RESIDENT, "
        "or launch no more programs than stay resident (on a GPU too)."
    )
    explained.report = getattr(e, "report", None)
    return explained


def _interpreted(row: DeviceFn, host, args: dict):
    from ..errors import DeadlockError

    fn_name, params, result = row.name, row.params, row.result
    _check_row(row, args)
    core = _host._core()
    if row.once_per_grid:
        _interpreter.claim_collective(fn_name)
    values = {n: _py(args[n], k) for n, k in params}
    try:
        out = host(core, **values)
    except DeadlockError as e:
        raise _explain_deadlock(e) from e
    if result is None:
        return None
    if result == "ptr":
        return _tensor(out, args[params[0][0]].dtype.scalar)
    elem = args[params[0][0]].dtype.element_ty if params and params[0][1] == "ptr" else None
    return _tensor(out, _result_type(result, elem))


# ---- generation -------------------------------------------------------------------------------


def _make(name: str, params, doc: str, compiled, interpreted, optional=()):
    names = [n for n, _ in params]

    def fn(*args, _semantic=None, _generator=None, **kwargs):
        bound = dict.fromkeys(optional)
        bound.update(zip(names, args))
        bound.update(kwargs)
        if len(args) > len(names) or set(bound) != set(names):
            raise TypeError(
                f"{name}({', '.join(names)}) got {len(args)} positional and {sorted(kwargs)} keyword arguments"
            )
        if _semantic is not None:
            return compiled(bound, _semantic, _generator)
        _interpreter.schedule_point()  # NOTE [schedule fuzzing]
        return interpreted(bound)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc or f"{name}({', '.join(names)})"
    fn.signature = inspect.Signature(  # type: ignore[attr-defined]  # Triton reads a builtin's signature there
        [
            inspect.Parameter(
                n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None if n in optional else inspect.Parameter.empty
            )
            for n in names
        ]
        + [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, default=None) for p in ("_semantic", "_generator")]
    )
    setattr(fn, BUILTIN, True)  # Triton passes _semantic when compiling; the interpreter does not
    return fn


def implemented_in_triton(row: DeviceFn) -> bool:
    """Whether some vendor's form of the row is written in Triton (NOTE [Triton implementations])."""
    return any(isinstance(sym, Triton) for sym in row.symbols.values())


def device_function(row: DeviceFn, triton_impl=None):
    """The builtin for `row`; `triton_impl`: the module of the Triton implementations, for a row
    that has one (language/__init__.py passes _triton_impl, which is written over the others)."""
    if implemented_in_triton(row) and triton_impl is None:
        raise TypeError(f"{row.name} is written in Triton on some vendor: pass its implementations")
    if row.host:
        host = getattr(_host, row.host)
        interpreted = lambda a: _interpreted(row, host, a)  # noqa: E731
    else:  # the row's Triton implementation, interpreted too
        impl = getattr(triton_impl, row.symbols["nvshmem"].impl)

        def interpreted(a):
            _check_row(row, a)
            return impl(*(a[n] for n, _ in row.params))

    compiled = lambda a, s, g: _compiled(row, a, s, g, triton_impl)  # noqa: E731
    return _make(row.name, row.params, row.doc, compiled, interpreted, row.optional)


def _atomic_compiled(name: str, fetches: bool, args: dict, semantic, generator):
    """NOTE [atomics]: on a peer reachable by load/store (remote_ptr not null) Triton's own atomic
    on the peer's address, which Triton issues once per program and whose result it gives every
    thread; on any other peer the vendor's AMO, issued by thread 0 (NOTE [execution rule])."""
    _check_atomic(name, args)
    ptr = args["dest"]
    elem = ptr.type.scalar.element_ty
    vendor = _vendor(semantic)
    pre, _ = SCOPES[vendor][""]
    pe = _extern_arg(semantic, "pe", args["pe"], elem, vendor, f"{name}: pe")
    raw = extern_call(semantic, pre + "ptr", [semantic.cast(ptr, tl.int64), pe], tl.int64)
    value = as_scalar(semantic, args["value"], elem) if "value" in args else None
    op = name[len("atomic_") :]
    ty = elem if fetches else None

    def direct():
        remote = semantic.cast(raw, ptr.type.scalar)
        one = as_scalar(semantic, 1, elem)
        if op == "compare_swap":
            return semantic.atomic_cas(remote, as_scalar(semantic, args["cond"], elem), value, "acq_rel", "sys")
        if op in ("set", "swap"):
            return semantic.atomic_xchg(remote, value, None, "acq_rel", "sys")
        addend = {"fetch": as_scalar(semantic, 0, elem), "fetch_inc": one, "inc": one}.get(op, value)
        return semantic.atomic_add(remote, addend, None, "acq_rel", "sys")

    def vendor_amo():
        ext = [semantic.cast(ptr, tl.int64)] + [
            as_scalar(semantic, args[n], elem) for n in ("cond", "value") if n in args
        ]
        symbol = f"{pre}{AMO_TYPES[elem]}_atomic_{op}"
        return _issue(
            semantic, vendor, "one", lambda: extern_call(semantic, symbol, ext + [pe], ty or tl.int32), ty, generator
        )

    return branch(semantic, semantic.not_equal(raw, semantic.to_tensor(0)), direct, vendor_amo, ty)


def _atomic_kinds(name: str) -> tuple:
    return tuple((p, "ptr" if p == "dest" else "pe" if p == "pe" else "val") for p in ATOMICS[name][0])


def _check_atomic(name: str, args: dict) -> None:
    """An atomic's argument rules (NOTE [one rule set]): scalars, and dest a pointer to a type every vendor's
    AMOs take."""
    _check_arguments(name, _atomic_kinds(name), args)
    elem = args["dest"].type.scalar.element_ty
    if elem not in AMO_TYPES:
        raise TypeError(f"{name}: dest must point to int32, int64, uint32 or uint64, not {elem}")


def atomic_function(name: str):
    params, fetches = ATOMICS[name]
    kinds = _atomic_kinds(name)

    def interpreted(a):
        _check_atomic(name, a)
        core = _host._core()
        vals = {n: _py(a[n], k) for n, k in kinds}
        out = _host.atomic(core, name, **vals)
        return _tensor(out, a["dest"].dtype.element_ty) if fetches else None

    return _make(
        name,
        kinds,
        f"{name}({', '.join(params)}): an atomic on PE pe's dest (NOTE [atomics]).",
        lambda a, s, g: _atomic_compiled(name, fetches, a, s, g),
        interpreted,
    )


def _token(semantic, vendor: str, value):
    """`value`, made by an inline asm with side effects, so after every call before it (a wait that returns
    nothing): what consume_token takes as its token."""
    return tl.core.inline_asm_elementwise(
        "",
        TOKEN_CONSTRAINTS[vendor],
        [as_scalar(semantic, value, tl.int64)],
        dtype=tl.int64,
        is_pure=False,
        pack=1,
        _semantic=semantic,
    )


def _check_consume_token(x, token) -> None:
    """consume_token's argument rules, the same compiled and interpreted (and the same words: what is named
    is the kind of value, which both paths see alike)."""
    ty = getattr(x.type, "scalar", None) if isinstance(x, tl.tensor) else None
    if not isinstance(x, tl.core.tensor_descriptor) and (ty is None or not (ty.is_ptr() or ty.is_int())):
        raise TypeError(
            "consume_token: x must be a pointer or an integer (a block of them is fine) or a tensor descriptor "
            f"made with its shape, not {_kind(x)}"
        )
    if not isinstance(token, tl.tensor) or token.type.is_block():
        raise ValueError(
            f"consume_token: token must be a scalar run-time value, such as what a wait returned, not {_kind(token)}"
        )


def _kind(value) -> str:
    value = value.value if isinstance(value, tl.constexpr) else value
    if value is None:
        return "None"
    if isinstance(value, tl.core.tensor_descriptor_base):
        return "a tensor descriptor of unknown shape"
    if isinstance(value, tl.tensor):
        return f"a block of shape {list(value.shape)}" if value.type.is_block() else str(value.type)
    return f"a constant ({type(value).__name__})"


def _tie(x, token, semantic):
    """`x` (a pointer or integer, or a block of them) unchanged, but computed from `token` too. A pointer
    gets a zero offset made from the token, as a multiple of 16 elements: what Triton knows of its
    alignment and contiguity stays (through the asm itself the pointer would lose it, and 16-byte
    accesses would become one element each)."""
    x = semantic.to_tensor(x.value if isinstance(x, tl.constexpr) else x)
    if x.type.scalar.is_ptr():
        zero = _tied_value(semantic.to_tensor(0), token, semantic)
        return semantic.add(x, semantic.mul(zero, 16, False), False)
    return semantic.cast(_tied_value(x, token, semantic), x.type.scalar)


def _tied_value(x, token, semantic):
    """x as int64, through an asm that also takes token: the compiler must compute token first."""
    return tl.core.inline_asm_elementwise(
        "",
        CONSUME_TOKEN_CONSTRAINTS[_vendor(semantic)],
        [semantic.cast(x, tl.int64), semantic.cast(token, tl.int64)],
        dtype=tl.int64,
        is_pure=True,
        pack=1,
        _semantic=semantic,
    )


class _TokenedDescriptorType(tl.core.tensor_descriptor_type):
    """The type of what consume_token makes of a tensor descriptor: the descriptor and its token, so the tie
    crosses calls of other @triton.jit functions and loops with it."""

    def __init__(self, base: tl.core.tensor_descriptor_type):
        super().__init__(base.block_type, base.shape_type, base.strides_type)

    def _unflatten_ir(self, handles, cursor: int):
        desc, cursor = super()._unflatten_ir(handles, cursor)
        return _TokenedDescriptor(desc, tl.tensor(handles[cursor], tl.int64)), cursor + 1

    def _flatten_ir_types(self, builder, out) -> None:
        super()._flatten_ir_types(builder, out)
        out.append(tl.int64.to_ir(builder))

    def mangle(self) -> str:
        return "TK" + super().mangle()


class _TokenedDescriptor(tl.core.tensor_descriptor):
    """A tensor descriptor whose loads take their offsets through consume_token, so that none is issued
    before the wait that made the token (its stores and atomics cannot move above a wait anyway)."""

    def __init__(self, desc: tl.core.tensor_descriptor, token):
        super().__init__(desc.handle, list(desc.shape), list(desc.strides), desc.block_type)
        self.type: _TokenedDescriptorType = _TokenedDescriptorType(self.type)
        self.token = token

    def _flatten_ir(self, handles) -> None:
        super()._flatten_ir(handles)
        handles.append(self.token.handle)

    @tl.core.builtin
    def load(self, offsets, _semantic=None):
        return super().load([_tie(o, self.token, _semantic) for o in offsets], _semantic=_semantic)

    @tl.core.builtin
    def gather(self, *args, _semantic=None):
        return super().gather(*(_tie(a, self.token, _semantic) for a in args), _semantic=_semantic)


def _consume_token_compiled(args: dict, semantic, generator):
    x, token = args["x"], args["token"]
    _check_consume_token(x, token)
    token = semantic.cast(token, tl.int64)
    if isinstance(x, tl.core.tensor_descriptor):
        return _TokenedDescriptor(x, token)
    return _tie(x, token, semantic)


def _consume_token_interpreted(args: dict):
    _check_consume_token(args["x"], args["token"])
    return args["x"]  # the interpreter runs in program order: nothing can be hoisted


consume_token = _make(
    "consume_token",
    (("x", "ptr"), ("token", "u64")),
    "`x` unchanged, made data-dependent on `token` (a value a wait returned), so that loads "
    "addressed by `x` cannot be issued before the wait (Triton's pipeliner would otherwise "
    "move them above it). `x` may be a tensor descriptor: its loads and gathers then take their "
    "offsets through the token.",
    _consume_token_compiled,
    lambda a: _consume_token_interpreted(a),
)


# What makes a tl.load volatile on the compile target (NOTE [Triton releases]): Triton implementations pass
# it as the load's cache_modifier; the interpreter has no caches.
volatile_modifier = _make(
    "volatile_modifier",
    (),
    "The cache_modifier that, with volatile=True, makes tl.load read memory on every call for this target.",
    lambda a, s, g: tl.constexpr(_triton_compat.volatile_cache_modifier(_vendor(s) == "rocshmem")),
    lambda a: tl.constexpr(""),
)


def _watch_spin_interpreted(args: dict):
    ptr, value = args["ptr"], args["value"]
    if not ptr.type.is_block():  # a spin reads one word (NOTE [spins])
        _host.watch_spin(_host._core(), int(ptr.handle.data.reshape(-1)[0]), value.handle.data.reshape(-1)[0].item())
    return value


watch_spin = _make(
    "watch_spin",
    (("ptr", "ptr"), ("value", "val")),
    "`value`, read from `ptr`: under TRITON_INTERPRET=1 a read the program repeats unchanged is watched as a "
    "wait is (NOTE [spins] in _host.py); compiled, `value` itself.",
    lambda a, s, g: a["value"],
    _watch_spin_interpreted,
)


def _device_check_interpreted(args: dict):
    # Triton's interpreter drops tl.device_assert (its options never turn debug on, TRITON_DEBUG=1
    # included), and a load through the null pointer the check is about ends the PE with SIGSEGV.
    cond = args["cond"]
    if not np.all(cond.handle.data if isinstance(cond, tl.tensor) else cond):
        raise ValueError(constexpr(args["msg"], "device_check: msg"))


device_check = _make(
    "device_check",
    (("cond", "val"), ("msg", "str")),
    "tl.device_assert(cond, msg) when compiled (it checks under TRITON_DEBUG=1 only); under "
    "TRITON_INTERPRET=1 it always checks, and raises ValueError(msg) where cond is false.",
    lambda a, s, g: tl.device_assert(a["cond"], a["msg"], _semantic=s),
    _device_check_interpreted,
)
